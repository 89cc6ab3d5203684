"""NATIVE hstu_mha (C++ CPU kernels, forward and backward) against the PyTorch reference.

The kernels compute in float32 whatever the input dtype. Tolerances: float32 ``atol=1e-5,
rtol=1e-4`` for out, dq, dk and dv; bfloat16 and float16 the flash-attention oracle
``max|out - ref32| <= 2 * max|ref16 - ref32| + 1e-4`` for each of them, where ref32 is the
float32 reference on the upcast inputs and ref16 the reference run in the low precision.

Several code paths depend on the problem, so the tests choose problems that reach them: feature
widths that are multiples of 16 are read in place, others are padded copies; sequences longer
than a tile (64 rows) have several query and key blocks; the backward runs one work item per
(sequence, head) when they balance the threads, and per key block plus per query block when a
few long sequences do not (forced here with torch.set_num_threads); the kernels exist for three
instruction sets, of which a subprocess test runs the two this CPU does not pick by default.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel, _native
from hstu_ops.pytorch import pytorch_hstu_mha

FP32_TOL = {"atol": 1e-5, "rtol": 1e-4}
LOW_PRECISION_ATOL = 1e-4
LENGTHS = [0, 1, 6, 42, 123]
TARGETS = [0, 1, 6, 7, 40]  # two all-target sequences, one target block longer than a tile

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA/ROCm GPU")


@pytest.fixture
def threads():
    """``threads(n)`` sets torch's thread count for the test; the old one is restored."""
    saved = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(saved)


# --------------------------------------------------------------------------------------------
# Inputs and comparisons
# --------------------------------------------------------------------------------------------
def jagged_inputs(lengths, heads, attn_dim, hidden_dim, seed=0, offsets_dtype=torch.int64):
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=offsets_dtype)
    total = int(offsets[-1])
    q = torch.randn(total, heads, attn_dim, generator=gen)
    k = torch.randn(total, heads, attn_dim, generator=gen)
    v = torch.randn(total, heads, hidden_dim, generator=gen)
    dout = torch.randn(total, heads, hidden_dim, generator=gen)
    return q, k, v, offsets, dout


def native_mha(*args, **kwargs):
    return hstu_ops.hstu_mha(*args, kernel=Kernel.NATIVE, **kwargs)


def forward_backward(fn, q, k, v, dout, max_seq_len, alpha, offsets, **options):
    """(out, (dq, dk, dv)) of fn(max_seq_len, alpha, q, k, v, offsets, **options)."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(max_seq_len, alpha, q, k, v, offsets, **options)
    if not out.requires_grad:  # the reference's result for a batch without tokens
        return out, tuple(torch.zeros_like(x) for x in (q, k, v))
    grads = torch.autograd.grad(out, (q, k, v), dout, allow_unused=True)
    grads = tuple(
        torch.zeros_like(x) if g is None else g for x, g in zip((q, k, v), grads, strict=True)
    )
    return out.detach(), grads


def assert_matches_fp32(lengths, heads, attn_dim, hidden_dim, seed, offsets_dtype=None, **options):
    q, k, v, offsets, dout = jagged_inputs(
        lengths, heads, attn_dim, hidden_dim, seed, offsets_dtype or torch.int64
    )
    args = (max([*lengths, 1]) + 3, 0.4, offsets)
    got, got_grads = forward_backward(native_mha, q, k, v, dout, *args, **options)
    ref, ref_grads = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **options)
    assert got.dtype == torch.float32 and got.shape == ref.shape
    torch.testing.assert_close(got, ref, **FP32_TOL)
    for name, g, r in zip("qkv", got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, name=name: f"d{name}: {m}")


def assert_low_precision_oracle(lengths, heads, attn_dim, hidden_dim, seed, dtype, **options):
    q, k, v, offsets, dout = jagged_inputs(lengths, heads, attn_dim, hidden_dim, seed)
    q, k, v, dout = (x.to(dtype) for x in (q, k, v, dout))
    args = (max(lengths) + 1, 1.0 / attn_dim**0.5, offsets)
    got = forward_backward(native_mha, q, k, v, dout, *args, **options)
    ref16 = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **options)
    q32, k32, v32, dout32 = (x.float() for x in (q, k, v, dout))
    ref32 = forward_backward(pytorch_hstu_mha, q32, k32, v32, dout32, *args, **options)
    for name, g, r16, r32 in zip(
        ("out", "dq", "dk", "dv"),
        (got[0], *got[1]),
        (ref16[0], *ref16[1]),
        (ref32[0], *ref32[1]),
        strict=True,
    ):
        assert g.dtype == dtype, name
        err = (g.float() - r32).abs().max().item()
        ref_err = (r16.float() - r32).abs().max().item()
        assert err <= 2 * ref_err + LOW_PRECISION_ATOL, (
            f"{name}: |native - fp32| = {err:.3g}, |torch {dtype} - fp32| = {ref_err:.3g}"
        )


# --------------------------------------------------------------------------------------------
# The extension
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["hstu_mha_fwd", "hstu_mha_bwd"])
def test_ops_are_registered_for_cpu(op):
    assert hstu_ops.native_available(), hstu_ops.native_build_info()["error"]
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"hstu_ops::{op}", "CPU")
    assert _native.cpu_attention_isa() in ("generic", "avx2", "avx512")


# --------------------------------------------------------------------------------------------
# float32 against the reference: every mask option, odd and aligned widths
# --------------------------------------------------------------------------------------------
MASK_OPTIONS = [
    pytest.param(causal, targets, max_attn_len, ctx, id=f"{tag}-{tgt}-m{max_attn_len}-c{ctx}")
    for causal, tag in ((True, "causal"), (False, "full"))
    for targets, tgt in ((False, "notargets"), (True, "targets"))
    for max_attn_len, ctx in ((0, 0), (0, 3), (9, 1), (70, 3))
]


@pytest.mark.parametrize(("causal", "with_targets", "max_attn_len", "ctx"), MASK_OPTIONS)
def test_fp32_matches_reference(causal, with_targets, max_attn_len, ctx):
    """Widths 20 and 40 (padded copies), two heads, sequences of up to two tiles."""
    assert_matches_fp32(
        LENGTHS,
        heads=2,
        attn_dim=20,
        hidden_dim=40,
        seed=1000 * causal + 100 * with_targets + 10 * max_attn_len + ctx,
        causal=causal,
        num_targets=torch.tensor(TARGETS) if with_targets else None,
        max_attn_len=max_attn_len,
        contextual_seq_len=ctx,
    )


@pytest.mark.parametrize(
    ("attn_dim", "hidden_dim"), [(32, 16), (16, 100), (1, 7), (64, 128)], ids=str
)
def test_fp32_widths_read_in_place_or_padded(attn_dim, hidden_dim):
    assert_matches_fp32(
        [130, 3, 64, 65],
        heads=1,
        attn_dim=attn_dim,
        hidden_dim=hidden_dim,
        seed=attn_dim,
        num_targets=torch.tensor([5, 3, 0, 64]),
        contextual_seq_len=2,
        max_attn_len=50,
    )


def test_max_attn_len_longer_than_every_sequence_is_no_limit():
    assert_matches_fp32(
        [20, 5], 1, 16, 16, seed=1, max_attn_len=200, contextual_seq_len=1, causal=False
    )


def test_int32_offsets_and_targets():
    assert_matches_fp32(
        [7, 0, 66],
        2,
        16,
        24,
        seed=4,
        offsets_dtype=torch.int32,
        num_targets=torch.tensor([2, 0, 9], dtype=torch.int32),
        contextual_seq_len=1,
    )


def test_random_problems_hypothesis():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @st.composite
    def problems(draw):
        lengths = draw(st.lists(st.integers(0, 150), min_size=1, max_size=4))
        targets = None
        if draw(st.booleans()):
            targets = torch.tensor([draw(st.integers(0, n)) for n in lengths])
        return dict(
            lengths=lengths,
            heads=draw(st.integers(1, 3)),
            attn_dim=draw(st.sampled_from([1, 8, 16, 20, 33])),
            hidden_dim=draw(st.sampled_from([3, 16, 20, 48])),
            seed=draw(st.integers(0, 2**16)),
            offsets_dtype=draw(st.sampled_from([torch.int32, torch.int64])),
            causal=draw(st.booleans()),
            num_targets=targets,
            max_attn_len=draw(st.sampled_from([0, 1, 3, 8, 60, 200])),
            contextual_seq_len=draw(st.integers(0, 4)),
        )

    @hypothesis.settings(max_examples=30, deadline=None, derandomize=True, database=None)
    @hypothesis.given(problems())
    def check(problem):
        assert_matches_fp32(**problem)

    check()


# --------------------------------------------------------------------------------------------
# bfloat16 and float16: the flash-attention oracle
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "causal", "with_targets", "max_attn_len", "ctx"),
    [
        (torch.bfloat16, True, True, 0, 0),
        (torch.bfloat16, True, True, 9, 3),
        (torch.bfloat16, False, False, 0, 1),
        (torch.bfloat16, False, True, 5, 0),
        (torch.float16, True, True, 4, 1),
        (torch.float16, False, False, 0, 0),
    ],
    ids=[
        "causal-targets",
        "causal-targets-m9-c3",
        "full-c1",
        "full-targets-m5",
        "fp16",
        "fp16-full",
    ],
)
def test_low_precision_flash_attention_oracle(dtype, causal, with_targets, max_attn_len, ctx):
    assert_low_precision_oracle(
        LENGTHS,
        heads=2,
        attn_dim=32,
        hidden_dim=20,
        seed=11,
        dtype=dtype,
        causal=causal,
        num_targets=torch.tensor(TARGETS) if with_targets else None,
        max_attn_len=max_attn_len,
        contextual_seq_len=ctx,
    )


# --------------------------------------------------------------------------------------------
# Work decomposition and determinism
# --------------------------------------------------------------------------------------------
def test_backward_per_block_equals_per_sequence(threads):
    """One long sequence: per-block work items with 4 threads, per-sequence with 1 thread.

    Both add every dq row's contributions key block by key block in ascending order, with the
    same tile arithmetic, so they agree bit for bit (and with the reference to tolerance).
    """
    q, k, v, offsets, dout = jagged_inputs([300], 1, 32, 48, seed=8)
    options = dict(num_targets=torch.tensor([30]), contextual_seq_len=2, max_attn_len=100)
    args = (310, 0.3, offsets)
    threads(4)
    per_block = forward_backward(native_mha, q, k, v, dout, *args, **options)
    threads(1)
    per_sequence = forward_backward(native_mha, q, k, v, dout, *args, **options)
    ref = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **options)
    for a, b, r in zip(
        (per_block[0], *per_block[1]),
        (per_sequence[0], *per_sequence[1]),
        (ref[0], *ref[1]),
        strict=True,
    ):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, r, **FP32_TOL)


def test_backward_is_deterministic(threads):
    threads(3)
    q, k, v, offsets, dout = jagged_inputs([200, 12, 90], 2, 16, 16, seed=2)
    first = forward_backward(native_mha, q, k, v, dout, 210, 1.0, offsets)
    for _ in range(2):
        again = forward_backward(native_mha, q, k, v, dout, 210, 1.0, offsets)
        for a, b in zip((first[0], *first[1]), (again[0], *again[1]), strict=True):
            assert torch.equal(a, b)


# --------------------------------------------------------------------------------------------
# Layouts and edge cases
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("attn_dim", [16, 12])
def test_strided_slices_of_one_projection_and_expanded_gradient(attn_dim):
    """q, k, v sliced from one projection (row stride > width), sum() backward (stride 0)."""
    gen = torch.Generator().manual_seed(5)
    lengths = [9, 0, 80]
    heads, hidden_dim = 2, 32
    fused = torch.randn(sum(lengths), heads, 2 * attn_dim + hidden_dim, generator=gen)
    offsets = torch.tensor([0, 9, 9, 89], dtype=torch.int32)
    results = []
    for fn in (native_mha, pytorch_hstu_mha):
        x = fused.clone().requires_grad_()
        q, k, v = x.split([attn_dim, attn_dim, hidden_dim], dim=-1)
        assert not q.is_contiguous()
        out = fn(90, 0.5, q, k, v, offsets, num_targets=torch.tensor([2, 0, 3]))
        (grad,) = torch.autograd.grad(out.sum(), x)
        results.append((out, grad))
    torch.testing.assert_close(results[0][0], results[1][0], **FP32_TOL)
    torch.testing.assert_close(results[0][1], results[1][1], **FP32_TOL)


def test_empty_batches_give_zeros_and_zero_gradients():
    for lengths in ([], [0, 0]):
        q, k, v, offsets, dout = jagged_inputs(lengths, 2, 16, 8)
        out, grads = forward_backward(native_mha, q, k, v, dout, 4, 1.0, offsets)
        assert out.shape == (0, 2, 8)
        assert [g.shape for g in grads] == [(0, 2, 16), (0, 2, 16), (0, 2, 8)]


def test_zero_width_features():
    q, k, v, offsets, dout = jagged_inputs([5, 3], 2, 0, 4)
    out, (dq, dk, dv) = forward_backward(native_mha, q, k, v, dout, 8, 1.0, offsets)
    ref, ref_grads = forward_backward(pytorch_hstu_mha, q, k, v, dout, 8, 1.0, offsets)
    torch.testing.assert_close(out, ref)  # silu(0) = 0: no output at all
    assert dq.shape == dk.shape == (8, 2, 0) and torch.equal(dv, ref_grads[2])


# --------------------------------------------------------------------------------------------
# Dispatch, registration, errors
# --------------------------------------------------------------------------------------------
def test_default_kernel_native_runs_native(monkeypatch):
    from hstu_ops import hstu_attention

    def refuse(*args, **kwargs):
        raise AssertionError("the PYTORCH kernel ran although the default is NATIVE")

    q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
    expected = pytorch_hstu_mha(8, 1.0, q, k, v, offsets)
    monkeypatch.setattr(hstu_attention, "pytorch_hstu_mha", refuse)
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    torch.testing.assert_close(hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets), expected, **FP32_TOL)


def _opcheck_args():
    q, k, v, offsets, _ = jagged_inputs([5, 0, 70], 2, 16, 24, seed=3)
    args = (80, 0.5, *(x.requires_grad_() for x in (q, k, v)), offsets)
    kwargs = dict(
        causal=False, num_targets=torch.tensor([1, 0, 3]), max_attn_len=9, contextual_seq_len=2
    )
    return args, kwargs


def test_fake_tensors_and_opcheck():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(70, 2, 16)
        v = torch.empty(70, 2, 24, dtype=torch.float32)
        offsets = torch.empty(4, dtype=torch.int64)
        out = torch.ops.hstu_ops.hstu_mha_fwd(80, 0.5, q, q, v, offsets)
        assert out.shape == (70, 2, 24)
        dq, dk, dv = torch.ops.hstu_ops.hstu_mha_bwd(out, 80, 0.5, q, q, v, offsets)
        assert (dq.shape, dk.shape, dv.shape) == ((70, 2, 16), (70, 2, 16), (70, 2, 24))
    meta = torch.empty(70, 2, 16, device="meta", dtype=torch.bfloat16)
    offsets = torch.empty(4, dtype=torch.int32, device="meta")
    out = torch.ops.hstu_ops.hstu_mha_fwd(80, 0.5, meta, meta, meta[..., :8], offsets)
    assert out.device.type == "meta" and out.shape == (70, 2, 8) and out.dtype == torch.bfloat16
    args, kwargs = _opcheck_args()
    torch.library.opcheck(
        torch.ops.hstu_ops.hstu_mha_fwd,
        args,
        kwargs,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


@pytest.mark.slow  # imports and runs AOTAutograd
def test_opcheck_aot_dispatch():
    args, kwargs = _opcheck_args()
    torch.library.opcheck(
        torch.ops.hstu_ops.hstu_mha_fwd, args, kwargs, test_utils="test_aot_dispatch_dynamic"
    )


def test_errors():
    q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
    with pytest.raises(NotImplementedError, match=r"NATIVE kernel does not implement dropout"):
        native_mha(8, 1.0, q, k, v, offsets, dropout_pr=0.1)
    # Not training: dropout is the identity, which the kernel supports.
    torch.testing.assert_close(
        native_mha(8, 1.0, q, k, v, offsets, dropout_pr=0.1, training=False),
        pytorch_hstu_mha(8, 1.0, q, k, v, offsets),
        **FP32_TOL,
    )
    with pytest.raises(
        TypeError, match=r"supports float16, bfloat16 and float32, got torch.float64"
    ):
        native_mha(8, 1.0, q.double(), k.double(), v.double(), offsets)
    # The reference's checks, with its messages.
    with pytest.raises(ValueError, match=r"sequence 0 has 5 tokens, more than max_seq_len = 4"):
        native_mha(4, 1.0, q, k, v, offsets)
    with pytest.raises(ValueError, match=r"num_targets\[1\] = 4 is outside \[0, 3\]"):
        native_mha(8, 1.0, q, k, v, offsets, num_targets=torch.tensor([0, 4]))
    # Tensors on another device than the CPU (meta here; a CUDA test is below).
    with pytest.raises(
        ValueError, match=r"NATIVE kernel runs on CPU tensors only, but q is on meta"
    ):
        native_mha(8, 1.0, q.to("meta"), k, v, offsets)


def test_operator_checks_its_arguments_too():
    """torch.ops.hstu_ops.* are public: the C++ side repeats the checks, same wording."""
    q, k, v, offsets, dout = jagged_inputs([5, 3], 1, 16, 16)
    fwd = torch.ops.hstu_ops.hstu_mha_fwd
    with pytest.raises(ValueError, match=r"hstu_mha: sequence 0 has 5 tokens, more than max_seq"):
        fwd(4, 1.0, q, k, v, offsets)
    with pytest.raises(ValueError, match=r"hstu_mha: num_targets\[1\] = 4 is outside \[0, 3\]"):
        fwd(8, 1.0, q, k, v, offsets, num_targets=torch.tensor([0, 4]))
    with pytest.raises(ValueError, match=r"hstu_mha: seq_offsets\[-1\] = 8 does not match q"):
        fwd(8, 1.0, q[:7], k[:7], v[:7], offsets)
    with pytest.raises(ValueError, match=r"hstu_mha: seq_offsets is not monotone"):
        fwd(8, 1.0, q, k, v, torch.tensor([0, 6, 5, 8]))
    with pytest.raises(TypeError, match=r"hstu_mha: the NATIVE kernel supports float16, bfloat"):
        fwd(8, 1.0, q.double(), k.double(), v.double(), offsets)
    with pytest.raises(TypeError, match=r"num_targets must have dtype int32 or int64, got float32"):
        fwd(8, 1.0, q, k, v, offsets, num_targets=torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"k must have the shape of q"):
        fwd(8, 1.0, q, k[:, :, :8], v, offsets)
    with pytest.raises(ValueError, match=r"max_attn_len must be >= 0, got -1"):
        fwd(8, 1.0, q, k, v, offsets, max_attn_len=-1)
    with pytest.raises(ValueError, match=r"dout must have the shape of the output"):
        torch.ops.hstu_ops.hstu_mha_bwd(dout[:, :, :4], 8, 1.0, q, k, v, offsets)


@pytest.mark.gpu
@needs_cuda
def test_gpu_tensors_are_refused_with_the_device_named():
    q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
    with pytest.raises(
        ValueError, match=r"NATIVE kernel runs on CPU tensors only, but q is on cuda"
    ):
        native_mha(8, 1.0, q.cuda(), k.cuda(), v.cuda(), offsets.cuda())


# --------------------------------------------------------------------------------------------
# The kernels of every instruction set
# --------------------------------------------------------------------------------------------
def _runnable_isas():
    runnable = []
    saved = _native._C.cpu_attention_isa()
    for isa in ("generic", "avx2", "avx512"):
        try:
            _native._C._select_cpu_attention_isa(isa)
        except ValueError:
            continue
        runnable.append(isa)
    _native._C._select_cpu_attention_isa(saved)
    return runnable


@pytest.mark.parametrize("isa", ["generic", "avx2", "avx512"])
def test_every_instruction_set_matches_reference(isa):
    if isa not in _runnable_isas():
        pytest.skip(f"no {isa} kernels in this build or on this CPU")
    saved = _native._C._select_cpu_attention_isa(isa)
    try:
        assert _native.cpu_attention_isa() == isa
        for seed, (causal, targets, max_attn_len, ctx) in enumerate(
            [(True, True, 0, 2), (False, False, 30, 0), (True, False, 9, 1)]
        ):
            assert_matches_fp32(
                [0, 1, 70, 130],
                heads=2,
                attn_dim=20,
                hidden_dim=48,
                seed=seed,
                causal=causal,
                num_targets=torch.tensor([0, 1, 4, 9]) if targets else None,
                max_attn_len=max_attn_len,
                contextual_seq_len=ctx,
            )
        assert_low_precision_oracle([0, 1, 70, 130], 2, 32, 16, 3, torch.bfloat16)
    finally:
        _native._C._select_cpu_attention_isa(saved)
    with pytest.raises(ValueError, match=r"no CPU kernels for instruction set 'sve'"):
        _native._C._select_cpu_attention_isa("sve")


@pytest.mark.slow  # a fresh interpreter
def test_aten_cpu_capability_lowers_the_instruction_set():
    script = "from hstu_ops import _native; print(_native.cpu_attention_isa())"
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "generic"


def test_gradcheck_of_the_reference_float64():
    """The specification's own gradients (which the native backward is compared with)."""
    gen = torch.Generator().manual_seed(9)
    offsets = torch.tensor([0, 4, 4, 9])
    inputs = tuple(
        torch.randn(9, 2, d, generator=gen, dtype=torch.float64, requires_grad=True)
        for d in (3, 3, 2)
    )

    def fn(q, k, v):
        return pytorch_hstu_mha(
            6,
            0.8,
            q,
            k,
            v,
            offsets,
            causal=False,
            num_targets=torch.tensor([1, 0, 2]),
            max_attn_len=2,
            contextual_seq_len=2,
        )

    assert torch.autograd.gradcheck(fn, inputs)
