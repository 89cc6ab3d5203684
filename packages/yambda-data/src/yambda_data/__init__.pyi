"""The public names of :mod:`yambda_data` and the modules they live in: read by type
checkers, and by ``__init__.py`` to import each module on the first use of one of its
names."""

from yambda_data._io import InputFileError, ReadError, WriteError
from yambda_data._readers import DataInUse, hold_data
from yambda_data.crosses import CROSS_FEATURE_NAMES, CROSS_FEATURES, CrossFeature, cross_features
from yambda_data.dataset import (
    DLRMv4Samples,
    check_prepare_outputs,
    load_dlrmv4_samples,
    prepare_preprocessed,
    prepare_store,
)
from yambda_data.samples import (
    HISTORY_STRATEGIES,
    ItemFeatures,
    SampleConfig,
    Samples,
    VocabSizes,
    build_samples,
    compute_vocab_sizes,
)
from yambda_data.schema import (
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
from yambda_data.split import (
    SplitMeta,
    SplitResult,
    WindowTooSmall,
    busiest_window_listens,
    temporal_split,
)
from yambda_data.store import SampleStore, StoreError, build_store, hold_store
from yambda_data.streaming import TEST, BatchPlan, holdout_users
from yambda_data.synth import (
    SynthConfig,
    SynthData,
    SynthPaths,
    check_synthesis_root,
    generate,
    synthesize,
    synthesize_cached,
    yambda_shape,
)

__version__: str

__all__ = [
    "CROSS_FEATURES",
    "CROSS_FEATURE_NAMES",
    "EVENT_TYPES",
    "EVENT_TYPE_CODES",
    "EVENT_TYPE_DTYPE",
    "HISTORY_STRATEGIES",
    "MULTI_EVENT_SCHEMA",
    "TEST",
    "BatchPlan",
    "CrossFeature",
    "DLRMv4Samples",
    "DataInUse",
    "InputFileError",
    "ItemFeatures",
    "MultiEventSummary",
    "ReadError",
    "SampleConfig",
    "SampleStore",
    "Samples",
    "SchemaError",
    "SplitMeta",
    "SplitResult",
    "StoreError",
    "SynthConfig",
    "SynthData",
    "SynthPaths",
    "VocabSizes",
    "WindowTooSmall",
    "WriteError",
    "__version__",
    "build_samples",
    "build_store",
    "busiest_window_listens",
    "check_prepare_outputs",
    "check_synthesis_root",
    "compute_vocab_sizes",
    "cross_features",
    "generate",
    "hold_data",
    "hold_store",
    "holdout_users",
    "load_dlrmv4_samples",
    "prepare_preprocessed",
    "prepare_store",
    "read_mapping",
    "read_multi_event",
    "synthesize",
    "synthesize_cached",
    "temporal_split",
    "validate_mapping",
    "validate_multi_event",
    "yambda_shape",
]
