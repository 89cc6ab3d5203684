"""hstu_ops.device_kernel and fallback: what `auto` picks per device, the refusals, and the
kernel each op runs for a family."""

from __future__ import annotations

import pytest

import hstu_ops
from hstu_ops import Kernel, KernelUnavailableError, device_kernel


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


def test_each_op_runs_the_family_where_it_has_it_else_its_reference():
    assert hstu_ops.fallback("hstu_mha", Kernel.NATIVE) is Kernel.NATIVE
    assert hstu_ops.fallback("hstu_compute_uqvk", Kernel.NATIVE) is Kernel.PYTORCH
    assert hstu_ops.fallback("concat_1d_jagged", Kernel.TRITON) is Kernel.PYTORCH
    assert hstu_ops.fallback("hstu_compute_uqvk", Kernel.TRITON) is Kernel.TRITON
    hstu_ops.set_default_kernel("native")
    try:  # the process default follows the same rule
        assert hstu_ops._kernel.resolve_kernel("hstu_compute_output", None) is Kernel.PYTORCH
        assert hstu_ops._kernel.resolve_kernel("complete_cumsum", None) is Kernel.NATIVE
    finally:
        hstu_ops.set_default_kernel("pytorch")
    with pytest.raises(ValueError, match=r"resolve Kernel\.AUTO"):
        hstu_ops.set_default_kernel("auto")


def test_a_refused_kernel_runs_the_reference_wherever_it_is_chosen(fresh_kernel_checks):
    """One rule for a model's family, the process default and a kernel passed to the op."""
    hstu_ops._kernel.refuse_kernel("addmm", Kernel.TRITON, "wrong on this device")
    assert hstu_ops.fallback("addmm", Kernel.TRITON) is Kernel.PYTORCH
    assert hstu_ops._kernel.resolve_kernel("addmm", "triton") is Kernel.PYTORCH
    hstu_ops.set_default_kernel("triton")
    assert hstu_ops._kernel.resolve_kernel("addmm", None) is Kernel.PYTORCH
    # The refusal is the op's alone, and a kernel the op lacks is still an error.
    assert hstu_ops.fallback("layer_norm", Kernel.TRITON) is Kernel.TRITON
    assert hstu_ops._kernel.resolve_kernel("layer_norm", None) is Kernel.TRITON
    with pytest.raises(ValueError, match="addmm has no NATIVE kernel"):
        hstu_ops._kernel.resolve_kernel("addmm", "native")
