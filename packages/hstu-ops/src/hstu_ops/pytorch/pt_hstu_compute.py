"""PyTorch reference of the fused HSTU layer pieces around the attention (op family 2).

An HSTU layer is ``x -> (u, q, k, v) -> attention -> out``. The two pieces on either side of
the attention are specified here:

``pytorch_hstu_compute_uqvk`` (the input projection), for x ``[N, D]``::

    normed_x = layer_norm(x, norm_weight, norm_bias, norm_eps)            # over D
    uvqk     = uvqk_bias + normed_x @ uvqk_weight                          # [N, 2H(h + a)]
    u, v, q, k = split(uvqk, [H*h, H*h, H*a, H*a])                         # in this order
    u = silu(u)                                                            # u only
    q, k -> [N, H, a];  v -> [N, H, h]                                     # views

with ``H = num_heads``, ``h = hidden_dim``, ``a = attn_dim``; returns ``(u, q, k, v)``.

``pytorch_hstu_compute_output`` (the output projection), for attn and u ``[N, W]``::

    y = u * norm(attn)            # layer norm over W, or group norm: num_heads groups of
                                  # linear_dim columns (W = num_heads * linear_dim)
    y = cat([u, attn, y], dim=1)  # only if concat_ux: [N, 3W]
    y = dropout(y, dropout_ratio) # only while training
    out = x + y @ output_weight   # x [N, O], output_weight [W or 3W, O]

``pytorch_norm_mul_dropout`` is its first three lines. The layer norm has one weight and bias
entry per column (``[W]``); the group norm normalises each head's ``linear_dim`` columns on their
own and has one weight and bias entry per head (``[num_heads]``), as
``F.group_norm(attn.view(N, num_heads, linear_dim), num_heads, weight, bias, eps)``.

Precision: the norms, the product with u and the dropout are computed in float32 (in float64 for
float64 inputs) and y is rounded to the dtype of attn once, at the end; the layer norm of
``compute_uqvk`` is likewise computed in float32 and rounded to x's dtype before the matmul. The
matmuls run in the activations' dtype: the weights ``uvqk_weight``, ``uvqk_bias`` and
``output_weight`` are cast to x's dtype first (gradients flow back through the cast), the norm
weights may have any floating dtype. This is generative-recommenders' PyTorch reference
(``ops/pytorch/pt_hstu_linear.py`` and ``ops/hstu_compute.py``).

Dropout here is ``torch.nn.functional.dropout`` (torch's generator). The TRITON kernel draws its
own masks from a counter-based generator, so the two kernels agree in distribution but not in
the masks; see :mod:`hstu_ops.triton.triton_hstu_compute`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

__all__ = [
    "check_compute_output_args",
    "check_compute_uqvk_args",
    "check_norm_mul_dropout_args",
    "pytorch_hstu_compute_output",
    "pytorch_hstu_compute_uqvk",
    "pytorch_norm_mul_dropout",
    "split_uvqk",
]

_OP_UQVK = "hstu_compute_uqvk"
_OP_OUTPUT = "hstu_compute_output"
_OP_NORM = "norm_mul_dropout"

# Argument names in messages: the reference of norm * u * dropout calls the normalised input
# x and its parameters weight/bias/eps; hstu_compute_output calls them attn and norm_*.
_NORM_MUL_DROPOUT_NAMES = ("x", "u", "weight", "bias", "eps")
_COMPUTE_OUTPUT_NAMES = ("attn", "u", "norm_weight", "norm_bias", "norm_eps")


def _shape(t: torch.Tensor) -> list[int]:
    return list(t.shape)


def _check_floating(op: str, name: str, t: torch.Tensor) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a tensor, got {type(t).__name__}")
    if not t.is_floating_point():
        raise TypeError(f"{op}: {name} must have a floating dtype, got {t.dtype}")


def _check_eps(op: str, name: str, eps: float) -> None:
    if not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"{op}: {name} must be a finite number >= 0, got {eps!r}")


def _check_positive_int(op: str, name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{op}: {name} must be a positive int, got {value!r}")


def _check_same_device(op: str, tensors: dict[str, torch.Tensor]) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{op}: all tensors must be on one device, got {listed}")


def check_norm_mul_dropout_args(
    op: str,
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    group_norm: bool,
    num_heads: int,
    linear_dim: int,
    names: tuple[str, str, str, str, str] = _NORM_MUL_DROPOUT_NAMES,
) -> None:
    """Validates the arguments of norm * u * dropout; ``names`` are those of x, u, weight,
    bias, eps in the caller's signature (for the messages)."""
    x_name, u_name, w_name, b_name, eps_name = names
    for name, t in ((x_name, x), (u_name, u), (w_name, weight), (b_name, bias)):
        _check_floating(op, name, t)
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"{op}: {x_name} must be 2-D [N, width] with width >= 1, got {_shape(x)}")
    if u.shape != x.shape:
        raise ValueError(
            f"{op}: {u_name} must have the shape of {x_name} {_shape(x)}, got {_shape(u)}"
        )
    if u.dtype != x.dtype:
        raise TypeError(
            f"{op}: {u_name} must have the dtype of {x_name} ({x.dtype}), got {u.dtype}"
        )
    width = x.shape[1]
    if group_norm:
        _check_positive_int(op, "num_heads", num_heads)
        _check_positive_int(op, "linear_dim", linear_dim)
        if num_heads * linear_dim != width:
            raise ValueError(
                f"{op}: with group_norm, num_heads * linear_dim = {num_heads} * {linear_dim} "
                f"must equal the width of {x_name} ({width})"
            )
        params, what = num_heads, "num_heads"
    else:
        params, what = width, f"the width of {x_name}"
    for name, t in ((w_name, weight), (b_name, bias)):
        if t.shape != (params,):
            kind = "group norm" if group_norm else "layer norm"
            raise ValueError(
                f"{op}: {name} of the {kind} must have shape [{params}] ({what}), got {_shape(t)}"
            )
    _check_eps(op, eps_name, eps)
    if (
        isinstance(dropout_ratio, bool)
        or not isinstance(dropout_ratio, (int, float))
        or not 0.0 <= dropout_ratio <= 1.0
    ):
        raise ValueError(f"{op}: dropout_ratio must be in [0, 1], got {dropout_ratio!r}")
    _check_same_device(op, {x_name: x, u_name: u, w_name: weight, b_name: bias})


def check_compute_output_args(
    op: str,
    attn: torch.Tensor,
    u: torch.Tensor,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    output_weight: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    concat_ux: bool,
    group_norm: bool,
    num_heads: int,
    linear_dim: int,
) -> None:
    """Validates the arguments of hstu_compute_output (names as in the dispatcher)."""
    check_norm_mul_dropout_args(
        op,
        attn,
        u,
        norm_weight,
        norm_bias,
        eps,
        dropout_ratio,
        group_norm,
        num_heads,
        linear_dim,
        names=_COMPUTE_OUTPUT_NAMES,
    )
    _check_floating(op, "x", x)
    _check_floating(op, "output_weight", output_weight)
    rows, width = attn.shape
    y_width = 3 * width if concat_ux else width
    if x.dim() != 2 or x.shape[0] != rows:
        raise ValueError(
            f"{op}: x must be 2-D [N, out] with the N = {rows} of attn, got {_shape(x)}"
        )
    if x.dtype != attn.dtype:
        raise TypeError(f"{op}: x must have the dtype of attn ({attn.dtype}), got {x.dtype}")
    if output_weight.shape != (y_width, x.shape[1]):
        what = "3 * width of attn (concat_ux)" if concat_ux else "width of attn"
        raise ValueError(
            f"{op}: output_weight must have shape [{y_width}, {x.shape[1]}] ([{what}, width "
            f"of x]), got {_shape(output_weight)}"
        )
    _check_same_device(op, {"attn": attn, "x": x, "output_weight": output_weight})


def check_compute_uqvk_args(
    op: str,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    norm_eps: float,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
) -> None:
    """Validates the arguments of hstu_compute_uqvk."""
    for name, t in (
        ("x", x),
        ("norm_weight", norm_weight),
        ("norm_bias", norm_bias),
        ("uvqk_weight", uvqk_weight),
        ("uvqk_bias", uvqk_bias),
    ):
        _check_floating(op, name, t)
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"{op}: x must be 2-D [N, D] with D >= 1, got {_shape(x)}")
    width = x.shape[1]
    for name, t in (("norm_weight", norm_weight), ("norm_bias", norm_bias)):
        if t.shape != (width,):
            raise ValueError(
                f"{op}: {name} must have shape [{width}] (the width of x), got {_shape(t)}"
            )
    _check_eps(op, "norm_eps", norm_eps)
    for name, value in (
        ("num_heads", num_heads),
        ("attn_dim", attn_dim),
        ("hidden_dim", hidden_dim),
    ):
        _check_positive_int(op, name, value)
    out = 2 * num_heads * (hidden_dim + attn_dim)
    if uvqk_weight.shape != (width, out):
        raise ValueError(
            f"{op}: uvqk_weight must have shape [{width}, {out}] ([width of x, "
            f"2 * num_heads * (hidden_dim + attn_dim)]), got {_shape(uvqk_weight)}"
        )
    if uvqk_bias.shape != (out,):
        raise ValueError(f"{op}: uvqk_bias must have shape [{out}], got {_shape(uvqk_bias)}")
    _check_same_device(
        op,
        {
            "x": x,
            "norm_weight": norm_weight,
            "norm_bias": norm_bias,
            "uvqk_weight": uvqk_weight,
            "uvqk_bias": uvqk_bias,
        },
    )


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the norms are computed in: float32, or float64 for float64 inputs."""
    return torch.promote_types(dtype, torch.float32)


def _norm_mul_dropout(
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool,
    group_norm: bool,
    num_heads: int,
    linear_dim: int,
) -> torch.Tensor:
    wide = _compute_dtype(x.dtype)
    xw, uw = x.to(wide), u.to(wide)
    weight, bias = weight.to(wide), bias.to(wide)
    if group_norm:
        normed = F.group_norm(
            xw.view(-1, num_heads, linear_dim), num_heads, weight, bias, eps
        ).view(xw.shape)
    else:
        normed = F.layer_norm(xw, (xw.shape[1],), weight, bias, eps)
    y = uw * normed
    if concat_ux:
        y = torch.cat([uw, xw, y], dim=1)
    y = F.dropout(y, p=dropout_ratio, training=training)
    return y.to(x.dtype)


def pytorch_norm_mul_dropout(
    x: torch.Tensor,
    u: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = False,
    group_norm: bool = False,
    num_heads: int = 1,
    linear_dim: int = -1,
) -> torch.Tensor:
    """``dropout(cat?([u, x, u * norm(x)]))``: the first half of hstu_compute_output.

    x, u: ``[N, W]`` of one floating dtype. Layer norm over W (weight, bias ``[W]``) or, with
    ``group_norm``, a group norm of ``num_heads`` groups of ``linear_dim`` columns (weight, bias
    ``[num_heads]``; ``num_heads * linear_dim == W``; otherwise the two are unused). Returns
    ``[N, W]``, or ``[N, 3W]`` with ``concat_ux``, in x's dtype. Dropout with probability
    ``dropout_ratio`` (surviving entries scaled by ``1 / (1 - dropout_ratio)``) applies while
    ``training``. See the module docstring.
    """
    check_norm_mul_dropout_args(
        _OP_NORM, x, u, weight, bias, eps, dropout_ratio, group_norm, num_heads, linear_dim
    )
    return _norm_mul_dropout(
        x,
        u,
        weight,
        bias,
        eps,
        dropout_ratio,
        training,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
    )


def pytorch_hstu_compute_output(
    attn: torch.Tensor,
    u: torch.Tensor,
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    output_weight: torch.Tensor,
    eps: float,
    dropout_ratio: float,
    training: bool,
    concat_ux: bool = False,
    group_norm: bool = False,
    num_heads: int = 1,
    linear_dim: int = -1,
) -> torch.Tensor:
    """``x + dropout(cat?([u, attn, u * norm(attn)])) @ output_weight``: the output projection.

    attn, u: ``[N, W]``; x: ``[N, O]`` (the layer's input, the residual), of attn's dtype;
    output_weight: ``[W, O]``, or ``[3W, O]`` with ``concat_ux`` (cast to x's dtype). ``eps`` is
    the dispatcher's ``norm_eps``; the other arguments are those of
    :func:`pytorch_norm_mul_dropout`. Returns ``[N, O]``.
    """
    check_compute_output_args(
        _OP_OUTPUT,
        attn,
        u,
        x,
        norm_weight,
        norm_bias,
        output_weight,
        eps,
        dropout_ratio,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
    )
    y = _norm_mul_dropout(
        attn,
        u,
        norm_weight,
        norm_bias,
        eps,
        dropout_ratio,
        training,
        concat_ux,
        group_norm,
        num_heads,
        linear_dim,
    )
    return torch.addmm(x, y, output_weight.to(x.dtype))


def pytorch_hstu_compute_uqvk(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor,
    norm_eps: float,
    num_heads: int,
    attn_dim: int,
    hidden_dim: int,
    uvqk_weight: torch.Tensor,
    uvqk_bias: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(silu(u), q, k, v)`` from ``uvqk_bias + layer_norm(x) @ uvqk_weight``.

    x: ``[N, D]``; norm_weight, norm_bias: ``[D]``; uvqk_weight: ``[D, 2 * num_heads *
    (hidden_dim + attn_dim)]``, uvqk_bias its last dimension (both cast to x's dtype). Returns u
    ``[N, num_heads * hidden_dim]``, q and k ``[N, num_heads, attn_dim]``, v ``[N, num_heads,
    hidden_dim]``: q, k, v are views into the projection (row stride = its width). See the
    module docstring.
    """
    check_compute_uqvk_args(
        _OP_UQVK,
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
    wide = _compute_dtype(x.dtype)
    normed_x = F.layer_norm(
        x.to(wide), (x.shape[1],), norm_weight.to(wide), norm_bias.to(wide), norm_eps
    ).to(x.dtype)
    uvqk = torch.addmm(uvqk_bias.to(x.dtype), normed_x, uvqk_weight.to(x.dtype))
    return split_uvqk(uvqk, num_heads, attn_dim, hidden_dim)


def split_uvqk(
    uvqk: torch.Tensor, num_heads: int, attn_dim: int, hidden_dim: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``[N, 2H(h + a)]`` projection -> ``(silu(u), q, k, v)``, split in the order u, v, q, k."""
    u, v, q, k = torch.split(
        uvqk,
        [
            num_heads * hidden_dim,
            num_heads * hidden_dim,
            num_heads * attn_dim,
            num_heads * attn_dim,
        ],
        dim=1,
    )
    u = F.silu(u)
    q = q.view(-1, num_heads, attn_dim)
    k = k.view(-1, num_heads, attn_dim)
    v = v.view(-1, num_heads, hidden_dim)
    return u, q, k, v
