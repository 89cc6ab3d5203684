"""Every Triton launch that the public ops make compiles for H100 and MI300 and fits there.

The per-family compile tests build each kernel's signature and tiles by hand. Here the
launchers choose them: the self-check's cases (``hstu_ops.selfcheck``, at its TINY shapes and
at the FULL ones the GPU check runs) call each op with ``kernel="triton"`` in both dtypes,
forward and backward, in compiled mode on CPU tensors, with the launchers told the device is
the target GPU (its architecture name, multiprocessor count and vendor). Each launch is
recorded instead of run (its outputs are left unwritten, which no later launch's tiles depend
on), then compiled for the target with the specialisation a GPU launch would give its integer
arguments, and its shared memory checked against the chip's. No GPU is needed.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import hstu_ops
import hstu_ops._kernel
from hstu_ops import selfcheck

MULTIPROCESSORS = {"sm90": 132, "gfx942": 304}
"""Multiprocessors (compute units) of an H100 SXM and an MI300X: some grids are sized by them."""

LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
AMD_LAUNCH_OPTIONS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


def _specialisation(value) -> object:
    """What a launch's specialisation depends on for one argument: a pointer's dtype, an
    integer's equality to 1 and divisibility by 16, any other value itself."""
    if isinstance(value, torch.Tensor):
        return ("ptr", str(value.dtype))
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value)
    return ("int", value == 1, value % 16 == 0, -(2**31) <= value < 2**31)


def _pointer_type(tensor: torch.Tensor) -> str:
    names = {
        torch.float32: "fp32",
        torch.bfloat16: "bf16",
        torch.float16: "fp16",
        torch.int64: "i64",
        torch.int32: "i32",
        torch.int8: "i8",
        torch.uint8: "u8",
        torch.bool: "i1",
    }
    return "*" + names[tensor.dtype]


class Recorder:
    """Stands in for ``JITFunction.run``: keeps one launch per distinct specialisation."""

    def __init__(self) -> None:
        self.launches: dict[tuple, tuple] = {}

    def run(self, kernel, *args, grid, warmup, **kwargs):
        bound = dict(zip(kernel.arg_names, args, strict=False))
        bound.update({k: v for k, v in kwargs.items() if k in kernel.arg_names})
        options = {k: v for k, v in kwargs.items() if k not in kernel.arg_names}
        constants, values = {}, {}
        for param in kernel.params:
            if param.name in bound:
                value = bound[param.name]
            elif param.has_default:
                value = param.default
            else:
                raise TypeError(f"{kernel.__name__}: no value for {param.name}")
            if param.is_constexpr:
                constants[param.name] = value
            elif isinstance(value, torch.Tensor):
                values[param.name] = _pointer_type(value)
            else:
                values[param.name] = value
        key = (
            kernel.__name__,
            tuple(sorted((k, repr(v)) for k, v in constants.items())),
            tuple(sorted(options.items())),
            tuple((name, _specialisation(bound.get(name))) for name in sorted(values)),
        )
        self.launches.setdefault(key, (kernel, constants, values, options))


@pytest.mark.slow
@pytest.mark.triton
def test_every_launch_of_the_ops_compiles_and_fits(
    gpu_target, load_triton, monkeypatch, fresh_kernel_checks
):
    from triton.runtime.jit import JITFunction

    import hstu_ops.triton as package

    recorder = Recorder()
    cpu = torch.device("cpu")
    with load_triton("hstu_ops.triton._common", interpret=False):
        modules = [
            importlib.import_module(f"{package.__name__}.{info.name}")
            for info in pkgutil.iter_modules(package.__path__)
        ]
        for module in modules:
            for name, fake in (
                ("device_arch", lambda device: gpu_target.arch),
                ("multiprocessors", lambda index: MULTIPROCESSORS[gpu_target.arch]),
                ("check_device", lambda op, device, interpreted: None),
            ):
                if hasattr(module, name):
                    monkeypatch.setattr(module, name, fake)
        monkeypatch.setattr(torch.version, "hip", "6.4" if gpu_target.vendor == "amd" else None)
        monkeypatch.setattr(hstu_ops._kernel, "triton_interpreting", lambda: True)
        monkeypatch.setattr(
            JITFunction,
            "run",
            lambda self, *a, grid, warmup, **kw: recorder.run(
                self, *a, grid=grid, warmup=warmup, **kw
            ),
        )
        ran = set()
        for shapes in (selfcheck.TINY, selfcheck.FULL):
            for case in selfcheck.build_cases(cpu, shapes):
                if hstu_ops.Kernel.TRITON not in hstu_ops.OP_KERNELS[case.op]:
                    continue
                for dtype in selfcheck.DTYPES.values():
                    selfcheck.run_case(case, hstu_ops.Kernel.TRITON, dtype, upcast=False)
                    ran.add(case.name)
        monkeypatch.undo()

    assert {"hstu_mha contextual+targets", "addmm", "concat_2D_jagged"} <= ran
    kernels = {key[0] for key in recorder.launches}
    assert len(kernels) >= 15, sorted(kernels)

    allowed = LAUNCH_OPTIONS + (AMD_LAUNCH_OPTIONS if gpu_target.vendor == "amd" else ())
    problems = []
    for kernel, constants, values, options in recorder.launches.values():
        unknown = set(options) - set(allowed)
        if unknown:
            problems.append(f"{kernel.__name__}: launch options {sorted(unknown)}")
            continue
        try:
            binary = gpu_target.compile(kernel, constants, options, values=values)
        except Exception as exc:  # every failure is listed, not only the first
            problems.append(f"{kernel.__name__} {constants} {options}: {type(exc).__name__}: {exc}")
            continue
        if binary.metadata.shared > gpu_target.max_shared:
            problems.append(
                f"{kernel.__name__} {constants} {options}: {binary.metadata.shared} bytes of "
                f"shared memory, {gpu_target.max_shared} on {gpu_target.arch}"
            )
    assert not problems, "\n".join(problems)
