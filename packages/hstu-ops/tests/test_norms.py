"""layer_norm, rms_norm and swish_layer_norm: the references, and TRITON against them.

Without a GPU the Triton kernels run in Triton's interpreter on CPU tensors, loaded by the
``load_triton`` fixture of conftest.py. Every comparison covers the output and every gradient
(dx, dweight, dbias), for the weighted and the plain variant of each op.

Tolerances: float32 ``atol=1e-5, rtol=1e-5`` (both kernels compute in float32; only the order
of the additions differs). bfloat16 and float16 the flash-attention oracle ``max|out - ref32| <=
2 * max|ref16 - ref32| + 1e-5`` for the output and each gradient, where ref32 is the float32
reference on the upcast inputs and ref16 the reference run on the 16-bit tensors (which computes
in float32 and rounds once, so ref16 - ref32 is the rounding error of the result dtype).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import hstu_ops
from hstu_ops import Kernel
from hstu_ops.norms import layer_norm, rms_norm, swish_layer_norm
from hstu_ops.pytorch.pt_norms import (
    pytorch_layer_norm,
    pytorch_rms_norm,
    pytorch_swish_layer_norm,
)

BACKEND = "hstu_ops.triton.triton_norms"

FP32_TOL = {"atol": 1e-5, "rtol": 1e-5}
LOW_PRECISION_ATOL = 1e-5

OPS = ["layer_norm", "swish_layer_norm", "rms_norm"]
HAS_BIAS = {"layer_norm": True, "swish_layer_norm": True, "rms_norm": False}
REFERENCES = {
    "layer_norm": pytorch_layer_norm,
    "swish_layer_norm": pytorch_swish_layer_norm,
    "rms_norm": pytorch_rms_norm,
}
DISPATCHERS = {
    "layer_norm": layer_norm,
    "swish_layer_norm": swish_layer_norm,
    "rms_norm": rms_norm,
}


def triton_op(tt, op: str):
    return getattr(tt, f"triton_{op}")


# --------------------------------------------------------------------------------------------
# Inputs and comparisons
# --------------------------------------------------------------------------------------------
def make_inputs(op, shape, weighted=True, dtype=torch.float32, param_dtype=None, seed=0):
    """(x, params, dy): x and dy of ``shape``, params the [D] weight (and bias), or ()."""
    gen = torch.Generator().manual_seed(seed)
    d = shape[-1]
    # An offset and a scale per row, so that the mean and the variance both matter.
    x = torch.randn(shape, generator=gen) * 2.0 + torch.randn(*shape[:-1], 1, generator=gen)
    dy = torch.randn(shape, generator=gen)
    params = ()
    if weighted:
        params = (1.0 + 0.5 * torch.randn(d, generator=gen),)
        if HAS_BIAS[op]:
            params = (*params, 0.5 * torch.randn(d, generator=gen))
    param_dtype = param_dtype or dtype
    return x.to(dtype), tuple(p.to(param_dtype) for p in params), dy.to(dtype)


def call(fn, op, x, params, **kwargs):
    """fn(x, weight[, bias], ...) with None for the parameters of the plain variant."""
    if not params:
        params = (None, None) if HAS_BIAS[op] else (None,)
    return fn(x, *params, **kwargs)


def forward_backward(fn, op, x, params, dy, **kwargs):
    """[out, dx, dweight, dbias] (only the gradients of the given tensors) for the gradient dy."""
    x = x.detach().clone().requires_grad_()
    params = tuple(p.detach().clone().requires_grad_() for p in params)
    out = call(fn, op, x, params, **kwargs)
    grads = torch.autograd.grad(out, (x, *params), dy)
    return [out.detach(), *grads]


NAMES = ["out", "dx", "dweight", "dbias"]


def assert_matches_fp32(fn, op, x, params, dy, tol=None, eps=1e-5, **kwargs):
    """fn(x, params, eps=eps, **kwargs) against the reference, output and gradients."""
    got = forward_backward(fn, op, x, params, dy, eps=eps, **kwargs)
    ref = forward_backward(REFERENCES[op], op, x, params, dy, eps=eps)
    assert len(got) == len(ref) == 2 + len(params)
    for name, g, r in zip(NAMES, got, ref, strict=False):
        assert g.dtype == r.dtype and g.shape == r.shape, name
        torch.testing.assert_close(g, r, **(tol or FP32_TOL), msg=lambda m, n=name: f"{n}: {m}")


@pytest.fixture
def assert_low_precision_oracle(flash_oracle):
    """``assert_low_precision_oracle(fn, op, x, params, dy, **kwargs)``: the flash-attention
    oracle for the output and every gradient (16-bit x)."""

    def check(fn, op, x, params, dy, **kwargs):
        got = forward_backward(fn, op, x, params, dy, **kwargs)
        ref16 = forward_backward(REFERENCES[op], op, x, params, dy)
        ref32 = forward_backward(
            REFERENCES[op], op, x.float(), tuple(p.float() for p in params), dy.float()
        )
        names = NAMES[: len(got)]
        flash_oracle(names, got, ref16, ref32, atol=LOW_PRECISION_ATOL)

    return check


# --------------------------------------------------------------------------------------------
# The references
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "plain"])
@pytest.mark.parametrize("shape", [(7, 20), (2, 3, 40)], ids=["2d", "3d"])
def test_references_match_torch_functional(shape, weighted):
    x, params, _ = make_inputs("layer_norm", shape, weighted, seed=1)
    w, b = params or (None, None)
    d = shape[-1]
    expected = F.layer_norm(x, [d], w, b, eps=1e-5)
    torch.testing.assert_close(pytorch_layer_norm(x, w, b), expected, **FP32_TOL)
    torch.testing.assert_close(
        pytorch_swish_layer_norm(x, w, b, 1e-3),
        x * torch.sigmoid(F.layer_norm(x, [d], w, b, eps=1e-3)),
        **FP32_TOL,
    )
    torch.testing.assert_close(
        pytorch_rms_norm(x, w, 1e-4), F.rms_norm(x, [d], w, eps=1e-4), **FP32_TOL
    )


@pytest.mark.parametrize("op", OPS)
def test_reference_16bit_is_float32_rounded_once(op):
    """Low-precision inputs: float32 arithmetic (weights included), one rounding at the end."""
    x, params, _ = make_inputs(op, (5, 40), dtype=torch.bfloat16, seed=2)
    got = call(REFERENCES[op], op, x, params)
    expected = call(REFERENCES[op], op, x.float(), tuple(p.float() for p in params))
    assert got.dtype == torch.bfloat16
    assert torch.equal(got, expected.to(torch.bfloat16))
    # float32 weights with bfloat16 activations: the result still has the dtype of x.
    mixed = call(REFERENCES[op], op, x, tuple(p.float() for p in params))
    assert torch.equal(mixed, expected.to(torch.bfloat16))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "plain"])
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 7)], ids=["2d", "3d"])
def test_reference_gradcheck_float64(op, weighted, shape):
    x, params, _ = make_inputs(op, shape, weighted, dtype=torch.float64, seed=3)
    x.requires_grad_()
    params = tuple(p.requires_grad_() for p in params)

    def fn(x, *params):
        return call(REFERENCES[op], op, x, params, eps=1e-3)

    assert torch.autograd.gradcheck(fn, (x, *params))


# --------------------------------------------------------------------------------------------
# Argument errors: the same checks and messages for both kernels
# --------------------------------------------------------------------------------------------
def _bad_arguments(op: str):
    x = torch.randn(3, 8)
    w = torch.ones(8)
    b = torch.zeros(8) if HAS_BIAS[op] else None
    cases = [
        (TypeError, r"x must be a tensor, got list", ([[1.0]], w, b), {}),
        (TypeError, r"x must have a floating dtype, got torch.int64", (x.long(), w, b), {}),
        (ValueError, r"x must have a non-empty last dimension \(the features\), got shape \[\]", (x[0, 0], None, None), {}),
        (ValueError, r"x must have a non-empty last dimension .*got shape \[3, 0\]", (x[:, :0], None, None), {}),
        (ValueError, r"weight must be 1-D with one entry per feature of x \(8\), got shape \[9\]", (x, torch.ones(9), b), {}),
        (ValueError, r"weight must be 1-D .* got shape \[1, 8\]", (x, w[None], b), {}),
        (TypeError, r"weight must have a floating dtype, got torch.int32", (x, w.int(), b), {}),
        (TypeError, r"weight must be a tensor or None, got list", (x, [1.0] * 8, b), {}),
        (ValueError, r"weight is on meta, x on cpu", (x, w.to("meta"), b), {}),
        (ValueError, r"eps must be >= 0, got -1.0", (x, w, b), {"eps": -1.0}),
        (ValueError, r"eps must be >= 0, got nan", (x, w, b), {"eps": math.nan}),
        (TypeError, r"eps must be a real number, got str", (x, w, b), {"eps": "1e-5"}),
    ]  # fmt: skip
    if HAS_BIAS[op]:
        cases += [
            (ValueError, r"bias must be 1-D with one entry per feature of x \(8\), got shape \[7\]", (x, w, torch.zeros(7)), {}),
            (ValueError, r"weight was given without bias; pass both .* or neither", (x, w, None), {}),
            (ValueError, r"bias was given without weight", (x, None, b), {}),
        ]  # fmt: skip
    return [pytest.param(op, *case, id=f"{op}-{i}") for i, case in enumerate(cases)]


@pytest.mark.triton
@pytest.mark.parametrize("kernel", ["pytorch", "triton"])
@pytest.mark.parametrize(
    ("op", "error", "match", "args", "kwargs"),
    [p for op in OPS for p in _bad_arguments(op)],
)
def test_argument_errors(tt, kernel, op, error, match, args, kwargs):
    if not HAS_BIAS[op]:
        args = args[:2]
    with pytest.raises(error, match=rf"^{op}: {match}"):
        DISPATCHERS[op](*args, **kwargs, kernel=kernel)


def test_kernel_choice():
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match=r"^layer_norm has no NATIVE kernel; kernels available "):
        layer_norm(x, None, None, kernel=Kernel.NATIVE)
    with pytest.raises(ValueError, match=r"kernels available for rms_norm: PYTORCH, TRITON$"):
        rms_norm(x, None, kernel="native")
    # The default kernel NATIVE, which these ops lack, runs PYTORCH.
    hstu_ops.set_default_kernel(Kernel.NATIVE)
    torch.testing.assert_close(
        swish_layer_norm(x, None, None), pytorch_swish_layer_norm(x, None, None)
    )


# --------------------------------------------------------------------------------------------
# TRITON, float32, against the reference
# --------------------------------------------------------------------------------------------
# Every row count (1, 6, 42, 123) and width (20, 40, 100, 512) of the brief; tiles of one row,
# of several rows with a partial last tile, and the interpreter default (one tile for small
# inputs); weighted backward programs that get one tile, several, or fewer than the others.
SHAPES_AND_CONFIGS = [
    ((1, 20), None),
    ((6, 512), dict(block_n=1, num_warps=1, bwd_programs=4)),
    ((42, 100), dict(block_n=4, num_warps=1, bwd_programs=4)),
    ((123, 40), dict(block_n=8, num_warps=1, bwd_programs=3)),
    ((123, 20), None),
    ((42, 512), None),
]


@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("weighted", [True, False], ids=["weighted", "plain"])
@pytest.mark.parametrize(
    ("shape", "cfg"), SHAPES_AND_CONFIGS, ids=[f"{n}x{d}" for (n, d), _ in SHAPES_AND_CONFIGS]
)
def test_fp32_matches_reference(tt, op, weighted, shape, cfg):
    x, params, dy = make_inputs(op, shape, weighted, seed=shape[0] * shape[1])
    config = tt.NormConfig(**cfg) if cfg else None
    assert_matches_fp32(triton_op(tt, op), op, x, params, dy, config=config)


@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
def test_3d_strided_input_and_expanded_gradient(tt, op):
    """x [2, 21, 40] sliced from a wider tensor (row stride 48), gradient of sum() (stride 0)."""
    gen = torch.Generator().manual_seed(4)
    wide = torch.randn(2, 21, 48, generator=gen)
    _, params, _ = make_inputs(op, (1, 40), seed=5)
    results = []
    triton_kwargs = {"config": tt.NormConfig(block_n=4, num_warps=1, bwd_programs=3)}
    for fn, kwargs in ((triton_op(tt, op), triton_kwargs), (REFERENCES[op], {})):
        leaf = wide.clone().requires_grad_()
        x = leaf[..., 4:44]
        assert not x.is_contiguous() and x.dim() == 3
        ps = tuple(p.clone().requires_grad_() for p in params)
        out = call(fn, op, x, ps, **kwargs)
        assert out.shape == x.shape
        results.append([out.detach(), *torch.autograd.grad(out.sum(), (leaf, *ps))])
    for name, g, r in zip(NAMES, *results, strict=False):
        torch.testing.assert_close(g, r, **FP32_TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
def test_dispatch_and_default_kernel_triton(tt, op, monkeypatch):
    """Through hstu_ops.norms with kernel="triton", then with TRITON as process default."""
    x, params, dy = make_inputs(op, (3, 7, 24), seed=6)
    assert_matches_fp32(DISPATCHERS[op], op, x, params, dy, kernel="triton")
    calls = []
    real = triton_op(tt, op)
    monkeypatch.setattr(tt, f"triton_{op}", lambda *a, **k: calls.append(1) or real(*a, **k))
    hstu_ops.set_default_kernel(Kernel.TRITON)
    torch.testing.assert_close(
        call(DISPATCHERS[op], op, x, params), call(REFERENCES[op], op, x, params), **FP32_TOL
    )
    assert calls == [1]


# Expected under the interpreter, which computes the masked-out rows of a tile too: with eps = 0
# their rstd is 1/sqrt(0), then 0 * inf; and a saturated gate computes exp(|z|) = inf, whose
# limit, 0, is the right one.
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
def test_eps_extreme_inputs_and_constant_rows(tt, op):
    """Large eps, eps = 0, a saturated swish gate (|z| ~ 1e3), and a constant row.

    The absolute tolerances grow with the values (outputs ~5e2; dx ~1e3 for the constant row,
    whose rstd is 1/sqrt(eps)); the relative errors stay ~1e-7.
    """
    x, params, dy = make_inputs(op, (6, 100), seed=7)
    assert_matches_fp32(triton_op(tt, op), op, x, params, dy, eps=0.75)
    assert_matches_fp32(triton_op(tt, op), op, x, params, dy, eps=0.0)
    big = tuple(100.0 * p for p in params)
    assert_matches_fp32(triton_op(tt, op), op, 50.0 * x, big, dy, tol={"atol": 1e-4, "rtol": 1e-5})
    x[2] = 3.0  # zero variance: the layer norms see only eps
    assert_matches_fp32(triton_op(tt, op), op, x, params, dy, tol={"atol": 1e-3, "rtol": 1e-5})


@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
def test_empty_inputs(tt, op):
    for shape in ((0, 40), (2, 0, 16)):
        x, params, dy = make_inputs(op, shape, seed=8)
        out, dx, *dparams = forward_backward(triton_op(tt, op), op, x, params, dy)
        assert out.shape == dx.shape == shape
        assert [p.shape for p in dparams] == [(shape[-1],)] * len(params)
        assert all(not p.any() for p in dparams)


@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
def test_backward_is_deterministic(tt, op):
    x, params, dy = make_inputs(op, (123, 40), seed=9)
    cfg = tt.NormConfig(block_n=4, num_warps=1, bwd_programs=7)
    first = forward_backward(triton_op(tt, op), op, x, params, dy, config=cfg)
    second = forward_backward(triton_op(tt, op), op, x, params, dy, config=cfg)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))


# --------------------------------------------------------------------------------------------
# TRITON, 16-bit: the flash-attention oracle
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("dtype", "param_dtype", "shape", "weighted"),
    [
        (torch.bfloat16, torch.bfloat16, (123, 100), True),
        (torch.bfloat16, torch.bfloat16, (2, 21, 512), False),
        (torch.bfloat16, torch.float32, (42, 40), True),
        (torch.float16, torch.float16, (6, 20), True),
    ],
    ids=["bf16", "bf16-plain-3d", "bf16-fp32-weights", "fp16"],
)
def test_low_precision_oracle(
    tt, assert_low_precision_oracle, op, dtype, param_dtype, shape, weighted
):
    x, params, dy = make_inputs(op, shape, weighted, dtype, param_dtype, seed=10)
    cfg = tt.NormConfig(block_n=8, num_warps=1, bwd_programs=3)
    assert_low_precision_oracle(triton_op(tt, op), op, x, params, dy, config=cfg)


# --------------------------------------------------------------------------------------------
# Errors and configuration of the TRITON kernel
# --------------------------------------------------------------------------------------------
@pytest.mark.triton
def test_triton_only_errors(tt):
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match=r"^layer_norm: .*float32, got x of dtype torch.float64"):
        layer_norm(x.double(), None, None, kernel="triton")
    with pytest.raises(TypeError, match=r"^rms_norm: .*float32, got weight of dtype torch.float64"):
        rms_norm(x, torch.ones(8, dtype=torch.float64), kernel="triton")
    wide = torch.empty(1, tt.MAX_D + 1)
    with pytest.raises(ValueError, match=r"^swish_layer_norm: .*at most 16384 features per row"):
        swish_layer_norm(wide, None, None, kernel="triton")
    with pytest.raises(ValueError, match=r"block_n must be a power of 2 >= 1, got 3"):
        tt.NormConfig(block_n=3, num_warps=1)
    with pytest.raises(ValueError, match=r"num_warps must be a power of 2 in \[1, 32\], got 64"):
        tt.NormConfig(block_n=1, num_warps=64)
    with pytest.raises(ValueError, match=r"bwd_programs must be >= 1 or None, got 0"):
        tt.NormConfig(block_n=1, num_warps=1, bwd_programs=0)


@pytest.mark.triton
def test_cpu_tensors_without_the_interpreter_are_refused(triton_backend):
    with triton_backend(interpret=False) as compiled:
        assert not compiled.INTERPRETED
        with pytest.raises(ValueError, match=r"^rms_norm: .*needs CUDA or ROCm tensors, got cpu"):
            rms_norm(torch.randn(2, 8), None, kernel=Kernel.TRITON)


@pytest.mark.triton
def test_default_configs(triton_backend):
    """GPU tiles of ~2048 elements, whole rows; one row per tile from 2048 features on."""
    with triton_backend(interpret=False) as compiled:
        expect = {20: (64, 8), 100: (16, 8), 512: (4, 8), 2048: (1, 8), 16384: (1, 16)}
        for d, (block_n, warps) in expect.items():
            cfg = compiled.default_norm_config(d)
            assert (cfg.block_n, cfg.num_warps, cfg.bwd_programs) == (block_n, warps, None)


# --------------------------------------------------------------------------------------------
# Compilation for a GPU target, without a GPU
# --------------------------------------------------------------------------------------------
# Argument types of the kernels' signatures (other arguments are i32).
SIGNATURE_TYPES = {
    **dict.fromkeys(("X", "Y", "DY", "DX", "W", "B", "Out"), "*bf16"),
    **dict.fromkeys(("Mean", "Rstd", "DW_partial", "DB_partial", "Partial"), "*fp32"),
    "eps": "fp32",
}


@pytest.mark.slow
@pytest.mark.triton
def test_kernels_compile_for_gpus(gpu_target, triton_backend):
    """The interpreter does not type-check like the compiler: compile the real thing, no GPU.

    Every kernel variant once, with its default launch shape for a width chosen so that both
    multi-row tiles (narrow rows) and the widest rows (16384, one row per tile) are compiled.
    """
    import triton

    with triton_backend(interpret=False) as compiled:
        variants = [
            (compiled._layer_norm_fwd_kernel, 100, dict(WEIGHTED=True, IS_SWISH=False)),
            (compiled._layer_norm_fwd_kernel, 16384, dict(WEIGHTED=True, IS_SWISH=True)),
            (compiled._layer_norm_bwd_kernel, 16384, dict(WEIGHTED=True, IS_SWISH=False)),
            (compiled._layer_norm_bwd_kernel, 512, dict(WEIGHTED=True, IS_SWISH=True)),
            (compiled._layer_norm_bwd_kernel, 20, dict(WEIGHTED=False, IS_SWISH=True)),
            (compiled._rms_norm_fwd_kernel, 40, dict(WEIGHTED=True)),
            (compiled._rms_norm_bwd_kernel, 16384, dict(WEIGHTED=True)),
        ]
        launches = []
        for kernel, d, flags in variants:
            cfg = compiled.default_norm_config(d)
            constants = dict(
                flags, BLOCK_N=cfg.block_n, BLOCK_D=triton.next_power_of_2(d), INTERPRET_BF16=False
            )
            launches.append((kernel, constants, cfg.num_warps))
        constants = dict(BLOCK_P=16, BLOCK_C=128, INTERPRET_BF16=False)
        launches.append((compiled._sum_partials_kernel, constants, 4))
        for kernel, constants, num_warps in launches:
            options = {"num_warps": num_warps}
            binary = gpu_target.compile(kernel, constants, options, types=SIGNATURE_TYPES)
            shared = binary.metadata.shared
            assert shared <= gpu_target.max_shared, (kernel.__name__, constants, shared)


# --------------------------------------------------------------------------------------------
# On a GPU: compiled kernels, default launch shapes
# --------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.triton
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_matches_reference(op, dtype, triton_backend, assert_low_precision_oracle):
    with triton_backend(interpret=False) as compiled:
        fn = triton_op(compiled, op)
        for shape in ((1, 20), (123, 100), (4097, 512), (3, 77, 1024), (300, 4096), (9, 16384)):
            for weighted in (True, False):
                x, params, dy = make_inputs(op, shape, weighted, dtype, seed=shape[0])
                x, dy = x.cuda(), dy.cuda()
                params = tuple(p.cuda() for p in params)
                if dtype == torch.float32:
                    tol = {"atol": 1e-4, "rtol": 1e-4}
                    assert_matches_fp32(fn, op, x, params, dy, tol=tol)
                else:
                    assert_low_precision_oracle(fn, op, x, params, dy)
                first = forward_backward(fn, op, x, params, dy)
                second = forward_backward(fn, op, x, params, dy)
                assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
