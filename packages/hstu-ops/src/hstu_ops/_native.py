"""Loading of the compiled extension ``hstu_ops._C`` and the Python half of its ops.

The C++ side defines the schemas and the CPU/GPU kernels of ``torch.ops.hstu_ops.*``. This
module adds, once for all backends, what torch needs beyond the kernels: autograd formulas
(concat's gradient is the split of the output gradient, and vice versa) and fake kernels
(output shapes for meta tensors and torch.compile).

When the extension is missing or fails to load, importing ``hstu_ops`` still works: the
``PYTORCH`` kernels run and a ``NATIVE`` call raises :class:`NativeExtensionError`.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = [
    "NativeExtensionError",
    "native_available",
    "native_build_info",
    "native_ops",
]


class NativeExtensionError(RuntimeError):
    """The NATIVE kernel of an op cannot run in this process."""


_C: Any = None
_load_error: str | None = None
try:
    # torch is imported first: the extension resolves libtorch/libc10 from the process.
    from hstu_ops import _C  # type: ignore[attr-defined,no-redef]
except (ImportError, OSError, RuntimeError) as exc:
    # Not built, built against another torch (undefined symbols), or the `hstu_ops` operator
    # namespace already taken by another copy of the library in this process.
    _load_error = f"{type(exc).__name__}: {exc}"

_OPS = ("complete_cumsum", "concat_1d_jagged", "split_1d_jagged")
if _C is not None:
    _missing = [op for op in _OPS if not hasattr(torch.ops.hstu_ops, op)]
    if _missing:  # a stale build from an older source tree
        _load_error = (
            f"hstu_ops._C ({getattr(_C, '__file__', '?')}) loaded but does not register "
            f"torch.ops.hstu_ops.{{{', '.join(_missing)}}}; it is out of date"
        )
        _C = None


def native_available() -> bool:
    """Whether the compiled extension loaded and its ops are registered."""
    return _C is not None


def native_build_info() -> dict[str, Any]:
    """How the extension was built: backends, OpenMP, the torch it was compiled against.

    Keys: ``cpu``, ``cuda``, ``hip``, ``openmp`` (bools; all False when not loaded),
    ``torch_version`` (str or None) and ``error`` (why it did not load, or None).
    """
    if _C is None:
        return {
            "cpu": False,
            "cuda": False,
            "hip": False,
            "openmp": False,
            "torch_version": None,
            "error": _load_error,
        }
    return {
        "cpu": bool(_C.with_cpu),
        "cuda": bool(_C.with_cuda),
        "hip": bool(_C.with_hip),
        "openmp": bool(_C.with_openmp),
        "torch_version": str(_C.torch_version),
        "error": None,
    }


def native_ops(op: str, device: torch.device) -> Any:
    """``torch.ops.hstu_ops`` after checking that ``op`` can run NATIVE on ``device``."""
    if _C is None:
        raise NativeExtensionError(
            f"{op}: the NATIVE kernel needs the compiled extension hstu_ops._C, which was not "
            f"built or did not load ({_load_error}). Rebuild the package (in the workspace: "
            "`uv sync --reinstall-package hstu-ops`) or use kernel=Kernel.PYTORCH."
        )
    if device.type == "cuda" and not (_C.with_cuda or _C.with_hip):
        raise NativeExtensionError(
            f"{op}: the NATIVE kernel got tensors on {device}, but hstu_ops._C was built "
            "without GPU support; rebuild with HSTU_OPS_CUDA=ON (or HSTU_OPS_HIP=ON on ROCm)."
        )
    return torch.ops.hstu_ops


def _register_python_parts() -> None:
    lib = "hstu_ops"

    # Fake kernels: output metadata without computing anything.
    @torch.library.register_fake(f"{lib}::complete_cumsum")
    def _cumsum_fake(lengths: torch.Tensor) -> torch.Tensor:
        return lengths.new_empty((lengths.shape[0] + 1,))

    @torch.library.register_fake(f"{lib}::concat_1d_jagged")
    def _concat_fake(
        values_a: torch.Tensor,
        offsets_a: torch.Tensor,
        values_b: torch.Tensor,
        offsets_b: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows = values_a.shape[0] + values_b.shape[0]
        return values_a.new_empty((rows, *values_a.shape[1:])), torch.empty_like(offsets_a)

    @torch.library.register_fake(f"{lib}::split_1d_jagged")
    def _split_fake(
        values: torch.Tensor, offsets: torch.Tensor, offsets_a: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        rows_a = torch.library.get_ctx().new_dynamic_size()
        rest = values.shape[1:]
        return (
            values.new_empty((rows_a, *rest)),
            values.new_empty((values.shape[0] - rows_a, *rest)),
            torch.empty_like(offsets),
        )

    # Autograd: each op's backward is the other op, so gradients run on the same backend.
    def _concat_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        _, offsets_a, _, _ = inputs
        ctx.save_for_backward(offsets_a, output[1])

    def _concat_backward(
        ctx: Any, grad_values: torch.Tensor, _grad_offsets: Any
    ) -> tuple[Any, None, Any, None]:
        offsets_a, offsets = ctx.saved_tensors
        grad_a, grad_b, _ = torch.ops.hstu_ops.split_1d_jagged(
            grad_values.contiguous(), offsets, offsets_a
        )
        return grad_a, None, grad_b, None

    torch.library.register_autograd(
        f"{lib}::concat_1d_jagged", _concat_backward, setup_context=_concat_setup
    )

    def _split_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        values, _, offsets_a = inputs
        ctx.save_for_backward(offsets_a, output[2])
        ctx.shape_a = output[0].shape
        ctx.shape_b = output[1].shape
        ctx.dtype = values.dtype

    def _split_backward(
        ctx: Any, grad_a: Any, grad_b: Any, _grad_offsets: Any
    ) -> tuple[torch.Tensor, None, None]:
        offsets_a, offsets_b = ctx.saved_tensors
        device = offsets_a.device
        if grad_a is None:
            grad_a = torch.zeros(ctx.shape_a, dtype=ctx.dtype, device=device)
        if grad_b is None:
            grad_b = torch.zeros(ctx.shape_b, dtype=ctx.dtype, device=device)
        grad, _ = torch.ops.hstu_ops.concat_1d_jagged(
            grad_a.contiguous(), offsets_a, grad_b.contiguous(), offsets_b
        )
        return grad, None, None

    torch.library.register_autograd(
        f"{lib}::split_1d_jagged", _split_backward, setup_context=_split_setup
    )


if _C is not None:
    _register_python_parts()
