"""TRITON hstu_mha (forward and backward) against the PyTorch reference.

Without a GPU the kernels run in Triton's interpreter on CPU tensors, loaded by the
``load_triton`` fixture of conftest.py (which explains why a module per mode). A subprocess test
covers the documented way, ``TRITON_INTERPRET=1`` in the environment before Python starts;
another one ``import hstu_ops`` without triton.

Tolerances: float32 ``atol=1e-5, rtol=1e-4`` (the kernels multiply in IEEE float32, no TF32);
bfloat16 and float16 the flash-attention oracle ``max|out - ref32| <= 2 * max|ref16 - ref32| +
1e-4`` for out, dq, dk and dv, where ref32 is the float32 reference on the upcast inputs and
ref16 the reference run in the low precision.

Dropout: the kernels' mask is a pure function of (seed, sequence, head, query, key), exposed by
``dropout_keep_mask``; out, dq, dk, dv must equal the reference with its ``F.dropout``
replaced by that mask (same tolerances as above), the forward's applied mask is read back with
v = identity, the mask's bits are checked against a plain-Python Philox4x32-10 (the
``philox4x32`` fixture of conftest.py, itself checked against Random123's known answers), and
the kept fraction must be 1 - p within 5 sigma.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel
from hstu_ops.pytorch import pytorch_hstu_mha

BACKEND = "hstu_ops.triton.triton_hstu_attention"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-4}
BF16_ATOL = 1e-4


# --------------------------------------------------------------------------------------------
# Inputs and comparisons
# --------------------------------------------------------------------------------------------
def jagged_inputs(lengths, heads, attn_dim, hidden_dim, dtype=torch.float32, seed=0, device="cpu"):
    gen = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64)
    total = int(offsets[-1])
    q = torch.randn(total, heads, attn_dim, generator=gen)
    k = torch.randn(total, heads, attn_dim, generator=gen)
    v = torch.randn(total, heads, hidden_dim, generator=gen)
    dout = torch.randn(total, heads, hidden_dim, generator=gen)
    move = lambda x: x.to(device=device, dtype=dtype)  # noqa: E731
    return move(q), move(k), move(v), offsets.to(device), move(dout)


def forward_backward(fn, q, k, v, dout, *args, **kwargs):
    """(out, (dq, dk, dv)) of fn(..., q, k, v, ...) for the output gradient dout."""
    q, k, v = (x.detach().clone().requires_grad_() for x in (q, k, v))
    out = fn(args[0], args[1], q, k, v, *args[2:], **kwargs)
    if not out.requires_grad:  # the reference's result for a batch without tokens
        return out, tuple(torch.zeros_like(x) for x in (q, k, v))
    grads = torch.autograd.grad(out, (q, k, v), dout, allow_unused=True)
    grads = tuple(
        torch.zeros_like(x) if g is None else g for x, g in zip((q, k, v), grads, strict=True)
    )
    return out.detach(), grads


def assert_matches_fp32(
    tt, lengths, heads, attn_dim, hidden_dim, seed, cfg=None, device="cpu", tol=None, **options
):
    q, k, v, offsets, dout = jagged_inputs(
        lengths, heads, attn_dim, hidden_dim, seed=seed, device=device
    )
    tol = tol or FP32_TOL
    max_seq_len = max([*lengths, 1]) + 3
    args = (max_seq_len, 0.4, offsets)
    got, got_grads = forward_backward(
        tt.triton_hstu_mha, q, k, v, dout, *args, block_config=cfg, **options
    )
    ref, ref_grads = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **options)
    torch.testing.assert_close(got, ref, **tol)
    for name, g, r in zip("qkv", got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **tol, msg=lambda m, name=name: f"d{name}: {m}")


NAMES = ("out", "dq", "dk", "dv")


def flat(result):
    """(out, dq, dk, dv) of a forward_backward result."""
    return (result[0], *result[1])


@pytest.fixture
def bf16_oracle(flash_oracle):
    """``bf16_oracle(tt, lengths, heads, attn_dim, hidden_dim, seed, ...)``: the flash-attention
    oracle for out, dq, dk, dv (bfloat16 unless dtype says)."""

    def check(
        tt, lengths, heads, attn_dim, hidden_dim, seed, cfg=None, device="cpu", dtype=None, **opts
    ):
        dtype = dtype or torch.bfloat16
        q, k, v, offsets, dout = jagged_inputs(
            lengths, heads, attn_dim, hidden_dim, seed=seed, device=device
        )
        q, k, v, dout = (x.to(dtype) for x in (q, k, v, dout))
        args = (max(lengths) + 1, 1.0 / attn_dim**0.5, offsets)
        got = forward_backward(tt.triton_hstu_mha, q, k, v, dout, *args, block_config=cfg, **opts)
        ref16 = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **opts)
        q32, k32, v32, dout32 = (x.float() for x in (q, k, v, dout))
        ref32 = forward_backward(pytorch_hstu_mha, q32, k32, v32, dout32, *args, **opts)
        assert got[0].dtype == dtype
        flash_oracle(NAMES, flat(got), flat(ref16), flat(ref32), atol=BF16_ATOL)

    return check


# --------------------------------------------------------------------------------------------
# Without triton, and the kernel enum
# --------------------------------------------------------------------------------------------
def test_kernel_enum_and_dispatch_list():
    assert Kernel("triton") is Kernel.TRITON
    with pytest.raises(ValueError, match=r"complete_cumsum has no TRITON kernel"):
        hstu_ops.complete_cumsum(torch.tensor([1]), kernel=Kernel.TRITON)


@pytest.mark.slow  # a fresh interpreter
def test_import_and_clear_error_without_triton():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["triton"] = None  # any `import triton` now fails
        import torch
        import hstu_ops
        from hstu_ops import Kernel, TritonUnavailableError
        assert "triton" not in [m for m in sys.modules if sys.modules[m] is not None]
        q = torch.randn(4, 1, 16)
        offsets = torch.tensor([0, 4])
        try:
            hstu_ops.hstu_mha(8, 1.0, q, q, q, offsets, kernel=Kernel.TRITON)
        except TritonUnavailableError as exc:
            print(exc)
        else:
            raise AssertionError("no error")
        assert not hstu_ops.triton_available()
        # The default kernel may be TRITON: ops without a TRITON kernel run PYTORCH.
        hstu_ops.set_default_kernel("triton")
        assert hstu_ops.complete_cumsum(torch.tensor([1, 2])).tolist() == [0, 1, 3]
        out = hstu_ops.hstu_mha(8, 1.0, q, q, q, offsets, kernel="pytorch")
        assert out.shape == (4, 1, 16)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hstu_mha: the TRITON kernel needs the `triton` package, which is not installed" in (
        result.stdout
    )


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.triton
def test_interpreter_from_the_environment_in_a_fresh_process():
    """The documented way: TRITON_INTERPRET=1 before Python starts; dispatch by hstu_mha."""
    script = textwrap.dedent(
        """
        import torch
        import hstu_ops
        from hstu_ops import Kernel
        assert hstu_ops.triton_available()
        gen = torch.Generator().manual_seed(0)
        offsets = torch.tensor([0, 5, 5, 24])
        q, k = (torch.randn(24, 2, 16, generator=gen, requires_grad=True) for _ in range(2))
        v = torch.randn(24, 2, 32, generator=gen, requires_grad=True)
        kw = dict(num_targets=torch.tensor([1, 0, 4]), contextual_seq_len=1, max_attn_len=6)
        outs = [hstu_ops.hstu_mha(30, 0.5, q, k, v, offsets, kernel=kern, **kw)
                for kern in (Kernel.TRITON, Kernel.PYTORCH)]
        torch.testing.assert_close(outs[0], outs[1], atol=1e-5, rtol=1e-4)
        grads = [torch.autograd.grad(o.square().sum(), (q, k, v)) for o in outs]
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
        print("ok")
        """
    )
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


@pytest.mark.triton
def test_interpreted_although_triton_was_imported_without_the_variable(triton_backend):
    """Only hstu_ops' own jit functions are used (the module's and _common's, imported in one
    mode), so their import alone decides the mode."""
    import triton.language as tl
    from triton.runtime.jit import JITFunction

    if os.environ.get("TRITON_INTERPRET") != "1":
        assert isinstance(tl.sigmoid, JITFunction)  # the library's own jit functions: compiled
    with triton_backend(interpret=True) as tt:
        q, k, v, offsets, _ = jagged_inputs([3], 1, 16, 16)
        out = tt.triton_hstu_mha(4, 1.0, q, k, v, offsets)
    torch.testing.assert_close(out, pytorch_hstu_mha(4, 1.0, q, k, v, offsets), **FP32_TOL)


# --------------------------------------------------------------------------------------------
# float32 against the reference, every mask option, odd shapes
# --------------------------------------------------------------------------------------------
LENGTHS = [0, 1, 6, 42, 123]
TARGETS = [0, 1, 6, 7, 40]  # two all-target sequences, one target block longer than a tile
# Non-square tiles, different in every kernel, so no range can hide behind an aligned bound.
MIXED_TILES = dict(
    fwd_block_m=32,
    fwd_block_n=16,
    dkdv_block_m=16,
    dkdv_block_n=32,
    dq_block_m=32,
    dq_block_n=16,
)

MASK_OPTIONS = [
    pytest.param(causal, targets, max_attn_len, ctx, id=f"{tag}-{tgt}-m{max_attn_len}-c{ctx}")
    for causal, tag in ((True, "causal"), (False, "full"))
    for targets, tgt in ((False, "notargets"), (True, "targets"))
    for max_attn_len, ctx in ((0, 0), (0, 3), (9, 1), (4, 3))
]


@pytest.mark.triton
@pytest.mark.parametrize(("causal", "with_targets", "max_attn_len", "ctx"), MASK_OPTIONS)
def test_fp32_matches_reference(tt, causal, with_targets, max_attn_len, ctx):
    assert_matches_fp32(
        tt,
        LENGTHS,
        heads=1,
        attn_dim=16,
        hidden_dim=32,
        seed=1000 * causal + 100 * with_targets + 10 * max_attn_len + ctx,
        cfg=tt.BlockConfig(**MIXED_TILES),
        causal=causal,
        num_targets=torch.tensor(TARGETS) if with_targets else None,
        max_attn_len=max_attn_len,
        contextual_seq_len=ctx,
    )


@pytest.mark.triton
def test_fp32_two_heads_default_tiles_and_dispatch(tt):
    """Through hstu_mha(kernel="triton") with the interpreter's 16 x 16 tiles, two heads."""
    q, k, v, offsets, dout = jagged_inputs([42, 0, 17, 1], 2, 32, 16, seed=7)
    options = dict(num_targets=torch.tensor([5, 0, 17, 1]), max_attn_len=11, contextual_seq_len=2)
    got, got_grads = forward_backward(
        hstu_ops.hstu_mha, q, k, v, dout, 50, 0.3, offsets, kernel="triton", **options
    )
    ref, ref_grads = forward_backward(pytorch_hstu_mha, q, k, v, dout, 50, 0.3, offsets, **options)
    torch.testing.assert_close(got, ref, **FP32_TOL)
    for g, r in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL)


@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("dims", [(32, 64), (128, 96)])
def test_gpu_default_tiles_in_the_interpreter(tt, bf16_oracle, dtype, dims):
    """The tiles a GPU would use (large, one block per short sequence) give the same result."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tt, "INTERPRETED", False)
        cfg = tt.default_block_config(*dims, dtype)
    assert cfg.fwd_block_m >= 32
    if dtype == torch.float32:
        assert_matches_fp32(
            tt, [70, 3, 0, 33], 1, *dims, seed=3, cfg=cfg, num_targets=torch.tensor([4, 3, 0, 0])
        )
    else:
        bf16_oracle(tt, [70, 3, 0, 33], 1, *dims, seed=3, cfg=cfg, contextual_seq_len=2)


@pytest.mark.triton
def test_max_attn_len_longer_than_every_sequence_is_no_limit(tt):
    assert_matches_fp32(
        tt, [20, 5], 1, 16, 16, seed=1, max_attn_len=200, contextual_seq_len=1, causal=False
    )


# --------------------------------------------------------------------------------------------
# bfloat16 (and float16): the flash-attention oracle
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
@pytest.mark.parametrize(
    ("dtype", "causal", "with_targets", "max_attn_len", "ctx"),
    [
        (torch.bfloat16, True, True, 0, 0),
        (torch.bfloat16, True, True, 9, 3),
        (torch.bfloat16, False, False, 0, 1),
        (torch.bfloat16, False, True, 5, 0),
        (torch.float16, True, True, 4, 1),
    ],
    ids=["causal-targets", "causal-targets-m9-c3", "full-c1", "full-targets-m5", "fp16"],
)
def test_low_precision_flash_attention_oracle(
    tt, bf16_oracle, dtype, causal, with_targets, max_attn_len, ctx
):
    bf16_oracle(
        tt,
        LENGTHS,
        heads=2,
        attn_dim=32,
        hidden_dim=16,
        seed=11,
        cfg=tt.BlockConfig(**MIXED_TILES),
        dtype=dtype,
        causal=causal,
        num_targets=torch.tensor(TARGETS) if with_targets else None,
        max_attn_len=max_attn_len,
        contextual_seq_len=ctx,
    )


# --------------------------------------------------------------------------------------------
# Random problems
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
def test_random_problems_hypothesis(triton_backend):
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @st.composite
    def problems(draw):
        lengths = draw(st.lists(st.integers(0, 50), min_size=1, max_size=4))
        targets = None
        if draw(st.booleans()):
            targets = [draw(st.integers(0, n)) for n in lengths]
        tiles = draw(st.sampled_from([16, 32]))
        return dict(
            lengths=lengths,
            heads=draw(st.integers(1, 2)),
            attn_dim=draw(st.sampled_from([8, 16, 24, 32])),
            hidden_dim=draw(st.sampled_from([8, 16, 20, 32])),
            seed=draw(st.integers(0, 2**16)),
            cfg=dict(
                fwd_block_m=tiles,
                fwd_block_n=48 - tiles,
                dkdv_block_m=48 - tiles,
                dkdv_block_n=tiles,
                dq_block_m=tiles,
                dq_block_n=tiles,
            ),
            causal=draw(st.booleans()),
            num_targets=None if targets is None else torch.tensor(targets),
            max_attn_len=draw(st.sampled_from([0, 1, 3, 8, 60])),
            contextual_seq_len=draw(st.integers(0, 3)),
        )

    @hypothesis.settings(max_examples=6, deadline=None, derandomize=True, database=None)
    @hypothesis.given(problems())
    def check(problem):
        with triton_backend(interpret=True) as tt:
            problem["cfg"] = tt.BlockConfig(**problem["cfg"])
            assert_matches_fp32(tt, **problem)

    check()


# --------------------------------------------------------------------------------------------
# Layouts, edge cases, errors
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
def test_strided_inputs_int32_offsets_and_expanded_gradient(tt):
    """q, k, v sliced from one projection (row stride > width), int32 offsets, sum() backward."""
    gen = torch.Generator().manual_seed(5)
    lengths = [9, 0, 20]
    total, heads, attn_dim, hidden_dim = sum(lengths), 2, 16, 24
    fused = torch.randn(total, heads, 2 * attn_dim + hidden_dim, generator=gen)
    offsets = torch.tensor([0, 9, 9, 29], dtype=torch.int32)
    results = []
    for fn in (tt.triton_hstu_mha, pytorch_hstu_mha):
        x = fused.clone().requires_grad_()
        q, k, v = x.split([attn_dim, attn_dim, hidden_dim], dim=-1)
        assert not q.is_contiguous()
        out = fn(32, 0.5, q, k, v, offsets, num_targets=torch.tensor([2, 0, 3], dtype=torch.int32))
        (grad,) = torch.autograd.grad(out.sum(), x)  # the output gradient has stride 0
        results.append((out, grad))
    torch.testing.assert_close(results[0][0], results[1][0], **FP32_TOL)
    torch.testing.assert_close(results[0][1], results[1][1], **FP32_TOL)


@pytest.mark.triton
def test_empty_batches_give_zeros_and_zero_gradients(tt):
    for lengths in ([], [0, 0]):
        q, k, v, offsets, dout = jagged_inputs(lengths, 2, 16, 8)
        out, grads = forward_backward(tt.triton_hstu_mha, q, k, v, dout, 4, 1.0, offsets)
        assert out.shape == (0, 2, 8)
        assert [g.shape for g in grads] == [(0, 2, 16), (0, 2, 16), (0, 2, 8)]


@pytest.mark.triton
def test_backward_is_deterministic(tt):
    q, k, v, offsets, dout = jagged_inputs([37, 12], 2, 16, 16, seed=2)
    first = forward_backward(tt.triton_hstu_mha, q, k, v, dout, 40, 1.0, offsets)
    second = forward_backward(tt.triton_hstu_mha, q, k, v, dout, 40, 1.0, offsets)
    for a, b in zip((first[0], *first[1]), (second[0], *second[1]), strict=True):
        assert torch.equal(a, b)


@pytest.mark.triton
def test_default_kernel_triton_runs_triton_for_hstu_mha(tt, monkeypatch):
    calls = []
    real = tt.triton_hstu_mha
    monkeypatch.setattr(tt, "triton_hstu_mha", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
    hstu_ops.set_default_kernel(Kernel.TRITON)
    got = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets)
    assert calls == [1]
    torch.testing.assert_close(got, pytorch_hstu_mha(8, 1.0, q, k, v, offsets), **FP32_TOL)
    # Ops without a TRITON kernel run their PYTORCH kernel.
    assert hstu_ops.complete_cumsum(torch.tensor([2, 1])).tolist() == [0, 2, 3]


@pytest.mark.triton
def test_dtype_and_argument_errors(tt):
    q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
    with pytest.raises(ValueError, match=r"hstu_mha: dropout_pr must be in \[0, 1\], got 1.5"):
        hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, dropout_pr=1.5, kernel=Kernel.TRITON)
    with pytest.raises(ValueError, match=r"hstu_mha: dropout_pr must be in \[0, 1\], got -0.1"):
        tt.dropout_keep_mask(1, offsets, 1, -0.1)
    with pytest.raises(
        TypeError, match=r"supports float16, bfloat16 and float32, got torch.float64"
    ):
        hstu_ops.hstu_mha(8, 1.0, q.double(), k.double(), v.double(), offsets, kernel="triton")
    # The argument checks are the reference's, with its messages.
    with pytest.raises(ValueError, match=r"sequence 0 has 5 tokens, more than max_seq_len = 4"):
        hstu_ops.hstu_mha(4, 1.0, q, k, v, offsets, kernel="triton")
    with pytest.raises(ValueError, match=r"num_targets\[1\] = 4 is outside \[0, 3\]"):
        hstu_ops.hstu_mha(
            8, 1.0, q, k, v, offsets, num_targets=torch.tensor([0, 4]), kernel="triton"
        )
    with pytest.raises(ValueError, match=r"power of 2 >= 16, got 24"):
        tt.BlockConfig(fwd_block_m=24)


@pytest.mark.triton
def test_cpu_tensors_without_the_interpreter_are_refused(triton_backend):
    with triton_backend(interpret=False) as compiled:
        assert not compiled.INTERPRETED
        q, k, v, offsets, _ = jagged_inputs([5, 3], 1, 16, 16)
        with pytest.raises(ValueError, match=r"needs CUDA or ROCm tensors, got cpu tensors"):
            hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, kernel=Kernel.TRITON)


@pytest.mark.triton
def test_backend_module_and_environment_are_restored(triton_backend):
    common = "hstu_ops.triton._common"
    before = (sys.modules.get(BACKEND), sys.modules.get(common), os.environ.get("TRITON_INTERPRET"))
    for interpret in (True, False):
        with triton_backend(interpret=interpret) as module:
            assert sys.modules[BACKEND] is module
            assert module.INTERPRETED is interpret
            assert sys.modules[common].INTERPRETED is interpret
        after = (
            sys.modules.get(BACKEND),
            sys.modules.get(common),
            os.environ.get("TRITON_INTERPRET"),
        )
        assert after == before


# --------------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------------
class _MaskedDropout:
    """Stands in for torch.nn.functional in the reference: F.dropout becomes weights * mask /
    (1 - p) with the kernel's own mask; everything else is torch's."""

    def __init__(self, mask, p):
        self.mask, self.p, self.calls = mask, p, 0

    def dropout(self, weights, p, training):
        assert (p, training) == (self.p, True)
        assert weights.shape == self.mask.shape
        self.calls += 1
        return weights * self.mask / (1 - p) if p < 1 else weights * 0

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)


def reference_with_mask(monkeypatch, mask, p):
    """pytorch_hstu_mha with ``mask`` as its dropout mask (until the monkeypatch is undone)."""
    from hstu_ops.pytorch import pt_hstu_attention

    stand_in = _MaskedDropout(mask, p)
    monkeypatch.setattr(pt_hstu_attention, "F", stand_in)
    return stand_in


# Philox costs ~150 interpreted operations per tile: shorter sequences and larger tiles than
# above, still different in every kernel.
DROPOUT_LENGTHS = [0, 1, 6, 45, 70]
DROPOUT_TARGETS = [0, 1, 6, 5, 20]
DROPOUT_TILES = dict(
    fwd_block_m=64,
    fwd_block_n=32,
    dkdv_block_m=32,
    dkdv_block_n=64,
    dq_block_m=32,
    dq_block_n=16,
)
DROPOUT_CASES = [
    pytest.param(torch.float32, 2, True, True, 0, 3, 0.3, id="fp32-causal-targets-c3-p0.3"),
    pytest.param(torch.float32, 1, False, False, 9, 1, 0.6, id="fp32-full-m9-c1-p0.6"),
    pytest.param(torch.bfloat16, 1, True, True, 4, 0, 0.2, id="bf16-causal-targets-m4-p0.2"),
]


@pytest.mark.triton
@pytest.mark.parametrize(
    ("dtype", "heads", "causal", "with_targets", "max_attn_len", "ctx", "p"), DROPOUT_CASES
)
def test_dropout_matches_reference_with_the_kernel_mask(
    tt, monkeypatch, flash_oracle, dtype, heads, causal, with_targets, max_attn_len, ctx, p
):
    """out, dq, dk, dv equal the reference formula with the mask of dropout_keep_mask (which the
    backward kernels regenerate: nothing is stored), with tiles different in every kernel."""
    seed = 0x0123456789ABCDEF
    options = dict(
        causal=causal,
        num_targets=torch.tensor(DROPOUT_TARGETS) if with_targets else None,
        max_attn_len=max_attn_len,
        contextual_seq_len=ctx,
        dropout_pr=p,
    )
    q, k, v, offsets, dout = jagged_inputs(DROPOUT_LENGTHS, heads, 16, 24, seed=21)
    mask = tt.dropout_keep_mask(seed, offsets, heads, p)
    n = max(DROPOUT_LENGTHS)
    assert mask.shape == (len(DROPOUT_LENGTHS), heads, n, n)
    args = (n + 2, 0.4, offsets)
    cfg = tt.BlockConfig(**DROPOUT_TILES)
    q, k, v, dout = (x.to(dtype) for x in (q, k, v, dout))
    got = forward_backward(
        tt.triton_hstu_mha, q, k, v, dout, *args, block_config=cfg, dropout_seed=seed, **options
    )
    stand_in = reference_with_mask(monkeypatch, mask.to(dtype), p)
    ref = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, **options)
    assert stand_in.calls == 1
    if dtype == torch.float32:
        for name, g, r in zip(NAMES, flat(got), flat(ref), strict=True):
            torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, name=name: f"{name}: {m}")
        return
    stand_in.mask = mask.float()
    ref32 = forward_backward(
        pytorch_hstu_mha, *(x.float() for x in (q, k, v, dout)), *args, **options
    )
    flash_oracle(NAMES, flat(got), flat(ref), flat(ref32), atol=BF16_ATOL)


@pytest.mark.triton
def test_dropout_mask_is_philox_of_sequence_head_query_key(tt, philox4x32):
    """Entry (b, h, i, j) of the mask is kept iff the top 24 bits of the first word of
    Philox4x32-10(counter (j, i, h, b), key (seed low, seed high)) are >= round(p * 2**24)."""
    seed, p = 0xFEDCBA9876543210, 0.45
    offsets = torch.tensor([0, 3, 3, 8])
    mask = tt.dropout_keep_mask(seed, offsets, 2, p)
    threshold = round(p * 2**24)
    key = (seed & 0xFFFFFFFF, seed >> 32)
    for b, n in enumerate((3, 0, 5)):
        for h, i, j in itertools.product(range(2), range(5), range(5)):
            word = philox4x32((j, i, h, b), key)[0]
            assert bool(mask[b, h, i, j]) == (i < n and j < n and (word >> 8) >= threshold)


@pytest.mark.triton
def test_dropout_mask_recovered_from_the_kernel_output(tt):
    """v = identity: out row i is row i of the dropped weights, so (out != 0) is the mask that
    the forward kernel applied, to compare with dropout_keep_mask's on every allowed pair."""
    n, seed, p = 40, 99, 0.5
    offsets = torch.tensor([0, n])
    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(n, 1, 16, generator=gen) for _ in range(2))
    v = torch.eye(n).reshape(n, 1, n)
    out = tt.triton_hstu_mha(
        n, 1.0, q, k, v, offsets, causal=False, dropout_pr=p, dropout_seed=seed
    )
    applied = out[:, 0, :] != 0
    expected = tt.dropout_keep_mask(seed, offsets, 1, p)[0, 0]
    assert torch.equal(applied, expected)  # no mask option: every pair is allowed
    undropped = tt.triton_hstu_mha(n, 1.0, q, k, v, offsets, causal=False)[:, 0, :]
    torch.testing.assert_close(out[:, 0, :], undropped * expected / (1 - p), **FP32_TOL)


@pytest.mark.triton
def test_dropout_keep_fraction_and_independence(tt):
    """The kept fraction is 1 - p (within 5 sigma), and the masks of different heads,
    sequences and seeds are independent (they agree on p**2 + (1 - p)**2 of the entries)."""
    n = 64
    offsets = torch.tensor([0, n, 2 * n])
    for p in (0.1, 0.5, 0.85):
        mask = tt.dropout_keep_mask(7, offsets, 2, p).float()
        other_seed = tt.dropout_keep_mask(8, offsets, 2, p).float()
        count = mask.numel()
        sigma = (p * (1 - p) / count) ** 0.5
        assert abs(mask.mean().item() - (1 - p)) < 5 * sigma, p
        agree = p**2 + (1 - p) ** 2
        sigma_agree = (agree * (1 - agree) / (count / 2)) ** 0.5
        for a, b in ((mask[:, 0], mask[:, 1]), (mask[0], mask[1]), (mask, other_seed)):
            assert abs((a == b).float().mean().item() - agree) < 6 * sigma_agree, p


@pytest.mark.triton
def test_dropout_reproducible_with_the_seed_and_torch_manual_seed(tt):
    q, k, v, offsets, dout = jagged_inputs([20, 9], 2, 16, 16, seed=4)
    run = lambda **kw: forward_backward(  # noqa: E731
        tt.triton_hstu_mha, q, k, v, dout, 30, 0.5, offsets, dropout_pr=0.4, **kw
    )

    torch.manual_seed(1234)
    first = flat(run())
    torch.manual_seed(1234)
    drawn = tt.draw_dropout_seed()
    torch.manual_seed(1234)
    second = flat(run())
    explicit = flat(run(dropout_seed=drawn))
    for a, b, c in zip(first, second, explicit, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    torch.manual_seed(4321)
    other = tt.triton_hstu_mha(30, 0.5, q, k, v, offsets, dropout_pr=0.4)
    assert not torch.equal(first[0], other)


@pytest.mark.triton
def test_dropout_off_paths_and_drop_everything(tt):
    """dropout_pr = 0, or training=False: the no-dropout kernels, bit for bit, and torch's
    generator untouched; dropout_pr = 1: zeros and zero gradients, as F.dropout gives."""
    q, k, v, offsets, dout = jagged_inputs([20, 5], 2, 16, 8, seed=8)
    args = (q, k, v, dout, 32, 0.5, offsets)
    plain = forward_backward(tt.triton_hstu_mha, *args)
    state = torch.get_rng_state()
    for kw in (dict(dropout_pr=0.0), dict(dropout_pr=0.5, training=False)):
        result = forward_backward(tt.triton_hstu_mha, *args, **kw)
        for a, b in zip((plain[0], *plain[1]), (result[0], *result[1]), strict=True):
            assert torch.equal(a, b), kw
    assert torch.equal(state, torch.get_rng_state())
    torch.testing.assert_close(plain[0], pytorch_hstu_mha(32, 0.5, q, k, v, offsets), **FP32_TOL)
    everything = forward_backward(tt.triton_hstu_mha, *args, dropout_pr=1.0)
    for x in (everything[0], *everything[1]):
        assert torch.count_nonzero(x) == 0


# --------------------------------------------------------------------------------------------
# Compilation for a GPU target, without a GPU
# --------------------------------------------------------------------------------------------
# Argument types of the kernels' signatures (other arguments are i32).
SIGNATURE_TYPES = {
    **dict.fromkeys(("Q", "K", "V", "Out", "DO", "DQ", "DK", "DV"), "*bf16"),
    **dict.fromkeys(("seq_offsets", "num_targets"), "*i64"),
    "Mask": "*i8",
    **dict.fromkeys(("alpha", "inv_max_seq_len", "inv_keep"), "fp32"),
}


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.parametrize("dropout", [False, True], ids=["plain", "dropout"])
def test_kernels_compile_for_gpus(gpu_target, dropout, triton_backend):
    """The interpreter does not type-check like the compiler: compile the real thing, no GPU.

    Each path with its default tiles (dropout has its own); with dropout, also the mask kernel.
    """
    with triton_backend(interpret=False) as compiled:
        cfg = compiled.default_block_config(128, 128, torch.bfloat16, dropout=dropout)
        kernels = (
            (compiled._hstu_attn_fwd_kernel, cfg.fwd_block_m, cfg.fwd_block_n, cfg.fwd_warps),
            (
                compiled._hstu_attn_bwd_dkdv_kernel,
                cfg.dkdv_block_m,
                cfg.dkdv_block_n,
                cfg.dkdv_warps,
            ),
            (compiled._hstu_attn_bwd_dq_kernel, cfg.dq_block_m, cfg.dq_block_n, cfg.dq_warps),
        )
        if dropout:
            kernels += ((compiled._dropout_mask_kernel, 64, 64, 4),)
        for kernel, block_m, block_n, warps in kernels:
            constants = dict(
                CAUSAL=True,
                HAS_CTX=True,
                HAS_TARGETS=True,
                HAS_MAX_ATTN_LEN=True,
                HAS_DROPOUT=dropout,
                BLOCK_M=block_m,
                BLOCK_N=block_n,
                BLOCK_DQK=128,
                BLOCK_DV=128,
                FULL_DQK=True,
                FULL_DV=True,
                DOT_PRECISION=None,
                INTERPRET_BF16=False,
                FAST_MATH=gpu_target.vendor,
            )
            options = {"num_warps": warps, "num_stages": cfg.num_stages}
            binary = gpu_target.compile(kernel, constants, options, types=SIGNATURE_TYPES)
            shared = binary.metadata.shared
            assert shared <= gpu_target.max_shared, (kernel.__name__, shared)


# --------------------------------------------------------------------------------------------
# On a GPU: compiled kernels
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(dtype, triton_backend, bf16_oracle):
    lengths = [0, 1, 100, 513, 1000, 77]
    options = dict(num_targets=torch.tensor([0, 1, 10, 20, 64, 0]).cuda(), contextual_seq_len=3)
    with triton_backend(interpret=False) as compiled:
        for dims in ((64, 64), (128, 96)):
            if dtype == torch.float32:
                tol = {"atol": 1e-4, "rtol": 1e-3}
                assert_matches_fp32(
                    compiled, lengths, 2, *dims, 1, device="cuda", tol=tol, **options
                )
            else:
                bf16_oracle(compiled, lengths, 2, *dims, seed=2, device="cuda", **options)


@pytest.mark.gpu
@pytest.mark.triton
def test_gpu_dropout_matches_reference_with_the_kernel_mask(triton_backend, monkeypatch):
    lengths, heads, seed, p = [0, 1, 100, 513, 77], 2, 2024, 0.25
    options = dict(num_targets=torch.tensor([0, 1, 10, 20, 0]).cuda(), contextual_seq_len=3)
    with triton_backend(interpret=False) as compiled:
        q, k, v, offsets, dout = jagged_inputs(lengths, heads, 64, 64, seed=5, device="cuda")
        mask = compiled.dropout_keep_mask(seed, offsets, heads, p)
        args = (max(lengths), 0.2, offsets)
        got = forward_backward(
            compiled.triton_hstu_mha, q, k, v, dout, *args, dropout_pr=p, dropout_seed=seed,
            **options,
        )  # fmt: skip
        reference_with_mask(monkeypatch, mask.float(), p)
        ref = forward_backward(pytorch_hstu_mha, q, k, v, dout, *args, dropout_pr=p, **options)
        for g, r in zip((got[0], *got[1]), (ref[0], *ref[1]), strict=True):
            torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-3)
