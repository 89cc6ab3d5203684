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
