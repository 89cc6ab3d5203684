"""The HSTU ranking model: embeddings, sequence assembly, STU stack, candidate head.

A sequence is built per sample as [contextual tokens][history][candidates] in jagged form
(values [total_tokens, D] plus offsets) and run through causal HSTU attention in which each
candidate sees the contextual tokens, the whole history and itself but not the other
candidates. The contextual tokens are the user id and then `ModelConfig.contextual_features`
(the reference's seven hashed crosses), one token each.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torchrec.modules.embedding_configs import EmbeddingConfig
from torchrec.modules.embedding_modules import EmbeddingCollection
from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

import hstu_ops
from hstu_model.config import ContextualFeature, EmbeddingTable, FeatureNames, ModelConfig

SECONDS_PER_HOUR = 3600
SECONDS_PER_DAY = 86_400


def embedding_tables(
    features: FeatureNames,
    vocab_sizes: Mapping[str, int],
    contextual_features: Sequence[ContextualFeature] = (),
) -> list[EmbeddingTable]:
    """The tables of the model: the id tables, whose rows `vocab_sizes` gives (uid, item_id,
    artist_id, album_id), then one table per contextual feature, named as its feature."""
    layout = {
        "item_id": (features.item_id, features.candidate_item_id),
        "artist_id": (features.artist_id, features.candidate_artist_id),
        "album_id": (features.album_id, features.candidate_album_id),
        "uid": (features.uid,),
    }
    missing = sorted(set(layout) - set(vocab_sizes))
    if missing:
        raise ValueError(f"vocab_sizes: missing table size(s) for {', '.join(missing)}")
    tables = [EmbeddingTable(name, int(vocab_sizes[name]), names) for name, names in layout.items()]
    tables += [EmbeddingTable(f.name, f.num_embeddings, (f.name,)) for f in contextual_features]
    return tables


class SwishLayerNorm(nn.Module):
    """x * sigmoid(layer_norm(x))."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.norm(x))


class ContextualProjection(nn.Module):
    """One affine map D -> D per contextual token: [B, C, D] -> [B, C, D].

    Follows the reference's ContextualPreprocessor (facebookresearch/generative-recommenders,
    generative_recommenders/modules/preprocessors.py, used by DlrmHSTU): each contextual feature's
    embedding gets its own linear map and bias (a batched matmul over the C contextual slots),
    weights drawn from N(0, 2 / (D_in + D_out)), biases zero. The reference's hidden-256 MLP
    (`preprocessor_hidden_dim`) is applied to the sequence embeddings, not to the contextual ones;
    here that is `HSTURanker.content_encoder`.
    """

    def __init__(self, num_tokens: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_tokens, dim, dim))
        self.bias = nn.Parameter(torch.empty(num_tokens, dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        dim = self.weight.shape[-1]
        nn.init.normal_(self.weight, std=math.sqrt(2.0 / (dim + dim)))
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bcd,cde->bce", x, self.weight) + self.bias


class STULayer(nn.Module):
    """One sequential transduction unit, as the DLRMv4 reference's STULayer computes it.

    u, q, k, v = split(layer_norm(x) @ W_uvqk + b_uvqk), u = silu(u) (only u);
    attn = hstu_mha(q, k, v) (causal, target-aware, contextual tokens);
    out = x + dropout([u, attn, u * layer_norm(attn)]) @ W_out (no bias).
    Norms use eps 1e-6; W_uvqk and W_out are Xavier-uniform, biases zero, norm weights one.
    """

    NORM_EPS = 1e-6

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        heads, dqk, dv, d = (
            config.num_heads,
            config.attention_dim,
            config.linear_dim,
            config.embedding_dim,
        )
        self.input_norm_weight = nn.Parameter(torch.empty(d))
        self.input_norm_bias = nn.Parameter(torch.empty(d))
        self.uvqk_weight = nn.Parameter(torch.empty(d, heads * (2 * dv + 2 * dqk)))
        self.uvqk_bias = nn.Parameter(torch.empty(heads * (2 * dv + 2 * dqk)))
        self.output_norm_weight = nn.Parameter(torch.empty(heads * dv))
        self.output_norm_bias = nn.Parameter(torch.empty(heads * dv))
        # [u, attn, u * norm(attn)] -> d: the reference's concat_ux output block.
        self.output_weight = nn.Parameter(torch.empty(3 * heads * dv, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.input_norm_weight)
        nn.init.zeros_(self.input_norm_bias)
        nn.init.xavier_uniform_(self.uvqk_weight)
        nn.init.zeros_(self.uvqk_bias)
        nn.init.ones_(self.output_norm_weight)
        nn.init.zeros_(self.output_norm_bias)
        nn.init.xavier_uniform_(self.output_weight)

    def forward(
        self,
        x: torch.Tensor,
        seq_offsets: torch.Tensor,
        max_seq_len: int,
        num_targets: torch.Tensor,
        attention_kernel: hstu_ops.Kernel = hstu_ops.Kernel.PYTORCH,
        layer_kernel: hstu_ops.Kernel = hstu_ops.Kernel.PYTORCH,
    ) -> torch.Tensor:
        cfg = self.config
        heads, dqk, dv = cfg.num_heads, cfg.attention_dim, cfg.linear_dim
        u, q, k, v = hstu_ops.hstu_compute_uqvk(
            x,
            self.input_norm_weight.to(x.dtype),
            self.input_norm_bias.to(x.dtype),
            self.NORM_EPS,
            heads,
            dqk,
            dv,
            self.uvqk_weight.to(x.dtype),
            self.uvqk_bias.to(x.dtype),
            kernel=layer_kernel,
        )
        attn = hstu_ops.hstu_mha(
            max_seq_len,
            1.0 / math.sqrt(dqk),
            q,
            k,
            v,
            seq_offsets,
            causal=True,
            dropout_pr=cfg.attention_dropout,
            training=self.training,
            num_targets=num_targets,
            contextual_seq_len=cfg.contextual_seq_len,
            kernel=attention_kernel,
        )
        return hstu_ops.hstu_compute_output(
            attn.reshape(-1, heads * dv),
            u,
            x,
            self.output_norm_weight.to(x.dtype),
            self.output_norm_bias.to(x.dtype),
            self.NORM_EPS,
            self.output_weight.to(x.dtype),
            num_heads=heads,
            linear_dim=dv,
            dropout_ratio=cfg.linear_dropout,
            training=self.training,
            concat_ux=True,
            group_norm=False,
            kernel=layer_kernel,
        )


@dataclass
class ModelOutput:
    logits: torch.Tensor
    """[num_candidates_total, num_tasks] logits, candidates in batch order."""


# A pytree node, so that DistributedDataParallel finds the logits in the output: with TorchRec's
# default static_graph=True it only all-reduces the gradients through the output's tensors,
# and an opaque dataclass would leave each rank with its own dense gradients.
torch.utils._pytree.register_dataclass(ModelOutput)


class HSTURanker(nn.Module):
    """HSTU ranking model over a user-history KJT and a candidate KJT."""

    def __init__(
        self,
        config: ModelConfig,
        vocab_sizes: Mapping[str, int],
        device: torch.device | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.features = config.features
        K = hstu_ops.Kernel
        self.kernel = K[config.kernel.upper()]
        # Each op family runs the chosen kernel where it has one, else its PyTorch reference.
        self.jagged_kernel = K.NATIVE if self.kernel is K.NATIVE else K.PYTORCH
        """complete_cumsum and 1-D jagged concat: PYTORCH or NATIVE."""
        self.layer_kernel = K.TRITON if self.kernel is K.TRITON else K.PYTORCH
        """hstu_compute_uqvk / hstu_compute_output: PYTORCH or TRITON."""
        self.attention_kernel = self.kernel
        """hstu_mha: PYTORCH, NATIVE (CPU) or TRITON."""
        d = config.embedding_dim
        self.tables = embedding_tables(config.features, vocab_sizes, config.contextual_features)
        self.contextual_keys: tuple[str, ...] = (
            config.features.uid,
            *(f.name for f in config.contextual_features),
        )
        """UIH keys of the contextual tokens, in token order (the config checks that there are
        contextual_seq_len of them)."""
        self.embedding_collection = EmbeddingCollection(
            tables=[
                EmbeddingConfig(
                    name=t.name,
                    num_embeddings=t.num_embeddings,
                    embedding_dim=d,
                    feature_names=list(t.feature_names),
                )
                for t in self.tables
            ],
            device=device or torch.device("cpu"),
        )
        self.content_encoder = nn.Sequential(
            nn.Linear(3 * d, config.preprocessor_hidden_dim),
            SwishLayerNorm(config.preprocessor_hidden_dim),
            nn.Linear(config.preprocessor_hidden_dim, d),
        )
        self.register_buffer(
            "action_bits", torch.tensor(config.action_weights, dtype=torch.int64), persistent=False
        )
        self.action_embeddings = nn.Parameter(torch.empty(len(config.action_weights), d))
        self.candidate_action_embedding = nn.Parameter(torch.empty(d))
        self.contextual_projection = ContextualProjection(len(self.contextual_keys), d)
        self.position_embeddings = nn.Embedding(config.position_buckets, d)
        self.time_embeddings = nn.Embedding(config.time_buckets, d)
        self.layers = nn.ModuleList(STULayer(config) for _ in range(config.num_layers))
        self.postprocessor = nn.Sequential(nn.Linear(d + 4, d), nn.LayerNorm(d))
        self.head = nn.Sequential(
            nn.Linear(d, d), SwishLayerNorm(d), nn.Linear(d, config.num_tasks)
        )
        self.register_buffer(
            "task_weights", torch.tensor(config.task_weights, dtype=torch.float32), persistent=False
        )
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self) -> None:
        # The constant buffers too: DistributedModelParallel materialises a model built on the
        # meta device with zeroed buffers, then calls reset_parameters.
        with torch.no_grad():
            self.action_bits.copy_(torch.tensor(self.config.action_weights, dtype=torch.int64))
            self.task_weights.copy_(torch.tensor(self.config.task_weights, dtype=torch.float32))
        std = 1.0 / math.sqrt(self.config.embedding_dim)
        nn.init.normal_(self.action_embeddings, std=std)
        nn.init.normal_(self.candidate_action_embedding, std=std)
        nn.init.normal_(self.position_embeddings.weight, std=std)
        nn.init.normal_(self.time_embeddings.weight, std=std)
        self.contextual_projection.reset_parameters()
        for table in self.embedding_collection.embeddings.values():
            nn.init.uniform_(table.weight, -std, std)

    def embedding_parameters(self) -> list[nn.Parameter]:
        """Parameters of the id tables (the sparse optimizer's share)."""
        return list(self.embedding_collection.parameters())

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every other parameter (the dense optimizer's share)."""
        sparse = {id(p) for p in self.embedding_parameters()}
        return [p for p in self.parameters() if id(p) not in sparse]

    def _lookup(self, uih_jts: dict, cand_jts: dict) -> dict:
        f = self.features
        id_keys = [*self.contextual_keys, f.item_id, f.artist_id, f.album_id]
        cand_keys = [f.candidate_item_id, f.candidate_artist_id, f.candidate_album_id]
        for kind, keys, jts in (("uih", id_keys, uih_jts), ("candidates", cand_keys, cand_jts)):
            missing = [k for k in keys if k not in jts]
            if missing:
                raise ValueError(f"{kind}: the batch lacks the key(s) {missing} the model reads")
        ids = KeyedJaggedTensor.from_jt_dict(
            {k: uih_jts[k] for k in id_keys} | {k: cand_jts[k] for k in cand_keys}
        )
        embedded = self.embedding_collection(ids)
        return {key: jt.values() for key, jt in embedded.items()}

    def forward(self, uih: KeyedJaggedTensor, candidates: KeyedJaggedTensor) -> ModelOutput:
        f, cfg = self.features, self.config
        uih_jts, cand_jts = uih.to_dict(), candidates.to_dict()
        emb = self._lookup(uih_jts, cand_jts)
        history_lengths = uih_jts[f.item_id].lengths()
        candidate_lengths = cand_jts[f.candidate_item_id].lengths()
        batch_size = history_lengths.numel()
        num_history = int(history_lengths.sum())
        if not bool((candidate_lengths == cfg.num_candidates).all()):
            raise ValueError(
                f"{f.candidate_item_id}: every sample needs {cfg.num_candidates} candidate(s), "
                f"got lengths {candidate_lengths.tolist()}"
            )
        if batch_size and int(history_lengths.max()) > cfg.history_length:
            raise ValueError(
                f"{f.item_id}: a history of {int(history_lengths.max())} events is longer than "
                f"history_length = {cfg.history_length}"
            )

        history_content = self.content_encoder(
            torch.cat([emb[f.item_id], emb[f.artist_id], emb[f.album_id]], dim=-1)
        )
        candidate_content = self.content_encoder(
            torch.cat(
                [emb[f.candidate_item_id], emb[f.candidate_artist_id], emb[f.candidate_album_id]],
                dim=-1,
            )
        )
        action_weight = uih_jts[f.action_weight].values().to(torch.int64)
        action_mask = (
            (action_weight.unsqueeze(-1) & self.action_bits).ne(0).to(history_content.dtype)
        )
        history_tokens = history_content + action_mask @ self.action_embeddings
        candidate_tokens = candidate_content + self.candidate_action_embedding
        for key in self.contextual_keys:
            if emb[key].shape[0] != batch_size:
                raise ValueError(
                    f"{key}: a contextual feature needs one value per sample ({batch_size}), "
                    f"got {emb[key].shape[0]}"
                )
        contextual_tokens = self.contextual_projection(
            torch.stack([emb[key] for key in self.contextual_keys], dim=1)
        ).reshape(batch_size * cfg.contextual_seq_len, -1)

        # One table of tokens, gathered into per-sample [contextual][history][candidates] order
        # through the merged index of the three jagged streams.
        tokens = torch.cat([contextual_tokens, history_tokens, candidate_tokens], dim=0)
        query_time = cand_jts[f.query_time].values().to(torch.int64)
        token_times = torch.cat(
            [
                query_time[:: cfg.num_candidates].repeat_interleave(cfg.contextual_seq_len),
                uih_jts[f.action_timestamp].values().to(torch.int64),
                query_time,
            ]
        )
        order, seq_offsets = self._merge_order(batch_size, history_lengths, num_history)
        x = tokens[order]
        token_times = token_times[order]

        seq_lengths = seq_offsets[1:] - seq_offsets[:-1]
        num_targets = candidate_lengths.to(torch.int64)
        # The reference's positional encoder: sqrt(D) * x + position (counted back from the
        # candidates; contextual tokens keep their own) + sqrt-minutes bucket of the time gap
        # to the query time (every sequence's last token is a candidate at the query time).
        x = hstu_ops.add_timestamp_positional_embeddings(
            math.sqrt(cfg.embedding_dim),
            cfg.max_seq_len,
            cfg.contextual_seq_len,
            self.position_embeddings.weight,
            self.time_embeddings.weight,
            seq_offsets,
            seq_lengths,
            x,
            token_times,
            num_targets,
            interleave_targets=False,
            time_bucket_fn="sqrt",
            kernel=self.layer_kernel,
        )
        x = F.dropout(x, cfg.input_dropout, self.training)

        max_seq_len = int(seq_lengths.max())
        for layer in self.layers:
            x = layer(
                x, seq_offsets, max_seq_len, num_targets, self.attention_kernel, self.layer_kernel
            )

        candidate_rows = (
            seq_offsets[1:].unsqueeze(1)
            - cfg.num_candidates
            + torch.arange(cfg.num_candidates, device=x.device)
        ).reshape(-1)
        user = self.postprocessor(torch.cat([x[candidate_rows], time_features(query_time)], dim=-1))
        logits = self.head(user * candidate_content)
        return ModelOutput(logits=logits)

    def _merge_order(
        self, batch_size: int, history_lengths: torch.Tensor, num_history: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Row of `tokens` for each sequence position, and the sequence offsets."""
        cfg, kernel = self.config, self.jagged_kernel
        device = history_lengths.device
        ones = torch.ones(batch_size, dtype=torch.int64, device=device)
        ctx_offsets = hstu_ops.complete_cumsum(ones * cfg.contextual_seq_len, kernel=kernel)
        hist_offsets = hstu_ops.complete_cumsum(history_lengths.to(torch.int64), kernel=kernel)
        cand_offsets = hstu_ops.complete_cumsum(ones * cfg.num_candidates, kernel=kernel)
        num_ctx = batch_size * cfg.contextual_seq_len
        rows = torch.arange(num_ctx + num_history + batch_size * cfg.num_candidates, device=device)
        merged, offsets = hstu_ops.concat_1d_jagged(
            rows[:num_ctx],
            ctx_offsets,
            rows[num_ctx : num_ctx + num_history],
            hist_offsets,
            kernel=kernel,
        )
        return hstu_ops.concat_1d_jagged(
            merged, offsets, rows[num_ctx + num_history :], cand_offsets, kernel=kernel
        )

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Task-weighted BCE-with-logits; `labels` is [N] or [N, num_tasks]."""
        labels = labels.reshape(logits.shape).to(logits.dtype)
        per_task = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(dim=0)
        weighted = (per_task * self.task_weights).sum() / self.task_weights.sum().clamp(min=1.0)
        return weighted * self.config.loss_scale


def time_features(timestamps: torch.Tensor) -> torch.Tensor:
    """Hour-of-day and day-of-week as sin/cos pairs: [N] seconds -> [N, 4]."""
    seconds = timestamps.to(torch.float64)
    hour = torch.remainder(seconds, SECONDS_PER_DAY) / SECONDS_PER_HOUR
    day = torch.remainder(seconds, 7 * SECONDS_PER_DAY) / SECONDS_PER_DAY
    hour_angle = hour * (2 * math.pi / 24)
    day_angle = day * (2 * math.pi / 7)
    features = torch.stack(
        [hour_angle.sin(), hour_angle.cos(), day_angle.sin(), day_angle.cos()], dim=-1
    )
    return features.to(torch.float32)
