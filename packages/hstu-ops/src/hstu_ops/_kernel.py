"""Kernel selection: which implementation of an op runs, and which a device can run.

Every op has a ``PYTORCH`` kernel, the readable reference in :mod:`hstu_ops.pytorch`. Some ops
also have a ``NATIVE`` kernel (C++/CUDA/HIP, registered under ``torch.ops.hstu_ops``) or a
``TRITON`` kernel (:mod:`hstu_ops.triton`, imported only when first used).

One rule picks what an op runs for a family (:func:`choose`): that family where the op has it
and nothing refused it, else its ``PYTORCH`` reference, with the reason (a
:class:`KernelChoice`). It applies to the process default (:func:`set_default_kernel`, used by
ops called with ``kernel=None``) and to a model's family alike, so a process or a model may
choose ``NATIVE`` and still call ops that only exist as references. A kernel passed to an op
explicitly that the op does not have is an error; one it has runs. Every op of every family
picks its function the same way, :func:`dispatch`.

A model's kernels are one value, a :class:`KernelDecision`: the family asked, the family it
means on the device, and every op's :class:`KernelChoice`. :func:`decide_kernel` makes it for
a device: ``AUTO`` is ``TRITON`` on a GPU and ``NATIVE`` on the CPU, and a family the device
cannot run is refused (:class:`KernelUnavailableError`, :func:`unavailable_reason`); it is
cheap and runs nothing. Before a run on a GPU uses what AUTO chose,
:func:`hstu_ops.selfcheck.verify_decision` checks the Triton kernels there against their
references at tiny shapes and returns the decision with each op that failed sent to its
reference, the finding as its reason (:meth:`KernelDecision.refusing`). An explicit family is
the user's choice and is never checked. The decision holds no process state: the model that
takes it runs what it says.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from hstu_ops._triton import load_triton_module

__all__ = [
    "GPU_DEVICE_TYPES",
    "OP_KERNELS",
    "Kernel",
    "KernelChoice",
    "KernelDecision",
    "KernelUnavailableError",
    "choose",
    "decide_kernel",
    "device_kernel",
    "dispatch",
    "get_default_kernel",
    "kernel_family",
    "resolve_kernel",
    "set_default_kernel",
    "triton_interpreting",
    "unavailable_reason",
]


class Kernel(enum.StrEnum):
    """Implementation families of the ops in this package (a `str`: configs hold and save
    them as their names)."""

    AUTO = "auto"
    """The fastest family the device runs, resolved by :func:`device_kernel` (not for ops)."""

    PYTORCH = "pytorch"
    """Plain PyTorch reference; runs anywhere torch runs, differentiable through torch ops."""

    NATIVE = "native"
    """C++ (CPU, OpenMP) and CUDA/HIP kernels from the compiled extension ``hstu_ops._C``."""

    TRITON = "triton"
    """Triton kernels (:mod:`hstu_ops.triton`) for CUDA/ROCm tensors; needs the triton package."""


GPU_DEVICE_TYPES = ("cuda", "hip")
"""Device types of a GPU the Triton kernels compile for (ROCm's torch reports "cuda" too)."""

_P, _N, _T = Kernel.PYTORCH, Kernel.NATIVE, Kernel.TRITON
OP_KERNELS: dict[str, tuple[Kernel, ...]] = {
    "complete_cumsum": (_P, _N),
    "concat_1d_jagged": (_P, _N),
    "split_1d_jagged": (_P, _N),
    "concat_2D_jagged": (_P, _T),
    "split_2D_jagged": (_P, _T),
    "jagged_dense_bmm_broadcast_add": (_P, _T),
    "hstu_compute_uqvk": (_P, _T),
    "hstu_compute_output": (_P, _T),
    "hstu_mha": (_P, _N, _T),
    "addmm": (_P, _T),
    "layer_norm": (_P, _T),
    "swish_layer_norm": (_P, _T),
    "rms_norm": (_P, _T),
    "add_timestamp_positional_embeddings": (_P, _T),
}
"""The kernels each op of this package has."""

_default_kernel: Kernel = Kernel.PYTORCH


def _coerce(kernel: Kernel | str, what: str) -> Kernel:
    if isinstance(kernel, Kernel):
        return kernel
    if isinstance(kernel, str):
        for k in Kernel:
            if kernel.lower() in (k.value, k.name.lower()):
                return k
    names = ", ".join(k.name for k in Kernel)
    raise ValueError(f"{what}: unknown kernel {kernel!r}; expected one of {names}")


def kernel_family(kernel: Kernel | str) -> Kernel:
    """``kernel`` as a family ops run (PYTORCH, NATIVE or TRITON, by value or name); ValueError
    for an unknown name and for AUTO, which only a device resolves (:func:`decide_kernel`)."""
    families = [k for k in Kernel if k is not Kernel.AUTO]
    chosen = next((k for k in families if kernel == k), None)
    if chosen is None:
        expected = ", ".join(families)
        raise ValueError(
            f"unknown kernel {kernel!r}; expected {expected} (auto is resolved for a device "
            "by hstu_ops.decide_kernel first)"
        )
    return chosen


def set_default_kernel(kernel: Kernel | str) -> None:
    """Sets the kernel used by ops called with ``kernel=None`` (process-wide)."""
    global _default_kernel
    chosen = _coerce(kernel, "set_default_kernel")
    if chosen is Kernel.AUTO:
        raise ValueError("set_default_kernel: resolve Kernel.AUTO for a device (device_kernel)")
    _default_kernel = chosen


def get_default_kernel() -> Kernel:
    """The kernel used by ops called with ``kernel=None``; ``Kernel.PYTORCH`` unless set."""
    return _default_kernel


@dataclass(frozen=True)
class KernelChoice:
    """What ``op`` runs for the family ``requested``: ``used``, and ``reason``, why that is not
    ``requested`` (None when it is)."""

    op: str
    requested: Kernel
    used: Kernel
    reason: str | None = None


def choose(op: str, family: Kernel | str, refused: str | None = None) -> KernelChoice:
    """The one rule: ``op`` runs ``family`` where it has it (:data:`OP_KERNELS`) and
    ``refused`` (why it may not, e.g. a self-check's finding) is None, else its PYTORCH
    reference, with the reason."""
    family = _coerce(family, op)
    if family is Kernel.AUTO:
        raise ValueError(f"{op}: resolve Kernel.AUTO for a device first (decide_kernel)")
    if family not in OP_KERNELS[op]:
        return KernelChoice(op, family, Kernel.PYTORCH, f"{op} has no {family.name} kernel")
    if refused is not None and family is not Kernel.PYTORCH:
        return KernelChoice(op, family, Kernel.PYTORCH, refused)
    return KernelChoice(op, family, family)


@dataclass(frozen=True)
class KernelDecision:
    """The kernels of a model, decided once: ``requested`` (as asked, maybe AUTO), ``family``
    (what it means on the device), ``device_type`` (None for a family taken as given, with no
    device in view) and ``choices``, one :class:`KernelChoice` per op of :data:`OP_KERNELS`.

    Made by :func:`decide_kernel` or :meth:`given`; :meth:`refusing` sends ops to their
    reference. A value: a model takes it and runs, per op, ``kernel(op)``."""

    requested: Kernel
    family: Kernel
    device_type: str | None
    choices: tuple[KernelChoice, ...]
    _by_op: dict[str, KernelChoice] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_op = {choice.op: choice for choice in self.choices}
        if sorted(by_op) != sorted(OP_KERNELS) or len(by_op) != len(self.choices):
            raise ValueError("KernelDecision: needs one choice for every op of OP_KERNELS")
        if any(choice.requested is not self.family for choice in self.choices):
            raise ValueError(f"KernelDecision: every choice must be for {self.family}")
        object.__setattr__(self, "_by_op", by_op)

    @classmethod
    def given(cls, family: Kernel | str) -> KernelDecision:
        """``family`` as the user gave it, for every op, unchecked (no device in view)."""
        family = kernel_family(family)
        choices = tuple(choose(op, family) for op in OP_KERNELS)
        return cls(family, family, None, choices)

    def kernel(self, op: str) -> Kernel:
        """The kernel ``op`` runs."""
        return self._by_op[op].used

    def choice(self, op: str) -> KernelChoice:
        return self._by_op[op]

    def fallbacks(self) -> tuple[KernelChoice, ...]:
        """The ops that run another kernel than the family, each with its reason."""
        return tuple(c for c in self.choices if c.used is not c.requested)

    def refusing(self, reasons: Mapping[str, str]) -> KernelDecision:
        """This decision with each op of ``reasons`` sent to its PYTORCH reference, for that
        reason (an op without the family keeps its own reason)."""
        for op in reasons:
            if op not in OP_KERNELS:
                raise ValueError(f"refusing: unknown op {op!r}")
        choices = tuple(
            choose(c.op, self.family, reasons[c.op])
            if c.op in reasons and c.used is not Kernel.PYTORCH
            else c
            for c in self.choices
        )
        return replace(self, choices=choices)


def decide_kernel(kernel: Kernel | str, device_type: str) -> KernelDecision:
    """The kernels of a model on a ``device_type`` device: :func:`device_kernel`'s family
    (KernelUnavailableError when the device cannot run it), every op under :func:`choose`."""
    asked = _coerce(kernel, "kernel")
    family = device_kernel(asked, device_type)
    choices = tuple(choose(op, family) for op in OP_KERNELS)
    return KernelDecision(asked, family, device_type, choices)


def resolve_kernel(op: str, kernel: Kernel | str | None) -> Kernel:
    """Picks the kernel for one call of ``op``: ``kernel``, or, when it is None, what
    :func:`choose` makes of the process default.

    Raises ValueError, naming the op and its kernels, for an explicit kernel it does not have.
    """
    if kernel is None:
        return choose(op, _default_kernel).used
    chosen = _coerce(kernel, op)
    available = OP_KERNELS[op]
    if chosen not in available:
        names = ", ".join(k.name for k in available)
        raise ValueError(f"{op} has no {chosen.name} kernel; kernels available for {op}: {names}")
    return chosen


def dispatch(
    op: str,
    kernel: Kernel | str | None,
    *,
    pytorch: Callable,
    native: Callable | None = None,
    triton: str | None = None,
) -> tuple[Kernel, Callable]:
    """The kernel ``op`` runs for ``kernel`` (see :func:`resolve_kernel`) and its function:
    ``pytorch`` (the reference), ``native`` (a function with the reference's arguments that
    calls the compiled extension), or ``triton_<op>`` of ``hstu_ops.triton.<triton>`` (imported
    on first use, :func:`hstu_ops._triton.load_triton_module`).

    The kernels given must be those :data:`hstu_ops.OP_KERNELS` lists for ``op`` (the tests
    hold every op to it); a chosen kernel given none is a RuntimeError naming the op.
    """
    chosen = resolve_kernel(op, kernel)
    if chosen is Kernel.TRITON:
        if triton is None:
            raise RuntimeError(f"{op}: OP_KERNELS lists a TRITON kernel that the op does not give")
        return chosen, getattr(load_triton_module(op, triton), f"triton_{op}")
    if chosen is Kernel.NATIVE:
        if native is None:
            raise RuntimeError(f"{op}: OP_KERNELS lists a NATIVE kernel that the op does not give")
        return chosen, native
    return chosen, pytorch


class KernelUnavailableError(ValueError):
    """A kernel family the device cannot run: `kernel` (what `asked` resolved to),
    `device_type`, `reason`, and the families that do run there (`alternatives`)."""

    def __init__(
        self, kernel: Kernel, asked: Kernel, device_type: str, reason: str, alternatives: tuple
    ) -> None:
        self.kernel, self.asked, self.device_type = kernel, asked, device_type
        self.reason, self.alternatives = reason, alternatives
        what = str(kernel) if asked is kernel else f"{asked} (here {kernel})"
        instead = " or ".join(str(k) for k in alternatives)
        super().__init__(f"{what} cannot run on the {device_type} device: {reason}; use {instead}")


def triton_interpreting() -> bool:
    """Whether Triton runs its kernels in its CPU interpreter (``TRITON_INTERPRET``), read
    without importing triton."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def device_kernel(kernel: Kernel | str, device_type: str) -> Kernel:
    """The family ``kernel`` means on a ``device_type`` device ("cpu", "cuda"): AUTO is TRITON
    on a GPU and NATIVE on the CPU (PYTORCH elsewhere). KernelUnavailableError when it cannot
    run there. Runs no kernel: a run verifies AUTO's choice on its device with
    :func:`hstu_ops.selfcheck.verify_decision`."""
    asked = _coerce(kernel, "kernel")
    chosen = asked
    if asked is Kernel.AUTO:
        if device_type in GPU_DEVICE_TYPES:
            chosen = Kernel.TRITON
        else:
            chosen = Kernel.NATIVE if device_type == "cpu" else Kernel.PYTORCH
    reason = unavailable_reason(chosen, device_type)
    if reason is not None:
        others = [
            k
            for k in (Kernel.NATIVE, Kernel.TRITON)
            if k is not chosen and unavailable_reason(k, device_type) is None
        ]
        raise KernelUnavailableError(chosen, asked, device_type, reason, (*others, Kernel.PYTORCH))
    return chosen


def unavailable_reason(kernel: Kernel | str, device_type: str) -> str | None:
    """Why the family ``kernel`` cannot run on a ``device_type`` device, or None when it can."""
    kernel = _coerce(kernel, "kernel")
    if kernel is Kernel.PYTORCH:
        return None
    if kernel is Kernel.TRITON:
        if device_type not in GPU_DEVICE_TYPES and not (
            device_type == "cpu" and triton_interpreting()
        ):
            return (
                "the Triton kernels need a CUDA or ROCm GPU (on the CPU only in Triton's "
                "interpreter, TRITON_INTERPRET=1, which is for tests: it is very slow)"
            )
        import hstu_ops  # imports triton only here

        if not hstu_ops.triton_available():
            return "the Triton kernels cannot be imported (is the triton package installed?)"
        return None
    if kernel is Kernel.NATIVE:
        if device_type != "cpu":
            return (
                "the native HSTU attention runs on CPU tensors only (the extension's GPU build "
                "covers only the 1-D jagged primitives)"
            )
        import hstu_ops

        info = hstu_ops.native_build_info()
        if not info["cpu"]:
            return f"the native ops of hstu-ops did not load ({info['error'] or 'built without the CPU ops'})"
        return None
    raise ValueError(f"unavailable_reason: resolve {kernel} for a device first (device_kernel)")
