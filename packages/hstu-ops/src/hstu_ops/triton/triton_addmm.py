"""Triton ``addmm`` (op family 6): ``input + mat1 @ mat2`` with the bias add fused.

Semantics and argument checks: :mod:`hstu_ops.pytorch.pt_mm` (torch.addmm; ``input`` is a bias
``[N]`` or a 2-D tensor broadcasting to ``[M, N]``).

* Forward: a tiled matmul, one program per ``BLOCK_M x BLOCK_N`` output tile, reducing over
  ``BLOCK_K`` slices in float32, adding ``input`` (read through broadcast strides, so a bias
  costs one row) before the single rounding to the output dtype. Programs are numbered in
  groups of ``GROUP_M`` row blocks, so that neighbouring programs reuse the same columns of
  ``mat2`` from L2.
* Backward: ``torch.mm`` (cuBLAS / hipBLASLt), not Triton. The backward has nothing to fuse:
  ``d_mat1 = d_out @ mat2^T`` and ``d_mat2 = mat1^T @ d_out`` are plain GEMMs on transposed
  operands, for which the vendor libraries are tuned per shape, and ``d_input`` is a column sum
  (``d_out`` summed over the broadcast dimensions). A Triton GEMM would add compile and tuning
  time for no gain; the forward is Triton only because of the fused bias.
* On a GPU, ``torch.addmm`` runs instead wherever the fused kernel is not known to be faster
  (:data:`FUSED_FASTER`, :func:`addmm_path`): everywhere, today.
* float32 inputs multiply in IEEE float32 unless ``torch.backends.cuda.matmul.allow_tf32`` is
  set (then TF32 where the GPU has it), the rule torch.mm follows in the backward.

Tiles
-----
By default a pinned configuration per architecture (:func:`pinned_config`): ``sm90`` (H100),
``sm80`` (A100) and ``gfx942`` (MI300) have table entries, for 16-bit and for float32 inputs;
any other GPU gets a generic 64 x 64 x 32 tile that fits every GPU's shared memory. Tiles
larger than the matrix are shrunk to it. The entries are the usual large-tile choices for
those chips (Triton's matmul tutorial, generative-recommenders' AMD entry); the tests compile
each for its target and check its shared memory, but they have not been timed here (no GPU).

``HSTU_OPS_TRITON_AUTOTUNE=full`` (read at every call) autotunes instead, over
:func:`full_autotune_configs` of the GPU's vendor, keyed by N, K and M rounded up to a power of
2; the first call for each key benchmarks every config (minutes). ``pinned`` or unset: the
table. Under Triton's interpreter one small configuration is used whatever the variable says.

Importing this module imports ``triton``; ``TRITON_INTERPRET=1`` at that import selects the CPU
interpreter, as for :mod:`hstu_ops.triton.triton_hstu_attention` (only ``triton.language``
builtins and the package's own jit helpers, from :mod:`hstu_ops.triton._common`, inside the
kernel).
"""

from __future__ import annotations

import dataclasses
import itertools
import os

import torch
import triton
import triton.language as tl

from hstu_ops.pytorch.pt_mm import check_addmm_args
from hstu_ops.triton import _common
from hstu_ops.triton._common import cast, device_arch, dot

__all__ = [
    "AUTOTUNE_ENV",
    "FUSED_FASTER",
    "INTERPRETED",
    "PATHS",
    "PATH_ENV",
    "MatmulConfig",
    "addmm_path",
    "device_arch",
    "full_autotune_configs",
    "pinned_config",
    "shape_class",
    "triton_addmm",
]

_OP = "addmm"

AUTOTUNE_ENV = "HSTU_OPS_TRITON_AUTOTUNE"
"""Environment variable: ``full`` autotunes the addmm tiles; ``pinned`` or unset uses the table."""


INTERPRETED: bool = _common.kernel_module_mode(__name__)
"""Whether the kernel of this module was created for Triton's interpreter (CPU tensors)."""


# --------------------------------------------------------------------------------------------
# Kernel
# --------------------------------------------------------------------------------------------
@triton.jit
def _addmm_kernel(
    X,
    W,
    Y,
    Z,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wk,
    stride_wn,
    stride_ym,
    stride_yn,
    stride_zm,
    stride_zn,
    M_BUCKET,  # only a key of the full autotuning
    DOT_PRECISION: tl.constexpr,
    INTERPRET_BF16: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """Z = Y + X @ W: X [M, K], W [K, N], Y [M, N] (stride 0 along broadcast dimensions)."""
    pid = tl.program_id(0)
    blocks_m = (M + BLOCK_M - 1) // BLOCK_M
    blocks_n = (N + BLOCK_N - 1) // BLOCK_N
    # Grouped order: GROUP_M row blocks run over the same column blocks of W together.
    per_group = GROUP_M * blocks_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(blocks_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    # 64-bit offsets to the tile's first row and column; offsets inside the tile stay 32-bit.
    m0 = (pid_m * BLOCK_M).to(tl.int64)
    n0 = (pid_n * BLOCK_N).to(tl.int64)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    in_m = (m0 + offs_m) < M
    in_n = (n0 + offs_n) < N
    x_ptrs = X + m0 * stride_xm + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = W + n0 * stride_wn + offs_k[:, None] * stride_wk + offs_n[None, :] * stride_wn
    acc = tl.full([BLOCK_M, BLOCK_N], 0.0, dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        in_k = (k0 + offs_k) < K
        x = tl.load(x_ptrs, mask=in_m[:, None] & in_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=in_k[:, None] & in_n[None, :], other=0.0)
        acc += dot(x, w, DOT_PRECISION, INTERPRET_BF16)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    tile = in_m[:, None] & in_n[None, :]
    y = tl.load(
        Y
        + m0 * stride_ym
        + n0 * stride_yn
        + offs_m[:, None] * stride_ym
        + offs_n[None, :] * stride_yn,
        mask=tile,
        other=0.0,
    )
    z = acc + y.to(tl.float32)
    tl.store(
        Z
        + m0 * stride_zm
        + n0 * stride_zn
        + offs_m[:, None] * stride_zm
        + offs_n[None, :] * stride_zn,
        cast(z, Z.dtype.element_ty, INTERPRET_BF16),
        mask=tile,
    )


# --------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """Tiles (powers of 2, >= 16), program grouping and launch options of the addmm kernel.

    ``matrix_instr_nonkdim``, ``kpack`` and ``waves_per_eu`` are AMD backend options (0 leaves
    the backend's default and is not passed; they must stay 0 for NVIDIA).
    """

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 2
    matrix_instr_nonkdim: int = 0
    kpack: int = 0
    waves_per_eu: int = 0

    def __post_init__(self) -> None:
        _common.check_power_of_2(self, ("block_m", "block_n", "block_k"))
        if self.group_m < 1:
            raise ValueError(f"MatmulConfig.group_m must be >= 1, got {self.group_m}")

    def amd_options(self) -> dict[str, int]:
        names = ("matrix_instr_nonkdim", "kpack", "waves_per_eu")
        return {name: getattr(self, name) for name in names if getattr(self, name)}

    def launch_options(self) -> dict[str, int]:
        """Keyword arguments of a launch: the tiles, the warps, the stages, AMD options."""
        return {
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "BLOCK_K": self.block_k,
            "GROUP_M": self.group_m,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
            **self.amd_options(),
        }

    def triton_config(self) -> triton.Config:
        tiles = {"BLOCK_M": self.block_m, "BLOCK_N": self.block_n, "BLOCK_K": self.block_k}
        return triton.Config(
            {**tiles, "GROUP_M": self.group_m, **self.amd_options()},
            num_warps=self.num_warps,
            num_stages=self.num_stages,
        )

    def fitted(self, m: int, n: int, k: int) -> MatmulConfig:
        """The same configuration with tiles no larger than the matrix (and not below 16)."""
        return dataclasses.replace(
            self,
            block_m=_common.fit_block(self.block_m, m),
            block_n=_common.fit_block(self.block_n, n),
            block_k=_common.fit_block(self.block_k, k),
        )


# (16-bit inputs, float32 inputs) per architecture. Shared memory per stage is
# (BLOCK_M + BLOCK_N) * BLOCK_K * element size; each entry fits its chip (checked by the tests
# by compiling): 227 KiB on sm90, 163 KiB on sm80, 64 KiB of LDS on gfx942.
_PINNED: dict[str, tuple[MatmulConfig, MatmulConfig]] = {
    "sm90": (
        MatmulConfig(128, 256, 64, group_m=8, num_warps=8, num_stages=3),
        MatmulConfig(128, 128, 32, group_m=8, num_warps=8, num_stages=3),
    ),
    "sm80": (
        MatmulConfig(128, 256, 64, group_m=8, num_warps=8, num_stages=3),
        MatmulConfig(128, 128, 32, group_m=8, num_warps=8, num_stages=3),
    ),
    "gfx942": (
        MatmulConfig(
            256, 256, 32, group_m=8, num_warps=8, num_stages=2, matrix_instr_nonkdim=16, kpack=2
        ),
        MatmulConfig(
            128, 128, 32, group_m=8, num_warps=8, num_stages=2, matrix_instr_nonkdim=16, kpack=1
        ),
    ),
}
_GENERIC = MatmulConfig(64, 64, 32, group_m=8, num_warps=4, num_stages=2)
_INTERPRETER = MatmulConfig(16, 16, 16, group_m=2, num_warps=1, num_stages=1)


def pinned_config(arch: str, dtype: torch.dtype) -> MatmulConfig:
    """The table's configuration for ``arch`` ("sm90", "sm80", "gfx942", ...) and dtype.

    Architectures without an entry get a generic 64 x 64 x 32 tile (not the nearest entry:
    sm86/sm89 have 99 KiB of shared memory, too little for the sm80 tiles).
    """
    entry = _PINNED.get(arch)
    if entry is None:
        return _GENERIC
    return entry[1] if dtype == torch.float32 else entry[0]


def full_autotune_configs(vendor: str) -> list[MatmulConfig]:
    """The search space of ``HSTU_OPS_TRITON_AUTOTUNE=full`` for "nvidia" or "amd" GPUs.

    Configurations that do not fit the GPU are skipped by Triton's autotuner.
    """
    blocks_mn = (64, 128, 256)
    if vendor == "amd":
        return [
            MatmulConfig(bm, bn, bk, 8, warps, 2, matrix_instr_nonkdim=16, kpack=kpack)
            for bm, bn, bk, warps, kpack in itertools.product(
                blocks_mn, blocks_mn, (32, 64), (4, 8), (1, 2)
            )
        ]
    if vendor == "nvidia":
        return [
            MatmulConfig(bm, bn, bk, 8, warps, stages)
            for bm, bn, bk, warps, stages in itertools.product(
                blocks_mn, blocks_mn, (32, 64), (4, 8), (3, 4)
            )
        ]
    raise ValueError(f"full_autotune_configs: vendor must be 'nvidia' or 'amd', got {vendor!r}")


def _autotune_mode() -> str:
    mode = os.environ.get(AUTOTUNE_ENV, "").strip().lower()
    if mode not in ("", "pinned", "full"):
        raise ValueError(
            f"{_OP}: {AUTOTUNE_ENV} must be 'full' or 'pinned' (or unset), got "
            f"{os.environ[AUTOTUNE_ENV]!r}"
        )
    return mode or "pinned"


_autotuned_kernels: dict[str, triton.runtime.Autotuner] = {}


def _autotuned_kernel(vendor: str) -> triton.runtime.Autotuner:
    if vendor not in _autotuned_kernels:
        configs = [c.triton_config() for c in full_autotune_configs(vendor)]
        _autotuned_kernels[vendor] = triton.autotune(configs=configs, key=["M_BUCKET", "N", "K"])(
            _addmm_kernel
        )
    return _autotuned_kernels[vendor]


def addmm_fwd(
    input: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    config: MatmulConfig | None = None,
) -> torch.Tensor:
    """Forward launcher: ``input + mat1 @ mat2`` (arguments already checked)."""
    m, k = mat1.shape
    n = mat2.shape[1]
    out = torch.empty((m, n), dtype=mat1.dtype, device=mat1.device)
    if m == 0 or n == 0:
        return out
    y = input.expand(m, n)  # broadcast dimensions get stride 0
    arch = None if INTERPRETED else device_arch(mat1.device)
    args = (
        mat1,
        mat2,
        y,
        out,
        m,
        n,
        k,
        mat1.stride(0),
        mat1.stride(1),
        mat2.stride(0),
        mat2.stride(1),
        y.stride(0),
        y.stride(1),
        out.stride(0),
        out.stride(1),
        triton.next_power_of_2(m),
    )
    flags = {
        "DOT_PRECISION": _common.dot_precision(mat1.dtype, arch),
        "INTERPRET_BF16": INTERPRETED and mat1.dtype == torch.bfloat16,
    }
    # The variable is read even where it cannot apply, so that a bad value never passes.
    if config is None and _autotune_mode() == "full" and not INTERPRETED:
        kernel = _autotuned_kernel("amd" if torch.version.hip else "nvidia")

        def grid(meta):
            return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

        kernel[grid](*args, **flags)
        return out
    if config is None:
        config = _INTERPRETER if INTERPRETED else pinned_config(arch, mat1.dtype)
    cfg = config.fitted(m, n, k)
    grid = (triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n),)
    _addmm_kernel[grid](*args, **flags, **cfg.launch_options())
    return out


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The gradient of a tensor of ``shape`` broadcast to grad's shape."""
    if len(shape) == 1:
        return grad.sum(0) if shape[0] == grad.shape[1] else grad.sum().reshape(1)
    for dim in (0, 1):
        if shape[dim] == 1 and grad.shape[dim] != 1:
            grad = grad.sum(dim, keepdim=True)
    return grad


class _AddmmFunction(torch.autograd.Function):
    """Triton forward, torch.mm backward (see the module docstring for why)."""

    @staticmethod
    def forward(ctx, input, mat1, mat2, config):  # type: ignore[override]
        ctx.save_for_backward(mat1, mat2)
        ctx.input_shape = input.shape
        return addmm_fwd(input, mat1, mat2, config)

    @staticmethod
    def backward(ctx, d_out):  # type: ignore[override]
        mat1, mat2 = ctx.saved_tensors
        d_input = d_mat1 = d_mat2 = None
        if ctx.needs_input_grad[0]:
            d_input = _sum_to(d_out, ctx.input_shape)
        if ctx.needs_input_grad[1]:
            d_mat1 = torch.mm(d_out, mat2.t())
        if ctx.needs_input_grad[2]:
            d_mat2 = torch.mm(mat1.t(), d_out)
        return d_input, d_mat1, d_mat2, None


# --------------------------------------------------------------------------------------------
# The fused kernel or the vendor's GEMM
# --------------------------------------------------------------------------------------------
PATHS = ("fused", "cublas")
"""``fused``: the Triton kernel above; ``cublas``: ``torch.addmm`` (cuBLAS / hipBLASLt)."""
PATH_ENV = "HSTU_OPS_ADDMM"
"""Environment variable: ``fused`` or ``cublas`` for every TRITON addmm call (including those
of ``hstu_compute_*``); unset or ``auto``, :func:`addmm_path` decides."""

FUSED_FASTER: frozenset[tuple[str, str]] = frozenset()
"""The (architecture, :func:`shape_class`) pairs where a GPU timing showed the fused kernel
faster than ``torch.addmm``: the only place the choice is made. Empty: the one timing there is
(an H200, the self-check's bias shape, bfloat16: the fused kernel at 0.83x of cuBLAS, issue
47) shows it slower, and torch.addmm already fuses what this kernel fuses (a bias through
cuBLASLt's epilogue, a full ``input`` as the GEMM's beta = 1 operand). A pair goes in when a
``bench_side_by_side.py`` timing shows the fused kernel faster; docs/kernels.md keeps the
figures behind each choice."""


def shape_class(input_shape: tuple[int, ...], m: int, n: int) -> str:
    """The class the choice is made per: ``bias`` (input [N] or [1, N], the layer's
    projection uvqk), ``full`` (input [M, N], the layer's output with its residual) or
    ``broadcast`` (input [M, 1] or [1, 1]); ``m``, ``n`` as mat1 @ mat2's."""
    if len(input_shape) == 1 or input_shape[0] == 1 < m:
        return "bias" if input_shape[-1] == n else "broadcast"
    return "full" if input_shape[-1] == n else "broadcast"


def addmm_path(arch: str | None, input_shape: tuple[int, ...], m: int, n: int) -> str:
    """``fused`` where FUSED_FASTER lists (arch, shape class), ``cublas`` elsewhere on a GPU;
    ``fused`` for ``arch`` None (Triton's interpreter, which exists to check the kernel)."""
    if arch is None:
        return "fused"
    return "fused" if (arch, shape_class(input_shape, m, n)) in FUSED_FASTER else "cublas"


def _path_from_env() -> str | None:
    mode = os.environ.get(PATH_ENV, "").strip().lower()
    if mode not in ("", "auto", *PATHS):
        raise ValueError(
            f"{_OP}: {PATH_ENV} must be 'fused', 'cublas' or 'auto' (or unset), got "
            f"{os.environ[PATH_ENV]!r}"
        )
    return mode if mode in PATHS else None


def triton_addmm(
    input: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    *,
    config: MatmulConfig | None = None,
    path: str | None = None,
) -> torch.Tensor:
    """``input + mat1 @ mat2``; arguments as ``hstu_ops.addmm``.

    float16, bfloat16 or float32, accumulated in float32, CUDA/ROCm tensors (or CPU tensors
    under the interpreter). ``path``: ``fused`` (the Triton kernel) or ``cublas``
    (``torch.addmm``); None: the fused kernel when ``config`` is given, else what
    ``HSTU_OPS_ADDMM`` names, else the fused kernel when ``HSTU_OPS_TRITON_AUTOTUNE=full`` asks
    to tune it, else :func:`addmm_path`'s choice. ``config`` overrides the fused kernel's
    pinned table and autotuning.
    """
    check_addmm_args(input, mat1, mat2)
    _common.check_float_dtype(_OP, mat1.dtype)
    _common.check_device(_OP, mat1.device, INTERPRETED)
    if path is not None and path not in PATHS:
        raise ValueError(f"{_OP}: path must be 'fused' or 'cublas', got {path!r}")
    from_env = _path_from_env()  # read at every call, so that a bad value never passes
    if path is None:
        if config is not None:
            path = "fused"
        elif from_env is not None:
            path = from_env
        elif _autotune_mode() == "full":
            path = "fused"
        else:
            arch = None if INTERPRETED else device_arch(mat1.device)
            path = addmm_path(arch, tuple(input.shape), mat1.shape[0], mat2.shape[1])
    if path == "cublas":
        return torch.addmm(input, mat1, mat2)
    return _AddmmFunction.apply(input, mat1, mat2, config)
