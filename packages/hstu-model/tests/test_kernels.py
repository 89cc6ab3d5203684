"""hstu_model.training.kernels: what `auto` picks per device, and the refusals."""

from __future__ import annotations

import pytest

import hstu_ops
from hstu_model import ConfigError
from hstu_model.training import kernels
from hstu_model.training.kernels import KernelUnavailableError, resolve_kernel


@pytest.fixture
def no_interpreter(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_auto_is_native_on_the_cpu_and_triton_on_a_gpu(no_interpreter):
    assert resolve_kernel("auto", "cpu") == "native"
    assert resolve_kernel("auto", "cuda") == "triton"
    assert resolve_kernel("auto", "hip") == "triton"


def test_auto_stays_native_on_the_cpu_under_the_interpreter(monkeypatch):
    """The interpreter makes triton runnable on the CPU, not the faster choice."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert resolve_kernel("auto", "cpu") == "native"
    assert resolve_kernel("triton", "cpu") == "triton"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_explicit_kernel_that_can_run_is_kept(device, no_interpreter):
    assert resolve_kernel("pytorch", device) == "pytorch"
    expected = {"cpu": "native", "cuda": "triton"}[device]
    assert resolve_kernel(expected, device) == expected


def test_triton_on_the_cpu_needs_the_interpreter(no_interpreter):
    with pytest.raises(KernelUnavailableError) as info:
        resolve_kernel("triton", "cpu")
    message = str(info.value)
    assert message.startswith("--kernel triton cannot run on the cpu device: ")
    assert "TRITON_INTERPRET=1" in message
    assert message.endswith("use --kernel native or --kernel pytorch")
    assert isinstance(info.value, ConfigError)  # train.py reports it as a bad input


def test_native_on_a_gpu_is_refused():
    with pytest.raises(KernelUnavailableError, match=r"^--kernel native cannot run on the cuda"):
        resolve_kernel("native", "cuda")


def test_native_without_the_extension_is_refused_with_its_error(monkeypatch):
    info = {"cpu": False, "error": "no module hstu_ops._C"}
    monkeypatch.setattr(hstu_ops, "native_build_info", lambda: info)
    with pytest.raises(KernelUnavailableError) as refused:
        resolve_kernel("auto", "cpu")
    message = str(refused.value)
    assert message.startswith("--kernel auto (here native) cannot run on the cpu device: ")
    assert "no module hstu_ops._C" in message and message.endswith("use --kernel pytorch")


def test_triton_without_triton_is_refused(monkeypatch):
    monkeypatch.setattr(hstu_ops, "triton_available", lambda: False)
    with pytest.raises(KernelUnavailableError, match="cannot be imported"):
        resolve_kernel("auto", "cuda")


def test_an_unknown_kernel_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown kernel 'cuda'"):
        resolve_kernel("cuda", "cpu")
    assert kernels.KERNELS == ("auto", "pytorch", "native", "triton")
