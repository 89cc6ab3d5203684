"""HSTU kernels: PyTorch references, native (C++/CUDA/HIP) ops and Triton kernels.

Every op takes ``kernel=`` (a :class:`Kernel`, or None for the process default set with
:func:`set_default_kernel`); :data:`OP_KERNELS` says which kernels each op has, :func:`fallback`
which one it runs for a family, and :func:`device_kernel` which family a device runs
(``Kernel.AUTO`` resolved, a family it cannot run refused). The PYTORCH kernels in :mod:`hstu_ops.pytorch` are the
specification; the NATIVE kernels come from the compiled extension and are also reachable as
``torch.ops.hstu_ops.*`` once this package is imported. The TRITON kernels
(:mod:`hstu_ops.triton`) are imported on first use, so this package imports without triton.
"""

from hstu_ops import pytorch
from hstu_ops._kernel import (
    OP_KERNELS,
    Kernel,
    KernelUnavailableError,
    device_kernel,
    fallback,
    get_default_kernel,
    set_default_kernel,
    unavailable_reason,
)
from hstu_ops._native import (
    NativeExtensionError,
    native_available,
    native_build_info,
)
from hstu_ops._triton import TritonUnavailableError, triton_available
from hstu_ops.hstu_attention import hstu_mha
from hstu_ops.hstu_compute import hstu_compute_output, hstu_compute_uqvk
from hstu_ops.jagged import (
    complete_cumsum,
    concat_1d_jagged,
    concat_2D_jagged,
    jagged_dense_bmm_broadcast_add,
    split_1d_jagged,
    split_2D_jagged,
)
from hstu_ops.mm import addmm
from hstu_ops.norms import layer_norm, rms_norm, swish_layer_norm
from hstu_ops.position import add_timestamp_positional_embeddings

__version__ = "0.1.0"

__all__ = [
    "OP_KERNELS",
    "Kernel",
    "KernelUnavailableError",
    "NativeExtensionError",
    "TritonUnavailableError",
    "__version__",
    "add_timestamp_positional_embeddings",
    "addmm",
    "complete_cumsum",
    "concat_1d_jagged",
    "concat_2D_jagged",
    "device_kernel",
    "fallback",
    "get_default_kernel",
    "hstu_compute_output",
    "hstu_compute_uqvk",
    "hstu_mha",
    "jagged_dense_bmm_broadcast_add",
    "layer_norm",
    "native_available",
    "native_build_info",
    "pytorch",
    "rms_norm",
    "set_default_kernel",
    "split_1d_jagged",
    "split_2D_jagged",
    "swish_layer_norm",
    "triton_available",
    "unavailable_reason",
]
