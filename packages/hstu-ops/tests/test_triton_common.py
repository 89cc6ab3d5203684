"""hstu_ops.triton._common: the helpers the Triton kernel modules share, and its mode.

The jit helpers of ``_common`` are interpreted or compiled according to ``TRITON_INTERPRET`` at
its own import, so every kernel module must call the ``_common`` of its own mode. These tests
load each kernel module in both modes (the ``load_triton`` fixture of conftest.py) and check
that an interpreted and a compiled module never share a jit helper, that a kernel module refuses
to import against the helpers of the other mode, and that the one Philox both dropout kernels
draw from is Random123's.
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

from hstu_ops import TritonUnavailableError
from hstu_ops._triton import load_triton_module

COMMON = "hstu_ops.triton._common"
KERNEL_MODULES = [
    "hstu_ops.triton.triton_addmm",
    "hstu_ops.triton.triton_hstu_attention",
    "hstu_ops.triton.triton_hstu_compute",
    "hstu_ops.triton.triton_jagged",
    "hstu_ops.triton.triton_norms",
    "hstu_ops.triton.triton_position",
]


def _jit_functions(namespace) -> dict[str, object]:
    """The jit functions (kernels and helpers, either mode) among a namespace's values."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    kinds = (InterpretedFunction, JITFunction)
    return {name: f for name, f in vars(namespace).items() if isinstance(f, kinds)}


@pytest.mark.triton
def test_interpreted_and_compiled_modules_never_share_a_jit_helper(load_triton):
    from triton.runtime.interpreter import InterpretedFunction

    commons, helpers, bound = {}, {}, {True: set(), False: set()}
    for interpret in (True, False):
        for name in KERNEL_MODULES:
            with load_triton(name, interpret=interpret) as module:
                common = sys.modules[COMMON]
                assert module._common is common and common.INTERPRETED is interpret
                # One _common per mode, shared by every kernel module of that mode.
                assert commons.setdefault(interpret, common) is common
                functions = _jit_functions(module)
                for fname, f in functions.items():
                    assert isinstance(f, InterpretedFunction) is interpret, (name, fname)
                own = {id(f) for f in _jit_functions(common).values()}
                helpers[interpret] = own
                uses = {id(f) for f in functions.values()} & own
                assert uses, f"{name} calls no helper of {COMMON}"
                bound[interpret] |= uses
    assert commons[True] is not commons[False]
    assert not helpers[True] & helpers[False]
    assert not bound[True] & helpers[False] and not bound[False] & helpers[True]


@pytest.mark.triton
def test_kernel_module_refuses_the_helpers_of_the_other_mode(load_triton):
    position = "hstu_ops.triton.triton_position"
    with load_triton("hstu_ops.triton.triton_norms", interpret=True):
        # The interpreted _common is loaded; a kernel module imported compiled now would call
        # interpreted helpers from compiled kernels. (The fixture restores both on leaving.)
        os.environ.pop("TRITON_INTERPRET")
        sys.modules.pop(position, None)
        with pytest.raises(
            TritonUnavailableError,
            match=rf"{position} is imported compiled, but {COMMON}, whose jit helpers its "
            r"kernels call, was imported interpreted \(TRITON_INTERPRET=1\)",
        ):
            load_triton_module("add_timestamp_positional_embeddings", "triton_position")
        assert position not in sys.modules


@pytest.mark.triton
def test_modules_imported_inside_a_block_stay_in_its_mode(load_triton):
    """A kernel module that a dispatcher imports inside a block belongs to the block's mode: it
    is gone afterwards and comes back, the same object, in the next block of that mode."""
    norms = "hstu_ops.triton.triton_norms"
    import hstu_ops.triton as package

    before = {name: m for name, m in sys.modules.items() if name.startswith("hstu_ops.triton.")}
    attrs = dict(vars(package))
    with load_triton("hstu_ops.triton.triton_addmm", interpret=False):
        imported = load_triton_module("layer_norm", "triton_norms")
        assert imported.INTERPRETED is False
        assert imported._common is sys.modules[COMMON]
    assert {n: m for n, m in sys.modules.items() if n.startswith("hstu_ops.triton.")} == before
    assert dict(vars(package)) == attrs
    with load_triton(norms, interpret=False) as module:
        assert module is imported
        assert package.triton_norms is module
    with load_triton(norms, interpret=True) as module:
        assert module is not imported


@pytest.mark.triton
def test_row_sums_use_the_library_combine_only_under_the_interpreter(load_triton):
    """Compiled kernels call nothing of triton's library; the interpreter's fast sum is used."""
    import triton.language as tl

    with load_triton("hstu_ops.triton.triton_norms", interpret=True) as interpreted:
        assert interpreted._common.SUM_COMBINE is tl.standard._sum_combine
    with load_triton("hstu_ops.triton.triton_norms", interpret=False) as compiled:
        assert compiled._common.SUM_COMBINE is compiled._common.add


# --------------------------------------------------------------------------------------------
# Philox
# --------------------------------------------------------------------------------------------
def test_python_philox_matches_random123_known_answers(philox4x32, philox_known_answers):
    for counter, key, expected in philox_known_answers:
        assert philox4x32(counter, key) == expected


@pytest.mark.triton
def test_both_dropout_kernels_draw_from_the_one_philox(load_triton):
    with load_triton("hstu_ops.triton.triton_hstu_attention", interpret=True) as attention:
        shared = attention._common.philox4x32_10
        assert attention.philox4x32_10 is shared
    with load_triton("hstu_ops.triton.triton_hstu_compute", interpret=True) as compute:
        assert compute._philox4x32_10 is shared


@pytest.mark.triton
def test_hstu_compute_mask_is_philox_of_element_and_stream(load_triton, philox4x32):
    """Element (row, col) of a part is kept iff the top 24 bits of the first word of
    Philox4x32-10(counter (low, high word of row * W + col, stream, 0), key (seed low, seed
    high)), as a fraction of 2**24, are >= dropout_ratio."""
    seed, rows, width, p = 0x0123456789ABCDEF, 3, 5, 0.4
    key = (seed & 0xFFFFFFFF, seed >> 32)
    with load_triton("hstu_ops.triton.triton_hstu_compute", interpret=True) as compute:
        for part, stream in compute.DROPOUT_STREAMS.items():
            mask = compute.dropout_keep_mask(seed, rows, width, part, p)
            for row in range(rows):
                for col in range(width):
                    elem = row * width + col
                    word = philox4x32((elem & 0xFFFFFFFF, elem >> 32, stream, 0), key)[0]
                    assert bool(mask[row, col]) == ((word >> 8) / 2**24 >= p), (part, row, col)


@pytest.mark.triton
def test_seed_words_are_the_signed_int32_bits(load_triton):
    with load_triton("hstu_ops.triton.triton_hstu_compute", interpret=True) as compute:
        seed_words = compute._common.seed_words
        assert seed_words(0xFEDCBA9876543210) == (0x76543210, 0xFEDCBA98 - 2**32)
        assert seed_words(2**31) == (-(2**31), 0)
        words = torch.tensor(seed_words(0xFFFFFFFF_00000001), dtype=torch.int32)
        assert words.tolist() == [1, -1]
