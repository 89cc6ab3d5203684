"""Whether the ops read the values of their index tensors to check them.

Offsets, lengths and target counts are checked for what only their values show (offsets that
start at 0, never decrease and end at the row count; lengths within max_seq_len; target counts
within their sequence). On a GPU each such check copies a value back to the host, which waits
for the GPU: a synchronisation per call, which keeps the GPU idle while the host catches up,
and which a CUDA graph cannot capture at all. Shapes, dtypes and scalars are always checked
(they cost no synchronisation).

The value checks run unless this process turned them off (:func:`set_index_value_checks`, for
a training loop whose batches come from a pipeline that validates them), and they are skipped
where no value can be read: while ``torch.compile`` traces (fake tensors; the kernels that
run the compiled graph check again, see :mod:`hstu_ops.triton_ops`) and while the current CUDA
stream is being captured into a graph.
"""

from __future__ import annotations

import torch

__all__ = ["index_value_checks", "set_index_value_checks"]

_enabled = True


def set_index_value_checks(enabled: bool) -> None:
    """Turns the value checks of index tensors on (the default) or off, process-wide."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_index_value_checks: enabled must be a bool, got {enabled!r}")
    _enabled = enabled


def index_value_checks() -> bool:
    """Whether an op called now reads its index tensors' values to check them."""
    if not _enabled or torch.compiler.is_compiling():
        return False
    capturing = torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()
    return not capturing
