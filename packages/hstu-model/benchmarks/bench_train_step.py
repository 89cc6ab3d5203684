"""Training and evaluation throughput of the presets on random batches, with model FLOPs.

Run from the workspace root:
    uv run --package hstu-model python packages/hstu-model/benchmarks/bench_train_step.py
Options: --presets NAME ..., --kernels NAME ..., --batch-size N, --steps N, --repeat N,
--threads N, --device cpu|cuda, --malloc default|retain.

For each preset (default: tiny and small) and kernel backend (pytorch and native; triton too
when CUDA is available), a freshly seeded model trains on random batches of full histories
(history_length events each, the worst case of a batch), over the preset's default vocabulary.
One run: warm-up steps, then `--steps` timed training steps, then one timed evaluation over the
same batches; the table keeps the best of `--repeat` runs (the fastest mean training step and,
separately, the fastest evaluation). Columns:

- step ms: mean wall time of one training step (forward, backward, dense Adam, sparse
  row-wise Adagrad);
- train/s, eval/s: samples per second of training and of evaluation (forward only);
- GFLOP/sample: the model's training-step FLOPs per sample (`hstu_model.flops`, attention over
  the pairs the causal mask allows; forward is a third of it);
- train GFLOP/s, eval GFLOP/s: those FLOPs per second achieved. The PyTorch attention pads and
  computes all N^2 pairs, so the executed work is larger (the `full N^2` column gives its
  training FLOPs per sample).

- other: the mean number of cores other processes kept busy during the best training run and
  during the best evaluation (train/eval; from /proc/stat, less this process's own CPU time);
  the load average is printed before and after.
  On a small machine other processes slow the figures down a lot (threads that wait for a
  core), so compare only rows whose `other` is near 0.

With `--reference CHECKOUT` (the MLPerf training repository's `recommendation_v4` directory,
or the checkout that holds it) the script instead trains side by side with the reference's
`DlrmHSTU` (imported from there, `hstu_model.reference_checkout`; default preset `small`, CPU
only). For each kernel, the reference model is built at the preset's shape with the reference's
position and time tables (8192 and 2049 rows; the presets' own position tables are smaller) and
its weights are loaded into ours, so both start from the same weights; both train on the same
random batches of full histories in fp32, each with `torch.optim.Adam` over all its
parameters (dense, the embedding tables included: the reference has no sparse optimizer of its
own). After one untimed step, whose losses must agree, the two alternate in `--rounds` rounds
of `--steps` timed steps (ours, reference, ours, ...), so that a change in the machine's load
reaches both. Columns: samples/s of each over all its rounds, their ratio, the ratio of the
best rounds, and `other` (as above) during ours / during the reference's. The reference always
runs its PyTorch kernels (its others need CUDA).

With `--profile` each side's step is then profiled once (torch.profiler, CPU self time, one
step after the rounds) and split into the linear layers' matrix products (`aten::mm`,
`aten::addmm`: the same products on both sides), the optimizer (`Optimizer.step` and
`zero_grad`), and the rest (attention, norms, copies, lookups). The `ceiling` column is what
the ratio would be if all of our rest took no time: the reference's step over our matrix
products and optimizer, an upper bound on what a faster model can show at that shape on that
machine. A `faults/step` column gives each side's minor page faults per training step.

On Linux the C library's allocator returns each freed block of 32 MiB or more to the system at
once (glibc: such blocks are mapped and unmapped one by one), so a step whose tensors are that
large faults every page of them in again, step after step, and spends a large share of its time
in the kernel zeroing pages. `--malloc retain` keeps freed memory in the process's heap instead
(glibc's `mallopt`: no mapped blocks, no trimming below 2 GiB), for all the models of the run
alike; the figures of the two settings are not comparable with each other. The header names the
setting and any GLIBC_TUNABLES or LD_PRELOAD of the environment, which change it too.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import hstu_model
from hstu_model import reference_checkout
from hstu_model.config import DEFAULT_VOCABS
from hstu_model.flops import flops_per_sample
from hstu_model.quiet import quiet_fx_tracing_notice
from hstu_model.reference import load_reference_state_dict
from hstu_model.testing import Batch, random_batch

DEFAULT_STEPS = {"tiny": 20, "small": 3}
"""Timed training steps per run when --steps is not given (a small step takes seconds on a
CPU, so a few suffice)."""
WARMUP_STEPS = {"tiny": 2, "small": 1}


@dataclass(frozen=True)
class Result:
    step_ms: float
    train_rate: float
    train_other: float | None
    eval_rate: float
    eval_other: float | None


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


class OtherLoad:
    """Mean number of cores busy with other processes while it runs: the machine's busy time
    (/proc/stat) less this process's CPU time, over the wall time. None where /proc/stat is
    missing."""

    def __enter__(self) -> OtherLoad:
        self.value: float | None = None
        self._start = (self._busy(), self._own(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        busy, own, wall = self._busy(), self._own(), time.perf_counter()
        if busy is not None and self._start[0] is not None:
            elapsed = wall - self._start[2]
            other = (busy - self._start[0]) - (own - self._start[1])
            self.value = max(0.0, other / elapsed)

    @staticmethod
    def _own() -> float:
        t = os.times()
        return t.user + t.system

    @staticmethod
    def _busy() -> float | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:]]
        except OSError:
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
"""glibc's mallopt parameters (malloc.h)."""


def retain_freed_memory() -> None:
    """Keep the memory this process frees in its heap for later allocations: no block is
    mapped on its own (whose freeing would return it to the system) and the heap's top is not
    trimmed below 2 GiB. Raises SystemExit where the C library is not glibc."""
    try:
        mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    except (OSError, TypeError):  # no C library to open by the process's own symbols
        mallopt = None
    if mallopt is None:
        raise SystemExit("error: --malloc retain needs glibc's mallopt, which this C library lacks")
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not (mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, 2**31 - 1)):
        raise SystemExit("error: --malloc retain: the C library's mallopt refused the settings")


def malloc_setting(choice: str) -> str:
    """The allocator setting of this run, for the header."""
    named = [f"{k}={os.environ[k]}" for k in ("GLIBC_TUNABLES", "LD_PRELOAD") if os.environ.get(k)]
    text = "heap retained (--malloc retain)" if choice == "retain" else "the C library's default"
    return f"malloc: {text}" + (f"; environment {' '.join(named)}" if named else "")


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def to_device(batch: Batch, device: torch.device) -> Batch:
    return Batch(batch.uih.to(device), batch.candidates.to(device), batch.labels.to(device))


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def random_batches(
    model_cfg: hstu_model.ModelConfig, vocab: dict[str, int], batch_size: int, count: int
) -> list[Batch]:
    """`count` random batches of full histories (history_length events each, the worst case of a
    batch)."""
    lengths = [model_cfg.history_length] * batch_size
    tables = model_cfg.contextual_tables()
    return [random_batch(lengths, vocab, seed=i, contextual_tables=tables) for i in range(count)]


def training_setup(
    cfg: hstu_model.HSTUConfig,
    vocab: dict[str, int],
    batch_size: int,
    count: int,
    device: torch.device,
) -> tuple[hstu_model.Trainer, list[Batch]]:
    """A freshly seeded model of `cfg` on `device` with its trainer, and `count` random batches
    of full histories (history_length events each, the worst case of a batch) on `device`."""
    hstu_model.seed_everything(0)
    model = hstu_model.HSTURanker(cfg.model, vocab, device=device)
    trainer = hstu_model.Trainer(model, cfg)
    batches = [to_device(b, device) for b in random_batches(cfg.model, vocab, batch_size, count)]
    return trainer, batches


def measure(
    cfg: hstu_model.HSTUConfig,
    vocab: dict[str, int],
    batch_size: int,
    steps: int,
    warmup: int,
    device: torch.device,
) -> Result:
    """One run: `warmup` untimed steps, `steps` timed steps, one timed evaluation."""
    trainer, batches = training_setup(cfg, vocab, batch_size, steps + warmup, device)
    for batch in batches[:warmup]:
        trainer.train_step(batch)
    synchronize(device)
    with OtherLoad() as train_other:
        start = time.perf_counter()
        for batch in batches[warmup:]:
            trainer.train_step(batch)
        synchronize(device)
        train_seconds = time.perf_counter() - start
    with OtherLoad() as eval_other:
        start = time.perf_counter()
        trainer.evaluate(batches[warmup:])
        synchronize(device)
        eval_seconds = time.perf_counter() - start
    samples = steps * batch_size
    return Result(
        1000 * train_seconds / steps,
        samples / train_seconds,
        train_other.value,
        samples / eval_seconds,
        eval_other.value,
    )


@dataclass
class Side:
    """One model of the side-by-side: its training step, its timed rounds and a batch to
    profile it on."""

    step: Callable[[Batch], torch.Tensor]
    seconds: list[float] = field(default_factory=list)
    other: list[float] = field(default_factory=list)
    faults_per_step: list[float] = field(default_factory=list)
    batch: Batch | None = None

    def run(self, batches: list[Batch]) -> None:
        faults = minor_faults()
        with OtherLoad() as other:
            start = time.perf_counter()
            for batch in batches:
                self.step(batch)
            self.seconds.append(time.perf_counter() - start)
        self.faults_per_step.append((minor_faults() - faults) / len(batches))
        if other.value is not None:
            self.other.append(other.value)


def adam_step(
    model: torch.nn.Module, loss_of: Callable[[Batch], torch.Tensor]
) -> Callable[[Batch], torch.Tensor]:
    """A training step of `model` with Adam over all its parameters; returns the loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()

    def step(batch: Batch) -> torch.Tensor:
        loss = loss_of(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


LINEAR_PRODUCTS = ("aten::mm", "aten::addmm")
"""The linear layers' matrix products: the same shapes and FLOPs in both models (the
reference's attention products are `aten::bmm`, ours run inside the attention kernel)."""
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")


@dataclass(frozen=True)
class StepProfile:
    """Seconds of one profiled training step, by kind (CPU self time of the ops)."""

    linear_products: float
    optimizer: float
    rest: float

    @property
    def total(self) -> float:
        return self.linear_products + self.optimizer + self.rest


def profile_step(side: Side) -> StepProfile:
    """One step of `side` on its batch under torch.profiler, split by kind."""
    from torch.profiler import ProfilerActivity, profile

    # Kineto reports at ERROR that it found no GPU, which is the expected state here.
    os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        side.step(side.batch)
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    products = sum(e.self_cpu_time_total for e in events if e.key in LINEAR_PRODUCTS)
    optimizer = sum(e.cpu_time_total for e in events if e.key.startswith(OPTIMIZER_PREFIXES))
    return StepProfile(products / 1e6, optimizer / 1e6, (total - products - optimizer) / 1e6)


def side_by_side(
    ref: reference_checkout.Reference,
    name: str,
    kernel: str,
    batch_size: int,
    steps: int,
    rounds: int,
) -> tuple[Side, Side]:
    """Our model and the reference's with the same weights, trained in interleaved rounds."""
    cfg = hstu_model.preset(name).replace(
        model={
            "kernel": kernel,
            "position_buckets": reference_checkout.POSITION_TABLE_ROWS,
            "time_buckets": reference_checkout.TIME_TABLE_ROWS - 1,
        }
    )
    vocab = DEFAULT_VOCABS[name]
    shape = reference_checkout.shape_of(cfg.model, vocab)
    ref_cfg = reference_checkout.build_config(ref, shape)
    tables = reference_checkout.build_tables(ref, shape)
    reference_checkout.check_wiring(ref_cfg, tables)
    theirs = reference_checkout.build_model(ref, ref_cfg, tables, seed=0)
    ours = hstu_model.HSTURanker(cfg.model, vocab)
    load_reference_state_dict(ours, theirs.state_dict())

    def kjt(features: Any) -> Any:
        return ref.KeyedJaggedTensor(
            keys=features.keys(),
            values=features.values().clone(),
            lengths=features.lengths().clone(),
        )

    def their_loss(batch: Batch) -> torch.Tensor:
        return theirs(kjt(batch.uih), kjt(batch.candidates))[2]["listen_plus"]

    def our_loss(batch: Batch) -> torch.Tensor:
        return ours.loss(ours(batch.uih, batch.candidates).logits, batch.labels)

    our_side = Side(adam_step(ours, our_loss))
    their_side = Side(adam_step(theirs, their_loss))
    batches = random_batches(cfg.model, vocab, batch_size, steps + 1)
    # The untimed first step: the same weights and batch must give the same loss.
    a, b = our_side.step(batches[0]), their_side.step(batches[0])
    if not torch.allclose(a, b, rtol=1e-4, atol=1e-6):
        raise SystemExit(f"error: {name} {kernel}: our loss {a.item()} != reference {b.item()}")
    for _ in range(rounds):
        our_side.run(batches[1:])
        their_side.run(batches[1:])
    our_side.batch = their_side.batch = batches[0]
    return our_side, their_side


def reference_main(args: argparse.Namespace) -> None:
    """The side-by-side with the reference (see the module docstring)."""
    if args.device != "cpu":
        raise SystemExit("error: --reference runs on CPU (--device cpu)")
    checkout = args.reference / "recommendation_v4"
    root = reference_checkout.check_reference(checkout if checkout.is_dir() else args.reference)
    ref = reference_checkout.import_reference(root)
    reference_checkout.forbid_triton()
    presets = args.presets or ["small"]
    kernels = args.kernels or ["pytorch", "native"]
    if "triton" in kernels:
        raise SystemExit("error: --reference runs on CPU, where there are no triton kernels")
    print(
        f"torch {torch.__version__}, cpu, {args.threads} threads, fp32, Adam over all "
        f"parameters on both sides, {args.rounds} interleaved rounds; reference {root}; "
        f"{malloc_setting(args.malloc)}; load average before: {load()}"
    )
    print(
        f"{'preset':<8}{'kernel':<9}{'batch':>6}{'history':>8}{'steps':>7}{'ours/s':>9}"
        f"{'ref/s':>9}{'ours/ref':>10}{'best ratio':>12}{'other ours/ref':>16}"
        f"{'faults/step ours/ref':>22}"
    )
    profiles = []
    for name in presets:
        base = hstu_model.preset(name)
        batch_size = args.batch_size or base.train.batch_size
        steps = args.steps or DEFAULT_STEPS.get(name, 5)
        for kernel in kernels:
            ours, theirs = side_by_side(ref, name, kernel, batch_size, steps, args.rounds)
            if args.profile:
                profiles.append((name, kernel, profile_step(ours), profile_step(theirs)))
            samples = steps * batch_size
            rate = [samples * len(s.seconds) / sum(s.seconds) for s in (ours, theirs)]
            best = [samples / min(s.seconds) for s in (ours, theirs)]
            others = "/".join(
                f"{sum(s.other) / len(s.other):.2f}" if s.other else "-" for s in (ours, theirs)
            )
            faults = "/".join(
                f"{sum(s.faults_per_step) / len(s.faults_per_step):,.0f}" for s in (ours, theirs)
            )
            print(
                f"{name:<8}{kernel:<9}{batch_size:>6}{base.model.history_length:>8}"
                f"{steps * args.rounds:>7}{rate[0]:>9.2f}{rate[1]:>9.2f}"
                f"{rate[0] / rate[1]:>9.2f}x{best[0] / best[1]:>11.2f}x{others:>16}"
                f"{faults:>22}",
                flush=True,
            )
    print(f"load average after: {load()}")
    if args.profile:
        print_profiles(profiles)


def print_profiles(profiles: list[tuple[str, str, StepProfile, StepProfile]]) -> None:
    print(
        "\none profiled step, ms of CPU self time: linear-layer products / optimizer / rest"
        " (attention, norms, copies, lookups)"
    )
    print(f"{'preset':<8}{'kernel':<9}{'ours':>24}{'reference':>24}{'ceiling':>10}")
    for name, kernel, ours, theirs in profiles:
        parts = [
            "/".join(f"{1000 * x:.0f}" for x in (p.linear_products, p.optimizer, p.rest))
            for p in (ours, theirs)
        ]
        ceiling = theirs.total / (ours.linear_products + ours.optimizer)
        print(f"{name:<8}{kernel:<9}{parts[0]:>24}{parts[1]:>24}{ceiling:>9.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    presets = sorted(hstu_model.config.PRESETS)
    cuda = torch.cuda.is_available()
    parser.add_argument(
        "--presets", nargs="+", choices=presets, help="default: tiny and small (--reference: small)"
    )
    parser.add_argument(
        "--kernels",
        nargs="+",
        choices=["pytorch", "native", "triton"],
        help="default: pytorch, native and, with CUDA, triton (--reference: pytorch, native)",
    )
    parser.add_argument("--batch-size", type=int, help="default: the preset's batch size")
    parser.add_argument("--steps", type=int, help="timed steps per run (default: tiny 20, small 3)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best is kept")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cuda" if cuda else "cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--reference",
        type=Path,
        metavar="CHECKOUT",
        help="train side by side with the reference DlrmHSTU of this checkout",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="--reference: interleaved rounds (default 3)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="--reference: split one profiled step of each side into matrix products, "
        "optimizer and the rest",
    )
    parser.add_argument(
        "--malloc",
        choices=["default", "retain"],
        default="default",
        help="retain: keep freed memory in the heap (glibc), so that large tensors are not "
        "faulted in again each step; applies to every model of the run (default: the C "
        "library's own behaviour)",
    )
    args = parser.parse_args()
    if args.malloc == "retain":
        retain_freed_memory()
    torch.set_num_threads(args.threads)
    quiet_fx_tracing_notice()
    if args.reference is not None:
        reference_main(args)
        return
    args.presets = args.presets or ["tiny", "small"]
    args.kernels = args.kernels or ["pytorch", "native", *(["triton"] if cuda else [])]
    device = torch.device(args.device)
    print(
        f"torch {torch.__version__}, device {device}, {args.threads} threads, "
        f"best of {args.repeat}, full histories; {malloc_setting(args.malloc)}; "
        f"load average before: {load()}"
    )
    header = (
        f"{'preset':<8}{'kernel':<9}{'batch':>6}{'history':>8}{'step ms':>10}{'train/s':>9}"
        f"{'eval/s':>9}{'GFLOP/sample':>13}{'full N^2':>10}{'train GFLOP/s':>14}"
        f"{'eval GFLOP/s':>13}{'other':>12}"
    )
    print(header)
    for name in args.presets:
        base = hstu_model.preset(name)
        vocab = DEFAULT_VOCABS[name]
        batch_size = args.batch_size or base.train.batch_size
        steps = args.steps or DEFAULT_STEPS.get(name, 5)
        warmup = WARMUP_STEPS.get(name, 1)
        count = flops_per_sample(base.model)
        for kernel in args.kernels:
            cfg = base.replace(model={"kernel": kernel}, sharding={"compute_device": device.type})
            runs = [
                measure(cfg, vocab, batch_size, steps, warmup, device) for _ in range(args.repeat)
            ]
            best = min(runs, key=lambda r: r.step_ms)
            best_eval = max(runs, key=lambda r: r.eval_rate)
            train_gflops = best.train_rate * count.train_total / 1e9
            eval_gflops = best_eval.eval_rate * count.forward_total / 1e9
            others = "/".join(
                "-" if x is None else f"{x:.2f}" for x in (best.train_other, best_eval.eval_other)
            )
            print(
                f"{name:<8}{kernel:<9}{batch_size:>6}{cfg.model.history_length:>8}"
                f"{best.step_ms:>10.1f}{best.train_rate:>9.1f}{best_eval.eval_rate:>9.1f}"
                f"{count.train_total / 1e9:>13.4f}{count.train_total_full / 1e9:>10.4f}"
                f"{train_gflops:>14.1f}{eval_gflops:>13.1f}{others:>12}",
                flush=True,
            )
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
