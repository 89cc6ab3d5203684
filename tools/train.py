"""Train the HSTU ranking model end to end; print progress to stderr and one JSON line to stdout.

With no arguments it synthesizes a small dataset in the exact Yambda schema (with a planted,
learnable signal), trains the `tiny` preset on it, evaluates AUC on the held-out last day and
writes an MLPerf log. `--data ROOT --size SIZE` trains on a Yambda download instead.

`--checkpoint-dir DIR` saves crash-exact checkpoints (hstu_model.checkpoint) every
`--checkpoint-every` steps and/or `--checkpoint-seconds` seconds; `--resume auto` continues from
the newest complete one: same weights, optimizer states, RNG, data position (mid-window), eval
schedule and MLPerf log (no second run_start; records written after the checkpoint by the
crashed process move to mlperf.log.discarded), so the run ends bit-identical to one that was
never interrupted (compare `weights_sha256`). A non-finite loss stops the run before it can be
checkpointed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

import hstu_model
import yambda_data
from hstu_model import checkpoint as ckpt
from mlperf_compliance import (
    DLRMv4RunConfig,
    MLPerfLogger,
    RunTracker,
    dlrmv4_run_start_keys,
    eval_schedule,
)
from yambda_data.loader import make_loader

RUN_IDENTITY = ("preset", "data", "size", "users", "seed", "steps", "evals", "kernel", "target_auc")
"""Arguments a resumed run must share with the checkpointed one (the others, such as --workers
and --out, do not change the result)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    # yambda-5b's tables (about 600 GB) need sharding across devices, which this tool lacks.
    p.add_argument("--preset", default="tiny", choices=("tiny",))
    p.add_argument("--data", type=Path, help="Yambda root (default: synthesize one under --out)")
    p.add_argument("--size", default="50m", help="dataset size folder under flat/ (default 50m)")
    p.add_argument("--users", type=int, default=400, help="users of the synthetic dataset")
    p.add_argument("--seed", type=int, default=0, help="seed of data, init and order")
    p.add_argument("--steps", type=int, default=600, help="training steps")
    p.add_argument("--evals", type=int, default=3, help="evaluations, evenly spaced")
    p.add_argument("--kernel", choices=("pytorch", "native"), default="native")
    p.add_argument("--workers", type=int, default=1, help="data loader worker processes")
    p.add_argument(
        "--target-auc",
        type=float,
        help="AUC that counts as success (default: 0.75, the MLPerf target, on --data; "
        "0.65 on the synthetic data)",
    )
    p.add_argument("--out", type=Path, default=Path("runs/train"), help="run folder")
    p.add_argument("--checkpoint-dir", type=Path, help="save checkpoints here (default: none)")
    p.add_argument(
        "--checkpoint-every", type=int, default=100, help="steps between checkpoints (0: off)"
    )
    p.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=0.0,
        help="also save when this many seconds passed since the last save (0: off)",
    )
    p.add_argument(
        "--keep-checkpoints", type=int, default=2, help="complete checkpoints to keep (newest)"
    )
    p.add_argument(
        "--resume",
        choices=("never", "auto"),
        default="never",
        help="auto: continue from the newest complete checkpoint in --checkpoint-dir, if any",
    )
    args = p.parse_args(argv)
    if args.steps < 1 or not 1 <= args.evals <= args.steps:
        p.error(f"need --steps >= 1 and 1 <= --evals <= --steps, got {args.steps} and {args.evals}")
    if args.checkpoint_every < 0 or not args.checkpoint_seconds >= 0:
        p.error("--checkpoint-every and --checkpoint-seconds must be >= 0")
    if args.keep_checkpoints < 1:
        p.error(f"--keep-checkpoints must be >= 1, got {args.keep_checkpoints}")
    if args.checkpoint_dir is None and args.resume != "never":
        p.error("--resume auto needs --checkpoint-dir")
    if args.checkpoint_dir is not None and not (args.checkpoint_every or args.checkpoint_seconds):
        p.error("--checkpoint-dir needs --checkpoint-every > 0 or --checkpoint-seconds > 0")
    return args


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def model_crosses(model: hstu_model.ModelConfig) -> tuple[yambda_data.CrossFeature, ...]:
    """yambda-data's cross features hashed into the model's contextual tables (name -> rows)."""
    specs = {spec.name: spec for spec in yambda_data.CROSS_FEATURES}
    tables = model.contextual_tables()
    unknown = sorted(set(tables) - set(specs))
    if unknown:
        raise ValueError(f"model.contextual_features: yambda-data has no cross named {unknown}")
    return tuple(
        yambda_data.CrossFeature(name, specs[name].keys, rows, specs[name].salt)
        for name, rows in tables.items()
    )


def run_identity(args: argparse.Namespace) -> dict:
    return {name: None if (v := getattr(args, name)) is None else str(v) for name in RUN_IDENTITY}


def find_resume_point(args: argparse.Namespace) -> ckpt.CheckpointInfo | None:
    """The checkpoint to resume from (None: start afresh); refuses one of another run, and
    refuses to start afresh over an earlier run's checkpoints."""
    if args.checkpoint_dir is None:
        return None
    found = ckpt.latest(args.checkpoint_dir)
    if found is None:
        return None
    if args.resume == "never":
        raise FileExistsError(
            f"{args.checkpoint_dir} holds checkpoints of an earlier run (newest: {found.path.name});"
            " pass --resume auto to continue it, or use an empty --checkpoint-dir"
        )
    saved, now = found.extra["run"], run_identity(args)
    differ = [
        f"--{k.replace('_', '-')} {saved[k]} then, {now[k]} now" for k in now if saved[k] != now[k]
    ]
    if differ:
        raise ValueError(f"{found.path} is a checkpoint of another run: {'; '.join(differ)}")
    return found


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.target_auc is None:
        args.target_auc = 0.65 if args.data is None else 0.75
    args.out.mkdir(parents=True, exist_ok=True)
    resume = find_resume_point(args)
    log_path = args.out / "mlperf.log"
    if resume is not None:  # records the crashed process wrote after the checkpoint go
        ckpt.rewind_file(log_path, resume.extra["mlperf_log_bytes"])
    # Records name their source file relative to the repository, not this machine's path.
    root_dir = str(Path(__file__).resolve().parents[1])
    mllog = MLPerfLogger(log_path, root_dir=root_dir, resume=resume is not None)
    tracker = RunTracker(mllog, target_accuracy=args.target_auc)
    if resume is not None:
        tracker.load_state_dict(resume.extra["mlperf"])  # no second init_start / run_start
    with tracker.guard():  # an exception or a signal ends the log with run_stop "aborted"
        if tracker.state == "new":
            tracker.init_start()
        summary = run(args, mllog, tracker, resume)
    mllog.close()
    print(json.dumps(summary), flush=True)
    return summary


def rng_neutral(loader):
    """The loader's batches; starting its iterator draws from torch's global generator, which
    would shift the model's random numbers by where a run was resumed, so that draw is undone."""
    with torch.random.fork_rng(devices=[]):
        batches = iter(loader)
    yield from batches


def run(
    args: argparse.Namespace,
    mllog: MLPerfLogger,
    tracker: RunTracker,
    resume: ckpt.CheckpointInfo | None,
) -> dict:
    cfg = hstu_model.preset(args.preset).replace(
        model={"kernel": args.kernel}, train={"seed": args.seed}
    )
    root = args.data
    if root is None:
        root = args.out / "data"
        synth = yambda_data.SynthConfig(users=args.users, seed=args.seed, size=args.size)
        yambda_data.synthesize(root, synth)
    # Preprocessing and the sample store are reused while the raw file is unchanged.
    store = yambda_data.prepare_store(root, args.size, args.out / "prepared", min_history=16)
    sample_cfg = yambda_data.SampleConfig(
        history_length=cfg.model.history_length, min_history=store.min_history
    )
    batch_size = cfg.train.batch_size
    windows = tuple(range(store.num_windows))  # strict time order, shuffled within a window
    eval_plan = yambda_data.BatchPlan(
        (yambda_data.TEST,), cfg.train.eval_batch_size, shuffle=False, drop_last=False
    )
    eval_samples = eval_plan.num_samples(store)
    log(
        f"data: {store.manifest['num_train_anchors']} train anchors in {len(windows)} windows, "
        f"{eval_samples} eval samples, vocab {store.vocab}"
    )

    crosses = model_crosses(cfg.model)  # the model's table sizes, not the reference's

    def loader(plan: yambda_data.BatchPlan):
        return make_loader(store.path, sample_cfg, plan, num_workers=args.workers, crosses=crosses)

    def train_plan(epoch: int = 0, first: int = 0, skip: int = 0) -> yambda_data.BatchPlan:
        """Pass `epoch` over the windows from window `first` on, less `skip` samples of it."""
        return yambda_data.BatchPlan(
            windows[first:], batch_size, seed=args.seed, epoch=epoch, skip=skip
        )

    # Where the data stands, counted in the samples each window trains per pass.
    plan = dataclasses.replace(train_plan(), shuffle=False)  # the same counts, unshuffled
    position = ckpt.StreamPosition(
        [dataclasses.replace(plan, sources=(w,)).num_samples(store) for w in windows]
    )

    def train_stream(start_epoch: int, first: int, skip: int):
        # One pass over the windows is an epoch; a run longer than that starts a new pass. A
        # resumed run starts `skip` samples into window `first` of pass `start_epoch`.
        for epoch in itertools.count(start_epoch):
            for batch in rng_neutral(loader(train_plan(epoch, first, skip))):
                yield epoch, batch
            first, skip = 0, 0

    hstu_model.seed_everything(args.seed)
    model = hstu_model.HSTURanker(cfg.model, store.vocab.as_dict())
    trainer = hstu_model.Trainer(model, cfg)
    eval_batches = loader(eval_plan)
    run_json = vars(args) | {"data": str(root)}
    config_path = cfg.save_json(args.out / "config.json", run=run_json)
    checkpoints = None
    if args.checkpoint_dir is not None:
        checkpoints = ckpt.Checkpointer(
            args.checkpoint_dir,
            every_steps=args.checkpoint_every,
            every_seconds=args.checkpoint_seconds,
            keep=args.keep_checkpoints,
            config=json.loads(config_path.read_text()),
        )

    precision = "bfloat16" if cfg.train.autocast_bf16 else "fp32"
    run_config = DLRMv4RunConfig(
        global_batch_size=batch_size,
        learning_rate=cfg.optimizer.dense_lr,
        sparse_learning_rate=cfg.optimizer.sparse_lr,
        micro_batch_size=batch_size,
        config_filename=config_path.name,
        precision_linear=precision,
        precision_attn=precision,
        precision_comm="fp32",
        train_samples=args.steps * batch_size,
        eval_samples=eval_samples,
        max_sequence_length=cfg.model.max_seq_len,
        eval_every_data_pct=1.0 / args.evals,
        warmup_steps=cfg.optimizer.warmup_steps,
        seed=args.seed,
    )
    # What the loop carries from one eval interval to the next (and through a checkpoint).
    loop = {"epoch": 0, "trained_seconds": 0.0, "auc": float("nan")}
    if resume is None:
        mllog.submission_info(org="reference", platform=f"{os.cpu_count()}xCPU", division="open")
        mllog.cache_clear()
        mllog.hyperparameters(dlrmv4_run_start_keys(run_config))
        tracker.init_stop()
        tracker.run_start()
    else:  # last: the RNG continues from the checkpoint, after model init drew from it
        extra = checkpoints.restore(resume, trainer).extra
        position.load_state_dict(extra["data"])
        loop = extra["loop"]
        log(f"resumed from {resume.path} at step {trainer.step}, data position {extra['data']}")

    def save_checkpoint(trained_seconds: float) -> float:
        """Save the run as it stands after `trainer.step`; returns the seconds it took."""
        began = time.perf_counter()
        extra = {
            "data": position.state_dict(),
            "mlperf": tracker.state_dict(),
            "mlperf_log_bytes": mllog.path.stat().st_size,
            "loop": loop | {"trained_seconds": trained_seconds},
            "run": run_identity(args),
        }
        checkpoints.save(trainer, extra)
        return time.perf_counter() - began

    stream = train_stream(position.epoch, position.source, position.consumed)
    schedule = eval_schedule(run_config.train_samples, batch_size, run_config.eval_every_data_pct)
    for eval_at in schedule[tracker.num_evals :]:  # a resumed run skips the evals it logged
        if not tracker.in_block:
            tracker.block_start(trainer.step * batch_size, first_epoch_num=loop["epoch"])
        started = time.perf_counter()
        while trainer.step * batch_size < eval_at:
            loop["epoch"], batch = next(stream)
            loss = trainer.train_step(batch)
            step = trainer.step
            if not math.isfinite(loss):  # stop before a checkpoint could save the bad state
                last = checkpoints.latest() if checkpoints else None
                raise FloatingPointError(
                    f"non-finite loss {loss} at step {step} (epoch {loop['epoch']}); "
                    f"last good checkpoint: {last.path if last else 'none'}"
                )
            position.advance(batch_size)
            seconds = loop["trained_seconds"] + time.perf_counter() - started
            if step % 100 == 0:
                rate = f"{step * batch_size / seconds:.0f} samples/s"
                log(f"step {step}/{args.steps} epoch {loop['epoch']} loss {loss:.4f} {rate}")
            if checkpoints is not None and checkpoints.schedule.due(step):
                started += save_checkpoint(seconds)  # saving is not training time
        loop["trained_seconds"] += time.perf_counter() - started
        tracker.block_stop(eval_at, first_epoch_num=loop["epoch"])
        loop["auc"] = trainer.evaluate(rng_neutral(eval_batches)).auc
        log(f"eval at step {trainer.step}: auc {loop['auc']:.4f} (target {args.target_auc})")
        if tracker.eval(loop["auc"], eval_at, epoch_num=loop["epoch"]):
            break
    status = tracker.run_stop()
    samples = trainer.step * batch_size
    summary = {"eval_auc": round(loop["auc"], 6), "train_samples": samples, "status": status}
    return summary | {
        "samples_per_s": round(samples / loop["trained_seconds"], 1),
        "mlperf_log": str(mllog.path),
        "weights_sha256": ckpt.state_digest(trainer),
        "resumed_from_step": None if resume is None else resume.step,
    }


if __name__ == "__main__":
    try:
        main()
    except FloatingPointError as error:
        sys.exit(f"train.py: {error}")
