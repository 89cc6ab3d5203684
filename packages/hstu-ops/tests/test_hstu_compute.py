"""hstu_compute_uqvk and hstu_compute_output: the references, and TRITON against them.

The references are checked against the formulas written out by hand (float64) and with float64
``gradcheck``. The TRITON kernels run in Triton's interpreter on CPU tensors, loaded by the
``load_triton`` fixture of conftest.py, and are compared with the reference for the output and
the gradients of attn, u, x, the norm weight and bias and output_weight.

Dropout: the TRITON masks come from the kernel's own generator, so the reference cannot
reproduce them. The tests recover them (an identity output_weight and x = 0 make the output
equal y; they also equal :func:`dropout_keep_mask`), check values and gradients against the
reference formula with those masks, and check the rates and the independence of the streams.

Tolerances: float32 ``atol=1e-5, rtol=1e-4`` for outputs and the gradients of attn, u, x and
output_weight; ``atol=1e-4, rtol=1e-4`` for the norm weight and bias gradients, which are sums
over all rows. bfloat16 the flash-attention oracle ``max|out - ref32| <= 2 * max|ref_bf16 -
ref32| + 1e-3 * max|ref32|`` (float16 likewise), where ref32 is the reference on the upcast
inputs and ref_bf16 the reference in bfloat16.
"""

from __future__ import annotations

import math

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel
from hstu_ops.hstu_compute import hstu_compute_output, hstu_compute_uqvk
from hstu_ops.pytorch.pt_hstu_compute import (
    pytorch_hstu_compute_output,
    pytorch_hstu_compute_uqvk,
    pytorch_norm_mul_dropout,
)

BACKEND = "hstu_ops.triton.triton_hstu_compute"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-4}
FP32_NORM_PARAM_TOL = {"atol": 1e-4, "rtol": 1e-4}
BF16_REL_ATOL = 1e-3
GRAD_NAMES = ("attn", "u", "x", "norm_weight", "norm_bias", "output_weight")


# --------------------------------------------------------------------------------------------
# Inputs and helpers
# --------------------------------------------------------------------------------------------
def output_inputs(
    rows,
    heads,
    linear_dim,
    out_dim,
    *,
    group_norm,
    concat_ux,
    dtype=torch.float32,
    norm_dtype=None,
    seed=0,
    device="cpu",
):
    """attn, u, x, norm_weight, norm_bias, output_weight and an output gradient."""
    gen = torch.Generator().manual_seed(seed)
    width = heads * linear_dim
    params = heads if group_norm else width
    y_width = 3 * width if concat_ux else width
    tensors = dict(
        # Per-row offsets and scales, so the statistics matter.
        attn=torch.randn(rows, width, generator=gen) * 2 + torch.randn(rows, 1, generator=gen),
        u=torch.randn(rows, width, generator=gen),
        x=torch.randn(rows, out_dim, generator=gen),
        norm_weight=1 + 0.5 * torch.randn(params, generator=gen),
        norm_bias=0.5 * torch.randn(params, generator=gen),
        output_weight=torch.randn(y_width, out_dim, generator=gen) / math.sqrt(y_width),
    )
    dout = torch.randn(rows, out_dim, generator=gen)
    out = {}
    for name, t in tensors.items():
        kind = norm_dtype if name.startswith("norm_") and norm_dtype else dtype
        out[name] = t.to(device=device, dtype=kind)
    return out, dout.to(device=device, dtype=dtype)


def forward_backward(fn, inputs, dout, **kwargs):
    """(out, {name: gradient}) of fn(**inputs, **kwargs) for the output gradient dout."""
    leaves = {name: t.detach().clone().requires_grad_() for name, t in inputs.items()}
    out = fn(**leaves, **kwargs)
    grads = torch.autograd.grad(out, list(leaves.values()), dout)
    return out.detach(), dict(zip(leaves, grads, strict=True))


def output_options(heads, linear_dim, group_norm, concat_ux, dropout_ratio=0.0, training=True):
    return dict(
        eps=1e-5,
        dropout_ratio=dropout_ratio,
        training=training,
        concat_ux=concat_ux,
        group_norm=group_norm,
        num_heads=heads,
        linear_dim=linear_dim,
    )


def assert_fp32_close(got, ref):
    torch.testing.assert_close(got[0], ref[0], **FP32_TOL)
    for name in GRAD_NAMES:
        tol = FP32_NORM_PARAM_TOL if name.startswith("norm_") else FP32_TOL
        torch.testing.assert_close(
            got[1][name], ref[1][name], **tol, msg=lambda m, name=name: f"d{name}: {m}"
        )


def masked_formula(inputs, masks, dropout_ratio, options):
    """The reference's formula with given keep masks (u, attn, y parts) instead of F.dropout."""
    y = pytorch_norm_mul_dropout(
        inputs["attn"],
        inputs["u"],
        inputs["norm_weight"],
        inputs["norm_bias"],
        options["eps"],
        0.0,
        False,
        concat_ux=options["concat_ux"],
        group_norm=options["group_norm"],
        num_heads=options["num_heads"],
        linear_dim=options["linear_dim"],
    )
    keep = torch.cat(masks, dim=1) if options["concat_ux"] else masks[-1]
    y = torch.where(keep, y * (1.0 / (1.0 - dropout_ratio)), torch.zeros_like(y))
    return torch.addmm(inputs["x"], y, inputs["output_weight"])


def positional_output_call(inputs, num_heads, linear_dim, **kwargs):
    """The dispatcher hstu_compute_output with positional arguments (its order differs from the
    references': norm_eps before output_weight), eps 1e-5, no dropout, the layer norm."""
    return hstu_compute_output(
        inputs["attn"],
        inputs["u"],
        inputs["x"],
        inputs["norm_weight"],
        inputs["norm_bias"],
        1e-5,
        inputs["output_weight"],
        num_heads,
        linear_dim,
        0.0,
        True,
        False,
        False,
        **kwargs,
    )


def recover_y(tt, inputs, **kwargs):
    """y of a TRITON call, as its output with x = 0 and an identity output_weight."""
    rows, y_width = inputs["attn"].shape[0], inputs["output_weight"].shape[0]
    probe = dict(inputs)
    like = dict(dtype=inputs["x"].dtype, device=inputs["x"].device)
    probe["x"] = torch.zeros(rows, y_width, **like)
    probe["output_weight"] = torch.eye(y_width, **like)
    return tt.triton_hstu_compute_output(**probe, **kwargs)


# --------------------------------------------------------------------------------------------
# The references against the formulas
# --------------------------------------------------------------------------------------------
def _normalise(v: torch.Tensor, eps: float) -> torch.Tensor:
    mean = v.mean(-1, keepdim=True)
    var = ((v - mean) ** 2).mean(-1, keepdim=True)
    return (v - mean) / torch.sqrt(var + eps)


def test_reference_uqvk_is_layer_norm_matmul_split_u_v_q_k_and_silu_of_u():
    gen = torch.Generator().manual_seed(1)
    rows, dim, heads, attn_dim, hidden_dim = 7, 12, 3, 4, 5
    x = torch.randn(rows, dim, generator=gen, dtype=torch.float64)
    nw, nb = torch.randn(dim, generator=gen).double(), torch.randn(dim, generator=gen).double()
    width = 2 * heads * (hidden_dim + attn_dim)
    weight = torch.randn(dim, width, generator=gen).double()
    bias = torch.randn(width, generator=gen).double()
    u, q, k, v = pytorch_hstu_compute_uqvk(
        x, nw, nb, 1e-3, heads, attn_dim, hidden_dim, weight, bias
    )
    uvqk = _normalise(x, 1e-3) * nw + nb
    uvqk = uvqk @ weight + bias
    h, a = heads * hidden_dim, heads * attn_dim
    torch.testing.assert_close(u, torch.nn.functional.silu(uvqk[:, :h]))
    torch.testing.assert_close(v, uvqk[:, h : 2 * h].reshape(rows, heads, hidden_dim))
    torch.testing.assert_close(q, uvqk[:, 2 * h : 2 * h + a].reshape(rows, heads, attn_dim))
    torch.testing.assert_close(k, uvqk[:, 2 * h + a :].reshape(rows, heads, attn_dim))
    assert q.shape == k.shape == (rows, heads, attn_dim) and v.shape == (rows, heads, hidden_dim)


@pytest.mark.parametrize("group_norm", [False, True], ids=["layer", "group"])
@pytest.mark.parametrize("concat_ux", [False, True], ids=["y", "concat"])
def test_reference_output_formula(group_norm, concat_ux):
    heads, linear_dim = 3, 4
    inputs, _ = output_inputs(
        9, heads, linear_dim, 5, group_norm=group_norm, concat_ux=concat_ux, dtype=torch.float64
    )
    attn, u = inputs["attn"], inputs["u"]
    if group_norm:
        normed = _normalise(attn.view(9, heads, linear_dim), 1e-5)
        normed = normed * inputs["norm_weight"][:, None] + inputs["norm_bias"][:, None]
        normed = normed.reshape(9, heads * linear_dim)
    else:
        normed = _normalise(attn, 1e-5) * inputs["norm_weight"] + inputs["norm_bias"]
    y = u * normed
    if concat_ux:
        y = torch.cat([u, attn, y], dim=1)
    expected = inputs["x"] + y @ inputs["output_weight"]
    # Not training: dropout is the identity whatever its ratio.
    options = output_options(heads, linear_dim, group_norm, concat_ux, 0.5, training=False)
    torch.testing.assert_close(pytorch_hstu_compute_output(**inputs, **options), expected)


def test_reference_dropout_zeroes_and_rescales():
    inputs, _ = output_inputs(64, 2, 16, 4, group_norm=False, concat_ux=True)
    args = (inputs["attn"], inputs["u"], inputs["norm_weight"], inputs["norm_bias"], 1e-5)
    plain = pytorch_norm_mul_dropout(*args, 0.0, True, concat_ux=True)
    torch.manual_seed(3)
    dropped = pytorch_norm_mul_dropout(*args, 0.25, True, concat_ux=True)
    kept = dropped != 0
    torch.testing.assert_close(dropped[kept], plain[kept] / 0.75)
    assert abs(kept.float().mean().item() - 0.75) < 0.03  # 6144 entries: 5 sigma = 0.028
    everything = pytorch_hstu_compute_output(
        **inputs, **output_options(2, 16, False, True, dropout_ratio=1.0)
    )
    torch.testing.assert_close(everything, inputs["x"])


def test_reference_low_precision_rounds_y_once():
    inputs, _ = output_inputs(6, 2, 8, 4, group_norm=True, concat_ux=False, dtype=torch.bfloat16)

    def y_of(t):
        parts = (t["attn"], t["u"], t["norm_weight"], t["norm_bias"])
        return pytorch_norm_mul_dropout(
            *parts, 1e-5, 0.0, True, group_norm=True, num_heads=2, linear_dim=8
        )

    y = y_of(inputs)
    assert y.dtype == torch.bfloat16
    y32 = y_of({k: v.float() for k, v in inputs.items()})
    assert torch.equal(y, y32.to(torch.bfloat16))


@pytest.mark.parametrize(
    ("group_norm", "concat_ux", "dropout_ratio"),
    [(False, False, 0.0), (False, True, 0.0), (True, False, 0.0), (True, True, 0.3)],
    ids=["layer", "layer-concat", "group", "group-concat-dropout"],
)
def test_reference_output_gradcheck(group_norm, concat_ux, dropout_ratio):
    heads, linear_dim = 2, 3
    inputs, _ = output_inputs(
        5, heads, linear_dim, 4, group_norm=group_norm, concat_ux=concat_ux, dtype=torch.float64
    )
    options = output_options(heads, linear_dim, group_norm, concat_ux, dropout_ratio)

    def fn(*tensors):
        torch.manual_seed(0)  # the same dropout mask on every evaluation
        return pytorch_hstu_compute_output(**dict(zip(GRAD_NAMES, tensors, strict=True)), **options)

    leaves = [inputs[name].requires_grad_() for name in GRAD_NAMES]
    assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)


def test_reference_uqvk_gradcheck():
    gen = torch.Generator().manual_seed(2)
    dim, heads, attn_dim, hidden_dim = 5, 2, 2, 3
    width = 2 * heads * (attn_dim + hidden_dim)
    leaves = [
        torch.randn(4, dim, generator=gen),
        torch.randn(dim, generator=gen),
        torch.randn(dim, generator=gen),
        torch.randn(dim, width, generator=gen),
        torch.randn(width, generator=gen),
    ]
    leaves = [t.double().requires_grad_() for t in leaves]

    def fn(x, nw, nb, weight, bias):
        return pytorch_hstu_compute_uqvk(x, nw, nb, 1e-5, heads, attn_dim, hidden_dim, weight, bias)

    assert torch.autograd.gradcheck(fn, leaves, fast_mode=True)


# --------------------------------------------------------------------------------------------
# TRITON, float32, against the reference
# --------------------------------------------------------------------------------------------
CASES = [
    # rows, heads, linear_dim, out_dim, group_norm, concat_ux, recompute_y
    (1, 1, 100, 20, False, False, False),
    (6, 2, 20, 40, False, True, True),
    (42, 3, 20, 40, True, False, False),
    (123, 2, 20, 20, True, True, True),
    (123, 1, 40, 100, False, False, True),
    (42, 4, 10, 20, True, True, False),
]


@pytest.mark.triton
@pytest.mark.parametrize(
    ("rows", "heads", "linear_dim", "out_dim", "group_norm", "concat_ux", "recompute_y"),
    CASES,
    ids=[f"n{c[0]}-{'group' if c[4] else 'layer'}{'-concat' if c[5] else ''}" for c in CASES],
)
def test_fp32_matches_reference(
    tt, rows, heads, linear_dim, out_dim, group_norm, concat_ux, recompute_y
):
    inputs, dout = output_inputs(
        rows, heads, linear_dim, out_dim, group_norm=group_norm, concat_ux=concat_ux, seed=rows
    )
    options = output_options(heads, linear_dim, group_norm, concat_ux)
    got = forward_backward(
        tt.triton_hstu_compute_output, inputs, dout, recompute_y_in_backward=recompute_y, **options
    )
    ref = forward_backward(pytorch_hstu_compute_output, inputs, dout, **options)
    assert_fp32_close(got, ref)


@pytest.mark.triton
def test_dispatch_default_tiles_strided_attn_and_mixed_param_dtype(tt, assert_flash_oracle):
    """Through hstu_compute_output(kernel="triton"); attn is a column slice (row stride >
    width); bfloat16 activations with float32 norm parameters keep float32 gradients."""
    inputs, dout = output_inputs(
        42,
        2,
        20,
        24,
        group_norm=True,
        concat_ux=True,
        dtype=torch.bfloat16,
        norm_dtype=torch.float32,
        seed=4,
    )
    wide = torch.randn(42, 100, dtype=torch.bfloat16)
    wide[:, 30:70] = inputs["attn"]
    inputs["attn"] = wide[:, 30:70]
    assert not inputs["attn"].is_contiguous()
    kwargs = dict(norm_eps=1e-5, num_heads=2, linear_dim=20, dropout_ratio=0.0, training=True)
    kwargs.update(concat_ux=True, group_norm=True)

    def dispatched(kernel):
        def fn(attn, u, x, norm_weight, norm_bias, output_weight):
            return hstu_compute_output(
                attn,
                u,
                x,
                norm_weight,
                norm_bias,
                output_weight=output_weight,
                kernel=kernel,
                **kwargs,
            )

        return fn

    got = forward_backward(dispatched("triton"), inputs, dout)
    ref16 = forward_backward(dispatched(Kernel.PYTORCH), inputs, dout)
    assert got[1]["norm_weight"].dtype == torch.float32
    assert got[1]["attn"].dtype == torch.bfloat16
    wide_inputs = {k: v.float() for k, v in inputs.items()}
    ref32 = forward_backward(dispatched(Kernel.PYTORCH), wide_inputs, dout.float())
    assert_flash_oracle(got, ref16, ref32)


@pytest.fixture
def assert_flash_oracle(flash_oracle):
    """``assert_flash_oracle(got, ref16, ref32)`` for the output and every gradient."""

    def check(got, ref16, ref32):
        def flat(result):
            return (result[0], *(result[1][n] for n in GRAD_NAMES))

        names = ("out", *(f"d{n}" for n in GRAD_NAMES))
        flash_oracle(names, flat(got), flat(ref16), flat(ref32), rel_atol=BF16_REL_ATOL)

    return check


@pytest.mark.triton
@pytest.mark.parametrize(
    ("rows", "group_norm", "concat_ux", "dtype"),
    [
        (123, False, True, torch.bfloat16),
        (42, True, False, torch.bfloat16),
        (42, False, False, torch.float16),
    ],
    ids=["n123-layer-concat", "n42-group", "n42-layer-fp16"],
)
def test_low_precision_flash_attention_oracle(
    tt, assert_flash_oracle, rows, group_norm, concat_ux, dtype
):
    heads, linear_dim = 2, 20
    inputs, dout = output_inputs(
        rows,
        heads,
        linear_dim,
        40,
        group_norm=group_norm,
        concat_ux=concat_ux,
        dtype=dtype,
        seed=rows,
    )
    options = output_options(heads, linear_dim, group_norm, concat_ux)
    got = forward_backward(tt.triton_hstu_compute_output, inputs, dout, **options)
    ref16 = forward_backward(pytorch_hstu_compute_output, inputs, dout, **options)
    wide = {k: v.float() for k, v in inputs.items()}
    ref32 = forward_backward(pytorch_hstu_compute_output, wide, dout.float(), **options)
    assert got[0].dtype == dtype
    assert_flash_oracle(got, ref16, ref32)


@pytest.mark.triton
def test_empty_batch(tt):
    inputs, dout = output_inputs(0, 2, 8, 4, group_norm=False, concat_ux=True)
    out, grads = forward_backward(
        tt.triton_hstu_compute_output, inputs, dout, **output_options(2, 8, False, True, 0.5)
    )
    assert out.shape == (0, 4)
    assert grads["norm_weight"].shape == (16,) and not grads["norm_weight"].any()
    assert not grads["output_weight"].any()


# --------------------------------------------------------------------------------------------
# TRITON dropout
# --------------------------------------------------------------------------------------------
BIG_TILES = dict(block_n=32, num_warps=1, bwd_programs=2)  # fewer interpreted programs


@pytest.mark.triton
def test_philox_known_answers(tt, philox_known_answers):
    """Random123's known-answer vectors of Philox-4x32-10, through the kernels' generator."""
    for counter, key, expected in philox_known_answers:
        got = tt.philox4x32_10(torch.tensor([counter]), key)
        assert tuple(got[0].tolist()) == expected


@pytest.mark.triton
@pytest.mark.parametrize(
    ("group_norm", "concat_ux"), [(False, True), (True, False)], ids=["layer-concat", "group"]
)
def test_dropout_masks_are_recovered_and_match_the_formula(tt, group_norm, concat_ux):
    rows, heads, linear_dim, p, seed = 42, 2, 20, 0.3, 2024
    width = heads * linear_dim
    inputs, dout = output_inputs(
        rows, heads, linear_dim, 24, group_norm=group_norm, concat_ux=concat_ux, seed=9
    )
    options = output_options(heads, linear_dim, group_norm, concat_ux, dropout_ratio=p)
    cfg = tt.TileConfig(**BIG_TILES)
    y = recover_y(tt, inputs, seed=seed, tile_config=cfg, **options)
    parts = ("u", "attn", "y") if concat_ux else ("y",)
    masks = [tt.dropout_keep_mask(seed, rows, width, part, p) for part in parts]
    for part, mask, y_part in zip(parts, masks, y.split(width, dim=1), strict=True):
        assert torch.equal(y_part != 0, mask), part
    # Values and every gradient: the reference formula with these masks.
    for recompute_y in (False, True):
        got = forward_backward(
            tt.triton_hstu_compute_output,
            inputs,
            dout,
            seed=seed,
            tile_config=cfg,
            recompute_y_in_backward=recompute_y,
            **options,
        )
        ref = forward_backward(lambda **t: masked_formula(t, masks, p, options), inputs, dout)
        assert_fp32_close(got, ref)


@pytest.mark.triton
def test_dropout_seed_reproducibility_and_training_flag(tt):
    inputs, _ = output_inputs(20, 2, 20, 8, group_norm=False, concat_ux=True, seed=5)
    options = output_options(2, 20, False, True, dropout_ratio=0.5)
    cfg = tt.TileConfig(**BIG_TILES)
    run = lambda **kw: tt.triton_hstu_compute_output(**inputs, tile_config=cfg, **kw)  # noqa: E731
    first = run(seed=7, **options)
    assert torch.equal(first, run(seed=7, **options))
    assert not torch.equal(first, run(seed=8, **options))
    # seed=None: drawn from torch's default generator.
    torch.manual_seed(11)
    drawn = run(**options)
    torch.manual_seed(11)
    assert torch.equal(drawn, run(**options))
    assert not torch.equal(drawn, run(**options))
    # Not training, or a ratio of 0: no dropout at all.
    plain = pytorch_hstu_compute_output(**inputs, **{**options, "training": False})
    for kw in ({"training": False}, {"dropout_ratio": 0.0}):
        torch.testing.assert_close(run(seed=7, **{**options, **kw}), plain, **FP32_TOL)
    # A ratio of 1 drops everything: out = x, and nothing reaches attn or u.
    leaves = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    out = tt.triton_hstu_compute_output(**leaves, **{**options, "dropout_ratio": 1.0})
    assert torch.equal(out, inputs["x"])
    out.sum().backward()
    assert not leaves["attn"].grad.any() and not leaves["u"].grad.any()


@pytest.mark.triton
def test_dropout_rates_and_independent_streams(tt):
    rows, width, p = 100, 300, 0.3
    masks = {part: tt.dropout_keep_mask(99, rows, width, part, p) for part in ("u", "attn", "y")}
    n = rows * width
    five_sigma = 5 * math.sqrt(p * (1 - p) / n)
    for part, mask in masks.items():
        assert abs(mask.float().mean().item() - (1 - p)) < five_sigma, part
        # No row repeats another's numbers (each row has its own counters).
        assert not torch.equal(mask[0], mask[1])
    # Separate streams: two parts agree where both keep or both drop, p^2 + (1 - p)^2.
    agree = p * p + (1 - p) ** 2
    sigma = math.sqrt(agree * (1 - agree) / n)
    for a, b in (("u", "attn"), ("u", "y"), ("attn", "y")):
        rate = (masks[a] == masks[b]).float().mean().item()
        assert abs(rate - agree) < 5 * sigma, (a, b, rate)
    # Another ratio, other seeds: the rate follows the ratio.
    for ratio in (0.05, 0.5, 0.9):
        mask = tt.dropout_keep_mask(12345 + int(100 * ratio), rows, width, "y", ratio)
        sigma = math.sqrt(ratio * (1 - ratio) / n)
        assert abs(mask.float().mean().item() - (1 - ratio)) < 5 * sigma, ratio
    # The high word of the seed is part of the key.
    assert not torch.equal(
        tt.dropout_keep_mask(1 << 40, 4, 64, "y", p), tt.dropout_keep_mask(0, 4, 64, "y", p)
    )


@pytest.mark.triton
def test_y_mask_is_the_same_with_and_without_concat(tt):
    rows, heads, linear_dim, p = 33, 1, 40, 0.4
    options = output_options(heads, linear_dim, False, False, dropout_ratio=p)
    cfg = tt.TileConfig(**BIG_TILES)
    inputs, _ = output_inputs(rows, heads, linear_dim, 8, group_norm=False, concat_ux=False)
    y_alone = recover_y(tt, inputs, seed=5, tile_config=cfg, **options)
    inputs, _ = output_inputs(rows, heads, linear_dim, 8, group_norm=False, concat_ux=True)
    y_concat = recover_y(tt, inputs, seed=5, tile_config=cfg, **{**options, "concat_ux": True})
    assert torch.equal(y_alone, y_concat[:, 2 * linear_dim :])


@pytest.mark.triton
def test_recompute_y_gives_identical_gradients(tt):
    inputs, dout = output_inputs(33, 3, 20, 16, group_norm=True, concat_ux=True, seed=3)
    options = output_options(3, 20, True, True, dropout_ratio=0.2)
    cfg = tt.TileConfig(**BIG_TILES)
    results = [
        forward_backward(
            tt.triton_hstu_compute_output,
            inputs,
            dout,
            seed=1,
            tile_config=cfg,
            recompute_y_in_backward=recompute,
            **options,
        )
        for recompute in (False, True)
    ]
    assert torch.equal(results[0][0], results[1][0])
    for name in GRAD_NAMES:
        assert torch.equal(results[0][1][name], results[1][1][name]), name
    # Only output_weight needs a gradient: y comes from the forward kernel run again.
    for recompute in (False, True):
        weight = inputs["output_weight"].clone().requires_grad_()
        out = tt.triton_hstu_compute_output(
            **{**inputs, "output_weight": weight},
            seed=1,
            tile_config=cfg,
            recompute_y_in_backward=recompute,
            **options,
        )
        (grad,) = torch.autograd.grad(out, weight, dout)
        assert torch.equal(grad, results[0][1]["output_weight"])


# --------------------------------------------------------------------------------------------
# compute_uqvk and the dispatch
# --------------------------------------------------------------------------------------------
def uqvk_inputs(rows, dim, heads, attn_dim, hidden_dim, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    width = 2 * heads * (hidden_dim + attn_dim)
    return [
        torch.randn(rows, dim, generator=gen).to(dtype),
        (1 + 0.3 * torch.randn(dim, generator=gen)).to(dtype),
        (0.3 * torch.randn(dim, generator=gen)).to(dtype),
        1e-5,
        heads,
        attn_dim,
        hidden_dim,
        (torch.randn(dim, width, generator=gen) / math.sqrt(dim)).to(dtype),
        torch.randn(width, generator=gen).to(dtype),
    ]


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uqvk_triton_dispatch_matches_reference(tt, dtype):
    args = uqvk_inputs(42, 40, 2, 8, 12, dtype=dtype, seed=1)
    leaves = [a.clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    got = hstu_compute_uqvk(*leaves, kernel=Kernel.TRITON)
    ref = pytorch_hstu_compute_uqvk(*args)
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape and g.dtype == dtype
        torch.testing.assert_close(g, r, **FP32_TOL)
    sum(t.float().square().sum() for t in got).backward()
    assert all(a.grad is not None for a in leaves if isinstance(a, torch.Tensor))


@pytest.mark.triton
def test_default_kernel_triton_runs_triton(tt, monkeypatch):
    calls = []
    real = tt.triton_hstu_compute_output
    monkeypatch.setattr(
        tt, "triton_hstu_compute_output", lambda *a, **kw: calls.append(1) or real(*a, **kw)
    )
    inputs, _ = output_inputs(6, 2, 8, 4, group_norm=False, concat_ux=False)
    hstu_ops.set_default_kernel(Kernel.TRITON)
    got = positional_output_call(inputs, 2, 8)
    assert calls == [1]
    ref = pytorch_hstu_compute_output(**inputs, **output_options(2, 8, False, False))
    torch.testing.assert_close(got, ref, **FP32_TOL)


def test_kernels_available():
    inputs, _ = output_inputs(3, 1, 4, 2, group_norm=False, concat_ux=False)
    with pytest.raises(
        ValueError, match=r"hstu_compute_output has no NATIVE kernel.*PYTORCH, TRITON"
    ):
        positional_output_call(inputs, 1, 4, kernel="native")
    with pytest.raises(ValueError, match=r"hstu_compute_uqvk has no NATIVE kernel"):
        hstu_compute_uqvk(*uqvk_inputs(2, 4, 1, 2, 2), kernel=Kernel.NATIVE)
    # The default NATIVE falls back to the reference.
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    assert hstu_compute_uqvk(*uqvk_inputs(2, 4, 1, 2, 2))[0].shape == (2, 2)


# --------------------------------------------------------------------------------------------
# Argument errors (both kernels check the same way)
# --------------------------------------------------------------------------------------------
def _output_call(kernel, **changes):
    inputs, _ = output_inputs(4, 2, 3, 5, group_norm=True, concat_ux=True)
    kwargs = dict(
        **inputs,
        norm_eps=1e-5,
        num_heads=2,
        linear_dim=3,
        dropout_ratio=0.1,
        training=True,
        concat_ux=True,
        group_norm=True,
    )
    kwargs.update(changes)
    return hstu_compute_output(**kwargs, kernel=kernel)


OUTPUT_ERRORS = [
    (dict(attn=torch.randn(4, 6, 1)), ValueError, r"attn must be 2-D \[N, width\]"),
    (
        dict(u=torch.randn(4, 5)),
        ValueError,
        r"u must have the shape of attn \[4, 6\], got \[4, 5\]",
    ),
    (dict(u=torch.randn(4, 6).double()), TypeError, r"u must have the dtype of attn"),
    (dict(attn=torch.ones(4, 6, dtype=torch.int32)), TypeError, r"attn must have a floating"),
    (
        dict(linear_dim=4),
        ValueError,
        r"with group_norm, num_heads \* linear_dim = 2 \* 4 must equal the width of attn \(6\)",
    ),
    (dict(num_heads=0), ValueError, r"num_heads must be a positive int, got 0"),
    (
        dict(norm_weight=torch.ones(6)),
        ValueError,
        r"norm_weight of the group norm must have shape \[2\]",
    ),
    (dict(group_norm=False), ValueError, r"norm_weight of the layer norm must have shape \[6\]"),
    (dict(norm_eps=-1.0), ValueError, r"norm_eps must be a finite number >= 0, got -1.0"),
    (dict(dropout_ratio=1.5), ValueError, r"dropout_ratio must be in \[0, 1\], got 1.5"),
    (dict(x=torch.randn(3, 5)), ValueError, r"x must be 2-D \[N, out\] with the N = 4 of attn"),
    (dict(x=torch.randn(4, 5).double()), TypeError, r"x must have the dtype of attn"),
    (dict(output_weight=torch.randn(6, 5)), ValueError, r"output_weight must have shape \[18, 5\]"),
    (dict(concat_ux=False), ValueError, r"output_weight must have shape \[6, 5\]"),
]


@pytest.mark.parametrize(("changes", "error", "message"), OUTPUT_ERRORS)
@pytest.mark.parametrize("kernel", ["pytorch", pytest.param("triton", marks=pytest.mark.triton)])
def test_output_argument_errors(request, kernel, changes, error, message):
    if kernel == "triton":
        request.getfixturevalue("tt")
    with pytest.raises(error, match=f"hstu_compute_output: {message}"):
        _output_call(kernel, **changes)


UQVK_ERRORS = [
    (0, torch.randn(5), ValueError, r"x must be 2-D \[N, D\]"),
    (1, torch.randn(3), ValueError, r"norm_weight must have shape \[4\] \(the width of x\)"),
    (3, float("nan"), ValueError, r"norm_eps must be a finite number >= 0"),
    (5, -2, ValueError, r"attn_dim must be a positive int, got -2"),
    (7, torch.randn(4, 9), ValueError, r"uvqk_weight must have shape \[4, 8\]"),
    (8, torch.randn(9), ValueError, r"uvqk_bias must have shape \[8\], got \[9\]"),
    (8, torch.ones(8, dtype=torch.int64), TypeError, r"uvqk_bias must have a floating dtype"),
]


@pytest.mark.parametrize(("index", "value", "error", "message"), UQVK_ERRORS)
@pytest.mark.parametrize("kernel", ["pytorch", pytest.param("triton", marks=pytest.mark.triton)])
def test_uqvk_argument_errors(request, kernel, index, value, error, message):
    if kernel == "triton":
        request.getfixturevalue("tt")
    args = uqvk_inputs(3, 4, 1, 2, 2)
    args[index] = value
    with pytest.raises(error, match=f"hstu_compute_uqvk: {message}"):
        hstu_compute_uqvk(*args, kernel=kernel)


@pytest.mark.triton
def test_triton_only_errors(tt, load_triton):
    inputs, _ = output_inputs(4, 1, 8, 2, group_norm=False, concat_ux=False)
    options = output_options(1, 8, False, False)
    with pytest.raises(
        TypeError, match=r"supports float16, bfloat16 and float32, got torch.float64"
    ):
        tt.triton_hstu_compute_output(**{k: v.double() for k, v in inputs.items()}, **options)
    with pytest.raises(ValueError, match=r"seed must be None or an int >= 0, got -1"):
        tt.triton_hstu_compute_output(**inputs, seed=-1, **options)
    wide, _ = output_inputs(2, 1, 5000, 2, group_norm=False, concat_ux=False)
    with pytest.raises(ValueError, match=r"at most 4096 elements.*1 group\(s\) of 5000"):
        tt.triton_hstu_compute_output(**wide, **output_options(1, 5000, False, False))
    with pytest.raises(ValueError, match=r"block_n must be a power of 2 >= 1, got 3"):
        tt.TileConfig(block_n=3)
    with pytest.raises(ValueError, match=r"part must be one of"):
        tt.dropout_keep_mask(0, 2, 2, "x", 0.5)
    with load_triton(BACKEND, interpret=False) as compiled:
        with pytest.raises(ValueError, match=r"needs CUDA or ROCm tensors, got cpu tensors"):
            positional_output_call(inputs, 1, 8, kernel="triton")
        assert not compiled.INTERPRETED


# --------------------------------------------------------------------------------------------
# Compilation for a GPU target, without a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.triton
def test_kernels_compile_for_gpus(gpu_target, load_triton):
    """The interpreter does not type-check like the compiler: compile the real thing, no GPU."""
    types = {
        **dict.fromkeys(("ATTN", "U", "W", "B", "Y", "DY", "DATTN", "DU"), "*bf16"),
        **dict.fromkeys(("Mean", "Rstd", "DW_PARTIAL", "DB_PARTIAL"), "*fp32"),
        **dict.fromkeys(("eps", "dropout_ratio", "dropout_scale"), "fp32"),
    }
    with load_triton(BACKEND, interpret=False) as compiled:
        # The heaviest variant at the widest row the kernels take, and an HSTU-like group norm.
        for groups, group_width, group_norm in ((1, 4096, False), (4, 128, True)):
            cfg = compiled.default_tile_config(groups, group_width)
            constants = dict(
                GROUP_NORM=group_norm,
                CONCAT_UX=True,
                DROPOUT=True,
                COMPUTE_Y=True,
                BLOCK_N=cfg.block_n,
                BLOCK_H=groups,
                BLOCK_L=group_width,
                INTERPRET_BF16=False,
            )
            for kernel in (
                compiled._norm_mul_dropout_fwd_kernel,
                compiled._norm_mul_dropout_bwd_kernel,
            ):
                gpu_target.compile(kernel, constants, {"num_warps": cfg.num_warps}, types=types)


# --------------------------------------------------------------------------------------------
# On a GPU: compiled kernels
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("group_norm", "concat_ux"), [(False, True), (True, False)], ids=["layer-concat", "group"]
)
def test_gpu_matches_reference(load_triton, assert_flash_oracle, dtype, group_norm, concat_ux):
    rows, heads, linear_dim, out_dim = 3001, 4, 128, 512
    with load_triton(BACKEND, interpret=False) as compiled:
        inputs, dout = output_inputs(
            rows,
            heads,
            linear_dim,
            out_dim,
            group_norm=group_norm,
            concat_ux=concat_ux,
            dtype=dtype,
            seed=1,
            device="cuda",
        )
        options = output_options(heads, linear_dim, group_norm, concat_ux)
        got = forward_backward(compiled.triton_hstu_compute_output, inputs, dout, **options)
        if dtype == torch.float32:
            # Matmuls and sums over 3001 rows in a different order than torch's.
            ref = forward_backward(pytorch_hstu_compute_output, inputs, dout, **options)
            torch.testing.assert_close(got[0], ref[0], atol=1e-4, rtol=1e-4)
            for name in GRAD_NAMES:
                torch.testing.assert_close(got[1][name], ref[1][name], atol=1e-3, rtol=1e-3)
        else:
            ref16 = forward_backward(pytorch_hstu_compute_output, inputs, dout, **options)
            wide = {k: v.float() for k, v in inputs.items()}
            ref32 = forward_backward(pytorch_hstu_compute_output, wide, dout.float(), **options)
            assert_flash_oracle(got, ref16, ref32)
        # Dropout: the mask recovered from y is the debug helper's, on the device too.
        options = output_options(heads, linear_dim, group_norm, concat_ux, dropout_ratio=0.25)
        # The first 257 rows (the parameters are whole).
        head = {k: v[:257] if k in ("attn", "u", "x") else v for k, v in inputs.items()}
        y = recover_y(compiled, head, seed=3, **options)
        keep = compiled.dropout_keep_mask(3, 257, heads * linear_dim, "y", 0.25, device="cuda")
        assert torch.equal(y[:, -heads * linear_dim :] != 0, keep)
        # The backward regenerates the masks, and y where asked to, exactly.
        results = [
            forward_backward(
                compiled.triton_hstu_compute_output,
                inputs,
                dout,
                seed=3,
                recompute_y_in_backward=recompute,
                **options,
            )
            for recompute in (False, True)
        ]
        for name in GRAD_NAMES:
            assert torch.equal(results[0][1][name], results[1][1][name]), name
        if dtype == torch.float32:
            width = heads * linear_dim
            parts = ("u", "attn", "y") if concat_ux else ("y",)
            masks = [
                compiled.dropout_keep_mask(3, rows, width, part, 0.25, device="cuda")
                for part in parts
            ]
            ref = forward_backward(
                lambda **t: masked_formula(t, masks, 0.25, options), inputs, dout
            )
            torch.testing.assert_close(results[0][0], ref[0], atol=1e-4, rtol=1e-4)
            for name in GRAD_NAMES:
                torch.testing.assert_close(results[0][1][name], ref[1][name], atol=1e-3, rtol=1e-3)
