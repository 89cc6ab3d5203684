"""HSTU kernels: PyTorch references, native (C++/CUDA/HIP) ops and Triton kernels.

Every op takes ``kernel=`` (a :class:`Kernel`, or None for the process default set with
:func:`set_default_kernel`); :data:`OP_KERNELS` says which kernels each op has, :func:`choose`
which one it runs for a family and why, :func:`decide_kernel` a model's kernels on a device
(a :class:`KernelDecision`: ``Kernel.AUTO`` resolved, a family the device cannot run refused),
and :func:`verify_decision` checks AUTO's Triton kernels on a GPU before a run uses them
(:mod:`hstu_ops.selfcheck`, which also holds the report of every kernel against its
reference). The PYTORCH kernels in
:mod:`hstu_ops.pytorch` are the specification; the NATIVE kernels come from the compiled
extension and are also reachable as ``torch.ops.hstu_ops.*`` once it is loaded (by the first
op or ``native_available()``). The TRITON kernels (:mod:`hstu_ops.triton`) are imported on
first use, so this package imports without triton.

Importing the package is cheap: the kernel selection (:class:`Kernel` and its functions)
imports nothing heavy, and the ops, with torch, load when first named.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hstu_ops._kernel import (
    OP_KERNELS,
    Kernel,
    KernelChoice,
    KernelDecision,
    KernelUnavailableError,
    choose,
    decide_kernel,
    device_kernel,
    get_default_kernel,
    kernel_family,
    set_default_kernel,
    unavailable_reason,
)

if TYPE_CHECKING:
    from hstu_ops import pytorch, selfcheck
    from hstu_ops._index_checks import index_values_trusted, set_index_value_checks
    from hstu_ops._native import NativeExtensionError, native_available, native_build_info
    from hstu_ops._triton import (
        TritonUnavailableError,
        triton_available,
        triton_interpreter_problem,
    )
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
    from hstu_ops.selfcheck import verify_decision, verify_kernel

__version__ = "0.1.0"

_LAZY = {
    "pytorch": "hstu_ops.pytorch",
    "NativeExtensionError": "hstu_ops._native",
    "native_available": "hstu_ops._native",
    "native_build_info": "hstu_ops._native",
    "TritonUnavailableError": "hstu_ops._triton",
    "triton_available": "hstu_ops._triton",
    "triton_interpreter_problem": "hstu_ops._triton",
    "hstu_mha": "hstu_ops.hstu_attention",
    "hstu_compute_output": "hstu_ops.hstu_compute",
    "hstu_compute_uqvk": "hstu_ops.hstu_compute",
    "complete_cumsum": "hstu_ops.jagged",
    "concat_1d_jagged": "hstu_ops.jagged",
    "concat_2D_jagged": "hstu_ops.jagged",
    "jagged_dense_bmm_broadcast_add": "hstu_ops.jagged",
    "split_1d_jagged": "hstu_ops.jagged",
    "split_2D_jagged": "hstu_ops.jagged",
    "addmm": "hstu_ops.mm",
    "layer_norm": "hstu_ops.norms",
    "rms_norm": "hstu_ops.norms",
    "swish_layer_norm": "hstu_ops.norms",
    "add_timestamp_positional_embeddings": "hstu_ops.position",
    "selfcheck": "hstu_ops.selfcheck",
    "index_values_trusted": "hstu_ops._index_checks",
    "set_index_value_checks": "hstu_ops._index_checks",
    "verify_decision": "hstu_ops.selfcheck",
    "verify_kernel": "hstu_ops.selfcheck",
}
"""Public names loaded on first use (name -> module; a subpackage's name is the module)."""


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(module_name)
    value = module if module_name.endswith(f".{name}") else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "OP_KERNELS",
    "Kernel",
    "KernelChoice",
    "KernelDecision",
    "KernelUnavailableError",
    "NativeExtensionError",
    "TritonUnavailableError",
    "__version__",
    "add_timestamp_positional_embeddings",
    "addmm",
    "choose",
    "complete_cumsum",
    "concat_1d_jagged",
    "concat_2D_jagged",
    "decide_kernel",
    "device_kernel",
    "get_default_kernel",
    "hstu_compute_output",
    "hstu_compute_uqvk",
    "hstu_mha",
    "index_values_trusted",
    "jagged_dense_bmm_broadcast_add",
    "kernel_family",
    "layer_norm",
    "native_available",
    "native_build_info",
    "pytorch",
    "rms_norm",
    "selfcheck",
    "set_default_kernel",
    "set_index_value_checks",
    "split_1d_jagged",
    "split_2D_jagged",
    "swish_layer_norm",
    "triton_available",
    "triton_interpreter_problem",
    "unavailable_reason",
    "verify_decision",
    "verify_kernel",
]
