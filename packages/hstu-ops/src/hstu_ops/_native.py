"""Loading of the compiled extension ``hstu_ops._C`` and the Python half of its ops.

The C++ side defines the schemas and the CPU/GPU kernels of ``torch.ops.hstu_ops.*``. This
module adds, once for all backends, what torch needs beyond the kernels: autograd formulas
(concat's gradient is the split of the output gradient, and vice versa; ``hstu_mha_fwd``'s is
``hstu_mha_bwd``, which recomputes the attention weights from the saved q and k) and fake
kernels (output shapes for meta tensors and torch.compile).

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

_OPS = (
    "complete_cumsum",
    "concat_1d_jagged",
    "split_1d_jagged",
    "hstu_mha_fwd",
    "hstu_mha_bwd",
)
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


def cpu_attention_isa() -> str | None:
    """Instruction set of the NATIVE CPU attention kernels: "generic", "avx2" or "avx512".

    The best that the CPU and ATen's capability (``ATEN_CPU_CAPABILITY``) allow, chosen on first
    use; None when the extension is not loaded.
    """
    return None if _C is None else str(_C.cpu_attention_isa())


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

    # Jagged HSTU attention: the output has v's shape and dtype, the gradients those of q, k, v.
    @torch.library.register_fake(f"{lib}::hstu_mha_fwd")
    def _hstu_mha_fwd_fake(
        max_seq_len: int,
        alpha: float,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        seq_offsets: torch.Tensor,
        causal: bool = True,
        num_targets: torch.Tensor | None = None,
        max_attn_len: int = 0,
        contextual_seq_len: int = 0,
    ) -> torch.Tensor:
        return v.new_empty(v.shape)

    @torch.library.register_fake(f"{lib}::hstu_mha_bwd")
    def _hstu_mha_bwd_fake(
        dout: torch.Tensor,
        max_seq_len: int,
        alpha: float,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        seq_offsets: torch.Tensor,
        causal: bool = True,
        num_targets: torch.Tensor | None = None,
        max_attn_len: int = 0,
        contextual_seq_len: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    def _hstu_mha_setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        max_seq_len, alpha, q, k, v, seq_offsets, causal, num_targets = inputs[:8]
        max_attn_len, contextual_seq_len = inputs[8:]
        # Only the inputs are saved: the backward recomputes the weights from q and k.
        ctx.save_for_backward(q, k, v, seq_offsets, num_targets)
        ctx.options = (max_seq_len, alpha, causal, max_attn_len, contextual_seq_len)

    def _hstu_mha_backward(ctx: Any, dout: torch.Tensor) -> tuple[Any, ...]:
        q, k, v, seq_offsets, num_targets = ctx.saved_tensors
        max_seq_len, alpha, causal, max_attn_len, contextual_seq_len = ctx.options
        dq, dk, dv = torch.ops.hstu_ops.hstu_mha_bwd(
            dout,
            max_seq_len,
            alpha,
            q,
            k,
            v,
            seq_offsets,
            causal,
            num_targets,
            max_attn_len,
            contextual_seq_len,
        )
        return None, None, dq, dk, dv, None, None, None, None, None

    torch.library.register_autograd(
        f"{lib}::hstu_mha_fwd", _hstu_mha_backward, setup_context=_hstu_mha_setup
    )


if _C is not None:
    _register_python_parts()
