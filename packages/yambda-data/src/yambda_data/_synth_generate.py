"""The generator of the synthetic dataset (its generative story: :mod:`yambda_data.synth`): the
catalogue, the users' events one block of users at a time, and :func:`generate`, which returns
them in memory with the planted probabilities."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from yambda_data._synth_config import _QUANTUM, DAY, SESSION_GAP, SynthConfig
from yambda_data.schema import (
    ALBUM_ITEM_MAPPING_SCHEMA,
    ARTIST_ITEM_MAPPING_SCHEMA,
    EVENT_TYPE_CODES,
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
)

_USERS_PER_BLOCK = 256  # fixed: part of the output's definition (random streams per block)
_MIN_BODY_SESSIONS = 4

# Planted-signal coefficients (see :mod:`yambda_data.synth`).
_LABEL_INTERCEPT = -0.15
_LABEL_AFFINITY = 1.1
_LABEL_QUALITY = 0.6
_USER_BIAS_STD = 0.45
# Item choice: from the personal library, from a taste-drawn genre, else by global popularity.
_P_LIBRARY = 0.35
_P_TASTE = 0.45
_GENRE_TEMPERATURE = 1.5
# Reactions, per listen: like / dislike logits; undo probabilities.
_LIKE_LOGIT = (-7.0, 1.2, 1.6)  # intercept, affinity, listen_plus
_DISLIKE_LOGIT = (-5.5, -1.2, -2.0)
_P_UNLIKE = 0.25
_P_UNDISLIKE = 0.30


@dataclass(frozen=True)
class SynthData:
    """The generated tables, in the public schema, and the planted probabilities.

    ``listen_plus_prob`` is aligned with the rows of ``events``: the generator's probability
    that a listen is listen_plus, NaN for the other event types.
    """

    config: SynthConfig
    events: pl.DataFrame
    artist_item_mapping: pl.DataFrame
    album_item_mapping: pl.DataFrame
    listen_plus_prob: np.ndarray

    def planted_auc(self, *, t_from: int | None = None, t_to: int | None = None) -> float:
        """Bayes-optimal AUC of listen_plus: the planted probabilities scored against the drawn
        labels, over the listens with ``t_from <= timestamp < t_to`` (bounds optional)."""
        listen = self.events["event_type"].to_physical().to_numpy() == EVENT_TYPE_CODES["listen"]
        ts = self.events["timestamp"].to_numpy()
        keep = listen.copy()
        if t_from is not None:
            keep &= ts >= t_from
        if t_to is not None:
            keep &= ts < t_to
        ratio = self.events["played_ratio_pct"].fill_null(0).to_numpy()[keep]
        return roc_auc(self.listen_plus_prob[keep], ratio >= 50)


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (ties count one half); NaN when a class is missing."""
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(bool)
    n_pos = int(labels.sum())
    n_neg = labels.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="stable")
    sorted_scores = scores[order]
    # Average ranks over ties (1-based).
    boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [scores.size]])
    avg = (starts + ends + 1) / 2.0
    ranks = np.empty(scores.size, dtype=np.float64)
    ranks[order] = np.repeat(avg, ends - starts)
    rank_sum = ranks[labels].sum()
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


# --------------------------------------------------------------------------------------------
# Catalogue


@dataclass(frozen=True)
class _Catalogue:
    item_ids: np.ndarray  # uint32 [items], sorted
    item_artist: np.ndarray  # int64 [items], primary artist index
    item_quality: np.ndarray  # float64 [items]
    item_length: np.ndarray  # int64 [items], seconds, multiple of 5
    item_pop_cdf: np.ndarray  # float64 [items], global popularity CDF
    genre_items: np.ndarray  # int64 [items], item indices grouped by genre
    genre_cdf_flat: np.ndarray  # float64 [items], genre index + within-genre popularity CDF
    genre_centroids: np.ndarray  # float64 [genres, dims]
    artist_vectors: np.ndarray  # float64 [artists, dims], unit-variance scale
    artist_mapping: pl.DataFrame
    album_mapping: pl.DataFrame


def _sparse_ids(rng: np.random.Generator, count: int, sparsity: float) -> np.ndarray:
    space = max(count, int(count * sparsity))
    return np.sort(rng.choice(space, size=count, replace=False)).astype(np.uint32)


def _zipf_weights(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Zipf weights over a random permutation of n ranks."""
    ranks = rng.permutation(n)
    return (ranks + 1.0) ** -exponent


def _cdf(weights: np.ndarray) -> np.ndarray:
    c = np.cumsum(weights, dtype=np.float64)
    c /= c[-1]
    c[-1] = 1.0
    return c


def _segment_cdf_flat(weights: np.ndarray, segment: np.ndarray, n_segments: int) -> np.ndarray:
    """For entries grouped by ascending segment: segment + within-segment CDF (ends at s+1)."""
    counts = np.bincount(segment, minlength=n_segments)
    csum = np.cumsum(weights, dtype=np.float64)
    ends = np.cumsum(counts)
    before = np.concatenate([[0.0], csum[ends[:-1] - 1]]) if n_segments > 1 else np.zeros(1)
    totals = np.bincount(segment, weights=weights, minlength=n_segments)
    within = (csum - before[segment]) / totals[segment]
    within[ends[counts > 0] - 1] = 1.0
    return segment + within


def _build_catalogue(cfg: SynthConfig) -> _Catalogue:
    rng = np.random.default_rng([cfg.seed, 0])
    n_items, n_artists, n_albums, n_genres = cfg.items, cfg.artists, cfg.albums, cfg.genres
    dims = cfg.taste_dims

    item_ids = _sparse_ids(rng, n_items, cfg.id_sparsity)
    artist_ids = _sparse_ids(rng, n_artists, cfg.id_sparsity)
    album_ids = _sparse_ids(rng, n_albums, cfg.id_sparsity)

    # Genres: every genre has at least one artist, then skewed sizes.
    genre_weight = _cdf((np.arange(n_genres) + 1.0) ** -0.7)
    artist_genre = np.concatenate(
        [np.arange(n_genres), np.searchsorted(genre_weight, rng.random(n_artists - n_genres))]
    )
    artist_genre = rng.permutation(artist_genre)
    genre_centroids = rng.standard_normal((n_genres, dims))
    artist_vectors = genre_centroids[artist_genre] + 0.6 * rng.standard_normal((n_artists, dims))
    artist_vectors /= math.sqrt(1.36)

    # Items: every artist has at least one track, then Zipf-like catalogue sizes.
    artist_cdf = _cdf(_zipf_weights(n_artists, 0.9, rng))
    item_artist = np.concatenate(
        [
            rng.permutation(n_artists),
            np.searchsorted(artist_cdf, rng.random(n_items - n_artists), side="right"),
        ]
    ).astype(np.int64)
    item_artist = item_artist[rng.permutation(n_items)]
    item_quality = rng.standard_normal(n_items)
    length = np.exp(rng.normal(math.log(210.0), 0.35, n_items))
    item_length = np.clip((length // _QUANTUM) * _QUANTUM, 30, 900).astype(np.int64)
    popularity = _zipf_weights(n_items, cfg.item_zipf, rng)
    item_pop_cdf = _cdf(popularity)

    item_genre = artist_genre[item_artist]
    genre_items = np.argsort(item_genre, kind="stable")
    genre_cdf_flat = _segment_cdf_flat(popularity[genre_items], item_genre[genre_items], n_genres)

    # Albums: one per artist, the rest in proportion to catalogue sizes; grouped by artist.
    tracks_per_artist = np.bincount(item_artist, minlength=n_artists)
    albums_per_artist = 1 + rng.multinomial(
        n_albums - n_artists, tracks_per_artist / tracks_per_artist.sum()
    )
    album_start = np.concatenate([[0], np.cumsum(albums_per_artist)[:-1]])
    item_album = album_start[item_artist] + (
        rng.random(n_items) * albums_per_artist[item_artist]
    ).astype(np.int64)

    # Artist mapping: primary artist, extra artists of the same genre for some, none for a few.
    artists_by_genre = np.argsort(artist_genre, kind="stable")
    genre_artist_start = np.concatenate([[0], np.cumsum(np.bincount(artist_genre))[:-1]])
    genre_artist_count = np.bincount(artist_genre, minlength=n_genres)
    n_extra = np.searchsorted([0.88, 0.97], rng.random(n_items), side="right")  # 0, 1 or 2
    extra_items = np.repeat(np.arange(n_items), n_extra)
    g = item_genre[extra_items]
    extra_artists = artists_by_genre[
        genre_artist_start[g] + (rng.random(extra_items.size) * genre_artist_count[g]).astype(int)
    ]
    has_artist = rng.random(n_items) >= 0.02
    pairs_item = np.concatenate([np.flatnonzero(has_artist), extra_items[has_artist[extra_items]]])
    pairs_artist = np.concatenate([item_artist[has_artist], extra_artists[has_artist[extra_items]]])
    artist_mapping = _mapping_frame(
        "artist_id", artist_ids[pairs_artist], item_ids[pairs_item], ARTIST_ITEM_MAPPING_SCHEMA
    )

    # Album mapping: primary album, a compilation album for some, none for a few.
    on_compilation = np.flatnonzero(rng.random(n_items) < 0.10)
    compilation_album = rng.integers(0, n_albums, on_compilation.size)
    has_album = rng.random(n_items) >= 0.015
    pairs_item = np.concatenate(
        [np.flatnonzero(has_album), on_compilation[has_album[on_compilation]]]
    )
    pairs_album = np.concatenate(
        [item_album[has_album], compilation_album[has_album[on_compilation]]]
    )
    album_mapping = _mapping_frame(
        "album_id", album_ids[pairs_album], item_ids[pairs_item], ALBUM_ITEM_MAPPING_SCHEMA
    )

    return _Catalogue(
        item_ids=item_ids,
        item_artist=item_artist,
        item_quality=item_quality,
        item_length=item_length,
        item_pop_cdf=item_pop_cdf,
        genre_items=genre_items,
        genre_cdf_flat=genre_cdf_flat,
        genre_centroids=genre_centroids,
        artist_vectors=artist_vectors,
        artist_mapping=artist_mapping,
        album_mapping=album_mapping,
    )


def _mapping_frame(
    key: str, keys: np.ndarray, items: np.ndarray, schema: pl.Schema
) -> pl.DataFrame:
    """Unique (key, item) pairs, sorted by (item_id, key)."""
    frame = pl.DataFrame({key: keys, "item_id": items}, schema=schema)
    return frame.unique().sort(["item_id", key])


# --------------------------------------------------------------------------------------------
# Users


def _segment_exclusive_cumsum(values: np.ndarray, starts: np.ndarray, seg: np.ndarray):
    """Exclusive cumulative sum of ``values`` restarting at every segment start."""
    csum = np.cumsum(values) - values
    if csum.size == 0:
        return csum
    return csum - csum[np.minimum(starts, csum.size - 1)][seg]


def _place_sessions(
    duration: np.ndarray,
    seg: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Start times of sessions (grouped by ascending ``seg``) inside ``[lo, hi]`` per segment.

    The first session of a segment starts at ``lo``; consecutive sessions are separated by
    more than SESSION_GAP, and the spare time is spread over the inner and trailing gaps with
    log-normal weights. Every input is a multiple of 5, and so is every start.
    """
    n_seg = lo.size
    count = np.bincount(seg, minlength=n_seg)
    total = np.bincount(seg, weights=duration, minlength=n_seg).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(count)[:-1]])
    min_gap = SESSION_GAP + _QUANTUM
    slack = (hi - lo) - total - np.maximum(count - 1, 0) * min_gap
    if (slack < 0).any():
        raise RuntimeError("synthetic sessions do not fit their time window")
    first = np.zeros(duration.size, dtype=bool)
    first[starts[count > 0]] = True
    weight = np.where(first, 0.0, rng.lognormal(0.0, 1.0, duration.size))
    trailing = rng.lognormal(0.0, 1.0, n_seg)
    weight_sum = np.bincount(seg, weights=weight, minlength=n_seg) + trailing
    extra = np.floor(slack[seg] * weight / weight_sum[seg] / _QUANTUM).astype(np.int64) * _QUANTUM
    gap = np.where(first, 0, min_gap) + extra
    step = gap + duration
    before = _segment_exclusive_cumsum(step, starts, seg)
    return lo[seg] + before + gap


def _user_block(cat: _Catalogue, cfg: SynthConfig, block: int, uid0: int, n: int) -> dict:
    rng = np.random.default_rng([cfg.seed, 1, block])
    span = cfg.time_span
    k_tail = cfg.last_day_sessions

    # Listens per user, heavy tailed.
    raw = cfg.median_events_per_user * np.exp(cfg.events_sigma * rng.standard_normal(n))
    n_listens = np.clip(np.rint(raw), cfg.min_events_per_user, cfg.max_events_per_user)
    n_listens = n_listens.astype(np.int64)
    total = int(n_listens.sum())
    user = np.repeat(np.arange(n), n_listens)
    user_start = np.concatenate([[0], np.cumsum(n_listens)[:-1]])
    pos = np.arange(total) - user_start[user]

    # Tastes, biases, genre preferences and libraries.
    taste = rng.standard_normal((n, cfg.taste_dims))
    bias = _USER_BIAS_STD * rng.standard_normal(n)
    genre_score = taste @ cat.genre_centroids.T / math.sqrt(cfg.taste_dims)
    genre_p = np.exp(_GENRE_TEMPERATURE * (genre_score - genre_score.max(1, keepdims=True)))
    genre_cdf = np.cumsum(genre_p / genre_p.sum(1, keepdims=True), axis=1)
    genre_cdf[:, -1] = 1.0
    genre_cdf_flat = (genre_cdf + np.arange(n)[:, None]).ravel()

    def taste_items(owner: np.ndarray) -> np.ndarray:
        flat = np.searchsorted(genre_cdf_flat, owner + rng.random(owner.size), side="right")
        genre = np.minimum(flat - owner * cfg.genres, cfg.genres - 1)
        slot = np.searchsorted(cat.genre_cdf_flat, genre + rng.random(owner.size), side="right")
        return cat.genre_items[np.minimum(slot, cat.genre_items.size - 1)]

    lib_size = np.clip(n_listens // 20, 20, 500)
    lib_start = np.concatenate([[0], np.cumsum(lib_size)[:-1]])
    library = taste_items(np.repeat(np.arange(n), lib_size))

    # Item of every listen.
    mode = rng.random(total)
    item = np.searchsorted(cat.item_pop_cdf, rng.random(total), side="right")
    item = np.minimum(item, cat.item_ids.size - 1)
    from_taste = (mode >= _P_LIBRARY) & (mode < _P_LIBRARY + _P_TASTE)
    item[from_taste] = taste_items(user[from_taste])
    from_lib = mode < _P_LIBRARY
    lu = user[from_lib]
    favourite = (lib_size[lu] * rng.random(lu.size) ** 2).astype(np.int64)
    item[from_lib] = library[lib_start[lu] + favourite]
    is_organic = rng.random(total) < np.where(mode < _P_LIBRARY + _P_TASTE, 0.7, 0.25)

    # The planted signal.
    artist = cat.item_artist[item]
    affinity = np.einsum("ij,ij->i", taste[user], cat.artist_vectors[artist])
    affinity /= math.sqrt(cfg.taste_dims)
    logit = _LABEL_INTERCEPT + cfg.signal_scale * (
        _LABEL_AFFINITY * affinity + _LABEL_QUALITY * cat.item_quality[item] + bias[user]
    )
    prob = 1.0 / (1.0 + np.exp(-logit))
    listen_plus = rng.random(total) < prob

    # Played ratio: full plays, partial plays, replays beyond 100%; skips with 7% zeros.
    u = rng.random(total)
    plus_ratio = np.where(
        u < 0.77,
        100,
        np.where(u < 0.9925, rng.integers(50, 100, total), rng.integers(101, 160, total)),
    )
    skip_ratio = np.where(
        rng.random(total) < 0.195, 0, 1 + (49 * rng.random(total) ** 1.7).astype(np.int64)
    )
    ratio = np.where(listen_plus, plus_ratio, skip_ratio).astype(np.int64)
    length = cat.item_length[item]
    played = (length * ratio // 100) // _QUANTUM * _QUANTUM
    pause = np.where(rng.random(total) < 0.12, _QUANTUM * rng.geometric(1 / 6, total), 0)
    step = played + pause

    # Reactions: like / dislike, sometimes undone.
    like_logit = _LIKE_LOGIT[0] + _LIKE_LOGIT[1] * affinity + _LIKE_LOGIT[2] * listen_plus
    dis_logit = _DISLIKE_LOGIT[0] + _DISLIKE_LOGIT[1] * affinity + _DISLIKE_LOGIT[2] * listen_plus
    p_like = 1.0 / (1.0 + np.exp(-like_logit))
    p_dislike = 1.0 / (1.0 + np.exp(-dis_logit))
    u = rng.random(total)
    reaction = np.where(u < p_like, 1, np.where(u < p_like + p_dislike, 2, 0))
    undo = (reaction > 0) & (rng.random(total) < np.where(reaction == 1, _P_UNLIKE, _P_UNDISLIKE))

    # Sessions: geometric lengths; the last k_tail sessions of a user go to the last day.
    cap = np.maximum(1, n_listens // (2 * k_tail))
    tail_len = np.minimum(rng.geometric(1.0 / cfg.mean_session_listens, (n, k_tail)), cap[:, None])
    body_len = n_listens - tail_len.sum(1)
    new_session = rng.random(total) < 1.0 / cfg.mean_session_listens
    in_tail = pos >= body_len[user]
    new_session[in_tail] = False
    # At least _MIN_BODY_SESSIONS evenly spread sessions before the last day.
    spread = (np.arange(_MIN_BODY_SESSIONS) * body_len[:, None]) // _MIN_BODY_SESSIONS
    new_session[(user_start[:, None] + spread).ravel()] = True
    tail_bounds = body_len[:, None] + np.cumsum(tail_len, axis=1) - tail_len
    new_session[(user_start[:, None] + tail_bounds).ravel()] = True
    session = np.cumsum(new_session) - 1
    session_user = user[new_session]
    session_tail = in_tail[new_session]

    # Time windows; squeeze a user's durations in the (rare) case they would not fit.
    body_lo = _QUANTUM * rng.integers(0, 2 * DAY // _QUANTUM, n)
    body_hi = np.full(n, span - DAY - 3_600, dtype=np.int64)
    tail_lo = span - DAY + 600 + _QUANTUM * rng.integers(0, 8 * 3_600 // _QUANTUM, n)
    tail_hi = np.full(n, span - _QUANTUM, dtype=np.int64)
    min_gap = SESSION_GAP + _QUANTUM
    for tail, lo, hi in ((False, body_lo, body_hi), (True, tail_lo, tail_hi)):
        part = in_tail == tail
        n_sess = np.bincount(session_user[session_tail == tail], minlength=n)
        need = np.bincount(user[part], weights=step[part], minlength=n)
        room = (hi - lo) - np.maximum(n_sess - 1, 0) * min_gap
        if (room <= 0).any():
            raise RuntimeError("synthetic sessions do not fit the time axis")
        factor = np.minimum(1.0, 0.95 * room / np.maximum(need, 1))
        squeeze = part & (factor[user] < 1.0)
        step[squeeze] = (step[squeeze] * factor[user[squeeze]]) // _QUANTUM * _QUANTUM
    played = np.minimum(played, step)

    n_sessions = session_user.size
    session_duration = np.bincount(session, weights=step, minlength=n_sessions).astype(np.int64)
    session_begin = np.flatnonzero(new_session)
    session_start = np.empty(n_sessions, dtype=np.int64)
    for tail, lo, hi in ((False, body_lo, body_hi), (True, tail_lo, tail_hi)):
        which = np.flatnonzero(session_tail == tail)
        session_start[which] = _place_sessions(
            session_duration[which], session_user[which], lo, hi, rng
        )
    offset = _segment_exclusive_cumsum(step, session_begin, session)
    listen_ts = session_start[session] + offset

    # Reaction times lie within the played part, so the next listen never precedes them.
    react_ts = (
        listen_ts
        + (played * rng.random(total) * (rng.random(total) < 0.5)).astype(np.int64)
        // _QUANTUM
        * _QUANTUM
    )
    undo_ts = react_ts + (
        (listen_ts + played - react_ts) * rng.random(total) // _QUANTUM * _QUANTUM
    ).astype(np.int64)

    # Assemble events: listen, [reaction], [undo] per listen, in order.
    per_listen = 1 + (reaction > 0) + undo
    at = np.cumsum(per_listen) - per_listen
    n_events = int(per_listen.sum())
    ev_ts = np.empty(n_events, dtype=np.int64)
    ev_src = np.empty(n_events, dtype=np.int64)
    ev_type = np.empty(n_events, dtype=np.uint8)
    ev_ts[at], ev_src[at], ev_type[at] = listen_ts, np.arange(total), EVENT_TYPE_CODES["listen"]
    r = np.flatnonzero(reaction > 0)
    ev_ts[at[r] + 1], ev_src[at[r] + 1] = react_ts[r], r
    ev_type[at[r] + 1] = np.where(
        reaction[r] == 1, EVENT_TYPE_CODES["like"], EVENT_TYPE_CODES["dislike"]
    )
    d = np.flatnonzero(undo)
    ev_ts[at[d] + 2], ev_src[at[d] + 2] = undo_ts[d], d
    ev_type[at[d] + 2] = np.where(
        reaction[d] == 1, EVENT_TYPE_CODES["unlike"], EVENT_TYPE_CODES["undislike"]
    )
    ev_user = user[ev_src]
    same_user = ev_user[1:] == ev_user[:-1]
    if (same_user & (ev_ts[1:] < ev_ts[:-1])).any() or ev_ts.min() < 0 or ev_ts.max() >= span:
        raise RuntimeError("internal error: synthetic events out of order or out of range")

    listen_row = ev_type == EVENT_TYPE_CODES["listen"]
    return {
        "uid": (uid0 + ev_user).astype(np.uint32),
        "timestamp": ev_ts.astype(np.uint32),
        "item_id": cat.item_ids[item[ev_src]],
        "is_organic": is_organic[ev_src].astype(np.uint8),
        "played_ratio_pct": ratio[ev_src].astype(np.uint16),
        "track_length_seconds": length[ev_src].astype(np.uint32),
        "event_code": ev_type,
        "prob": np.where(listen_row, prob[ev_src], np.nan).astype(np.float32),
    }


def _events_frame(block: dict) -> pl.DataFrame:
    names = {i: name for i, name in enumerate(EVENT_TYPES)}
    listen = pl.col("event_type") == "listen"
    frame = pl.DataFrame(
        {
            "uid": block["uid"],
            "timestamp": block["timestamp"],
            "item_id": block["item_id"],
            "is_organic": block["is_organic"],
            "played_ratio_pct": block["played_ratio_pct"],
            "track_length_seconds": block["track_length_seconds"],
            "event_type": block["event_code"],
        }
    )
    frame = frame.with_columns(
        pl.col("event_type").replace_strict(names, return_dtype=EVENT_TYPE_DTYPE)
    )
    frame = frame.with_columns(
        pl.when(listen).then(pl.col("played_ratio_pct")).alias("played_ratio_pct"),
        pl.when(listen).then(pl.col("track_length_seconds")).alias("track_length_seconds"),
    )
    return frame.select(list(MULTI_EVENT_SCHEMA)).cast(dict(MULTI_EVENT_SCHEMA))


def generate(config: SynthConfig | None = None) -> SynthData:
    """Generate the dataset in memory (the model: :mod:`yambda_data.synth`)."""
    cfg = config or SynthConfig()
    cat = _build_catalogue(cfg)
    frames, probs = [], []
    for block, uid0 in enumerate(range(0, cfg.users, _USERS_PER_BLOCK)):
        n = min(_USERS_PER_BLOCK, cfg.users - uid0)
        data = _user_block(cat, cfg, block, uid0, n)
        probs.append(data.pop("prob"))
        frames.append(_events_frame(data))
    events = pl.concat(frames, rechunk=True)
    return SynthData(
        config=cfg,
        events=events,
        artist_item_mapping=cat.artist_mapping,
        album_item_mapping=cat.album_mapping,
        listen_plus_prob=np.concatenate(probs),
    )
