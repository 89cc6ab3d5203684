"""The attention's hot loops, compiled for an H100 without a GPU, stay as lean as measured
(benchmarks/bench_compiled_loops.py, whose recording this test reuses), and the machine-code
reader of hstu_ops.loop_figures finds loops where they are."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from hstu_ops.loop_figures import _amdgcn_loops, _sass_loops, occupancy

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_compiled_loops.py"

PINNED_SM90 = {
    # kernel: (tile, warps, instructions of each tensor-core loop, in code order)
    "_hstu_attn_fwd_kernel": ("64x32", 4, (186, 309)),
    "_hstu_attn_bwd_dkdv_kernel": ("32x64", 4, (465, 297, 475)),
    "_hstu_attn_bwd_dq_kernel": ("64x64", 4, (444, 739)),
}
"""Measured with Triton 3.8 at the yambda-5b layer shape (docs/benchmarks.md, hstu-ops)."""
GROWTH = 1.05
"""A loop more than 5% longer than pinned fails; a shorter one asks for a new pin."""


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_compiled_loops", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 40 s of compiling on two cores
@pytest.mark.triton
def test_attention_loops_are_no_longer_than_pinned(load_triton):
    from hstu_ops.gpu_compile import GPU_TARGETS

    bench = load_bench()
    target = GPU_TARGETS["sm90"]
    if not _has_backend("nvidia"):
        pytest.skip("no nvidia backend in triton")
    with load_triton("hstu_ops.triton._common", interpret=False):
        recorder = bench.record_ours(target, ["attention"])
        rows, errors = bench.rows_of("ours", recorder, target, None)
    assert not errors, errors
    got = {r.kernel: (r.tile, r.warps, tuple(r.loops)) for r in rows}
    assert set(got) == set(PINNED_SM90)
    grown = []
    for kernel, (tile, warps, loops) in PINNED_SM90.items():
        assert got[kernel][:2] == (tile, warps), (kernel, got[kernel])
        assert len(got[kernel][2]) == len(loops), (kernel, got[kernel][2], loops)
        for now, pinned in zip(got[kernel][2], loops, strict=True):
            if now > GROWTH * pinned:
                grown.append(f"{kernel}: a loop of {now} instructions, pinned at {pinned}")
    assert not grown, "\n".join(grown)
    assert all(r.spill_bytes == 0 for r in rows), [(r.kernel, r.spill_bytes) for r in rows]
    summary = bench.attention_summary(rows)["ours"]
    assert summary["forward"] <= 0.77 * 0.554 and summary["backward"] <= 0.77 * 1.396, summary


def _has_backend(vendor: str) -> bool:
    return importlib.util.find_spec(f"triton.backends.{vendor}") is not None


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   ISETP.GE.AND P0, PT, R0, 0x10, PT ;
        /*0020*/                   HGMMA.64x32x16.F32.BF16 R88, gdesc[UR4], RZ, !UPT ;
        /*0030*/                   FMUL R2, R2, R3 ;
        /*0040*/               @P0 BRA 0x20 ;
        /*0050*/                   FADD R4, R4, R5 ;
        /*0060*/               @!P1 BRA 0x50 ;
        /*0070*/                   EXIT ;
"""

AMDGCN = """
_kernel:
    s_mov_b32 s0, 0
.LBB0_1:                                ; loop
    v_mfma_f32_32x32x8_bf16 a[0:15], v[0:1], v[2:3], a[0:15]
    v_add_f32 v4, v4, v5
    s_cbranch_scc1 .LBB0_1
    s_endpgm
    .vgpr_count: 40
"""


def test_loops_are_read_from_nvidia_and_amd_code():
    loops = _sass_loops(SASS)  # the second loop has no matrix instruction
    assert [(x.instructions, x.matrix_instructions) for x in loops] == [(3, 1)]
    loops = _amdgcn_loops(AMDGCN)
    assert [(x.instructions, x.matrix_instructions) for x in loops] == [(3, 1)]


def test_occupancy_from_registers_shared_memory_and_warps():
    assert occupancy("sm90", 143, 49152, 4) == 3  # 144 regs x 128 threads: 3 programs
    assert occupancy("sm90", 64, 200 * 1024, 4) == 1  # shared memory bounds it
    assert occupancy("sm90", 32, 0, 4) == 16  # 64 warps at most
    assert occupancy("gfx942", 32, 0, 4) is None
