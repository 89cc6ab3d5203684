"""Bad arguments: both kernels raise the same error, naming the argument and the bad value."""

import re

import pytest
import torch

import hstu_ops
from hstu_ops import Kernel

KERNELS = [Kernel.PYTORCH, Kernel.NATIVE]

i64 = torch.int64


def _t(values, dtype=i64):
    return torch.tensor(values, dtype=dtype)


# (case id, callable taking kernel, exception type, regex that must appear in the message)
CASES = [
    (
        "cumsum_negative_length",
        lambda k: hstu_ops.complete_cumsum(_t([1, 2, -3, 4]), kernel=k),
        ValueError,
        r"complete_cumsum: lengths\[2\] = -3 is negative",
    ),
    (
        "cumsum_2d",
        lambda k: hstu_ops.complete_cumsum(_t([[1, 2]]), kernel=k),
        ValueError,
        r"lengths must be a 1-D tensor, got shape \[1, 2\]",
    ),
    (
        "cumsum_float",
        lambda k: hstu_ops.complete_cumsum(torch.tensor([1.0]), kernel=k),
        TypeError,
        r"lengths must have dtype int32 or int64",
    ),
    (
        "cumsum_int32_overflow",
        lambda k: hstu_ops.complete_cumsum(_t([2**30, 2**30, 5], torch.int32), kernel=k),
        ValueError,
        r"lengths overflows int32 at lengths\[1\].*use int64",
    ),
    (
        "concat_offsets_not_monotone",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(3), _t([0, 2, 1, 3]), torch.zeros(3), _t([0, 1, 2, 3]), kernel=k
        ),
        ValueError,
        r"offsets_a is not monotone: offsets_a\[2\] = 1 < offsets_a\[1\] = 2",
    ),
    (
        "concat_offsets_not_starting_at_zero",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(3), _t([0, 1, 3]), torch.zeros(3), _t([1, 2, 3]), kernel=k
        ),
        ValueError,
        r"offsets_b\[0\] = 1, expected 0",
    ),
    (
        "concat_offsets_last_mismatch",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(3), _t([0, 1, 3]), torch.zeros(6), _t([0, 2, 5]), kernel=k
        ),
        ValueError,
        r"offsets_b\[-1\] = 5 does not match values_b.shape\[0\] = 6",
    ),
    (
        "concat_batch_mismatch",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(3), _t([0, 1, 2, 3]), torch.zeros(3), _t([0, 1, 3]), kernel=k
        ),
        ValueError,
        r"offsets_a and offsets_b must have the same length .*got 4 and 3",
    ),
    (
        "concat_empty_offsets",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(0), _t([]), torch.zeros(0), _t([]), kernel=k
        ),
        ValueError,
        r"offsets_a must have at least one entry",
    ),
    (
        "concat_offsets_dtype_mismatch",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(1), _t([0, 1]), torch.zeros(1), _t([0, 1], torch.int32), kernel=k
        ),
        TypeError,
        r"offsets_a and offsets_b must have the same dtype",
    ),
    (
        "concat_offsets_float",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(1), torch.tensor([0.0, 1.0]), torch.zeros(1), _t([0, 1]), kernel=k
        ),
        TypeError,
        r"offsets_a must have dtype int32 or int64",
    ),
    (
        "concat_values_dtype_mismatch",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(1), _t([0, 1]), torch.zeros(1, dtype=torch.float16), _t([0, 1]), kernel=k
        ),
        TypeError,
        r"values_a and values_b must have the same dtype",
    ),
    (
        "concat_row_shape_mismatch",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.zeros(1, 3), _t([0, 1]), torch.zeros(1, 4), _t([0, 1]), kernel=k
        ),
        ValueError,
        r"values_a and values_b must agree beyond the jagged dimension, got shapes "
        r"\[1, 3\] and \[1, 4\]",
    ),
    (
        "concat_scalar_values",
        lambda k: hstu_ops.concat_1d_jagged(
            torch.tensor(1.0), _t([0, 1]), torch.zeros(1), _t([0, 1]), kernel=k
        ),
        ValueError,
        r"values_a must have at least one dimension",
    ),
    (
        "concat_int32_rows_overflow",
        lambda k: hstu_ops.concat_1d_jagged(
            # 2**31 - 1 rows without memory: a stride-0 view of one element.
            torch.zeros(1, dtype=torch.int8).expand(2**31 - 1),
            _t([0, 2**31 - 1], torch.int32),
            torch.zeros(1, dtype=torch.int8),
            _t([0, 1], torch.int32),
            kernel=k,
        ),
        ValueError,
        r"the concatenated number of rows = 2147483648 does not fit.*use int64 offsets",
    ),
    (
        "split_takes_too_many_rows",
        lambda k: hstu_ops.split_1d_jagged(torch.zeros(5), _t([0, 3, 5]), _t([0, 1, 4]), kernel=k),
        ValueError,
        r"offsets_a takes 3 rows from sequence 1 but offsets gives it only 2 rows",
    ),
    (
        "split_batch_mismatch",
        lambda k: hstu_ops.split_1d_jagged(torch.zeros(5), _t([0, 3, 5]), _t([0, 1]), kernel=k),
        ValueError,
        r"offsets and offsets_a must have the same length .*got 3 and 2",
    ),
    (
        "split_offsets_a_not_monotone",
        lambda k: hstu_ops.split_1d_jagged(torch.zeros(5), _t([0, 3, 5]), _t([0, 2, 1]), kernel=k),
        ValueError,
        r"offsets_a is not monotone: offsets_a\[2\] = 1 < offsets_a\[1\] = 2",
    ),
    (
        "split_offsets_last_mismatch",
        lambda k: hstu_ops.split_1d_jagged(torch.zeros(4), _t([0, 3, 5]), _t([0, 1, 2]), kernel=k),
        ValueError,
        r"offsets\[-1\] = 5 does not match values.shape\[0\] = 4",
    ),
]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize(
    ("call", "exc", "pattern"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_arguments(kernel, call, exc, pattern):
    with pytest.raises(exc) as info:
        call(kernel)
    # The message names the argument and the bad value; the NATIVE kernel may append a C++
    # source location, so search rather than match the whole text.
    assert re.search(pattern, str(info.value)), str(info.value)


@pytest.mark.parametrize("call", [c[1] for c in CASES], ids=[c[0] for c in CASES])
def test_both_kernels_word_errors_identically(call):
    messages = []
    for kernel in KERNELS:
        with pytest.raises((ValueError, TypeError)) as info:
            call(kernel)
        messages.append((type(info.value), str(info.value)))
    assert messages[0] == messages[1]
