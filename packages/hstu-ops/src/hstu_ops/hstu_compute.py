"""The fused pieces of an HSTU layer around the attention, dispatched by kernel.

``hstu_compute_uqvk`` is the input projection (layer norm, one matmul, split into u, q, k, v),
``hstu_compute_output`` the output projection (norm of the attention output times u, optional
concatenation, dropout, matmul plus residual). Kernels: PYTORCH (the reference,
:mod:`hstu_ops.pytorch.pt_hstu_compute`, which states the semantics) and TRITON
(:mod:`hstu_ops.triton.triton_hstu_compute`, imported on first use).
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops.pytorch.pt_hstu_compute import (
    pytorch_hstu_compute_output,
    pytorch_hstu_compute_uqvk,
)

__all__ = ["hstu_compute_output", "hstu_compute_uqvk"]

_TRITON_MODULE = "triton_hstu_compute"


def hstu_compute_uqvk(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    norm_eps: float,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
    kernel: Kernel | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The HSTU input projection: ``(u, q, k, v)`` of x.

    uvqk = uvqk_bias + layer_norm(x) @ uvqk_weight, split in the order u, v, q, k; only u gets
    the SiLU.

    Args:
        x: [N, D] activations (float16, bfloat16, float32; float64 with PYTORCH).
        norm_weight, norm_bias: [D], the layer norm's affine parameters (any floating dtype).
        norm_eps: the layer norm's epsilon (>= 0).
        num_heads, attn_dim, hidden_dim: positive; q, k have attn_dim, u and v hidden_dim per
            head.
        uvqk_weight: [D, 2 * num_heads * (hidden_dim + attn_dim)]; uvqk_bias: its last dim.
            Both are cast to x's dtype.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. TRITON
            composes the package's Triton layer norm (``hstu_ops.norms``) and Triton addmm
            (``hstu_ops.mm``) on GPU tensors (under Triton's interpreter, their references);
            it needs float16, bfloat16 or float32 and raises TritonUnavailableError when triton
            is not installed.

    Returns:
        u [N, num_heads * hidden_dim] (after the SiLU), q and k [N, num_heads, attn_dim], v
        [N, num_heads, hidden_dim]; q, k, v are views into one projection.
    """
    _, impl = dispatch(
        "hstu_compute_uqvk", kernel, pytorch=pytorch_hstu_compute_uqvk, triton=_TRITON_MODULE
    )
    return impl(
        x,
        norm_weight,
        norm_bias,
        norm_eps,
        num_heads,
        attn_dim,
        hidden_dim,
        uvqk_weight,
        uvqk_bias,
    )


def hstu_compute_output(
    attn: torch.Tensor,
    u: torch.Tensor,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    norm_eps: float,
    output_weight: torch.Tensor,
    num_heads: int,
    linear_dim: int,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool,
    group_norm: bool,
    recompute_y_in_backward: bool = False,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """The HSTU output projection: ``x + dropout(cat?([u, attn, u * norm(attn)])) @ W``.

    Args:
        attn: [N, width] attention output (rows of heads * hidden_dim, flattened).
        u: [N, width], the gate from :func:`hstu_compute_uqvk`; same dtype as attn.
        x: [N, out], the layer's input (the residual); same dtype as attn.
        norm_weight, norm_bias: [width] for the layer norm, [num_heads] with ``group_norm``.
        norm_eps: the norm's epsilon (>= 0).
        output_weight: [width, out], or [3 * width, out] with ``concat_ux``; cast to x's dtype.
        num_heads, linear_dim: the groups of the group norm (num_heads * linear_dim == width);
            unused by the layer norm.
        dropout_ratio: in [0, 1]; applied to every column of y while ``training``.
        training: dropout only while training.
        concat_ux: y = cat([u, attn, u * norm(attn)], dim=1) before the dropout.
        group_norm: a group norm per head instead of a layer norm over the width.
        recompute_y_in_backward: TRITON only (the reference leaves memory to autograd): do not
            keep y for the backward but compute it again there; the gradients are the same.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` or None for the process default. The
            TRITON kernel draws its dropout masks from its own counter-based generator, seeded
            from torch's default generator (see :mod:`hstu_ops.triton.triton_hstu_compute`);
            it needs CUDA/ROCm tensors of dtype float16, bfloat16 or float32 and raises
            TritonUnavailableError when triton is not installed.

    Returns:
        [N, out] in x's dtype.
    """
    chosen, impl = dispatch(
        "hstu_compute_output", kernel, pytorch=pytorch_hstu_compute_output, triton=_TRITON_MODULE
    )
    # Only the Triton kernel can leave y out of what the backward keeps.
    extra = {"recompute_y_in_backward": recompute_y_in_backward} if chosen is Kernel.TRITON else {}
    return impl(
        attn=attn,
        u=u,
        x=x,
        norm_weight=norm_weight,
        norm_bias=norm_bias,
        output_weight=output_weight,
        eps=norm_eps,
        dropout_ratio=dropout_ratio,
        training=training,
        concat_ux=concat_ux,
        group_norm=group_norm,
        num_heads=num_heads,
        linear_dim=linear_dim,
        **extra,
    )
