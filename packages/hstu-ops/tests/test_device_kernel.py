"""hstu_ops.device_kernel, choose and decide_kernel: what `auto` picks per device, the
refusals, and the kernel each op runs for a family, with the reason where it is another."""

from __future__ import annotations

import pytest

import hstu_ops
from hstu_ops import Kernel, KernelChoice, KernelDecision, KernelUnavailableError, device_kernel


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_auto_is_native_on_the_cpu_and_triton_on_a_gpu(no_interpreter):
    assert device_kernel("auto", "cpu") is Kernel.NATIVE
    assert device_kernel(Kernel.AUTO, "cuda") is Kernel.TRITON
    assert device_kernel("auto", "hip") is Kernel.TRITON


def test_auto_stays_native_on_the_cpu_under_the_interpreter(monkeypatch):
    """The interpreter makes triton runnable on the CPU, not the faster choice."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert device_kernel("auto", "cpu") is Kernel.NATIVE
    assert device_kernel("triton", "cpu") is Kernel.TRITON


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_explicit_kernel_that_can_run_is_kept(device, no_interpreter):
    assert device_kernel("pytorch", device) is Kernel.PYTORCH
    expected = {"cpu": Kernel.NATIVE, "cuda": Kernel.TRITON}[device]
    assert device_kernel(expected, device) is expected


def test_triton_on_the_cpu_needs_the_interpreter(no_interpreter):
    with pytest.raises(KernelUnavailableError) as info:
        device_kernel("triton", "cpu")
    refused = info.value
    assert (refused.kernel, refused.asked, refused.device_type) == ("triton", "triton", "cpu")
    assert "TRITON_INTERPRET=1" in refused.reason
    assert refused.alternatives == (Kernel.NATIVE, Kernel.PYTORCH)
    assert str(refused).startswith("triton cannot run on the cpu device: ")
    assert str(refused).endswith("use native or pytorch")


def test_native_on_a_gpu_is_refused():
    with pytest.raises(KernelUnavailableError, match=r"^native cannot run on the cuda"):
        device_kernel("native", "cuda")


def test_native_without_the_extension_is_refused_with_its_error(monkeypatch):
    info = {"cpu": False, "error": "no module hstu_ops._C"}
    monkeypatch.setattr(hstu_ops, "native_build_info", lambda: info)
    with pytest.raises(KernelUnavailableError) as refused:
        device_kernel("auto", "cpu")
    message = str(refused.value)
    assert message.startswith("auto (here native) cannot run on the cpu device: ")
    assert "no module hstu_ops._C" in message and message.endswith("use pytorch")


def test_triton_without_triton_is_refused(monkeypatch):
    monkeypatch.setattr(hstu_ops, "triton_available", lambda: False)
    with pytest.raises(KernelUnavailableError, match="cannot be imported"):
        device_kernel("auto", "cuda")


def test_an_unknown_kernel_is_refused():
    with pytest.raises(ValueError, match="unknown kernel 'cuda'"):
        device_kernel("cuda", "cpu")
    assert [k.value for k in Kernel] == ["auto", "pytorch", "native", "triton"]


def test_each_op_runs_the_family_where_it_has_it_else_its_reference_with_the_reason():
    assert hstu_ops.choose("hstu_mha", Kernel.NATIVE) == KernelChoice(
        "hstu_mha", Kernel.NATIVE, Kernel.NATIVE
    )
    assert hstu_ops.choose("hstu_compute_uqvk", "native") == KernelChoice(
        "hstu_compute_uqvk", Kernel.NATIVE, Kernel.PYTORCH, "hstu_compute_uqvk has no NATIVE kernel"
    )
    assert hstu_ops.choose("concat_1d_jagged", Kernel.TRITON).reason == (
        "concat_1d_jagged has no TRITON kernel"
    )
    assert hstu_ops.choose("hstu_compute_uqvk", Kernel.TRITON).used is Kernel.TRITON
    with pytest.raises(ValueError, match=r"addmm: resolve Kernel\.AUTO"):
        hstu_ops.choose("addmm", "auto")
    hstu_ops.set_default_kernel("native")
    try:  # the process default follows the same rule
        assert hstu_ops._kernel.resolve_kernel("hstu_compute_output", None) is Kernel.PYTORCH
        assert hstu_ops._kernel.resolve_kernel("complete_cumsum", None) is Kernel.NATIVE
    finally:
        hstu_ops.set_default_kernel("pytorch")
    with pytest.raises(ValueError, match=r"resolve Kernel\.AUTO"):
        hstu_ops.set_default_kernel("auto")


def test_a_decision_holds_one_choice_per_op_for_the_family_the_device_runs(no_interpreter):
    decision = hstu_ops.decide_kernel("auto", "cpu")
    assert (decision.requested, decision.family, decision.device_type) == (
        Kernel.AUTO,
        Kernel.NATIVE,
        "cpu",
    )
    assert [c.op for c in decision.choices] == list(hstu_ops.OP_KERNELS)
    for op, kernels in hstu_ops.OP_KERNELS.items():
        choice = decision.choice(op)
        assert choice == hstu_ops.choose(op, Kernel.NATIVE) and decision.kernel(op) is choice.used
        assert (choice.reason is None) == (Kernel.NATIVE in kernels)
    assert {c.op for c in decision.fallbacks()} == {
        op for op, kernels in hstu_ops.OP_KERNELS.items() if Kernel.NATIVE not in kernels
    }
    with pytest.raises(KernelUnavailableError):  # refused as device_kernel refuses it
        hstu_ops.decide_kernel("triton", "cpu")


def test_a_refused_op_runs_its_reference_with_the_reason_and_the_others_keep_theirs():
    decision = KernelDecision.given("triton")
    assert decision.device_type is None and decision.requested is Kernel.TRITON
    refused = decision.refusing({"addmm": "wrong on this device", "complete_cumsum": "unused"})
    assert refused.choice("addmm") == KernelChoice(
        "addmm", Kernel.TRITON, Kernel.PYTORCH, "wrong on this device"
    )
    # An op without the family keeps its own reason; the others are untouched.
    assert refused.choice("complete_cumsum").reason == "complete_cumsum has no TRITON kernel"
    assert refused.kernel("layer_norm") is Kernel.TRITON
    assert decision.kernel("addmm") is Kernel.TRITON, "a decision is a value"
    with pytest.raises(ValueError, match="unknown op 'addm'"):
        decision.refusing({"addm": "typo"})
    # Nothing is kept per process: a kernel passed to the op runs as asked.
    assert hstu_ops._kernel.resolve_kernel("addmm", "triton") is Kernel.TRITON
    with pytest.raises(ValueError, match="addmm has no NATIVE kernel"):
        hstu_ops._kernel.resolve_kernel("addmm", "native")


def test_a_decision_needs_every_op_once_for_its_family():
    choices = KernelDecision.given("pytorch").choices
    with pytest.raises(ValueError, match="one choice for every op"):
        KernelDecision(Kernel.PYTORCH, Kernel.PYTORCH, None, choices[1:])
    with pytest.raises(ValueError, match="every choice must be for native"):
        KernelDecision(Kernel.NATIVE, Kernel.NATIVE, None, choices)
    with pytest.raises(ValueError, match="unknown kernel 'cuda'"):
        KernelDecision.given("cuda")
