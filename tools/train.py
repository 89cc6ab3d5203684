"""Train the HSTU ranking model end to end; print progress to stderr and one JSON line to stdout.

With no arguments it synthesizes a small dataset in the exact Yambda schema (with a planted,
learnable signal), trains the `tiny` preset on it, evaluates AUC on the held-out last day and
writes an MLPerf log. `--data ROOT --size SIZE` trains on a Yambda download instead.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

import hstu_model
import yambda_data
from mlperf_compliance import (
    DLRMv4RunConfig,
    MLPerfLogger,
    RunTracker,
    dlrmv4_run_start_keys,
    eval_schedule,
)
from yambda_data.loader import make_loader


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
    args = p.parse_args(argv)
    if args.steps < 1 or not 1 <= args.evals <= args.steps:
        p.error(f"need --steps >= 1 and 1 <= --evals <= --steps, got {args.steps} and {args.evals}")
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


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.target_auc is None:
        args.target_auc = 0.65 if args.data is None else 0.75
    args.out.mkdir(parents=True, exist_ok=True)
    # Records name their source file relative to the repository, not this machine's path.
    mllog = MLPerfLogger(args.out / "mlperf.log", root_dir=str(Path(__file__).resolve().parents[1]))
    tracker = RunTracker(mllog, target_accuracy=args.target_auc)
    with tracker.guard():  # an exception or a signal ends the log with run_stop "aborted"
        tracker.init_start()
        summary = run(args, mllog, tracker)
    mllog.close()
    print(json.dumps(summary), flush=True)
    return summary


def run(args: argparse.Namespace, mllog: MLPerfLogger, tracker: RunTracker) -> dict:
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

    def train_stream():
        # One pass over the windows is an epoch; a run longer than that starts a new pass.
        for epoch in itertools.count():
            plan = yambda_data.BatchPlan(windows, batch_size, seed=args.seed, epoch=epoch)
            for batch in loader(plan):
                yield epoch, batch

    hstu_model.seed_everything(args.seed)
    model = hstu_model.HSTURanker(cfg.model, store.vocab.as_dict())
    trainer = hstu_model.Trainer(model, cfg)
    eval_batches = loader(eval_plan)
    config_path = cfg.save_json(args.out / "config.json", run=vars(args) | {"data": str(root)})

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
    mllog.submission_info(org="reference", platform=f"{os.cpu_count()}xCPU", division="open")
    mllog.cache_clear()
    mllog.hyperparameters(dlrmv4_run_start_keys(run_config))
    tracker.init_stop()
    tracker.run_start()

    stream = train_stream()
    step, epoch, trained_seconds, auc = 0, 0, 0.0, float("nan")
    for eval_at in eval_schedule(
        run_config.train_samples, batch_size, run_config.eval_every_data_pct
    ):
        tracker.block_start(step * batch_size, first_epoch_num=epoch)
        started = time.perf_counter()
        while step * batch_size < eval_at:
            epoch, batch = next(stream)
            loss = trainer.train_step(batch)
            step += 1
            if step % 100 == 0:
                rate = step * batch_size / (trained_seconds + time.perf_counter() - started)
                log(f"step {step}/{args.steps} epoch {epoch} loss {loss:.4f} {rate:.0f} samples/s")
        trained_seconds += time.perf_counter() - started
        tracker.block_stop(eval_at, first_epoch_num=epoch)
        auc = trainer.evaluate(eval_batches).auc
        log(f"eval at step {step}: auc {auc:.4f} (target {args.target_auc})")
        if tracker.eval(auc, eval_at, epoch_num=epoch):
            break
    status = tracker.run_stop()
    samples = step * batch_size
    summary = {"eval_auc": round(auc, 6), "train_samples": samples, "status": status}
    return summary | {
        "samples_per_s": round(samples / trained_seconds, 1),
        "mlperf_log": str(mllog.path),
    }


if __name__ == "__main__":
    main()
