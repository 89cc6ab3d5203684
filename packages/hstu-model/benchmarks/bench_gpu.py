"""Kernel families and the full training step at the yambda-5b layer shape, per kernel.

On a GPU machine, from the workspace root (with the CUDA stack, see the root README):
    uv run --no-sync python packages/hstu-model/benchmarks/bench_gpu.py --json gpu.json
On the CPU at tiny shapes in Triton's interpreter (what CI runs, so that the script cannot
rot; the figures mean nothing):
    uv run python packages/hstu-model/benchmarks/bench_gpu.py --tiny
(--tiny sets TRITON_INTERPRET=1 itself when no GPU is visible.)

For each hstu-ops op family and for the model's training step (forward, backward, dense Adam
and sparse row-wise Adagrad; and dense-step, see below), at each batch size, every kernel the
family has is timed on the same inputs: forward + backward of the family's ops at the token
count of a full yambda-5b sample (8 contextual + 4,086 history + 1 candidate = 4,095 tokens),
heads, head dims and width of the yambda-5b preset, in bf16 (the model step under the preset's
bf16 autocast). Columns:
family, kernel, shape, ms (median of --iters after --warmup), samples/s (batch / time), and
the speed-up over the family's pytorch kernel at the same batch. A batch size that runs out of
memory is skipped with a note; a kernel that cannot run on the device (native attention on a
GPU, triton on a CPU without the interpreter) is listed with the reason. The model step's
embedding tables are capped at --max-rows rows each (yambda-5b's need about 600 GB and several
GPUs; their size does not change the dense work timed here, only the sparse update's reach).
On CUDA each row also gives the peak GPU memory per sample: torch.cuda.max_memory_allocated
over the timed runs (its peak reset after the warm-up) divided by the batch.

dense-step times the same model's training step without TorchRec and fbgemm-gpu, which a bare
CUDA machine may lack: `hstu_model.PlainTableRanker` (HSTURanker's function, its id tables as
plain torch.nn.Embedding, no TorchRec sharding, no fused sparse optimizer) on plain tensors,
forward under the preset's bf16 autocast, backward, the trainer's gradient clipping of the
dense parameters, and torch.optim.Adam over all parameters (the tables too, whose gradients
are dense), at --dense-step-lengths tokens per sample (default 2,048 and 4,096) with its
tables cut to --dense-step-rows rows (Adam updates every row of them every step). Its rows at
batch 32 and 2,048 tokens, as the model-step's, carry the published one-GPU figure below and,
on a GPU, their samples/s over it.

With --reference CHECKOUT (the `recommendation_v4` directory of the MLPerf training
repository, imported from there, never copied), the attention families also time the
reference's own Triton HSTU attention (`generative_recommenders.ops.triton.
triton_hstu_attention.triton_hstu_mha`, what its `hstu_mha` dispatcher runs for
HammerKernel.TRITON) on the same inputs; before timing, its output and input gradients are
compared with ours (kernel "triton"), and the "vs ref" column gives reference ms / ms. The
attention families also report TFLOP/s: the causal target-aware pairs of `hstu_model.flops`
(q k^T and attn @ v per head, 2 FLOPs per multiply-add), times 3 for forward + backward.
--largest-batch FAMILY... (GPU only) keeps doubling the batch after the last of
--batch-sizes while a kernel of the family still fits, and names the largest batch each
kernel ran. --profile-steps prints, after each training-step row, where one more step spends
its time (torch.profiler's ops by self time, device time on a GPU). On CUDA every step row
also says how busy the GPU was ("GPU busy N% of wall", `gpu_busy` in the JSON): the kernels'
time in three more steps over their span, the rest being the GPU waiting on the host.
--dense-step-modes compiled adds dense-step rows with the model's MLPs under torch.compile
(`dense_step_runners`).

Published figures to compare with (the MLPerf DLRMv4 reference, 8 MI350X, bf16 Triton, per
GPU: PUBLISHED_STEP_RATES): ~348 samples/s at batch 32 and 2,048 tokens (2,787 global), ~1,778
at batch 1,024 (14,222 global).
Exit status 1 when a kernel failed with anything but running out of memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FAMILIES = (
    "jagged-1d",
    "attention-fwd",
    "attention",
    "layer-projections",
    "norms",
    "jagged-2d",
    "positional-embeddings",
    "addmm",
    "model-step",
    "dense-step",
)
"""What is timed: the hstu-ops op families, then the model's whole training step, with TorchRec
and with plain tables."""
OPS = "ops"
"""A --families value: every op family, in FAMILIES' order (not the training steps)."""

FAMILY_OPS = {
    "jagged-1d": "concat_1d_jagged of the contextual and history rows",
    "attention-fwd": "hstu_mha forward only, causal, one target per sequence",
    "attention": "hstu_mha, causal, one target per sequence",
    "layer-projections": "hstu_compute_uqvk + hstu_compute_output (dropout as the preset's)",
    "norms": "layer_norm over the width",
    "jagged-2d": "concat_2D_jagged of the contextual and history rows",
    "positional-embeddings": "add_timestamp_positional_embeddings",
    "addmm": "bias + tokens @ W (width x width)",
    "model-step": "Trainer.train_step: forward, backward, dense Adam, sparse row-wise Adagrad",
    "dense-step": "PlainTableRanker: forward, backward, Adam over all parameters; plain "
    "torch.nn.Embedding tables (no TorchRec sharding, no fused sparse optimizer)",
}

FAMILY_KERNELS = {
    "jagged-1d": ("pytorch", "native"),
    "attention-fwd": ("pytorch", "native", "triton", "reference"),
    "attention": ("pytorch", "native", "triton", "reference"),
    "layer-projections": ("pytorch", "triton"),
    "norms": ("pytorch", "triton"),
    "jagged-2d": ("pytorch", "triton"),
    "positional-embeddings": ("pytorch", "triton"),
    "addmm": ("pytorch", "triton"),
    "model-step": ("pytorch", "native", "triton"),
    "dense-step": ("pytorch", "triton"),
}
"""The kernels each family has (hstu_ops' per-op kernels; the model's `ModelConfig.kernel`;
"reference": the MLPerf reference's Triton kernel, run only with --reference)."""

ATTENTION_FAMILIES = ("attention-fwd", "attention")
STEP_PHASES = ("step: forward", "step: backward", "step: optimizer")
"""The profiler labels of dense-step's phases (the optimizer phase: clipping and Adam)."""
STEP_MODES = ("eager", "compiled")
"""dense-step's ways to run: as the trainer does, or parts of its model under torch.compile."""
COMPILED_PARTS = (
    "content_mlp",
    "additional_mlp",
    "action_mlp",
    "contextual_projection",
    "postprocessor",
    "item_mlp",
    "head",
)
"""The model's modules that dense-step's "compiled" mode compiles, each on its own."""
STEP_FAMILIES = ("model-step", "dense-step")
"""The families that time the model's whole training step."""
PUBLISHED_STEP_RATES = {(32, 2048): 348.0, (1024, 2048): 1778.0}
"""(batch per GPU, tokens per sample) -> the MLPerf DLRMv4 reference's published training
samples/s per GPU, bf16 with its Triton kernels, all measured on 8 MI350X (each about 2.3 times
an H100's dense bf16 peak): its training recipe's ~2,787 global samples/s at batch 32 per GPU
and max_seq_len 2,048 (~93 ms a step), and its performance notes' 14,222 global at batch 1,024
per GPU (the same recipe), each over 8. The recipe's best variant (pinned autotuning, a newer
fbgemm) reaches ~4,970 global at batch 32, ~621 per GPU. What the step families' rows at those
shapes are compared with."""
REFERENCE_MODULE = "generative_recommenders.ops.triton.triton_hstu_attention"
"""The reference's Triton HSTU attention, which its `ops/hstu_attention.hstu_mha` dispatcher
calls for HammerKernel.TRITON (the dispatcher itself refuses CPU tensors, so it is called here
directly, with the dispatcher's defaults: no max_attn_len, no contextual tokens, no sorting,
no TMA)."""
INTERPRETED_DIFFERENCE = (
    "not a failure under Triton's interpreter, which does not run the reference's kernels as "
    "a GPU does (its outputs there are not the attention: values near 1e9 from inputs near 1); "
    "timed to test the wiring"
)
AGREEMENT_TOLERANCE = 2e-2
"""Largest max|ours - reference| / max|reference| accepted for the attention's output and its
input gradients in bf16 (both accumulate in fp32; they differ by bf16 rounding of the
stored tensors and the order of the sums)."""


@dataclass(frozen=True)
class Row:
    family: str
    kernel: str
    batch: int
    shape: str
    ms: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None
    note: str = ""
    failed: bool = False
    tflops: float | None = None
    """TFLOP/s of the attention families (the model's causal pair count, see the docstring)."""
    vs_reference: float | None = None
    """The reference kernel's ms / ms at the same batch (attention, with --reference)."""
    peak_mib_per_sample: float | None = None
    """Peak GPU memory allocated during the timed runs, MiB per sample (CUDA only)."""
    published_samples_per_s: float | None = None
    """The published figure at this shape (the step families at PUBLISHED_STEP_SHAPE)."""
    vs_published: float | None = None
    """samples/s over the published figure (on a GPU only: a CPU's figure means nothing)."""
    gpu_busy: float | None = None
    """The step families on CUDA: the share of wall time the GPU runs kernels (see
    `gpu_busy_fraction`); what is left is the GPU waiting on the host."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes (CPU CI)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", help="default: 32 1024 (tiny: 2)")
    parser.add_argument(
        "--families",
        nargs="+",
        choices=[*FAMILIES, OPS],
        default=list(FAMILIES),
        help=f"'{OPS}': every op family (default: all, the steps last)",
    )
    parser.add_argument("--warmup", type=int, help="untimed runs (default 3, tiny 1)")
    parser.add_argument("--iters", type=int, help="timed runs, the median kept (default 10)")
    parser.add_argument("--max-rows", type=int, default=1_000_000, help="rows per table")
    parser.add_argument(
        "--dense-step-lengths",
        type=int,
        nargs="+",
        metavar="TOKENS",
        help="tokens per sample of dense-step, one setting each (default 2048 4096; tiny: 12 16)",
    )
    parser.add_argument(
        "--dense-step-rows",
        type=int,
        default=10_000,
        help="rows per table of dense-step, whose Adam updates every row each step (yambda-5b "
        "at 10,000: 56M table parameters beside the 15M dense ones)",
    )
    parser.add_argument(
        "--history-length",
        type=int,
        help="history events per sample instead of the preset's (2039: 2,048 tokens, the "
        "length of the published bf16 Triton figure)",
    )
    parser.add_argument(
        "--reference",
        type=Path,
        metavar="CHECKOUT",
        help="the MLPerf reference's recommendation_v4 directory: its Triton attention is "
        "timed and checked against ours",
    )
    parser.add_argument(
        "--largest-batch",
        nargs="+",
        default=[],
        choices=FAMILIES,
        metavar="FAMILY",
        help="on a GPU, double the batch after the last --batch-sizes until every kernel of "
        "these families runs out of memory",
    )
    parser.add_argument("--largest-batch-limit", type=int, default=16384, help="stop there")
    parser.add_argument(
        "--profile-steps",
        action="store_true",
        help="after timing each training-step row, print its ops by self time in one more "
        "step (torch.profiler; on a GPU by device time)",
    )
    parser.add_argument(
        "--dense-step-modes",
        nargs="+",
        choices=STEP_MODES,
        default=["eager"],
        help="how dense-step runs: eager (as the trainer), compiled (the model's MLPs under "
        "torch.compile, inductor on a GPU, aot_eager on the CPU; fused Adam on a GPU), a row each",
    )
    parser.add_argument(
        "--dense-step-kernels",
        nargs="+",
        choices=FAMILY_KERNELS["dense-step"],
        help="dense-step's kernels (default: all)",
    )
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    op_families = [f for f in FAMILIES if f not in STEP_FAMILIES]
    expanded = (f for g in args.families for f in (op_families if g == OPS else [g]))
    args.families = list(dict.fromkeys(expanded))  # in order, each once
    if args.tiny and "TRITON_INTERPRET" not in os.environ and not _gpu_visible():
        # Before triton is first imported: it reads the variable then.
        os.environ["TRITON_INTERPRET"] = "1"

    import torch

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    setting = tiny_setting() if args.tiny else yambda_5b_setting(args.max_rows)
    if args.history_length:
        setting = setting.with_history(args.history_length)
    batch_sizes = args.batch_sizes or setting.batch_sizes
    warmup = setting.warmup if args.warmup is None else args.warmup
    iters = args.iters or setting.iters
    reference = load_reference(args.reference) if args.reference else None
    header = describe(device, setting, warmup, iters, reference)
    print(header, flush=True)
    for family in args.families:
        print(f"  {family}: {FAMILY_OPS[family]}")
    print(HEADINGS)
    record = {"header": header, "rows": [], "largest_batch": {}}
    rows: list[Row] = record["rows"]

    def add(new_rows: list[Row]) -> None:
        for row in new_rows:
            rows.append(row)
            print(format_row(row), flush=True)
        if args.json:  # after every batch, so that a stopped run keeps what it timed
            write_json(args.json, record)

    for family in args.families:
        settings = [setting]
        kernels = None
        if family == "dense-step":
            lengths = args.dense_step_lengths or setting.dense_step_lengths
            settings = [
                dataclasses.replace(setting.with_tokens(n).with_rows(args.dense_step_rows), mode=m)
                for n in lengths
                for m in args.dense_step_modes
            ]
            kernels = args.dense_step_kernels
        for each in settings:
            # Several settings of one family are told apart by their tokens per sample.
            name = family if len(settings) == 1 else f"{family} N={each.tokens}"
            if each.mode != "eager":
                name += f" {each.mode}"
            first = len(rows)
            profile = args.profile_steps and family in STEP_FAMILIES
            for batch in batch_sizes:
                add(
                    bench_family(
                        family, batch, each, device, warmup, iters, reference, kernels, profile
                    )
                )
            if family not in args.largest_batch:
                continue
            if device.type != "cuda":
                print(f"{name}: largest batch not searched on the CPU", flush=True)
                continue
            largest = largest_batch(
                family, batch_sizes, each, device, warmup, iters, reference, rows[first:], add,
                args.largest_batch_limit,
            )  # fmt: skip
            record["largest_batch"][name] = largest
            print(f"{name}: largest batch that ran, per kernel: {largest}", flush=True)
    if args.json:
        write_json(args.json, record)
    return 1 if any(r.failed for r in rows) else 0


HEADINGS = (
    f"{'family':<22}{'kernel':<10}{'shape':<34}{'ms':>11}{'samples/s':>12}{'vs pytorch':>12}"
    f"{'TFLOP/s':>9}{'vs ref':>8}{'MiB/sample':>12}{'vs published':>14}"
)


def largest_batch(
    family, batch_sizes, setting, device, warmup, iters, reference, rows, add, limit
) -> dict[str, int]:
    """Doubles the batch after the last of `batch_sizes` while a kernel of `family` still fits
    (those that ran out of memory drop out); kernel -> the largest batch it ran."""
    ran = {r.kernel: r.batch for r in rows if r.family == family and r.ms is not None}
    batch = max(batch_sizes)
    fitting = [k for k in FAMILY_KERNELS[family] if ran.get(k) == batch]
    while fitting and batch * 2 <= limit:
        batch *= 2
        found = bench_family(family, batch, setting, device, warmup, iters, reference, fitting)
        add(found)
        fitting = [r.kernel for r in found if r.ms is not None]
        ran.update({k: batch for k in fitting})
    return ran


def write_json(path: Path, record: dict) -> None:
    """Writes the rows aside, then renames: a reader sees the old file or the new one."""
    record = {**record, "rows": [dataclasses.asdict(r) for r in record["rows"]]}
    part = path.with_name(f".{path.name}.part")
    part.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(part, path)


def _gpu_visible() -> bool:
    import torch

    return torch.cuda.is_available()


# ------------------------------------------------------------------------------------------
# settings: the layer shape and batch sizes
# ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Setting:
    name: str
    cfg: object
    """hstu_model.HSTUConfig: the model whose layer shape every family is timed at."""
    vocab: dict[str, int]
    batch_sizes: tuple[int, ...]
    warmup: int
    iters: int
    dense_step_lengths: tuple[int, ...]
    """Tokens per sample of dense-step's settings, unless --dense-step-lengths gives them."""
    mode: str = "eager"
    """How dense-step runs its step (STEP_MODES)."""

    def with_history(self, history_length: int) -> Setting:
        """The same model with `history_length` events per sample (max_seq_len follows)."""
        m = self.cfg.model
        tokens = m.contextual_seq_len + history_length + m.num_candidates
        model = {"history_length": history_length, "max_seq_len": tokens}
        return dataclasses.replace(self, cfg=self.cfg.replace(model=model))

    def with_tokens(self, tokens: int) -> Setting:
        """The same model with `tokens` per full sample (the history takes what the contextual
        tokens and the candidates leave)."""
        m = self.cfg.model
        return self.with_history(tokens - m.contextual_seq_len - m.num_candidates)

    def with_rows(self, max_rows: int) -> Setting:
        """The same model with every table cut to `max_rows` rows."""
        features = tuple(
            dataclasses.replace(f, num_embeddings=min(f.num_embeddings, max_rows))
            for f in self.cfg.model.contextual_features
        )
        cfg = self.cfg.replace(model={"contextual_features": features})
        vocab = {k: min(v, max_rows) for k, v in self.vocab.items()}
        return dataclasses.replace(self, cfg=cfg, vocab=vocab)

    @property
    def tokens(self) -> int:
        """Tokens of one full sample: contextual, history, candidates."""
        m = self.cfg.model
        return m.contextual_seq_len + m.history_length + m.num_candidates


def yambda_5b_setting(max_rows: int) -> Setting:
    import hstu_model
    from hstu_model.config import DEFAULT_VOCABS

    cfg = hstu_model.preset("yambda-5b")
    vocab = DEFAULT_VOCABS["yambda-5b"]
    setting = Setting(
        "yambda-5b", cfg, vocab, (32, 1024), warmup=3, iters=10, dense_step_lengths=(2048, 4096)
    )
    return setting.with_rows(max_rows)


def tiny_setting() -> Setting:
    """The tiny preset shortened to a few tokens per sample: the interpreter runs every
    program instance in Python."""
    import hstu_model
    from hstu_model.config import DEFAULT_VOCABS

    cfg = hstu_model.preset("tiny").replace(
        model={
            "history_length": 7,
            "max_seq_len": 16,
            "num_layers": 1,
            "linear_dropout": 0.1,
            "position_buckets": 16,
            "time_buckets": 16,
        },
        train={"autocast_bf16": True},
    )
    # Two lengths, so that the CPU runs dense-step's settings as a GPU does.
    return Setting(
        "tiny", cfg, DEFAULT_VOCABS["tiny"], (2,), warmup=1, iters=1, dense_step_lengths=(12, 16)
    )


def describe(device, setting: Setting, warmup: int, iters: int, reference=None) -> str:
    import torch

    import hstu_ops

    if device.type == "cuda":
        where = f"{torch.cuda.get_device_name(device)} ({'ROCm' if torch.version.hip else 'CUDA'})"
    else:
        where = f"CPU ({os.cpu_count()} cores, {torch.get_num_threads()} threads)"
    triton = "not installed"
    if hstu_ops.triton_available():
        import triton

        interpreted = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
        triton = f"{triton.__version__}{' (interpreter)' if interpreted else ''}"
    m = setting.cfg.model
    return (
        f"{setting.name} layer shape: {setting.tokens} tokens/sample, {m.num_layers} layers, "
        f"width {m.embedding_dim}, {m.num_heads} heads of {m.attention_dim}/{m.linear_dim}, "
        f"bf16; {where}; torch {torch.__version__}, triton {triton}; commit {commit()}; "
        f"median of {iters} after {warmup} warm-up"
        + (f"; reference: {reference.origin}" if reference else "")
    )


def commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).parent,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def format_row(row: Row) -> str:
    ms = "-" if row.ms is None else f"{row.ms:.3f}"
    rate = "-" if row.samples_per_s is None else f"{row.samples_per_s:,.1f}"
    speedup = "" if row.speedup is None else f"{row.speedup:.2f}x"
    tflops = "" if row.tflops is None else f"{row.tflops:.3g}"
    vs_ref = "" if row.vs_reference is None else f"{row.vs_reference:.2f}x"
    memory = "" if row.peak_mib_per_sample is None else f"{row.peak_mib_per_sample:,.1f}"
    vs_published = "" if row.vs_published is None else f"{row.vs_published:.2f}x"
    text = (
        f"{row.family:<22}{row.kernel:<10}{row.shape:<34}{ms:>11}{rate:>12}{speedup:>12}"
        f"{tflops:>9}{vs_ref:>8}{memory:>12}{vs_published:>14}"
    )
    return f"{text}  {row.note}" if row.note else text


# ------------------------------------------------------------------------------------------
# timing
# ------------------------------------------------------------------------------------------
def bench_family(
    family: str,
    batch: int,
    setting: Setting,
    device,
    warmup: int,
    iters: int,
    reference=None,
    kernels: list[str] | None = None,
    profile: bool = False,
) -> list[Row]:
    """One row per kernel of `family` (or of `kernels`) at `batch`, pytorch first; with
    `profile`, each timed kernel's ops by self time in one more run are printed after it."""
    kernels = kernels or FAMILY_KERNELS[family]
    m = setting.cfg.model
    shape = f"B={batch} N={setting.tokens}"
    if family in ATTENTION_FAMILIES:
        shape += f" H={m.num_heads} D={m.attention_dim}"
    elif family not in STEP_FAMILIES:
        shape += f" D={m.embedding_dim}"
    if setting.mode != "eager":
        shape += f" {setting.mode}"
    try:
        runners = make_runners(family, batch, setting, device, reference)
    except Exception as error:  # the inputs themselves may not fit
        out_of_memory = is_out_of_memory(error)
        release(device)
        note = "skipped: out of memory for the inputs" if out_of_memory else failure(error)
        return [
            Row(family, kernel, batch, shape, note=note, failed=not out_of_memory)
            for kernel in kernels
        ]
    rows: list[Row] = []
    baseline: float | None = None
    published = None
    if family in STEP_FAMILIES:
        published = PUBLISHED_STEP_RATES.get((batch, setting.tokens))
    for kernel in kernels:
        why = unavailable(family, kernel, device.type, reference)
        if why:
            rows.append(Row(family, kernel, batch, shape, note=f"not run: {why}"))
            continue
        note, failed = family_note(family, setting), False
        try:  # the run (a model, for the step) is freed before the next kernel's
            if kernel == "reference":  # the same function as ours, or its time means nothing
                note, failed = runners.agreement()
            run = runners(kernel)
            ms, peak_bytes = time_ms(run, device, warmup, iters)
            busy = None
            if family in STEP_FAMILIES and device.type == "cuda":
                busy = gpu_busy_fraction(run, device)
                note = f"GPU busy {busy:.1%} of wall; {note}"
            if profile:
                print(f"profile of one more run, {family} {kernel} {shape}:", flush=True)
                print(profile_table(run, device), flush=True)
            del run
        except Exception as error:
            out_of_memory = is_out_of_memory(error)
            note = "skipped: out of memory" if out_of_memory else failure(error)
            rows.append(Row(family, kernel, batch, shape, note=note, failed=not out_of_memory))
            release(device)
            continue
        if kernel == "pytorch":
            baseline = ms
        speedup = None if baseline is None else baseline / ms
        rate = batch / (ms / 1000)
        tflops = None
        if family in ATTENTION_FAMILIES:
            tflops = attention_flops(family, batch, setting) / (ms / 1000) / 1e12
        memory = None if peak_bytes is None else peak_bytes / 2**20 / batch
        vs_published = rate / published if published and device.type == "cuda" else None
        rows.append(
            Row(
                family, kernel, batch, shape, ms, rate, speedup, note, failed, tflops,
                peak_mib_per_sample=memory, published_samples_per_s=published,
                vs_published=vs_published, gpu_busy=busy,
            )
        )  # fmt: skip
        release(device)
    del runners
    release(device)
    ref_ms = next((r.ms for r in rows if r.kernel == "reference" and r.ms), None)
    if ref_ms:
        rows = [dataclasses.replace(r, vs_reference=r.ms and ref_ms / r.ms) for r in rows]
    return rows


def attention_flops(family: str, batch: int, setting: Setting) -> int:
    """The attention's FLOPs at `batch` full samples: q k^T and attn @ v over the (query, key)
    pairs the causal target-aware mask allows (`hstu_model.flops`), x3 with the backward."""
    from hstu_model.flops import TRAIN_FACTOR, attention_pairs

    m = setting.cfg.model
    pairs = attention_pairs(m.contextual_seq_len, m.history_length, m.num_candidates)
    forward = batch * pairs * m.num_heads * 2 * (m.attention_dim + m.linear_dim)
    return forward if family == "attention-fwd" else TRAIN_FACTOR * forward


def family_note(family: str, setting: Setting) -> str:
    """What a timed row of `family` says about itself."""
    if family != "dense-step":
        return ""
    from hstu_model.model import embedding_tables

    m = setting.cfg.model
    tables = embedding_tables(m.features, setting.vocab, m.contextual_features)
    rows = max(t.num_embeddings for t in tables)
    return (
        f"lookups on plain torch tables (torch.nn.Embedding, at most {rows:,} rows each; no "
        "TorchRec sharding, no fused sparse optimizer), Adam over all parameters"
    )


def time_ms(run: Callable[[], object], device, warmup: int, iters: int) -> tuple[float, int | None]:
    """(median ms of `iters` runs after `warmup` untimed ones, the peak bytes of GPU memory
    allocated during the timed runs: None off CUDA). The peak is reset after the warm-up, so
    that what only the first runs allocate (Triton's autotuning) is left out."""
    import torch

    for _ in range(warmup):
        run()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(iters):
        start = time.perf_counter()
        run()
        synchronize(device)
        times.append(time.perf_counter() - start)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
    return 1000 * statistics.median(times), peak


def profile_table(run: Callable[[], object], device, row_limit: int = 20) -> str:
    """The ops of one call of `run` by self time (device time on a GPU), torch.profiler's
    table of its `row_limit` largest."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        run()
        synchronize(device)
    key = "self_device_time_total" if on_gpu else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=row_limit)


def gpu_busy_fraction(run: Callable[[], object], device, steps: int = 3) -> float:
    """The share of `steps` consecutive calls of `run` during which the GPU runs a kernel:
    the union of the kernels' intervals in torch.profiler's device trace over the span from
    the first kernel's start to the last one's end (the host's work before the first kernel
    is left out; the gaps between the steps count as idle)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            run()
        synchronize(device)
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start
    )
    return busy_share(spans)


def busy_share(spans: list[tuple[float, float]]) -> float:
    """The length of the union of sorted (start, end) intervals over their whole span."""
    if not spans:
        return 0.0
    busy, (start, end) = 0.0, spans[0]
    first = start
    for s, e in spans[1:]:
        if s > end:
            busy += end - start
            start, end = s, e
        else:
            end = max(end, e)
    busy += end - start
    return busy / (end - first) if end > first else 0.0


def synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step_bench():
    """bench_train_step, whose model setup this script shares; imported late,
    as it imports triton (through torchrec), which must see TRITON_INTERPRET first."""
    here = str(Path(__file__).parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import bench_train_step

    return bench_train_step


def release(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.empty_cache()


def is_out_of_memory(error: BaseException) -> bool:
    import torch

    if isinstance(error, torch.cuda.OutOfMemoryError):
        return True
    text = str(error).lower()
    return "out of memory" in text or "can't allocate memory" in text


def failure(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [""])[0]
    return f"FAILED: {type(error).__name__}: {first[:200]}"


def unavailable(family: str, kernel: str, device_type: str, reference=None) -> str | None:
    """Why `kernel` of `family` cannot run on the device, or None."""
    import hstu_ops

    if kernel == "reference":
        if reference is None:
            return "no --reference checkout given"
        return hstu_ops.unavailable_reason("triton", device_type)
    if family in STEP_FAMILIES:
        return hstu_ops.unavailable_reason(kernel, device_type)
    if kernel == "native" and family == "jagged-1d" and device_type != "cpu":
        info = hstu_ops.native_build_info()
        if info["cuda"] or info["hip"]:
            return None
        return "the extension was built without CUDA/HIP (HSTU_OPS_CUDA=ON builds them)"
    if kernel in ("native", "triton"):
        return hstu_ops.unavailable_reason(kernel, device_type)
    return None


# ------------------------------------------------------------------------------------------
# the families' inputs and calls
# ------------------------------------------------------------------------------------------
def make_runners(family: str, batch: int, setting: Setting, device, reference=None) -> Callable:
    """kernel -> a function that runs the family once (forward + backward) on shared inputs;
    for the attention families it also has `agreement()`, ours against `reference`."""
    if family == "model-step":
        return model_step_runners(batch, setting, device)
    if family == "dense-step":
        return dense_step_runners(batch, setting, device)
    import torch

    import hstu_ops

    m = setting.cfg.model
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(batch)
    ctx, hist, n = m.contextual_seq_len, m.history_length, setting.tokens
    d, heads, dqk, dv = m.embedding_dim, m.num_heads, m.attention_dim, m.linear_dim
    total = batch * n

    def tensor(*shape, grad=True, scale=1.0, dt=dtype):
        t = (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dt)
        return t.requires_grad_(grad)

    def lengths_offsets(length: int):
        lengths = torch.full((batch,), length, dtype=torch.int64, device=device)
        return lengths, hstu_ops.complete_cumsum(lengths)

    def backward(out):
        out.backward(torch.ones_like(out))

    seq_lengths, seq_offsets = lengths_offsets(n)
    num_targets = torch.full((batch,), m.num_candidates, dtype=torch.int64, device=device)

    if family in ("jagged-1d", "jagged-2d"):
        _, ctx_offsets = lengths_offsets(ctx)
        _, hist_offsets = lengths_offsets(hist)
        left, right = tensor(batch * ctx, d), tensor(batch * hist, d)

        def run(kernel):
            if family == "jagged-1d":
                return lambda: backward(
                    hstu_ops.concat_1d_jagged(
                        left, ctx_offsets, right, hist_offsets, kernel=kernel
                    )[0]
                )
            return lambda: backward(
                hstu_ops.concat_2D_jagged(
                    ctx + hist, left, right, ctx, hist, ctx_offsets, hist_offsets, kernel=kernel
                )
            )

        return run

    if family in ATTENTION_FAMILIES:
        q, k, v = tensor(total, heads, dqk), tensor(total, heads, dqk), tensor(total, heads, dv)
        alpha = 1.0 / math.sqrt(dqk)

        def attend(kernel):
            if kernel == "reference":
                return reference.hstu_mha(n, alpha, q, k, v, seq_offsets, num_targets=num_targets)
            return hstu_ops.hstu_mha(
                n, alpha, q, k, v, seq_offsets, num_targets=num_targets, kernel=kernel
            )

        def run(kernel):
            if family == "attention":
                return lambda: backward(attend(kernel))

            def forward():  # no autograd graph: only the forward kernel runs
                with torch.no_grad():
                    attend(kernel)

            return forward

        grad = tensor(total, heads, dv, grad=False)

        def compare():
            note, failed = agreement(attend, (q, k, v), grad, family == "attention")
            if failed and reference.interpreted:
                return f"{note.removeprefix('FAILED: ')}; {INTERPRETED_DIFFERENCE}", False
            return note, failed

        run.agreement = compare
        return run

    if family == "layer-projections":
        width = heads * (2 * dv + 2 * dqk)
        x = tensor(total, d)
        norm_w, norm_b = tensor(d), tensor(d, scale=0.1)
        uvqk_w, uvqk_b = tensor(d, width, scale=d**-0.5), tensor(width, scale=0.1)
        out_norm_w, out_norm_b = tensor(heads * dv), tensor(heads * dv, scale=0.1)
        out_w = tensor(3 * heads * dv, d, scale=(3 * heads * dv) ** -0.5)
        attn = tensor(total, heads * dv)

        def run(kernel):
            def once():
                u, q, k, v = hstu_ops.hstu_compute_uqvk(
                    x, norm_w, norm_b, 1e-6, heads, dqk, dv, uvqk_w, uvqk_b, kernel=kernel
                )
                out = hstu_ops.hstu_compute_output(
                    attn, u, x, out_norm_w, out_norm_b, 1e-6, out_w, heads, dv,
                    m.linear_dropout, True, True, False, kernel=kernel,
                )  # fmt: skip
                backward(out + (q.sum() + k.sum() + v.sum()) * 0)

            return once

        return run

    if family == "norms":
        x, w, b = tensor(total, d), tensor(d), tensor(d, scale=0.1)
        return lambda kernel: lambda: backward(hstu_ops.layer_norm(x, w, b, 1e-6, kernel=kernel))

    if family == "positional-embeddings":
        x = tensor(total, d)
        pos, ts = tensor(m.position_buckets, d), tensor(m.time_buckets + 1, d)
        times = torch.randint(0, 10**8, (total,), generator=gen).to(device)

        def run(kernel):
            return lambda: backward(
                hstu_ops.add_timestamp_positional_embeddings(
                    math.sqrt(d), m.max_seq_len, ctx, pos, ts, seq_offsets, seq_lengths, x,
                    times, num_targets, interleave_targets=False, kernel=kernel,
                )
            )  # fmt: skip

        return run

    if family == "addmm":
        bias, x, w = tensor(d, scale=0.1), tensor(total, d), tensor(d, d, scale=d**-0.5)
        return lambda kernel: lambda: backward(hstu_ops.addmm(bias, x, w, kernel=kernel))

    raise ValueError(f"unknown family {family!r}")


def agreement(attend, inputs, grad, backward: bool) -> tuple[str, bool]:
    """(note, failed): the reference's attention against ours (kernel "triton") on the same
    inputs, output and, for forward + backward, the input gradients for the same output
    gradient, as max|ours - reference| / max|reference|."""
    import torch

    found = {}
    for kernel in ("triton", "reference"):
        for x in inputs:
            x.grad = None
        out = attend(kernel)
        if backward:
            out.backward(grad)
        found[kernel] = [out.detach().float()]
        found[kernel] += [x.grad.float() for x in inputs] if backward else []
    for x in inputs:
        x.grad = None
    names = ("out", "dq", "dk", "dv")
    errors = {}
    for name, ours, ref in zip(names, found["triton"], found["reference"], strict=False):
        scale = ref.abs().max().clamp_min(torch.finfo(torch.float32).tiny)
        errors[name] = ((ours - ref).abs().max() / scale).item()
    worst = max(errors.values())
    text = ", ".join(f"{k} {v:.1e}" for k, v in errors.items())
    if not worst <= AGREEMENT_TOLERANCE:  # also a NaN
        return f"FAILED: differs from ours (triton): {text}", True
    return f"agrees with ours (triton): {text}", False


def load_reference(checkout: Path):
    """The reference's Triton attention, imported from `checkout` (its recommendation_v4
    directory, put first on sys.path); `hstu_mha` and `origin` (what it is, for the header)."""
    from hstu_ops._kernel import triton_interpreting

    root = checkout.expanduser().resolve()
    source = root.joinpath(*REFERENCE_MODULE.split(".")).with_suffix(".py")
    if not source.is_file():
        raise SystemExit(
            f"error: --reference {checkout} has no {source.relative_to(root)}; pass the "
            "recommendation_v4 directory of the MLPerf training repository"
        )
    sys.path.insert(0, str(root))
    quiet_reference_deprecations(root)
    from hstu_model.reference_checkout import import_quietly

    module = import_quietly(REFERENCE_MODULE)
    if Path(module.__file__).resolve() != source:
        raise SystemExit(f"error: {REFERENCE_MODULE} was imported from {module.__file__}")
    if triton_interpreting():
        pin_one_config(module)
        replace_fast_math(module)
    version = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    at = f" at {version.stdout.strip()}" if version.returncode == 0 else ""
    origin = f"{REFERENCE_MODULE}.triton_hstu_mha from {root.name}{at}"
    return types.SimpleNamespace(
        hstu_mha=module.triton_hstu_mha, origin=origin, interpreted=triton_interpreting()
    )


def quiet_reference_deprecations(root: Path) -> None:
    """Silences the warning Triton's compiler gives for each of the reference's kernels that
    combines tensors with ``and``/``or`` (hundreds of lines on a GPU, one per autotuned
    configuration and use): its code, not ours, and only for files under ``root``."""
    warnings.filterwarnings(
        "ignore",
        message="Logical operators 'and' and 'or' are deprecated",
        category=UserWarning,
        module=re.escape(str(root)),
    )


def pin_one_config(module) -> None:
    """Leaves each of the reference's autotuned kernels one config, the first that needs no
    TMA descriptors: Triton's interpreter has no device to time the candidates on (the
    autotuner fails), and with one config it runs that one untimed."""
    from triton.runtime.autotuner import Autotuner

    for value in vars(module).values():
        if isinstance(value, Autotuner) and len(value.configs) > 1:
            plain = [c for c in value.configs if not c.kwargs.get("USE_TLX", False)]
            value.configs = plain[:1] or value.configs[:1]


def replace_fast_math(module) -> None:
    """Gives the reference's kernels plain exp and division for libdevice's fast_expf and
    fast_dividef, which Triton's interpreter does not implement (they return None there). Only
    under the interpreter, where the figures mean nothing; on a GPU the kernels run as written."""
    import triton.language as tl

    # Plain functions: the interpreter runs a kernel as Python, with triton.language's
    # builtins working on its tensors while the kernel runs.
    module.fast_expf = lambda x: tl.exp(x)
    module.fast_dividef = lambda x, y: x / y


def model_step_runners(batch: int, setting: Setting, device) -> Callable:
    """kernel -> one training step of a freshly seeded model with that kernel, cycling over
    two random batches of full histories (bench_train_step's setup)."""
    training_setup = train_step_bench().training_setup

    def run(kernel):
        cfg = setting.cfg.replace(
            model={"kernel": kernel}, sharding={"compute_device": device.type}
        )
        trainer, batches = training_setup(cfg, setting.vocab, batch, 2, device)
        steps = iter(range(10**9))
        return lambda: trainer.train_step(batches[next(steps) % len(batches)])

    return run


def dense_step_runners(batch: int, setting: Setting, device) -> Callable:
    """kernel -> one training step of a freshly seeded PlainTableRanker with that kernel,
    cycling over two random batches of full histories: forward under the preset's bf16
    autocast, the loss in float32, backward, the trainer's clipping of the dense gradients,
    and torch.optim.Adam (the trainer's dense settings) over every parameter.

    `setting.mode` "compiled": the model's parts around the STU layers (COMPILED_PARTS: the
    token, item and head MLPs, the contextual projection, the postprocessor: chains of small
    element-wise and norm ops) each under torch.compile (inductor on a GPU; aot_eager on the
    CPU, which traces the same graphs without inductor's C++ compilation, so that the path is
    tested where there is no GPU), and on a GPU Adam's fused kernel instead of its
    per-tensor-list ones. The STU layers stay as they are: their Triton ops are not yet
    registered as custom ops, so dynamo would trace into their launchers (and stop at their
    host synchronizations)."""
    import torch

    from hstu_model import PlainTableRanker
    from hstu_model.testing import random_plain_batch

    m, opt = setting.cfg.model, setting.cfg.optimizer
    lengths = [m.history_length] * batch
    batches = [
        random_plain_batch(
            lengths, setting.vocab, seed, contextual_tables=m.contextual_tables()
        ).to(device)
        for seed in range(2)
    ]

    def run(kernel):
        torch.manual_seed(0)
        config = setting.cfg.replace(model={"kernel": kernel}).model
        model = PlainTableRanker(config, setting.vocab, device=device).train()
        compiled = setting.mode == "compiled"
        fused = {"fused": True} if compiled and device.type == "cuda" else {}
        optimizer = torch.optim.Adam(
            model.parameters(), lr=opt.dense_lr, betas=opt.betas, eps=opt.eps,
            weight_decay=opt.weight_decay, **fused,
        )  # fmt: skip
        dense = model.dense_parameters()
        if compiled:
            backend = "inductor" if device.type == "cuda" else "aot_eager"
            for part in COMPILED_PARTS:
                setattr(model, part, torch.compile(getattr(model, part), backend=backend))
        cycle = itertools.cycle(batches)

        def step():
            b = next(cycle)
            bf16 = setting.cfg.train.autocast_bf16
            # Labelled for profiles that count each phase's ops (bench_step_launches.py).
            with torch.profiler.record_function(STEP_PHASES[0]):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    logits = model(b.uih, b.candidates).logits
                loss = model.loss(logits.float(), b.labels)
            optimizer.zero_grad(set_to_none=True)
            with torch.profiler.record_function(STEP_PHASES[1]):
                loss.backward()
            with torch.profiler.record_function(STEP_PHASES[2]):
                if opt.grad_clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(dense, opt.grad_clip_norm)
                optimizer.step()

        return step

    return run


if __name__ == "__main__":
    sys.exit(main())
