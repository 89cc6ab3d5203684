"""Yambda data for DLRMv4: the public schema, a synthetic generator, the temporal split,
out-of-core preprocessing (:mod:`yambda_data.preprocess`; its function is not re-exported
here, so the submodule stays importable by name), in-memory samples and (in
:mod:`yambda_data.batching`, which needs torch) TorchRec batches.

Importing this package does not import torch.
"""

from .dataset import DLRMv4Samples, load_dlrmv4_samples
from .samples import (
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
    build_samples,
    compute_vocab_sizes,
)
from .schema import (
    EVENT_TYPE_CODES,
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
    MultiEventSummary,
    SchemaError,
    read_mapping,
    read_multi_event,
    validate_mapping,
    validate_multi_event,
)
from .split import SplitMeta, SplitResult, temporal_split
from .synth import SynthConfig, SynthData, SynthPaths, generate, synthesize

__version__ = "0.1.0"

__all__ = [
    "EVENT_TYPES",
    "EVENT_TYPE_CODES",
    "EVENT_TYPE_DTYPE",
    "MULTI_EVENT_SCHEMA",
    "DLRMv4Samples",
    "ItemFeatures",
    "MultiEventSummary",
    "SampleConfig",
    "Samples",
    "SchemaError",
    "SplitMeta",
    "SplitResult",
    "SynthConfig",
    "SynthData",
    "SynthPaths",
    "VocabSizes",
    "__version__",
    "build_samples",
    "compute_vocab_sizes",
    "generate",
    "load_dlrmv4_samples",
    "read_mapping",
    "read_multi_event",
    "synthesize",
    "temporal_split",
    "validate_mapping",
    "validate_multi_event",
]
