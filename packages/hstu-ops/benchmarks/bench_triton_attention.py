"""hstu_mha on a GPU, TRITON against PYTORCH: forward and forward + backward times and TFLOP/s.

Run from the workspace root (needs a CUDA or ROCm GPU; elsewhere it says so and exits 0):

    uv run --package hstu-ops python packages/hstu-ops/benchmarks/bench_triton_attention.py

Without a GPU and with ``TRITON_INTERPRET=1`` in the environment it times the kernels in
Triton's interpreter on CPU tensors instead (wall clock, use a small shape such as
``--batch 2 --seq-len 128 --heads 1 --attn-dim 32 --hidden-dim 32 --dtype fp32``): those
are interpreter times, useful only to compare two versions of the kernels on one machine, never
GPU times.

Defaults: 4 sequences of 4096 tokens, 4 heads, attn_dim = hidden_dim = 128, bfloat16, causal.
Options: --seq-len, --batch, --heads, --attn-dim, --hidden-dim, --dtype {bf16,fp16,fp32},
--no-causal, --targets N (candidates per sequence), --contextual N, --max-attn-len N,
--jagged (lengths drawn uniformly from [seq_len / 2, seq_len]), --repeats N, --skip-pytorch,
--sweep (TRITON only: the default tiles, then variants that change one kernel's tiles, warps
or the pipeline depth; prints one row per variant as it is measured, fastest marked at the end).

FLOPs are useful work, the same figure for both kernels: forward 2 * pairs * (attn_dim +
hidden_dim) per head, where pairs is the number of (query, key) pairs the mask allows (about
half of n^2 per causal sequence); forward + backward 3.5 times that (flash-attention's
convention: the backward's four matmuls plus the recomputation of q k^T). Times are medians of
--repeats runs after warm-up, measured with CUDA events (in the interpreter, with the wall
clock). Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

import hstu_ops
from hstu_ops import Kernel
from hstu_ops.pytorch import hstu_attention_mask

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--attn-dim", type=int, default=128)
    p.add_argument("--hidden-dim", type=int, default=128)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    p.add_argument("--no-causal", dest="causal", action="store_false")
    p.add_argument("--targets", type=int, default=0)
    p.add_argument("--contextual", type=int, default=0)
    p.add_argument("--max-attn-len", type=int, default=0)
    p.add_argument("--jagged", action="store_true")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--skip-pytorch", action="store_true")
    p.add_argument("--sweep", action="store_true")
    return p.parse_args()


def _elapsed_ms(fn, device: torch.device) -> float:
    if device.type == "cpu":
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def _median_ms(fn, repeats: int, device: torch.device) -> float:
    for _ in range(2):  # warm-up (and, the first time, Triton's compilation)
        fn()
    return statistics.median(_elapsed_ms(fn, device) for _ in range(repeats))


def main() -> int:
    args = _parse()
    interpreter = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")
    if not torch.cuda.is_available() and not interpreter:
        print(
            "bench_triton_attention: needs a CUDA or ROCm GPU (torch.cuda.is_available() is False), "
            "or TRITON_INTERPRET=1 for interpreter times; nothing measured."
        )
        return 0
    if not hstu_ops.triton_available():
        print("bench_triton_attention: the triton package is not installed; nothing measured.")
        return 0

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = DTYPES[args.dtype]
    gen = torch.Generator(device="cpu").manual_seed(0)
    if args.jagged:
        lengths = torch.randint(args.seq_len // 2, args.seq_len + 1, (args.batch,), generator=gen)
    else:
        lengths = torch.full((args.batch,), args.seq_len)
    offsets = hstu_ops.complete_cumsum(lengths).to(device)
    total = int(lengths.sum())
    num_targets = None
    if args.targets:
        num_targets = torch.clamp(lengths - args.contextual, min=0).clamp(max=args.targets)
        num_targets = num_targets.to(device)
    q = torch.randn(total, args.heads, args.attn_dim, device=device, dtype=dtype)
    k = torch.randn(total, args.heads, args.attn_dim, device=device, dtype=dtype)
    v = torch.randn(total, args.heads, args.hidden_dim, device=device, dtype=dtype)
    dout = torch.randn(total, args.heads, args.hidden_dim, device=device, dtype=dtype)
    for x in (q, k, v):
        x.requires_grad_()
    options = dict(
        causal=args.causal,
        num_targets=num_targets,
        max_attn_len=args.max_attn_len,
        contextual_seq_len=args.contextual,
    )
    alpha = 1.0 / args.attn_dim**0.5

    pairs = 0
    for i, n in enumerate(lengths.tolist()):  # one sequence at a time: the mask is n x n
        mask = hstu_attention_mask(
            torch.tensor([n], device=device),
            n,
            causal=args.causal,
            num_targets=None if num_targets is None else num_targets[i : i + 1],
            max_attn_len=args.max_attn_len,
            contextual_seq_len=args.contextual,
        )
        pairs += int(mask.sum())
        del mask
    fwd_flops = 2.0 * pairs * (args.attn_dim + args.hidden_dim) * args.heads
    total_flops = 3.5 * fwd_flops

    if device.type == "cpu":
        where = "the CPU, Triton's interpreter (interpreter times, not GPU times)"
    else:
        where = torch.cuda.get_device_name()
    print(
        f"hstu_mha on {where}: {args.batch} sequences "
        f"({'jagged, ' if args.jagged else ''}{total} tokens, longest {int(lengths.max())}), "
        f"{args.heads} heads, attn_dim {args.attn_dim}, hidden_dim {args.hidden_dim}, "
        f"{args.dtype}, causal={args.causal}, targets={args.targets}, "
        f"contextual={args.contextual}, max_attn_len={args.max_attn_len}; "
        f"{pairs:,} attended pairs per head"
    )
    print()
    if args.sweep:
        return sweep(args, q, k, v, dout, offsets, options, alpha, fwd_flops, total_flops, device)
    print("| kernel | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | peak GiB |")
    print("|---|---:|---:|---:|---:|---:|")
    kernels = [Kernel.TRITON] if args.skip_pytorch else [Kernel.TRITON, Kernel.PYTORCH]
    max_seq_len = int(lengths.max())
    for kernel in kernels:

        def forward(kernel=kernel):
            with torch.no_grad():
                return hstu_ops.hstu_mha(
                    max_seq_len, alpha, q, k, v, offsets, kernel=kernel, **options
                )

        def forward_backward(kernel=kernel):
            out = hstu_ops.hstu_mha(max_seq_len, alpha, q, k, v, offsets, kernel=kernel, **options)
            torch.autograd.grad(out, (q, k, v), dout)

        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            fwd_ms = _median_ms(forward, args.repeats, device)
            both_ms = _median_ms(forward_backward, args.repeats, device)
        except torch.OutOfMemoryError:
            print(f"| {kernel.name} | out of memory | | | | |")
            continue
        peak = "–"
        if device.type == "cuda":
            peak = f"{torch.cuda.max_memory_allocated() / 2**30:.2f}"
        print(
            f"| {kernel.name} | {fwd_ms:.3f} | {fwd_flops / fwd_ms / 1e9:.1f} | {both_ms:.3f} | "
            f"{total_flops / both_ms / 1e9:.1f} | {peak} |"
        )
    return 0


def sweep(args, q, k, v, dout, offsets, options, alpha, fwd_flops, total_flops, device) -> int:
    # Imported here, after the check that triton is installed (it imports triton).
    from hstu_ops.triton.triton_hstu_attention import default_block_config, triton_hstu_mha
    from hstu_ops.triton.tuning import attention_variants

    max_seq_len = int((offsets[1:] - offsets[:-1]).max())
    default = default_block_config(args.attn_dim, args.hidden_dim, q.dtype)
    print("| variant | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |")
    print("|---|---:|---:|---:|---:|")
    results = []
    for name, config in attention_variants(default):

        def attend(config=config):
            return triton_hstu_mha(
                max_seq_len, alpha, q, k, v, offsets, **options, block_config=config
            )

        def forward():
            with torch.no_grad():
                return attend()

        def forward_backward():
            torch.autograd.grad(attend(), (q, k, v), dout)

        try:
            fwd_ms = _median_ms(forward, args.repeats, device)
            both_ms = _median_ms(forward_backward, args.repeats, device)
        except Exception as e:  # a tile that does not compile or fit: report it, go on
            print(f"| {name} | failed: {type(e).__name__}: {str(e).splitlines()[0][:80]} | | | |")
            continue
        results.append((name, fwd_ms, both_ms))
        print(
            f"| {name} | {fwd_ms:.3f} | {fwd_flops / fwd_ms / 1e9:.1f} | {both_ms:.3f} | "
            f"{total_flops / both_ms / 1e9:.1f} |",
            flush=True,
        )
    if results:
        fastest_fwd = min(results, key=lambda r: r[1])
        fastest_both = min(results, key=lambda r: r[2])
        print(f"fastest forward: {fastest_fwd[0]} ({fastest_fwd[1]:.3f} ms)")
        print(f"fastest forward + backward: {fastest_both[0]} ({fastest_both[2]:.3f} ms)")
        print(f"default tiles: {default}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
