"""The TRITON attention's forward + backward reads nothing back from the GPU where its caller
vouches for the offsets (``hstu_ops.index_values_trusted``, what the model does around its
layers), and still refuses bad offsets by default.

No GPU: the launches are recorded for an H100 (``hstu_ops.gpu_compile.record_launches``,
where the ops take the GPU path on CPU tensors), and every value the op would copy to the host
is counted as the tensor method that reads it: ``int(t)``, ``bool(t)``, ``float(t)``,
``t.item()``, ``t.nonzero()``, ``t.tolist()``.
"""

from __future__ import annotations

import pytest
import torch

import hstu_ops
from hstu_ops.gpu_compile import GPU_TARGETS, record_launches

_READING_METHODS = (
    "__bool__", "__float__", "__index__", "__int__", "item", "nonzero", "tolist",
)  # fmt: skip
"""The tensor methods that copy values to the host (on a GPU tensor: wait for the GPU)."""


@pytest.fixture
def host_reads(monkeypatch) -> list[str]:
    """The names of the reading methods called from now on, in order."""
    reads: list[str] = []
    for name in _READING_METHODS:
        method = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _method=method, **kwargs):
            reads.append(_name)
            return _method(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    monkeypatch.setattr(torch, "nonzero", lambda x, *a, **kw: x.nonzero(*a, **kw))
    return reads


def _attention_inputs(offsets):
    total = int(offsets[-1])
    gen = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(total, 2, 32, generator=gen).bfloat16().requires_grad_() for _ in range(3)
    )
    return q, k, v, torch.tensor([1, 2], dtype=torch.int64)


def _forward_and_backward_reads(offsets, reads: list[str]) -> tuple[list[str], list[str]]:
    q, k, v, targets = _attention_inputs(offsets)
    dout = torch.ones(q.shape, dtype=q.dtype)
    del reads[:]
    out = hstu_ops.hstu_mha(64, 0.2, q, k, v, offsets, num_targets=targets, kernel="triton")
    forward = list(reads)
    out.backward(dout)
    return forward, reads[len(forward) :]


@pytest.mark.slow  # imports the compiled kernels
@pytest.mark.triton
def test_no_host_reads_with_the_callers_offsets(load_triton, host_reads):
    offsets = torch.tensor([0, 40, 61], dtype=torch.int64)
    with (
        load_triton("hstu_ops.triton._common", interpret=False),
        record_launches(GPU_TARGETS["sm90"]) as recorder,
    ):
        default_forward, default_backward = _forward_and_backward_reads(offsets, host_reads)
        with hstu_ops.index_values_trusted():
            trusted_forward, trusted_backward = _forward_and_backward_reads(offsets, host_reads)
    assert len(recorder.kernels()) == 3
    # By default the forward checks the offsets' and targets' values (each check a read); the
    # backward takes the same tensors, which the forward checked.
    assert len(default_forward) >= 4, default_forward
    assert default_backward == []
    assert trusted_forward == [] and trusted_backward == []


@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        ([0, 45, 40, 61], r"seq_offsets is not monotone: seq_offsets\[2\] = 40"),
        ([1, 40, 61], r"seq_offsets\[0\] = 1, expected 0"),
        ([0, 40, 60], r"seq_offsets\[-1\] = 60 does not match q.shape\[0\] = 61"),
    ],
)
def test_bad_offsets_are_refused_by_default(load_triton, offsets, message):
    q, k, v, _ = _attention_inputs(torch.tensor([0, 61]))
    offsets = torch.tensor(offsets, dtype=torch.int64)
    with (
        load_triton("hstu_ops.triton._common", interpret=False),
        record_launches(GPU_TARGETS["sm90"]),
        pytest.raises(ValueError, match=message),
    ):
        hstu_ops.hstu_mha(64, 0.2, q, k, v, offsets, kernel="triton")
