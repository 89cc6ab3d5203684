"""The hot loops of the hstu-ops kernels, read from their compiled code: no GPU needed.

    uv run --package hstu-ops python packages/hstu-ops/benchmarks/bench_compiled_loops.py \\
        [--arch sm90 ...] [--reference CHECKOUT] [--families attention,position,others] \\
        [--json FILE]

For each target (default sm90; also sm80, sm100, gfx942, gfx950), the launches that the public
ops make with ``kernel="triton"`` are recorded (:func:`hstu_ops.gpu_compile.record_launches`),
compiled and disassembled (:mod:`hstu_ops.loop_figures`): per kernel its tile, warps,
registers, spilled bytes, shared memory, programs per multiprocessor, the instructions of each
innermost tensor-core loop and, for the attention, warp-instructions per score element of
each (loop x warps / (BLOCK_M x BLOCK_N)). The attention runs at the yambda-5b layer shape:
32 sequences of 4,095 tokens, 4 heads of 128, bfloat16, causal, one target each, forward and
backward; the positional embeddings at the same tokens with the yambda-5b preset's width
(512), contextual tokens and tables (POSITION_5B), forward and backward; the other families
(norms, jagged, compute-output, addmm) at the self-check's FULL shapes
(:data:`hstu_ops.selfcheck.FULL`). For the memory-bound kernels (MEMORY_KERNELS) the figures
are those of their innermost loops over global memory, per element one iteration covers:
warp-instructions, bytes loaded and stored (every lane's access counted: a row index that
all lanes load is counted once per lane), atomics. Per-element figures are
per loop; the "hot" one of a kernel is its leanest tensor-core loop (ours: the unmasked loop
over key or query blocks wholly inside the causal region, which runs for all but the diagonal
and target blocks), and the backward's figure is the sum over its kernels.

``--reference CHECKOUT`` (the ``recommendation_v4`` directory of the MLPerf training
repository, imported from there at run time, never copied) records the reference's attention
the same way, every configuration its autotuner would time, and reports the leanest that
compiles without spills, beside ours. These are predictions from the compiled code, not
timings: a loop's length bounds its speed only while issue slots bound it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import warnings
from pathlib import Path

YAMBDA_5B = {"batch": 32, "tokens": 4095, "heads": 4, "head_dim": 128, "targets": 1}
"""The attention's shape: one yambda-5b layer."""
ATTENTION_KERNELS = {
    "_hstu_attn_fwd_kernel": "forward",
    "_hstu_attn_bwd_dkdv_kernel": "backward",
    "_hstu_attn_bwd_dq_kernel": "backward",
    "_hstu_attn_fwd": "forward",  # the reference's
    "_hstu_attn_bwd": "backward",
}
POSITION_5B = {"embedding_dim": 512, "contextual": 8, "positions": 8192, "time_buckets": 2049}
"""The positional embeddings' shape beside YAMBDA_5B's tokens: the yambda-5b preset's width,
contextual tokens and tables (float32 parameters; the tokens bfloat16)."""
MEMORY_KERNELS = {
    # kernel: (the elements one iteration of its loop over global memory covers, its label)
    "_add_timestamp_pos_emb_fwd_kernel": (
        lambda c: c["BLOCK_N"] * c["BLOCK_D"],
        lambda c: f"{c['BLOCK_N']}x{c['BLOCK_D']}",
    ),
    "_segment_sum_rows_kernel": (
        lambda c: c["ROWS_PER_STEP"] * c["BLOCK_D"],
        lambda c: (
            f"{c['ROWS_PER_STEP']}x{c['BLOCK_D']} "
            + (
                "partials"
                if not c["GATHER"]
                else "gather + d_seq"
                if c["WRITE_SCALED"]
                else "gather"
            )
        ),
    ),
}
FAMILIES = ("attention", "position", "others")


@dataclasses.dataclass
class Row:
    who: str
    kernel: str
    tile: str
    warps: int
    registers: int
    spill_bytes: int
    shared_bytes: int
    programs_per_processor: int | None
    loops: list[int]
    per_element: list[float]
    candidate: bool = False
    memory_loops: list[int] = dataclasses.field(default_factory=list)
    """Instructions of each innermost loop over global memory without matrix instructions."""
    memory_per_element: list[float] = dataclasses.field(default_factory=list)
    """Per memory loop (for MEMORY_KERNELS): warp-instructions, global bytes loaded and
    stored (lanes x widths), atomics, each per element."""
    load_bytes_per_element: list[float] = dataclasses.field(default_factory=list)
    store_bytes_per_element: list[float] = dataclasses.field(default_factory=list)
    atomics_per_element: list[float] = dataclasses.field(default_factory=list)

    @property
    def hot(self) -> float | None:
        return min(self.per_element) if self.per_element else None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from hstu_ops.gpu_compile import GPU_TARGETS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", nargs="+", default=["sm90"], choices=sorted(GPU_TARGETS))
    p.add_argument("--reference", type=Path, metavar="CHECKOUT", help="recommendation_v4 dir")
    p.add_argument(
        "--families", default=",".join(FAMILIES), help=f"comma-separated of {', '.join(FAMILIES)}"
    )
    p.add_argument("--json", type=Path, help="also write the rows there")
    p.add_argument("--jobs", type=int, help="compiling processes (default: one per core)")
    args = p.parse_args(argv)
    args.families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(args.families) - set(FAMILIES))
    if unknown:
        p.error(f"--families: unknown {', '.join(unknown)}; known: {', '.join(FAMILIES)}")
    if args.reference is not None:
        package = args.reference / "generative_recommenders" / "ops" / "triton"
        if not (package / "triton_hstu_attention.py").is_file():
            p.error(f"--reference {args.reference}: no generative_recommenders/ops/triton there")
    if args.json is not None and not args.json.parent.is_dir():
        p.error(f"--json {args.json}: no directory {args.json.parent}")
    return args


def attention_inputs():
    """q, k, v (bfloat16, requiring gradients), offsets and target counts at YAMBDA_5B. The
    recorded launches read no values, so the tensors are left uninitialised."""
    import torch

    s = YAMBDA_5B
    total = s["batch"] * s["tokens"]
    q, k, v = (
        torch.empty(total, s["heads"], s["head_dim"], dtype=torch.bfloat16).requires_grad_()
        for _ in range(3)
    )
    offsets = torch.arange(s["batch"] + 1, dtype=torch.int64) * s["tokens"]
    targets = torch.full((s["batch"],), s["targets"], dtype=torch.int64)
    return q, k, v, offsets, targets


def run_attention(mha) -> None:
    """One forward and backward of ``mha(max_seq_len, alpha, q, k, v, offsets, num_targets=)``."""
    import torch

    q, k, v, offsets, targets = attention_inputs()
    out = mha(YAMBDA_5B["tokens"], 1.0 / math.sqrt(q.shape[2]), q, k, v, offsets, targets)
    out.backward(torch.empty_like(out))


def run_position(kernel: str = "triton") -> None:
    """One forward and backward of the positional embeddings at YAMBDA_5B and POSITION_5B,
    every input needing its gradient; values uninitialised, as in attention_inputs."""
    import torch

    import hstu_ops

    s, e = YAMBDA_5B, POSITION_5B
    total, dim = s["batch"] * s["tokens"], e["embedding_dim"]
    x = torch.empty(total, dim, dtype=torch.bfloat16).requires_grad_()
    positions = torch.empty(e["positions"], dim).requires_grad_()
    time_buckets = torch.empty(e["time_buckets"], dim).requires_grad_()
    offsets = torch.arange(s["batch"] + 1, dtype=torch.int64) * s["tokens"]
    out = hstu_ops.add_timestamp_positional_embeddings(
        math.sqrt(dim),
        s["tokens"] + 1,
        e["contextual"],
        positions,
        time_buckets,
        offsets,
        offsets[1:] - offsets[:-1],
        x,
        torch.zeros(total, dtype=torch.int64),
        torch.full((s["batch"],), s["targets"], dtype=torch.int64),
        False,
        kernel=kernel,
    )
    out.backward(torch.empty_like(out))


def record_ours(target, families: list[str]):
    import torch

    import hstu_ops
    from hstu_ops import selfcheck
    from hstu_ops.gpu_compile import record_launches

    with record_launches(target) as recorder:
        if "attention" in families:
            run_attention(
                lambda n, a, q, k, v, o, t: hstu_ops.hstu_mha(
                    n, a, q, k, v, o, num_targets=t, kernel="triton"
                )
            )
        if "position" in families:
            run_position()
        if "others" in families:
            covered = {"hstu_mha", "add_timestamp_positional_embeddings"}  # at yambda-5b above
            for case in selfcheck.build_cases(torch.device("cpu"), selfcheck.FULL):
                if case.op in covered or hstu_ops.Kernel.TRITON not in hstu_ops.OP_KERNELS[case.op]:
                    continue
                selfcheck.run_case(case, hstu_ops.Kernel.TRITON, torch.bfloat16, upcast=False)
    return recorder


def record_reference(target, checkout: Path):
    from hstu_ops.gpu_compile import record_launches

    root = checkout.expanduser().resolve()
    sys.path.insert(0, str(root))
    warnings.filterwarnings("ignore", module=re.escape(str(root)))
    from generative_recommenders.ops.triton import triton_hstu_attention as reference

    with record_launches(target) as recorder:
        run_attention(
            lambda n, a, q, k, v, o, t: reference.triton_hstu_mha(n, a, q, k, v, o, num_targets=t)
        )
    return recorder


def rows_of(who: str, recorder, target, jobs) -> tuple[list[Row], list[str]]:
    from hstu_ops.gpu_compile import launch_figures

    rows, errors = [], []
    for launch, figures in launch_figures(recorder, target, jobs=jobs):
        name = launch.kernel.__name__
        if isinstance(figures, str):
            errors.append(f"{who} {name} {launch.constants} {launch.options}: {figures}")
            continue
        block_m, block_n = launch.constants.get("BLOCK_M"), launch.constants.get("BLOCK_N")
        attention = name in ATTENTION_KERNELS and block_m and block_n
        memory = memory_figures(name, launch.constants, figures, target)
        rows.append(
            Row(
                who=who,
                kernel=name,
                tile=memory_label(name, launch.constants)
                or (f"{block_m}x{block_n}" if block_m and block_n else ""),
                warps=figures.warps,
                registers=figures.registers,
                spill_bytes=figures.spill_bytes,
                shared_bytes=figures.shared_bytes,
                programs_per_processor=figures.programs_per_processor,
                loops=[loop.instructions for loop in figures.loops],
                per_element=list(figures.per_element(block_m * block_n)) if attention else [],
                candidate=launch.candidate,
                memory_loops=[loop.instructions for loop in figures.memory_loops],
                **memory,
            )
        )
    return rows, errors


def memory_label(name: str, constants: dict) -> str:
    return MEMORY_KERNELS[name][1](constants) if name in MEMORY_KERNELS else ""


def memory_figures(name: str, constants: dict, figures, target) -> dict[str, list[float]]:
    """Per memory loop of a MEMORY_KERNELS kernel, what one iteration costs per element it
    covers: warp-instructions, global bytes loaded and stored by all lanes, atomics."""
    if name not in MEMORY_KERNELS:
        return {}
    elements = MEMORY_KERNELS[name][0](constants)
    lanes = figures.warps * (32 if target.vendor == "nvidia" else 64)
    loops = figures.memory_loops
    return {
        "memory_per_element": [x.instructions * figures.warps / elements for x in loops],
        "load_bytes_per_element": [x.load_bytes * lanes / elements for x in loops],
        "store_bytes_per_element": [x.store_bytes * lanes / elements for x in loops],
        "atomics_per_element": [x.atomics * lanes / elements for x in loops],
    }


def attention_summary(rows: list[Row]) -> dict[str, dict[str, float | None]]:
    """who -> {forward, backward}: ours summed over the backward's kernels; the reference's
    leanest spill-free configuration of each of its kernels."""
    summary: dict[str, dict[str, float | None]] = {}
    for who in sorted({r.who for r in rows}):
        figures: dict[str, float | None] = {}
        for phase in ("forward", "backward"):
            mine = [r for r in rows if r.who == who and ATTENTION_KERNELS.get(r.kernel) == phase]
            mine = [r for r in mine if r.hot is not None and r.spill_bytes == 0]
            if not mine:
                figures[phase] = None
            elif who == "reference":
                figures[phase] = min(r.hot for r in mine)
            else:
                figures[phase] = sum(r.hot for r in mine)
        summary[who] = figures
    return summary


def table(arch: str, rows: list[Row]) -> str:
    lines = [
        f"### {arch}",
        "",
        "| who | kernel | tile | warps | registers | spills (B) | smem (KiB) | programs/SM "
        "| tensor-core loops (instr) | warp-instr / score element |",
        "|---|---|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.who} | {r.kernel} | {r.tile} | {r.warps} | {r.registers} | {r.spill_bytes} "
            f"| {r.shared_bytes / 1024:.0f} | {r.programs_per_processor or ''} "
            f"| {', '.join(map(str, r.loops))} | {', '.join(f'{x:.3f}' for x in r.per_element)} |"
        )
    memory = [r for r in rows if r.memory_per_element]
    if memory:
        lines += [
            "",
            "| who | kernel | specialisation | warps | registers | spills (B) "
            "| memory loops (instr) | warp-instr / element | loaded B / element "
            "| stored B / element | atomics / element |",
            "|---|---|---|---:|---:|---:|---|---|---|---|---|",
        ]
        for r in memory:
            lines.append(
                f"| {r.who} | {r.kernel} | {r.tile} | {r.warps} | {r.registers} "
                f"| {r.spill_bytes} | {', '.join(map(str, r.memory_loops))} | "
                + " | ".join(
                    ", ".join(f"{x:.3f}" for x in values)
                    for values in (
                        r.memory_per_element,
                        r.load_bytes_per_element,
                        r.store_bytes_per_element,
                        r.atomics_per_element,
                    )
                )
                + " |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    os.environ.pop("TRITON_INTERPRET", None)  # the kernels must be the compiled ones
    args = parse_args(argv)
    from hstu_ops.gpu_compile import GPU_TARGETS

    report, failed = {}, False
    for arch in args.arch:
        target = GPU_TARGETS[arch]
        rows, errors = rows_of("ours", record_ours(target, args.families), target, args.jobs)
        if args.reference is not None and "attention" in args.families:
            ref_rows, ref_errors = rows_of(
                "reference", record_reference(target, args.reference), target, args.jobs
            )
            rows += ref_rows
            # The reference's autotuner skips a configuration that does not compile; ours
            # must compile.
            for line in ref_errors:
                print(f"note: {line}", file=sys.stderr)
        summary = attention_summary(rows) if "attention" in args.families else {}
        print(table(arch, rows))
        print()
        for who, figures in summary.items():
            shown = ", ".join(
                f"{phase} {value:.3f}" if value is not None else f"{phase} -"
                for phase, value in figures.items()
            )
            print(f"attention, {who}: warp-instructions per score element, {shown}")
        if "ours" in summary and "reference" in summary:
            for phase in ("forward", "backward"):
                ours, ref = summary["ours"][phase], summary["reference"][phase]
                if ours is not None and ref:
                    print(f"attention {phase}: ours / reference = {ours / ref:.3f}")
        for line in errors:
            print(f"error: {line}", file=sys.stderr)
        failed = failed or bool(errors)
        report[arch] = {
            "rows": [dataclasses.asdict(r) for r in rows],
            "attention": summary,
            "errors": errors,
        }
    if args.json is not None:
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps({"shape": YAMBDA_5B, "targets": report}, indent=1) + "\n")
        tmp.replace(args.json)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
