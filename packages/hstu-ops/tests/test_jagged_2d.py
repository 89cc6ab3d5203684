"""2-D jagged ops: concat_2D_jagged, split_2D_jagged and jagged_dense_bmm_broadcast_add.

The PYTORCH references are checked against plain per-sequence loops (and ``gradcheck`` in
float64); the TRITON kernels against the references, in Triton's interpreter on CPU tensors
(the module is loaded by the ``load_triton`` fixture of conftest.py, one module object per
mode). ``slow`` tests compile the kernels for sm_90 and gfx942 without a GPU; ``gpu`` tests
(skipped without CUDA) compare the compiled kernels with the references.

Tolerances: concat and split only move values, so outputs and gradients must be bit-identical
(``torch.equal``) for every kernel and dtype. jagged_dense_bmm_broadcast_add: float32 ``atol=1e-5,
rtol=1e-4`` (IEEE float32 products, another summation order); bfloat16 and float16 the
flash-attention oracle ``max|out - ref32| <= 2 * max|ref16 - ref32| + 1e-4`` for the output and
the three gradients, ref32 being the reference on the upcast inputs and ref16 the reference in
the low precision.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import hstu_ops.jagged as jagged_ops
from hstu_ops import Kernel
from hstu_ops.pytorch.pt_jagged_2d import (
    pytorch_concat_2D_jagged,
    pytorch_jagged_dense_bmm_broadcast_add,
    pytorch_split_2D_jagged,
)

BACKEND = "hstu_ops.triton.triton_jagged"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-4}
LOW_PRECISION_ATOL = 1e-4


# --------------------------------------------------------------------------------------------
# Inputs and oracles
# --------------------------------------------------------------------------------------------
def _offsets(lengths, dtype=torch.int64, device="cpu"):
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=dtype, device=device)


def _values(gen, rows, d, dtype):
    if dtype.is_floating_point:
        return torch.randn(rows, d, generator=gen).to(dtype)
    low = 0 if dtype == torch.uint8 else -100
    return torch.randint(low, 100, (rows, d), generator=gen, dtype=dtype)


def _lengths(side, lengths, dense_len):
    return [dense_len] * len(lengths) if side == "dense" else list(lengths)


def _case(gen, left, right, lengths_l, lengths_r, d, dtype, odtype, dense_l=3, dense_r=2):
    """Concat arguments (values_left, values_right, max_len_left, max_len_right, offsets_left,
    offsets_right) and the per-sequence lengths of both sides; ``left`` / ``right`` are
    "jagged" or "dense"."""
    lens_l = _lengths(left, lengths_l, dense_l)
    lens_r = _lengths(right, lengths_r, dense_r)
    values_l = _values(gen, sum(lens_l), d, dtype)
    values_r = _values(gen, sum(lens_r), d, dtype)
    args = (
        values_l,
        values_r,
        dense_l if left == "dense" else None,
        dense_r if right == "dense" else None,
        None if left == "dense" else _offsets(lens_l, odtype),
        None if right == "dense" else _offsets(lens_r, odtype),
    )
    return args, lens_l, lens_r


def _loop_concat(values_l, values_r, lens_l, lens_r):
    parts, start_l, start_r = [], 0, 0
    for n_l, n_r in zip(lens_l, lens_r, strict=True):
        parts += [values_l[start_l : start_l + n_l], values_r[start_r : start_r + n_r]]
        start_l, start_r = start_l + n_l, start_r + n_r
    return torch.cat(parts) if parts else values_l[:0]


def _split_args(concat_args):
    """split_2D_jagged's (total_len_left, ..., offsets_right) for the sides of a concat."""
    return (None, None, *concat_args[2:])


def _loop_bmm(lengths, jagged, dense, bias):
    """Oracle in float64, sequence by sequence."""
    out, start = [], 0
    for b, n in enumerate(lengths):
        rows = jagged[start : start + n].double()
        out.append(rows @ dense[b].double() + bias[b].double())
        start += n
    return torch.cat(out) if out else jagged.new_zeros((0, dense.shape[2]), dtype=torch.float64)


LENGTHS_L = [0, 1, 6, 42, 0, 123, 5]
LENGTHS_R = [3, 0, 2, 7, 0, 1, 0]
# The interpreter runs programs one by one: shorter sequences where programs are small.
SHORT_L = [0, 1, 6, 42, 0, 5]
SHORT_R = [3, 0, 2, 7, 0, 1]
SINGLE_ROW_L = [0, 1, 6, 17, 0, 5]
SIDES = [("jagged", "jagged"), ("dense", "jagged"), ("jagged", "dense"), ("dense", "dense")]


# --------------------------------------------------------------------------------------------
# The references against loops, and gradcheck
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("left", "right"), SIDES, ids=["-".join(s) for s in SIDES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("odtype", [torch.int32, torch.int64])
def test_reference_concat_and_split_match_loops(left, right, dtype, odtype):
    gen = torch.Generator().manual_seed(1)
    for batch_l, batch_r, d in ((LENGTHS_L, LENGTHS_R, 20), ([], [], 5), ([4], [0], 1)):
        args, lens_l, lens_r = _case(gen, left, right, batch_l, batch_r, d, dtype, odtype)
        max_seq_len = max([a + b for a, b in zip(lens_l, lens_r, strict=True)], default=0)
        joined = pytorch_concat_2D_jagged(max_seq_len, *args)
        assert torch.equal(joined, _loop_concat(args[0], args[1], lens_l, lens_r))
        if (left, right) == ("dense", "dense"):
            continue  # a split needs one jagged side
        got_l, got_r = pytorch_split_2D_jagged(max_seq_len, joined, *_split_args(args))
        assert torch.equal(got_l, args[0]) and torch.equal(got_r, args[1])


def test_reference_split_total_lengths_and_bounds():
    gen = torch.Generator().manual_seed(2)
    args, lens_l, lens_r = _case(
        gen, "jagged", "jagged", LENGTHS_L, LENGTHS_R, 4, torch.float32, torch.int64
    )
    joined = pytorch_concat_2D_jagged(200, *args)
    # Row counts given; the max_len of a jagged side is a bound, one that holds here.
    got = pytorch_split_2D_jagged(130, joined, sum(lens_l), sum(lens_r), 123, 7, *args[4:])
    assert torch.equal(got[0], args[0]) and torch.equal(got[1], args[1])


def gradcheck(fn, inputs):
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_reference_gradcheck_float64():
    gen = torch.Generator().manual_seed(3)
    lens_l, lens_r = [2, 0, 3], [1, 2, 0]
    left = torch.randn(5, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    right = torch.randn(3, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    offsets_l, offsets_r = _offsets(lens_l), _offsets(lens_r)
    gradcheck(
        lambda a, b: pytorch_concat_2D_jagged(5, a, b, None, None, offsets_l, offsets_r),
        (left, right),
    )
    dense_r = torch.randn(6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    gradcheck(
        lambda a, b: pytorch_concat_2D_jagged(5, a, b, None, 2, offsets_l, None), (left, dense_r)
    )
    joined = torch.randn(8, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    gradcheck(
        lambda x: pytorch_split_2D_jagged(5, x, None, None, None, None, offsets_l, offsets_r),
        (joined,),
    )
    jag = torch.randn(5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    dense = torch.randn(3, 4, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, 2, generator=gen, dtype=torch.float64, requires_grad=True)
    gradcheck(
        lambda j, w, c: pytorch_jagged_dense_bmm_broadcast_add(3, offsets_l, j, w, c),
        (jag, dense, bias),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_reference_bmm_matches_loop(dtype):
    gen = torch.Generator().manual_seed(4)
    lengths = [0, 1, 6, 42, 123]
    offsets = _offsets(lengths, torch.int32)
    jag = torch.randn(sum(lengths), 20, generator=gen).to(dtype)
    dense = torch.randn(len(lengths), 20, 40, generator=gen).to(dtype)
    bias = torch.randn(len(lengths), 40, generator=gen).to(dtype)
    out = pytorch_jagged_dense_bmm_broadcast_add(123, offsets, jag, dense, bias)
    assert out.dtype == dtype and out.shape == (sum(lengths), 40)
    want = _loop_bmm(lengths, jag, dense, bias).to(dtype)
    tol = FP32_TOL if dtype != torch.bfloat16 else {"atol": 0.05, "rtol": 0.01}
    torch.testing.assert_close(out, want, **tol)


# --------------------------------------------------------------------------------------------
# TRITON concat / split against the reference
# --------------------------------------------------------------------------------------------
def _forward_backward_concat(fn, max_seq_len, args, d_out):
    left, right = (a.detach().clone().requires_grad_() for a in args[:2])
    out = fn(max_seq_len, left, right, *args[2:])
    d_left, d_right = torch.autograd.grad(out, (left, right), d_out)
    return out.detach(), d_left, d_right


def _forward_backward_split(fn, max_seq_len, values, split_args, d_left, d_right):
    values = values.detach().clone().requires_grad_()
    left, right = fn(max_seq_len, values, *split_args)
    (d_values,) = torch.autograd.grad((left, right), values, (d_left, d_right))
    return left.detach(), right.detach(), d_values


LAYOUTS = [1, 4, None]  # single-row, multi-row of 4 rows, the default (16 rows here)


@pytest.mark.triton
@pytest.mark.parametrize(("left", "right"), SIDES, ids=["-".join(s) for s in SIDES])
@pytest.mark.parametrize("rows_per_program", LAYOUTS, ids=["single-row", "multi-row", "default"])
def test_triton_concat_and_split_match_reference(tt, left, right, rows_per_program):
    # Cycle the dtypes over the cases rather than multiplying the (slow) interpreter runs.
    case = SIDES.index((left, right)) + LAYOUTS.index(rows_per_program)
    dtype = (torch.float32, torch.bfloat16, torch.float16)[case % 3]
    odtype = (torch.int64, torch.int32)[case % 2]
    d = (20, 40, 100)[case % 3]  # not multiples of the interpreter's 32-wide row chunks
    gen = torch.Generator().manual_seed(10 + case)
    lengths = {1: (SINGLE_ROW_L, SHORT_R), 4: (SHORT_L, SHORT_R), None: (LENGTHS_L, LENGTHS_R)}[
        rows_per_program
    ]
    args, *_ = _case(gen, left, right, *lengths, d, dtype, odtype)
    max_seq_len = 130
    ref_out = pytorch_concat_2D_jagged(max_seq_len, *args)
    d_out = torch.randn(ref_out.shape, generator=gen).to(dtype)

    def triton_concat(*a):
        return tt.triton_concat_2D_jagged(*a, rows_per_program=rows_per_program)

    got = _forward_backward_concat(triton_concat, max_seq_len, args, d_out)
    ref = _forward_backward_concat(pytorch_concat_2D_jagged, max_seq_len, args, d_out)
    for name, g, r in zip(("out", "d_left", "d_right"), got, ref, strict=True):
        assert g.dtype == r.dtype and torch.equal(g, r), name
    if (left, right) == ("dense", "dense"):
        return

    def triton_split(*a):
        return tt.triton_split_2D_jagged(*a, rows_per_program=rows_per_program)

    d_l, d_r = (torch.randn(a.shape, generator=gen).to(dtype) for a in args[:2])
    split_args = _split_args(args)
    got = _forward_backward_split(triton_split, max_seq_len, ref_out, split_args, d_l, d_r)
    ref = _forward_backward_split(
        pytorch_split_2D_jagged, max_seq_len, ref_out, split_args, d_l, d_r
    )
    for name, g, r in zip(("left", "right", "d_values"), got, ref, strict=True):
        assert g.dtype == r.dtype and torch.equal(g, r), name


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float64, torch.uint8])
def test_triton_concat_split_other_dtypes_and_one_wide_rows(tt, dtype):
    gen = torch.Generator().manual_seed(20)
    for d, rows in ((1, 8), (3, 1)):
        args, lens_l, lens_r = _case(
            gen, "jagged", "dense", [5, 0, 2], [0, 0, 0], d, dtype, torch.int32, dense_r=2
        )
        got = tt.triton_concat_2D_jagged(7, *args, rows_per_program=rows)
        assert torch.equal(got, _loop_concat(args[0], args[1], lens_l, lens_r))
        left, right = tt.triton_split_2D_jagged(7, got, *_split_args(args), rows_per_program=rows)
        assert torch.equal(left, args[0]) and torch.equal(right, args[1])


@pytest.mark.triton
def test_triton_strided_values_and_dispatch(tt):
    """Row-strided values (slices of wider rows), through the dispatcher with kernel="triton"."""
    gen = torch.Generator().manual_seed(21)
    lens_l, lens_r = [4, 0, 9], [2, 5, 0]
    wide_l = torch.randn(sum(lens_l), 30, generator=gen)
    wide_r = torch.randn(sum(lens_r), 30, generator=gen)
    left, right = wide_l[:, 3:23], wide_r[:, 5:25]
    assert left.stride(0) == 30
    offsets_l, offsets_r = _offsets(lens_l), _offsets(lens_r)
    for kernel in ("triton", Kernel.PYTORCH):
        out = jagged_ops.concat_2D_jagged(
            12, left, right, offsets_left=offsets_l, offsets_right=offsets_r, kernel=kernel
        )
        assert torch.equal(out, _loop_concat(left, right, lens_l, lens_r))
        strided_out = torch.cat([out, out], dim=1)[:, :20]
        got = jagged_ops.split_2D_jagged(
            12, strided_out, offsets_left=offsets_l, offsets_right=offsets_r, kernel=kernel
        )
        assert torch.equal(got[0], left) and torch.equal(got[1], right)


@pytest.mark.triton
def test_triton_split_gradient_of_one_output_only(tt):
    """The unused output's gradient is zeros (autograd materialises it)."""
    gen = torch.Generator().manual_seed(22)
    offsets_l, offsets_r = _offsets([3, 1]), _offsets([2, 2])
    values = torch.randn(8, 20, generator=gen, requires_grad=True)
    grads = []
    for fn in (tt.triton_split_2D_jagged, pytorch_split_2D_jagged):
        left, _ = fn(6, values, None, None, None, None, offsets_l, offsets_r)
        (grad,) = torch.autograd.grad(left.sum(), values)
        grads.append(grad)
    assert torch.equal(grads[0], grads[1])


@pytest.mark.triton
def test_triton_empty_inputs(tt):
    for lens_l, lens_r, d in (([], [], 8), ([0, 0], [0, 0], 8), ([2, 1], [0, 3], 0)):
        args, *_ = _case(
            torch.Generator(), "jagged", "jagged", lens_l, lens_r, d, torch.float32, torch.int64
        )
        out = tt.triton_concat_2D_jagged(5, *args)
        assert out.shape == (sum(lens_l) + sum(lens_r), d)
        left, right = tt.triton_split_2D_jagged(5, out, *_split_args(args))
        assert left.shape == (sum(lens_l), d) and right.shape == (sum(lens_r), d)


# --------------------------------------------------------------------------------------------
# TRITON jagged_dense_bmm_broadcast_add against the reference
# --------------------------------------------------------------------------------------------
def _bmm_inputs(gen, lengths, k, n, dtype, odtype=torch.int64):
    offsets = _offsets(lengths, odtype)
    jag = torch.randn(sum(lengths), k, generator=gen).to(dtype)
    dense = torch.randn(len(lengths), k, n, generator=gen).to(dtype)
    bias = torch.randn(len(lengths), n, generator=gen).to(dtype)
    d_out = torch.randn(sum(lengths), n, generator=gen).to(dtype)
    return offsets, jag, dense, bias, d_out


def _bmm_forward_backward(fn, max_seq_len, offsets, jag, dense, bias, d_out, **kw):
    jag, dense, bias = (x.detach().clone().requires_grad_() for x in (jag, dense, bias))
    out = fn(max_seq_len, offsets, jag, dense, bias, **kw)
    grads = torch.autograd.grad(out, (jag, dense, bias), d_out)
    return (out.detach(), *grads)


BMM_NAMES = ("out", "d_jagged", "d_dense", "d_bias")


@pytest.mark.triton
@pytest.mark.parametrize(
    ("k", "n", "tiles", "lengths"),
    [
        (20, 40, None, [0, 1, 6, 42, 123]),  # the interpreter's default 32 x 32 x 32 tiles
        (100, 20, (32, 16, 32), [0, 1, 6, 42]),  # non-square tiles
        (40, 1, (16, 16, 16), [0, 1, 6, 42, 123]),
    ],
)
def test_triton_bmm_fp32_matches_reference(tt, k, n, tiles, lengths):
    gen = torch.Generator().manual_seed(k + n)
    odtype = torch.int32 if k == 100 else torch.int64
    inputs = _bmm_inputs(gen, lengths, k, n, torch.float32, odtype)
    cfg = None if tiles is None else tt.BmmBlockConfig(*tiles)
    got = _bmm_forward_backward(
        tt.triton_jagged_dense_bmm_broadcast_add, 130, *inputs, block_config=cfg
    )
    ref = _bmm_forward_backward(pytorch_jagged_dense_bmm_broadcast_add, 130, *inputs)
    for name, g, r in zip(BMM_NAMES, got, ref, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.triton
def test_triton_bmm_strided_inputs_and_dispatch(tt):
    """jagged sliced from wider rows, dense transposed in memory, bias a column slice."""
    gen = torch.Generator().manual_seed(30)
    lengths = [7, 0, 19]
    offsets = _offsets(lengths, torch.int32)
    jag = torch.randn(26, 50, generator=gen)[:, 10:30]
    dense = torch.randn(3, 24, 20, generator=gen).transpose(1, 2)  # [3, 20, 24], strided
    bias = torch.randn(3, 48, generator=gen)[:, ::2]  # non-unit stride along N
    d_out = torch.randn(26, 24, generator=gen)
    got = _bmm_forward_backward(
        jagged_ops.jagged_dense_bmm_broadcast_add,
        19,
        offsets,
        jag,
        dense,
        bias,
        d_out,
        kernel="triton",
    )
    ref = _bmm_forward_backward(
        pytorch_jagged_dense_bmm_broadcast_add, 19, offsets, jag, dense, bias, d_out
    )
    for name, g, r in zip(BMM_NAMES, got, ref, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.triton
@pytest.mark.parametrize(
    ("dtype", "lengths"), [(torch.bfloat16, [0, 1, 6, 42, 123]), (torch.float16, [1, 0, 42, 6])]
)
def test_triton_bmm_low_precision_oracle(tt, flash_oracle, dtype, lengths):
    gen = torch.Generator().manual_seed(31)
    offsets, *tensors = _bmm_inputs(gen, lengths, 40, 20, torch.float32)
    low = [t.to(dtype) for t in tensors]
    got = _bmm_forward_backward(tt.triton_jagged_dense_bmm_broadcast_add, 123, offsets, *low)
    ref16 = _bmm_forward_backward(pytorch_jagged_dense_bmm_broadcast_add, 123, offsets, *low)
    ref32 = _bmm_forward_backward(
        pytorch_jagged_dense_bmm_broadcast_add, 123, offsets, *(t.float() for t in low)
    )
    assert got[0].dtype == dtype
    flash_oracle(BMM_NAMES, got, ref16, ref32, atol=LOW_PRECISION_ATOL)


@pytest.mark.triton
def test_triton_bmm_backward_is_deterministic_and_degenerate_shapes(tt):
    gen = torch.Generator().manual_seed(32)
    inputs = _bmm_inputs(gen, [37, 0, 12], 24, 20, torch.float32)
    first = _bmm_forward_backward(tt.triton_jagged_dense_bmm_broadcast_add, 40, *inputs)
    second = _bmm_forward_backward(tt.triton_jagged_dense_bmm_broadcast_add, 40, *inputs)
    for a, b in zip(first, second, strict=True):
        assert torch.equal(a, b)
    # K == 0 (the output is the bias), N == 0, no rows, no sequences.
    for lengths, k, n in (([3, 0, 2], 0, 5), ([3, 1], 4, 0), ([0, 0], 4, 3), ([], 4, 3)):
        inputs = _bmm_inputs(gen, lengths, k, n, torch.float32)
        got = _bmm_forward_backward(tt.triton_jagged_dense_bmm_broadcast_add, 4, *inputs)
        ref = _bmm_forward_backward(pytorch_jagged_dense_bmm_broadcast_add, 4, *inputs)
        for name, g, r in zip(BMM_NAMES, got, ref, strict=True):
            assert g.shape == r.shape, name
            torch.testing.assert_close(g, r, **FP32_TOL)


# --------------------------------------------------------------------------------------------
# Argument errors: both kernels, same messages
# --------------------------------------------------------------------------------------------
def _t(values, dtype=torch.int64):
    return torch.tensor(values, dtype=dtype)


_V = torch.zeros(5, 4)
_OFF = _t([0, 2, 5])
_CONCAT = jagged_ops.concat_2D_jagged
_SPLIT = jagged_ops.split_2D_jagged
_BMM = jagged_ops.jagged_dense_bmm_broadcast_add

ERROR_CASES = [
    (
        "concat_values_1d",
        lambda k: _CONCAT(5, torch.zeros(5), _V, None, None, _OFF, _OFF, kernel=k),
        ValueError,
        r"concat_2D_jagged: values_left must be 2-D \[rows, D\], got shape \[5\]",
    ),
    (
        "concat_width_mismatch",
        lambda k: _CONCAT(9, _V, torch.zeros(5, 3), None, None, _OFF, _OFF, kernel=k),
        ValueError,
        r"values_left and values_right must have the same row width D",
    ),
    (
        "concat_dtype_mismatch",
        lambda k: _CONCAT(9, _V, _V.double(), None, None, _OFF, _OFF, kernel=k),
        TypeError,
        r"values_left and values_right must have the same dtype, got float32 and float64",
    ),
    (
        "concat_dense_without_max_len",
        lambda k: _CONCAT(9, _V, _V, None, None, None, _OFF, kernel=k),
        ValueError,
        r"max_len_left is required when offsets_left is None",
    ),
    (
        "concat_dense_rows",
        lambda k: _CONCAT(9, torch.zeros(7, 4), _V, 3, None, None, _OFF, kernel=k),
        ValueError,
        r"values_left has 7 rows, expected batch size 2 x max_len_left 3 = 6",
    ),
    (
        "concat_two_dense_not_multiple",
        lambda k: _CONCAT(9, torch.zeros(7, 4), _V, 3, 5, kernel=k),
        ValueError,
        r"values_left has 7 rows, not a multiple of max_len_left = 3",
    ),
    (
        "concat_offsets_lengths",
        lambda k: _CONCAT(9, _V, _V, None, None, _OFF, _t([0, 1, 2, 5]), kernel=k),
        ValueError,
        r"offsets_left and offsets_right must have the same length \(batch size \+ 1\), got 3 "
        r"and 4",
    ),
    (
        "concat_offsets_not_monotone",
        lambda k: _CONCAT(9, _V, _V, None, None, _t([0, 3, 2, 5]), _t([0, 1, 2, 5]), kernel=k),
        ValueError,
        r"offsets_left is not monotone: offsets_left\[2\] = 2 < offsets_left\[1\] = 3",
    ),
    (
        "concat_offsets_last",
        lambda k: _CONCAT(9, _V, _V, None, None, _OFF, _t([0, 2, 4]), kernel=k),
        ValueError,
        r"offsets_right\[-1\] = 4 does not match values_right.shape\[0\] = 5",
    ),
    (
        "concat_offsets_float",
        lambda k: _CONCAT(9, _V, _V, None, None, _OFF, _OFF.float(), kernel=k),
        TypeError,
        r"offsets_right must have dtype int32 or int64, got float32",
    ),
    (
        "concat_max_seq_len",
        lambda k: _CONCAT(5, _V, _V, None, None, _OFF, _OFF, kernel=k),
        ValueError,
        r"sequence 1 has 3 \+ 3 = 6 rows, more than max_seq_len = 5",
    ),
    (
        "concat_jagged_max_len_bound",
        lambda k: _CONCAT(9, _V, _V, 2, None, _OFF, _OFF, kernel=k),
        ValueError,
        r"sequence 1 of values_left has 3 rows, more than max_len_left = 2",
    ),
    (
        "concat_negative_max_len",
        lambda k: _CONCAT(9, _V, _V, -1, None, _OFF, _OFF, kernel=k),
        ValueError,
        r"max_len_left must be >= 0, got -1",
    ),
    (
        "concat_float_max_seq_len",
        lambda k: _CONCAT(9.0, _V, _V, None, None, _OFF, _OFF, kernel=k),
        TypeError,
        r"max_seq_len must be an int, got 9.0",
    ),
    (
        "concat_rows_per_program",
        lambda k: _CONCAT(9, _V, _V, None, None, _OFF, _OFF, kernel=k, rows_per_program=3),
        ValueError,
        r"rows_per_program must be None or a power of 2 from 1 to 256, got 3",
    ),
    (
        "split_no_jagged_side",
        lambda k: _SPLIT(9, _V, None, None, 2, 3, kernel=k),
        ValueError,
        r"split_2D_jagged: offsets_left and offsets_right cannot both be None",
    ),
    (
        "split_rows",
        lambda k: _SPLIT(9, _V, None, None, None, None, _OFF, _t([0, 1, 1]), kernel=k),
        ValueError,
        r"the left and right sides hold 5 \+ 1 = 6 rows but values.shape\[0\] = 5",
    ),
    (
        "split_dense_rows",
        lambda k: _SPLIT(9, _V, None, None, None, 2, _t([0, 0, 2]), None, kernel=k),
        ValueError,
        r"hold 2 \+ 4 = 6 rows but values.shape\[0\] = 5",
    ),
    (
        "split_total_len",
        lambda k: _SPLIT(9, _V, 4, None, None, None, _t([0, 2, 3]), _t([0, 1, 2]), kernel=k),
        ValueError,
        r"total_len_left = 4 but offsets_left\[-1\] = 3",
    ),
    (
        "split_max_seq_len",
        lambda k: _SPLIT(2, _V, None, None, None, None, _t([0, 2, 3]), _t([0, 1, 2]), kernel=k),
        ValueError,
        r"sequence 0 has 2 \+ 1 = 3 rows, more than max_seq_len = 2",
    ),
    (
        "bmm_dense_k",
        lambda k: _BMM(9, _OFF, _V, torch.zeros(2, 3, 6), torch.zeros(2, 6), kernel=k),
        ValueError,
        r"jagged_dense_bmm_broadcast_add: dense.shape\[1\] = 3 must equal jagged.shape\[1\] = "
        r"4 \(K\)",
    ),
    (
        "bmm_bias_shape",
        lambda k: _BMM(9, _OFF, _V, torch.zeros(2, 4, 6), torch.zeros(6), kernel=k),
        ValueError,
        r"bias must have shape \[B, N\] = \[2, 6\] \(from dense\), got \[6\]",
    ),
    (
        "bmm_offsets_entries",
        lambda k: _BMM(9, _t([0, 5]), _V, torch.zeros(2, 4, 6), torch.zeros(2, 6), kernel=k),
        ValueError,
        r"seq_offsets must have B \+ 1 = 3 entries \(B = dense.shape\[0\]\), got 2",
    ),
    (
        "bmm_dtypes",
        lambda k: _BMM(9, _OFF, _V, torch.zeros(2, 4, 6).double(), torch.zeros(2, 6), kernel=k),
        TypeError,
        r"jagged, dense and bias must share one floating dtype, got float32, float64, float32",
    ),
    (
        "bmm_max_seq_len",
        lambda k: _BMM(2, _OFF, _V, torch.zeros(2, 4, 6), torch.zeros(2, 6), kernel=k),
        ValueError,
        r"sequence 1 has 3 rows, more than max_seq_len = 2",
    ),
]


@pytest.mark.parametrize(
    "kernel", [Kernel.PYTORCH, pytest.param(Kernel.TRITON, marks=pytest.mark.triton)]
)
@pytest.mark.parametrize(
    ("call", "exc", "pattern"),
    [pytest.param(c, e, p, id=i) for i, c, e, p in ERROR_CASES],
)
def test_errors_name_the_argument(kernel, call, exc, pattern, load_triton):
    """Both kernels run the reference's checks: same exception, same message."""
    if kernel is Kernel.PYTORCH:
        with pytest.raises(exc, match=pattern):
            call(kernel)
        return
    with load_triton(BACKEND, interpret=True), pytest.raises(exc, match=pattern):
        call(kernel)


def test_kernel_choice():
    with pytest.raises(
        ValueError,
        match=r"concat_2D_jagged has no NATIVE kernel; kernels "
        r"available for concat_2D_jagged: PYTORCH, TRITON",
    ):
        _CONCAT(9, _V, _V, None, None, _OFF, _OFF, kernel=Kernel.NATIVE)
    with pytest.raises(ValueError, match=r"jagged_dense_bmm_broadcast_add has no NATIVE kernel"):
        _BMM(9, _OFF, _V, torch.zeros(2, 4, 6), torch.zeros(2, 6), kernel="native")


@pytest.mark.triton
def test_triton_specific_errors(tt, load_triton):
    with pytest.raises(
        TypeError,
        match=r"the TRITON kernel supports float16, bfloat16 and "
        r"float32, got torch.float64",
    ):
        tt.triton_jagged_dense_bmm_broadcast_add(
            9, _OFF, _V.double(), torch.zeros(2, 4, 6).double(), torch.zeros(2, 6).double()
        )
    with pytest.raises(
        TypeError,
        match=r"the TRITON kernel supports values of dtype .*; got "
        r"torch.bool",
    ):
        tt.triton_concat_2D_jagged(9, _V.bool(), _V.bool(), None, None, _OFF, _OFF)
    with pytest.raises(ValueError, match=r"BmmBlockConfig.block_k must be a power of 2 >= 16"):
        tt.BmmBlockConfig(block_k=24)
    with load_triton(BACKEND, interpret=False) as compiled:
        with pytest.raises(ValueError, match=r"needs CUDA or ROCm tensors, got cpu tensors"):
            _CONCAT(9, _V, _V, None, None, _OFF, _OFF, kernel=Kernel.TRITON)
        assert not compiled.INTERPRETED


@pytest.mark.triton
def test_default_rows_per_program(tt):
    assert tt.default_rows_per_program(100) == 16  # the interpreter's choice
    assert tt.default_rows_per_program(512) == 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tt, "INTERPRETED", False)
        mp.setattr(torch.version, "hip", None)
        assert tt.default_rows_per_program(512) == 1
        assert tt.default_rows_per_program(100) == 32  # 4096 elements: 32 rows of 128
        assert tt.default_rows_per_program(1) == 256
        mp.setattr(torch.version, "hip", "6.4")
        assert tt.default_rows_per_program(512) == 8  # ROCm: always multi-row


# --------------------------------------------------------------------------------------------
# Compilation for GPU targets, without a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.triton
def test_kernels_compile_for_gpus(gpu_target, load_triton):
    """The interpreter does not type-check like the compiler: compile the real thing, no GPU."""
    with load_triton(BACKEND, interpret=False) as compiled:
        d = 100
        rows = dict(
            Joined="*bf16",
            Left="*bf16",
            Right="*bf16",
            OffsetsLeft="*i64",
            OffsetsRight="*i32",
            dense_len_left=7,
            dense_len_right=0,
            D=d,
            stride_joined=d,
            stride_left=d,
            stride_right=d,
        )
        flags = dict(IS_DENSE_LEFT=True, IS_DENSE_RIGHT=False, BLOCK_D=128)
        cfg = compiled.BmmBlockConfig()
        mm = dict(DOT_PRECISION=None, INTERPRET_BF16=False, BLOCK_M=64, BLOCK_N=64, BLOCK_K=64)
        k, n = 512, 256
        kernels = [
            (compiled._jagged_2d_single_row_kernel, rows, dict(flags, SPLIT=False), 1),
            (compiled._jagged_2d_multi_row_kernel, rows, dict(flags, SPLIT=True, ROWS=32), 4),
            (
                compiled._jagged_dense_mm_kernel,
                dict(
                    seq_offsets="*i64",
                    Jagged="*bf16",
                    Dense="*bf16",
                    Bias="*bf16",
                    Out="*bf16",
                    N=n,
                    K=k,
                    stride_jm=k,
                    stride_db=k * n,
                    stride_dk=n,
                    stride_dn=1,
                    stride_bias_b=n,
                    stride_om=n,
                ),
                dict(mm, HAS_BIAS=True),
                cfg.num_warps,
            ),
            (
                compiled._jagged_jagged_mm_kernel,
                dict(
                    seq_offsets="*i32",
                    Jagged="*bf16",
                    DOut="*bf16",
                    DDense="*bf16",
                    DBias="*bf16",
                    K=k,
                    N=n,
                    stride_jm=k,
                    stride_om=n,
                    stride_ddb=k * n,
                    stride_ddk=n,
                    stride_ddn=1,
                    stride_dbias_b=n,
                ),
                mm,
                cfg.num_warps,
            ),
        ]
        for kernel, values, constants, warps in kernels:
            options = {"num_warps": warps, "num_stages": 2}
            binary = gpu_target.compile(kernel, constants, options, values=values)
            # 64 KiB whatever the target: these tiles must fit every GPU's shared memory.
            assert binary.metadata.shared <= 64 * 1024, (kernel.__name__, binary.metadata.shared)


# --------------------------------------------------------------------------------------------
# On a GPU: compiled kernels
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("rows_per_program", [1, 8, None])
def test_gpu_concat_split_match_reference(rows_per_program, load_triton):
    gen = torch.Generator().manual_seed(40)
    lengths_l = torch.randint(0, 300, (257,), generator=gen).tolist()
    lengths_r = torch.randint(0, 40, (257,), generator=gen).tolist()
    with load_triton(BACKEND, interpret=False) as compiled:

        def concat(*a):
            return compiled.triton_concat_2D_jagged(*a, rows_per_program=rows_per_program)

        def split(*a):
            return compiled.triton_split_2D_jagged(*a, rows_per_program=rows_per_program)

        # Every side combination in both dtypes at one width, then the other widths (one row
        # narrower than a block, a power of two, wider than a block) for one combination: each
        # case compiles its own kernels (about half a second each on a GPU), and the product of
        # all of them took 15 to 20 s per test there.
        cases = [
            *itertools.product(SIDES, (100,), (torch.bfloat16, torch.float32)),
            *((("jagged", "jagged"), d, torch.bfloat16) for d in (1, 512, 1300)),
        ]
        for (left, right), d, dtype in cases:
            args, *_ = _case(gen, left, right, lengths_l, lengths_r, d, dtype, torch.int64, 50, 30)
            args = tuple(a.cuda() if isinstance(a, torch.Tensor) else a for a in args)
            rows = args[0].shape[0] + args[1].shape[0]
            d_out = torch.randn((rows, d), generator=gen).to(device="cuda", dtype=dtype)
            got = _forward_backward_concat(concat, 340, args, d_out)
            ref = _forward_backward_concat(pytorch_concat_2D_jagged, 340, args, d_out)
            for name, g, r in zip(("out", "d_left", "d_right"), got, ref, strict=True):
                assert torch.equal(g, r), (name, left, right, d, dtype)
            if (left, right) == ("dense", "dense"):
                continue
            d_l, d_r = (torch.randn_like(a) for a in args[:2])
            split_args = _split_args(args)
            got = _forward_backward_split(split, 340, ref[0], split_args, d_l, d_r)
            ref = _forward_backward_split(
                pytorch_split_2D_jagged, 340, ref[0], split_args, d_l, d_r
            )
            for name, g, r in zip(("left", "right", "d_values"), got, ref, strict=True):
                assert torch.equal(g, r), (name, left, right, d, dtype)


@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_bmm_matches_reference(dtype, load_triton, flash_oracle):
    gen = torch.Generator().manual_seed(41)
    lengths = [0, 1, 100, 513, 1000, 77]
    with load_triton(BACKEND, interpret=False) as compiled:
        for k, n in ((64, 64), (200, 100), (512, 256)):
            offsets, *tensors = _bmm_inputs(gen, lengths, k, n, torch.float32)
            offsets = offsets.cuda()
            low = [t.to(device="cuda", dtype=dtype) for t in tensors]
            got = _bmm_forward_backward(
                compiled.triton_jagged_dense_bmm_broadcast_add, 1000, offsets, *low
            )
            ref = _bmm_forward_backward(pytorch_jagged_dense_bmm_broadcast_add, 1000, offsets, *low)
            if dtype == torch.float32:
                for name, g, r in zip(BMM_NAMES, got, ref, strict=True):
                    torch.testing.assert_close(
                        g, r, atol=1e-4, rtol=1e-3, msg=lambda m, name=name: f"{name}: {m}"
                    )
                continue
            ref32 = _bmm_forward_backward(
                pytorch_jagged_dense_bmm_broadcast_add, 1000, offsets, *(t.float() for t in low)
            )
            flash_oracle(BMM_NAMES, got, ref, ref32, atol=LOW_PRECISION_ATOL)
