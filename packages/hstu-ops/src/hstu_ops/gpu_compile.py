"""Compiling the Triton kernels for a GPU that is not there.

Triton compiles for a named target without a device: :class:`GpuTarget` compiles one kernel
for an H100 (``sm90``), an A100 (``sm80``), a B200 (``sm100``), an MI300X (``gfx942``) or an
MI350X (``gfx950``) and knows the chip's
shared memory (LDS) per block, which a launch over it fails on, so the compile checks catch what
Triton's CPU interpreter never sees (types the compiler refuses, tiles too large for the chip).

:func:`record_launches` goes one step further: inside it, the ops run on CPU tensors with
``kernel="triton"`` as if on the target (the launchers are told its architecture name,
multiprocessor count and vendor, so they choose that chip's tiles and launch options), and each
kernel launch is recorded instead of run (under an autotuner, each of its configurations).
Outputs are left unwritten; the launchers size nothing by them. :func:`compile_problems` then
compiles each recorded launch with the specialisation a GPU launch would give it and lists
what fails or does not fit::

    with record_launches(GPU_TARGETS["gfx942"]) as recorder:
        run_the_ops_or_a_model_step()  # CPU tensors, kernel="triton"
    assert not compile_problems(recorder, GPU_TARGETS["gfx942"])

The Triton modules of hstu_ops must be in compiled mode (``TRITON_INTERPRET`` unset when they
are first imported); :func:`record_launches` raises RuntimeError otherwise.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import gc
import importlib
import multiprocessing
import os
import pkgutil
import signal
import warnings
from collections.abc import Iterator
from typing import Any

import torch

__all__ = [
    "GPU_TARGETS",
    "GpuTarget",
    "LaunchRecorder",
    "compile_problems",
    "launch_figures",
    "record_launches",
]


@dataclasses.dataclass(frozen=True)
class GpuTarget:
    """A GPU to compile for: ``arch`` as ``hstu_ops.triton._common.device_arch`` names it."""

    arch: str
    target: tuple
    """The arguments of Triton's ``GPUTarget``."""
    binary_kind: str
    """The key of the binary in a compiled kernel's ``asm``."""
    max_shared: int
    """Shared memory (LDS) per block, bytes."""
    multiprocessors: int
    """Streaming multiprocessors (compute units): some launchers size their grids by them."""

    @property
    def vendor(self) -> str:
        return "nvidia" if self.target[0] == "cuda" else "amd"

    def compile(
        self,
        kernel,
        constants: dict,
        options: dict,
        *,
        types: dict[str, str] | None = None,
        values: dict | None = None,
    ):
        """``triton.compile`` of ``kernel`` for this target; AssertionError when no binary
        came out.

        ``constants``: the constexpr arguments (names the kernel lacks are ignored). The other
        arguments get either a plain signature, ``types`` (a type string per name, "i32" for a
        name not listed), or, from ``values``, the specialisation a launch on those values
        would get: pointer type strings ("*bf16", assumed 16-byte aligned) or sample integers
        (1 becomes a constant, multiples of 16 get the divisibility hint that lets the
        compiler vectorise and pipeline the loads).
        """
        import triton
        from triton.backends.compiler import BaseBackend, GPUTarget
        from triton.compiler import ASTSource
        from triton.runtime.jit import native_specialize_impl

        constants = {k: v for k, v in constants.items() if k in kernel.arg_names}
        signature, attrs = {}, {}
        for i, name in enumerate(kernel.arg_names):
            if name in constants:
                signature[name] = "constexpr"
            elif values is None:
                signature[name] = (types or {}).get(name, "i32")
            elif isinstance(values[name], str):
                signature[name], attrs[(i,)] = values[name], [["tt.divisibility", 16]]
            else:
                kind, spec = native_specialize_impl(BaseBackend, values[name], False, True, True)
                if kind == "constexpr":
                    signature[name], constants[name] = "constexpr", values[name]
                else:
                    signature[name] = kind
                    if spec == "D":
                        attrs[(i,)] = [["tt.divisibility", 16]]
        source = ASTSource(kernel, signature, constexprs=constants, attrs=attrs)
        binary = triton.compile(source, target=GPUTarget(*self.target), options=options)
        assert binary.asm[self.binary_kind], kernel.__name__
        return binary


GPU_TARGETS = {
    "sm80": GpuTarget("sm80", ("cuda", 80, 32), "cubin", 163 * 1024, 108),  # A100
    "sm90": GpuTarget("sm90", ("cuda", 90, 32), "cubin", 227 * 1024, 132),  # H100 SXM
    "sm100": GpuTarget("sm100", ("cuda", 100, 32), "cubin", 227 * 1024, 148),  # B200
    "gfx942": GpuTarget("gfx942", ("hip", "gfx942", 64), "hsaco", 64 * 1024, 304),  # MI300X
    "gfx950": GpuTarget("gfx950", ("hip", "gfx950", 64), "hsaco", 160 * 1024, 256),  # MI350X
}

_LAUNCH_OPTIONS = {
    "nvidia": ("num_warps", "num_stages", "num_ctas", "maxnreg"),
    "amd": ("num_warps", "num_stages", "num_ctas", "waves_per_eu", "matrix_instr_nonkdim", "kpack"),
}
"""The launch options each vendor's Triton backend takes."""

_POINTER_TYPES = {
    torch.float32: "*fp32",
    torch.bfloat16: "*bf16",
    torch.float16: "*fp16",
    torch.int64: "*i64",
    torch.int32: "*i32",
    torch.int8: "*i8",
    torch.uint8: "*u8",
    torch.bool: "*i1",
}


@dataclasses.dataclass(frozen=True)
class Launch:
    kernel: Any
    """The ``triton.runtime.JITFunction`` launched."""
    constants: dict
    values: dict
    """The other arguments: a pointer type string per tensor, the value of every scalar."""
    options: dict
    candidate: bool = False
    """One of an autotuner's configurations: Triton's autotuner skips those that do not fit
    the chip, so only a failure to compile, or none of them fitting, is a problem."""


class LaunchRecorder:
    """Stands in for ``JITFunction.run``: keeps one launch per distinct specialisation (kernel,
    constexpr values, launch options, pointer dtypes, and per integer whether it is 1, a
    multiple of 16 and within int32)."""

    def __init__(self) -> None:
        self.launches: dict[tuple, Launch] = {}
        self.tuning = False
        """Set while an autotuner's configurations are launched one after the other."""

    def run(self, kernel, *args, grid, warmup, **kwargs) -> None:
        bound = dict(zip(kernel.arg_names, args, strict=False))
        bound.update({k: v for k, v in kwargs.items() if k in kernel.arg_names})
        options = {k: v for k, v in kwargs.items() if k not in kernel.arg_names}
        constants, values, kinds = {}, {}, []
        for param in kernel.params:
            if param.name in bound:
                value = bound[param.name]
            elif param.has_default:
                value = param.default
            else:
                raise TypeError(f"{kernel.__name__}: launched without {param.name}")
            if param.is_constexpr:
                constants[param.name] = value
                continue
            if isinstance(value, torch.Tensor):
                values[param.name] = _POINTER_TYPES[value.dtype]
                kinds.append(values[param.name])
            else:
                values[param.name] = value
                kinds.append(_scalar_kind(value))
        key = (
            id(kernel),  # two modules may name their kernels alike
            repr(sorted(constants.items())),
            repr(sorted(options.items())),
            tuple(kinds),
        )
        self.launches.setdefault(key, Launch(kernel, constants, values, options, self.tuning))

    def tune(self, autotuner, *args, **kwargs) -> None:
        """Stands in for ``Autotuner.run``: launches every configuration it would time."""
        autotuner.nargs = dict(zip(autotuner.arg_names, args, strict=False))
        configs = (
            autotuner.prune_configs(kwargs) if len(autotuner.configs) > 1 else autotuner.configs
        )
        self.tuning = True
        try:
            for config in configs:
                autotuner.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            self.tuning = False

    def kernels(self) -> set[str]:
        return {launch.kernel.__name__ for launch in self.launches.values()}


def _scalar_kind(value) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        return repr(value) if value is None else type(value).__name__
    return (value == 1, value % 16 == 0, -(2**31) <= value < 2**31)


@contextlib.contextmanager
def record_launches(target: GpuTarget) -> Iterator[LaunchRecorder]:
    """Inside, the Triton launches of hstu_ops' ops are recorded, not run, and the launchers
    see ``target``'s architecture, multiprocessors and vendor; everything is put back on
    leaving. The ops take CPU tensors and ``kernel="triton"`` there."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    import hstu_ops._kernel as kernel_module
    import hstu_ops.triton as package

    modules = [
        importlib.import_module(f"{package.__name__}.{info.name}")
        for info in pkgutil.iter_modules(package.__path__)
    ]
    interpreted = [m.__name__ for m in modules if getattr(m, "INTERPRETED", False)]
    if interpreted:
        raise RuntimeError(
            f"record_launches needs the compiled Triton kernels; {', '.join(interpreted)} "
            "were imported for the interpreter (TRITON_INTERPRET was set)"
        )
    recorder = LaunchRecorder()
    fakes = {
        "device_arch": lambda device: target.arch,
        "multiprocessors": lambda index: target.multiprocessors,
        "check_device": lambda op, device, interpreted: None,
        # The kernels that call other families' ops (compute_uqvk's addmm and layer norm) take
        # their GPU path: recorded, not the CPU stand-in computed.
        "on_gpu": lambda device: True,
    }
    saved: list[tuple[object, str, object]] = []

    def replace(owner, name: str, value) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    try:
        for module in modules:
            for name, fake in fakes.items():
                if hasattr(module, name):
                    replace(module, name, fake)
        replace(torch.version, "hip", "6.4" if target.vendor == "amd" else None)
        replace(kernel_module, "triton_interpreting", lambda: True)
        replace(JITFunction, "run", lambda self, *a, **kw: recorder.run(self, *a, **kw))
        replace(Autotuner, "run", lambda self, *a, **kw: recorder.tune(self, *a, **kw))
        yield recorder
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def compile_problems(
    recorder: LaunchRecorder, target: GpuTarget, *, jobs: int | None = None
) -> list[str]:
    """Compiles every recorded launch for ``target``; one line per launch that takes an option
    the target's backend does not know, fails to compile, or needs more shared memory than the
    chip has (for an autotuner's configurations: when none of a kernel's fits). Empty when
    all is well.

    ``jobs``: compiling processes, one per usable core by default. Each launch compiles on its
    own and LLVM keeps one core busy, so a single process leaves the others idle."""
    launches = list(recorder.launches.values())
    unknown_options = [
        set(launch.options) - set(_LAUNCH_OPTIONS[target.vendor]) for launch in launches
    ]
    to_compile = [
        launch for launch, unknown in zip(launches, unknown_options, strict=True) if not unknown
    ]
    outcomes = iter(_compile_all(to_compile, target, jobs))
    problems: list[str] = []
    candidates_fit: dict[str, bool] = {}
    for launch, unknown in zip(launches, unknown_options, strict=True):
        what = f"{launch.kernel.__name__} {launch.constants} {launch.options}"
        if unknown:
            problems.append(f"{what}: launch options {sorted(unknown)} unknown to {target.arch}")
            continue
        shared, error, _ = next(outcomes)
        if error is not None:  # every failure is listed, not only the first
            problems.append(f"{what}: {error}")
            continue
        fits = shared <= target.max_shared
        if launch.candidate:
            name = launch.kernel.__name__
            candidates_fit[name] = candidates_fit.get(name, False) or fits
        elif not fits:
            problems.append(
                f"{what}: {shared} bytes of shared memory, {target.max_shared} on {target.arch}"
            )
    for name, fit in candidates_fit.items():
        if not fit:
            problems.append(f"{name}: none of its autotuner's configurations fits {target.arch}")
    return problems


def launch_figures(
    recorder: LaunchRecorder, target: GpuTarget, *, jobs: int | None = None
) -> list[tuple[Launch, Any]]:
    """Compiles every recorded launch for ``target`` and reads its machine code: per launch,
    its :class:`hstu_ops.loop_figures.KernelFigures`, or the error (a string) that stopped
    its compilation. ``jobs`` as in :func:`compile_problems`."""
    launches = list(recorder.launches.values())
    outcomes = _compile_all(launches, target, jobs, figures=True)
    return [
        (launch, error if error is not None else figures)
        for launch, (_, error, figures) in zip(launches, outcomes, strict=True)
    ]


_Outcome = tuple[int, str | None, Any]
"""A compiled launch's shared memory in bytes, or the error that stopped its compilation, and
its figures when asked for."""

_forked_work: tuple[list[Launch], GpuTarget, bool] | None = None
"""What the forked compiling processes read their launches from: the kernels are the parent's
live objects, which do not pickle."""


def _compile_one(index: int) -> _Outcome:
    assert _forked_work is not None
    launches, target, figures = _forked_work
    launch = launches[index]
    try:
        binary = target.compile(
            launch.kernel, launch.constants, launch.options, values=launch.values
        )
    except Exception as exc:
        return 0, f"{type(exc).__name__}: {exc}", None
    if not figures:
        return binary.metadata.shared, None, None
    from hstu_ops.loop_figures import kernel_figures

    return binary.metadata.shared, None, kernel_figures(binary, target)


def _compile_all(
    launches: list[Launch], target: GpuTarget, jobs: int | None, figures: bool = False
) -> list[_Outcome]:
    global _forked_work
    if jobs is None:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    jobs = max(1, min(jobs or 1, len(launches)))
    _forked_work = (launches, target, figures)
    try:
        if jobs == 1 or "fork" not in multiprocessing.get_all_start_methods():
            return [_compile_one(i) for i in range(len(launches))]
        # fork, not spawn: the children inherit the kernels and the test's module state as
        # they are. A child only runs Triton's compiler, never torch's thread pools.
        context = multiprocessing.get_context("fork")
        with _heap_frozen(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
            with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
                futures = [pool.submit(_compile_one, i) for i in range(len(launches))]
                concurrent.futures.wait(futures)
            outcomes: list[_Outcome | None] = []
            for future in futures:
                try:
                    outcomes.append(future.result())
                except concurrent.futures.process.BrokenProcessPool:
                    outcomes.append(None)
            # A dead child (the kernel's OOM killer, a compiler crash) takes every launch still
            # in the pool with it. Those compile again, each in a process of its own, so that
            # a launch that kills its compiler is named and the others still get their verdict.
            lost = [i for i, outcome in enumerate(outcomes) if outcome is None]
            if lost:
                warnings.warn(
                    f"a process compiling for {target.arch} ended abruptly; "
                    f"{len(lost)} launches compile again, one process each",
                    RuntimeWarning,
                    stacklevel=3,
                )
            for i in lost:
                outcomes[i] = _compile_alone(i, context)
            return [outcome for outcome in outcomes if outcome is not None]
    finally:
        _forked_work = None


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """Inside, the objects that exist now are out of the garbage collector's reach, here and in
    the processes forked here. Garbage the parent holds (a torch.distributed process group that
    a test dropped, say) would otherwise be collected in a child, whose destructor then waits
    on threads only the parent has (a hang) or crashes it; it is collected first, here, where
    those threads are."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _compile_alone(index: int, context: Any) -> _Outcome:
    """:func:`_compile_one` in a forked process of its own; its death is the launch's error."""
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_send_compiled, args=(index, sender), daemon=True)
    child.start()
    sender.close()
    try:
        outcome = receiver.recv()
    except EOFError:
        outcome = None
    finally:
        receiver.close()
        child.join()
    if outcome is not None:
        return outcome
    status = child.exitcode or 0
    how = f"status {status}"
    if status < 0:
        with contextlib.suppress(ValueError):
            how = f"signal {signal.Signals(-status).name}"
    return 0, f"its compiling process ended with {how}", None


def _send_compiled(index: int, sender: Any) -> None:
    sender.send(_compile_one(index))
    sender.close()
