"""hstu_ops._kernel.dispatch: every op of every family picks its function through it, with
the kernels OP_KERNELS lists for it; a fallback carries its reason; the kernel it picks agrees
with the reference at odd shapes."""

from __future__ import annotations

import importlib

import pytest
import torch

import hstu_ops
from hstu_ops import OP_KERNELS, Kernel, choose, selfcheck
from hstu_ops._kernel import dispatch
from hstu_ops.pytorch.pt_norms import pytorch_layer_norm

OP_MODULES = ("hstu_attention", "hstu_compute", "jagged", "mm", "norms", "position")
"""The modules of the public ops (hstu_ops.<module>)."""


@pytest.fixture
def dispatched(monkeypatch) -> dict[str, tuple[Kernel, ...]]:
    """Every op module's `dispatch` recorded: op -> the kernels it offered."""
    offered: dict[str, tuple[Kernel, ...]] = {}

    def recording(op, kernel, *, pytorch, native=None, triton=None):
        kernels = (Kernel.PYTORCH,) + (Kernel.NATIVE,) * (native is not None)
        offered[op] = kernels + (Kernel.TRITON,) * (triton is not None)
        return dispatch(op, kernel, pytorch=pytorch, native=native, triton=triton)

    for name in OP_MODULES:
        module = importlib.import_module(f"hstu_ops.{name}")
        assert module.dispatch is dispatch, f"hstu_ops.{name} picks its kernels another way"
        monkeypatch.setattr(module, "dispatch", recording)
    return offered


def test_every_op_goes_through_dispatch_with_the_kernels_it_lists(dispatched):
    for case in selfcheck.build_cases(torch.device("cpu"), selfcheck.TINY):
        case.call(case.inputs, Kernel.PYTORCH)
    assert dispatched == dict(OP_KERNELS)


def test_every_op_runs_the_process_default_where_it_has_it_else_its_reference(dispatched):
    hstu_ops.set_default_kernel("native")
    for case in selfcheck.build_cases(torch.device("cpu"), selfcheck.TINY):
        case.call(case.inputs, None)
    assert set(dispatched) == set(OP_KERNELS)
    for op in OP_KERNELS:
        chosen, _ = dispatch(op, None, pytorch=len, native=abs, triton="unused")
        assert chosen is choose(op, Kernel.NATIVE).used


def test_a_fallback_runs_the_reference_and_says_why():
    hstu_ops.set_default_kernel("native")
    chosen, impl = dispatch("layer_norm", None, pytorch=pytorch_layer_norm, triton="triton_norms")
    assert (chosen, impl) == (Kernel.PYTORCH, pytorch_layer_norm)
    assert choose("layer_norm", hstu_ops.get_default_kernel()).reason == (
        "layer_norm has no NATIVE kernel"
    )


def test_an_explicit_kernel_the_op_lacks_or_does_not_give_is_an_error():
    with pytest.raises(ValueError, match="addmm has no NATIVE kernel; kernels available"):
        dispatch("addmm", "native", pytorch=len, triton="triton_addmm")
    with pytest.raises(RuntimeError, match="hstu_mha: OP_KERNELS lists a NATIVE kernel"):
        dispatch("hstu_mha", "native", pytorch=len, triton="triton_hstu_attention")


def _lengths(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


@pytest.mark.parametrize("lengths", [(), (0,), (7,), (0, 3, 0, 1), (5, 0, 13, 2, 1)])
def test_native_1d_jagged_ops_agree_with_the_reference_at_odd_shapes(lengths):
    if not hstu_ops.native_available():
        pytest.skip("the native extension did not load")
    gen = torch.Generator().manual_seed(len(lengths))
    la = _lengths(*lengths)
    lb = _lengths(*(n % 4 for n in lengths))
    for kernel in (Kernel.NATIVE, Kernel.PYTORCH):
        assert hstu_ops.complete_cumsum(la, kernel=kernel).tolist() == (
            [0, *torch.cumsum(la, 0).tolist()]
        )
    oa = hstu_ops.complete_cumsum(la, kernel="pytorch")
    ob = hstu_ops.complete_cumsum(lb, kernel="pytorch")
    a = torch.randn(int(la.sum()), 3, generator=gen)
    b = torch.randn(int(lb.sum()), 3, generator=gen)
    got = hstu_ops.concat_1d_jagged(a, oa, b, ob, kernel="native")
    want = hstu_ops.concat_1d_jagged(a, oa, b, ob, kernel="pytorch")
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    got = hstu_ops.split_1d_jagged(want[0], want[1], oa, kernel="native")
    for g, w in zip(got, (a, b, ob), strict=True):
        assert torch.equal(g, w)


@pytest.mark.parametrize(("lengths", "heads", "dim"), [((1,), 1, 1), ((0, 5, 13), 3, 5)])
def test_native_attention_agrees_with_the_reference_at_odd_shapes(lengths, heads, dim):
    if not hstu_ops.native_available():
        pytest.skip("the native extension did not load")
    gen = torch.Generator().manual_seed(dim)
    offsets = hstu_ops.complete_cumsum(_lengths(*lengths), kernel="pytorch")
    q, k, v = (torch.randn(int(offsets[-1]), heads, dim, generator=gen) for _ in range(3))
    targets = torch.clamp(_lengths(*lengths) // 3, min=0)
    out = {
        kernel: hstu_ops.hstu_mha(16, 0.5, q, k, v, offsets, num_targets=targets, kernel=kernel)
        for kernel in ("native", "pytorch")
    }
    torch.testing.assert_close(out["native"], out["pytorch"], atol=1e-5, rtol=1e-5)


@pytest.mark.triton
@pytest.mark.parametrize("width", [1, 37])
def test_triton_norm_and_addmm_agree_with_the_reference_at_odd_shapes(load_triton, width):
    gen = torch.Generator().manual_seed(width)
    x, w, b = torch.randn(5, width, generator=gen), torch.randn(width), torch.randn(width)
    with load_triton("hstu_ops.triton.triton_norms"):
        got = hstu_ops.layer_norm(x, w, b, 1e-6, kernel="triton")
    torch.testing.assert_close(got, pytorch_layer_norm(x, w, b, 1e-6), atol=1e-5, rtol=1e-5)
    m = torch.randn(width, 3, generator=gen)
    bias = torch.randn(3, generator=gen)
    with load_triton("hstu_ops.triton.triton_addmm"):
        got = hstu_ops.addmm(bias, x, m, kernel="triton")
    # TF32-free in the interpreter; the tolerance covers the tiles' summation order.
    torch.testing.assert_close(got, torch.addmm(bias, x, m), atol=1e-4, rtol=1e-4)
