"""Which hstu-ops kernel family a run uses on its device: `auto` resolved, a choice checked.

`resolve_kernel(kernel, device_type)` turns the run's `--kernel` into one of the model's
kernels (`ModelConfig.kernel`): `auto` is `triton` on a GPU (CUDA or ROCm; torch calls both
devices "cuda") and `native` on the CPU. A kernel that cannot run there is refused with one
`KernelUnavailableError` naming `--kernel`, the kernel and the device, so that a run fails
before it creates anything rather than at its first step, after its log has started.

The device type is the one the run trains on (`hstu_model.training.distributed.device_type`).
"""

from __future__ import annotations

import os

from hstu_model.config import ConfigError

__all__ = [
    "AUTO",
    "KERNELS",
    "KernelUnavailableError",
    "auto_kernel",
    "check_kernel",
    "interpreting",
    "resolve_kernel",
    "why_not",
]

AUTO = "auto"
KERNELS = (AUTO, "pytorch", "native", "triton")
"""What `--kernel` accepts: `auto` and every kernel family of hstu-ops."""

_GPU_TYPES = ("cuda", "hip")
"""Device types of a GPU the Triton kernels compile for (ROCm's torch reports "cuda" too)."""


class KernelUnavailableError(ConfigError):
    """The chosen kernel cannot run on the run's device (a bad input: nothing was created)."""


def interpreting() -> bool:
    """Whether Triton runs its kernels in its CPU interpreter (`TRITON_INTERPRET`), as
    hstu_ops.triton reads it; without importing triton."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def auto_kernel(device_type: str) -> str:
    """What `auto` picks: the fastest family for the device, unchecked."""
    if device_type in _GPU_TYPES:
        return "triton"
    return "native" if device_type == "cpu" else "pytorch"


def resolve_kernel(kernel: str, device_type: str) -> str:
    """The model kernel that `kernel` (one of KERNELS) means on a `device_type` device ("cpu",
    "cuda"), checked by `check_kernel`."""
    if kernel not in KERNELS:
        raise ConfigError(f"unknown kernel {kernel!r}; expected one of {', '.join(KERNELS)}")
    chosen = kernel
    if kernel == AUTO:
        chosen = auto_kernel(device_type)
    check_kernel(chosen, device_type, asked=kernel)
    return chosen


def check_kernel(kernel: str, device_type: str, asked: str | None = None) -> None:
    """KernelUnavailableError when the model's `kernel` cannot run on a `device_type` device;
    `asked`: what the user passed (`auto` is named with what it chose)."""
    why = why_not(kernel, device_type)
    if why is None:
        return
    what = f"--kernel {kernel}" if asked in (None, kernel) else f"--kernel {asked} (here {kernel})"
    others = [k for k in ("native", "triton") if k != kernel and why_not(k, device_type) is None]
    instead = " or ".join(f"--kernel {k}" for k in (*others, "pytorch"))
    raise KernelUnavailableError(
        f"{what} cannot run on the {device_type} device: {why}; use {instead}"
    )


def why_not(kernel: str, device_type: str) -> str | None:
    """Why `kernel` cannot run on the device, or None when it can."""
    if kernel == "pytorch":
        return None
    if kernel == "triton":
        if device_type not in _GPU_TYPES and not (device_type == "cpu" and interpreting()):
            return (
                "the Triton kernels need a CUDA or ROCm GPU (on the CPU only in Triton's "
                "interpreter, TRITON_INTERPRET=1, which is for tests: it is very slow)"
            )
        import hstu_ops  # imports triton only here: the check costs nothing otherwise

        if not hstu_ops.triton_available():
            return "the Triton kernels cannot be imported (is the triton package installed?)"
        return None
    if kernel == "native":
        if device_type != "cpu":
            return (
                "the native HSTU attention runs on CPU tensors only (the extension's GPU build "
                "covers only the 1-D jagged primitives)"
            )
        import hstu_ops

        if not hstu_ops.native_build_info()["cpu"]:
            error = hstu_ops.native_build_info()["error"] or "built without the CPU ops"
            return f"the native ops of hstu-ops did not load ({error})"
        return None
    raise ConfigError(f"unknown kernel {kernel!r}; expected one of {', '.join(KERNELS[1:])}")
