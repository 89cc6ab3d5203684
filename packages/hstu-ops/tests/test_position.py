"""add_timestamp_positional_embeddings: the reference against hand-worked values and a naive
loop, the TRITON kernels against the reference (output and the three gradients).

Without a GPU the TRITON kernels run in Triton's interpreter on CPU tensors, loaded by the
``load_triton`` fixture of conftest.py.

Tolerances: float32 ``atol=1e-5, rtol=1e-5`` for the output and every gradient (the same float32
operations; only the order of the table-gradient sums differs); bfloat16 the flash-attention
oracle ``max|out - ref32| <= 2 * max|ref16 - ref32| + 1e-5`` for out and each gradient, where
ref32 is the float32 reference on the upcast inputs and ref16 the reference on the bfloat16
inputs. Indices (position, time bucket) must agree exactly; the tests avoid gaps within float32
rounding of a "log" bucket boundary, where backends may legitimately differ.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import re

import numpy as np
import pytest
import torch

from hstu_ops import Kernel
from hstu_ops.position import add_timestamp_positional_embeddings
from hstu_ops.pytorch.pt_position import (
    pytorch_add_timestamp_positional_embeddings,
    timestamp_positional_indices,
)

BACKEND = "hstu_ops.triton.triton_position"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-5}
BF16_ATOL = 1e-5


# --------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------
def make_problem(
    lengths,
    dim,
    position_rows,
    time_bucket_rows,
    seed=0,
    max_gap=86400,
    targets=None,
    dtype=torch.float32,
    table_dtype=None,
    device="cpu",
    offsets_dtype=torch.int64,
):
    """A jagged batch with increasing timestamps (gaps up to max_gap seconds) and dout."""
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=offsets_dtype)
    total = int(offsets[-1])
    seq = torch.randn(total, dim, generator=gen)
    position = torch.randn(position_rows, dim, generator=gen)
    time = torch.randn(time_bucket_rows, dim, generator=gen)
    dout = torch.randn(total, dim, generator=gen)
    stamps = [
        1_700_000_000 + torch.randint(0, max_gap + 1, (n,), generator=gen).cumsum(0)
        for n in lengths
    ]
    timestamps = torch.cat([torch.zeros(0, dtype=torch.int64), *stamps])
    table_dtype = table_dtype or dtype
    return dict(
        seq_embeddings=seq.to(device=device, dtype=dtype),
        position_embeddings_weight=position.to(device=device, dtype=table_dtype),
        timestamp_embeddings_weight=time.to(device=device, dtype=table_dtype),
        seq_offsets=offsets.to(device),
        seq_lengths=(offsets[1:] - offsets[:-1]).to(device),
        timestamps=timestamps.to(device),
        num_targets=None if targets is None else torch.tensor(targets).to(device),
        dout=dout.to(device=device, dtype=dtype),
    )


DIFFERENTIABLE = ("seq_embeddings", "position_embeddings_weight", "timestamp_embeddings_weight")


def run(fn, problem, alpha=0.7, max_seq_len=200, contextual=0, interleave=False, fn_name="sqrt"):
    """(out, (d seq, d position table, d time table)) of fn for the problem's dout."""
    args = {k: v for k, v in problem.items() if k != "dout"}
    leaves = {k: args[k].detach().clone().requires_grad_() for k in DIFFERENTIABLE}
    args.update(leaves)
    out = fn(
        alpha,
        max_seq_len,
        contextual,
        args["position_embeddings_weight"],
        args["timestamp_embeddings_weight"],
        args["seq_offsets"],
        args["seq_lengths"],
        args["seq_embeddings"],
        args["timestamps"],
        args["num_targets"],
        interleave,
        fn_name,
    )
    grads = torch.autograd.grad(out, [leaves[k] for k in DIFFERENTIABLE], problem["dout"])
    return out.detach(), grads


def assert_matches_reference(tt, problem, cfg=None, **options):
    triton_fn = lambda *a: tt.triton_add_timestamp_positional_embeddings(  # noqa: E731
        *a, block_config=cfg
    )
    got, got_grads = run(triton_fn, problem, **options)
    ref, ref_grads = run(pytorch_add_timestamp_positional_embeddings, problem, **options)
    torch.testing.assert_close(got, ref, **FP32_TOL)
    for name, g, r in zip(DIFFERENTIABLE, got_grads, ref_grads, strict=True):
        assert g.dtype == r.dtype
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, name=name: f"d {name}: {m}")


@pytest.fixture
def bf16_oracle(flash_oracle):
    """``bf16_oracle(tt, problem, cfg=None, **options)``: the flash-attention oracle for out
    and each gradient."""

    def check(tt, problem, cfg=None, **options):
        triton_fn = lambda *a: tt.triton_add_timestamp_positional_embeddings(  # noqa: E731
            *a, block_config=cfg
        )
        low = run(triton_fn, problem, **options)
        ref16 = run(pytorch_add_timestamp_positional_embeddings, problem, **options)
        upcast = {
            k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
            for k, v in problem.items()
        }
        ref32 = run(pytorch_add_timestamp_positional_embeddings, upcast, **options)
        names = ("out", *(f"d {n}" for n in DIFFERENTIABLE))
        flat = [(r[0], *r[1]) for r in (low, ref16, ref32)]
        flash_oracle(names, *flat, atol=BF16_ATOL)

    return check


# --------------------------------------------------------------------------------------------
# The reference: hand-worked indices, and a naive loop
# --------------------------------------------------------------------------------------------
def indices(lengths, timestamps, contextual=0, targets=None, interleave=False, fn="sqrt",
            position_rows=100, time_bucket_rows=100):  # fmt: skip
    offsets = torch.tensor([0, *itertools.accumulate(lengths)])
    pos, bucket = timestamp_positional_indices(
        contextual,
        position_rows,
        time_bucket_rows,
        offsets,
        torch.tensor(timestamps),
        None if targets is None else torch.tensor(targets),
        interleave,
        fn,
    )
    return pos.tolist(), bucket.tolist()


def test_positions_by_hand():
    # No targets: counted from the end, the last token is 1.
    assert indices([3], [0, 0, 0])[0] == [3, 2, 1]
    # [ctx ctx | h h | t t], two contextual tokens, two targets: targets share position c = 2,
    # the history counts down to c + 1 = 3.
    assert indices([6], [0] * 6, contextual=2, targets=[2])[0] == [0, 1, 4, 3, 2, 2]
    # Interleaved targets: one target is two tokens.
    assert indices([6], [0] * 6, contextual=2, targets=[1], interleave=True)[0] == (
        [0, 1, 4, 3, 2, 2]
    )
    # The clamp to the last row of a 4-row table (contextual positions are not clamped).
    assert indices([6], [0] * 6, contextual=2, targets=[2], position_rows=4)[0] == (
        [0, 1, 3, 3, 2, 2]
    )
    # Two sequences: positions restart; an all-target sequence puts every token at c.
    assert indices([2, 3], [0] * 5, targets=[0, 3])[0] == [2, 1, 0, 0, 0]
    # A sequence shorter than the contextual prefix: its tokens are all contextual.
    assert indices([2, 4], [0] * 6, contextual=3)[0] == [0, 1, 0, 1, 2, 4]


def test_time_buckets_by_hand():
    q = 1_000_000
    gaps = [3600, 1500, 60, 59, 0]  # seconds before the last token (the query time)
    stamps = [q - g for g in gaps]
    # sqrt of minutes: sqrt(60) = 7.7, sqrt(25) = 5 exactly, sqrt(1) = 1 exactly, sqrt(<1).
    assert indices([5], stamps)[1] == [7, 5, 1, 0, 0]
    # log of minutes: ln 60 = 4.09, ln 25 = 3.2, ln 1 = 0, negative -> 0.
    assert indices([5], stamps, fn="log")[1] == [4, 3, 0, 0, 0]
    # Clamped to the last row of a 5-row table.
    assert indices([5], stamps, time_bucket_rows=5)[1] == [4, 4, 1, 0, 0]
    # Exact squares land on their bucket: 60 * k**2 seconds -> k.
    squares = [q - 60 * k * k for k in (400, 99, 2)] + [q]
    assert indices([4], squares, time_bucket_rows=1000)[1] == [400, 99, 2, 0]
    # Tokens later than the query time (unsorted data) are in bucket 0; each sequence has its
    # own query time.
    assert indices([3, 2], [q + 600, q - 6000, q, 5000, 5000 + 240])[1] == [0, 10, 0, 2, 0]


def naive_reference(problem, alpha, contextual, interleave, fn_name):
    """Python loops with upstream's recipe; float64 output."""
    seq = problem["seq_embeddings"].double()
    position = problem["position_embeddings_weight"].double()
    time = problem["timestamp_embeddings_weight"].double()
    offsets = problem["seq_offsets"].tolist()
    stamps = problem["timestamps"].tolist()
    targets = problem["num_targets"]
    out = torch.empty_like(seq)
    for b in range(len(offsets) - 1):
        start, end = offsets[b], offsets[b + 1]
        n = end - start
        high = n
        if targets is not None:
            high = n - int(targets[b]) * (2 if interleave else 1)
        for p in range(n):
            pos = p if p < contextual else min(high - min(p, high) + contextual, len(position) - 1)
            minutes = np.float32(max(np.float32(stamps[end - 1] - stamps[start + p]), 1e-6))
            minutes = minutes / np.float32(60.0)
            f = np.log(minutes) if fn_name == "log" else np.sqrt(minutes)
            bucket = min(int(max(float(f), 0.0)), len(time) - 1)
            out[start + p] = alpha * seq[start + p] + position[pos] + time[bucket]
    return out


@pytest.mark.parametrize(
    ("targets", "interleave", "contextual", "fn_name"),
    [
        (None, False, 0, "sqrt"),
        ([0, 1, 3, 2], False, 2, "sqrt"),
        ([0, 0, 1, 4], True, 1, "log"),
        (None, False, 3, "log"),
    ],
)
def test_reference_matches_naive_loop(targets, interleave, contextual, fn_name):
    problem = make_problem([0, 1, 6, 23], 5, 12, 30, seed=4, max_gap=40000, targets=targets)
    got = run(pytorch_add_timestamp_positional_embeddings, problem, 0.3, 50, contextual,
              interleave, fn_name)[0]  # fmt: skip
    want = naive_reference(problem, 0.3, contextual, interleave, fn_name)
    torch.testing.assert_close(got.double(), want, atol=1e-6, rtol=1e-6)


def test_reference_gradcheck_float64():
    problem = make_problem([0, 3, 5], 4, 6, 5, seed=1, targets=[0, 1, 2], dtype=torch.float64)
    args = {k: v for k, v in problem.items() if k != "dout"}

    def fn(seq, position, time):
        return pytorch_add_timestamp_positional_embeddings(
            1.3, 8, 1, position, time, args["seq_offsets"], args["seq_lengths"], seq,
            args["timestamps"], args["num_targets"], False, "sqrt",
        )  # fmt: skip

    inputs = tuple(args[k].clone().requires_grad_() for k in DIFFERENTIABLE)
    assert torch.autograd.gradcheck(fn, inputs)


def test_reference_keeps_dtypes_and_accumulates_wide():
    """bf16 tokens with float32 tables: bf16 out, float32 table gradients."""
    problem = make_problem([4, 7], 8, 9, 6, dtype=torch.bfloat16, table_dtype=torch.float32)
    out, grads = run(pytorch_add_timestamp_positional_embeddings, problem)
    assert out.dtype == torch.bfloat16
    assert [g.dtype for g in grads] == [torch.bfloat16, torch.float32, torch.float32]
    torch.testing.assert_close(grads[0], (problem["dout"].float() * 0.7).bfloat16())


# --------------------------------------------------------------------------------------------
# TRITON against the reference
# --------------------------------------------------------------------------------------------
LENGTHS = [0, 1, 6, 42, 123]
TARGETS = [0, 1, 3, 5, 20]  # the length-1 sequence is a single target

# Widths that are not multiples of the column tile, which is smaller than the width (the
# forward loops over column chunks, the backward has a program per chunk).
# rows_per_piece: 0 is one backward program per table row; 1 and 5 cut segments into pieces
# (1: every row its own piece).
FP32_CASES = [
    pytest.param(None, False, 0, "sqrt", 20, 16, 0, id="plain-sqrt-d20-whole-segments"),
    pytest.param(TARGETS, False, 3, "sqrt", 40, 32, 5, id="targets-ctx3-sqrt-d40"),
    pytest.param([0, 0, 3, 20, 60], True, 1, "log", 100, 64, 1, id="interleaved-ctx1-log-d100"),
    pytest.param(TARGETS, False, 0, "log", 20, 16, 5, id="targets-log-d20"),
]


@pytest.mark.triton
@pytest.mark.parametrize(
    ("targets", "interleave", "contextual", "fn_name", "dim", "block_d", "pieces"), FP32_CASES
)
def test_fp32_matches_reference(tt, targets, interleave, contextual, fn_name, dim, block_d, pieces):
    # 50 position rows: the two longest sequences reach the clamp. 25 time-bucket rows: gaps of
    # up to a day between tokens reach the clamp too (sqrt of a week in minutes is 100).
    problem = make_problem(LENGTHS, dim, 50, 25, seed=dim, targets=targets)
    cfg = tt.PositionBlockConfig(
        block_n=32, block_d=block_d, rows_per_step=3, rows_per_piece=pieces
    )
    assert_matches_reference(
        tt, problem, cfg, contextual=contextual, interleave=interleave, fn_name=fn_name
    )


@pytest.mark.triton
def test_default_tiles_dispatch_int32_and_strided(tt):
    """Through the dispatcher, default tiles, int32 offsets/lengths/timestamps/targets, and
    seq_embeddings sliced from a wider tensor (row stride > width)."""
    problem = make_problem([7, 0, 30], 20, 40, 30, seed=9, targets=[2, 0, 4])
    for key in ("seq_offsets", "seq_lengths", "timestamps", "num_targets"):
        problem[key] = problem[key].to(torch.int32)
    wide = torch.randn(37, 50)
    problem["seq_embeddings"] = wide[:, 5:25]
    assert not problem["seq_embeddings"].is_contiguous()

    def dispatched(*args):
        return add_timestamp_positional_embeddings(*args, kernel="triton")

    got, got_grads = run(dispatched, problem, contextual=2)
    ref, ref_grads = run(pytorch_add_timestamp_positional_embeddings, problem, contextual=2)
    torch.testing.assert_close(got, ref, **FP32_TOL)
    for g, r in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL)


@pytest.mark.triton
@pytest.mark.parametrize(
    ("table_dtype", "fn_name"), [(torch.bfloat16, "sqrt"), (torch.float32, "log")]
)
def test_bf16_flash_attention_oracle(tt, bf16_oracle, table_dtype, fn_name):
    problem = make_problem(
        LENGTHS, 40, 50, 30, seed=5, targets=TARGETS, dtype=torch.bfloat16, table_dtype=table_dtype
    )
    cfg = tt.PositionBlockConfig(block_n=16, block_d=64, rows_per_step=8)
    bf16_oracle(tt, problem, cfg, alpha=6.3, contextual=2, fn_name=fn_name)


@pytest.mark.triton
def test_empty_sequences_and_batches(tt):
    for lengths in ([], [0, 0], [0, 5, 0]):
        problem = make_problem(lengths, 20, 10, 10, seed=2)
        got, got_grads = run(tt.triton_add_timestamp_positional_embeddings, problem)
        ref, ref_grads = run(pytorch_add_timestamp_positional_embeddings, problem)
        torch.testing.assert_close(got, ref, **FP32_TOL)
        for g, r in zip(got_grads, ref_grads, strict=True):
            assert g.shape == r.shape
            torch.testing.assert_close(g, r, **FP32_TOL)


@pytest.mark.triton
@pytest.mark.parametrize("fn_name", ["sqrt", "log"])
def test_huge_gaps_clamp_to_the_last_table_row(tt, fn_name):
    """Gaps up to 2**62 s with a 3-row time table narrower than wide (D = 40): every backend
    clamps at the last row (upstream's PyTorch path would clamp at D - 1 = 39, out of range)."""
    q = 2**62
    lengths = [4, 1, 3]
    stamps = [0, 2**40, q - 60 * 4, q, 17, 5, 6, 5 + 3600]
    problem = make_problem(lengths, 40, 8, 3, seed=3)
    problem["timestamps"] = torch.tensor(stamps)
    pos, bucket = timestamp_positional_indices(
        0, 8, 3, problem["seq_offsets"], problem["timestamps"], None, False, fn_name
    )
    assert int(bucket.max()) == 2 and int(bucket.min()) == 0 and int(pos.max()) <= 7
    assert bucket.tolist()[:2] == [2, 2]  # the gaps of ~2**62 s
    got, got_grads = run(tt.triton_add_timestamp_positional_embeddings, problem, fn_name=fn_name)
    ref, ref_grads = run(pytorch_add_timestamp_positional_embeddings, problem, fn_name=fn_name)
    torch.testing.assert_close(got, ref, **FP32_TOL)
    for g, r in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL)
    # The last row's gradient is the sum of dout over the rows clamped onto it.
    clamped = bucket == 2
    torch.testing.assert_close(got_grads[2][2], problem["dout"][clamped].sum(0), **FP32_TOL)


@pytest.mark.triton
def test_only_the_needed_gradients_and_determinism(tt):
    """Frozen tables (no index saved) and a hot table row: repeated backwards are bit-equal."""
    # Every timestamp equal: all 300 rows in bucket 0, one segment of 300 rows.
    problem = make_problem([150, 150], 16, 8, 4, seed=6)
    problem["timestamps"] = torch.full((300,), 123, dtype=torch.int64)
    first = run(tt.triton_add_timestamp_positional_embeddings, problem)
    second = run(tt.triton_add_timestamp_positional_embeddings, problem)
    for a, b in zip((first[0], *first[1]), (second[0], *second[1]), strict=True):
        assert torch.equal(a, b)
    torch.testing.assert_close(first[1][2][0], problem["dout"].sum(0), **FP32_TOL)
    assert torch.count_nonzero(first[1][2][1:]) == 0

    seq = problem["seq_embeddings"].clone().requires_grad_()
    out = tt.triton_add_timestamp_positional_embeddings(
        2.0, 200, 0, problem["position_embeddings_weight"],
        problem["timestamp_embeddings_weight"], problem["seq_offsets"], problem["seq_lengths"],
        seq, problem["timestamps"], None, False,
    )  # fmt: skip
    (d_seq,) = torch.autograd.grad(out, seq, problem["dout"])
    torch.testing.assert_close(d_seq, 2.0 * problem["dout"])


@pytest.mark.triton
@pytest.mark.parametrize("pieces", [0, 8])
def test_d_seq_from_the_table_sum_is_torchs_rounding(tt, pieces):
    """d seq_embeddings, written by the position table's sum (bfloat16 tokens, float32 tables,
    both needing gradients), is bit-equal to alpha * dout rounded as torch rounds it, and so is
    the torch path taken when only the time table needs a gradient."""
    problem = make_problem(
        [0, 1, 6, 25], 20, 12, 10, seed=4, targets=[0, 1, 3, 5], dtype=torch.bfloat16,
        table_dtype=torch.float32,
    )  # fmt: skip
    cfg = tt.PositionBlockConfig(block_n=16, block_d=16, rows_per_step=3, rows_per_piece=pieces)
    want = (problem["dout"].float() * 6.3).bfloat16()
    _, (d_seq, _, _) = run(
        functools.partial(tt.triton_add_timestamp_positional_embeddings, block_config=cfg),
        problem,
        alpha=6.3,
    )
    assert torch.equal(d_seq, want)
    problem["position_embeddings_weight"].requires_grad_(False)
    seq = problem["seq_embeddings"].clone().requires_grad_()
    out = tt.triton_add_timestamp_positional_embeddings(
        6.3, 200, 0, problem["position_embeddings_weight"],
        problem["timestamp_embeddings_weight"].clone().requires_grad_(), problem["seq_offsets"],
        problem["seq_lengths"], seq, problem["timestamps"], None, False, block_config=cfg,
    )  # fmt: skip
    assert torch.equal(torch.autograd.grad(out, seq, problem["dout"])[0], want)


@pytest.mark.triton
def test_index_value_checks_turned_off(tt, monkeypatch):
    """Off, the offsets' and lengths' values are not read: seq_lengths that disagree with the
    offsets (which the kernels never read) pass unrefused, and the output is unchanged."""
    import hstu_ops
    from hstu_ops import _index_checks

    problem = make_problem([3, 5], 8, 6, 4, seed=2, targets=[1, 2])
    want, _ = run(tt.triton_add_timestamp_positional_embeddings, problem, max_seq_len=10)
    problem["seq_lengths"] = torch.tensor([4, 4])
    with pytest.raises(ValueError, match=r"seq_lengths\[0\] = 4 does not match"):
        run(tt.triton_add_timestamp_positional_embeddings, problem, max_seq_len=10)
    monkeypatch.setattr(_index_checks, "_enabled", True)
    hstu_ops.set_index_value_checks(False)
    try:
        got, _ = run(tt.triton_add_timestamp_positional_embeddings, problem, max_seq_len=10)
        problem["seq_lengths"] = torch.tensor([4, 4, 4])
        with pytest.raises(ValueError, match="seq_lengths"):  # shapes are still checked
            run(tt.triton_add_timestamp_positional_embeddings, problem, max_seq_len=10)
    finally:
        hstu_ops.set_index_value_checks(True)
    assert torch.equal(got, want)


# --------------------------------------------------------------------------------------------
# Errors (the same checks and messages for both kernels)
# --------------------------------------------------------------------------------------------
def _call(kernel, problem=None, **changes):
    args = dict(
        alpha=1.0,
        max_seq_len=10,
        max_contextual_seq_len=0,
        interleave_targets=False,
        time_bucket_fn="sqrt",
    )
    base = problem or make_problem([3, 5], 8, 6, 4, targets=[1, 2])
    args.update({k: v for k, v in base.items() if k != "dout"})
    args.update(changes)
    return add_timestamp_positional_embeddings(**args, kernel=kernel)


ERRORS = [
    (dict(time_bucket_fn="cube"), ValueError, r"time_bucket_fn must be 'sqrt' or 'log', got 'cube'"),
    (dict(max_seq_len=4), ValueError, r"sequence 1 has 5 tokens, more than max_seq_len = 4"),
    (dict(max_seq_len=0), ValueError, r"max_seq_len must be positive, got 0"),
    (dict(max_contextual_seq_len=-1), ValueError, r"max_contextual_seq_len must be >= 0, got -1"),
    (dict(max_contextual_seq_len=7), ValueError,
     r"position_embeddings_weight has 6 rows; it needs at least max\(1, max_contextual_seq_len = 7\)"),
    (dict(seq_lengths=torch.tensor([3, 4])), ValueError,
     r"seq_lengths\[1\] = 4 does not match seq_offsets\[2\] - seq_offsets\[1\] = 5"),
    (dict(seq_lengths=torch.tensor([3])), ValueError,
     r"seq_lengths must be 1-D with one entry per sequence \(2\), got shape \[1\]"),
    (dict(num_targets=torch.tensor([1, 6])), ValueError,
     r"num_targets\[1\] = 6 is outside \[0, 5\] for sequence 1 of 5 tokens"),
    (dict(num_targets=torch.tensor([2, 1]), interleave_targets=True), ValueError,
     r"num_targets\[0\] = 2 is outside \[0, 1\] with interleave_targets"),
    (dict(num_targets=torch.tensor([-1, 0])), ValueError, r"num_targets\[0\] = -1 is outside"),
    (dict(num_targets=torch.tensor([1.0, 0.0])), TypeError,
     r"num_targets must have dtype int32 or int64, got float32"),
    (dict(timestamps=torch.zeros(8)), TypeError,
     r"timestamps must have dtype int32 or int64 \(seconds\), got float32"),
    (dict(timestamps=torch.zeros(7, dtype=torch.int64)), ValueError,
     r"timestamps must be 1-D with one entry per row of seq_embeddings \(8\), got shape \[7\]"),
    (dict(seq_embeddings=torch.zeros(8, 8, 1)), ValueError,
     r"seq_embeddings must be 2-D \[total, D\], got shape \[8, 8, 1\]"),
    (dict(seq_embeddings=torch.zeros(8, 8, dtype=torch.int64)), TypeError,
     r"seq_embeddings must have a floating dtype, got int64"),
    (dict(position_embeddings_weight=torch.zeros(6, 9)), ValueError,
     r"position_embeddings_weight must be 2-D \[rows, 8\] \(the width of seq_embeddings\), "
     r"got shape \[6, 9\]"),
    (dict(timestamp_embeddings_weight=torch.zeros(0, 8)), ValueError,
     r"timestamp_embeddings_weight must have at least one row"),
    (dict(seq_offsets=torch.tensor([0, 3, 9])), ValueError,
     r"seq_offsets\[-1\] = 9 does not match seq_embeddings.shape\[0\] = 8"),
    (dict(seq_offsets=torch.tensor([0, 5, 3, 8])), ValueError, r"seq_offsets is not monotone"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "exc", "pattern"), ERRORS, ids=[f"e{i}" for i in range(len(ERRORS))]
)
@pytest.mark.parametrize(
    "kernel", [Kernel.PYTORCH, pytest.param(Kernel.TRITON, marks=pytest.mark.triton)]
)
def test_argument_errors(kernel, changes, exc, pattern, load_triton):
    backend = contextlib.nullcontext()
    if kernel is Kernel.TRITON:
        backend = load_triton(BACKEND, interpret=True)
    with backend, pytest.raises(exc) as info:
        _call(kernel, **changes)
    message = str(info.value)
    assert message.startswith("add_timestamp_positional_embeddings: "), message
    assert re.search(pattern, message), message


@pytest.mark.triton
def test_triton_specific_errors(tt, load_triton):
    with pytest.raises(TypeError, match=r"supports float16, bfloat16 and float32, got "
                       r"torch.float64 for seq_embeddings"):  # fmt: skip
        problem = make_problem([3, 5], 8, 6, 4, dtype=torch.float64)
        _call(Kernel.TRITON, problem)
    with pytest.raises(ValueError, match=r"kernels available for "
                       r"add_timestamp_positional_embeddings: PYTORCH, TRITON"):  # fmt: skip
        _call(Kernel.NATIVE)
    with pytest.raises(ValueError, match=r"power of 2 >= 16, got 24"):
        tt.PositionBlockConfig(block_d=24)
    with load_triton(BACKEND, interpret=False) as compiled:
        assert not compiled.INTERPRETED
        with pytest.raises(ValueError, match=r"needs CUDA or ROCm tensors, got cpu tensors"):
            _call(Kernel.TRITON)


# --------------------------------------------------------------------------------------------
# Compilation for a GPU target, without a GPU; compiled kernels on a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.triton
def test_kernels_compile_for_gpus(gpu_target, load_triton):
    """The interpreter does not type-check like the compiler: compile the real thing, no GPU."""
    types = {
        "SeqEmb": "*bf16",
        "PosTable": "*fp32",
        "TsTable": "*bf16",
        "Out": "*bf16",
        "DOut": "*bf16",
        "DTable": "*fp32",
        "DScaled": "*bf16",
        **dict.fromkeys(("Timestamps", "seq_offsets", "num_targets"), "*i64"),
        **dict.fromkeys(("order", "segment_starts"), "*i64"),
        **dict.fromkeys(("PosIdx", "TsIdx"), "*i32"),
        **dict.fromkeys(("alpha", "increment", "scale"), "fp32"),
    }
    with load_triton(BACKEND, interpret=False) as compiled:
        cfg = compiled.default_position_block_config(128)
        fwd_constants = dict(
            HAS_TARGETS=True,
            INTERLEAVE=False,
            LOG_BUCKETS=True,
            SAVE_INDICES=True,
            BLOCK_N=cfg.block_n,
            BLOCK_D=cfg.block_d,
            INTERPRET_BF16=False,
        )
        sqrt_constants = {**fwd_constants, "LOG_BUCKETS": False, "INTERLEAVE": True}
        bwd_constants = dict(
            ROWS_PER_STEP=cfg.rows_per_step, BLOCK_D=cfg.block_d, GATHER=True,
            WRITE_SCALED=False, INTERPRET_BF16=False, SCALED_INTERPRET_BF16=False,
        )  # fmt: skip
        scaled_constants = {**bwd_constants, "WRITE_SCALED": True}  # d_seq written as well
        pieces_constants = {**bwd_constants, "GATHER": False}  # the sum of the partial rows
        for kernel, constants, warps in (
            (compiled._add_timestamp_pos_emb_fwd_kernel, fwd_constants, cfg.fwd_warps),
            (compiled._add_timestamp_pos_emb_fwd_kernel, sqrt_constants, cfg.fwd_warps),
            (compiled._segment_sum_rows_kernel, bwd_constants, cfg.bwd_warps),
            (compiled._segment_sum_rows_kernel, scaled_constants, cfg.bwd_warps),
            (compiled._segment_sum_rows_kernel, pieces_constants, cfg.bwd_warps),
        ):
            binary = gpu_target.compile(kernel, constants, {"num_warps": warps}, types=types)
            if gpu_target.vendor == "nvidia" and "GATHER" not in constants:
                # The bucket's division and square root must be the IEEE ones, not .approx.
                ptx = binary.asm["ptx"]
                assert "div.rn.f32" in ptx and "div.full" not in ptx
                assert ("sqrt.rn.f32" in ptx) is (constants is sqrt_constants)
                assert "sqrt.approx" not in ptx


@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(dtype, load_triton, bf16_oracle):
    lengths = [0, 1, 100, 513, 1000, 77]
    with load_triton(BACKEND, interpret=False) as compiled:
        for dim, fn_name in ((64, "sqrt"), (200, "log")):
            problem = make_problem(
                lengths, dim, 600, 2049, seed=dim, targets=[0, 1, 10, 20, 64, 0],
                dtype=dtype, device="cuda",
            )  # fmt: skip
            options = dict(max_seq_len=1000, contextual=3, fn_name=fn_name)
            if dtype == torch.float32:
                assert_matches_reference(compiled, problem, **options)
            else:
                bf16_oracle(compiled, problem, **options)
