"""The native extension is part of the product: in this workspace it must be built and load."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel, NativeExtensionError, _native

OPS = ("complete_cumsum", "concat_1d_jagged", "split_1d_jagged")


def test_native_extension_is_built_and_loads():
    info = hstu_ops.native_build_info()
    assert hstu_ops.native_available(), (
        "hstu_ops._C is not available: the native extension was not built or failed to load "
        f"({info['error']}). Rebuild with `uv sync --reinstall-package hstu-ops`."
    )
    assert info["error"] is None


def test_build_info_reports_backends_and_torch():
    info = hstu_ops.native_build_info()
    assert set(info) == {"cpu", "cuda", "hip", "openmp", "torch_version", "error"}
    assert info["cpu"] is True
    assert not (info["cuda"] and info["hip"]), "CUDA and HIP builds are exclusive"
    # The extension must have been compiled against the torch that runs it.
    assert info["torch_version"] == torch.__version__.split("+")[0]


@pytest.mark.parametrize("op", OPS)
def test_ops_are_registered_under_torch_ops(op):
    assert hasattr(torch.ops.hstu_ops, op)
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"hstu_ops::{op}", "CPU")
    if hstu_ops.native_build_info()["cuda"] or hstu_ops.native_build_info()["hip"]:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"hstu_ops::{op}", "CUDA")


def test_missing_extension_gives_clear_error(monkeypatch):
    monkeypatch.setattr(_native, "_C", None)
    monkeypatch.setattr(_native, "_load_error", "ImportError: simulated")
    assert not hstu_ops.native_available()
    assert hstu_ops.native_build_info()["error"] == "ImportError: simulated"
    with pytest.raises(NativeExtensionError, match=r"complete_cumsum.*was not built"):
        hstu_ops.complete_cumsum(torch.tensor([1, 2]), kernel=Kernel.NATIVE)
    # The reference keeps working.
    assert hstu_ops.complete_cumsum(torch.tensor([1, 2])).tolist() == [0, 1, 3]


@pytest.mark.skipif(sys.platform != "linux", reason="reads the ELF libraries of a Linux build")
def test_the_extension_names_libgcc_s_first_so_that_torch_errors_unwind_with_it():
    # Torch's errors unwind through libgcc_s; were another unwinder (libunwind) ahead of it in
    # the module's libraries, an operator's argument error would crash the process (see
    # CMakeLists.txt).
    readelf = shutil.which("readelf")
    if readelf is None or _native._C is None:
        pytest.skip("needs readelf and the built extension")
    dynamic = subprocess.run(
        [readelf, "-d", str(Path(_native._C.__file__))], capture_output=True, text=True, check=True
    ).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert needed and needed[0].startswith("libgcc_s."), needed
