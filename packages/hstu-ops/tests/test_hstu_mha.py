"""hstu_mha reference against an independent, deliberately naive implementation."""

import itertools
import math

import pytest
import torch

import hstu_ops
from hstu_ops.pytorch import hstu_attention_mask


# --------------------------------------------------------------------------------------------
# The naive oracle: python loops over (sequence, query, key), the mask stated by token roles.
# --------------------------------------------------------------------------------------------
def naive_may_attend(i, j, n, targets, contextual, causal, max_attn_len):
    """Whether query i may attend key j in a sequence [contextual | history | targets] of n."""
    if i == j:
        return True
    first_target = n - targets

    def role(p):
        if p < contextual:
            return "context"
        return "target" if p >= first_target else "history"

    if role(i) == "context" and role(j) != "target":
        # Contextual tokens see every non-target token, whatever the other options say.
        return True
    if role(i) == role(j) == "target":
        return False

    # Distances are measured between "virtual positions": all contextual tokens sit just before
    # the first history token, all targets sit at the first target position.
    def place(p):
        return {"context": contextual - 1, "target": first_target}.get(role(p), p)

    dist = place(i) - place(j)
    ok = dist > 0 if causal else dist != 0
    if max_attn_len > 0:
        ok = ok and abs(dist) <= max_attn_len
    return ok


def naive_hstu_mha(
    max_seq_len,
    alpha,
    q,
    k,
    v,
    seq_offsets,
    causal=True,
    num_targets=None,
    max_attn_len=0,
    contextual_seq_len=0,
):
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[2], dtype=q.dtype)
    for s in range(seq_offsets.numel() - 1):
        start, end = int(seq_offsets[s]), int(seq_offsets[s + 1])
        n = end - start
        targets = 0 if num_targets is None else int(num_targets[s])
        for i in range(n):
            for j in range(n):
                if not naive_may_attend(i, j, n, targets, contextual_seq_len, causal, max_attn_len):
                    continue
                for h in range(q.shape[1]):
                    x = alpha * float(torch.dot(q[start + i, h], k[start + j, h]))
                    weight = x / (1.0 + math.exp(-x)) / max_seq_len
                    out[start + i, h] += weight * v[start + j, h]
    return out


def _inputs(gen, lengths, heads=2, attn_dim=3, hidden_dim=4, dtype=torch.float64):
    offsets = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int64)
    total = int(offsets[-1])
    q = torch.randn(total, heads, attn_dim, generator=gen, dtype=dtype)
    k = torch.randn(total, heads, attn_dim, generator=gen, dtype=dtype)
    v = torch.randn(total, heads, hidden_dim, generator=gen, dtype=dtype)
    return q, k, v, offsets


# --------------------------------------------------------------------------------------------
# The mask, pinned on small examples written out by hand.
# --------------------------------------------------------------------------------------------
def test_mask_pinned_causal_contextual_targets():
    # n = 6: tokens 0-1 contextual, 2-3 history, 4-5 targets.
    expected = [
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [1, 1, 1, 1, 0, 1],
    ]
    mask = hstu_attention_mask(
        torch.tensor([6]), 6, num_targets=torch.tensor([2]), contextual_seq_len=2
    )
    assert mask[0].int().tolist() == expected


def test_mask_pinned_with_max_attn_len():
    # Same layout, max_attn_len = 2: ranks are ctx 0, history 1 and 2, targets 3.
    expected = [
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [0, 0, 1, 1, 1, 0],
        [0, 0, 1, 1, 0, 1],
    ]
    mask = hstu_attention_mask(
        torch.tensor([6]), 6, num_targets=torch.tensor([2]), max_attn_len=2, contextual_seq_len=2
    )
    assert mask[0].int().tolist() == expected


def test_mask_plain_causal_is_lower_triangular_within_length():
    mask = hstu_attention_mask(torch.tensor([3, 5]), 5)
    assert torch.equal(mask[1], torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.equal(mask[0, :3, :3], torch.ones(3, 3, dtype=torch.bool).tril())
    assert not mask[0, 3:].any() and not mask[0, :, 3:].any()


# --------------------------------------------------------------------------------------------
# Forward against the oracle
# --------------------------------------------------------------------------------------------
OPTIONS = list(itertools.product([True, False], [False, True], [0, 2], [0, 2]))


@pytest.mark.parametrize(
    ("causal", "with_targets", "max_attn_len", "contextual_seq_len"),
    OPTIONS,
    ids=lambda x: str(x),
)
def test_matches_naive(causal, with_targets, max_attn_len, contextual_seq_len):
    gen = torch.Generator().manual_seed(42)
    lengths = [5, 0, 7, 3, 2]  # includes an empty sequence and one that is all context
    q, k, v, offsets = _inputs(gen, lengths)
    num_targets = None
    if with_targets:
        # at most length - contextual_seq_len, so every sequence is well formed
        num_targets = torch.tensor([2, 0, 3, 1, 0])
    alpha = 0.7
    max_seq_len = 9
    got = hstu_ops.hstu_mha(
        max_seq_len,
        alpha,
        q,
        k,
        v,
        offsets,
        causal=causal,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )
    expected = naive_hstu_mha(
        max_seq_len,
        alpha,
        q,
        k,
        v,
        offsets,
        causal=causal,
        num_targets=num_targets,
        max_attn_len=max_attn_len,
        contextual_seq_len=contextual_seq_len,
    )
    assert got.shape == (q.shape[0], 2, 4)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


def test_batch_is_the_concatenation_of_single_sequences():
    gen = torch.Generator().manual_seed(1)
    lengths = [4, 6, 1]
    q, k, v, offsets = _inputs(gen, lengths, dtype=torch.float32)
    targets = torch.tensor([1, 2, 0])
    batched = hstu_ops.hstu_mha(8, 0.5, q, k, v, offsets, num_targets=targets)
    for s in range(3):
        lo, hi = int(offsets[s]), int(offsets[s + 1])
        one = hstu_ops.hstu_mha(
            8,
            0.5,
            q[lo:hi],
            k[lo:hi],
            v[lo:hi],
            torch.tensor([0, hi - lo]),
            num_targets=targets[s : s + 1],
        )
        torch.testing.assert_close(batched[lo:hi], one)


def test_output_is_divided_by_max_seq_len():
    gen = torch.Generator().manual_seed(2)
    q, k, v, offsets = _inputs(gen, [3, 4])
    out8 = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets)
    out32 = hstu_ops.hstu_mha(32, 1.0, q, k, v, offsets)
    torch.testing.assert_close(out8, out32 * 4)


def test_int32_offsets_and_low_precision_run():
    gen = torch.Generator().manual_seed(3)
    q, k, v, offsets = _inputs(gen, [3, 0, 4], dtype=torch.float32)
    reference = hstu_ops.hstu_mha(4, 0.5, q, k, v, offsets)
    got32 = hstu_ops.hstu_mha(4, 0.5, q, k, v, offsets.to(torch.int32))
    torch.testing.assert_close(got32, reference)
    bf16 = hstu_ops.hstu_mha(
        4,
        0.5,
        q.bfloat16(),
        k.bfloat16(),
        v.bfloat16(),
        offsets,
        num_targets=torch.tensor([1, 0, 1]),
    )
    assert bf16.dtype == torch.bfloat16 and bf16.shape == reference.shape


def test_empty_batch_and_empty_sequences():
    q = torch.zeros(0, 2, 3)
    out = hstu_ops.hstu_mha(4, 1.0, q, q, torch.zeros(0, 2, 5), torch.tensor([0, 0, 0]))
    assert out.shape == (0, 2, 5)
    out = hstu_ops.hstu_mha(4, 1.0, q, q, torch.zeros(0, 2, 5), torch.tensor([0]))
    assert out.shape == (0, 2, 5)


# --------------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------------
def test_dropout_on_attention_weights():
    gen = torch.Generator().manual_seed(4)
    q, k, v, offsets = _inputs(gen, [6, 5], dtype=torch.float32)
    plain = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets)
    torch.manual_seed(0)
    dropped = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, dropout_pr=0.5)
    torch.manual_seed(0)
    again = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, dropout_pr=0.5)
    assert not torch.allclose(dropped, plain)
    torch.testing.assert_close(dropped, again)
    # Not training: no dropout.
    evaluated = hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, dropout_pr=0.5, training=False)
    torch.testing.assert_close(evaluated, plain)
    # Every weight dropped: nothing left.
    assert not hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, dropout_pr=1.0).any()


# --------------------------------------------------------------------------------------------
# Gradients
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("with_targets", "max_attn_len", "contextual_seq_len"),
    [(False, 0, 0), (True, 2, 1)],
)
def test_gradcheck_float64(with_targets, max_attn_len, contextual_seq_len):
    gen = torch.Generator().manual_seed(5)
    q, k, v, offsets = _inputs(gen, [4, 0, 3], heads=2, attn_dim=2, hidden_dim=2)
    num_targets = torch.tensor([1, 0, 1]) if with_targets else None
    inputs = tuple(t.requires_grad_() for t in (q, k, v))

    def fn(q, k, v):
        return hstu_ops.hstu_mha(
            5,
            0.8,
            q,
            k,
            v,
            offsets,
            num_targets=num_targets,
            max_attn_len=max_attn_len,
            contextual_seq_len=contextual_seq_len,
        )

    assert torch.autograd.gradcheck(fn, inputs)


# --------------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------------
def test_bad_inputs_are_rejected():
    gen = torch.Generator().manual_seed(6)
    q, k, v, offsets = _inputs(gen, [3, 5])
    with pytest.raises(ValueError, match=r"sequence 1 has 5 tokens, more than max_seq_len = 4"):
        hstu_ops.hstu_mha(4, 1.0, q, k, v, offsets)
    with pytest.raises(ValueError, match=r"num_targets\[1\] = 6 is outside \[0, 5\]"):
        hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, num_targets=torch.tensor([0, 6]))
    with pytest.raises(ValueError, match=r"seq_offsets\[-1\] = 8 does not match q.shape\[0\] = 7"):
        hstu_ops.hstu_mha(8, 1.0, q[:7], k[:7], v[:7], offsets)
    with pytest.raises(ValueError, match=r"k must have the shape of q"):
        hstu_ops.hstu_mha(8, 1.0, q, k[:, :1], v, offsets)
    with pytest.raises(ValueError, match=r"max_seq_len must be positive, got 0"):
        hstu_ops.hstu_mha(0, 1.0, q, k, v, offsets)
    with pytest.raises(ValueError, match=r"hstu_mha: unknown kernel 'cuda'"):
        hstu_ops.hstu_mha(8, 1.0, q, k, v, offsets, kernel="cuda")
