"""The attention's and positional embeddings' hot loops, compiled for an H100 without a GPU,
stay as lean as measured
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


def compiled_rows(load_triton, family: str):
    """(the benchmark module, its rows of ours for ``family`` compiled for sm90)."""
    from hstu_ops.gpu_compile import GPU_TARGETS

    bench = load_bench()
    target = GPU_TARGETS["sm90"]
    if not _has_backend("nvidia"):
        pytest.skip("no nvidia backend in triton")
    with load_triton("hstu_ops.triton._common", interpret=False):
        recorder = bench.record_ours(target, [family])
        rows, errors = bench.rows_of("ours", recorder, target, None)
    assert not errors, errors
    return bench, rows


@pytest.mark.slow  # about 40 s of compiling on two cores
@pytest.mark.triton
def test_attention_loops_are_no_longer_than_pinned(load_triton):
    bench, rows = compiled_rows(load_triton, "attention")
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


PINNED_POSITION_SM90 = {
    # specialisation: (warps, instructions of its memory loop, loaded, stored bytes per element)
    "32x256": (8, 222, 10.0, 2.0),  # forward: x, both tables' rows (float32), out
    "16x256 gather + d_seq": (1, 919, 2.5, 2.0),  # the position table's sum, d_seq written
    "16x256 gather": (1, 609, 2.5, 0.0),  # the time-bucket table's sum
    "16x256 partials": (1, 375, 4.0, 0.0),  # the pieces' float32 partial rows, per table row
}
"""Measured with Triton 3.8 at the yambda-5b shape (docs/benchmarks.md, hstu-ops). The
backward's d_seq is one of its sums' stores, not torch's three passes over dout, and a lane
loads 16 bytes of a row at a time (before: 2, with 4 warps on 128 columns)."""


@pytest.mark.slow  # about 15 s of compiling on two cores
@pytest.mark.triton
def test_position_loops_are_no_longer_than_pinned(load_triton):
    _, rows = compiled_rows(load_triton, "position")
    got = {
        r.tile: (r.warps, r.memory_loops, r.load_bytes_per_element, r.store_bytes_per_element)
        for r in rows
    }
    assert set(got) == set(PINNED_POSITION_SM90), got
    for label, (warps, loop, loaded, stored) in PINNED_POSITION_SM90.items():
        now_warps, now_loops, now_loaded, now_stored = got[label]
        assert now_warps == warps and len(now_loops) == 1, (label, got[label])
        assert now_loops[0] <= GROWTH * loop, f"{label}: {now_loops[0]} instructions, pinned {loop}"
        assert (now_loaded, now_stored) == ([loaded], [stored]), (label, got[label])
    assert all(r.spill_bytes == 0 and not any(r.atomics_per_element) for r in rows)


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


MEMORY_SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/               @P0 LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.U16 R8, desc[UR4][R2.64+0x10] ;
        /*0030*/                   FADD R4, R4, R5 ;
        /*0040*/                   STG.E.64 desc[UR4][R6.64], R4 ;
        /*0050*/                   REDG.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR4][R6.64], R4 ;
        /*0060*/               @P1 BRA 0x10 ;
        /*0070*/                   EXIT ;
        /*0080*/                   BRA 0x80 ;
"""

MEMORY_AMDGCN = """
.LBB0_1:
    global_load_dwordx4 v[0:3], v[4:5], off
    global_load_ushort v6, v[4:5], off offset:16
    v_add_f32 v0, v0, v1
    global_store_dwordx2 v[4:5], v[0:1], off
    global_atomic_add_f32 v[4:5], v0, off
    s_cbranch_scc1 .LBB0_1
    s_endpgm
"""


def test_memory_loops_count_bytes_per_lane_and_atomics():
    # The loop at 0x10: 16 + 2 bytes loaded, 8 stored, one atomic of 4 bytes; the branch to
    # itself after EXIT moves no memory and is no loop of the kernel's.
    want = [(6, 0, 18, 8, 1)]
    for loops in (_sass_loops(MEMORY_SASS, matrix=False), _amdgcn_loops(MEMORY_AMDGCN, False)):
        got = [
            (x.instructions, x.matrix_instructions, x.load_bytes, x.store_bytes, x.atomics)
            for x in loops
        ]
        assert got == want
    assert _sass_loops(MEMORY_SASS) == ()  # no matrix instruction: no tensor-core loop
    assert _sass_loops(SASS, matrix=False) == ()  # its loops either hold HGMMA or move nothing


def test_occupancy_from_registers_shared_memory_and_warps():
    assert occupancy("sm90", 143, 49152, 4) == 3  # 144 regs x 128 threads: 3 programs
    assert occupancy("sm90", 64, 200 * 1024, 4) == 1  # shared memory bounds it
    assert occupancy("sm90", 32, 0, 4) == 16  # 64 warps at most
    assert occupancy("gfx942", 32, 0, 4) is None
