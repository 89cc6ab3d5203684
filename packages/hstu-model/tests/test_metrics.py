import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hstu_model import binary_auc


def pairwise_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-3, 3), st.integers(0, 1)), min_size=2, max_size=40).filter(
        lambda xs: len({y for _, y in xs}) == 2
    )
)
def test_matches_pairwise_definition_with_ties(pairs):
    scores = np.array([s for s, _ in pairs], dtype=np.float64) / 2
    labels = np.array([y for _, y in pairs])
    assert binary_auc(scores, labels) == pytest.approx(pairwise_auc(scores, labels), abs=1e-12)


def test_known_values():
    assert binary_auc([0.1, 0.9], [0, 1]) == 1.0
    assert binary_auc([0.9, 0.1], [0, 1]) == 0.0
    assert binary_auc([0.5, 0.5], [0, 1]) == 0.5


@pytest.mark.parametrize(
    ("scores", "labels", "message"),
    [
        ([0.1, 0.2], [1, 1], "both classes"),
        ([0.1, float("nan")], [0, 1], "NaN"),
        ([0.1, 0.2], [0, 2], "0 or 1"),
        ([0.1], [0, 1], "differ in length"),
    ],
)
def test_bad_input(scores, labels, message):
    with pytest.raises(ValueError, match=message):
        binary_auc(scores, labels)


def test_normalized_entropy_known_values():
    from hstu_model.metrics import normalized_entropy

    labels = np.array([1, 0, 0, 0])
    base_rate_logit = np.log(0.25 / 0.75)
    # Predicting the base rate everywhere is exactly 1.
    assert normalized_entropy(np.full(4, base_rate_logit), labels) == pytest.approx(1.0)
    assert normalized_entropy(np.array([8.0, -8.0, -8.0, -8.0]), labels) < 0.01
    assert normalized_entropy(np.array([-8.0, 8.0, 8.0, 8.0]), labels) > 5
    # Huge logits stay finite.
    assert np.isfinite(normalized_entropy(np.array([1e4, -1e4, 1e4, -1e4]), labels))
    with pytest.raises(ValueError, match="both classes"):
        normalized_entropy(np.zeros(3), np.zeros(3))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**16), st.integers(20, 400))
def test_binned_auc_is_close_to_exact_and_streams(seed, size):
    from hstu_model.metrics import BinnedAUC

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 2, size)
    labels[:2] = [0, 1]
    logits = rng.normal(size=size) + labels
    metric = BinnedAUC(num_bins=100_000)
    for part in np.array_split(np.arange(size), 3):
        metric.update(logits[part], labels[part])
    assert metric.compute() == pytest.approx(binary_auc(logits, labels), abs=1e-3)
    restored = BinnedAUC(num_bins=100_000)
    restored.load_state_dict(metric.state_dict())
    assert restored.compute() == metric.compute()


def test_binned_auc_ties_within_a_bin_and_errors():
    from hstu_model.metrics import BinnedAUC

    metric = BinnedAUC(num_bins=2)
    metric.update(np.array([-0.1, -0.2, 3.0]), np.array([1, 0, 1]))
    # The positive at -0.1 ties the negative in the low bin; the one at 3.0 beats it.
    assert metric.compute() == pytest.approx(0.75)
    with pytest.raises(ValueError, match="both classes"):
        BinnedAUC().compute()
    with pytest.raises(ValueError, match="num_bins"):
        BinnedAUC(num_bins=1)
    with pytest.raises(ValueError, match="3 bins, this metric 2"):
        metric.load_state_dict({"positives": [0, 0, 0], "negatives": [0, 0, 0]})
