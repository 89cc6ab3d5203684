"""The tile search spaces of the Triton kernels, as data a GPU benchmark sweeps.

For each op family, :func:`candidates` lists named configurations of our launchers around the
default one (the family's ``default_*`` function, which holds the pinned choice per chip):
variants that change one kernel's tiles, warps, pipeline depth or work split at a time, so that
a sweep recompiles one kernel per variant and its winner says which knob moved the time. The
spaces follow what the MLPerf reference's autotuner searches for the same ops (its public
configuration lists: query tiles of 32 to 128 by key tiles of 32 to 128 with 4 or 8 warps and 2
to 4 stages for the attention; 1 to 8 rows per program for its norms; 32 to 128 rows per step
for its positional-embedding backward; 64 to 256 square tiles for its matmul), restricted to
what our kernels take. ``benchmarks/bench_side_by_side.py --sweep`` times them on a GPU and
reports each family's fastest; a winner is adopted by changing the family's ``default_*``
function (a pin for that chip), after it has been timed on that chip.

Each family's configuration class lives in its Triton module; ``module`` below is that module
as :func:`hstu_ops._triton.load_triton_module` returns it (its mode, interpreted or compiled,
is the caller's).
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

__all__ = ["FAMILY_MODULES", "attention_variants", "candidates"]

FAMILY_MODULES = {
    "attention": "triton_hstu_attention",
    "positional-embeddings": "triton_position",
    "norm-mul-dropout": "triton_hstu_compute",
    "layer-norm": "triton_norms",
    "addmm": "triton_addmm",
    "concat-2d": "triton_jagged",
}
"""The families with a search space, and the Triton module holding each one's configuration."""

_ATTENTION_KERNEL_TILES = {
    # (block_m, block_n, warps) per kernel: forward query x key tiles; dk/dv (a program per
    # key block of block_n rows, looping over query blocks of block_m); dq (a program per
    # query block of block_m rows, looping over key blocks of block_n).
    "fwd": [(128, 64, 4), (128, 128, 8), (64, 64, 4), (64, 128, 4), (128, 32, 4), (64, 32, 4)],
    "dkdv": [(32, 64, 4), (64, 64, 4), (64, 64, 8), (32, 128, 8), (64, 128, 8), (16, 64, 4)],
    "dq": [(128, 64, 8), (64, 32, 4), (128, 32, 8), (64, 128, 8), (32, 64, 4)],
}


def attention_variants(default) -> list[tuple[str, object]]:
    """The attention's ``BlockConfig`` ``default``, then variants of one kernel each (the
    others as the default): (what changed, config) pairs."""
    variants = [("default", default)]
    for stages in (1, 3, 4):
        variants.append((f"num_stages {stages}", dataclasses.replace(default, num_stages=stages)))
    for kernel, shapes in _ATTENTION_KERNEL_TILES.items():
        for m, n, warps in shapes:
            change = {f"{kernel}_block_m": m, f"{kernel}_block_n": n, f"{kernel}_warps": warps}
            config = dataclasses.replace(default, **change)
            if config != default:
                variants.append((f"{kernel} {m}x{n} w{warps}", config))
    return variants


def _position_variants(module: ModuleType, dim: int) -> list[tuple[str, object]]:
    default = module.default_position_block_config(dim)
    changes = [
        {"rows_per_piece": 0},
        {"rows_per_piece": 32},
        {"rows_per_piece": 128},
        {"rows_per_piece": 256},
        {"rows_per_step": 8},
        {"rows_per_step": 32},
        {"block_n": 64},
        {"block_n": 16},
        {"block_d": 64},
        {"fwd_warps": 8, "bwd_warps": 8},
    ]
    return _one_change_each(default, changes)


def _norm_mul_dropout_variants(
    module: ModuleType, groups: int, group_width: int, device
) -> list[tuple[str, object]]:
    default = module.default_tile_config(groups, group_width, device)
    changes = [
        {"block_n": 1, "num_warps": 4},
        {"block_n": 2, "num_warps": 4},
        {"block_n": 4, "num_warps": 8},
        {"block_n": 8, "num_warps": 16},
        {"num_warps": max(1, default.num_warps // 2)},
        {"num_warps": min(32, default.num_warps * 2)},
        {"bwd_programs": max(1, default.bwd_programs // 2)},
        # The backward's programs each loop over row blocks (their weight-gradient partials
        # are per program): more of them keep more loads in flight, for a larger partial sum.
        {"bwd_programs": default.bwd_programs * 2},
        {"bwd_programs": default.bwd_programs * 4},
        {"bwd_programs": default.bwd_programs * 8},
    ]
    return _one_change_each(default, changes)


def _layer_norm_variants(module: ModuleType, dim: int) -> list[tuple[str, object]]:
    default = module.default_norm_config(dim)
    changes = [
        {"block_n": 1, "num_warps": 4},
        {"block_n": 2, "num_warps": 4},
        {"block_n": 4, "num_warps": 4},
        {"block_n": 8, "num_warps": 8},
        {"block_n": 16, "num_warps": 8},
        {"num_warps": max(1, default.num_warps // 2)},
        {"num_warps": min(32, default.num_warps * 2)},
    ]
    return _one_change_each(default, changes)


def _addmm_variants(module: ModuleType, device, dtype) -> list[tuple[str, object]]:
    # Under the interpreter (a CPU device) no chip is pinned: the generic entry.
    arch = module.device_arch(device) if device.type == "cuda" else "interpreter"
    default = module.pinned_config(arch, dtype)
    vendor = "amd" if arch.startswith("gfx") else "nvidia"
    variants = [("default", default)]
    for config in module.full_autotune_configs(vendor):
        if config != default:
            name = (
                f"{config.block_m}x{config.block_n}x{config.block_k} w{config.num_warps} "
                f"s{config.num_stages}" + (f" kpack{config.kpack}" if config.kpack else "")
            )
            variants.append((name, config))
    return variants


def _concat_variants(module: ModuleType, dim: int) -> list[tuple[str, object]]:
    default = module.default_rows_per_program(dim)
    rows = [r for r in (1, 2, 4, 8, 16, 32, 64) if r != default]
    return [("default", default)] + [(f"rows_per_program {r}", r) for r in rows]


def _one_change_each(default, changes: list[dict]) -> list[tuple[str, object]]:
    variants = [("default", default)]
    for change in changes:
        config = dataclasses.replace(default, **change)
        if config != default and all(config != c for _, c in variants):
            variants.append((" ".join(f"{k} {v}" for k, v in change.items()), config))
    return variants


def candidates(family: str, module: ModuleType, **shape) -> list[tuple[str, object]]:
    """(name, configuration) pairs of ``family``'s search space, the default first.

    ``shape``: what the family's defaults depend on: attention ``attn_dim``, ``hidden_dim``,
    ``dtype``; positional-embeddings, layer-norm and concat-2d ``dim``; norm-mul-dropout
    ``groups``, ``group_width``, ``device``; addmm ``device``, ``dtype``.
    """
    if family == "attention":
        default = module.default_block_config(
            shape["attn_dim"], shape["hidden_dim"], shape["dtype"]
        )
        return attention_variants(default)
    if family == "positional-embeddings":
        return _position_variants(module, shape["dim"])
    if family == "norm-mul-dropout":
        return _norm_mul_dropout_variants(
            module, shape["groups"], shape["group_width"], shape["device"]
        )
    if family == "layer-norm":
        return _layer_norm_variants(module, shape["dim"])
    if family == "addmm":
        return _addmm_variants(module, shape["device"], shape["dtype"])
    if family == "concat-2d":
        return _concat_variants(module, shape["dim"])
    raise ValueError(
        f"candidates: no search space for family {family!r}; have {list(FAMILY_MODULES)}"
    )
