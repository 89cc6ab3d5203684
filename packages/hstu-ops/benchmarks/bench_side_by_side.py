"""Every hstu-ops op family beside the MLPerf reference's own Triton kernels and PyTorch.

On one GPU, from the workspace root:

    uv run --no-sync python packages/hstu-ops/benchmarks/bench_side_by_side.py \\
        --reference CHECKOUT --sweep --out DIR

CHECKOUT is the ``recommendation_v4`` directory of the MLPerf training repository; its Triton
kernels are imported from there at run time (never copied). For each op family, at 2,048 and
4,096 tokens per sequence (the recipe's ``max_seq_len`` and the yambda-5b length; 8 contextual
tokens and one target each), 4 heads of 128, width 512, bfloat16, at batch 32 and at the
largest batch (doubling from 64 up to ``--max-batch``) at which our Triton kernel still runs,
the script first checks that our kernel, PyTorch's (the hstu_ops reference) and the
reference's agree on the same inputs (output and input gradients), then times each of them
(forward + backward, except the ``-fwd`` families) on those inputs, and gives every row the
fraction of the chip's published peak it reaches: dense bfloat16 TFLOP/s for the matrix-bound
families (attention, compute-output, addmm), memory bandwidth for the others, from the least
traffic the op needs (every input read once, every output written once; gathered table rows
and parameters left out). The chip is named by ``torch.cuda.get_device_name`` and looked up in
``PEAKS`` (vendor datasheets, named per row); a chip not there gets no fraction.

``--sweep`` then times our kernels' tile search spaces (:mod:`hstu_ops.triton.tuning`) at batch
32 and 4,096 tokens and names each family's fastest configuration. Rows come first and the
sweep takes what is left of ``--budget`` seconds (default 330: the whole script fits a 6-minute
slot); what the budget did not reach is listed as not run.

Writes ``DIR/side_by_side.json`` (the header, the chip and its peaks, every row, the sweep) and
``DIR/side_by_side.md`` (the table), each written aside and renamed into place; DIR may exist
but must not hold those two files, unless ``--overwrite``. Exit status 1 when a kernel failed
or disagreed (running out of memory is a note, not a failure); 2 for bad arguments.

On the CPU (what CI runs, so that the script cannot rot): ``--tiny`` runs every family at tiny
shapes in Triton's interpreter (``TRITON_INTERPRET=1``, set by ``--tiny`` when no GPU is
visible). The reference's kernels run there too, with one configuration each and plain
arithmetic for the GPU-only fast-math calls; where the interpreter cannot run one of them, its
row says why. Interpreted figures mean nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# (pattern over torch.cuda.get_device_name, chip, dense bf16 TFLOP/s, memory GB/s, source).
# The most specific patterns first: "H100 NVL" and "H100 PCIe" before the SXM's plain name.
PEAKS = (
    (r"H100.*NVL", "H100 NVL", 835.0, 3900.0, "NVIDIA H100 datasheet (NVL column)"),
    (r"H100.*PCIe", "H100 PCIe", 756.0, 2000.0, "NVIDIA H100 datasheet (PCIe column)"),
    (r"H100", "H100 SXM", 989.4, 3350.0, "NVIDIA H100 datasheet (SXM column)"),
    (r"H200.*NVL", "H200 NVL", 835.0, 4800.0, "NVIDIA H200 datasheet (NVL column)"),
    (r"H200|GH200", "H200 SXM", 989.4, 4800.0, "NVIDIA H200 datasheet (SXM column)"),
    (r"B200", "B200", 2250.0, 8000.0, "NVIDIA HGX B200 datasheet (per GPU, dense)"),
    (r"A100.*PCIe", "A100 PCIe 80GB", 312.0, 1935.0, "NVIDIA A100 datasheet (PCIe 80GB)"),
    (r"A100", "A100 SXM 80GB", 312.0, 2039.0, "NVIDIA A100 datasheet (SXM 80GB)"),
    (r"MI300X", "MI300X", 1307.4, 5300.0, "AMD Instinct MI300X datasheet"),
    (r"MI325X", "MI325X", 1307.4, 6000.0, "AMD Instinct MI325X datasheet"),
    (r"MI355X", "MI355X", 2516.6, 8000.0, "AMD Instinct MI355X datasheet"),
    (r"MI350X", "MI350X", 2306.9, 8000.0, "AMD Instinct MI350X datasheet"),
)
"""Published peaks: dense (no sparsity) bfloat16 tensor-core TFLOP/s and memory GB/s."""

FAMILIES = (
    "attention-fwd",
    "attention",
    "compute-output",
    "norm-mul-dropout-fwd",
    "norm-mul-dropout",
    "layer-norm",
    "addmm",
    "positional-embeddings",
    "concat-2d",
    "split-2d",
)
MATRIX_BOUND = ("attention-fwd", "attention", "compute-output", "addmm")
"""Families whose peak fraction is of the TFLOP/s; the others' is of the memory bandwidth."""
KERNELS = ("triton", "pytorch", "reference")
REFERENCE_MODULES = {
    "attention": "triton_hstu_attention",
    "compute-output": "triton_hstu_linear",
    "norm-mul-dropout": "triton_hstu_linear",
    "layer-norm": "triton_layer_norm",
    "addmm": "triton_addmm",
    "positional-embeddings": "triton_position",
    "concat-2d": "triton_jagged",
    "split-2d": "triton_jagged",
}
"""The reference's module (under generative_recommenders.ops.triton) of each family."""
REFERENCE_PACKAGE = "generative_recommenders.ops.triton"
SWEEP_FAMILIES = {
    "attention": "attention",
    "positional-embeddings": "positional-embeddings",
    "norm-mul-dropout": "norm-mul-dropout",
    "layer-norm": "layer-norm",
    "concat-2d": "concat-2d",
    "addmm": "addmm",
}
"""Bench family -> its search space in hstu_ops.triton.tuning, in the sweep's order (addmm's
72 configurations last: the budget cuts there)."""
AGREEMENT_TOLERANCE = 2e-2
"""Largest max|kernel - pytorch| / max|pytorch| accepted per output and input gradient in
bfloat16 (every kernel accumulates in float32; they differ by the rounding of what is stored
and the order of the sums). Float32 (--tiny) cases must agree to 1e-4."""
FP32_TOLERANCE = 1e-4
INTERPRETED_NOTE = (
    "under Triton's interpreter, which does not run every reference kernel as a GPU does"
)


@dataclass(frozen=True)
class Shape:
    heads: int = 4
    attn_dim: int = 128
    hidden_dim: int = 128
    width: int = 512
    contextual: int = 8
    targets: int = 1
    position_rows: int = 8192
    time_rows: int = 2049
    dropout: float = 0.1
    dtype: str = "bfloat16"


TINY = Shape(
    heads=2, attn_dim=16, hidden_dim=16, width=32, contextual=2, targets=1, position_rows=64,
    time_rows=33, dropout=0.1, dtype="float32",
)  # fmt: skip


@dataclass
class Row:
    family: str
    kernel: str
    batch: int
    tokens: int
    ms: float | None = None
    work: float | None = None
    """FLOPs (matrix-bound families) or bytes (the others) of one call."""
    rate: float | None = None
    """TFLOP/s or GB/s."""
    peak_fraction: float | None = None
    vs_pytorch: float | None = None
    vs_reference: float | None = None
    peak_mib: float | None = None
    note: str = ""
    failed: bool = False


@dataclass
class Record:
    header: dict
    rows: list[Row] = field(default_factory=list)
    largest_batch: dict = field(default_factory=dict)
    sweep: dict = field(default_factory=dict)
    backward_over_forward: dict = field(default_factory=dict)
    """"<family> <kernel> B=<batch> N=<tokens>" -> (forward + backward ms - forward ms) /
    forward ms, for the families timed both ways (the goal for norm-mul-dropout: <= 1.5)."""


FORWARD_PAIRS = (("attention-fwd", "attention"), ("norm-mul-dropout-fwd", "norm-mul-dropout"))


def backward_over_forward(rows: list[Row]) -> dict[str, float]:
    times = {(r.family, r.kernel, r.batch, r.tokens): r.ms for r in rows if r.ms}
    ratios = {}
    for (family, kernel, batch, tokens), forward in times.items():
        for fwd, both in FORWARD_PAIRS:
            total = times.get((both, kernel, batch, tokens))
            if family == fwd and total:
                ratios[f"{both} {kernel} B={batch} N={tokens}"] = (total - forward) / forward
    return ratios


# ------------------------------------------------------------------------------------------
# arguments
# ------------------------------------------------------------------------------------------
def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", type=Path, metavar="CHECKOUT", help="recommendation_v4 dir")
    p.add_argument("--out", type=Path, required=True, help="folder of the JSON and the table")
    p.add_argument("--overwrite", action="store_true", help="replace earlier results in --out")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (CPU CI, interpreter)")
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    p.add_argument("--tokens", type=int, nargs="+", help="tokens per sequence (4096 2048)")
    p.add_argument("--batch", type=int, default=None, help="the first batch (32; tiny 2)")
    p.add_argument("--max-batch", type=int, default=1024, help="largest batch searched")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs (2; tiny 1)")
    p.add_argument("--iters", type=int, default=None, help="timed runs, median kept (5; tiny 1)")
    p.add_argument("--sweep", action="store_true", help="time the tile search spaces")
    p.add_argument("--sweep-variants", type=int, default=None, help="at most this many each")
    p.add_argument("--budget", type=float, default=330.0, help="seconds for rows and sweep")
    args = p.parse_args(argv)
    for name in ("batch", "max_batch", "warmup", "iters", "sweep_variants"):
        value = getattr(args, name)
        least = 0 if name == "warmup" else 1
        if value is not None and value < least:
            p.error(f"--{name.replace('_', '-')} must be >= {least}, got {value}")
    if args.tokens and min(args.tokens) < 4:
        p.error(f"--tokens must be >= 4 each, got {args.tokens}")
    if not args.budget > 0:
        p.error(f"--budget must be > 0 seconds, got {args.budget}")
    if args.reference is not None:
        package = args.reference.joinpath(*REFERENCE_PACKAGE.split("."))
        if not package.is_dir():
            p.error(
                f"--reference {args.reference}: no {'/'.join(REFERENCE_PACKAGE.split('.'))} "
                "in it; pass the recommendation_v4 directory of the MLPerf training repository"
            )
    if args.out.exists() and not args.out.is_dir():
        p.error(f"--out {args.out} exists and is not a folder")
    for path in outputs(args.out):
        if path.exists() and not args.overwrite:
            p.error(f"--out {args.out} already holds {path.name}; pass --overwrite to replace it")
    return args


def outputs(folder: Path) -> tuple[Path, Path]:
    return folder / "side_by_side.json", folder / "side_by_side.md"


# ------------------------------------------------------------------------------------------
# the chip
# ------------------------------------------------------------------------------------------
def chip_peak(device_name: str) -> dict | None:
    """The PEAKS entry of a device name, as a dict, or None for a chip not in the table."""
    for pattern, chip, tflops, gbps, source in PEAKS:
        if re.search(pattern, device_name):
            return {
                "chip": chip,
                "bf16_dense_tflops": tflops,
                "memory_gbps": gbps,
                "source": source,
            }
    return None


# ------------------------------------------------------------------------------------------
# the reference's kernels
# ------------------------------------------------------------------------------------------
def load_reference(checkout: Path, interpreted: bool) -> dict:
    """family -> the reference's Triton module (or the reason it could not be imported)."""
    root = checkout.expanduser().resolve()
    sys.path.insert(0, str(root))
    # Triton's compiler warns once per kernel and configuration about the reference's use of
    # `and`/`or` on tensors: hundreds of lines of its code, not ours.
    warnings.filterwarnings(
        "ignore", message="Logical operators 'and' and 'or'", module=re.escape(str(root))
    )
    modules: dict[str, object] = {}
    for family, name in REFERENCE_MODULES.items():
        try:
            module = importlib.import_module(f"{REFERENCE_PACKAGE}.{name}")
        except Exception as error:
            modules[family] = f"the reference's {name} does not import: {first_line(error)}"
            continue
        if not Path(module.__file__).resolve().is_relative_to(root):
            raise SystemExit(f"error: {module.__name__} was imported from {module.__file__}")
        if interpreted:
            adapt_to_interpreter(module)
        modules[family] = module
    return modules


def adapt_to_interpreter(module) -> None:
    """Makes the reference's kernels runnable by Triton's interpreter, which has no device to
    autotune on and no libdevice fast-math: each autotuned kernel keeps one configuration
    (the first that needs neither TMA descriptors nor warp specialisation), and the module's
    fast-math names become plain arithmetic. Only under the interpreter, whose figures mean
    nothing; on a GPU the kernels run as written."""
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    for value in vars(module).values():
        if isinstance(value, Autotuner) and len(value.configs) > 1:
            plain = [
                c for c in value.configs
                if not c.kwargs.get("USE_TLX", False) and c.pre_hook is None
            ]  # fmt: skip
            value.configs = (plain or value.configs)[:1]
    fast_math = {
        "fast_expf": lambda x: tl.exp(x),
        "fast_dividef": lambda x, y: x / y,
        "libdevice_rsqrt": lambda x: 1.0 / tl.sqrt(x),
    }
    for name, plain in fast_math.items():
        if hasattr(module, name):
            setattr(module, name, plain)


def reference_commit(checkout: Path) -> str | None:
    out = subprocess.run(
        ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return out.stdout.strip() or None if out.returncode == 0 else None


# ------------------------------------------------------------------------------------------
# the families: inputs, calls, work
# ------------------------------------------------------------------------------------------
@dataclass
class Case:
    """One family at one (batch, tokens): kernel -> a call returning the outputs to compare;
    the differentiable inputs; the work of one call."""

    calls: dict[str, Callable[[], object]]
    inputs: list
    work: float
    backward: bool
    skipped: dict[str, str] = field(default_factory=dict)


def build_case(family, batch, tokens, shape, device, reference, configs=None) -> Case:
    """``configs``: our Triton kernel's configuration (the sweep), None for its default."""
    import torch

    import hstu_ops
    from hstu_ops._triton import load_triton_module

    dtype = getattr(torch, shape.dtype)
    # Drawn on the device: a large batch's inputs (gigabytes) would take seconds on the host.
    gen = torch.Generator(device=device).manual_seed(batch * 7919 + tokens)
    total = batch * tokens
    h, dqk, dv, d = shape.heads, shape.attn_dim, shape.hidden_dim, shape.width
    size = torch.finfo(dtype).bits // 8

    def tensor(*dims, scale=1.0, grad=True):
        t = (torch.randn(*dims, generator=gen, device=device) * scale).to(dtype)
        return t.requires_grad_(grad)

    lengths = torch.full((batch,), tokens, dtype=torch.int64, device=device)
    offsets = hstu_ops.complete_cumsum(lengths)
    targets = torch.full((batch,), shape.targets, dtype=torch.int64, device=device)
    ref_family = family.removesuffix("-fwd")
    ref = reference.get(ref_family) if reference else None
    calls: dict[str, Callable] = {}
    skipped: dict[str, str] = {}
    if reference is None:
        skipped["reference"] = "no --reference checkout given"
    elif isinstance(ref, str):
        skipped["reference"] = ref
        ref = None

    def ours(module: str):
        return load_triton_module(family, module)

    if ref_family == "attention":
        q, k, v = tensor(total, h, dqk), tensor(total, h, dqk), tensor(total, h, dv)
        alpha = 1.0 / math.sqrt(dqk)
        attention = ours("triton_hstu_attention")
        calls["triton"] = lambda: attention.triton_hstu_mha(
            tokens, alpha, q, k, v, offsets, num_targets=targets, block_config=configs
        )
        calls["pytorch"] = lambda: hstu_ops.hstu_mha(
            tokens, alpha, q, k, v, offsets, num_targets=targets, kernel="pytorch"
        )
        if ref is not None:
            calls["reference"] = lambda: ref.triton_hstu_mha(
                tokens, alpha, q, k, v, offsets, num_targets=targets
            )
        history = tokens - shape.targets
        pairs = history * (history + 1) // 2 + shape.targets * (history + 1)
        forward = 2.0 * batch * pairs * h * (dqk + dv)
        # The backward recomputes q k^T and does four more products: 3.5 forwards in all.
        work = forward if family == "attention-fwd" else 3.5 * forward
        return Case(calls, [q, k, v], work, family == "attention", skipped)

    if ref_family in ("compute-output", "norm-mul-dropout"):
        wide = h * dv
        attn, u = tensor(total, wide), tensor(total, wide)
        norm_w, norm_b = tensor(wide), tensor(wide, scale=0.1)
        compute = ours("triton_hstu_compute")
        if ref_family == "norm-mul-dropout":
            calls["triton"] = lambda p=shape.dropout: compute.triton_norm_mul_dropout(
                attn, u, norm_w, norm_b, 1e-6, p, True, True, tile_config=configs
            )
            calls["pytorch"] = lambda p=shape.dropout: hstu_ops.pytorch.pytorch_norm_mul_dropout(
                attn, u, norm_w, norm_b, 1e-6, p, True, True
            )
            if ref is not None:
                calls["reference"] = lambda p=shape.dropout: ref.triton_norm_mul_dropout(
                    attn, u, norm_w, norm_b, 1e-6, p, True, concat_u=True, concat_x=True
                )
            traffic = (2 + 3) if family.endswith("-fwd") else (2 + 3) + (3 + 2 + 2)
            work = float(traffic * total * wide * size)
            return Case(calls, [attn, u], work, not family.endswith("-fwd"), skipped)
        x = tensor(total, d)
        out_w = tensor(3 * wide, d, scale=(3 * wide) ** -0.5)
        calls["triton"] = lambda p=shape.dropout: compute.triton_hstu_compute_output(
            attn, u, x, norm_w, norm_b, out_w, 1e-6, p, True, True, False, h, dv,
            tile_config=configs,
        )  # fmt: skip
        calls["pytorch"] = lambda p=shape.dropout: hstu_ops.hstu_compute_output(
            attn, u, x, norm_w, norm_b, 1e-6, out_w, h, dv, p, True, True, False,
            kernel="pytorch",
        )  # fmt: skip
        if ref is not None:
            calls["reference"] = lambda p=shape.dropout: ref.triton_hstu_compute_output(
                attn, u, x, norm_w, norm_b, out_w, 1e-6, p, True, concat_u=True,
                concat_x=True, num_heads=h, linear_dim=dv,
            )  # fmt: skip
        work = 3 * 2.0 * total * (3 * wide) * d  # the product, forward and its two gradients
        return Case(calls, [attn, u, x, out_w], work, True, skipped)

    if family == "layer-norm":
        x, w, b = tensor(total, d), tensor(d), tensor(d, scale=0.1)
        norms = ours("triton_norms")
        calls["triton"] = lambda: norms.triton_layer_norm(x, w, b, 1e-6, config=configs)
        calls["pytorch"] = lambda: hstu_ops.layer_norm(x, w, b, 1e-6, kernel="pytorch")
        if ref is not None:
            calls["reference"] = lambda: ref.triton_layer_norm(x, w, b, 1e-6)
        return Case(calls, [x, w, b], float(5 * total * d * size), True, skipped)

    if family == "addmm":
        bias, x, w = tensor(d, scale=0.1), tensor(total, d), tensor(d, d, scale=d**-0.5)
        mm = ours("triton_addmm")
        calls["triton"] = lambda: mm.triton_addmm(bias, x, w, config=configs)
        calls["pytorch"] = lambda: hstu_ops.addmm(bias, x, w, kernel="pytorch")
        if ref is not None:
            calls["reference"] = lambda: ref.triton_addmm(bias, x, w)
        return Case(calls, [bias, x, w], 3 * 2.0 * total * d * d, True, skipped)

    if family == "positional-embeddings":
        x = tensor(total, d)
        pos, ts = tensor(shape.position_rows, d), tensor(shape.time_rows, d)
        # Time-ordered events, 0 to 60 minutes apart: the query time is each sequence's last.
        gaps = torch.randint(0, 3600, (batch, tokens), generator=gen, device=device)
        stamps = (1_700_000_000 + gaps.cumsum(1)).reshape(-1)
        alpha = math.sqrt(d)
        position = ours("triton_position")
        args = (pos, ts, offsets, lengths, x, stamps, targets, False, "sqrt")
        calls["triton"] = lambda: position.triton_add_timestamp_positional_embeddings(
            alpha, tokens, shape.contextual, *args, block_config=configs
        )
        calls["pytorch"] = lambda: hstu_ops.add_timestamp_positional_embeddings(
            alpha, tokens, shape.contextual, *args, kernel="pytorch"
        )
        if ref is not None:  # its dispatcher scales by alpha before the kernel, as here
            calls["reference"] = lambda: ref.triton_add_timestamp_positional_embeddings(
                x * alpha, offsets, pos, ts, stamps, tokens, shape.contextual, lengths,
                targets, False, "sqrt",
            )  # fmt: skip
        return Case(calls, [x, pos, ts], float(4 * total * d * size), True, skipped)

    if family in ("concat-2d", "split-2d"):
        ctx, hist = shape.contextual, tokens - shape.contextual
        ctx_offsets = hstu_ops.complete_cumsum(torch.full_like(lengths, ctx))
        hist_offsets = hstu_ops.complete_cumsum(torch.full_like(lengths, hist))
        jagged = ours("triton_jagged")
        if family == "concat-2d":
            left, right = tensor(batch * ctx, d), tensor(batch * hist, d)
            both = (tokens, left, right, ctx, hist, ctx_offsets, hist_offsets)
            calls["triton"] = lambda: jagged.triton_concat_2D_jagged(
                *both, rows_per_program=configs
            )
            calls["pytorch"] = lambda: hstu_ops.concat_2D_jagged(*both, kernel="pytorch")
            if ref is not None:
                calls["reference"] = lambda: ref.triton_concat_2D_jagged(
                    tokens, left, right, ctx_offsets, hist_offsets
                )
            return Case(calls, [left, right], float(4 * total * d * size), True, skipped)
        values = tensor(total, d)
        sides = (batch * ctx, batch * hist, ctx, hist, ctx_offsets, hist_offsets)
        calls["triton"] = lambda: jagged.triton_split_2D_jagged(tokens, values, *sides)
        calls["pytorch"] = lambda: hstu_ops.split_2D_jagged(
            tokens, values, *sides, kernel="pytorch"
        )
        if ref is not None:
            calls["reference"] = lambda: ref.triton_split_2D_jagged(
                values, tokens, ctx_offsets, hist_offsets
            )
        return Case(calls, [values], float(4 * total * d * size), True, skipped)
    raise ValueError(f"unknown family {family!r}")


def as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def runner(case: Case, kernel: str) -> Callable[[], None]:
    """One timed call: the forward (without autograd for a forward-only family), then the
    input gradients for output gradients of ones (none accumulated into .grad)."""
    import torch

    call = case.calls[kernel]
    if not case.backward:

        def forward() -> None:
            with torch.no_grad():
                call()

        return forward

    def forward_backward() -> None:
        outs = as_tuple(call())
        torch.autograd.grad(outs, case.inputs, [torch.ones_like(o) for o in outs])

    return forward_backward


def agreement(case: Case, dropout_free: Case | None) -> dict[str, tuple[str, bool]]:
    """kernel -> (note, disagrees): each kernel's outputs and input gradients against the
    pytorch kernel's, on ``dropout_free`` (the same family without dropout) when given."""
    import torch

    case = dropout_free or case
    found = {}
    for kernel, call in case.calls.items():
        try:
            outs = as_tuple(call())
            grads = ()
            if case.backward:
                seed = torch.Generator(device=outs[0].device).manual_seed(1)
                cotangents = [
                    torch.randn(o.shape, generator=seed, device=o.device).to(o.dtype) for o in outs
                ]
                grads = torch.autograd.grad(outs, case.inputs, cotangents, allow_unused=True)
            found[kernel] = [o.detach().float() for o in outs] + [
                g.float() if g is not None else None for g in grads
            ]
        except Exception as error:
            if is_out_of_memory(error):  # a note (its timing will say so), not a failure
                found[kernel] = "agreement not checked: out of memory"
                continue
            found[kernel] = f"FAILED: {type(error).__name__}: {first_line(error)}"
    base = found.get("pytorch")
    tolerance = FP32_TOLERANCE if case.inputs[0].dtype == torch.float32 else AGREEMENT_TOLERANCE
    verdicts = {}
    for kernel, values in found.items():
        if isinstance(values, str) or kernel == "pytorch" or isinstance(base, str):
            failed = isinstance(values, str) and values.startswith("FAILED")
            verdicts[kernel] = (values if isinstance(values, str) else "", failed)
            continue
        worst = 0.0
        for ours, ref in zip(values, base, strict=True):
            if ours is None or ref is None:
                continue
            scale = ref.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
            worst = max(worst, ((ours - ref).abs().max() / scale).item())
        ok = worst <= tolerance  # also False for a NaN
        text = f"agrees with pytorch to {worst:.1e}" if ok else f"DIFFERS from pytorch: {worst:.1e}"
        verdicts[kernel] = (text, not ok)
    return verdicts


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------
def time_ms(run: Callable[[], None], device, warmup: int, iters: int) -> tuple[float, float | None]:
    """(median ms of ``iters`` runs after ``warmup``, peak MiB allocated while timed or None)."""
    import torch

    for _ in range(warmup):
        run()
    if device.type != "cuda":
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            run()
            times.append((time.perf_counter() - start) * 1e3)
        return statistics.median(times), None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), torch.cuda.max_memory_allocated(device) / 2**20


def is_out_of_memory(error: BaseException) -> bool:
    import torch

    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error).lower()


def release(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


def first_line(error: BaseException) -> str:
    return ((str(error).strip().splitlines() or [""])[0])[:200]


class Budget:
    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        return self.deadline - time.monotonic()


def bench_rows(
    family, batch, tokens, shape, device, reference, warmup, iters, peak, interpreted, checked_at
):
    """The rows of ``family`` at (batch, tokens): every kernel, after the agreement check (made
    at the batch ``checked_at`` only: the same kernels, and a large batch's check costs time)."""
    base = dict(family=family, batch=batch, tokens=tokens)
    try:
        case = build_case(family, batch, tokens, shape, device, reference)
        dropout_free = None
        if batch == checked_at and family.startswith(("compute-output", "norm-mul-dropout")):
            # The kernels draw their dropout masks from different random streams: the
            # agreement is checked without dropout, the timing with it.
            free = dataclasses.replace(shape, dropout=0.0)
            dropout_free = build_case(family, batch, tokens, free, device, reference)
        verdicts = {}
        if batch == checked_at:
            verdicts = agreement(case, dropout_free)
        del dropout_free
    except Exception as error:
        release(device)
        oom = is_out_of_memory(error)
        note = "out of memory for the inputs" if oom else f"FAILED: {first_line(error)}"
        return [Row(kernel=k, note=note, failed=not oom, **base) for k in KERNELS]
    rows = []
    for kernel in KERNELS:
        if kernel in case.skipped or kernel not in case.calls:
            why = case.skipped.get(kernel, "no such kernel")
            rows.append(Row(kernel=kernel, note=f"not run: {why}", **base))
            continue
        note, disagrees = verdicts.get(kernel, ("", False))
        if batch != checked_at and kernel != "pytorch":
            note = f"agreement checked at batch {checked_at}"
        if disagrees and kernel == "reference" and interpreted and "DIFFERS" in note:
            note, disagrees = f"{note} ({INTERPRETED_NOTE})", False
        if disagrees and kernel == "reference" and interpreted:
            # A reference kernel that needs a GPU's runtime (device queries in its launcher)
            # cannot run here: named, not a failure of the comparison.
            rows.append(Row(kernel=kernel, note=f"not run {INTERPRETED_NOTE}: {note}", **base))
            continue
        try:
            ms, mib = time_ms(runner(case, kernel), device, warmup, iters)
        except Exception as error:
            release(device)
            oom = is_out_of_memory(error)
            why = "out of memory" if oom else f"FAILED: {type(error).__name__}: {first_line(error)}"
            interpreted_only = kernel == "reference" and interpreted and not oom
            if interpreted_only:
                why = f"not run {INTERPRETED_NOTE}: {why.removeprefix('FAILED: ')}"
            rows.append(Row(kernel=kernel, note=why, failed=not (oom or interpreted_only), **base))
            continue
        rate_unit = 1e12 if family in MATRIX_BOUND else 1e9
        rate = case.work / (ms / 1e3) / rate_unit
        fraction = None
        if peak is not None:
            key = "bf16_dense_tflops" if family in MATRIX_BOUND else "memory_gbps"
            fraction = rate / peak[key]
        rows.append(
            Row(kernel=kernel, ms=ms, work=case.work, rate=rate, peak_fraction=fraction,
                peak_mib=mib, note=note, failed=disagrees, **base)
        )  # fmt: skip
    del case
    release(device)
    times = {r.kernel: r.ms for r in rows if r.ms}
    for row in rows:
        if row.ms:
            row.vs_pytorch = times["pytorch"] / row.ms if "pytorch" in times else None
            row.vs_reference = times["reference"] / row.ms if "reference" in times else None
    return rows


def largest_batch(family, first, tokens, shape, device, limit, budget) -> int:
    """The largest batch (doubling from 2 x first, up to limit) at which our Triton kernel
    runs once; ``first`` when none larger does."""
    fits = first
    batch = first * 2
    while batch <= limit and budget.left() > 0:
        try:
            case = build_case(family, batch, tokens, shape, device, {})
            runner(case, "triton")()
            del case
        except Exception as error:
            release(device)
            if is_out_of_memory(error):
                break
            raise
        release(device)
        fits = batch
        batch *= 2
    return fits


def sweep(family, batch, tokens, shape, device, warmup, iters, budget, limit) -> dict:
    """Our kernel's search space for ``family`` timed at (batch, tokens): the fastest and
    every variant's ms (None: not timed, the budget spent or a failure)."""
    import torch

    from hstu_ops._triton import load_triton_module
    from hstu_ops.triton import tuning

    space = SWEEP_FAMILIES[family]
    module = load_triton_module(family, tuning.FAMILY_MODULES[space])
    dims = dict(
        attn_dim=shape.attn_dim, hidden_dim=shape.hidden_dim, dtype=getattr(torch, shape.dtype),
        dim=shape.width, groups=1, group_width=shape.heads * shape.hidden_dim, device=device,
    )  # fmt: skip
    variants = tuning.candidates(space, module, **dims)[: limit or None]
    results = {}
    for name, config in variants:
        if budget.left() <= 0:
            results[name] = {"config": repr(config), "ms": None, "note": "budget spent"}
            continue
        try:
            case = build_case(family, batch, tokens, shape, device, {}, configs=config)
            ms, _ = time_ms(runner(case, "triton"), device, warmup, iters)
            results[name] = {"config": repr(config), "ms": ms}
            del case
        except Exception as error:
            results[name] = {"config": repr(config), "ms": None, "note": first_line(error)}
        release(device)
    timed = {k: v["ms"] for k, v in results.items() if v["ms"] is not None}
    best = min(timed, key=timed.get) if timed else None
    default_ms = timed.get("default")
    return {
        "batch": batch,
        "tokens": tokens,
        "fastest": best,
        "fastest_ms": timed.get(best),
        "default_ms": default_ms,
        "gain_over_default": default_ms / timed[best] if best and default_ms else None,
        "variants": results,
    }


# ------------------------------------------------------------------------------------------
# output
# ------------------------------------------------------------------------------------------
def table(record: Record) -> str:
    h = record.header
    lines = [
        f"# hstu-ops side by side: {h['device']}, commit {h['commit']}",
        "",
        f"{h['shape']}; {h['timing']}; peak: {h['peak_text']}",
        "",
        "| family | kernel | batch | tokens | ms | TFLOP/s or GB/s | of peak | vs pytorch "
        "| vs reference | peak MiB | note |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]

    def num(x, fmt):
        return "" if x is None else format(x, fmt)

    for r in record.rows:
        unit = "TFLOP/s" if r.family in MATRIX_BOUND else "GB/s"
        rate = "" if r.rate is None else f"{r.rate:,.1f} {unit}"
        lines.append(
            f"| {r.family} | {r.kernel} | {r.batch} | {r.tokens} | {num(r.ms, '.3f')} | {rate} "
            f"| {num(r.peak_fraction and 100 * r.peak_fraction, '.1f')}"
            f"{'%' if r.peak_fraction is not None else ''} | {num(r.vs_pytorch, '.2f')} "
            f"| {num(r.vs_reference, '.2f')} | {num(r.peak_mib, ',.0f')} | {r.note} |"
        )
    if record.backward_over_forward:
        lines += ["", "Backward over forward (ms of forward + backward, less the forward's, over "
                  "the forward's): " + ", ".join(
                      f"{k} {v:.2f}" for k, v in record.backward_over_forward.items())]  # fmt: skip
    if record.largest_batch:
        lines += ["", "Largest batch our Triton kernel ran (doubling): "
                  + ", ".join(f"{k} {v}" for k, v in record.largest_batch.items())]  # fmt: skip
    for family, found in record.sweep.items():
        lines += [
            "",
            f"Sweep {family} (batch {found['batch']}, {found['tokens']} tokens): fastest "
            f"{found['fastest']} {num(found['fastest_ms'], '.3f')} ms, default "
            f"{num(found['default_ms'], '.3f')} ms",
        ]
        for name, v in found["variants"].items():
            lines.append(f"- {name}: {num(v['ms'], '.3f')} ms {v.get('note', '')}".rstrip())
    return "\n".join(lines) + "\n"


def write(path: Path, text: str) -> None:
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    os.replace(part, path)


def save(record: Record, folder: Path) -> None:
    as_json = {**dataclasses.asdict(record)}
    json_path, table_path = outputs(folder)
    write(json_path, json.dumps(as_json, indent=2) + "\n")
    write(table_path, table(record))


def commit() -> str:
    out = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
        cwd=Path(__file__).parent,
    )  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else "unknown"


# ------------------------------------------------------------------------------------------
# main
# ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.tiny and "TRITON_INTERPRET" not in os.environ:
        import torch

        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported
    import torch

    import hstu_ops
    from hstu_ops._kernel import triton_interpreting

    budget = Budget(args.budget)
    interpreted = triton_interpreting()
    device = torch.device("cuda" if torch.cuda.is_available() and not interpreted else "cpu")
    if not hstu_ops.triton_available():
        raise SystemExit("error: triton is not installed; this benchmark times Triton kernels")
    if device.type == "cpu" and not interpreted:
        raise SystemExit("error: no GPU is visible; run with --tiny on the CPU")
    shape = TINY if args.tiny else Shape()
    # 4,096 first: the yambda-5b length, which the budget must not leave out.
    tokens_list = args.tokens or ([16, 12] if args.tiny else [4096, 2048])
    first = args.batch or (2 if args.tiny else 32)
    warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 2)
    iters = args.iters or (1 if args.tiny else 5)
    reference = load_reference(args.reference, interpreted) if args.reference else None
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (interpreter)"
    peak = chip_peak(name) if device.type == "cuda" else None
    import triton

    header = {
        "device": name,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "commit": commit(),
        "torch": torch.__version__,
        "triton": triton.__version__ + (" (interpreter)" if interpreted else ""),
        "reference": None if args.reference is None else {
            "checkout": args.reference.name, "commit": reference_commit(args.reference),
        },
        "peak": peak,
        "peak_text": "none: the chip is not in the table" if peak is None else (
            f"{peak['chip']}, {peak['bf16_dense_tflops']:g} dense bf16 TFLOP/s, "
            f"{peak['memory_gbps']:g} GB/s ({peak['source']})"
        ),
        "shape": f"{shape.heads} heads of {shape.attn_dim}/{shape.hidden_dim}, width "
        f"{shape.width}, {shape.contextual} contextual tokens, {shape.targets} target, "
        f"{shape.dtype}, dropout {shape.dropout}",
        "timing": f"median of {iters} after {warmup} warm-up; budget {args.budget:g} s",
        "families": list(args.families),
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    record = Record(header)
    print(f"{name}; peak: {header['peak_text']}; commit {header['commit']}", flush=True)
    for tokens in tokens_list:
        for family in args.families:
            batches = [first]
            if device.type == "cuda" and budget.left() > 0:
                largest = largest_batch(
                    family, first, tokens, shape, device, args.max_batch, budget
                )
                record.largest_batch[f"{family} N={tokens}"] = largest
                if largest > first:
                    batches.append(largest)
            for batch in batches:
                if budget.left() <= 0:
                    found = [
                        Row(family, k, batch, tokens, note="not run: budget spent") for k in KERNELS
                    ]
                else:
                    found = bench_rows(
                        family, batch, tokens, shape, device, reference, warmup, iters, peak,
                        interpreted, first,
                    )  # fmt: skip
                for row in found:
                    record.rows.append(row)
                    print(format_row(row), flush=True)
                record.backward_over_forward = backward_over_forward(record.rows)
                save(record, args.out)
    if args.sweep:
        tokens = max(tokens_list)
        for family in SWEEP_FAMILIES:
            if family not in args.families and f"{family}-fwd" not in args.families:
                continue
            found = sweep(
                family, first, tokens, shape, device, warmup, iters, budget, args.sweep_variants
            )
            record.sweep[family] = found
            print(f"sweep {family}: fastest {found['fastest']} {found['fastest_ms']} ms "
                  f"(default {found['default_ms']} ms)", flush=True)  # fmt: skip
            save(record, args.out)
    save(record, args.out)
    json_path, table_path = outputs(args.out)
    print(f"wrote {json_path} and {table_path}")
    return 1 if any(r.failed for r in record.rows) else 0


def format_row(r: Row) -> str:
    ms = "-" if r.ms is None else f"{r.ms:.3f} ms"
    rate = (
        ""
        if r.rate is None
        else f"{r.rate:,.1f} {'TFLOP/s' if r.family in MATRIX_BOUND else 'GB/s'}"
    )
    of_peak = "" if r.peak_fraction is None else f"{100 * r.peak_fraction:.1f}% of peak"
    ratios = " ".join(
        f"{name} {value:.2f}x"
        for name, value in (("vs pytorch", r.vs_pytorch), ("vs reference", r.vs_reference))
        if value is not None
    )
    return (
        f"{r.family:<22}{r.kernel:<10}B={r.batch:<5}N={r.tokens:<6}{ms:>14} {rate:>18} "
        f"{of_peak:>16} {ratios}  {r.note}"
    ).rstrip()


if __name__ == "__main__":
    sys.exit(main())
