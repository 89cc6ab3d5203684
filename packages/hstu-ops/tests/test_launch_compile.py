"""Every Triton launch that the public ops make compiles for H100 and MI300 and fits there.

The per-family compile tests build each kernel's signature and tiles by hand. Here the
launchers choose them: the self-check's cases (``hstu_ops.selfcheck``, at its TINY shapes and
at the FULL ones the GPU check runs) call each op with ``kernel="triton"`` in both dtypes,
forward and backward, on CPU tensors inside ``hstu_ops.gpu_compile.record_launches``, and every
launch recorded there must compile for the target within its shared memory. No GPU is needed.
"""

from __future__ import annotations

import os

import pytest
import torch

import hstu_ops
from hstu_ops import selfcheck
from hstu_ops.gpu_compile import LaunchRecorder, compile_problems, record_launches


@pytest.mark.slow
@pytest.mark.triton
def test_every_launch_of_the_ops_compiles_and_fits(
    gpu_target, load_triton, fresh_kernel_checks, monkeypatch
):
    # On a GPU addmm takes cuBLAS by default (triton_addmm.FUSED_FASTER); the fused kernel,
    # the named option, must compile all the same.
    monkeypatch.setenv("HSTU_OPS_ADDMM", "fused")
    ran = set()
    with (
        load_triton("hstu_ops.triton._common", interpret=False),
        record_launches(gpu_target) as recorder,
    ):
        for shapes in (selfcheck.TINY, selfcheck.FULL):
            for case in selfcheck.build_cases(torch.device("cpu"), shapes):
                if hstu_ops.Kernel.TRITON not in hstu_ops.OP_KERNELS[case.op]:
                    continue
                for dtype in selfcheck.DTYPES.values():
                    selfcheck.run_case(case, hstu_ops.Kernel.TRITON, dtype, upcast=False)
                    ran.add(case.name)
    assert {"hstu_mha contextual+targets", "addmm", "concat_2D_jagged"} <= ran
    assert len(recorder.kernels()) >= 15, sorted(recorder.kernels())
    problems = compile_problems(recorder, gpu_target)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.triton
def test_every_autotune_candidate_of_addmm_compiles_and_one_fits(
    gpu_target, load_triton, fresh_kernel_checks, monkeypatch
):
    """``HSTU_OPS_TRITON_AUTOTUNE=full``: each configuration the autotuner would time on that
    chip compiles, and some fit (those that do not are skipped by the autotuner)."""
    monkeypatch.setenv("HSTU_OPS_TRITON_AUTOTUNE", "full")
    gen = torch.Generator().manual_seed(0)
    x, w, bias = (
        torch.randn(*s, generator=gen).bfloat16() for s in ((4096, 512), (512, 1024), (1024,))
    )
    with (
        load_triton("hstu_ops.triton.triton_addmm", interpret=False) as addmm,
        record_launches(gpu_target) as recorder,
    ):
        hstu_ops.addmm(bias, x, w, kernel="triton")
        vendor = gpu_target.vendor
        assert len(recorder.launches) == len(addmm.full_autotune_configs(vendor))
    assert all(launch.candidate for launch in recorder.launches.values())
    problems = compile_problems(recorder, gpu_target)
    assert not problems, "\n".join(problems)


def test_the_recorder_keeps_one_launch_per_specialisation():
    class Param:
        def __init__(self, name, constexpr=False, default=None):
            self.name, self.is_constexpr = name, constexpr
            self.has_default, self.default = default is not None, default

    class Kernel:
        __name__ = "k"
        arg_names = ("x", "n", "BLOCK")
        params = (Param("x"), Param("n"), Param("BLOCK", constexpr=True, default=64))

    recorder, kernel = LaunchRecorder(), Kernel()
    x16, x32 = torch.empty(4, dtype=torch.bfloat16), torch.empty(4)
    recorder.run(kernel, x16, 32, grid=(1,), warmup=False, num_warps=4)
    recorder.run(kernel, x16, 48, grid=(2,), warmup=False, num_warps=4)  # 16 | n again
    recorder.run(kernel, x16, 33, grid=(1,), warmup=False, num_warps=4)  # not
    recorder.run(kernel, x32, 32, grid=(1,), warmup=False, num_warps=4)  # pointer type
    recorder.run(kernel, x16, 32, grid=(1,), warmup=False, num_warps=8)  # option
    recorder.run(kernel, x16, 32, BLOCK=128, grid=(1,), warmup=False, num_warps=4)
    recorder.run(Kernel(), x16, 32, grid=(1,), warmup=False, num_warps=4)  # another kernel
    launches = list(recorder.launches.values())
    assert len(launches) == 6
    assert launches[0].constants == {"BLOCK": 64}
    assert launches[0].values == {"x": "*bf16", "n": 32}
    assert launches[0].options == {"num_warps": 4}


def test_recording_needs_the_compiled_kernels(load_triton):
    from hstu_ops.gpu_compile import GPU_TARGETS

    with (
        load_triton("hstu_ops.triton._common", interpret=True),
        pytest.raises(RuntimeError, match="compiled Triton kernels"),
        record_launches(GPU_TARGETS["sm90"]),
    ):
        pass


def _block_copy_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def block_copy(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)  # a BLOCK that is no power of two does not compile
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, offsets < n)

    return block_copy


@pytest.mark.triton
def test_problems_are_the_same_in_launch_order_with_one_or_two_compiling_processes(gpu_target):
    kernel, x = _block_copy_kernel(), torch.empty(64)
    recorder = LaunchRecorder()
    for block, options in ((64, {}), (48, {}), (32, {"num_warps": 2}), (96, {}), (16, {})):
        recorder.run(kernel, x, 40, BLOCK=block, grid=(1,), warmup=False, **options)
    recorder.run(kernel, x, 40, BLOCK=64, grid=(1,), warmup=False, no_such_option=1)

    serial = compile_problems(recorder, gpu_target, jobs=1)
    assert compile_problems(recorder, gpu_target, jobs=2) == serial
    assert [line.split("}", 1)[0] for line in serial] == [
        "block_copy {'BLOCK': 48",
        "block_copy {'BLOCK': 96",
        "block_copy {'BLOCK': 64",
    ]
    assert f"launch options ['no_such_option'] unknown to {gpu_target.arch}" in serial[2]


@pytest.mark.triton
@pytest.mark.parametrize("deaths", ["once", "always"])
def test_a_compiling_process_that_dies_costs_only_its_launch(
    gpu_target, monkeypatch, tmp_path, deaths
):
    """A killed child (the OOM killer, a compiler crash) breaks the whole pool; the launches
    it took with it compile again one process each, and one that kills its compiler every time
    is that launch's problem, named with the signal."""
    import signal

    kernel, x = _block_copy_kernel(), torch.empty(64)
    recorder = LaunchRecorder()
    for block in (64, 32, 48, 16):
        recorder.run(kernel, x, 40, BLOCK=block, grid=(1,), warmup=False)
    compile = type(gpu_target).compile
    died = tmp_path / "died"

    def compile_or_die(self, kernel, constants, *args, **kwargs):
        if constants.get("BLOCK") == 32 and (deaths == "always" or not died.exists()):
            died.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        return compile(self, kernel, constants, *args, **kwargs)

    monkeypatch.setattr(type(gpu_target), "compile", compile_or_die)
    with pytest.warns(RuntimeWarning, match="ended abruptly"):
        problems = compile_problems(recorder, gpu_target, jobs=2)
    lines = [line.split("}", 1)[0] for line in problems]
    if deaths == "once":
        assert lines == ["block_copy {'BLOCK': 48"], problems
    else:
        assert lines == ["block_copy {'BLOCK': 32", "block_copy {'BLOCK': 48"], problems
        assert problems[0].endswith("its compiling process ended with signal SIGKILL")


class _DiesOutsideItsProcess:
    """Garbage whose finalizer, run in any process but the one that made it, ends that
    process, as a torch.distributed process group's destructor hangs or crashes there."""

    def __init__(self, ran_in: list[int]):
        self.pid, self.ran_in, self.cycle = os.getpid(), ran_in, self

    def __del__(self):
        if os.getpid() != self.pid:
            os._exit(7)
        self.ran_in.append(os.getpid())


@pytest.mark.triton
def test_the_parents_garbage_is_not_collected_in_a_compiling_process(gpu_target, monkeypatch):
    import gc

    kernel, x = _block_copy_kernel(), torch.empty(64)
    recorder = LaunchRecorder()
    for block in (64, 32, 16, 128):
        recorder.run(kernel, x, 40, BLOCK=block, grid=(1,), warmup=False)
    compile = type(gpu_target).compile

    def collect_then_compile(self, *args, **kwargs):
        gc.collect()  # what the compiler's allocations set off in a child sooner or later
        return compile(self, *args, **kwargs)

    monkeypatch.setattr(type(gpu_target), "compile", collect_then_compile)
    ran_in: list[int] = []
    gc.collect()
    gc.disable()  # nothing collects the garbage before the call, as with a test's dropped group
    try:
        _DiesOutsideItsProcess(ran_in)
        problems = compile_problems(recorder, gpu_target, jobs=2)
    finally:
        gc.enable()
    assert problems == []
    assert ran_in == [os.getpid()]
