"""addmm: ``input + mat1 @ mat2``, PYTORCH (torch.addmm) and TRITON (fused bias).

The TRITON kernel runs in Triton's interpreter on CPU tensors (the module is loaded by the
``load_triton`` fixture of conftest.py) and is compared with the reference for the output and
the three gradients; the backward is torch.mm in both. ``slow`` tests compile the pinned tile
configurations for sm_80, sm_90 and gfx942 without a GPU and check their shared memory; ``gpu``
tests (skipped without CUDA) compare the compiled kernel, pinned and fully autotuned.

Tolerances: float32 ``atol=1e-5, rtol=1e-4`` (IEEE float32 products, another summation order);
bfloat16 and float16 the flash-attention oracle ``max|out - ref32| <= 2 * max|ref16 - ref32| +
1e-4`` for the output and the gradients, ref32 being the reference on the upcast inputs and
ref16 torch.addmm in the low precision.
"""

from __future__ import annotations

import pytest
import torch

import hstu_ops.mm as mm_ops
from hstu_ops import Kernel
from hstu_ops.pytorch.pt_mm import pytorch_addmm

BACKEND = "hstu_ops.triton.triton_addmm"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-4}
LOW_PRECISION_ATOL = 1e-4


def _inputs(gen, m, k, n, input_shape, dtype=torch.float32, device="cpu"):
    shape = {"bias": (n,), "full": (m, n), "row": (1, n), "column": (m, 1), "scalar": (1,)}
    tensors = (
        torch.randn(shape[input_shape], generator=gen),
        torch.randn(m, k, generator=gen),
        torch.randn(k, n, generator=gen),
        torch.randn(m, n, generator=gen),  # the output gradient
    )
    return tuple(t.to(device=device, dtype=dtype) for t in tensors)


def _forward_backward(fn, input, mat1, mat2, d_out, **kw):
    input, mat1, mat2 = (t.detach().clone().requires_grad_() for t in (input, mat1, mat2))
    out = fn(input, mat1, mat2, **kw)
    grads = torch.autograd.grad(out, (input, mat1, mat2), d_out)
    return (out.detach(), *grads)


NAMES = ("out", "d_input", "d_mat1", "d_mat2")

# (M, K, N): odd sizes, a single row, a single column, sizes past one interpreter tile of 16.
SHAPES = [(1, 20, 40), (6, 100, 20), (42, 40, 100), (123, 20, 1)]


# --------------------------------------------------------------------------------------------
# Reference
# --------------------------------------------------------------------------------------------
def test_reference_is_torch_addmm_and_gradcheck_float64():
    gen = torch.Generator().manual_seed(0)
    for shape in ("bias", "full", "row", "column", "scalar"):
        input, mat1, mat2, _ = _inputs(gen, 5, 3, 4, shape, torch.float64)
        out = pytorch_addmm(input, mat1, mat2)
        assert torch.equal(out, torch.addmm(input, mat1, mat2))
        torch.testing.assert_close(out, input + mat1 @ mat2)
        args = [t.requires_grad_() for t in (input, mat1, mat2)]
        assert torch.autograd.gradcheck(pytorch_addmm, args)


# --------------------------------------------------------------------------------------------
# TRITON against the reference
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
@pytest.mark.parametrize("input_shape", ["bias", "full", "row", "column"])
def test_triton_fp32_matches_reference(tt, m, k, n, input_shape):
    gen = torch.Generator().manual_seed(m * 1000 + k + n)
    inputs = _inputs(gen, m, k, n, input_shape)
    got = _forward_backward(tt.triton_addmm, *inputs)
    ref = _forward_backward(pytorch_addmm, *inputs)
    for name, g, r in zip(NAMES, got, ref, strict=True):
        assert g.shape == r.shape, name
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda msg, name=name: f"{name}: {msg}")


@pytest.mark.triton
@pytest.mark.parametrize(
    ("dtype", "m", "k", "n", "input_shape"),
    [
        (torch.bfloat16, 42, 100, 40, "bias"),
        (torch.bfloat16, 123, 20, 20, "full"),
        (torch.float16, 6, 40, 100, "row"),
    ],
)
def test_triton_low_precision_oracle(tt, flash_oracle, dtype, m, k, n, input_shape):
    gen = torch.Generator().manual_seed(7)
    low = _inputs(gen, m, k, n, input_shape, dtype)
    got = _forward_backward(tt.triton_addmm, *low)
    ref16 = _forward_backward(pytorch_addmm, *low)
    ref32 = _forward_backward(pytorch_addmm, *(t.float() for t in low))
    assert got[0].dtype == dtype
    flash_oracle(NAMES, got, ref16, ref32, atol=LOW_PRECISION_ATOL)


@pytest.mark.triton
def test_triton_strided_operands_and_dispatch(tt):
    """mat1 transposed, mat2 a column slice, the bias a strided view; through addmm(kernel=)."""
    gen = torch.Generator().manual_seed(8)
    mat1 = torch.randn(40, 33, generator=gen).t()  # [33, 40], column-major
    mat2 = torch.randn(40, 60, generator=gen)[:, 5:50]  # [40, 45], row stride 60
    bias = torch.randn(90, generator=gen)[::2]  # [45], stride 2
    d_out = torch.randn(33, 45, generator=gen)
    got = _forward_backward(mm_ops.addmm, bias, mat1, mat2, d_out, kernel="triton")
    ref = _forward_backward(mm_ops.addmm, bias, mat1, mat2, d_out, kernel=Kernel.PYTORCH)
    for name, g, r in zip(NAMES, got, ref, strict=True):
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda msg, name=name: f"{name}: {msg}")


@pytest.mark.triton
def test_triton_degenerate_shapes_and_scalar_input(tt):
    gen = torch.Generator().manual_seed(9)
    for m, k, n, shape in (
        (0, 5, 3, "bias"),
        (4, 0, 3, "full"),
        (4, 5, 0, "bias"),
        (5, 7, 9, "scalar"),
    ):
        inputs = _inputs(gen, m, k, n, shape)
        got = _forward_backward(tt.triton_addmm, *inputs)
        ref = _forward_backward(pytorch_addmm, *inputs)
        for name, g, r in zip(NAMES, got, ref, strict=True):
            assert g.shape == r.shape, (name, m, k, n)
            torch.testing.assert_close(g, r, **FP32_TOL)


@pytest.mark.triton
@pytest.mark.parametrize("arch", ["sm90", "sm80", "gfx942", "sm75"])
def test_pinned_tiles_of_each_architecture_compute_the_same(tt, arch, monkeypatch):
    """The table's float32 tiles (shrunk to the matrix) run in the interpreter and give the
    reference (16-bit tiles cannot: the interpreter's bfloat16 products need INTERPRET_BF16)."""
    monkeypatch.setattr(tt, "INTERPRETED", False)  # take the GPU's code path ...
    monkeypatch.setattr(tt, "device_arch", lambda device: arch)  # ... for this architecture
    chosen = []
    real_pinned = tt.pinned_config
    monkeypatch.setattr(tt, "pinned_config", lambda a, d: chosen.append(a) or real_pinned(a, d))
    gen = torch.Generator().manual_seed(10)
    input, mat1, mat2, _ = _inputs(gen, 70, 90, 150, "bias")
    # The kernel object stays the interpreted one (the flag only steers the Python side); the
    # interpreter ignores the AMD launch options.
    out = tt.addmm_fwd(input, mat1, mat2)
    assert chosen == [arch]
    torch.testing.assert_close(out, torch.addmm(input, mat1, mat2), **FP32_TOL)


# --------------------------------------------------------------------------------------------
# Configurations and the autotuning switch
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
def test_pinned_table_and_full_search_space(tt):
    assert tt.pinned_config("sm90", torch.bfloat16) == tt.MatmulConfig(128, 256, 64, 8, 8, 3)
    assert tt.pinned_config("sm80", torch.float16).block_n == 256
    assert tt.pinned_config("sm90", torch.float32).block_k == 32
    amd = tt.pinned_config("gfx942", torch.bfloat16)
    assert amd.amd_options() == {"matrix_instr_nonkdim": 16, "kpack": 2}
    assert amd.triton_config().kwargs["kpack"] == 2
    # No entry (sm86 has too little shared memory for the sm80 tiles): the generic tile.
    assert tt.pinned_config("sm86", torch.bfloat16) == tt.MatmulConfig(64, 64, 32, 8, 4, 2)
    assert tt.pinned_config("gfx90a", torch.bfloat16) == tt.MatmulConfig(64, 64, 32, 8, 4, 2)
    nvidia, amd_space = tt.full_autotune_configs("nvidia"), tt.full_autotune_configs("amd")
    assert len(nvidia) == 72 and not any(c.amd_options() for c in nvidia)
    assert len(amd_space) == 72 and all(c.amd_options() for c in amd_space)
    assert tt.MatmulConfig(128, 256, 64).fitted(20, 1, 300) == tt.MatmulConfig(32, 16, 64)
    with pytest.raises(ValueError, match=r"MatmulConfig.block_n must be a power of 2 >= 16"):
        tt.MatmulConfig(64, 48, 32)
    with pytest.raises(ValueError, match=r"vendor must be 'nvidia' or 'amd', got 'intel'"):
        tt.full_autotune_configs("intel")


@pytest.mark.triton
def test_autotune_switch(tt, monkeypatch):
    gen = torch.Generator().manual_seed(11)
    input, mat1, mat2, _ = _inputs(gen, 20, 30, 40, "bias")
    want = torch.addmm(input, mat1, mat2)
    # Interpreter: one small configuration, whatever the variable says.
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "full")
    torch.testing.assert_close(tt.triton_addmm(input, mat1, mat2), want, **FP32_TOL)
    # On a GPU, "full" launches the autotuned kernel of the vendor (replaced here by one that
    # records the call and runs a fixed configuration; addmm_fwd skips the device check).
    monkeypatch.setattr(tt, "INTERPRETED", False)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(tt, "device_arch", lambda device: "sm90")
    vendors = []

    class FakeAutotuner:
        def __init__(self, vendor):
            vendors.append(vendor)

        def __getitem__(self, grid):
            meta = {"BLOCK_M": 16, "BLOCK_N": 32}
            assert grid(meta) == (2 * 2,)
            return lambda *args, **flags: tt._addmm_kernel[grid(meta)](
                *args, **flags, BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=1
            )

    monkeypatch.setattr(tt, "_autotuned_kernel", FakeAutotuner)
    torch.testing.assert_close(tt.addmm_fwd(input, mat1, mat2), want, **FP32_TOL)
    assert vendors == ["nvidia"]
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "pinned")
    torch.testing.assert_close(tt.addmm_fwd(input, mat1, mat2), want, **FP32_TOL)
    assert vendors == ["nvidia"]
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "fastest")
    with pytest.raises(ValueError, match=r"HSTU_OPS_TRITON_AUTOTUNE must be 'full' or 'pinned'"):
        tt.addmm_fwd(input, mat1, mat2)


# --------------------------------------------------------------------------------------------
# The fused kernel or torch.addmm (cuBLAS)
# --------------------------------------------------------------------------------------------
TOKENS_5B = 32 * 4095
"""The rows of the yambda-5b layer's matmuls (batch 32, 4,095 tokens)."""


@pytest.mark.triton
def test_the_models_shapes_take_cublas_on_every_gpu(tt):
    # uvqk: the bias [4 x 512] over the width 512; the output: the residual [M, 512].
    assert tt.shape_class((2048,), TOKENS_5B, 2048) == "bias"
    assert tt.shape_class((1, 2048), TOKENS_5B, 2048) == "bias"
    assert tt.shape_class((TOKENS_5B, 512), TOKENS_5B, 512) == "full"
    assert tt.shape_class((1, 512), 1, 512) == "full"
    assert tt.shape_class((TOKENS_5B, 1), TOKENS_5B, 512) == "broadcast"
    assert tt.shape_class((1,), TOKENS_5B, 512) == "broadcast"
    for arch in ("sm80", "sm90", "sm100", "gfx942", "gfx950", "sm75"):
        assert tt.addmm_path(arch, (2048,), TOKENS_5B, 2048) == "cublas", arch
        assert tt.addmm_path(arch, (TOKENS_5B, 512), TOKENS_5B, 512) == "cublas", arch
    assert tt.addmm_path(None, (2048,), TOKENS_5B, 2048) == "fused"  # the interpreter
    assert not tt.FUSED_FASTER


@pytest.mark.triton
def test_the_path_each_call_takes_and_both_agree(tt, monkeypatch):
    """On a GPU (the launch's device check and architecture faked), the table's cuBLAS unless
    path=, config=, HSTU_OPS_ADDMM or the full autotuning name the fused kernel; under the
    interpreter the fused kernel; both paths give the reference's values and gradients."""
    gen = torch.Generator().manual_seed(12)
    inputs = _inputs(gen, 16, 16, 16, "full")  # one program of the interpreter's tile
    ref = _forward_backward(pytorch_addmm, *inputs)
    for path in tt.PATHS:
        got = _forward_backward(tt.triton_addmm, *inputs, path=path)
        for name, g, r in zip(NAMES, got, ref, strict=True):
            torch.testing.assert_close(
                g, r, **FP32_TOL, msg=lambda m, n=name, p=path: f"{p} {n}: {m}"
            )

    taken = []
    fused = tt._AddmmFunction.apply

    def spy(*args):
        taken.append("fused")
        return fused(*args)

    monkeypatch.setattr(tt._AddmmFunction, "apply", spy)
    bias, mat1, mat2, _ = inputs
    tt.triton_addmm(bias, mat1, mat2)
    assert taken == ["fused"]  # the interpreter
    monkeypatch.setattr(tt, "INTERPRETED", False)
    monkeypatch.setattr(tt, "device_arch", lambda device: "sm90")
    monkeypatch.setattr(tt._common, "check_device", lambda op, device, interpreted: None)
    monkeypatch.setattr(tt, "addmm_fwd", lambda *args: fused_on_cpu(*args))

    def fused_on_cpu(input, mat1, mat2, config):
        taken.append("fused on gpu")
        return torch.addmm(input, mat1, mat2)

    taken.clear()
    tt.triton_addmm(bias, mat1, mat2)
    assert taken == []  # cuBLAS: torch.addmm, no fused launch
    tt.triton_addmm(bias, mat1, mat2, path="fused")
    tt.triton_addmm(bias, mat1, mat2, config=tt.MatmulConfig(16, 16, 16))
    monkeypatch.setenv(tt.PATH_ENV, "fused")
    tt.triton_addmm(bias, mat1, mat2)
    tt.triton_addmm(bias, mat1, mat2, path="cublas")  # the argument over the variable
    monkeypatch.setenv(tt.PATH_ENV, "auto")
    tt.triton_addmm(bias, mat1, mat2)
    monkeypatch.setenv(tt.AUTOTUNE_ENV, "full")  # tuning asks for the fused kernel ...
    tt.triton_addmm(bias, mat1, mat2)
    monkeypatch.setenv(tt.PATH_ENV, "cublas")  # ... unless the variable names cuBLAS
    tt.triton_addmm(bias, mat1, mat2)
    assert taken == ["fused", "fused on gpu"] * 4, taken
    monkeypatch.setenv(tt.PATH_ENV, "triton")
    with pytest.raises(ValueError, match=r"HSTU_OPS_ADDMM must be 'fused', 'cublas' or 'auto'"):
        tt.triton_addmm(bias, mat1, mat2, path="fused")
    monkeypatch.delenv(tt.PATH_ENV)
    with pytest.raises(ValueError, match=r"addmm: path must be 'fused' or 'cublas', got 'cuda'"):
        tt.triton_addmm(bias, mat1, mat2, path="cuda")


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------
_M1, _M2, _B = torch.zeros(4, 3), torch.zeros(3, 5), torch.zeros(5)

ERROR_CASES = [
    (
        "mat1_1d",
        (_B, torch.zeros(3), _M2),
        ValueError,
        r"addmm: mat1 must be 2-D \[M, K\], got "
        r"shape \[3\]",
    ),
    ("mat2_3d", (_B, _M1, torch.zeros(1, 3, 5)), ValueError, r"mat2 must be 2-D \[K, N\]"),
    (
        "inner",
        (_B, _M1, torch.zeros(4, 5)),
        ValueError,
        r"mat2.shape\[0\] = 4 must equal "
        r"mat1.shape\[1\] = 3",
    ),
    (
        "input_3d",
        (torch.zeros(1, 4, 5), _M1, _M2),
        ValueError,
        r"input must be a 1-D bias \[N\] "
        r"or 2-D \[M, N\], got shape \[1, 4, 5\]",
    ),
    (
        "input_shape",
        (torch.zeros(4), _M1, _M2),
        ValueError,
        r"input of shape \[4\] does not "
        r"broadcast to \[M, N\] = \[4, 5\]",
    ),
    (
        "input_rows",
        (torch.zeros(3, 5), _M1, _M2),
        ValueError,
        r"input of shape \[3, 5\] does not "
        r"broadcast",
    ),
    (
        "dtypes",
        (_B.double(), _M1, _M2),
        TypeError,
        r"input, mat1 and mat2 must share one "
        r"floating dtype, got float64, float32, float32",
    ),
    (
        "integers",
        (_B.long(), _M1.long(), _M2.long()),
        TypeError,
        r"must share one floating "
        r"dtype, got int64, int64, int64",
    ),
]


@pytest.mark.parametrize(
    "kernel", [Kernel.PYTORCH, pytest.param(Kernel.TRITON, marks=pytest.mark.triton)]
)
@pytest.mark.parametrize(
    ("args", "exc", "pattern"), [pytest.param(a, e, p, id=i) for i, a, e, p in ERROR_CASES]
)
def test_errors_name_the_argument(kernel, args, exc, pattern, load_triton):
    if kernel is Kernel.PYTORCH:
        with pytest.raises(exc, match=pattern):
            mm_ops.addmm(*args, kernel=kernel)
        return
    with load_triton(BACKEND, interpret=True), pytest.raises(exc, match=pattern):
        mm_ops.addmm(*args, kernel=kernel)


@pytest.mark.triton
def test_triton_specific_errors(tt, load_triton):
    with pytest.raises(
        ValueError,
        match=r"addmm has no NATIVE kernel; kernels available for "
        r"addmm: PYTORCH, TRITON",
    ):
        mm_ops.addmm(_B, _M1, _M2, kernel="native")
    with pytest.raises(
        TypeError,
        match=r"supports float16, bfloat16 and float32, got "
        r"torch.float64",
    ):
        tt.triton_addmm(_B.double(), _M1.double(), _M2.double())
    with load_triton(BACKEND, interpret=False) as compiled:
        assert not compiled.INTERPRETED
        with pytest.raises(ValueError, match=r"needs CUDA or ROCm tensors, got cpu tensors"):
            mm_ops.addmm(_B, _M1, _M2, kernel=Kernel.TRITON)


# --------------------------------------------------------------------------------------------
# Compilation of the pinned configurations, without a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.triton
@pytest.mark.parametrize("gpu_target", ["sm80", "sm90", "gfx942"], indirect=True)
def test_pinned_configs_compile_and_fit(gpu_target, load_triton):
    """Each table entry compiles for its chip, as launched on aligned [4096, 512] x [512, 1024]
    operands, and fits its shared memory (the interpreter checks neither)."""
    m, k, n = 4096, 512, 1024
    with load_triton(BACKEND, interpret=False) as compiled:
        for dtype, ptr in ((torch.bfloat16, "*bf16"), (torch.float32, "*fp32")):
            cfg = compiled.pinned_config(gpu_target.arch, dtype)
            options = cfg.launch_options()
            constants = {name: options.pop(name) for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K")}
            constants["GROUP_M"] = options.pop("GROUP_M")
            constants.update(DOT_PRECISION="ieee" if dtype == torch.float32 else None)
            constants.update(INTERPRET_BF16=False)
            values = dict(
                X=ptr,
                W=ptr,
                Y=ptr,
                Z=ptr,
                M=m,
                N=n,
                K=k,
                stride_xm=k,
                stride_xk=1,
                stride_wk=n,
                stride_wn=1,
                stride_ym=0,
                stride_yn=1,
                stride_zm=n,
                stride_zn=1,
                M_BUCKET=m,
            )
            binary = gpu_target.compile(compiled._addmm_kernel, constants, options, values=values)
            shared = binary.metadata.shared
            assert shared <= gpu_target.max_shared, (gpu_target.arch, dtype, shared)


# --------------------------------------------------------------------------------------------
# On a GPU
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_gpu_matches_reference(dtype, load_triton, flash_oracle):
    gen = torch.Generator().manual_seed(20)
    with load_triton(BACKEND, interpret=False) as compiled:
        for (m, k, n), shape in zip(
            [(1, 20, 40), (1000, 512, 256), (4097, 300, 1000), (77, 4096, 33)],
            ["bias", "full", "row", "column"],
            strict=True,
        ):
            low = _inputs(gen, m, k, n, shape, dtype, device="cuda")
            got = _forward_backward(compiled.triton_addmm, *low, path="fused")
            ref = _forward_backward(pytorch_addmm, *low)
            if dtype == torch.float32:
                for name, g, r in zip(NAMES, got, ref, strict=True):
                    torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-3, msg=name)
                continue
            ref32 = _forward_backward(pytorch_addmm, *(t.float() for t in low))
            flash_oracle(NAMES, got, ref, ref32, atol=LOW_PRECISION_ATOL)


@pytest.mark.gpu
@pytest.mark.triton
def test_gpu_full_autotuning(load_triton, monkeypatch):
    """HSTU_OPS_TRITON_AUTOTUNE=full on a GPU, over a few configurations of the search space."""
    gen = torch.Generator().manual_seed(21)
    with load_triton(BACKEND, interpret=False) as compiled:
        vendor = "amd" if torch.version.hip else "nvidia"
        few = compiled.full_autotune_configs(vendor)[::24]
        monkeypatch.setattr(compiled, "full_autotune_configs", lambda v: few)
        monkeypatch.setattr(compiled, "_autotuned_kernels", {})
        monkeypatch.setenv(compiled.AUTOTUNE_ENV, "full")
        input, mat1, mat2, _ = _inputs(gen, 300, 200, 100, "bias", torch.bfloat16, "cuda")
        got = compiled.triton_addmm(input, mat1, mat2)
        assert compiled._autotuned_kernels[vendor].best_config is not None
        ref32 = torch.addmm(input.float(), mat1.float(), mat2.float())
        ref16 = torch.addmm(input, mat1, mat2)
        err = (got.float() - ref32).abs().max().item()
        assert err <= 2 * (ref16.float() - ref32).abs().max().item() + LOW_PRECISION_ATOL
