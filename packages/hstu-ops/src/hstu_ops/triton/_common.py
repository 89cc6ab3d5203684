"""What the Triton kernel modules of hstu_ops share: jit helpers and host-side checks.

The kernel modules (``triton_*.py``) follow one rule: their kernels call only ``triton.language``
builtins and this package's own ``@triton.jit`` functions, never the library's jit-compiled ones
(``tl.sum``, ``tl.sigmoid``, ``tl.rand``, ...), because ``triton.jit`` decides between a compiled
and an interpreted function when it decorates one, from ``TRITON_INTERPRET``; the library's are
decorated when ``triton`` itself is imported, ours when our module is. The jit helpers below are
decorated when *this* module is imported, so a kernel module and the ``_common`` it calls must
be imported in the same mode: :func:`kernel_module_mode` checks that at the kernel module's
import (an interpreted kernel cannot call a compiled helper, nor the reverse). In a process
that sets ``TRITON_INTERPRET`` once, before the first TRITON call, that always holds. The
tests, which load one module object per mode, re-import this module together with each kernel
module in the same mode (the ``load_triton`` fixture of ``tests/conftest.py``).

Host-side helpers take the calling module's ``INTERPRETED`` as an argument rather than reading
this module's flag: tests steer a kernel module's Python side by patching its own flag.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

__all__ = [
    "FLOAT_DTYPES",
    "INTERPRETED",
    "MAX_GRID_SEQUENCES",
    "PHILOX_ROUNDS",
    "SUM_COMBINE",
    "add",
    "cast",
    "check_32bit_rows",
    "check_batch",
    "check_device",
    "check_float_dtype",
    "check_power_of_2",
    "device_arch",
    "dot",
    "dot_precision",
    "fast_exp2",
    "fast_math",
    "fast_reciprocal",
    "fit_block",
    "int32_bits",
    "interpreting",
    "kernel_module_mode",
    "last_dim_contiguous",
    "multiprocessors",
    "philox4x32_10",
    "row_sum",
    "seed_words",
    "sequence",
]


def interpreting() -> bool:
    """Whether ``triton.jit`` creates interpreted functions now (``TRITON_INTERPRET``)."""
    knobs = getattr(triton, "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


INTERPRETED: bool = interpreting()
"""Whether the jit helpers of this module were created for Triton's interpreter."""


def kernel_module_mode(module: str) -> bool:
    """The mode of kernel module ``module``, being imported now; ImportError unless it is the
    mode of this module's jit helpers, which its kernels call."""
    interpreted = interpreting()
    if interpreted != INTERPRETED:

        def mode(flag: bool) -> str:
            return "interpreted (TRITON_INTERPRET=1)" if flag else "compiled"

        raise ImportError(
            f"{module} is imported {mode(interpreted)}, but {__name__}, whose jit helpers its "
            f"kernels call, was imported {mode(INTERPRETED)}; set TRITON_INTERPRET before "
            "hstu_ops' Triton backend is first used, and leave it"
        )
    return interpreted


# --------------------------------------------------------------------------------------------
# jit helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def dot(a, b, DOT_PRECISION: tl.constexpr, INTERPRET_BF16: tl.constexpr):
    """a @ b accumulated in float32.

    INTERPRET_BF16 (bfloat16 inputs under the interpreter only): the interpreter multiplies the
    raw bit patterns of bfloat16 operands (triton-lang/triton#11584), so they are widened to
    float32 first. A product of two bfloat16 values is exact in float32, so this computes what
    the tensor cores do, up to the order of the float32 additions.
    """
    if INTERPRET_BF16:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    return tl.dot(a, b, input_precision=DOT_PRECISION)


@triton.jit
def cast(x, dtype: tl.constexpr, INTERPRET_BF16: tl.constexpr):
    """x.to(dtype), rounding to nearest even as compiled Triton does.

    INTERPRET_BF16 (bfloat16 destinations under the interpreter only): the interpreter
    truncates float32 -> bfloat16 instead of rounding, so x (float32) is first rounded to the
    nearest bfloat16 value on its bits (finite values).
    """
    if INTERPRET_BF16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + (((bits >> 16) & 1) + 0x7FFF)) & 0xFFFF0000
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def fast_exp2(x, FAST_MATH: tl.constexpr):
    """2**x in float32, approximately: one ``ex2.approx.ftz`` on NVIDIA (relative error about
    2**-22, subnormal results flushed to 0), the backend's ``exp2`` elsewhere. FAST_MATH is
    :func:`fast_math`'s answer for the launch's device."""
    if FAST_MATH == "nvidia":
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    return tl.exp2(x)


@triton.jit
def fast_reciprocal(x, FAST_MATH: tl.constexpr):
    """1 / x in float32, approximately: one ``rcp.approx.ftz`` on NVIDIA (relative error
    about 2**-23), ``fast_dividef`` on AMD (one ``v_rcp_f32``), exact division under the
    interpreter."""
    if FAST_MATH == "nvidia":
        return tl.inline_asm_elementwise(
            "rcp.approx.ftz.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1
        )
    if FAST_MATH == "amd":
        return libdevice.fast_dividef(1.0, x)
    return 1.0 / x


@triton.jit
def add(a, b):
    """The combine function of a sum (``tl.reduce``)."""
    return a + b


SUM_COMBINE = getattr(tl.standard, "_sum_combine", add) if INTERPRETED else add
"""The combine function of :func:`row_sum`: ``add`` when compiled; under the interpreter the
library's ``_sum_combine``, as a marker only. The interpreter calls any other combine function
once per element in Python (about a thousand times slower), but recognises its library's by
identity and sums with numpy without calling it."""


@triton.jit
def row_sum(x, axis: tl.constexpr):
    """tl.sum without the library's jit function (see the module docstring)."""
    return tl.reduce(x, axis, SUM_COMBINE)


@triton.jit
def sequence(seq_offsets, b):
    """(first row as int64, length as int32) of sequence b of a jagged tensor (offsets of B + 1
    entries, int32 or int64)."""
    start = tl.load(seq_offsets + b).to(tl.int64)
    length = (tl.load(seq_offsets + b + 1).to(tl.int64) - start).to(tl.int32)
    return start, length


PHILOX_ROUNDS = tl.constexpr(10)
"""Rounds of Philox4x32 (Random123's default, also the default of Triton's ``tl.randint``)."""


@triton.jit
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011)
    of counter (c0, c1, c2, c3) under key (k0, k1), all uint32; returns four uint32 words.

    Each round multiplies c0 and c2 by fixed odd constants, keeps the high and low halves of the
    64-bit products, mixes the high halves with the other two words and the key, and bumps the
    key by the Weyl constants (the golden ratio and sqrt(3) - 1, times 2^32). Written from
    integer builtins (``tl.umulhi``, wrapping ``*``, ``^``) because Triton's ``tl.philox`` and
    ``tl.randint`` are library jit functions (see the module docstring). Both dropout kernels
    (attention, hstu_compute) draw from it, each with its own counters.
    """
    for _ in tl.static_range(PHILOX_ROUNDS):
        hi0 = tl.umulhi(c0, 0xD2511F53)
        lo0 = c0 * 0xD2511F53
        hi2 = tl.umulhi(c2, 0xCD9E8D57)
        lo2 = c2 * 0xCD9E8D57
        c0, c1, c2, c3 = hi2 ^ c1 ^ k0, lo2, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3


# --------------------------------------------------------------------------------------------
# Host side: argument checks of the TRITON kernels
# --------------------------------------------------------------------------------------------
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
"""The dtypes the floating-point kernels take (they compute in float32)."""

MAX_GRID_SEQUENCES = 65535
"""Sequences per launch of a kernel with one grid dimension per sequence (CUDA's limit on the
second and third grid dimensions)."""


def check_float_dtype(op: str, dtype: torch.dtype, got: str | None = None) -> None:
    """TypeError unless ``dtype`` is one of FLOAT_DTYPES; ``got`` says what was passed in the
    message (by default the dtype)."""
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{op}: the TRITON kernel supports float16, bfloat16 and float32, got {got or dtype}"
        )


def on_gpu(device: torch.device) -> bool:
    """Whether tensors on ``device`` take the compiled kernels' path: CUDA or ROCm tensors,
    and every tensor while hstu_ops.gpu_compile records launches as if on a GPU."""
    return device.type == "cuda"


def check_device(op: str, device: torch.device, interpreted: bool) -> None:
    """ValueError for tensors a module of mode ``interpreted`` cannot run on (compiled: CUDA or
    ROCm tensors only; the interpreter runs on CPU tensors)."""
    if not interpreted and device.type != "cuda":
        raise ValueError(
            f"{op}: the TRITON kernel needs CUDA or ROCm tensors, got {device.type} tensors "
            "(set TRITON_INTERPRET=1 before hstu_ops' Triton backend is first used to run it "
            "in Triton's CPU interpreter)"
        )


def check_batch(op: str, batch: int) -> None:
    """ValueError for more sequences than one grid dimension holds."""
    if batch > MAX_GRID_SEQUENCES:
        raise ValueError(
            f"{op}: the TRITON kernel takes at most {MAX_GRID_SEQUENCES} sequences per call "
            f"(one grid dimension), got {batch}"
        )


def check_32bit_rows(op: str, rows: int, stride: int, overhang: int, extra: int = 0) -> None:
    """ValueError unless ``rows`` rows of a sequence, plus a tile's ``overhang`` rows past its
    end, of ``stride`` elements each (plus ``extra`` elements) are addressable with the 32-bit
    offsets the kernels use within a sequence."""
    if (rows + overhang) * max(stride, 1) + extra >= 2**31:
        raise ValueError(
            f"{op}: the TRITON kernel addresses a sequence's rows with 32-bit offsets; "
            f"{rows} rows of stride {stride} do not fit"
        )


def check_power_of_2(config: object, names: tuple[str, ...], minimum: int = 16) -> None:
    """ValueError unless the fields ``names`` of a tile configuration (a dataclass) are powers
    of 2 >= minimum; the message names the class and the field."""
    for name in names:
        value = getattr(config, name)
        if value < minimum or value & (value - 1):
            raise ValueError(
                f"{type(config).__name__}.{name} must be a power of 2 >= {minimum}, got {value}"
            )


# --------------------------------------------------------------------------------------------
# Host side: launch arguments
# --------------------------------------------------------------------------------------------
def last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    """x with unit stride along its last dimension (the kernels' column addressing); copied
    only when needed (a last dimension of 0 or 1 element has no stride to speak of)."""
    return x if x.shape[-1] <= 1 or x.stride(-1) == 1 else x.contiguous()


def fit_block(block: int, dim: int) -> int:
    """A tile of ``block`` shrunk to a matrix dimension of ``dim`` (a power of 2, >= 16)."""
    return min(block, max(16, triton.next_power_of_2(max(dim, 1))))


def int32_bits(value: int) -> int:
    """The low 32 bits of value as a signed int32 (kernel scalars are signed; the kernels
    reinterpret them as uint32)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def seed_words(seed: int) -> tuple[int, int]:
    """(low, high) 32-bit words of a 64-bit seed as int32 kernel scalars: the Philox key."""
    return int32_bits(seed), int32_bits(seed >> 32)


@functools.cache
def multiprocessors(device_index: int) -> int:
    """Streaming multiprocessors (compute units) of a CUDA/ROCm device."""
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def device_arch(device: torch.device) -> str:
    """ "sm<major><minor>" for an NVIDIA GPU, the gfx name ("gfx942") for an AMD one."""
    props = torch.cuda.get_device_properties(device)
    if torch.version.hip:
        return props.gcnArchName.split(":")[0]
    return f"sm{props.major}{props.minor}"


def fast_math(interpreted: bool) -> str:
    """The FAST_MATH constexpr of :func:`fast_exp2` and :func:`fast_reciprocal` for a launch:
    "plain" under the interpreter (numpy arithmetic), "amd" on ROCm, "nvidia" on CUDA."""
    if interpreted:
        return "plain"
    return "amd" if torch.version.hip else "nvidia"


def dot_precision(dtype: torch.dtype, arch: str | None) -> str | None:
    """``input_precision`` of ``tl.dot`` as torch.mm would choose it, for a GPU of ``arch``
    (:func:`device_arch`; None under the interpreter).

    16-bit inputs: None, the backend's default (naming one could be refused by another
    backend). float32: IEEE products, unless torch allows TF32 for matmuls
    (``torch.backends.cuda.matmul.allow_tf32``) and the GPU has TF32 (NVIDIA, gfx942).
    """
    if dtype != torch.float32:
        return None
    if arch is None or not torch.backends.cuda.matmul.allow_tf32:
        return "ieee"
    return "tf32" if arch.startswith("sm") or arch == "gfx942" else "ieee"
