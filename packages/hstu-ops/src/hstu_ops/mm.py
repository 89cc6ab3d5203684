"""``addmm`` (op family 6), dispatched by kernel.

Kernels: PYTORCH (the reference, :mod:`hstu_ops.pytorch.pt_mm`, i.e. torch.addmm after this
package's argument checks) and TRITON (:mod:`hstu_ops.triton.triton_addmm`, a Triton matmul
with the bias add fused, imported on first use).
"""

from __future__ import annotations

import torch

from hstu_ops._kernel import Kernel, dispatch
from hstu_ops.pytorch.pt_mm import pytorch_addmm

__all__ = ["addmm"]


def addmm(
    input: torch.Tensor,
    mat1: torch.Tensor,
    mat2: torch.Tensor,
    *,
    kernel: Kernel | str | None = None,
) -> torch.Tensor:
    """``input + mat1 @ mat2``.

    Args:
        input: a bias [N] added to every row, or [M, N], or 2-D broadcasting to [M, N].
        mat1: [M, K]. mat2: [K, N]. All three share one floating dtype and device.
        kernel: ``Kernel.PYTORCH``, ``Kernel.TRITON`` (float16, bfloat16, float32 on CUDA/ROCm
            tensors; tiles pinned per GPU architecture, or autotuned with
            ``HSTU_OPS_TRITON_AUTOTUNE=full``) or None for the process default.

    Returns:
        [M, N]; differentiable in all three arguments.
    """
    _, impl = dispatch("addmm", kernel, pytorch=pytorch_addmm, triton="triton_addmm")
    return impl(input, mat1, mat2)
