"""hstu_ops.selfcheck: the cases cover every fast kernel, and the check that `auto` runs on a GPU
sends an op whose Triton kernel fails to its reference in the run's decision, with the finding
as the reason, and keeps the others.

The Triton kernels run in the interpreter on CPU tensors, so the check runs on the "cpu"
device here; the ops checked are limited to the norms (a fraction of a second each).
"""

from __future__ import annotations

import pytest
import torch

import hstu_ops
from hstu_ops import OP_KERNELS, Kernel, KernelDecision, selfcheck
from hstu_ops.pytorch.pt_norms import pytorch_rms_norm

pytestmark = [pytest.mark.triton, pytest.mark.usefixtures("fresh_kernel_checks")]

NORMS = "hstu_ops.triton.triton_norms"


@pytest.fixture
def norms(load_triton):
    """The Triton norms, interpreted (and the other Triton modules imported while it is held)."""
    with load_triton(NORMS) as module:
        yield module


@pytest.fixture
def reports() -> list[str]:
    return []


def counting(monkeypatch, module, name: str) -> list:
    """Replaces ``module.name`` by the same function that records its calls."""
    calls, real = [], getattr(module, name)

    def recorded(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, recorded)
    return calls


def make_rms_norm_wrong(monkeypatch, norms) -> list:
    """The Triton rms_norm plus uniform noise drawn from torch's global generator (so that the
    check's own random stream shows if it leaks); returns its calls."""
    calls, real = [], norms.triton_rms_norm

    def wrong(*args, **kwargs):
        calls.append(args)
        out = real(*args, **kwargs)
        return out + torch.rand_like(out)

    monkeypatch.setattr(norms, "triton_rms_norm", wrong)
    return calls


def test_every_op_with_a_kernel_besides_its_reference_has_a_case():
    ops = {case.op for case in selfcheck.build_cases(torch.device("cpu"), selfcheck.TINY)}
    assert ops == {op for op, kernels in OP_KERNELS.items() if kernels != (Kernel.PYTORCH,)}


def auto_as_on_a_gpu(monkeypatch) -> KernelDecision:
    """The CPU taken for a GPU, so that auto means TRITON there (run by the interpreter)."""
    monkeypatch.setattr(hstu_ops._kernel, "GPU_DEVICE_TYPES", ("cuda", "hip", "cpu"))
    return hstu_ops.decide_kernel("auto", "cpu")


def test_a_passing_op_keeps_its_triton_kernel(norms, reports):
    refused = selfcheck.verify_kernel("triton", "cpu", ops=["rms_norm"], report=reports.append)
    assert refused == {} and reports == []


def test_a_wrong_op_is_found_and_the_others_pass(norms, reports, monkeypatch):
    calls = make_rms_norm_wrong(monkeypatch, norms)
    rng = torch.get_rng_state()
    refused = selfcheck.verify_kernel(
        Kernel.TRITON, "cpu", ops=["rms_norm", "layer_norm"], report=reports.append
    )
    assert calls, "the check ran the Triton rms_norm"
    assert torch.equal(torch.get_rng_state(), rng), "the check moved the global generator"
    assert list(refused) == ["rms_norm"]
    assert "rms_norm in float32: error" in refused["rms_norm"]
    assert "rms_norm in bfloat16: error" in refused["rms_norm"]
    assert reports == [
        f"hstu-ops: rms_norm runs its PYTORCH reference on cpu: its TRITON kernel failed the "
        f"self-check ({refused['rms_norm']})"
    ]
    # The finding changes no process state: a call that names TRITON still runs it.
    calls.clear()
    hstu_ops.rms_norm(torch.randn(5, 32), torch.randn(32), 1e-6, kernel="triton")
    assert len(calls) == 1


def test_the_decision_sends_a_wrong_op_to_its_reference_with_the_finding(
    norms, reports, monkeypatch
):
    calls = make_rms_norm_wrong(monkeypatch, norms)
    monkeypatch.setattr(selfcheck, "verify_kernel", _limited_to_norms(selfcheck.verify_kernel))
    decision = selfcheck.verify_decision(
        auto_as_on_a_gpu(monkeypatch), "cpu", report=reports.append
    )
    rms = decision.choice("rms_norm")
    assert (rms.requested, rms.used) == (Kernel.TRITON, Kernel.PYTORCH)
    assert rms.reason.startswith(
        "its TRITON kernel failed the self-check on cpu (rms_norm in float32: error "
    )
    assert decision.kernel("layer_norm") is Kernel.TRITON
    assert decision.choice("layer_norm").reason is None
    assert [c.op for c in decision.fallbacks() if c.requested in OP_KERNELS[c.op]] == ["rms_norm"]
    assert len(reports) == 1
    # The op run with the decision's kernel gets the reference's result.
    calls.clear()
    x, weight = torch.randn(5, 32), torch.randn(32)
    out = hstu_ops.rms_norm(x, weight, 1e-6, kernel=decision.kernel("rms_norm"))
    assert calls == [] and torch.equal(out, pytorch_rms_norm(x, weight, 1e-6))


def _limited_to_norms(verify):
    def limited(kernel, device, **kwargs):
        return verify(kernel, device, ops=["rms_norm", "layer_norm"], **kwargs)

    return limited


def test_an_op_that_raises_is_refused_with_its_exception(norms, reports, monkeypatch):
    def raising(*args, **kwargs):
        raise RuntimeError("no kernel image for this device\nsecond line")

    monkeypatch.setattr(norms, "triton_layer_norm", raising)
    refused = selfcheck.verify_kernel("triton", "cpu", ops=["layer_norm"], report=reports.append)
    assert refused == {
        "layer_norm": "layer_norm in float32: RuntimeError: no kernel image for this device; "
        "layer_norm in bfloat16: RuntimeError: no kernel image for this device"
    }
    assert len(reports) == 1 and "\n" not in reports[0]


def test_an_op_is_checked_once_per_process_and_device(norms, reports, monkeypatch):
    make_rms_norm_wrong(monkeypatch, norms)
    first = selfcheck.verify_kernel("triton", "cpu", ops=["rms_norm"], report=reports.append)
    built = counting(monkeypatch, selfcheck, "build_cases")
    again = selfcheck.verify_kernel("triton", "cpu", ops=["rms_norm"], report=reports.append)
    assert again == first and list(first) == ["rms_norm"]
    assert built == [] and len(reports) == 1
    # An op not checked yet is checked then, alone.
    selfcheck.verify_kernel("triton", "cpu", ops=["rms_norm", "layer_norm"], report=reports.append)
    assert len(built) == 1 and len(reports) == 1


def test_an_explicit_family_and_auto_on_the_cpu_are_not_checked(norms, reports, monkeypatch):
    make_rms_norm_wrong(monkeypatch, norms)
    built = counting(monkeypatch, selfcheck, "build_cases")
    for decision in (
        hstu_ops.decide_kernel("triton", "cpu"),
        KernelDecision.given(Kernel.TRITON),
        hstu_ops.decide_kernel("auto", "cpu"),  # native there
    ):
        assert selfcheck.verify_decision(decision, "cpu", report=reports.append) is decision
    assert built == [] and reports == []


def test_an_op_without_the_kernel_is_not_checked(norms):
    with pytest.raises(ValueError, match="'complete_cumsum' has no TRITON kernel"):
        selfcheck.verify_kernel("triton", "cpu", ops=["complete_cumsum"])


@pytest.mark.slow
def test_auto_where_it_means_triton_checks_every_triton_kernel(norms, monkeypatch, capsys):
    """The CPU taken for a GPU, so that auto means TRITON there: every Triton kernel is checked
    (in the interpreter), the wrong one is named on stderr and runs its reference, the others
    stay TRITON."""
    decision = auto_as_on_a_gpu(monkeypatch)
    make_rms_norm_wrong(monkeypatch, norms)
    decision = hstu_ops.verify_decision(decision, "cpu")
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "hstu-ops: rms_norm runs its PYTORCH reference on cpu: its TRITON kernel failed the "
        "self-check (rms_norm in float32: error "
    )
    triton_ops = [op for op, kernels in OP_KERNELS.items() if Kernel.TRITON in kernels]
    assert {op: decision.kernel(op) for op in triton_ops} == {
        op: Kernel.PYTORCH if op == "rms_norm" else Kernel.TRITON for op in triton_ops
    }
