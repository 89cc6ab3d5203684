import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from yambda_data import TEST, BatchPlan, SampleConfig, SampleStore, holdout_users


@pytest.fixture(scope="module")
def store(built_store):
    return SampleStore.open(built_store[2])


def _busy_windows(store, count):
    return tuple(int(w) for w in np.flatnonzero(store.window_sizes() > 0)[:count])


def _all_ranks(plan, store):
    per_rank = []
    for rank in range(plan.world_size):
        rank_plan = BatchPlan(**{**plan.__dict__, "rank": rank})
        per_rank.append(list(rank_plan.batches(store)))
    return per_rank


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [True, False])
def test_ranks_split_the_global_order(store, world_size, drop_last):
    plan = BatchPlan(
        sources=_busy_windows(store, 4),
        batch_size=5,
        world_size=world_size,
        seed=3,
        drop_last=drop_last,
    )
    per_rank = _all_ranks(plan, store)
    assert len({len(batches) for batches in per_rank}) == 1  # every rank steps together
    assert len(per_rank[0]) == plan.num_batches(store)
    # Interleaving rank slices batch by batch gives back the global order.
    rebuilt = np.concatenate(
        [b for step in zip(*per_rank, strict=True) for b in step] or [np.zeros(0, np.int64)]
    )
    order = np.concatenate(list(plan.global_order(store)))
    if drop_last:
        gbs = plan.global_batch_size
        kept = [o[: o.size // gbs * gbs] for o in plan.global_order(store)]
        order = np.concatenate(kept)
    assert np.array_equal(rebuilt, order)
    assert rebuilt.size == plan.num_samples(store)
    if drop_last:
        assert all(b.size == plan.batch_size for batches in per_rank for b in batches)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_a_last_global_batch_is_shared_out_evenly(store, world_size):
    """An evaluation's last, incomplete global batch leaves no rank empty while it holds at
    least one sample a rank: with rank-sized slices, a source smaller than one global batch
    left the last ranks with nothing to evaluate."""
    source = _busy_windows(store, 1)
    size = int(store.window_sizes()[source[0]])
    assert size >= world_size
    plan = BatchPlan(
        sources=source, batch_size=size, world_size=world_size, shuffle=False, drop_last=False
    )
    per_rank = _all_ranks(plan, store)
    assert [len(batches) for batches in per_rank] == [1] * world_size
    sizes = [batches[0].size for batches in per_rank]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, sizes
    rebuilt = np.concatenate([batches[0] for batches in per_rank])
    assert np.array_equal(rebuilt, np.concatenate(list(plan.global_order(store))))


def test_order_is_seeded_and_window_local(store):
    windows = _busy_windows(store, 3)
    a = BatchPlan(sources=windows, batch_size=4, seed=1)
    orders = list(a.global_order(store))
    again = list(BatchPlan(sources=windows, batch_size=4, seed=1).global_order(store))
    other = list(BatchPlan(sources=windows, batch_size=4, seed=2).global_order(store))
    assert all(np.array_equal(x, y) for x, y in zip(orders, again, strict=True))
    assert any(not np.array_equal(x, y) for x, y in zip(orders, other, strict=True))
    next_pass = list(BatchPlan(sources=windows, batch_size=4, seed=1, epoch=1).global_order(store))
    assert any(not np.array_equal(x, y) for x, y in zip(orders, next_pass, strict=True))
    for w, order in zip(windows, orders, strict=True):
        assert np.array_equal(np.sort(order), np.sort(store.window(w)))
    plain = BatchPlan(sources=windows[:1], batch_size=4, shuffle=False)
    assert np.array_equal(next(plain.global_order(store)), store.window(windows[0]))


def test_skip_resumes_the_same_order(store):
    windows = _busy_windows(store, 2)
    full = BatchPlan(sources=windows, batch_size=3, seed=5, drop_last=False)
    order = np.concatenate(list(full.global_order(store)))
    for skip in (0, 1, 7, store.window(windows[0]).size):
        resumed = BatchPlan(sources=windows, batch_size=3, seed=5, drop_last=False, skip=skip)
        assert np.array_equal(np.concatenate(list(resumed.global_order(store))), order[skip:])
    too_far = BatchPlan(sources=windows, batch_size=3, skip=store.window(windows[0]).size + 1)
    with pytest.raises(ValueError, match="skip"):
        list(too_far.batches(store))


def test_user_holdout_partitions_users(store):
    windows = _busy_windows(store, store.num_windows)
    kwargs = {"sources": windows, "batch_size": 2, "holdout_fraction": 0.3, "holdout_salt": 9}
    train = np.concatenate(list(BatchPlan(**kwargs).global_order(store)))
    held = np.concatenate(list(BatchPlan(**kwargs, holdout="only").global_order(store)))
    everything = np.concatenate([store.window(w) for w in windows])
    assert np.array_equal(np.sort(np.concatenate([train, held])), np.sort(everything))
    uid = store.arrays["user_uid"]
    train_users = set(uid[store.users_of(train)].tolist())
    held_users = set(uid[store.users_of(held)].tolist())
    assert train_users.isdisjoint(held_users) and held_users
    mask = holdout_users(np.arange(100_000), 0.3, salt=9)
    assert abs(mask.mean() - 0.3) < 0.01
    assert not holdout_users(np.arange(100), 0.0).any()
    assert holdout_users(np.arange(100), 1.0).all()


def test_test_source_and_validation(store):
    plan = BatchPlan(sources=(TEST,), batch_size=7, shuffle=False, drop_last=False)
    batches = list(plan.batches(store))
    assert np.array_equal(np.concatenate(batches), store.test_anchors)
    bad = [
        ({"sources": ("train",)}, "sources"),
        ({"sources": (-1,)}, "negative window"),
        ({"batch_size": 0}, "batch_size"),
        ({"world_size": 2, "rank": 2}, "rank"),
        ({"skip": -1}, "skip"),
        ({"holdout_fraction": 1.5}, "holdout_fraction"),
        ({"holdout": "some"}, "holdout"),
        ({"seed": -1}, "seed"),
        ({"epoch": -1}, "epoch"),
    ]
    for change, message in bad:
        with pytest.raises(ValueError, match=message):
            BatchPlan(**({"sources": (0,), "batch_size": 2} | change))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    eval_window=st.integers(min_value=1, max_value=400),
    history_length=st.integers(min_value=3, max_value=60),
    causal_window=st.integers(min_value=1, max_value=300),
    strategy=st.sampled_from(["last_n", "interleaved"]),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_no_leakage(store, eval_window, history_length, causal_window, strategy, seed):
    """Histories only hold earlier events of the same user, and everything trained before an
    evaluation window is earlier than every anchor in it."""
    eval_window = min(eval_window, store.num_windows - 1)
    config = SampleConfig(
        history_length=history_length,
        min_history=store.min_history,
        strategy=strategy,
        causal_window=causal_window,
    )
    train_plan = BatchPlan(sources=tuple(range(eval_window)), batch_size=16, seed=seed)
    eval_plan = BatchPlan(sources=(eval_window,), batch_size=16, shuffle=False, drop_last=False)
    ts = store.arrays["event_timestamp"]
    eval_anchors = np.concatenate(list(eval_plan.global_order(store)))
    trained = np.concatenate([np.zeros(0, np.int64), *train_plan.global_order(store)])
    if trained.size and eval_anchors.size:
        assert ts[trained].max() < ts[eval_anchors].min()
    test = np.asarray(store.test_anchors)
    assert ts[store.train_anchors].max() < ts[test].min()
    for anchors in (trained[:64], eval_anchors[:64], test[:64]):
        samples = store.samples(anchors, config)
        owner = np.repeat(np.arange(len(samples)), samples.history_lengths)
        assert np.all(samples.history_timestamp <= samples.anchor_timestamp[owner])
        first = store.arrays["user_offset"][store.users_of(anchors)]
        assert np.all(samples.history_lengths <= history_length)
        # Every history event lies in the anchor's causal window of its own user's stream.
        pos = anchors - first
        assert np.all(samples.history_lengths <= np.minimum(pos, causal_window))


@pytest.mark.parametrize(
    "options",
    [
        dict(),
        dict(drop_last=False, world_size=2),
        dict(skip=7, world_size=3),
        dict(holdout_fraction=0.3),
        dict(holdout_fraction=0.3, holdout="only", drop_last=False, skip=2),
    ],
)
def test_counts_match_the_batches_without_drawing_an_order(store, options, monkeypatch):
    sources = (*_busy_windows(store, 3), TEST)
    plan = BatchPlan(sources=sources, batch_size=4, seed=5, **options)
    per_rank = _all_ranks(plan, store)
    expected_batches = len(per_rank[0])
    expected_samples = sum(b.size for batches in per_rank for b in batches)
    assert [o.size for o in plan.global_order(store)] == plan.source_sizes(store)

    def no_permutations(*args, **kwargs):
        raise AssertionError("counting drew a shuffled order")

    monkeypatch.setattr(np.random, "default_rng", no_permutations)
    assert plan.num_batches(store) == expected_batches
    assert plan.num_samples(store) == expected_samples


def test_skip_beyond_the_first_source_is_refused_when_counting(store):
    window = _busy_windows(store, 1)[0]
    size = store.window(window).size
    plan = BatchPlan(sources=(window,), batch_size=4, skip=size + 1)
    with pytest.raises(ValueError, match=rf"skip={size + 1} exceeds the {size} samples"):
        plan.num_samples(store)
