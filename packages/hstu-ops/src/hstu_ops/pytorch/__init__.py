"""Readable PyTorch references of every op: the specification the other kernels must match."""

from hstu_ops.pytorch.pt_hstu_attention import hstu_attention_mask, pytorch_hstu_mha
from hstu_ops.pytorch.pt_hstu_compute import (
    pytorch_hstu_compute_output,
    pytorch_hstu_compute_uqvk,
    pytorch_norm_mul_dropout,
)
from hstu_ops.pytorch.pt_jagged import (
    jagged_to_padded_dense,
    padded_dense_to_jagged,
    pytorch_complete_cumsum,
    pytorch_concat_1d_jagged,
    pytorch_split_1d_jagged,
)
from hstu_ops.pytorch.pt_jagged_2d import (
    pytorch_concat_2D_jagged,
    pytorch_jagged_dense_bmm_broadcast_add,
    pytorch_split_2D_jagged,
)
from hstu_ops.pytorch.pt_mm import pytorch_addmm
from hstu_ops.pytorch.pt_norms import (
    pytorch_layer_norm,
    pytorch_rms_norm,
    pytorch_swish_layer_norm,
)
from hstu_ops.pytorch.pt_position import (
    pytorch_add_timestamp_positional_embeddings,
    timestamp_positional_indices,
)

__all__ = [
    "hstu_attention_mask",
    "jagged_to_padded_dense",
    "padded_dense_to_jagged",
    "pytorch_add_timestamp_positional_embeddings",
    "pytorch_addmm",
    "pytorch_complete_cumsum",
    "pytorch_concat_1d_jagged",
    "pytorch_concat_2D_jagged",
    "pytorch_hstu_compute_output",
    "pytorch_hstu_compute_uqvk",
    "pytorch_hstu_mha",
    "pytorch_jagged_dense_bmm_broadcast_add",
    "pytorch_layer_norm",
    "pytorch_norm_mul_dropout",
    "pytorch_rms_norm",
    "pytorch_split_1d_jagged",
    "pytorch_split_2D_jagged",
    "pytorch_swish_layer_norm",
    "timestamp_positional_indices",
]
