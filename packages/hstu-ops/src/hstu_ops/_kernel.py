"""Kernel selection: which implementation of an op runs, and which a device can run.

Every op has a ``PYTORCH`` kernel, the readable reference in :mod:`hstu_ops.pytorch`. Some ops
also have a ``NATIVE`` kernel (C++/CUDA/HIP, registered under ``torch.ops.hstu_ops``) or a
``TRITON`` kernel (:mod:`hstu_ops.triton`, imported only when first used).

One rule picks an op's kernel (:func:`fallback`): the chosen family where the op has it and
this process has not refused it for the op, else its ``PYTORCH`` reference. It applies to the
process default (:func:`set_default_kernel`, used by ops called with ``kernel=None``), to a
model's choice and to a kernel passed to an op alike, so a process or a model may choose
``NATIVE`` and still call ops that only exist as references. A kernel passed to an op
explicitly that the op does not have is an error.

``AUTO`` is a choice for a whole model on a device, not for an op: :func:`device_kernel` makes
it ``TRITON`` on a GPU and ``NATIVE`` on the CPU, and refuses (:class:`KernelUnavailableError`)
a family the device cannot run (:func:`unavailable_reason`); it is cheap and runs nothing.
Before a run on a GPU uses what AUTO chose, :func:`hstu_ops.selfcheck.verify_if_auto` checks the
Triton kernels there against their references at tiny shapes, once per process and device; an
op whose kernel fails is refused (:func:`refuse_kernel`), which is what sends it to its
reference, and the run says so on stderr. A refusal holds for the whole process: a process
trains on one device, and the reference is right on every device. An explicit family is the
user's choice and is never checked.
"""

from __future__ import annotations

import enum
import os

__all__ = [
    "GPU_DEVICE_TYPES",
    "OP_KERNELS",
    "Kernel",
    "KernelUnavailableError",
    "device_kernel",
    "fallback",
    "get_default_kernel",
    "refuse_kernel",
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


_refused: dict[tuple[str, Kernel], str] = {}
"""(op, family) -> why: the kernels this process runs no more (see :func:`refuse_kernel`)."""


def refuse_kernel(op: str, kernel: Kernel, reason: str) -> None:
    """From now on, in this process, ``op`` runs its PYTORCH reference where ``kernel`` is
    chosen for it (:func:`fallback`); ``reason`` says why (the self-check's finding)."""
    _refused[(op, kernel)] = reason


def fallback(op: str, kernel: Kernel) -> Kernel:
    """The kernel ``op`` runs for the family ``kernel``: that one where the op has it
    (:data:`OP_KERNELS`) and this process has not refused it (:func:`refuse_kernel`), else its
    PYTORCH reference."""
    if kernel in OP_KERNELS[op] and (op, kernel) not in _refused:
        return kernel
    return Kernel.PYTORCH


def resolve_kernel(op: str, kernel: Kernel | str | None) -> Kernel:
    """Picks the kernel for one call of ``op``: ``kernel``, or the process default when it is
    None, under :func:`fallback`.

    Raises ValueError, naming the op and its kernels, for an explicit kernel it does not have.
    """
    available = OP_KERNELS[op]
    if kernel is None:
        return fallback(op, _default_kernel)
    chosen = _coerce(kernel, op)
    if chosen not in available:
        names = ", ".join(k.name for k in available)
        raise ValueError(f"{op} has no {chosen.name} kernel; kernels available for {op}: {names}")
    return fallback(op, chosen)


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
    :func:`hstu_ops.selfcheck.verify_if_auto`."""
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
