"""How many operations one dense training step launches, counted on the CPU side of
torch.profiler: what a CUDA graph (one launch for all) or fusion would remove.

    uv run python packages/hstu-model/benchmarks/bench_step_launches.py [--tokens 64 --batch 2]

bench_gpu.py's dense-step (PlainTableRanker at the yambda-5b widths, bf16 autocast, forward,
backward, gradient clipping and Adam) runs on CPU tensors at a small shape, one step after one
untimed step, under the profiler. Counted per phase (forward with the loss, backward,
optimizer):

- torch ops: the profiler's `aten::` events that call no other `aten::` op (each such op is one
  kernel on a GPU, give or take), leaving out those that only make views or read metadata;
- host synchronizations: `aten::_local_scalar_dense` (`.item()`, `int(t)`, `bool(t)`) and
  `aten::nonzero`, each of which waits for the GPU;
- with `--kernel triton`: the Triton kernels the hstu-ops launchers start, recorded as on an
  H100 instead of run (hstu_ops.gpu_compile.record_launches; the outputs are then not the
  step's, the counts are).

On a GPU, Adam runs as `_foreach_*` ops over lists of tensors (one launch per chunk of tensors)
or fused (one launch per list); on the CPU its ops run tensor by tensor, so the optimizer's
count here is the number of per-tensor ops, an upper bound.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

VIEW_OPS = frozenset(
    f"aten::{name}"
    for name in (
        "view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute",
        "expand", "expand_as", "slice", "select", "unsqueeze", "squeeze", "split",
        "split_with_sizes", "narrow", "unbind", "chunk", "alias", "detach", "detach_",
        "empty", "empty_like", "empty_strided", "resolve_conj", "resolve_neg", "lift_fresh",
        "unflatten", "flatten", "view_as", "numpy_T", "_unsafe_view", "set_", "result_type",
        "is_nonzero", "size", "stride", "dim", "contiguous", "to", "_to_copy_noop",
        "_has_compatible_shallow_copy_type", "requires_grad_", "_version",
    )
)  # fmt: skip
"""Ops that launch nothing on a GPU: views, metadata, allocation."""
SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="triton", choices=("pytorch", "triton"))
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument(
        "--no-recompute", action="store_true", help="without the layers' recomputation"
    )
    args = parser.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, str(Path(__file__).parent))
    import bench_gpu

    setting = bench_gpu.yambda_5b_setting(1000).with_tokens(args.tokens).with_rows(1000)
    if args.no_recompute:
        setting = bench_gpu.dataclasses.replace(
            setting, cfg=setting.cfg.replace(model={"recompute_layers": False})
        )
    device = torch.device("cpu")
    triton_launches = Counter()
    recording = None
    if args.kernel == "triton":
        from hstu_ops.gpu_compile import GPU_TARGETS, record_launches

        recording = record_launches(GPU_TARGETS["sm90"])
        recorder = recording.__enter__()
        run_one = recorder.run
        phase = ["none"]

        def counted(kernel, *a, **kw):
            if not recorder.tuning:
                triton_launches[phase[0]] += 1
            return run_one(kernel, *a, **kw)

        recorder.run = counted
        tune_one = recorder.tune

        def tuned(autotuner, *a, **kw):  # one launch, whichever configuration wins
            triton_launches[phase[0]] += 1
            return tune_one(autotuner, *a, **kw)

        recorder.tune = tuned
    try:
        step = bench_gpu.dense_step_runners(args.batch, setting, device)(args.kernel)
        step()  # untimed: first-call work (lazy imports, caches)
        triton_launches.clear()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            if recording is not None:
                # Which phase a launch belongs to: the innermost open step label.
                original = torch.profiler.record_function

                class Labelled(original):
                    def __enter__(self):
                        if self.name in bench_gpu.STEP_PHASES:
                            phase[0] = self.name
                        return super().__enter__()

                torch.profiler.record_function = Labelled
                try:
                    step()
                finally:
                    torch.profiler.record_function = original
            else:
                step()
    finally:
        if recording is not None:
            recording.__exit__(None, None, None)
    counts = count_ops(prof.events())
    m = setting.cfg.model
    print(
        f"dense-step, kernel {args.kernel}, batch {args.batch}, {setting.tokens} tokens/sample, "
        f"{m.num_layers} layers, recompute {'off' if args.no_recompute else 'on'}; "
        f"torch {torch.__version__}"
    )
    print(f"{'phase':<18}{'torch ops':>10}{'host syncs':>12}{'triton':>8}{'launches':>10}")
    total = Counter()
    for name in bench_gpu.STEP_PHASES:
        ops, syncs = counts.get(name, (0, 0))
        launches = ops + triton_launches[name]
        total.update({"ops": ops, "syncs": syncs, "triton": triton_launches[name]})
        print(f"{name:<18}{ops:>10}{syncs:>12}{triton_launches[name]:>8}{launches:>10}")
    print(
        f"{'whole step':<18}{total['ops']:>10}{total['syncs']:>12}{total['triton']:>8}"
        f"{total['ops'] + total['triton']:>10}"
    )
    return 0


def count_ops(events) -> dict[str, tuple[int, int]]:
    """phase label -> (leaf torch ops that launch work, host synchronizations)."""
    found: dict[str, list[int]] = {}
    for event in events:
        if not event.name.startswith("aten::"):
            continue
        label, parent = None, event.cpu_parent
        while parent is not None:
            if parent.name.startswith("step: "):
                label = parent.name
            parent = parent.cpu_parent
        if label is None:
            continue
        entry = found.setdefault(label, [0, 0])
        if event.name in SYNC_OPS:
            entry[1] += 1
        has_aten_child = any(c.name.startswith("aten::") for c in event.cpu_children)
        if not has_aten_child and event.name not in VIEW_OPS:
            entry[0] += 1
    return {k: (v[0], v[1]) for k, v in found.items()}


if __name__ == "__main__":
    sys.exit(main())
