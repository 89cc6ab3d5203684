"""Normalisations of the HSTU layers, dispatched by kernel.

Kernels: PYTORCH (the references, :mod:`hstu_ops.pytorch.pt_norms`, which state the semantics
and the precision) and TRITON (:mod:`hstu_ops.triton.triton_norms`, imported on first use).
Names and argument order follow generative-recommenders' ``ops/layer_norm.py``.
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops.pytorch.pt_norms import (
    pytorch_layer_norm,
    pytorch_rms_norm,
    pytorch_swish_layer_norm,
)

__all__ = ["layer_norm", "rms_norm", "swish_layer_norm"]

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
    _, impl = dispatch("layer_norm", kernel, pytorch=pytorch_layer_norm, triton=_TRITON_MODULE)
    return impl(x, weight, bias, eps)


def swish_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """``x * sigmoid(layer_norm(x, weight, bias, eps))``: x gated by its own layer norm.

    Arguments and result as :func:`layer_norm` (weight and bias are those of the norm inside
    the gate).
    """
    _, impl = dispatch(
        "swish_layer_norm", kernel, pytorch=pytorch_swish_layer_norm, triton=_TRITON_MODULE
    )
    return impl(x, weight, bias, eps)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-5,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """RMS norm over the last dimension: ``x / sqrt(mean(x^2) + eps) * weight``.

    Arguments and result as :func:`layer_norm`, except: weight is [D] or None (no scaling), there
    is no bias, eps is added to the mean square, and the weight is applied before the one
    rounding to the dtype of x.
    """
    _, impl = dispatch("rms_norm", kernel, pytorch=pytorch_rms_norm, triton=_TRITON_MODULE)
    return impl(x, weight, eps)
