"""PyTorch references of the normalisations of the HSTU layers (the specification of ``norms``).

Every op normalises over the last dimension of ``x`` (``D`` features); ``x`` may have any number
of leading dimensions, and ``weight`` / ``bias`` have ``D`` entries. With ``mean`` and ``var``
the mean and the biased variance of one row (``var = mean((x - mean)^2)``):

    layer_norm(x)        = (x - mean) / sqrt(var + eps) * weight + bias
    rms_norm(x)          = x / sqrt(mean(x^2) + eps) * weight
    swish_layer_norm(x)  = x * sigmoid(layer_norm(x))

Passing ``weight=None`` (and, for the two layer norms, ``bias=None`` with it) gives the plain,
non-learnable variant: weight 1, bias 0. Weight and bias go together: one without the other is
an error, as in generative-recommenders, whose Triton layer norm has exactly these two variants.

Precision: float16 and bfloat16 inputs (and float32) are computed in float32, float64 inputs in
float64; weight and bias are converted to that precision, and the result is rounded once, to
the dtype of ``x``. Gradients flow to ``x``, ``weight`` and ``bias`` in their own dtypes.

These are the semantics of generative-recommenders' ``ops/layer_norm.py`` (``layer_norm``,
``swish_layer_norm``, and the Triton kernel of ``RMSNorm``). One difference: that module's
PyTorch ``RMSNorm`` rounds the normalised rows to the dtype of ``x`` before multiplying by the
weight (in torch's type promotion of the two dtypes); here, as in its Triton kernel, the weight
is applied in float32 and the product is rounded once to the dtype of ``x``.
"""

from __future__ import annotations

import numbers

import torch

__all__ = ["pytorch_layer_norm", "pytorch_rms_norm", "pytorch_swish_layer_norm"]


def _check_param(op: str, name: str, p: torch.Tensor, x: torch.Tensor) -> None:
    if not isinstance(p, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor or None, got {type(p).__name__}")
    if not p.is_floating_point():
        raise TypeError(f"{op}: {name} must have a floating dtype, got {p.dtype}")
    if p.dim() != 1 or p.shape[0] != x.shape[-1]:
        raise ValueError(
            f"{op}: {name} must be 1-D with one entry per feature of x ({x.shape[-1]}), "
            f"got shape {list(p.shape)}"
        )
    if p.device != x.device:
        raise ValueError(f"{op}: {name} is on {p.device}, x on {x.device}; they must share one")


def check_norm_inputs(
    op: str,
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float,
    *,
    has_bias: bool = True,
) -> None:
    """Validates the arguments of a norm op ``op`` (``has_bias``: whether it takes a bias).

    Raises TypeError for a non-tensor or non-floating ``x``/``weight``/``bias`` or a non-real
    ``eps``, and ValueError for a bad shape, device, a negative ``eps``, or a weight without
    bias (or bias without weight).
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: x must be a tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{op}: x must have a floating dtype, got {x.dtype}")
    if x.dim() == 0 or x.shape[-1] == 0:
        raise ValueError(
            f"{op}: x must have a non-empty last dimension (the features), got shape "
            f"{list(x.shape)}"
        )
    if weight is not None:
        _check_param(op, "weight", weight, x)
    if has_bias:
        if bias is not None:
            _check_param(op, "bias", bias, x)
        if (weight is None) != (bias is None):
            given, missing = ("weight", "bias") if bias is None else ("bias", "weight")
            raise ValueError(
                f"{op}: {given} was given without {missing}; pass both (the weighted norm) or "
                "neither (the plain norm)"
            )
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{op}: eps must be a real number, got {type(eps).__name__}")
    if not eps >= 0.0:  # also refuses NaN
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for 16-bit and float32 inputs, float64 for float64 inputs."""
    return torch.promote_types(x.dtype, torch.float32)


def _standardize(x: torch.Tensor, eps: float) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) over the last dimension, biased variance."""
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    var = centered.square().mean(dim=-1, keepdim=True)
    return centered * torch.rsqrt(var + eps)


def _affine(
    xhat: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    if weight is not None:
        xhat = xhat * weight.to(xhat.dtype)
    if bias is not None:
        xhat = xhat + bias.to(xhat.dtype)
    return xhat


def pytorch_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """Layer norm over the last dimension: ``(x - mean) / sqrt(var + eps) * weight + bias``.

    x: [..., D]; weight, bias: [D], or both None (no affine transform). Returns the shape and
    dtype of x. Equal to ``torch.nn.functional.layer_norm(x, [D], weight, bias, eps)`` computed
    in float32 (float64 for float64 inputs).
    """
    check_norm_inputs("layer_norm", x, weight, bias, eps)
    x32 = x.to(_compute_dtype(x))
    return _affine(_standardize(x32, eps), weight, bias).to(x.dtype)


def pytorch_swish_layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    bias: torch.Tensor | None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """``x * sigmoid(layer_norm(x, weight, bias, eps))``: the layer norm gates x itself.

    x: [..., D]; weight, bias: [D], or both None. Returns the shape and dtype of x. The gate and
    the product are computed in float32 (float64 for float64 inputs) and rounded once.
    """
    check_norm_inputs("swish_layer_norm", x, weight, bias, eps)
    x32 = x.to(_compute_dtype(x))
    return (x32 * torch.sigmoid(_affine(_standardize(x32, eps), weight, bias))).to(x.dtype)


def pytorch_rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """RMS norm over the last dimension: ``x / sqrt(mean(x^2) + eps) * weight``.

    x: [..., D]; weight: [D] or None (no scaling). Returns the shape and dtype of x, computed in
    float32 (float64 for float64 inputs) and rounded once; see the module docstring for how this
    differs from generative-recommenders' PyTorch ``RMSNorm`` in 16-bit precision.
    """
    check_norm_inputs("rms_norm", x, weight, None, eps, has_bias=False)
    x32 = x.to(_compute_dtype(x))
    normed = x32 * torch.rsqrt(x32.square().mean(dim=-1, keepdim=True) + eps)
    return _affine(normed, weight, None).to(x.dtype)
