"""The self-check: every op against its PyTorch reference on one device, per kernel and dtype.

One owner of the cases, the tolerances and the error measure, used twice:

- :func:`check`: the report of every non-reference kernel (TRITON, NATIVE) of every op family
  in float32 and bfloat16 (``tools/gpu/correctness.py`` writes it as JSON);
- :func:`verify_kernel`: the quick check at :data:`TINY` shapes that ``Kernel.AUTO`` runs on a
  GPU before a run uses the Triton kernels (:func:`verify_decision`). Each op is checked once per
  process and device (the verdicts are kept, so a second check is free); an op that fails is
  named with its finding, and one line on stderr names the op, the dtype and the error or
  exception. :func:`verify_decision` returns the run's :class:`hstu_ops.KernelDecision` with
  those ops on their PYTORCH reference, the finding as the reason. An explicit family is the
  user's choice and is not checked.

Each case runs an op on fixed random inputs in float32 and in bfloat16: its outputs, and the
gradients of every floating input under one fixed random cotangent per output. The reference is
the PYTORCH kernel on the same device, computed in float32 on the same (bfloat16-rounded)
inputs. The error of one tensor is ``max|got - ref| / max|ref|`` (integer results, such as
offsets, must match exactly); a case passes when its worst error over outputs and gradients is
within :data:`TOLERANCES` of its dtype. A kernel that raises fails.

The random draws (inputs, cotangents) use their own generators, and the check runs inside
``torch.random.fork_rng``: a run's random stream does not depend on whether its kernels were
checked.
"""

from __future__ import annotations

import math
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from hstu_ops._kernel import (
    OP_KERNELS,
    Kernel,
    KernelDecision,
    device_kernel,
    unavailable_reason,
)

__all__ = [
    "DTYPES",
    "FULL",
    "TINY",
    "TOLERANCES",
    "Case",
    "Shapes",
    "build_cases",
    "case_error",
    "check",
    "error",
    "verify_decision",
    "verify_kernel",
]

TOLERANCES = {"float32": 5e-3, "bfloat16": 5e-2}
"""Largest error (max|got - ref| / max|ref|) a kernel may have, per input dtype. float32 allows
for TF32 matrix products in the Triton kernels (10 mantissa bits: about 1e-3 relative); bfloat16
for 8 mantissa bits on inputs of the order of one, summed over short reductions."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
"""The input dtypes every kernel is checked in, by the names the report uses."""


@dataclass
class Case:
    """One op call: ``call(args, kernel)`` returns a tuple of tensors; the floating tensors of
    ``inputs`` not named in ``fixed`` are cast to the dtype and differentiated. ``name`` is the
    op's name, followed by the variant for an op checked several ways ("hstu_mha targets")."""

    family: str
    name: str
    inputs: dict
    call: Callable
    fixed: tuple[str, ...] = ()
    cpu_only_native: bool = False

    @property
    def op(self) -> str:
        """The op of :data:`hstu_ops.OP_KERNELS` the case calls."""
        return self.name.split()[0]


@dataclass(frozen=True)
class Shapes:
    batch: int
    max_len: int
    width: int
    heads: int
    head_dim: int


TINY = Shapes(batch=3, max_len=12, width=32, heads=2, head_dim=16)
"""The shapes of :func:`verify_kernel` and of the CPU smoke of the report."""

FULL = Shapes(batch=8, max_len=512, width=512, heads=4, head_dim=128)


def build_cases(device: torch.device, shapes: Shapes) -> list[Case]:
    """Every case, in family order, on inputs drawn from one seeded generator (the same inputs
    whichever cases are then run)."""
    import hstu_ops

    gen = torch.Generator().manual_seed(0)
    b, n, d, h, hd = shapes.batch, shapes.max_len, shapes.width, shapes.heads, shapes.head_dim

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device)

    def lengths(low: int, high: int):
        # Ragged: one empty-ish short sequence, one full one, the rest random.
        ls = torch.randint(low, high + 1, (b,), generator=gen)
        ls[0], ls[-1] = low, high
        return ls.to(device)

    def offsets(ls):
        return hstu_ops.complete_cumsum(ls, kernel="pytorch")

    cases: list[Case] = []
    # jagged 1-D (native on CPU and CUDA)
    la, lb = lengths(0, n // 2), lengths(1, n // 2)
    oa, ob = offsets(la), offsets(lb)
    va, vb = rand(int(la.sum()), d), rand(int(lb.sum()), d)
    cases.append(Case("jagged-1d", "complete_cumsum", {"l": la},
                      lambda a, k: (hstu_ops.complete_cumsum(a["l"], kernel=k),)))  # fmt: skip
    cases.append(Case("jagged-1d", "concat_1d_jagged", {"a": va, "oa": oa, "b": vb, "ob": ob},
                      lambda a, k: hstu_ops.concat_1d_jagged(a["a"], a["oa"], a["b"], a["ob"], kernel=k)))  # fmt: skip
    vab = rand(int(la.sum() + lb.sum()), d)
    cases.append(Case("jagged-1d", "split_1d_jagged", {"v": vab, "o": offsets(la + lb), "oa": oa},
                      lambda a, k: hstu_ops.split_1d_jagged(a["v"], a["o"], a["oa"], kernel=k)))  # fmt: skip
    # jagged 2-D
    ml = n // 2 + n // 2
    cases.append(Case("jagged-2d", "concat_2D_jagged", {"a": va, "b": vb, "oa": oa, "ob": ob},
                      lambda a, k: (hstu_ops.concat_2D_jagged(ml, a["a"], a["b"], None, None, a["oa"], a["ob"], kernel=k),)))  # fmt: skip
    cases.append(Case("jagged-2d", "split_2D_jagged", {"v": vab, "oa": oa, "ob": ob},
                      lambda a, k: hstu_ops.split_2D_jagged(ml, a["v"], None, None, None, None, a["oa"], a["ob"], kernel=k)))  # fmt: skip
    cases.append(Case("jagged-2d", "jagged_dense_bmm_broadcast_add",
                      {"o": oa, "j": va, "dense": rand(b, d, d, scale=d**-0.5), "bias": rand(b, d)},
                      lambda a, k: (hstu_ops.jagged_dense_bmm_broadcast_add(n, a["o"], a["j"], a["dense"], a["bias"], kernel=k),)))  # fmt: skip
    # attention: ragged lengths; plain causal, with targets, with contextual tokens and targets
    ls = lengths(4, n)
    so = offsets(ls)
    total = int(ls.sum())
    qkv = {"q": rand(total, h, hd), "k": rand(total, h, hd), "v": rand(total, h, hd), "o": so}
    targets = torch.clamp(ls // 4, min=1)
    alpha = 1.0 / math.sqrt(hd)
    for name, kw in (
        ("hstu_mha causal", {}),
        ("hstu_mha targets", {"num_targets": targets}),
        ("hstu_mha contextual+targets", {"num_targets": targets, "contextual_seq_len": 3}),
    ):
        cases.append(Case("attention", name, dict(qkv),
                          lambda a, k, kw=kw: (hstu_ops.hstu_mha(n, alpha, a["q"], a["k"], a["v"], a["o"], kernel=k, **kw),),
                          cpu_only_native=True))  # fmt: skip
    # fused layer blocks
    uvqk_width = h * (2 * hd + 2 * hd)
    x = rand(total, d)
    cases.append(Case("layer-projections", "hstu_compute_uqvk",
                      {"x": x, "nw": rand(d), "nb": rand(d, scale=0.1), "w": rand(d, uvqk_width, scale=d**-0.5), "b": rand(uvqk_width, scale=0.1)},
                      lambda a, k: hstu_ops.hstu_compute_uqvk(a["x"], a["nw"], a["nb"], 1e-6, h, hd, hd, a["w"], a["b"], kernel=k)))  # fmt: skip
    cases.append(Case("layer-projections", "hstu_compute_output",
                      {"attn": rand(total, h * hd), "u": rand(total, h * hd), "x": x, "nw": rand(h * hd), "nb": rand(h * hd, scale=0.1), "w": rand(3 * h * hd, d, scale=(3 * h * hd) ** -0.5)},
                      lambda a, k: (hstu_ops.hstu_compute_output(a["attn"], a["u"], a["x"], a["nw"], a["nb"], 1e-6, a["w"], h, hd, 0.0, True, True, False, kernel=k),)))  # fmt: skip
    # norms
    norm_in = {"x": x, "w": rand(d), "b": rand(d, scale=0.1)}
    cases.append(Case("norms", "layer_norm", dict(norm_in),
                      lambda a, k: (hstu_ops.layer_norm(a["x"], a["w"], a["b"], 1e-6, kernel=k),)))  # fmt: skip
    cases.append(Case("norms", "swish_layer_norm", dict(norm_in),
                      lambda a, k: (hstu_ops.swish_layer_norm(a["x"], a["w"], a["b"], 1e-6, kernel=k),)))  # fmt: skip
    cases.append(Case("norms", "rms_norm", dict(norm_in),
                      lambda a, k: (hstu_ops.rms_norm(a["x"], a["w"], 1e-6, kernel=k),)))  # fmt: skip
    # position and time embeddings
    times = torch.randint(0, 10**8, (total,), generator=gen).to(device)
    cases.append(Case("positional-embeddings", "add_timestamp_positional_embeddings",
                      {"x": x, "p": rand(n, d), "t": rand(65, d), "o": so, "l": ls, "ts": times, "nt": targets},
                      lambda a, k: (hstu_ops.add_timestamp_positional_embeddings(math.sqrt(d), n, 3, a["p"], a["t"], a["o"], a["l"], a["x"], a["ts"], a["nt"], False, kernel=k),)))  # fmt: skip
    # addmm
    cases.append(Case("addmm", "addmm", {"bias": rand(d, scale=0.1), "x": x, "w": rand(d, d, scale=d**-0.5)},
                      lambda a, k: (hstu_ops.addmm(a["bias"], a["x"], a["w"], kernel=k),)))  # fmt: skip
    return cases


def run_case(case: Case, kernel: Kernel, dtype: torch.dtype, upcast: bool) -> list[torch.Tensor]:
    """The case's outputs then the gradients of its floating inputs (zeros where unused)."""
    args, leaves = {}, []
    for name, t in case.inputs.items():
        if t.is_floating_point() and name not in case.fixed:
            t = t.to(dtype)
            t = (t.float() if upcast else t).detach().requires_grad_(True)
            leaves.append(t)
        args[name] = t
    outs = case.call(args, kernel)
    diff = [o for o in outs if o.is_floating_point() and o.requires_grad]
    grads = []
    if diff and leaves:
        loss = sum((o.float() * cotangent(o, i)).sum() for i, o in enumerate(diff))
        got = torch.autograd.grad(loss, leaves, allow_unused=True)
        grads = [torch.zeros_like(x) if g is None else g for g, x in zip(got, leaves, strict=True)]
    return [o.detach() for o in outs] + list(grads)


def cotangent(t: torch.Tensor, index: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + index)
    return torch.randn(t.shape, generator=gen).to(t.device)


def error(got: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """Worst max|got - ref| / max|ref| over the tensors; integer tensors must match exactly."""
    if len(got) != len(ref):
        return math.inf
    worst = 0.0
    for g, r in zip(got, ref, strict=True):
        if g.shape != r.shape:
            return math.inf
        if not r.is_floating_point():
            worst = max(worst, 0.0 if bool((g == r).all()) else math.inf)
            continue
        diff = (g.double() - r.double()).abs()
        scale = max(r.double().abs().max().item() if r.numel() else 0.0, 1e-12)
        e = diff.max().item() / scale if r.numel() else 0.0
        worst = max(worst, e if math.isfinite(e) else math.inf)
    return worst


def case_error(case: Case, kernel: Kernel, dtype: str) -> float:
    """The error of ``kernel`` on the case in ``dtype`` (a name of :data:`DTYPES`) against the
    float32 reference on the same inputs; raises what the kernel raises."""
    ref = run_case(case, Kernel.PYTORCH, DTYPES[dtype], upcast=True)
    got = run_case(case, kernel, DTYPES[dtype], upcast=False)
    return error(got, ref)


def _case_unavailable(case: Case, kernel: Kernel, device: torch.device) -> str | None:
    if kernel is Kernel.NATIVE and case.cpu_only_native and device.type != "cpu":
        return "the native attention runs on CPU tensors only"
    if kernel is Kernel.TRITON:
        return unavailable_reason(kernel, device.type)
    return None


def check(
    device: torch.device,
    shapes: Shapes,
    log: Callable[[str], None] = print,
    progress: Callable[[dict], None] | None = None,
) -> dict:
    """Runs every case with every non-reference kernel of its op, in every dtype; returns
    ``{"families": {family: {kernel: {dtype: entry}}}, "failures": n, ...}``. An entry holds the
    family's worst error and the case that had it, the cases run (``ops``), the failures by
    case (``failed``), the cases the device cannot run with the reason (``unavailable``, never
    a pass) and ``passed``. ``progress(result)``, when given, gets the result so far before
    every case."""
    families: dict = {}
    failures = 0
    result = {
        "device": str(device),
        "shapes": shapes.__dict__,
        "tolerances": TOLERANCES,
        "families": families,
        "failures": 0,
        "finished": False,
    }
    for case in build_cases(device, shapes):
        if progress is not None:
            progress(dict(result, failures=failures))
        for kernel in (k for k in (Kernel.TRITON, Kernel.NATIVE) if k in OP_KERNELS[case.op]):
            for dname in DTYPES:
                slot = families.setdefault(case.family, {}).setdefault(str(kernel), {})
                entry = slot.setdefault(
                    dname, {"error": 0.0, "tolerance": TOLERANCES[dname], "worst_op": None}
                )
                label = f"  {case.family:<22}{case.name:<36}{kernel!s:<8}{dname:<9}"
                reason = _case_unavailable(case, kernel, device)
                if reason is not None:
                    entry.setdefault("unavailable", {})[case.name] = reason
                    log(f"{label} unavailable")
                    continue
                try:
                    err = case_error(case, kernel, dname)
                except Exception as e:  # a kernel that fails is recorded, never hidden
                    entry.setdefault("failed", {})[case.name] = f"{type(e).__name__}: {e}"[:300]
                    failures += 1
                    log(f"{label} FAILED {e!r}")
                    traceback.print_exc(file=sys.stderr)
                    continue
                ok = err <= TOLERANCES[dname]
                if not ok:
                    entry.setdefault("failed", {})[case.name] = f"error {err:.3g} over tolerance"
                    failures += 1
                if err >= entry["error"]:
                    entry["error"], entry["worst_op"] = err, case.name
                entry.setdefault("ops", []).append(case.name)
                log(f"{label} {err:.2e} {'ok' if ok else 'OVER TOLERANCE'}")
    for per_kernel in families.values():
        for per_dtype in per_kernel.values():
            for entry in per_dtype.values():
                entry["passed"] = bool(entry.get("ops")) and "failed" not in entry
    return dict(result, failures=failures, finished=True)


_verdicts: dict[tuple[Kernel, str], dict[str, str | None]] = {}
"""What :func:`verify_kernel` found in this process, by (kernel, device): per op checked, why
it failed, or None when it passed. A second check of an op there is free."""


def _print_to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _one_line(exc: Exception) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}"[:300]


def _problems(case: Case, kernel: Kernel) -> list[str]:
    """Why ``kernel`` fails the case, per dtype (nothing when it passes)."""
    problems = []
    for dtype, tolerance in TOLERANCES.items():
        try:
            err = case_error(case, kernel, dtype)
        except Exception as exc:  # a kernel that raises is refused, not the run
            problems.append(f"{case.name} in {dtype}: {_one_line(exc)}")
            continue
        if not err <= tolerance:
            problems.append(f"{case.name} in {dtype}: error {err:.2g} over tolerance {tolerance:g}")
    return problems


def _resolved_device(device: torch.device | str) -> torch.device:
    """``device`` with its index: a verdict belongs to one GPU."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def verify_kernel(
    kernel: Kernel | str,
    device: torch.device | str,
    *,
    ops: Iterable[str] | None = None,
    report: Callable[[str], None] = _print_to_stderr,
) -> dict[str, str]:
    """Checks the ``kernel`` family's ops on ``device`` at :data:`TINY` shapes, in float32 and
    bfloat16; for each op that fails ``report`` gets one line naming the op, the dtype and the
    error or exception. ``ops`` limits the check to those ops (default: every op with the
    kernel). Each op is checked once per process and device.

    Returns ``{op: why}`` for the ops asked that fail on this device (nothing is refused here:
    :func:`verify_decision` makes a run's decision of it).
    KernelUnavailableError when the device cannot run the family at all; ValueError for an op
    without the kernel.
    """
    kernel = device_kernel(kernel, torch.device(device).type)
    device = _resolved_device(device)
    having = [op for op, kernels in OP_KERNELS.items() if kernel in kernels]
    asked = having if ops is None else list(ops)
    for op in asked:
        if op not in having:
            raise ValueError(f"verify_kernel: {op!r} has no {kernel.name} kernel")
    verdicts = _verdicts.setdefault((kernel, str(device)), {})
    unchecked = {op for op in asked if op not in verdicts}
    if unchecked:
        problems: dict[str, list[str]] = {op: [] for op in unchecked}
        indices = [device.index] if device.type == "cuda" else []
        with torch.random.fork_rng(indices, device_type=device.type), torch.enable_grad():
            for case in build_cases(device, TINY):
                if case.op in unchecked:
                    problems[case.op] += _problems(case, kernel)
        for op in sorted(unchecked):
            why = "; ".join(problems[op]) or None
            verdicts[op] = why
            if why is not None:
                report(
                    f"hstu-ops: {op} runs its PYTORCH reference on {device}: its {kernel.name} "
                    f"kernel failed the self-check ({why})"
                )
    return {op: verdicts[op] for op in asked if verdicts[op] is not None}


def verify_decision(
    decision: KernelDecision,
    device: torch.device | str,
    *,
    report: Callable[[str], None] = _print_to_stderr,
) -> KernelDecision:
    """What ``Kernel.AUTO`` adds for a run on ``device``: where the decision is AUTO meaning
    TRITON (a GPU), the Triton kernels are verified there first (:func:`verify_kernel`), and
    the decision comes back with each op that failed on its PYTORCH reference, the self-check's
    finding as its reason. An explicit family is the user's choice and is not checked (nor is
    AUTO where it means NATIVE or PYTORCH): the decision comes back as it was."""
    if decision.requested is not Kernel.AUTO or decision.family is not Kernel.TRITON:
        return decision
    device = torch.device(device)
    failed = verify_kernel(Kernel.TRITON, device, report=report)
    return decision.refusing(
        {
            op: f"its TRITON kernel failed the self-check on {_resolved_device(device)} ({why})"
            for op, why in failed.items()
        }
    )
