"""Jagged primitives: NATIVE against PYTORCH against a plain per-sequence loop."""

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import hstu_ops
from hstu_ops import Kernel

KERNELS = [Kernel.PYTORCH, Kernel.NATIVE]
VALUE_DTYPES = [torch.int32, torch.int64, torch.float32, torch.bfloat16, torch.float16]
OFFSET_DTYPES = [torch.int32, torch.int64]
BATCHES = [0, 1, 6, 42, 123]
ROW_SHAPES = [(), (3,), (2, 5)]


def _lengths(gen, batch, max_len=7, dtype=torch.int64):
    lengths = torch.randint(0, max_len + 1, (batch,), generator=gen)
    # Plenty of empty sequences, including runs of them.
    lengths[torch.rand(batch, generator=gen) < 0.3] = 0
    return lengths.to(dtype)


def _offsets(lengths):
    out = [0]
    for n in lengths.tolist():
        out.append(out[-1] + n)
    return torch.tensor(out, dtype=lengths.dtype)


def _values(gen, rows, row_shape, dtype):
    if dtype.is_floating_point:
        return torch.randn((rows, *row_shape), generator=gen).to(dtype)
    return torch.randint(-1000, 1000, (rows, *row_shape), generator=gen, dtype=dtype)


def _jagged(gen, batch, row_shape, dtype, offset_dtype, max_len=7):
    lengths = _lengths(gen, batch, max_len, offset_dtype)
    offsets = _offsets(lengths)
    return _values(gen, int(offsets[-1]), row_shape, dtype), offsets


def _loop_concat(a, oa, b, ob):
    """Oracle: concatenate sequence by sequence with slicing."""
    parts, offsets = [], [0]
    for i in range(oa.numel() - 1):
        sa = a[int(oa[i]) : int(oa[i + 1])]
        sb = b[int(ob[i]) : int(ob[i + 1])]
        parts += [sa, sb]
        offsets.append(offsets[-1] + sa.shape[0] + sb.shape[0])
    values = torch.cat(parts) if parts else a[:0]
    return values, torch.tensor(offsets, dtype=oa.dtype)


# --------------------------------------------------------------------------------------------
# complete_cumsum
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", OFFSET_DTYPES)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("kernel", KERNELS)
def test_complete_cumsum(kernel, batch, dtype):
    gen = torch.Generator().manual_seed(batch)
    lengths = _lengths(gen, batch, max_len=50, dtype=dtype)
    out = hstu_ops.complete_cumsum(lengths, kernel=kernel)
    assert out.dtype == dtype
    assert out.shape == (batch + 1,)
    assert torch.equal(out, _offsets(lengths))


@pytest.mark.parametrize("dtype", OFFSET_DTYPES)
def test_complete_cumsum_large_native_matches_pytorch(dtype):
    # Long enough for the multi-threaded scan of the CPU kernel.
    gen = torch.Generator().manual_seed(7)
    lengths = torch.randint(0, 100, (300_001,), generator=gen).to(dtype)
    native = hstu_ops.complete_cumsum(lengths, kernel=Kernel.NATIVE)
    reference = hstu_ops.complete_cumsum(lengths, kernel=Kernel.PYTORCH)
    assert torch.equal(native, reference)
    expected = np.concatenate([[0], np.cumsum(lengths.numpy().astype(np.int64))])
    np.testing.assert_array_equal(native.numpy(), expected)


@pytest.mark.parametrize("kernel", KERNELS)
def test_complete_cumsum_non_contiguous(kernel):
    lengths = torch.arange(10)[::2]  # 0 2 4 6 8, stride 2
    assert hstu_ops.complete_cumsum(lengths, kernel=kernel).tolist() == [0, 0, 2, 6, 12, 20]


# --------------------------------------------------------------------------------------------
# concat / split: values
# --------------------------------------------------------------------------------------------
CASES = list(itertools.product(BATCHES, VALUE_DTYPES, OFFSET_DTYPES))


@pytest.mark.parametrize("row_shape", ROW_SHAPES, ids=str)
@pytest.mark.parametrize(("batch", "dtype", "offset_dtype"), CASES, ids=str)
def test_concat_and_split_match_reference(batch, dtype, offset_dtype, row_shape):
    gen = torch.Generator().manual_seed(1000 + batch)
    a, oa = _jagged(gen, batch, row_shape, dtype, offset_dtype)
    b, ob = _jagged(gen, batch, row_shape, dtype, offset_dtype)
    expected_values, expected_offsets = _loop_concat(a, oa, b, ob)

    for kernel in KERNELS:
        values, offsets = hstu_ops.concat_1d_jagged(a, oa, b, ob, kernel=kernel)
        assert values.dtype == dtype and offsets.dtype == offset_dtype, kernel
        assert torch.equal(values, expected_values), kernel
        assert torch.equal(offsets, expected_offsets), kernel

        back_a, back_b, back_ob = hstu_ops.split_1d_jagged(values, offsets, oa, kernel=kernel)
        assert torch.equal(back_a, a), kernel
        assert torch.equal(back_b, b), kernel
        assert torch.equal(back_ob, ob), kernel


@pytest.mark.parametrize("kernel", KERNELS)
def test_split_then_concat_is_identity(kernel):
    gen = torch.Generator().manual_seed(3)
    values, offsets = _jagged(gen, 42, (4,), torch.float32, torch.int64, max_len=12)
    lengths = offsets[1:] - offsets[:-1]
    # Any per-sequence split point between 0 and the length.
    lengths_a = (torch.rand(42, generator=gen) * (lengths + 1)).floor().to(torch.int64)
    offsets_a = _offsets(lengths_a)
    a, b, offsets_b = hstu_ops.split_1d_jagged(values, offsets, offsets_a, kernel=kernel)
    assert torch.equal(offsets_b, offsets - offsets_a)
    again, again_offsets = hstu_ops.concat_1d_jagged(a, offsets_a, b, offsets_b, kernel=kernel)
    assert torch.equal(again, values)
    assert torch.equal(again_offsets, offsets)


def test_concat_known_values():
    a = torch.tensor([1, 2, 3, 4])
    oa = torch.tensor([0, 2, 2, 4])
    b = torch.tensor([10, 20, 30])
    ob = torch.tensor([0, 1, 3, 3])
    for kernel in KERNELS:
        values, offsets = hstu_ops.concat_1d_jagged(a, oa, b, ob, kernel=kernel)
        assert values.tolist() == [1, 2, 10, 20, 30, 3, 4], kernel
        assert offsets.tolist() == [0, 3, 5, 7], kernel


@pytest.mark.parametrize("kernel", KERNELS)
def test_concat_large_rows_multithreaded(kernel):
    # Enough bytes for the OpenMP path of the CPU kernel.
    gen = torch.Generator().manual_seed(11)
    a, oa = _jagged(gen, 300, (64,), torch.float32, torch.int64, max_len=60)
    b, ob = _jagged(gen, 300, (64,), torch.float32, torch.int64, max_len=5)
    values, offsets = hstu_ops.concat_1d_jagged(a, oa, b, ob, kernel=kernel)
    expected_values, expected_offsets = _loop_concat(a, oa, b, ob)
    assert torch.equal(values, expected_values)
    assert torch.equal(offsets, expected_offsets)
    back_a, back_b, _ = hstu_ops.split_1d_jagged(values, offsets, oa, kernel=kernel)
    assert torch.equal(back_a, a) and torch.equal(back_b, b)


@pytest.mark.parametrize("kernel", KERNELS)
def test_non_contiguous_and_offset_inputs(kernel):
    gen = torch.Generator().manual_seed(5)
    base = torch.randn(6, 9, generator=gen, dtype=torch.float64).to(torch.float16)
    a = base.t()[:, 1:4]  # [9, 3], non-contiguous
    b = base[1:, 1:].reshape(-1)[1:].view(-1, 1)  # storage offset: 2-byte aligned only
    oa = torch.tensor([0, 4, 4, 9])
    ob = torch.tensor([0, 10, 20, b.shape[0]])
    b3 = b.expand(-1, 3)
    values, offsets = hstu_ops.concat_1d_jagged(a, oa, b3, ob, kernel=kernel)
    expected_values, expected_offsets = _loop_concat(a.contiguous(), oa, b3.contiguous(), ob)
    assert torch.equal(values, expected_values)
    assert torch.equal(offsets, expected_offsets)


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_concat_gradient_native_matches_pytorch(dtype):
    gen = torch.Generator().manual_seed(21)
    a, oa = _jagged(gen, 6, (3,), dtype, torch.int64)
    b, ob = _jagged(gen, 6, (3,), dtype, torch.int64)
    grads = {}
    for kernel in KERNELS:
        ra = a.clone().requires_grad_()
        rb = b.clone().requires_grad_()
        values, _ = hstu_ops.concat_1d_jagged(ra, oa, rb, ob, kernel=kernel)
        weight = torch.arange(values.numel(), dtype=torch.float32).view_as(values).to(dtype)
        (values * weight).sum().backward()
        grads[kernel] = (ra.grad, rb.grad)
        # The gradient of a concat is the split of the output gradient.
        out_offsets = oa + ob
        expected_a, expected_b, _ = hstu_ops.split_1d_jagged(weight, out_offsets, oa)
        assert torch.equal(ra.grad, expected_a), kernel
        assert torch.equal(rb.grad, expected_b), kernel
    assert torch.equal(grads[Kernel.NATIVE][0], grads[Kernel.PYTORCH][0])
    assert torch.equal(grads[Kernel.NATIVE][1], grads[Kernel.PYTORCH][1])


@pytest.mark.parametrize("use", ["both", "a_only", "b_only"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_split_gradient(kernel, use):
    gen = torch.Generator().manual_seed(22)
    values, offsets = _jagged(gen, 42, (2,), torch.float32, torch.int32)
    offsets_a = _offsets((offsets[1:] - offsets[:-1]) // 2)
    x = values.clone().requires_grad_()
    a, b, offsets_b = hstu_ops.split_1d_jagged(x, offsets, offsets_a, kernel=kernel)
    ga = torch.randn(a.shape, generator=gen)
    gb = torch.randn(b.shape, generator=gen)
    loss = {"both": (a * ga).sum() + (b * gb).sum(), "a_only": (a * ga).sum()}.get(
        use, (b * gb).sum()
    )
    loss.backward()
    if use == "a_only":
        gb = torch.zeros_like(gb)
    if use == "b_only":
        ga = torch.zeros_like(ga)
    expected, _ = _loop_concat(ga, offsets_a, gb, offsets_b)
    assert torch.equal(x.grad, expected)


@pytest.mark.parametrize("kernel", KERNELS)
def test_gradcheck_concat_split_float64(kernel):
    gen = torch.Generator().manual_seed(23)
    a, oa = _jagged(gen, 4, (2,), torch.float64, torch.int64, max_len=3)
    b, ob = _jagged(gen, 4, (2,), torch.float64, torch.int64, max_len=3)
    a.requires_grad_()
    b.requires_grad_()

    def concat(x, y):
        return hstu_ops.concat_1d_jagged(x, oa, y, ob, kernel=kernel)[0]

    def roundtrip(x, y):
        # split(concat(.)) then a non-linear use of both halves, so both backward formulas run
        values = concat(x, y)
        pa, pb, _ = hstu_ops.split_1d_jagged(values * values, oa + ob, oa, kernel=kernel)
        return pa.sum() + (pb * 3).sum()

    assert torch.autograd.gradcheck(concat, (a, b))
    assert torch.autograd.gradcheck(roundtrip, (a, b))
    assert torch.autograd.gradgradcheck(concat, (a, b))


def _opcheck_cases():
    gen = torch.Generator().manual_seed(24)
    a, oa = _jagged(gen, 5, (3,), torch.float32, torch.int64)
    b, ob = _jagged(gen, 5, (3,), torch.float32, torch.int64)
    ops = torch.ops.hstu_ops
    values, offsets = ops.concat_1d_jagged(a, oa, b, ob)
    return [
        (ops.complete_cumsum, (oa[1:] - oa[:-1],)),
        (ops.concat_1d_jagged, (a.requires_grad_(), oa, b, ob)),
        (ops.split_1d_jagged, (values.requires_grad_(), offsets, oa)),
    ]


def test_native_ops_pass_torch_library_opcheck():
    # Autograd registration and fake (meta) kernels of the C++ ops.
    for op, args in _opcheck_cases():
        torch.library.opcheck(
            op, args, test_utils=("test_autograd_registration", "test_faketensor")
        )


@pytest.mark.slow
def test_native_ops_pass_torch_library_opcheck_schema_and_aot_dispatch():
    # Schema checks and tracing by AOTAutograd with dynamic shapes (torch.compile's path).
    for op, args in _opcheck_cases():
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_aot_dispatch_dynamic"))


def test_native_cumsum_with_fewer_threads_than_asked():
    """OpenMP may run a smaller team than torch's thread count; every chunk must still be done."""
    script = (
        "import torch, hstu_ops\n"
        "torch.set_num_threads(4)\n"
        "lengths = torch.randint(0, 5, (200_000,), generator=torch.Generator().manual_seed(0))\n"
        "out = hstu_ops.complete_cumsum(lengths, kernel='native')\n"
        "expected = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])\n"
        "assert torch.equal(out, expected), (out[-3:], expected[-3:])\n"
    )
    env = {**os.environ, "OMP_THREAD_LIMIT": "2", "OMP_DYNAMIC": "true"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
