"""PyTorch reference of ``addmm`` (op family 6): ``input + mat1 @ mat2``, which is torch.addmm.

``mat1`` is ``[M, K]``, ``mat2`` is ``[K, N]``; ``input`` is a bias ``[N]`` added to every row,
or ``[M, N]``, or any 2-D shape that broadcasts to ``[M, N]`` (``[1, N]``, ``[M, 1]``, ``[1,
1]``). All three share one floating dtype and one device. The result is ``[M, N]``; gradients
reach all three (the bias gradient is the output gradient summed over the broadcast rows).
This is generative-recommenders' ``ops/mm.py`` ``addmm`` with ``beta = alpha = 1``.
"""

from __future__ import annotations

import torch

from hstu_ops.pytorch.pt_jagged import _check_same_device, _dtype_name

__all__ = ["check_addmm_args", "pytorch_addmm"]

_OP = "addmm"


def check_addmm_args(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> None:
    """Raises ValueError/TypeError naming the bad argument of addmm and its value."""
    for name, t in (("input", input), ("mat1", mat1), ("mat2", mat2)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{_OP}: {name} must be a tensor, got {type(t).__name__}")
    if mat1.dim() != 2:
        raise ValueError(f"{_OP}: mat1 must be 2-D [M, K], got shape {list(mat1.shape)}")
    if mat2.dim() != 2:
        raise ValueError(f"{_OP}: mat2 must be 2-D [K, N], got shape {list(mat2.shape)}")
    m, k = mat1.shape
    n = mat2.shape[1]
    if mat2.shape[0] != k:
        raise ValueError(f"{_OP}: mat2.shape[0] = {mat2.shape[0]} must equal mat1.shape[1] = {k}")
    if input.dim() not in (1, 2):
        raise ValueError(
            f"{_OP}: input must be a 1-D bias [N] or 2-D [M, N], got shape {list(input.shape)}"
        )
    broadcasts = input.shape[-1] in (1, n) and (input.dim() == 1 or input.shape[0] in (1, m))
    if not broadcasts:
        raise ValueError(
            f"{_OP}: input of shape {list(input.shape)} does not broadcast to [M, N] = {[m, n]}"
        )
    if not (input.dtype == mat1.dtype == mat2.dtype) or not mat1.is_floating_point():
        raise TypeError(
            f"{_OP}: input, mat1 and mat2 must share one floating dtype, got "
            f"{_dtype_name(input.dtype)}, {_dtype_name(mat1.dtype)}, {_dtype_name(mat2.dtype)}"
        )
    _check_same_device(_OP, "mat2", mat2, "mat1", mat1)
    _check_same_device(_OP, "input", input, "mat1", mat1)


def pytorch_addmm(input: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """``input + mat1 @ mat2`` (torch.addmm) after the argument checks of the other kernels."""
    check_addmm_args(input, mat1, mat2)
    return torch.addmm(input, mat1, mat2)
