"""Whether the ops read the values of their index tensors to check them.

Offsets, lengths and target counts are checked for what only their values show (offsets that
start at 0, never decrease and end at the row count; lengths within max_seq_len; target counts
within their sequence). On a GPU each such check copies a value back to the host, which waits
for the GPU: a synchronisation per call, which keeps the GPU idle while the host catches up,
and which a CUDA graph cannot capture at all. Shapes, dtypes and scalars are always checked
(they cost no synchronisation).

The value checks run unless this process turned them off (:func:`set_index_value_checks`, for
a training loop whose batches come from a pipeline that validates them) or the caller vouches
for the tensors it passes (:func:`index_values_trusted`, around code that builds its offsets
itself, such as a model computing them by a cumulative sum of lengths), and they are skipped
where no value can be read: while ``torch.compile`` traces (fake tensors; the kernels that
run the compiled graph check again, see :mod:`hstu_ops.triton_ops`) and while the current CUDA
stream is being captured into a graph.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch

__all__ = ["index_value_checks", "index_values_trusted", "set_index_value_checks"]

_enabled = True
_trusted = contextvars.ContextVar("hstu_ops_index_values_trusted", default=False)


@contextlib.contextmanager
def index_values_trusted() -> Iterator[None]:
    """Inside, the ops called from this thread (or task) do not read their index tensors'
    values to check them: the caller built them valid. Shapes and dtypes are still checked."""
    token = _trusted.set(True)
    try:
        yield
    finally:
        _trusted.reset(token)


def set_index_value_checks(enabled: bool) -> None:
    """Turns the value checks of index tensors on (the default) or off, process-wide."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"set_index_value_checks: enabled must be a bool, got {enabled!r}")
    _enabled = enabled


def index_value_checks() -> bool:
    """Whether an op called now reads its index tensors' values to check them."""
    if not _enabled or _trusted.get() or torch.compiler.is_compiling():
        return False
    capturing = torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()
    return not capturing
