"""What one dense training step keeps for its backward, per sample, with and without the STU
layers' activation recomputation (`ModelConfig.recompute_layers`).

    uv run python packages/hstu-model/benchmarks/bench_saved_memory.py [--kernel triton]

Measured on the CPU at small token counts, at the yambda-5b preset's widths (512 wide, 4 heads
of 128, 3 layers) under its bf16 autocast: one forward of `PlainTableRanker` and its loss in
`torch.autograd.graph.saved_tensors_hooks`, which sees every tensor autograd keeps; each
storage is counted once, whatever views of it are saved. Bytes saved inside the STU layers
(between a layer's forward pre-hook and its forward hook) are kept apart from the rest (the
token MLPs, embeddings, positional embeddings, postprocessor and head).

What a sample holds grows linearly with its tokens for every kernel that keeps no token x
token matrix (the Triton and native attention: the script measures two token counts and
prints the bytes per token of each, to show it), so the figure at --target-tokens is
bytes per token times that count. With recomputation the backward holds, beside what was
saved, one layer's activations at a time while it recomputes that layer: the peak printed is
saved + one layer's share of the plain step's layer bytes. Not counted: parameters, their
gradients and Adam's states (per model, not per sample), and the transient workspace of a
single op.

With --kernel triton the Triton launches are recorded as on an H100 instead of run
(hstu_ops.gpu_compile.record_launches; the interpreter takes hours at these widths): the
outputs are then not the step's, but the autograd functions save the same tensors, of the
same sizes, as on a GPU.
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kernel", default="native", choices=("pytorch", "native", "triton"),
        help="hstu-ops family (triton: its launches recorded, not run)",
    )  # fmt: skip
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument(
        "--tokens", type=int, nargs=2, default=(64, 128), help="two token counts per sample"
    )
    parser.add_argument("--target-tokens", type=int, default=2048)
    parser.add_argument("--target-batch", type=int, default=1024)
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") and args.kernel == "triton":
        parser.error(
            "--kernel triton records the compiled kernels' launches: unset TRITON_INTERPRET"
        )
    import torch

    torch.manual_seed(0)
    mib = 2**20
    print(
        f"kernel {args.kernel}, batch {args.batch}, yambda-5b widths, bf16 autocast; "
        f"torch {torch.__version__}"
    )
    print(f"{'recompute':<10}{'tokens':>7}{'layers MiB':>12}{'rest MiB':>10}{'B/token':>10}")
    results = {}
    for recompute in (False, True):
        for tokens in args.tokens:
            with recorded(args.kernel):
                layers, rest = saved_bytes(args.kernel, args.batch, tokens, recompute)
            results[recompute, tokens] = (layers, rest)
            each = (layers + rest) / args.batch / tokens
            print(
                f"{'on' if recompute else 'off':<10}{tokens:>7}{layers / mib:>12.3f}"
                f"{rest / mib:>10.3f}{each:>10,.0f}",
                flush=True,
            )
    # Per token from the difference of the two counts: what does not grow with the tokens
    # (bf16 copies of the weights, saved once a step) drops out.
    low, high = args.tokens
    span = args.batch * (high - low)

    def slope(recompute: bool, part: int | None) -> float:
        pick = (lambda r: r[part]) if part is not None else sum
        return (pick(results[recompute, high]) - pick(results[recompute, low])) / span

    n, target = args.target_tokens, args.target_batch
    layer_share = slope(False, 0) * n / num_layers()
    print(
        f"per token: {slope(False, None):,.0f} B without recomputation "
        f"({slope(False, 0):,.0f} in the layers), {slope(True, None):,.0f} B with it "
        f"({slope(True, 0):,.0f} in the layers)"
    )
    for recompute in (False, True):
        saved = slope(recompute, None) * n
        peak = saved + (layer_share if recompute else 0.0)
        print(
            f"recompute {'on ' if recompute else 'off'}: saved {saved / mib:,.1f} MiB/sample at "
            f"{n} tokens, peak in the backward {peak / mib:,.1f} MiB/sample, "
            f"{peak * target / 2**30:,.1f} GiB at batch {target}"
        )
    return 0


def recorded(kernel: str):
    """For triton: its launches recorded as on an H100, not run; else nothing."""
    import contextlib

    if kernel != "triton":
        return contextlib.nullcontext()
    from hstu_ops.gpu_compile import GPU_TARGETS, record_launches

    return record_launches(GPU_TARGETS["sm90"])


def num_layers() -> int:
    import hstu_model

    return hstu_model.preset("yambda-5b").model.num_layers


def saved_bytes(kernel: str, batch: int, tokens: int, recompute: bool) -> tuple[int, int]:
    """(bytes autocast-step forward saves inside the STU layers, bytes it saves elsewhere) for
    one batch of `batch` samples of `tokens` tokens, each storage counted once."""
    import torch

    import hstu_model
    from hstu_model import PlainTableRanker
    from hstu_model.testing import random_plain_batch

    cfg = hstu_model.preset("yambda-5b")
    m = cfg.model
    history = tokens - m.contextual_seq_len - m.num_candidates
    small = {"uid": 100, "item_id": 1000, "artist_id": 100, "album_id": 100}
    features = tuple(
        type(f)(**{**f.__dict__, "num_embeddings": 100}) for f in m.contextual_features
    )
    model_cfg = cfg.replace(
        model={
            "kernel": kernel,
            "history_length": history,
            "max_seq_len": tokens,
            "recompute_layers": recompute,
            "contextual_features": features,
        }
    ).model
    model = PlainTableRanker(model_cfg, small).train()
    data = random_plain_batch(
        [history] * batch, small, 0, contextual_tables=model_cfg.contextual_tables()
    )
    seen: set[tuple[int, int]] = set()
    counts = {"layers": 0, "rest": 0}
    where = ["rest"]

    def enter(module, inputs):
        where.append("layers")

    def leave(module, inputs, output):
        where.pop()

    handles = []
    for layer in model.layers:
        handles.append(layer.register_forward_pre_hook(enter))
        handles.append(layer.register_forward_hook(leave))

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if key not in seen and storage.nbytes() > 0:
            seen.add(key)
            counts[where[-1]] += storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(data.uih, data.candidates).logits
        loss = model.loss(logits.float(), data.labels)
    loss.backward()  # the step runs whole: what was saved is what its backward needs
    for h in handles:
        h.remove()
    return counts["layers"], counts["rest"]


if __name__ == "__main__":
    sys.exit(main())
