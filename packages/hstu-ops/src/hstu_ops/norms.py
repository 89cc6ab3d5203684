"""Normalisations of the HSTU layers, dispatched by kernel.

Kernels: PYTORCH (the references, :mod:`hstu_ops.pytorch.pt_norms`, which state the semantics
and the precision) and TRITON (:mod:`hstu_ops.triton.triton_norms`, imported on first use).
Names and argument order follow generative-recommenders' ``ops/layer_norm.py``.
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, resolve_kernel
from hstu_ops._triton import load_triton_module
from hstu_ops.pytorch.pt_norms import (
    pytorch_layer_norm,
    pytorch_rms_norm,
    pytorch_swish_layer_norm,
)

__all__ = ["layer_norm", "rms_norm", "swish_layer_norm"]

_KERNELS = (Kernel.PYTORCH, Kernel.TRITON)
_TRITON_MODULE = "triton_norms"


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """Layer norm over the last dimension: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    Args:
        x: [..., D], any floating dtype (computed in float32, float64 for float64 inputs, and
            rounded once to the dtype of x).
        weight, bias: [D], or both None for the plain (non-affine) norm.
        eps: added to the biased variance, >= 0.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. TRITON
            needs CUDA/ROCm tensors of dtype float16, bfloat16 or float32 with at most 16384
            features; it raises TritonUnavailableError when triton is not installed.

    Returns:
        The shape and dtype of x.
    """
    op = "layer_norm"
    if resolve_kernel(op, kernel, _KERNELS) is Kernel.TRITON:
        return load_triton_module(op, _TRITON_MODULE).triton_layer_norm(x, weight, bias, eps)
    return pytorch_layer_norm(x, weight, bias, eps)


def swish_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """``x * sigmoid(layer_norm(x, weight, bias, eps))``: x gated by its own layer norm.

    Args:
        x: [..., D], any floating dtype (computed in float32, float64 for float64 inputs, and
            rounded once to the dtype of x).
        weight, bias: [D], or both None for the plain (non-affine) norm inside the gate.
        eps: added to the biased variance, >= 0.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. TRITON
            needs CUDA/ROCm tensors of dtype float16, bfloat16 or float32 with at most 16384
            features; it raises TritonUnavailableError when triton is not installed.

    Returns:
        The shape and dtype of x.
    """
    op = "swish_layer_norm"
    if resolve_kernel(op, kernel, _KERNELS) is Kernel.TRITON:
        module = load_triton_module(op, _TRITON_MODULE)
        return module.triton_swish_layer_norm(x, weight, bias, eps)
    return pytorch_swish_layer_norm(x, weight, bias, eps)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """RMS norm over the last dimension: ``x / sqrt(mean(x^2) + eps) * weight``.

    Args:
        x: [..., D], any floating dtype (computed in float32, float64 for float64 inputs, and
            rounded once to the dtype of x; the weight is applied before that rounding).
        weight: [D], or None for no scaling.
        eps: added to the mean square, >= 0.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. TRITON
            needs CUDA/ROCm tensors of dtype float16, bfloat16 or float32 with at most 16384
            features; it raises TritonUnavailableError when triton is not installed.

    Returns:
        The shape and dtype of x.
    """
    op = "rms_norm"
    if resolve_kernel(op, kernel, _KERNELS) is Kernel.TRITON:
        return load_triton_module(op, _TRITON_MODULE).triton_rms_norm(x, weight, eps)
    return pytorch_rms_norm(x, weight, eps)
