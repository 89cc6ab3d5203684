"""Training machinery: the optimizer step and evaluation (`Trainer`), and the end-to-end
streaming run (`hstu_model.training.run`, imported on its own: it needs yambda-data and
mlperf-compliance, the `train` extra of this package)."""

from hstu_model.training.trainer import Batch, EvalResult, Trainer, seed_everything

__all__ = ["Batch", "EvalResult", "Trainer", "seed_everything"]
