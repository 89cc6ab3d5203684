"""Fixtures and markers shared by the hstu-ops tests.

pytest runs with ``--import-mode=importlib``: test modules cannot import each other nor this
file, so what several of them use is a fixture (or a marker) defined here.

Markers: ``triton`` skips a test when the triton package is not installed; ``gpu`` (declared at
the workspace root: "needs a CUDA or ROCm device") skips it when torch sees no such device.
"""

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

import pytest
import torch

import hstu_ops
from hstu_ops.gpu_compile import GPU_TARGETS, GpuTarget

HAVE_TRITON = importlib.util.find_spec("triton") is not None


def pytest_configure(config):
    config.addinivalue_line("markers", "triton: needs the triton package (skipped without it)")


def pytest_runtest_setup(item):
    if not HAVE_TRITON and item.get_closest_marker("triton"):
        pytest.skip("triton is not installed")
    if item.get_closest_marker("gpu") and not torch.cuda.is_available():
        pytest.skip("needs a CUDA/ROCm GPU")


@pytest.fixture(autouse=True)
def _restore_default_kernel():
    """Tests may change the process default kernel; put it back afterwards."""
    saved = hstu_ops.get_default_kernel()
    yield
    hstu_ops.set_default_kernel(saved)


@pytest.fixture
def fresh_kernel_checks(monkeypatch):
    """No self-check verdicts, for the test only: they are kept per process, and a later
    check would reuse a verdict reached on a kernel a test made wrong."""
    import hstu_ops.selfcheck

    monkeypatch.setattr(hstu_ops.selfcheck, "_verdicts", {})


# --------------------------------------------------------------------------------------------
# The Triton modules, interpreted or compiled
# --------------------------------------------------------------------------------------------
_PREFIX = "hstu_ops.triton."

# Per mode, the modules of hstu_ops.triton created in it (the kernel modules and the _common
# whose jit helpers they call), kept for the whole session.
_triton_modules: dict[bool, dict[str, ModuleType]] = {True: {}, False: {}}


def _triton_entries() -> dict[str, ModuleType]:
    return {name: m for name, m in sys.modules.items() if name.startswith(_PREFIX)}


def _install(package: ModuleType, modules: dict[str, ModuleType]) -> None:
    """Makes ``modules`` the only modules of hstu_ops.triton in sys.modules and as attributes
    of the package."""
    for name in _triton_entries():
        del sys.modules[name]
    for short, value in list(vars(package).items()):
        if isinstance(value, ModuleType) and value.__name__.startswith(_PREFIX):
            delattr(package, short)
    for name, module in modules.items():
        sys.modules[name] = module
        setattr(package, name.removeprefix(_PREFIX), module)


@contextlib.contextmanager
def _load_triton(name: str, interpret: bool = True) -> Iterator[ModuleType]:
    """A Triton kernel module of hstu_ops, interpreted (CPU tensors) or compiled.

    ``triton.jit`` decides between compiled and interpreted kernels when it decorates them, i.e.
    when a module is imported, from ``TRITON_INTERPRET``; the kernels call no jit function of
    triton's own library (those are fixed when ``triton`` is imported), only their module's own
    and those of ``hstu_ops.triton._common``, so the imports of those two modules alone decide,
    and must agree (a kernel module checks that at its import). The modules of
    ``hstu_ops.triton`` are therefore swapped as one set per mode: inside the ``with`` block
    ``sys.modules`` (and the package's attributes) hold only the modules of that mode, imported
    with the variable set (or cleared) when first needed, including those a dispatcher imports
    inside the block; on leaving, the previous modules and variable are put back. So a module
    never binds the helpers of the other mode, this works inside one pytest process whatever
    imported triton or hstu_ops.triton before, and nothing leaks into other tests.
    """
    if interpret and (problem := hstu_ops.triton_interpreter_problem()):
        pytest.skip(problem)  # a machine whose numpy breaks the interpreter (not our kernels)
    import triton  # noqa: F401 (triton itself: imported in the process's mode, not the block's)

    import hstu_ops.triton as package

    saved_modules = _triton_entries()
    saved_env = os.environ.get("TRITON_INTERPRET")
    modules = _triton_modules[interpret]
    try:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
        _install(package, modules)
        module = importlib.import_module(name)
        assert module.INTERPRETED is interpret, name
        yield module
    finally:
        for key, value in _triton_entries().items():
            if getattr(value, "INTERPRETED", None) is interpret:
                modules.setdefault(key, value)
        _install(package, saved_modules)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


@pytest.fixture
def load_triton():
    """``with load_triton("hstu_ops.triton.<module>", interpret=True) as module: ...``"""
    return _load_triton


@pytest.fixture
def triton_backend(request):
    """``with triton_backend(interpret=True) as module``: the test module's ``BACKEND`` (a
    module of hstu_ops.triton), interpreted or compiled, as load_triton gives it."""
    name = request.module.BACKEND
    return lambda interpret=True: _load_triton(name, interpret)


@pytest.fixture
def tt(triton_backend):
    """The test module's ``BACKEND``, interpreted (the kernels run on CPU tensors)."""
    with triton_backend(interpret=True) as module:
        yield module


# --------------------------------------------------------------------------------------------
# Compilation for GPU targets, without a GPU (hstu_ops.gpu_compile)
# --------------------------------------------------------------------------------------------
def _backend_available(vendor: str) -> bool:
    if not HAVE_TRITON:
        return False
    try:
        importlib.import_module(f"triton.backends.{vendor}.compiler")
    except Exception:
        return False
    return True


@pytest.fixture(params=["sm90", "gfx942"], ids=["cuda-sm90", "hip-gfx942"])
def gpu_target(request) -> GpuTarget:
    """H100 and MI300 by default; ``@pytest.mark.parametrize("gpu_target", [arch, ...],
    indirect=True)`` picks others from GPU_TARGETS. Skipped when triton has no backend for it."""
    target = GPU_TARGETS[request.param]
    if not _backend_available(target.vendor):
        pytest.skip(f"no {target.vendor} backend in triton")
    return target


# --------------------------------------------------------------------------------------------
# Oracles
# --------------------------------------------------------------------------------------------
def _flash_oracle(
    names: Sequence[str],
    got: Sequence[torch.Tensor],
    ref16: Sequence[torch.Tensor],
    ref32: Sequence[torch.Tensor],
    *,
    atol: float = 0.0,
    rel_atol: float = 0.0,
) -> None:
    """The flash-attention oracle, per named tensor: ``max|got - ref32| <= 2 * max|ref16 -
    ref32| + atol + rel_atol * max|ref32|``, where ref32 is the reference on inputs upcast to
    float32 and ref16 the reference in the low precision; got has ref16's dtype."""
    for name, g, r16, r32 in zip(names, got, ref16, ref32, strict=True):
        assert g.dtype == r16.dtype, (name, g.dtype, r16.dtype)
        err = (g.float() - r32).abs().max().item()
        ref_err = (r16.float() - r32).abs().max().item()
        bound = 2 * ref_err + atol + rel_atol * r32.abs().max().item()
        assert err <= bound, (
            f"{name}: |triton - fp32| = {err:.3g}, |torch {r16.dtype} - fp32| = {ref_err:.3g}"
        )


@pytest.fixture
def flash_oracle() -> Callable[..., None]:
    """``flash_oracle(names, got, ref16, ref32, atol=..., rel_atol=...)``: see _flash_oracle."""
    return _flash_oracle


def _philox4x32(
    counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int = 10
) -> tuple[int, int, int, int]:
    """Philox4x32 in plain Python integers (Salmon et al., SC'11), independent of the kernels."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    m32 = 0xFFFFFFFF
    for _ in range(rounds):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        c0, c1, c2, c3 = (
            ((p1 >> 32) ^ c1 ^ k0) & m32,
            p1 & m32,
            ((p0 >> 32) ^ c3 ^ k1) & m32,
            p0 & m32,
        )
        k0 = (k0 + 0x9E3779B9) & m32
        k1 = (k1 + 0xBB67AE85) & m32
    return c0, c1, c2, c3


PHILOX_KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
"""Random123's known-answer vectors of philox4x32-10 (kat_vectors): (counter, key, result)."""


@pytest.fixture
def philox4x32() -> Callable[..., tuple[int, int, int, int]]:
    """``philox4x32(counter, key, rounds=10)``: Philox4x32 in plain Python."""
    return _philox4x32


@pytest.fixture
def philox_known_answers() -> list:
    """Random123's (counter, key, result) vectors of philox4x32-10."""
    return PHILOX_KNOWN_ANSWERS
