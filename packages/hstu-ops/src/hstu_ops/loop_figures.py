"""The hot loops of compiled kernels, read from their machine code without a GPU.

A kernel compiled for a target (:mod:`hstu_ops.gpu_compile`) is disassembled here: NVIDIA's
cubin with Triton's bundled ``cuobjdump -sass``, AMD's code object from the ``amdgcn`` assembly
Triton keeps beside it. A loop is a backward branch and the code between its target and itself;
a tensor-core loop is an innermost loop holding matrix instructions (``HGMMA``/``HMMA`` on
NVIDIA up to sm90, ``UTC*MMA`` on sm100, ``v_mfma`` on AMD). Its length in instructions, times
the warps of the program, over the score elements one iteration computes (BLOCK_M x BLOCK_N for
an attention tile), is the figure these kernels are compared by: warp-instructions issued per
score element. It predicts speed only as far as issue slots bound the loop (what the HSTU
attention loops are, their matrix products being small next to their elementwise work); a GPU
timing confirms it or not.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tempfile
from pathlib import Path

__all__ = ["KernelFigures", "Loop", "kernel_figures", "occupancy"]

_MATRIX_OPCODES = {
    "nvidia": re.compile(r"^(?:HGMMA|HMMA|UTC\w*MMA)\b"),
    "amd": re.compile(r"^v_mfma|^v_smfmac|^v_wmma"),
}
_SASS_LINE = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_SASS_BRANCH = re.compile(r"(?:@!?U?P\w+\s+)?BRA(?:\.\w+)*\s+(?:`?\(?\.?L?_?x?_?)?(0x[0-9a-f]+)")


@dataclasses.dataclass(frozen=True)
class Loop:
    """An innermost loop of a kernel: its instructions, of which matrix instructions, and what
    one lane moves to and from global memory per iteration (the widths of its global loads and
    stores, predicated or not; a load of one address by every lane counts once per lane)."""

    instructions: int
    matrix_instructions: int
    load_bytes: int = 0
    store_bytes: int = 0
    atomics: int = 0
    """Global atomic and reduction instructions (NVIDIA ``RED``/``ATOM``, AMD ``*_atomic_*``)."""


@dataclasses.dataclass(frozen=True)
class KernelFigures:
    """What the compiled code of one kernel says about its cost."""

    name: str
    registers: int
    """Per thread (NVIDIA) or VGPRs per lane (AMD, arch VGPRs plus AGPRs)."""
    spill_bytes: int
    """Local memory per thread (NVIDIA, spilled registers) or spilled VGPRs x 4 (AMD)."""
    shared_bytes: int
    warps: int
    loops: tuple[Loop, ...]
    """Its innermost tensor-core loops, in code order."""
    programs_per_processor: int | None
    """Programs resident per multiprocessor (occupancy), from registers, shared memory and
    warps; None for a target whose limits are not known here."""
    memory_loops: tuple[Loop, ...] = ()
    """Its innermost loops without matrix instructions that load or store global memory, in
    code order: the hot loops of the memory-bound kernels (positional embeddings, norms)."""

    def per_element(self, elements: int) -> tuple[float, ...]:
        """Warp-instructions per element of each tensor-core loop, whose iteration computes
        ``elements`` elements (BLOCK_M x BLOCK_N score elements for an attention tile)."""
        return tuple(loop.instructions * self.warps / elements for loop in self.loops)


# (register file per multiprocessor in 32-bit registers, shared memory per multiprocessor,
# shared memory the runtime reserves per program, most warps, most programs) per NVIDIA arch.
_NVIDIA_LIMITS = {
    "sm80": (65536, 164 * 1024, 1024, 64, 32),
    "sm90": (65536, 228 * 1024, 1024, 64, 32),
    "sm100": (65536, 228 * 1024, 1024, 64, 32),
}


def occupancy(arch: str, registers: int, shared: int, warps: int) -> int | None:
    """Programs per multiprocessor an NVIDIA GPU of ``arch`` keeps resident (registers are
    allocated per warp in units of 256), or None for an arch not in the table."""
    if arch not in _NVIDIA_LIMITS:
        return None
    register_file, shared_per_sm, reserved, max_warps, max_programs = _NVIDIA_LIMITS[arch]
    per_warp = -(-max(registers, 1) * 32 // 256) * 256
    by_registers = (register_file // per_warp) // warps
    by_shared = shared_per_sm // (shared + reserved)
    return min(by_registers, by_shared, max_warps // warps, max_programs)


def kernel_figures(binary, target) -> KernelFigures:
    """The figures of ``binary`` (a Triton ``CompiledKernel``) compiled for ``target`` (a
    :class:`hstu_ops.gpu_compile.GpuTarget`)."""
    name = binary.metadata.name
    warps = binary.metadata.num_warps
    shared = binary.metadata.shared
    if target.vendor == "nvidia":
        sass, usage = _cuobjdump(binary.asm["cubin"])
        registers = int(re.search(r"REG:(\d+)", usage).group(1))
        spills = int(re.search(r"LOCAL:(\d+)", usage).group(1))
        loops = _sass_loops(sass)
        memory_loops = _sass_loops(sass, matrix=False)
        per_sm = occupancy(target.arch, registers, shared, warps)
    else:
        asm = binary.asm["amdgcn"]
        registers = _amd_field(asm, "vgpr_count") + _amd_field(asm, "agpr_count")
        spills = 4 * _amd_field(asm, "vgpr_spill_count")
        loops = _amdgcn_loops(asm)
        memory_loops = _amdgcn_loops(asm, matrix=False)
        per_sm = None
    return KernelFigures(name, registers, spills, shared, warps, loops, per_sm, memory_loops)


def _cuobjdump(cubin: bytes) -> tuple[str, str]:
    import triton

    tool = triton.knobs.nvidia.cuobjdump.path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        sass = subprocess.run(
            [tool, "-sass", str(path)], check=True, capture_output=True, text=True
        ).stdout
        usage = subprocess.run(
            [tool, "--dump-resource-usage", str(path)], check=True, capture_output=True, text=True
        ).stdout
    return sass, usage


_NVIDIA_MEMORY = re.compile(r"^(LDG|STG|REDG?|ATOMG?)\b((?:\.\w+)*)")
_NVIDIA_WIDTHS = {"U8": 1, "S8": 1, "U16": 2, "S16": 2, "64": 8, "128": 16}
_AMD_MEMORY = re.compile(r"^(?:global|buffer|flat)_(load|store|atomic)_(\w+)")
_AMD_WIDTHS = {"byte": 1, "ubyte": 1, "sbyte": 1, "short": 2, "ushort": 2, "sshort": 2}


def _memory_access(op: str, vendor: str) -> tuple[str, int] | None:
    """("load" | "store" | "atomic", bytes per lane) of a global memory instruction, or None.
    (Flat instructions on AMD may reach LDS too; Triton's kernels use them for global.)"""
    if vendor == "nvidia":
        found = _NVIDIA_MEMORY.match(op)
        if not found:
            return None
        kind = {"LDG": "load", "STG": "store"}.get(found.group(1), "atomic")
        modifiers = found.group(2).split(".")
        width = next((_NVIDIA_WIDTHS[m] for m in modifiers if m in _NVIDIA_WIDTHS), 4)
        return kind, width
    found = _AMD_MEMORY.match(op)
    if not found:
        return None
    suffix = found.group(2)
    dwords = re.search(r"dwordx(\d)", suffix)
    width = 4 * int(dwords.group(1)) if dwords else _AMD_WIDTHS.get(suffix.split("_")[0], 4)
    return found.group(1), width


def _innermost_loops(
    code: list[tuple[int, str]], branches: list[tuple[int, int]], vendor: str, matrix: bool
) -> tuple[Loop, ...]:
    """``code``: (position, instruction) in order; ``branches``: (position of a branch,
    position of its target). The innermost loops that hold a matrix instruction, or with
    ``matrix`` False those that hold none but access global memory."""
    matrix_op = _MATRIX_OPCODES[vendor]
    spans = sorted({(target, at) for at, target in branches if target <= at})
    inner = [
        (lo, hi)
        for lo, hi in spans
        if not any((lo, hi) != (a, b) and lo <= a and b <= hi for a, b in spans)
    ]
    loops = []
    for lo, hi in inner:
        body = [op for at, op in code if lo <= at <= hi]
        mma = sum(1 for op in body if matrix_op.match(op))
        moved = {"load": 0, "store": 0, "atomic": 0}
        atomics = 0
        for op in body:
            access = _memory_access(op, vendor)
            if access is not None:
                moved[access[0]] += access[1]
                atomics += access[0] == "atomic"
        if (mma > 0) if matrix else (mma == 0 and any(moved.values())):
            loops.append(Loop(len(body), mma, moved["load"], moved["store"], atomics))
    return tuple(loops)


def _sass_loops(sass: str, matrix: bool = True) -> tuple[Loop, ...]:
    code, branches = [], []
    for match in _SASS_LINE.finditer(sass):
        at, text = int(match.group(1), 16), match.group(2)
        op = re.sub(r"^@!?U?P\w+\s+", "", text)
        code.append((at, op))
        branch = _SASS_BRANCH.match(text)
        if branch:
            branches.append((at, int(branch.group(1), 16)))
    return _innermost_loops(code, branches, "nvidia", matrix)


def _amdgcn_loops(asm: str, matrix: bool = True) -> tuple[Loop, ...]:
    code, labels, pending = [], {}, []
    for line in asm.splitlines():
        line = line.split(";")[0].strip()
        if line.endswith(":") and " " not in line:
            labels[line[:-1]] = len(code)
            continue
        if not line or line.startswith((".", "//")):
            continue
        code.append((len(code), line))
        jump = re.match(r"s_(?:cbranch_\w+|branch)\s+(\S+)", line)
        if jump:
            pending.append((len(code) - 1, jump.group(1)))
    branches = [(at, labels[name]) for at, name in pending if name in labels]
    return _innermost_loops(code, branches, "amd", matrix)


def _amd_field(asm: str, field: str) -> int:
    found = re.search(rf"\.{field}:\s+(\d+)", asm)
    return int(found.group(1)) if found else 0
