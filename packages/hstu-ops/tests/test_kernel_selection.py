import importlib.metadata

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel
from hstu_ops.pytorch import pt_jagged


def test_default_is_pytorch():
    assert hstu_ops.get_default_kernel() is Kernel.PYTORCH


def test_set_default_accepts_enum_and_names():
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    assert hstu_ops.get_default_kernel() is Kernel.NATIVE
    hstu_ops.set_default_kernel("pytorch")
    assert hstu_ops.get_default_kernel() is Kernel.PYTORCH
    hstu_ops.set_default_kernel("NATIVE")
    assert hstu_ops.get_default_kernel() is Kernel.NATIVE


def test_unknown_kernel_name_is_rejected():
    with pytest.raises(ValueError, match=r"unknown kernel 'cuda'"):
        hstu_ops.set_default_kernel("cuda")
    with pytest.raises(ValueError, match=r"complete_cumsum: unknown kernel"):
        hstu_ops.complete_cumsum(torch.tensor([1]), kernel="fast")


def test_an_op_without_the_kernel_names_itself_and_its_kernels():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=r"layer_norm has no NATIVE kernel.*PYTORCH, TRITON"):
        hstu_ops.layer_norm(x, None, None, kernel=Kernel.NATIVE)


def test_default_native_falls_back_to_pytorch_where_an_op_has_no_native_kernel():
    x = torch.randn(3, 4)
    expected = hstu_ops.layer_norm(x, None, None)
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    torch.testing.assert_close(hstu_ops.layer_norm(x, None, None), expected)


def test_default_kernel_is_used_when_kernel_is_none(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the PYTORCH kernel ran although the default is NATIVE")

    monkeypatch.setattr(pt_jagged, "pytorch_concat_1d_jagged", refuse)
    monkeypatch.setattr(pt_jagged, "pytorch_complete_cumsum", refuse)
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    assert hstu_ops.complete_cumsum(torch.tensor([2, 1])).tolist() == [0, 2, 3]
    offsets = torch.tensor([0, 1])
    values, _ = hstu_ops.concat_1d_jagged(torch.ones(1), offsets, torch.zeros(1), offsets)
    assert values.tolist() == [1.0, 0.0]
    # An explicit kernel wins over the default.
    with pytest.raises(AssertionError, match="PYTORCH kernel ran"):
        hstu_ops.complete_cumsum(torch.tensor([1]), kernel=Kernel.PYTORCH)


def test_the_triton_interpreter_problem_names_the_versions_and_the_fix(monkeypatch):
    problem = hstu_ops.triton_interpreter_problem("3.6.0", "2.5.2")
    assert problem and "numpy<2.4 or triton>=3.7" in problem and "3.6.0" in problem
    assert "2.5.2" in problem
    assert hstu_ops.triton_interpreter_problem("3.6.0", "2.3.5") is None
    assert hstu_ops.triton_interpreter_problem("3.7.0", "2.5.2") is None
    assert hstu_ops.triton_interpreter_problem("3.8.0rc1", "2.4.0") is None
    assert hstu_ops.triton_interpreter_problem("3.6.0+git1234", "2.4.0.dev0") is not None
    # Defaults: the installed versions; no triton installed, no problem.
    installed = {"numpy": "2.5.2", "triton": "3.6.0"}

    def version(name):
        if name not in installed:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert "3.6.0" in hstu_ops.triton_interpreter_problem()
    del installed["triton"]
    assert hstu_ops.triton_interpreter_problem() is None
