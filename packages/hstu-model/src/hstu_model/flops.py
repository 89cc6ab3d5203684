"""Analytical FLOPs per sample of the HSTU ranking model (`ModelConfig`), by component.

Method
------
A sample is one sequence of N = C + L + T tokens: C contextual tokens (`contextual_seq_len`),
L history events (by default `history_length`, the longest history, as in a batch of full
histories) and T candidates (`num_candidates`). Every component is counted from the matrix
products `HSTURanker.forward` runs for that sample, at 2 FLOPs per multiply-add
(an [m, k] @ [k, n] product is 2 m k n FLOPs):

- token MLPs on each of the L + T history and candidate tokens: content Linear(D -> P),
  Linear(P -> D); additional Linear(2D -> P), Linear(P -> D); action Linear(A -> P),
  Linear(P -> D) with A = len(action_weights) x action_embedding_dim (the action encoding
  itself is a masked copy of the action vectors, no product);
- contextual projection: one D x D map per contextual token;
- each STU layer: the uvqk projection D -> H (2 d_v + 2 d_qk) on all N tokens; attention,
  q k^T (2 d_qk) and attn @ v (2 d_v) per head and per (query, key) pair; the output
  projection 3 H d_v -> D on all N tokens;
- on the T candidates: postprocessor Linear(D + 4 -> D); item MLP Linear(3D -> I),
  Linear(I -> D); head Linear(D -> K), Linear(K -> tasks) (I, K: item_hidden_dim,
  head_hidden_dim);
- embedding lookups (id tables, position and time-gap tables): 0 FLOPs (gathers, memory-bound).

Attention is given twice. The *causal* count takes only the (query, key) pairs that the causal
target-aware mask of `hstu_ops.hstu_mha` allows (see `attention_pairs`): about N^2 / 2 (the
contextual tokens are plain causal tokens, so every token sees itself and the tokens before
it; a candidate sees everything but the other candidates). That
is the model's work, what a jagged kernel that skips masked tiles performs. The *full* count
takes all N^2 pairs: what a dense implementation computes before it masks, e.g. the PyTorch
reference of `hstu_mha`, which pads every sequence to the longest of the batch (so for a batch
of full histories it executes exactly the full count, and for shorter sequences more).

A training step is forward + backward with backward = 2 x forward for every matrix product
(the gradient with respect to the input and with respect to the weight, or to both operands of
q k^T and attn @ v), so train = 3 x forward. This is the usual model-FLOPs convention; it
ignores what an implementation adds (activation recomputation, a flash-attention backward that
recomputes q k^T) and what it saves (no input gradient of the action-bit mask, which is no
parameter).

Not counted: element-wise work (layer norms, SiLU, bias and residual adds, u * norm(attn),
dropout, the attention's scale, SiLU, 1/max_seq_len and mask, the sqrt(D) scaling and the
positional additions) and the optimizer. Per token and layer these are O(D + H d_v) operations
against O(D H (d_qk + d_v)) for the projections, and about 10 per attention pair and head
(scale, SiLU, 1/max_seq_len, mask) against 2 (d_qk + d_v): a few percent at the presets'
shapes (most in `tiny`, whose heads are 32 wide).

`reference_estimate` reproduces the DLRMv4 reference's published static estimate (315.7
GFLOP/sample for yambda-5b, 57% attention) for comparison; see its docstring. `summary` is the
`flops_per_sample` section of `python -m hstu_model describe`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hstu_model.config import ModelConfig

COMPONENTS: tuple[str, ...] = (
    "token_mlps",
    "contextual_projection",
    "stu_uvqk",
    "stu_attention",
    "stu_output",
    "postprocessor",
    "item_mlp",
    "head",
    "embedding_lookups",
)
"""Components of `FlopCount.forward`, in the model's order; the three `stu_` entries sum
over the layers."""

TRAIN_FACTOR = 3
"""Training step FLOPs per forward FLOP: forward + backward at 2 x forward."""

TIME_FEATURES = 4
"""Hour-of-day and day-of-week sin/cos features the postprocessor appends."""


def attention_pairs(contextual: int, history: int, candidates: int) -> int:
    """(query, key) pairs the causal target-aware HSTU mask allows in one sequence of
    `contextual` + `history` + `candidates` tokens (`hstu_ops.hstu_mha`, causal=True,
    num_targets=candidates, contextual_seq_len=0 as the model runs it, no max_attn_len).

    - the C + L contextual and history tokens are plain causal tokens: token r (1..C + L)
      sees the r - 1 before it and itself, (C + L) (C + L + 1) / 2 pairs;
    - each candidate sees the contextual tokens, the history and itself: T (C + L + 1).
    """
    for name, value in (("contextual", contextual), ("history", history)):
        if value < 0:
            raise ValueError(f"attention_pairs: {name} must be >= 0, got {value}")
    if candidates < 0:
        raise ValueError(f"attention_pairs: candidates must be >= 0, got {candidates}")
    causal, t = contextual + history, candidates
    return causal * (causal + 1) // 2 + t * (causal + 1)


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one sample of a `ModelConfig` (see the module docstring for the method)."""

    contextual: int
    """Contextual tokens C."""
    history: int
    """History events L."""
    candidates: int
    """Candidate tokens T."""
    num_layers: int
    """STU layers."""
    attention_pairs: int
    """(query, key) pairs the causal target-aware mask allows."""
    forward: Mapping[str, int]
    """Forward FLOPs per component (`COMPONENTS`), attention over the allowed pairs."""
    stu_attention_full: int
    """Forward attention FLOPs of all the STU layers over all N^2 pairs."""

    @property
    def tokens(self) -> int:
        """Sequence length N = C + L + T."""
        return self.contextual + self.history + self.candidates

    @property
    def full_pairs(self) -> int:
        """N^2: every (query, key) pair of the sequence."""
        return self.tokens**2

    @property
    def forward_total(self) -> int:
        """Forward FLOPs, causal attention."""
        return sum(self.forward.values())

    @property
    def forward_total_full(self) -> int:
        """Forward FLOPs with attention over all N^2 pairs."""
        return self.forward_total - self.forward["stu_attention"] + self.stu_attention_full

    @property
    def train(self) -> dict[str, int]:
        """Training-step FLOPs per component (forward + backward = 3 x forward)."""
        return {name: TRAIN_FACTOR * flops for name, flops in self.forward.items()}

    @property
    def train_total(self) -> int:
        """Training-step FLOPs, causal attention."""
        return TRAIN_FACTOR * self.forward_total

    @property
    def train_total_full(self) -> int:
        """Training-step FLOPs with attention over all N^2 pairs."""
        return TRAIN_FACTOR * self.forward_total_full

    def per_layer(self) -> dict[str, int]:
        """Forward FLOPs of one STU layer (all layers are alike)."""
        n = self.num_layers
        return {
            "uvqk": self.forward["stu_uvqk"] // n,
            "attention": self.forward["stu_attention"] // n,
            "attention_full": self.stu_attention_full // n,
            "output": self.forward["stu_output"] // n,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: sequence, pairs, forward and train-step FLOPs, shares."""
        causal, full = self.forward_total, self.forward_total_full
        return {
            "method": (
                "matmul FLOPs (2 per multiply-add) of one sample of contextual + history + "
                "candidates tokens at full history; attention over the pairs the causal "
                "target-aware mask allows (causal) or over all N^2 pairs (full); train step = "
                "3 x forward; embedding lookups and element-wise ops count 0 "
                "(hstu_model.flops)"
            ),
            "sequence": {
                "contextual": self.contextual,
                "history": self.history,
                "candidates": self.candidates,
                "tokens": self.tokens,
            },
            "attention_pairs": {"causal": self.attention_pairs, "full": self.full_pairs},
            "forward": {**self.forward, "total": causal},
            "forward_full_attention": {"stu_attention": self.stu_attention_full, "total": full},
            "per_stu_layer": self.per_layer(),
            "train_step": {
                "total": self.train_total,
                "total_full_attention": self.train_total_full,
            },
            "attention_share": {
                "causal": self.forward["stu_attention"] / causal,
                "full": self.stu_attention_full / full,
            },
        }


def flops_per_sample(model: ModelConfig, history: int | None = None) -> FlopCount:
    """FLOPs of one sample of `model` with `history` events (default: `history_length`)."""
    history = model.history_length if history is None else history
    if not 0 <= history <= model.history_length:
        raise ValueError(
            f"flops_per_sample: history must be in [0, {model.history_length}] "
            f"(history_length), got {history}"
        )
    d, p = model.embedding_dim, model.preprocessor_hidden_dim
    heads, dqk, dv, layers = (
        model.num_heads,
        model.attention_dim,
        model.linear_dim,
        model.num_layers,
    )
    actions = len(model.action_weights) * model.action_embedding_dim
    item, head = model.item_hidden_dim, model.head_hidden_dim
    c, t = model.contextual_seq_len, model.num_candidates
    n = c + history + t
    pairs = attention_pairs(c, history, t)
    per_pair = heads * 2 * (dqk + dv)  # q k^T and attn @ v, every head
    forward = {
        "token_mlps": (history + t) * 2 * (d * p + 2 * d * p + actions * p + 3 * p * d),
        "contextual_projection": c * 2 * d * d,
        "stu_uvqk": layers * n * 2 * d * heads * (2 * dv + 2 * dqk),
        "stu_attention": layers * pairs * per_pair,
        "stu_output": layers * n * 2 * (3 * heads * dv) * d,
        "postprocessor": t * 2 * (d + TIME_FEATURES) * d,
        "item_mlp": t * 2 * (3 * d * item + item * d),
        "head": t * 2 * (d * head + head * model.num_tasks),
        "embedding_lookups": 0,
    }
    assert tuple(forward) == COMPONENTS
    return FlopCount(
        contextual=c,
        history=history,
        candidates=t,
        num_layers=layers,
        attention_pairs=pairs,
        forward=forward,
        stu_attention_full=layers * n * n * per_pair,
    )


def reference_estimate(model: ModelConfig) -> dict[str, int | float]:
    """The DLRMv4 reference's static per-sample training estimate, reconstructed.

    The reference reports 315.7 GFLOP/sample for its 3-layer, max_seq_len 4096 model (57%
    attention) as a dense yardstick for MFU. This formula reproduces both figures (315.68 GFLOP,
    57.1%) from the config alone; it is our reconstruction, not the reference's code:

    - N = max_seq_len (every sequence at the padded length), per STU layer;
    - projections: 6 x N x (D H (2 d_v + 2 d_qk) + 3 H d_v D) (forward + backward, 3 x 2);
    - attention: N^2 / 2 pairs (causal half) x H x 2 x (4 d_qk + 3 d_v), i.e. seven N x N
      matrix products per head, 2 in forward (q k^T, attn @ v) and 5 in backward (q k^T
      recomputed, dV, dP, dQ, dK), as flash-style kernels run it;
    - nothing else (token MLPs, contextual projection, postprocessor, item MLP, head: not
      counted).

    Returns `{"train_step": FLOPs, "attention": FLOPs, "attention_share": fraction}`.
    """
    n = model.max_seq_len
    d, heads, dqk, dv = model.embedding_dim, model.num_heads, model.attention_dim, model.linear_dim
    projections = 6 * n * (d * heads * (2 * dv + 2 * dqk) + 3 * heads * dv * d)
    attention = n * n // 2 * heads * 2 * (4 * dqk + 3 * dv)  # N^2 / 2 pairs, 7 products
    total = model.num_layers * (projections + attention)
    return {
        "train_step": total,
        "attention": model.num_layers * attention,
        "attention_share": model.num_layers * attention / total,
    }


def summary(model: ModelConfig, history: int | None = None) -> dict[str, Any]:
    """`flops_per_sample(model, history).to_dict()` plus the reconstructed reference estimate
    (`reference_estimate`): the `flops_per_sample` section of `python -m hstu_model describe`."""
    return {
        **flops_per_sample(model, history).to_dict(),
        "reference_estimate": reference_estimate(model),
    }
