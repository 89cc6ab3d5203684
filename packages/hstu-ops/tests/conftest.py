import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest

import hstu_ops


@pytest.fixture(autouse=True)
def _restore_default_kernel():
    """Tests may change the process default kernel; put it back afterwards."""
    saved = hstu_ops.get_default_kernel()
    yield
    hstu_ops.set_default_kernel(saved)


# One module object per (Triton module, mode), kept for the whole session.
_triton_modules: dict[tuple[str, bool], ModuleType] = {}


@contextlib.contextmanager
def _load_triton(name: str, interpret: bool = True) -> Iterator[ModuleType]:
    """A Triton kernel module of hstu_ops, interpreted (CPU tensors) or compiled.

    ``triton.jit`` decides between compiled and interpreted kernels when it decorates them, i.e.
    when the module is imported, from ``TRITON_INTERPRET``; the kernels call no jit function of
    triton's own library (those are fixed when ``triton`` is imported), so that import alone
    decides. The module is therefore imported with the variable set (or cleared), one module
    object per mode, installed in ``sys.modules`` (and as an attribute of ``hstu_ops.triton``)
    only while the ``with`` block runs. This works inside one pytest process whatever imported
    triton before, and nothing leaks into other tests.
    """
    import hstu_ops.triton as package

    short = name.rsplit(".", 1)[-1]
    saved_module = sys.modules.get(name)
    saved_attr = package.__dict__.get(short)
    saved_env = os.environ.get("TRITON_INTERPRET")
    try:
        if interpret:
            os.environ["TRITON_INTERPRET"] = "1"
        else:
            os.environ.pop("TRITON_INTERPRET", None)
        module = _triton_modules.get((name, interpret))
        if module is None:
            sys.modules.pop(name, None)
            module = importlib.import_module(name)
            assert module.INTERPRETED is interpret, name
            _triton_modules[(name, interpret)] = module
        sys.modules[name] = module
        yield module
    finally:
        if saved_module is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved_module
        if saved_attr is None:
            package.__dict__.pop(short, None)
        else:
            setattr(package, short, saved_attr)
        if saved_env is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved_env


@pytest.fixture
def load_triton():
    """``with load_triton("hstu_ops.triton.<module>", interpret=True) as module: ...``"""
    return _load_triton
