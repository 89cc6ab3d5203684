"""The HSTU ranking model: embeddings, sequence assembly, STU stack, candidate head.

A sequence is built per sample as [contextual tokens][history][candidates] in jagged form
(values [total_tokens, D] plus offsets) and run through causal HSTU attention in which each
candidate sees the contextual tokens, the whole history and itself but not the other
candidates. The contextual tokens are the user id and then `ModelConfig.contextual_features`
(the reference's seven hashed crosses), one token each.

`HSTURanker` looks its ids up in TorchRec tables (shardable) and takes KeyedJaggedTensors;
`PlainTableRanker` computes the same function with plain `nn.Embedding` tables on plain tensors
(`Jagged` per feature), for machines without TorchRec and fbgemm-gpu. Both are `RankerBase`,
which holds everything but the tables' lookup, so there is one implementation of the function;
only `HSTURanker` imports TorchRec, when it is built or run.
"""

from __future__ import annotations

import abc
import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import nn

import hstu_ops
from hstu_model.config import ContextualFeature, EmbeddingTable, FeatureNames, ModelConfig

if TYPE_CHECKING:
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

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
    """x * sigmoid(layer_norm(x)), with the norm's affine weight and bias as its own
    parameters (eps 1e-5, as the reference's)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps))


def feature_mlp(in_dim: int, hidden_dim: int, out_dim: int) -> nn.Sequential:
    """Linear(in -> hidden), SwishLayerNorm(hidden), Linear(hidden -> out), LayerNorm(out):
    the shape of every MLP of the reference's preprocessor and of its item MLP."""
    return nn.Sequential(
        nn.Linear(in_dim, hidden_dim),
        SwishLayerNorm(hidden_dim),
        nn.Linear(hidden_dim, out_dim),
        nn.LayerNorm(out_dim),
    )


def init_linear_layers(module: nn.Module, init: Callable[[torch.Tensor], object]) -> None:
    """`init` on the weight of every nn.Linear inside `module`, zero biases."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            init(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


def init_norms(module: nn.Module) -> None:
    """Unit weights and zero biases for every norm inside `module`."""
    for m in module.modules():
        if isinstance(m, nn.LayerNorm | SwishLayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class ContextualProjection(nn.Module):
    """One affine map D -> D per contextual token: [B, C, D] -> [B, C, D].

    The reference's ContextualPreprocessor gives each contextual feature's embedding its own
    linear map and bias (a batched matmul over the C contextual slots), weights drawn from
    N(0, 2 / (D_in + D_out)), biases zero.
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


_REFERENCE_KERNELS = hstu_ops.KernelDecision.given(hstu_ops.Kernel.PYTORCH)
"""Every op on its PyTorch reference: what a layer runs when given no decision."""


class STULayer(nn.Module):
    """One sequential transduction unit, as the DLRMv4 reference's STULayer computes it.

    u, q, k, v = split(layer_norm(x) @ W_uvqk + b_uvqk), u = silu(u) (only u);
    attn = hstu_mha(q, k, v) (causal, target-aware; contextual tokens are plain causal tokens);
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
        kernels: hstu_ops.KernelDecision = _REFERENCE_KERNELS,
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
            kernel=kernels.kernel("hstu_compute_uqvk"),
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
            # The reference's layers treat the contextual tokens as ordinary causal tokens:
            # they see each other (in order) but not the history.
            contextual_seq_len=0,
            kernel=kernels.kernel("hstu_mha"),
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
            kernel=kernels.kernel("hstu_compute_output"),
        )


def _run_with_own_offsets(layer: nn.Module, *args) -> torch.Tensor:
    """A layer called on the offsets and target counts the model built itself: the offsets
    are the complete cumulative sum of the merged sequences' lengths (0 first, never
    decreasing, the token count last), every sequence holds its num_candidates targets, and
    max_seq_len is the longest of them, so the ops need not read them back from the GPU to
    check them (a wait of the GPU queue per read). Also around a layer's recomputation, which
    runs in the backward."""
    with hstu_ops.index_values_trusted():
        return layer(*args)


@dataclass
class ModelOutput:
    logits: torch.Tensor
    """[num_candidates_total, num_tasks] logits, candidates in batch order."""


# A pytree node, so that DistributedDataParallel finds the logits in the output: with TorchRec's
# default static_graph=True it only all-reduces the gradients through the output's tensors,
# and an opaque dataclass would leave each rank with its own dense gradients.
torch.utils._pytree.register_dataclass(ModelOutput)


class Jagged(NamedTuple):
    """One feature of a batch as plain tensors: its values, sample after sample, and how many
    of them each sample has (what the model reads of a TorchRec JaggedTensor)."""

    values: torch.Tensor
    lengths: torch.Tensor


def jagged_features(kjt: KeyedJaggedTensor) -> dict[str, Jagged]:
    """Each key of `kjt` as a `Jagged`, in the KJT's key order."""
    return {key: Jagged(jt.values(), jt.lengths()) for key, jt in kjt.to_dict().items()}


def keyed_jagged(features: Mapping[str, Jagged]) -> KeyedJaggedTensor:
    """The KeyedJaggedTensor of `features`, keys in their order (needs TorchRec)."""
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

    return KeyedJaggedTensor.from_lengths_sync(
        keys=list(features),
        values=torch.cat([f.values for f in features.values()]),
        lengths=torch.cat([f.lengths for f in features.values()]),
    )


class RankerBase(nn.Module, abc.ABC):
    """The HSTU ranking model's function, the DLRMv4 reference's DlrmHSTU (its parameters map
    one to one, `hstu_model.reference`), on features given as `Jagged` per key.

    Per sample the sequence is [contextual tokens][history][candidates]:

    - a contextual token is its feature's embedding through its own affine map (the uid, then
      `ModelConfig.contextual_features`), at timestamp 0;
    - a history or candidate token is the sum of three MLPs: `content_mlp` on the item
      embedding, `additional_mlp` on the artist and album embeddings, and `action_mlp` on the
      action encoding (an `action_embedding_dim` vector per action bit set, concatenated;
      candidates use the learned `candidate_action` vector instead), at its event time
      (candidates: the query time);
    - then sqrt(D) * x + position + time-bucket embeddings, input dropout, the STU layers, and
      at each candidate `postprocessor` (its output joined with hour-of-day and day-of-week
      features -> Linear -> LayerNorm): the user embedding.

    The logits are `head(user * item)`, where `item` is `item_mlp` of the candidate's item,
    artist and album embeddings. With `autocast_bf16` (the trainer's bf16 autocast) only the
    sequence part runs in bf16; the item MLP and the head run in float32, as in the reference.

    A subclass owns the id tables: `_embedding_collection` builds the module that holds them
    (registered as `embedding_collection`, whose `embeddings` maps each table's name to its
    `nn.Embedding`, so every subclass has the same state-dict keys), and `_lookup` embeds the
    ids of a batch with it.

    Each hstu-ops op runs the kernel that `kernels` (an `hstu_ops.KernelDecision` of
    `config.kernel`, made once by whoever picked the family, e.g. a run on its device) gives
    it; without one, `config.kernel` as given (`KernelDecision.given`).
    """

    def __init__(
        self,
        config: ModelConfig,
        vocab_sizes: Mapping[str, int],
        device: torch.device | None = None,
        kernels: hstu_ops.KernelDecision | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.features = config.features
        if kernels is None:
            kernels = hstu_ops.KernelDecision.given(config.kernel)
        elif kernels.family is not config.kernel:
            raise ValueError(
                f"kernels: a decision for {kernels.family}, but model.kernel is {config.kernel}"
            )
        self.kernels = kernels
        d, hidden = config.embedding_dim, config.preprocessor_hidden_dim
        self.tables = embedding_tables(config.features, vocab_sizes, config.contextual_features)
        self.contextual_keys: tuple[str, ...] = (
            config.features.uid,
            *(f.name for f in config.contextual_features),
        )
        """UIH keys of the contextual tokens, in token order (the config checks that there are
        contextual_seq_len of them)."""
        # Built before the other modules, whose construction-time initialisation then draws from
        # the generator in the same order as ever: a seed keeps giving the same HSTURanker.
        self.embedding_collection = self._embedding_collection(
            self.tables, d, device or torch.device("cpu")
        )
        num_actions = len(config.action_weights)
        action_dim = num_actions * config.action_embedding_dim
        self.content_mlp = feature_mlp(d, hidden, d)
        """Item embedding -> token content."""
        self.additional_mlp = feature_mlp(2 * d, hidden, d)
        """[artist, album] embeddings -> token content."""
        self.action_mlp = feature_mlp(action_dim, hidden, d)
        """Action encoding -> token content."""
        self.register_buffer(
            "action_bits", torch.tensor(config.action_weights, dtype=torch.int64), persistent=False
        )
        self.action_table = nn.Parameter(torch.empty(num_actions, config.action_embedding_dim))
        """One vector per action bit (listen_plus, like, skip)."""
        self.candidate_action = nn.Parameter(torch.empty(1, action_dim))
        """The action encoding of every candidate token."""
        self.contextual_projection = ContextualProjection(len(self.contextual_keys), d)
        self.position_embeddings = nn.Embedding(config.position_buckets, d)
        self.time_embeddings = nn.Embedding(config.time_buckets + 1, d)
        self.layers = nn.ModuleList(STULayer(config) for _ in range(config.num_layers))
        self.postprocessor = nn.Sequential(nn.Linear(d + TIME_FEATURES, d), nn.LayerNorm(d))
        self.item_mlp = feature_mlp(3 * d, config.item_hidden_dim, d)
        """Candidate [item, artist, album] embeddings -> the item embedding of the head."""
        self.head = nn.Sequential(
            nn.Linear(d, config.head_hidden_dim),
            SwishLayerNorm(config.head_hidden_dim),
            nn.Linear(config.head_hidden_dim, config.num_tasks),
        )
        self.register_buffer(
            "task_weights", torch.tensor(config.task_weights, dtype=torch.float32), persistent=False
        )
        self.reset_parameters()
        if device is not None:
            self.to(device)

    @abc.abstractmethod
    def _embedding_collection(
        self, tables: list[EmbeddingTable], dim: int, device: torch.device
    ) -> nn.Module:
        """The module of the id tables, `dim` wide, on `device`."""

    @abc.abstractmethod
    def _lookup(self, ids: dict[str, Jagged]) -> dict[str, torch.Tensor]:
        """The embeddings of every id of `ids` (key -> [values, D]), from the id tables."""

    def reset_parameters(self) -> None:
        """The reference's initialisation (the id tables too, where they are not sharded)."""
        # The constant buffers too: DistributedModelParallel materialises a model built on the
        # meta device with zeroed buffers, then calls reset_parameters.
        with torch.no_grad():
            self.action_bits.copy_(torch.tensor(self.config.action_weights, dtype=torch.int64))
            self.task_weights.copy_(torch.tensor(self.config.task_weights, dtype=torch.float32))
        cfg = self.config
        # The sequence-side MLPs and the postprocessor: Xavier-normal weights (the reference's
        # transducer re-initialises them so); the item MLP and the head: Xavier-uniform.
        for module in (self.content_mlp, self.additional_mlp, self.action_mlp, self.postprocessor):
            init_linear_layers(module, nn.init.xavier_normal_)
        for module in (self.item_mlp, self.head):
            init_linear_layers(module, nn.init.xavier_uniform_)
        init_norms(self)
        nn.init.normal_(self.action_table, std=ACTION_EMBEDDING_STD)
        nn.init.normal_(self.candidate_action, std=ACTION_EMBEDDING_STD)
        self.contextual_projection.reset_parameters()
        bound = math.sqrt(1.0 / cfg.position_buckets)
        nn.init.uniform_(self.position_embeddings.weight, -bound, bound)
        bound = math.sqrt(1.0 / cfg.time_buckets)
        nn.init.uniform_(self.time_embeddings.weight, -bound, bound)
        for layer in self.layers:
            layer.reset_parameters()
        # TorchRec's default for a table: U(+-sqrt(1 / rows)), rows of the whole table (a
        # sharded table's local part may be any slice of it, even empty).
        rows = {t.name: t.num_embeddings for t in self.tables}
        for name, table in self.embedding_collection.embeddings.items():
            bound = math.sqrt(1.0 / rows[name])
            nn.init.uniform_(table.weight, -bound, bound)

    def embedding_parameters(self) -> list[nn.Parameter]:
        """Parameters of the id tables (the sparse optimizer's share)."""
        return list(self.embedding_collection.parameters())

    def dense_parameters(self) -> list[nn.Parameter]:
        """Every other parameter (the dense optimizer's share)."""
        sparse = {id(p) for p in self.embedding_parameters()}
        return [p for p in self.parameters() if id(p) not in sparse]

    def _id_features(
        self, uih: Mapping[str, Jagged], candidates: Mapping[str, Jagged]
    ) -> dict[str, Jagged]:
        """The features the id tables embed: contextual ids, history ids, candidate ids."""
        f = self.features
        id_keys = [*self.contextual_keys, f.item_id, f.artist_id, f.album_id]
        cand_keys = [f.candidate_item_id, f.candidate_artist_id, f.candidate_album_id]
        for kind, keys, jts in (("uih", id_keys, uih), ("candidates", cand_keys, candidates)):
            missing = [k for k in keys if k not in jts]
            if missing:
                raise ValueError(f"{kind}: the batch lacks the key(s) {missing} the model reads")
        return {k: uih[k] for k in id_keys} | {k: candidates[k] for k in cand_keys}

    def rank(self, uih: Mapping[str, Jagged], candidates: Mapping[str, Jagged]) -> ModelOutput:
        """The logits of every candidate, from the user history and candidate features."""
        f, cfg = self.features, self.config
        emb = self._lookup(self._id_features(uih, candidates))
        history_lengths = uih[f.item_id].lengths
        candidate_lengths = candidates[f.candidate_item_id].lengths
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
        for key in self.contextual_keys:
            if emb[key].shape[0] != batch_size:
                raise ValueError(
                    f"{key}: a contextual feature needs one value per sample ({batch_size}), "
                    f"got {emb[key].shape[0]}"
                )
        query_time = candidates[f.query_time].values.to(torch.int64)
        user = self._user_embeddings(uih, emb, history_lengths, num_history, query_time)
        # The item side and the head stay in float32 under the trainer's bf16 autocast.
        with torch.autocast(user.device.type, enabled=False):
            item = self.item_mlp(
                torch.cat(
                    [
                        emb[f.candidate_item_id],
                        emb[f.candidate_artist_id],
                        emb[f.candidate_album_id],
                    ],
                    dim=-1,
                ).float()
            )
            logits = self.head(user.float() * item)
        return ModelOutput(logits=logits)

    def _user_embeddings(
        self,
        uih: Mapping[str, Jagged],
        emb: dict,
        history_lengths: torch.Tensor,
        num_history: int,
        query_time: torch.Tensor,
    ) -> torch.Tensor:
        """The postprocessed STU output at every candidate: [num_candidates_total, D]."""
        f, cfg = self.features, self.config
        batch_size = history_lengths.numel()
        # History rows first, then candidate rows: the token MLPs act row by row.
        item = torch.cat([emb[f.item_id], emb[f.candidate_item_id]])
        artist_album = torch.cat(
            [
                torch.cat([emb[f.artist_id], emb[f.album_id]], dim=-1),
                torch.cat([emb[f.candidate_artist_id], emb[f.candidate_album_id]], dim=-1),
            ]
        )
        action_weight = uih[f.action_weight].values.to(torch.int64)
        history_actions = (action_weight.unsqueeze(-1) & self.action_bits).ne(0)
        history_actions = (
            history_actions.unsqueeze(-1).to(self.action_table.dtype) * self.action_table
        ).reshape(num_history, -1)
        num_candidate_rows = query_time.numel()
        actions = torch.cat([history_actions, self.candidate_action.expand(num_candidate_rows, -1)])
        item_tokens = (
            self.content_mlp(item) + self.additional_mlp(artist_album) + self.action_mlp(actions)
        )
        contextual_tokens = self.contextual_projection(
            torch.stack([emb[key] for key in self.contextual_keys], dim=1)
        ).reshape(batch_size * cfg.contextual_seq_len, -1)

        # One table of tokens, gathered into per-sample [contextual][history][candidates] order
        # through the merged index of the three jagged streams.
        tokens = torch.cat([contextual_tokens.to(item_tokens.dtype), item_tokens], dim=0)
        device_type = tokens.device.type
        if torch.amp.is_autocast_available(device_type) and torch.is_autocast_enabled(device_type):
            # The sequence part runs in the autocast dtype, as the reference casts its sequence
            # embeddings to its training dtype. Autocast alone does not ensure it: on CUDA it
            # runs layer_norm (the token MLPs' last op) in float32, and the fused kernels take
            # their inputs' dtype, not autocast's.
            tokens = tokens.to(torch.get_autocast_dtype(device_type))
        history_times = uih[f.action_timestamp].values.to(torch.int64)
        token_times = torch.cat(
            [
                # Contextual tokens are at time 0: their time gap is the query time itself.
                history_times.new_zeros(batch_size * cfg.contextual_seq_len),
                history_times,
                query_time,
            ]
        )
        order, seq_offsets = self._merge_order(batch_size, history_lengths, num_history)
        x = tokens[order]
        token_times = token_times[order]

        seq_lengths = seq_offsets[1:] - seq_offsets[:-1]
        num_targets = torch.full_like(seq_lengths, cfg.num_candidates)
        # sqrt(D) * x + position (counted back from the candidates; contextual tokens keep
        # their own) + sqrt-minutes bucket of the time gap to the query time (every sequence's
        # last token is a candidate at the query time).
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
            kernel=self.kernels.kernel("add_timestamp_positional_embeddings"),
        )
        x = F.dropout(x, cfg.input_dropout, self.training)

        max_seq_len = int(seq_lengths.max())
        recompute = cfg.recompute_layers and self.training and torch.is_grad_enabled()
        for layer in self.layers:
            args = (x, seq_offsets, max_seq_len, num_targets, self.kernels)
            run = functools.partial(_run_with_own_offsets, layer)
            if recompute:
                # Non-reentrant: the recomputation sees the same autocast state, and the saved
                # random state draws the same dropout masks again.
                x = torch.utils.checkpoint.checkpoint(
                    run, *args, use_reentrant=False, preserve_rng_state=True
                )
            else:
                x = run(*args)

        candidate_rows = (
            seq_offsets[1:].unsqueeze(1)
            - cfg.num_candidates
            + torch.arange(cfg.num_candidates, device=x.device)
        ).reshape(-1)
        user = x[candidate_rows]
        features = time_features(query_time).to(user.dtype)
        return self.postprocessor(torch.cat([user, features], dim=-1))

    def _merge_order(
        self, batch_size: int, history_lengths: torch.Tensor, num_history: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Row of `tokens` for each sequence position, and the sequence offsets."""
        cfg = self.config
        cumsum, concat = (
            self.kernels.kernel("complete_cumsum"),
            self.kernels.kernel("concat_1d_jagged"),
        )
        device = history_lengths.device
        ones = torch.ones(batch_size, dtype=torch.int64, device=device)
        ctx_offsets = hstu_ops.complete_cumsum(ones * cfg.contextual_seq_len, kernel=cumsum)
        hist_offsets = hstu_ops.complete_cumsum(history_lengths.to(torch.int64), kernel=cumsum)
        cand_offsets = hstu_ops.complete_cumsum(ones * cfg.num_candidates, kernel=cumsum)
        num_ctx = batch_size * cfg.contextual_seq_len
        rows = torch.arange(num_ctx + num_history + batch_size * cfg.num_candidates, device=device)
        merged, offsets = hstu_ops.concat_1d_jagged(
            rows[:num_ctx],
            ctx_offsets,
            rows[num_ctx : num_ctx + num_history],
            hist_offsets,
            kernel=concat,
        )
        return hstu_ops.concat_1d_jagged(
            merged, offsets, rows[num_ctx + num_history :], cand_offsets, kernel=concat
        )

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Task-weighted BCE-with-logits; `labels` is [N] or [N, num_tasks]."""
        labels = labels.reshape(logits.shape).to(logits.dtype)
        per_task = F.binary_cross_entropy_with_logits(logits, labels, reduction="none").mean(dim=0)
        weighted = (per_task * self.task_weights).sum() / self.task_weights.sum().clamp(min=1.0)
        return weighted * self.config.loss_scale


class HSTURanker(RankerBase):
    """The model over a user-history KJT and a candidate KJT, its id tables in a TorchRec
    EmbeddingCollection (which `hstu_model.sharding.shard_model` shards); the function is
    `RankerBase`'s."""

    def _embedding_collection(
        self, tables: list[EmbeddingTable], dim: int, device: torch.device
    ) -> nn.Module:
        from torchrec.modules.embedding_configs import EmbeddingConfig
        from torchrec.modules.embedding_modules import EmbeddingCollection

        return EmbeddingCollection(
            tables=[
                EmbeddingConfig(
                    name=t.name,
                    num_embeddings=t.num_embeddings,
                    embedding_dim=dim,
                    feature_names=list(t.feature_names),
                )
                for t in tables
            ],
            device=device,
        )

    def _lookup(self, ids: dict[str, Jagged]) -> dict[str, torch.Tensor]:
        embedded = self.embedding_collection(keyed_jagged(ids))
        return {key: jt.values() for key, jt in embedded.items()}

    def forward(self, uih: KeyedJaggedTensor, candidates: KeyedJaggedTensor) -> ModelOutput:
        return self.rank(jagged_features(uih), jagged_features(candidates))


class PlainEmbeddingCollection(nn.Module):
    """The id tables as plain `nn.Embedding`s under `embeddings`, named as TorchRec's
    EmbeddingCollection names them (so the state-dict keys are the same), each looked up for
    the features it serves."""

    def __init__(self, tables: list[EmbeddingTable], dim: int, device: torch.device) -> None:
        super().__init__()
        self.embeddings = nn.ModuleDict(
            {t.name: nn.Embedding(t.num_embeddings, dim, device=device) for t in tables}
        )
        self.table_of = {feature: t.name for t in tables for feature in t.feature_names}
        """Feature name -> the name of its table."""

    def forward(self, ids: Mapping[str, Jagged]) -> dict[str, torch.Tensor]:
        return {key: self.embeddings[self.table_of[key]](j.values) for key, j in ids.items()}


class PlainTableRanker(RankerBase):
    """`HSTURanker`'s function with its id tables as plain `nn.Embedding`s and its inputs as
    plain tensors: `forward(uih, candidates)` takes `{key: Jagged}` mappings with the keys an
    `HSTURanker` batch has. It needs neither TorchRec nor fbgemm-gpu; its tables are never
    sharded and the gradients of its tables are dense unless their `sparse` is set. Its state
    dict has `HSTURanker`'s keys, so the weights of one load into the other."""

    def _embedding_collection(
        self, tables: list[EmbeddingTable], dim: int, device: torch.device
    ) -> nn.Module:
        return PlainEmbeddingCollection(tables, dim, device)

    def _lookup(self, ids: dict[str, Jagged]) -> dict[str, torch.Tensor]:
        return self.embedding_collection(ids)

    def forward(self, uih: Mapping[str, Jagged], candidates: Mapping[str, Jagged]) -> ModelOutput:
        return self.rank(uih, candidates)


TIME_PERIODS: tuple[tuple[int, int], ...] = ((SECONDS_PER_HOUR, 24), (SECONDS_PER_DAY, 7))
"""(seconds per unit, units per period) of the postprocessor's time features: the hour of the
day and the day of the week."""

TIME_FEATURES = 2 * len(TIME_PERIODS)
"""Time features appended to the user embedding: a (cos, sin) pair per period."""

ACTION_EMBEDDING_STD = 0.1
"""Standard deviation of the action vectors' initialisation (the reference's)."""


def time_features(timestamps: torch.Tensor) -> torch.Tensor:
    """Hour-of-day and day-of-week angles as (cos, sin) pairs: [N] seconds -> [N, 4] float32,
    ordered (cos h, sin h, cos d, sin d).

    The reference's arithmetic, step for step in float32: whole units elapsed (floor of
    t / unit, so the hour and the day are integers), their position in the period, and the
    angle position / period * 2 * 3.14 (its constant, not pi).
    """
    t = timestamps.to(torch.float32).unsqueeze(-1)
    units = torch.tensor([u for u, _ in TIME_PERIODS], dtype=torch.float32, device=t.device)
    period = torch.tensor([p for _, p in TIME_PERIODS], dtype=torch.float32, device=t.device)
    elapsed = torch.div(t, units, rounding_mode="floor")
    angle = torch.remainder(elapsed, period) / period * 2 * 3.14
    return torch.stack([angle.cos(), angle.sin()], dim=-1).flatten(-2)
