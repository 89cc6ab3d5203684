"""The Triton attention as torch custom ops (hstu_ops.triton_ops): fake kernels, a whole-graph
torch.compile, run-time checks of the index values, and no value read where none may be."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import hstu_ops
from hstu_ops import _index_checks

pytestmark = pytest.mark.triton
BACKEND = "hstu_ops.triton.triton_hstu_attention"

LENGTHS = [5, 0, 9]
HEADS, DIM = 2, 16


def problem(dtype=torch.float32):
    gen = torch.Generator().manual_seed(3)
    total = sum(LENGTHS)
    q, k, v = (torch.randn(total, HEADS, DIM, generator=gen, dtype=dtype) for _ in range(3))
    offsets = hstu_ops.complete_cumsum(torch.tensor(LENGTHS))
    targets = torch.tensor([1, 0, 2])
    return q, k, v, offsets, targets


def attention(q, k, v, offsets, targets, dropout_pr=0.0):
    return hstu_ops.hstu_mha(
        max(LENGTHS), 0.25, q, k, v, offsets, dropout_pr=dropout_pr, num_targets=targets,
        contextual_seq_len=1, kernel="triton",
    )  # fmt: skip


def test_fake_tensors_run_through_forward_and_backward(tt):
    q, k, v, offsets, targets = problem()
    with FakeTensorMode(allow_non_fake_inputs=False) as mode:
        fq, fk, fv = (mode.from_tensor(x).requires_grad_() for x in (q, k, v))
        out = attention(fq, fk, fv, mode.from_tensor(offsets), mode.from_tensor(targets), 0.2)
        assert out.shape == (sum(LENGTHS), HEADS, DIM) and out.dtype == torch.float32
        dq, dk, dv = torch.autograd.grad(out.sum(), (fq, fk, fv))
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


def test_opcheck_of_the_forward_op(tt):
    q, k, v, offsets, targets = problem()
    args = (q, k, v, offsets, targets, 9, 0.25, True, 0.0, 0, 1, None, [16] * 6 + [1, 1, 1, 1])
    torch.library.opcheck(torch.ops.hstu_ops.triton_hstu_mha_fwd.default, args)


def test_compiled_step_is_one_graph_and_matches_eager(tt):
    """fullgraph=True fails on any graph break; the compiled forward and backward match the
    eager ones exactly (the same kernels run)."""
    q, k, v, offsets, targets = problem()

    def step(q, k, v):
        out = attention(q, k, v, offsets, targets)
        return (out * out).sum()

    eager_inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    eager = step(*eager_inputs)
    eager.backward()
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    inputs = [x.clone().requires_grad_() for x in (q, k, v)]
    loss = compiled(*inputs)
    loss.backward()
    torch.testing.assert_close(loss, eager, rtol=0, atol=0)
    for got, want in zip(inputs, eager_inputs, strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


def test_compiled_graph_still_refuses_bad_offsets(tt):
    q, k, v, offsets, targets = problem()
    compiled = torch.compile(attention, fullgraph=True, backend="aot_eager")
    bad = offsets.clone()
    bad[2] = bad[1] - 1  # not monotone
    with pytest.raises(
        ValueError, match=r"hstu_mha: seq_offsets is not monotone: seq_offsets\[2\]"
    ):
        compiled(q, k, v, bad, targets)
    too_many = torch.tensor([1, 0, 10])
    with pytest.raises(ValueError, match=r"hstu_mha: num_targets\[2\] = 10 is outside \[0, 9\]"):
        compiled(q, k, v, offsets, too_many)


def test_index_value_checks_can_be_turned_off(tt, monkeypatch):
    """Off, no value of an index tensor is read (no GPU wait): a bad target count is not
    refused. Shapes are still checked."""
    q, k, v, offsets, _targets = problem()
    monkeypatch.setattr(_index_checks, "_enabled", True)
    hstu_ops.set_index_value_checks(False)
    try:
        attention(q, k, v, offsets, torch.tensor([1, 0, 10]))
        with pytest.raises(ValueError, match="num_targets must be 1-D with one entry per"):
            attention(q, k, v, offsets, torch.tensor([1, 0]))
    finally:
        _index_checks.set_index_value_checks(True)
    with pytest.raises(TypeError, match="enabled must be a bool"):
        _index_checks.set_index_value_checks(1)


def test_the_wrapper_reads_no_index_value(tt, monkeypatch):
    """The launcher's path before the op reads no tensor value: every such read (Tensor.item,
    int(), nonzero) would synchronise with a GPU."""
    q, k, v, offsets, targets = problem()
    import hstu_ops.triton_ops as ops

    seen, reads, inside = [], [], []
    real = ops.hstu_mha_fwd

    def record(*args):
        seen.append(args)
        inside.append(True)  # the op itself reads the (CPU) values it checks
        try:
            return real(*args)
        finally:
            inside.pop()

    monkeypatch.setattr(ops, "hstu_mha_fwd", record)

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in (torch.Tensor.item, torch.Tensor.__int__, torch.Tensor.nonzero,
                        torch.Tensor.__bool__, torch.Tensor.tolist) and not inside:  # fmt: skip
                reads.append(func)
            return func(*args, **(kwargs or {}))

    with Spy():
        tt.triton_hstu_mha(9, 0.25, q, k, v, offsets, num_targets=targets, dropout_pr=0.1)
    assert len(seen) == 1
    assert reads == []
    # The value checks, which the op runs, do read values: the spy sees such reads.
    from hstu_ops.pytorch.pt_hstu_attention import _check_inputs

    with Spy():
        _check_inputs(9, q, k, v, offsets, 0.1, targets, 0, 0)
    assert reads
