"""The Triton kernels as torch custom ops, with fake kernels: ``torch.ops.hstu_ops.triton_*``.

``torch.compile`` and CUDA graphs take a custom op whole: the compiler sees its fake kernel
(output shapes and dtypes, no data read), not the Python of its launcher, so a model step that
calls these ops traces as one graph (``fullgraph=True``), and the launches read nothing back
from the GPU. Each op's implementation imports its Triton module when first run (in the mode
``TRITON_INTERPRET`` selects, see :mod:`hstu_ops.triton._common`), so registering the ops costs
no triton import.

The public entry points (``hstu_ops.hstu_mha(..., kernel="triton")`` and the Triton modules'
``triton_<op>`` functions) check shapes, dtypes and scalars before calling an op; the op itself
checks the values of its index tensors, where :func:`hstu_ops._index_checks.index_value_checks`
allows, so that a compiled graph still refuses bad offsets at run time with the same message.

Ops: ``triton_hstu_mha_fwd`` / ``triton_hstu_mha_bwd`` (the attention, differentiable through
``torch.library.register_autograd``).
"""

from __future__ import annotations

import torch

from hstu_ops._index_checks import index_value_checks
from hstu_ops._triton import load_triton_module

__all__ = ["hstu_mha_bwd", "hstu_mha_fwd"]

_OP = "hstu_mha"
_ATTENTION = "triton_hstu_attention"


def _attention_problem(
    module, q, k, v, seq_offsets, num_targets, scalars: tuple, *, check_values: bool
):
    """The launchers' problem from the ops' arguments (``scalars``: those after num_targets);
    the index values checked here, at run time, when ``check_values`` and
    :func:`~hstu_ops._index_checks.index_value_checks` allow."""
    from hstu_ops.pytorch.pt_hstu_attention import _check_inputs
    from hstu_ops.triton import _common

    max_seq_len, alpha, causal, dropout_pr, max_attn_len, contextual_seq_len, seed, config = scalars

    lengths = _check_inputs(
        max_seq_len, q, k, v, seq_offsets, dropout_pr, num_targets, max_attn_len,
        contextual_seq_len, values=check_values and index_value_checks(),
    )  # fmt: skip
    # On a GPU the grid covers max_seq_len rows per sequence, a bound known without reading
    # the offsets (the programs past a sequence's end return at once). CPU offsets (Triton's
    # interpreter) are read for free, and the interpreter pays for every program it starts.
    max_len = max_seq_len
    if not _common.on_gpu(seq_offsets.device):
        max_len = int(lengths.max()) if lengths.numel() else 0
    return module._Problem(
        seq_offsets=seq_offsets,
        num_targets=num_targets,
        max_len=max_len,
        max_seq_len=max_seq_len,
        alpha=alpha,
        causal=causal,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
        config=module.BlockConfig(*config),
        dropout_pr=dropout_pr if seed is not None else 0.0,
        dropout_seed=int(seed) if seed is not None else 0,  # a CPU tensor: no GPU wait
    )


@torch.library.custom_op("hstu_ops::triton_hstu_mha_fwd", mutates_args=())
def hstu_mha_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: torch.Tensor | None,
    max_seq_len: int,
    alpha: float,
    causal: bool,
    dropout_pr: float,
    max_attn_len: int,
    contextual_seq_len: int,
    seed: torch.Tensor | None,
    config: list[int],
) -> torch.Tensor:
    """The attention's forward: [total, heads, hidden_dim]. ``seed``: the dropout seed as an
    int64 CPU scalar (None without dropout); ``config``: the fields of a ``BlockConfig``."""
    module = load_triton_module(_OP, _ATTENTION)
    scalars = (max_seq_len, alpha, causal, dropout_pr, max_attn_len, contextual_seq_len, seed)
    problem = _attention_problem(
        module, q, k, v, seq_offsets, num_targets, (*scalars, config), check_values=True
    )
    return module.hstu_attention_fwd(q, k, v, problem)


@hstu_mha_fwd.register_fake
def _(q, k, v, seq_offsets, num_targets, max_seq_len, alpha, causal, dropout_pr, max_attn_len,
      contextual_seq_len, seed, config):  # fmt: skip
    return v.new_empty((q.shape[0], q.shape[1], v.shape[2]))


@torch.library.custom_op("hstu_ops::triton_hstu_mha_bwd", mutates_args=())
def hstu_mha_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    seq_offsets: torch.Tensor,
    num_targets: torch.Tensor | None,
    max_seq_len: int,
    alpha: float,
    causal: bool,
    dropout_pr: float,
    max_attn_len: int,
    contextual_seq_len: int,
    seed: torch.Tensor | None,
    config: list[int],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) for the output gradient ``dout``; the forward's other arguments."""
    module = load_triton_module(_OP, _ATTENTION)
    scalars = (max_seq_len, alpha, causal, dropout_pr, max_attn_len, contextual_seq_len, seed)
    # The forward checked these very offsets and targets (they are saved for the backward):
    # checking again would only wait for the GPU a second time.
    problem = _attention_problem(
        module, q, k, v, seq_offsets, num_targets, (*scalars, config), check_values=False
    )
    return module.hstu_attention_bwd(dout, q, k, v, problem)


@hstu_mha_bwd.register_fake
def _(dout, q, k, v, seq_offsets, num_targets, max_seq_len, alpha, causal, dropout_pr,
      max_attn_len, contextual_seq_len, seed, config):  # fmt: skip
    contiguous = torch.contiguous_format
    return (
        torch.empty_like(q, memory_format=contiguous),
        torch.empty_like(k, memory_format=contiguous),
        torch.empty_like(v, memory_format=contiguous),
    )


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, seq_offsets, num_targets, *scalars = inputs
    seed = scalars[6]
    ctx.save_for_backward(q, k, v, seq_offsets, num_targets, seed)
    ctx.scalars = [*scalars[:6], None, *scalars[7:]]  # the seed travels as a saved tensor


def _backward(ctx, dout):
    q, k, v, seq_offsets, num_targets, seed = ctx.saved_tensors
    scalars = list(ctx.scalars)
    scalars[6] = seed
    dq, dk, dv = hstu_mha_bwd(dout.contiguous(), q, k, v, seq_offsets, num_targets, *scalars)
    return (dq, dk, dv) + (None,) * 10


hstu_mha_fwd.register_autograd(_backward, setup_context=_setup_context)
