"""hstu_model.flops: the analytical FLOPs per sample against a hand count, the attention mask of
hstu-ops, scaling laws and torch's FlopCounterMode."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from hstu_model import ContextualFeature, HSTURanker, ModelConfig, preset, seed_everything
from hstu_model.flops import (
    COMPONENTS,
    attention_pairs,
    flops_per_sample,
    reference_estimate,
    summary,
)
from hstu_model.testing import random_batch
from hstu_ops.pytorch.pt_hstu_attention import hstu_attention_mask

HAND = ModelConfig(
    embedding_dim=8,
    num_layers=1,
    num_heads=2,
    attention_dim=4,
    linear_dim=3,
    preprocessor_hidden_dim=5,
    history_length=4,
    max_seq_len=8,
    contextual_seq_len=2,
    contextual_features=(ContextualFeature("user_x_hour", 24),),
    position_buckets=8,
    time_buckets=16,
    action_embedding_dim=2,
    item_hidden_dim=6,
    head_hidden_dim=7,
)
"""D 8, P 5, H 2, d_qk 4, d_v 3, A 3 x 2, I 6, K 7, one layer; C 2 + L 4 + T 1 = 7 tokens."""


def test_hand_count_of_a_tiny_config():
    count = flops_per_sample(HAND)
    # Allowed pairs, row by row: the 2 contextual and 4 history rows are causal (1 + ... + 6
    # = 21), the candidate sees 2 + 4 + itself (7).
    assert count.attention_pairs == 21 + 7 == 28
    assert count.full_pairs == 49
    assert count.forward == {
        # 4 history + 1 candidate tokens through the content, additional and action MLPs: 2700
        "token_mlps": 5 * 2 * (8 * 5 + 16 * 5 + 6 * 5 + 3 * 5 * 8),
        "contextual_projection": 2 * 2 * 8 * 8,  # 256
        "stu_uvqk": 7 * 2 * 8 * 2 * (2 * 3 + 2 * 4),  # 3136
        "stu_attention": 28 * 2 * 2 * (4 + 3),  # 784
        "stu_output": 7 * 2 * (3 * 2 * 3) * 8,  # 2016
        "postprocessor": 2 * 12 * 8,  # 192
        "item_mlp": 2 * (24 * 6 + 6 * 8),  # 384
        "head": 2 * (8 * 7 + 7 * 1),  # 126
        "embedding_lookups": 0,
    }
    assert tuple(count.forward) == COMPONENTS
    assert count.forward_total == 9594
    assert count.stu_attention_full == 49 * 28 == 1372
    assert count.forward_total_full == 9594 - 784 + 1372 == 10182
    assert count.train_total == 3 * 9594 and count.train_total_full == 3 * 10182
    assert count.train == {k: 3 * v for k, v in count.forward.items()}
    assert count.per_layer() == {
        "uvqk": 3136,
        "attention": 784,
        "attention_full": 1372,
        "output": 2016,
    }


@pytest.mark.parametrize("contextual", [0, 1, 3])
@pytest.mark.parametrize("candidates", [0, 1, 2])
@pytest.mark.parametrize("history", [0, 1, 5, 17])
def test_pairs_match_the_mask_of_hstu_ops(contextual, history, candidates):
    n = contextual + history + candidates
    if n == 0:
        return
    mask = hstu_attention_mask(
        torch.tensor([n]),
        n,
        causal=True,
        num_targets=torch.tensor([candidates]),
        contextual_seq_len=0,  # the model runs its contextual tokens as causal ones
    )
    assert attention_pairs(contextual, history, candidates) == int(mask.sum())


def test_scaling_laws():
    model = preset("yambda-5b").model
    counts = {h: flops_per_sample(model, h) for h in (500, 1000, 2000, 4000)}
    for h in (500, 1000, 2000):
        small, big = counts[h], counts[2 * h]
        # Projections and token MLPs: exactly linear in their tokens.
        for name in ("stu_uvqk", "stu_output"):
            per_token = small.forward[name] / small.tokens
            assert big.forward[name] == pytest.approx(per_token * big.tokens, rel=1e-12)
        per_token = small.forward["token_mlps"] / (small.history + small.candidates)
        assert big.forward["token_mlps"] == pytest.approx(per_token * (2 * h + 1), rel=1e-12)
        # Attention: exactly N^2 for the full count, N^2 / 2 + O(N) for the causal one.
        assert big.stu_attention_full / small.stu_attention_full == pytest.approx(
            (big.tokens / small.tokens) ** 2, rel=1e-12
        )
        # Causal: L^2 / 2 + O(L C): doubling the history gives 4x less an O(C / L) term.
        causal_ratio = big.forward["stu_attention"] / small.forward["stu_attention"]
        assert 4 * (1 - 20 / h) < causal_ratio < 4
        # Per-candidate parts do not depend on the history.
        for name in ("contextual_projection", "postprocessor", "item_mlp", "head"):
            assert big.forward[name] == small.forward[name]
    ratio = counts[4000].forward["stu_attention"] / counts[4000].stu_attention_full
    assert ratio == pytest.approx(0.5, abs=0.005)
    ratios = [counts[h].forward["stu_attention"] / counts[h].stu_attention_full for h in counts]
    assert ratios == sorted(ratios, reverse=True)  # down towards 1/2 as N grows


def test_yambda_5b_figures_and_the_reference_estimate():
    model = preset("yambda-5b").model
    count = flops_per_sample(model)
    assert (count.contextual, count.history, count.candidates, count.tokens) == (8, 4086, 1, 4095)
    assert count.attention_pairs == 4094 * 4095 // 2 + 4095 == 8_386_560
    assert count.forward_total == 103_099_032_576
    assert count.train_total == 309_297_097_728
    assert count.train_total_full == 463_802_692_608
    # The reference's published 315.7 GFLOP/sample, 57% attention.
    ref = reference_estimate(model)
    assert round(ref["train_step"] / 1e9, 1) == 315.7
    assert round(ref["attention_share"], 2) == 0.57


def test_summary_is_json_ready_and_consistent():
    import json

    model = preset("small").model
    out = json.loads(json.dumps(summary(model)))
    count = flops_per_sample(model)
    assert out["sequence"]["tokens"] == 8 + 512 + 1
    assert out["forward"]["total"] == count.forward_total
    assert out["forward"]["stu_attention"] == count.forward["stu_attention"]
    assert out["forward_full_attention"]["total"] == count.forward_total_full
    assert out["train_step"] == {
        "total": count.train_total,
        "total_full_attention": count.train_total_full,
    }
    assert out["attention_pairs"] == {"causal": count.attention_pairs, "full": 521**2}
    assert out["reference_estimate"]["train_step"] == reference_estimate(model)["train_step"]
    with pytest.raises(ValueError, match="history must be in"):
        flops_per_sample(model, 513)


VOCAB = {"uid": 11, "item_id": 50, "artist_id": 13, "album_id": 17}


@pytest.mark.parametrize("lengths", [[12, 12, 12], [12, 7, 0]])
def test_flop_counter_sees_the_same_matmuls(lengths):
    """torch's FlopCounterMode on the PYTORCH kernels, exactly (tolerance 0: both are integer
    counts of the same products). Its attention is the padded dense reference: every sequence
    is padded to the longest of the batch and all n_max^2 pairs are computed before the mask,
    so it matches the full count of the longest sequence for every sample, not the causal one.
    Every product's inputs reach a parameter, so the backward is exactly 2 x forward."""
    cfg = preset("tiny").replace(
        model={"history_length": 12, "max_seq_len": 24, "position_buckets": 24}
    )
    model_config = cfg.model
    seed_everything(0)
    model = HSTURanker(model_config, VOCAB)
    batch = random_batch(lengths, VOCAB, contextual_tables=model_config.contextual_tables())
    with FlopCounterMode(display=False) as counter:
        logits = model(batch.uih, batch.candidates).logits
    counts = [flops_per_sample(model_config, h) for h in lengths]
    longest = flops_per_sample(model_config, max(lengths))
    padded_attention = len(lengths) * longest.stu_attention_full
    non_attention = sum(c.forward_total - c.forward["stu_attention"] for c in counts)
    assert counter.get_total_flops() == non_attention + padded_attention
    if len(set(lengths)) == 1:
        assert counter.get_total_flops() == sum(c.forward_total_full for c in counts)
    with FlopCounterMode(display=False) as counter:
        logits = model(batch.uih, batch.candidates).logits
        model.loss(logits, batch.labels).backward()
    assert counter.get_total_flops() == 3 * (non_attention + padded_attention)


def test_time_features_count_is_the_models():
    """flops keeps its own copy (it never imports the model); the two must agree."""
    from hstu_model import flops, model

    assert flops.TIME_FEATURES == model.TIME_FEATURES
