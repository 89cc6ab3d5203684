"""CPU timings of hstu_mha, NATIVE against PYTORCH, forward and forward + backward.

Prints a table; asserts nothing. The kernels are timed in interleaved rounds (NATIVE forward,
NATIVE forward + backward, then the same for PYTORCH), so that a shared machine's other work
falls on both alike, and each time is the best of --repeats rounds (other work only ever adds
time). The load average is printed before and after so that a reader can judge how busy the
machine was.

Run from the workspace root (OMP_NUM_THREADS before Python starts, so that torch's and the
extension's OpenMP agree from the first call):

  OMP_NUM_THREADS=2 uv run --package hstu-ops python packages/hstu-ops/benchmarks/bench_native_attention.py

Options: --threads N (torch.set_num_threads), --repeats N, --dtype {fp32,bf16},
--isa {generic,avx2,avx512} (the native kernels of a lower instruction set), --skip-pytorch.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

import hstu_ops
from hstu_ops import Kernel, _native

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _problem(name: str, dtype: torch.dtype, gen: torch.Generator) -> dict:
    heads, dim = 4, 128
    if name == "uniform":
        lengths = torch.full((8,), 512)
        num_targets = None
    else:  # ragged: lengths uniform in [64, 1024], up to 64 candidates each
        lengths = torch.randint(64, 1025, (8,), generator=gen)
        num_targets = torch.randint(1, 65, (8,), generator=gen)
    offsets = hstu_ops.complete_cumsum(lengths)
    total = int(offsets[-1])
    q, k, v, dout = (torch.randn(total, heads, dim, generator=gen, dtype=dtype) for _ in range(4))
    return dict(
        args=(int(lengths.max()), 1.0 / dim**0.5, q, k, v, offsets),
        kwargs=dict(num_targets=num_targets),
        dout=dout,
        shape=f"B=8 L={'512' if name == 'uniform' else '64..1024'} H={heads} D={dim}",
        lengths=lengths.tolist(),
    )


def _runners(kernel: Kernel, problem: dict):
    """(forward without grad, forward + backward) of one kernel on the problem."""
    max_seq_len, alpha, q, k, v, offsets = problem["args"]
    kwargs = problem["kwargs"]

    def forward():
        with torch.no_grad():
            return hstu_ops.hstu_mha(max_seq_len, alpha, q, k, v, offsets, kernel=kernel, **kwargs)

    def forward_backward():
        leaves = [x.detach().requires_grad_() for x in (q, k, v)]
        out = hstu_ops.hstu_mha(max_seq_len, alpha, *leaves, offsets, kernel=kernel, **kwargs)
        out.backward(problem["dout"])

    return forward, forward_backward


def _time(kernels: list[Kernel], problem: dict, repeats: int) -> dict:
    """{kernel: [best forward ms, best forward + backward ms]} over interleaved rounds."""
    runners = {kernel: _runners(kernel, problem) for kernel in kernels}
    for forward, forward_backward in runners.values():  # warm-up: first touch, thread start
        forward()
        forward_backward()
    best = {kernel: [float("inf"), float("inf")] for kernel in kernels}
    for _ in range(repeats):
        for kernel, fns in runners.items():
            for i, fn in enumerate(fns):
                best[kernel][i] = min(best[kernel][i], _seconds(fn) * 1e3)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="fp32")
    parser.add_argument("--isa", choices=("generic", "avx2", "avx512"), default=None)
    parser.add_argument("--skip-pytorch", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if not hstu_ops.native_available():
        raise SystemExit(f"native extension unavailable: {hstu_ops.native_build_info()['error']}")
    if args.isa:
        _native._C._select_cpu_attention_isa(args.isa)

    load_before = os.getloadavg()
    print(
        f"torch {torch.__version__}, {args.threads} threads (OMP_NUM_THREADS="
        f"{os.environ.get('OMP_NUM_THREADS', 'unset')}), {os.cpu_count()} CPUs, native kernels: "
        f"{_native.cpu_attention_isa()}, dtype {args.dtype}, causal, best of {args.repeats} rounds"
    )
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}")
    gen = torch.Generator().manual_seed(0)
    header = (
        f"{'case':<9} {'shape':<26} {'kernel':<8} {'fwd ms':>9} {'fwd+bwd ms':>11} "
        f"{'speedup fwd':>12} {'speedup f+b':>12}"
    )
    print(header)
    print("-" * len(header))
    kernels = [Kernel.NATIVE] if args.skip_pytorch else [Kernel.NATIVE, Kernel.PYTORCH]
    for name in ("uniform", "ragged"):
        problem = _problem(name, _DTYPES[args.dtype], gen)
        times = _time(kernels, problem, args.repeats)
        native = times[Kernel.NATIVE]
        print(f"{name:<9} {problem['shape']:<26} {'NATIVE':<8} {native[0]:9.1f} {native[1]:11.1f}")
        if not args.skip_pytorch:
            reference = times[Kernel.PYTORCH]
            print(
                f"{'':<9} {'':<26} {'PYTORCH':<8} {reference[0]:9.1f} {reference[1]:11.1f} "
                f"{reference[0] / native[0]:11.2f}x {reference[1] / native[1]:11.2f}x"
            )
            outputs = [_runners(kernel, problem)[0]().float() for kernel in kernels]
            diff = (outputs[0] - outputs[1]).abs().max().item()
            print(f"{'':<9} max |NATIVE - PYTORCH| of the output: {diff:.2e}")
        if name == "ragged":
            print(f"{'':<9} lengths {problem['lengths']}")
    load_after = os.getloadavg()
    print(f"load average after: {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")


if __name__ == "__main__":
    main()
