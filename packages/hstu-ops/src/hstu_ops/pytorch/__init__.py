"""Readable PyTorch references of every op: the specification the other kernels must match."""

from hstu_ops.pytorch.pt_hstu_attention import hstu_attention_mask, pytorch_hstu_mha
from hstu_ops.pytorch.pt_jagged import (
    jagged_to_padded_dense,
    padded_dense_to_jagged,
    pytorch_complete_cumsum,
    pytorch_concat_1d_jagged,
    pytorch_split_1d_jagged,
)

__all__ = [
    "hstu_attention_mask",
    "jagged_to_padded_dense",
    "padded_dense_to_jagged",
    "pytorch_complete_cumsum",
    "pytorch_concat_1d_jagged",
    "pytorch_hstu_mha",
    "pytorch_split_1d_jagged",
]
