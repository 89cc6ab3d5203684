"""A synthetic dataset in the exact public Yambda layout, with a planted learnable signal.

:func:`synthesize` writes ``<out>/flat/<size>/multi_event.parquet``,
``<out>/artist_item_mapping.parquet`` and ``<out>/album_item_mapping.parquet`` in the public
schema (:mod:`yambda_data.schema`); :func:`synthesize_cached` keeps such a dataset as a cache
that is checked (sha256) at every reuse; :func:`generate` returns the same tables in memory
together with the generator's own listen_plus probability of every listen.

The generative story, vectorized with numpy over blocks of users:

* Catalogue. Items, artists and albums get sparse ids (drawn without replacement from
  ``[0, id_sparsity * count)``). Artists belong to genres; every artist has a taste vector
  (its genre's centroid plus noise) and Zipf-like catalogue size. Every item has one primary
  artist, a primary album of that artist, a Zipf popularity rank, a track length (a multiple of
  5 seconds) and a quality. The mapping files are many-to-many: some items have extra artists
  (from the primary artist's genre, so the genre stays consistent), some are also on a
  compilation album, and a few items have no mapping row at all.
* Users. Listen counts are log-normal (heavy tailed). Each user has a taste vector, a bias and a
  personal library of favourites. A listen picks its item from the library (favourites first),
  from a genre drawn by taste, or from global popularity.
* The planted signal. A listen is listen_plus (played_ratio_pct >= 50) with probability
  ``sigmoid(-0.15 + s * (1.1 * affinity(user, artist) + 0.6 * quality(item) + bias(user)))``,
  where ``affinity`` is the scaled dot product of the user's and the primary artist's taste
  vectors and ``s`` is :attr:`SynthConfig.signal_scale`. Likes follow listen_plus listens of
  liked artists, dislikes follow skips of disliked ones; some likes and dislikes are undone
  (unlike, undislike). :meth:`SynthData.planted_auc` is the Bayes-optimal AUC: the AUC of these
  probabilities against the drawn labels. For the default config (seed 0) it is 0.787 over
  all listens and 0.789 over the test window; a logistic regression on five hand-made
  features of the samples (history rates, item and artist target encodings) reaches about
  0.69 on the test window.
* Time. Listens form sessions (geometric lengths); the time from a listen to the next one is
  the played part of the track (floored to a multiple of 5) plus an occasional pause, so quick
  skips share timestamps with the next event. Sessions are separated by gaps longer than 30
  minutes. Each user's first sessions are spread over ``[start, time_span - 90,000)``
  (the start within the first two days), and the last :attr:`SynthConfig.last_day_sessions`
  sessions fall in the last day (the first of them starts in
  ``[time_span - 85,800, time_span - 57,000)``), so that the temporal
  split's one-day test window holds events of every user.

Rows are sorted by (uid, timestamp); ties keep generation order (a listen, then its reaction,
then the reaction's undo, then the next listen), so the order is deterministic. The same
config gives byte-identical files.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import polars as pl

from yambda_data._atomic import atomic_path, atomic_paths, exclusive_lock
from yambda_data._checksums import checksum_problem, file_checksums
from yambda_data._io import writing
from yambda_data.schema import (
    ALBUM_ITEM_MAPPING_SCHEMA,
    ARTIST_ITEM_MAPPING_SCHEMA,
    EVENT_TYPE_CODES,
    EVENT_TYPE_DTYPE,
    EVENT_TYPES,
    MULTI_EVENT_SCHEMA,
    mapping_path,
    multi_event_path,
)

__all__ = [
    "SynthConfig",
    "SynthData",
    "SynthPaths",
    "generate",
    "roc_auc",
    "synthesize",
    "synthesize_cached",
    "write_parquet_atomic",
    "yambda_shape",
]

DAY = 86_400
SESSION_GAP = 1_800
_QUANTUM = 5
_USERS_PER_BLOCK = 256  # fixed: part of the output's definition (random streams per block)
_UINT32_MAX = 2**32 - 1
_MIN_BODY_SESSIONS = 4

# Planted-signal coefficients (see the module docstring).
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
class SynthConfig:
    """What :func:`generate` and :func:`synthesize` build. Every field is validated."""

    users: int = 400
    """Number of users; uids are 0..users-1."""
    seed: int = 0
    size: str = "50m"
    """The size label of the layout, ``flat/<size>/``."""
    median_events_per_user: int = 1_000
    """Median number of listens per user (reactions add about 2.7%)."""
    events_sigma: float = 1.0
    """Sigma of the log-normal listens-per-user distribution (Yambda: about 1.0)."""
    min_events_per_user: int = 64
    max_events_per_user: int = 20_000
    items: int = 20_000
    artists: int = 2_000
    albums: int = 5_000
    genres: int = 16
    taste_dims: int = 8
    item_zipf: float = 1.0
    """Exponent of the Zipf popularity of items."""
    id_sparsity: float = 4.0
    """Item, artist and album ids are drawn from ``[0, id_sparsity * count)``."""
    mean_session_listens: float = 16.0
    last_day_sessions: int = 2
    """Sessions per user inside the last day of the time axis."""
    time_span: int = 26_000_000
    """Timestamps lie in ``[0, time_span)``."""
    signal_scale: float = 1.0
    """Multiplies the informative part of the listen_plus logit (0 removes the signal)."""

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(f"SynthConfig.{name}: {what}, got {getattr(self, name)!r}")

        ints = {"users", "seed", "median_events_per_user", "min_events_per_user"}
        ints |= {"max_events_per_user", "items", "artists", "albums", "genres", "taste_dims"}
        ints |= {"last_day_sessions", "time_span"}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ints:
                need(isinstance(value, int) and not isinstance(value, bool), f.name, "not an int")
            elif f.name != "size":
                need(
                    isinstance(value, int | float) and not isinstance(value, bool),
                    f.name,
                    "not a number",
                )
                need(math.isfinite(value), f.name, "not finite")
        need(isinstance(self.size, str) and self.size != "", "size", "must be a non-empty str")
        need(
            all(c.isalnum() or c in "-_." for c in self.size) and self.size not in {".", ".."},
            "size",
            "must be a plain directory name",
        )
        need(1 <= self.users <= 10_000_000, "users", "must be in 1..10,000,000")
        need(0 <= self.seed < 2**63, "seed", "must be in 0..2**63-1")
        need(
            self.min_events_per_user >= 4 * self.last_day_sessions
            and self.min_events_per_user >= 8,
            "min_events_per_user",
            "must be at least 8 and at least 4 * last_day_sessions",
        )
        need(
            self.min_events_per_user <= self.median_events_per_user <= self.max_events_per_user,
            "median_events_per_user",
            "must lie in min_events_per_user..max_events_per_user",
        )
        need(self.max_events_per_user <= 100_000, "max_events_per_user", "must be <= 100,000")
        need(0 <= self.events_sigma <= 3, "events_sigma", "must be in [0, 3]")
        need(self.genres >= 1, "genres", "must be >= 1")
        need(self.artists >= self.genres, "artists", "must be >= genres")
        need(self.items >= self.artists, "items", "must be >= artists")
        need(self.albums >= self.artists, "albums", "must be >= artists")
        need(1 <= self.taste_dims <= 256, "taste_dims", "must be in 1..256")
        need(0 <= self.item_zipf <= 3, "item_zipf", "must be in [0, 3]")
        need(1 <= self.id_sparsity <= 1000, "id_sparsity", "must be in [1, 1000]")
        for name in ("items", "albums"):
            need(
                getattr(self, name) * self.id_sparsity < _UINT32_MAX,
                name,
                "times id_sparsity must fit in uint32",
            )
        need(self.mean_session_listens >= 1, "mean_session_listens", "must be >= 1")
        need(1 <= self.last_day_sessions <= 24, "last_day_sessions", "must be in 1..24")
        need(
            10 * DAY <= self.time_span <= 4_000_000_000 and self.time_span % _QUANTUM == 0,
            "time_span",
            "must be a multiple of 5 in 864,000..4,000,000,000",
        )
        need(0 <= self.signal_scale <= 10, "signal_scale", "must be in [0, 10]")
        # The heaviest user's sessions, separated by more than 30 minutes, must fit before the
        # last day (1.5x the expected session count leaves a wide margin).
        sessions = 1.5 * self.max_events_per_user / self.mean_session_listens + 10
        need(
            sessions * (SESSION_GAP + _QUANTUM) <= self.time_span - 3 * DAY - 3_600,
            "time_span",
            "is too short for the sessions of max_events_per_user events",
        )

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SynthPaths:
    """The files :func:`synthesize` wrote."""

    root: Path
    multi_event: Path
    artist_item_mapping: Path
    album_item_mapping: Path

    @classmethod
    def of(cls, root: Path, config: SynthConfig) -> SynthPaths:
        return cls(
            root=root,
            multi_event=multi_event_path(root, config.size),
            artist_item_mapping=mapping_path(root, "artist"),
            album_item_mapping=mapping_path(root, "album"),
        )

    @property
    def files(self) -> list[Path]:
        return [self.artist_item_mapping, self.album_item_mapping, self.multi_event]

    def check_writable(self) -> None:
        """Each file may be replaced: it is a file or absent, and its folder can be created
        (ValueError naming the path otherwise), so that writing replaces nothing else."""
        for path in self.files:
            if path.exists() and not path.is_file():
                raise ValueError(f"{path}: exists and is not a file; refusing to replace it")
            for parent in path.parents:
                if parent.exists():
                    if not parent.is_dir():
                        raise ValueError(f"{path}: cannot be created, {parent} is not a directory")
                    break


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
    """Generate the dataset in memory (see the module docstring for the model)."""
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


def write_parquet_atomic(frame: pl.DataFrame, path: Path) -> None:
    """Write ``frame`` as zstd parquet to ``path``, atomically (a write error names ``path``
    and the free space there: :class:`~yambda_data.WriteError`)."""
    with writing(path), atomic_path(path) as tmp:
        frame.write_parquet(tmp, compression="zstd", statistics=True)


def synthesize(
    out_dir: str | Path, config: SynthConfig | None = None, *, stream: bool = False
) -> SynthPaths:
    """Generate and write the dataset under ``out_dir``. The three files are written to
    temporary siblings and renamed into place only once all of them are complete, so a
    failure (a :class:`~yambda_data.WriteError` naming the path and the free space) leaves
    the files that were there before unchanged.

    ``stream=True`` never holds more than one block of users' events in memory (for sizes
    such as Yambda-500m's, see :func:`yambda_shape`): each block is written to a part file in
    a temporary directory beside the output, and the parts are then concatenated into
    ``multi_event.parquet`` by polars' streaming engine (row groups of
    :data:`STREAM_ROW_GROUP_ROWS` rows, zstd). The rows are those of the in-memory path, in
    the same order; the file's bytes differ (its row groups do), and the same config gives
    the same bytes again. The parts take about as much disk as the output while it is
    written.

    Existing files are replaced, nothing else: a target that exists and is not a file, or
    whose folder cannot be created, is refused (ValueError naming it) before anything is
    generated."""
    cfg = config or SynthConfig()
    root = Path(out_dir)
    paths = SynthPaths.of(root, cfg)
    paths.check_writable()
    if stream:
        cat = _build_catalogue(cfg)
        mappings = [cat.artist_mapping, cat.album_mapping]
    else:
        data = generate(cfg)
        mappings = [data.artist_item_mapping, data.album_item_mapping]
    targets = paths.files
    with writing(root), atomic_paths(targets) as temps:
        for frame, path, tmp in zip(mappings, targets, temps, strict=False):
            with writing(path):
                frame.write_parquet(tmp, compression="zstd", statistics=True)
        with writing(paths.multi_event):
            if stream:
                _stream_events(cat, cfg, temps[-1])
            else:
                data.events.write_parquet(temps[-1], compression="zstd", statistics=True)
    return paths


SYNTH_RECORD_FILE = "synth.json"
"""The record of :func:`synthesize_cached` in its root: the config and, once the files are
complete, their size and sha256 (``{"config": {...}, "files": {name: {"bytes", "sha256"}}}``)."""


def synthesize_cached(
    root: str | Path, config: SynthConfig, progress: Callable[[str], None] | None = None
) -> SynthPaths:
    """The dataset of ``config`` under ``root``, made once and checked at every reuse: a cache
    that many runs (and ranks) share.

    Under an exclusive lock (``.synth.json.lock``, so concurrent callers take turns) it removes
    the temporary files of syntheses that were killed in ``root``, then reuses the dataset
    when :data:`SYNTH_RECORD_FILE` holds ``config`` and the size and sha256 of each of the
    three files; otherwise it synthesizes it again, telling ``progress`` why (naming the file
    that differs), and writes the record last, atomically. Files in ``root`` without a record
    were not made here and are never replaced (ValueError naming one); a synthesis claims
    ``root`` by writing a record without checksums first, so that files a killed synthesis
    left are replaced next time."""
    if not isinstance(config, SynthConfig):
        raise TypeError(f"config must be a SynthConfig, got {type(config).__name__}")
    root = Path(root)
    paths = SynthPaths.of(root, config)
    paths.check_writable()
    record = root / SYNTH_RECORD_FILE
    if record.exists() and not record.is_file():
        raise ValueError(f"{record}: exists and is not a file; refusing to replace it")
    if not record.exists():  # (only a synthesis here writes one, before its files)
        present = [path for path in paths.files if path.exists()]
        if present:
            raise ValueError(
                f"{present[0]}: exists and {record} does not; refusing to replace a dataset "
                "that synthesize_cached did not make"
            )
    say = progress or (lambda _message: None)
    with writing(root):
        root.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(record):
        for leftover in _killed_synthesis_leftovers(paths):
            say(f"removing {leftover} (left by a synthesis that was killed)")
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        why = _cache_problem(record, config, paths)
        if why is None:
            say(f"{root}: synthetic data up to date")
            return paths
        say(f"synthesizing {root}" + (f" ({why})" if why else ""))
        _write_record(record, {"config": config.to_dict(), "files": None})
        synthesize(root, config)
        names = [path.relative_to(root).as_posix() for path in paths.files]
        _write_record(record, {"config": config.to_dict(), "files": file_checksums(root, names)})
    return paths


def _killed_synthesis_leftovers(paths: SynthPaths) -> list[Path]:
    """Temporary files of :func:`synthesize` (``.<name>.*.tmp``, and the part folders
    ``.<name>.*.tmp.parts-*`` of its streaming path) and of the record, by their names."""
    found: list[Path] = []
    for target in [*paths.files, paths.root / SYNTH_RECORD_FILE]:
        if target.parent.is_dir():
            found += sorted(target.parent.glob(f".{target.name}.*.tmp"))
            found += sorted(target.parent.glob(f".{target.name}.*.tmp.parts-*"))
    return found


def _cache_problem(record: Path, config: SynthConfig, paths: SynthPaths) -> str | None:
    """Why the dataset under ``paths.root`` is not that of ``config`` with the files its
    record describes, as one line naming the file ("" for a root never synthesized); None
    when it is."""
    if not record.is_file():
        return ""  # (files without a record were refused before)
    try:
        recorded = json.loads(record.read_text())
        recorded_config, files = recorded["config"], recorded["files"]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        return f"{record}: not a record of synthesize_cached"
    if recorded_config != config.to_dict():
        return f"{record}: made for another config"
    if not isinstance(files, dict):
        return f"{record}: no checksums (an earlier synthesis did not finish)"
    names = {path.relative_to(paths.root).as_posix() for path in paths.files}
    if set(files) != names:
        return f"{record}: lists {sorted(files)}, not {sorted(names)}"
    problem = checksum_problem(paths.root, files, record)
    return None if problem is None else str(problem)


def _write_record(record: Path, content: dict) -> None:
    with writing(record), atomic_path(record) as tmp:
        tmp.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")


STREAM_ROW_GROUP_ROWS = 1_048_576
"""Rows per row group of a streamed ``multi_event.parquet`` (row groups hold whole uid ranges
in order, so a uid-filtered scan reads only its own)."""


def _stream_events(cat: _Catalogue, cfg: SynthConfig, target: Path) -> None:
    parts = Path(tempfile.mkdtemp(prefix=f"{target.name}.parts-", dir=target.parent))
    try:
        files = []
        for block, uid0 in enumerate(range(0, cfg.users, _USERS_PER_BLOCK)):
            n = min(_USERS_PER_BLOCK, cfg.users - uid0)
            data = _user_block(cat, cfg, block, uid0, n)
            del data["prob"]
            files.append(parts / f"part-{block:07d}.parquet")
            _events_frame(data).write_parquet(files[-1], compression="lz4", statistics=False)
        pl.scan_parquet(files).sink_parquet(
            target,
            compression="zstd",
            statistics=True,
            row_group_size=STREAM_ROW_GROUP_ROWS,
            maintain_order=True,
        )
    finally:
        shutil.rmtree(parts, ignore_errors=True)


YAMBDA_USERS = {"50m": 10_000, "500m": 100_000, "5b": 1_000_000}
"""Users of each published Yambda size (500m and 50m are user subsamples of 5b)."""


def yambda_shape(size: str, *, seed: int = 0, users: int | None = None) -> SynthConfig:
    """A :class:`SynthConfig` with the shape of a published Yambda size: its user count (or
    ``users``), the published median of 3,076 listens per user with a log-normal spread
    whose mean gives about 4,800 events per user (about 480M events for 500m; the published
    p95 of 17,030 would need a wider spread and a higher mean than the published totals
    allow), at most 28,000 listens per user (5b's heaviest user has 27,738 events), and a
    catalogue scaled from the size's item count (3,004,578 items for 500m; artists and
    albums in 5b's ratio to items) with dense ids (``id_sparsity`` 1), so that the id tables
    are as long as the catalogue. (The published subsets keep 5b's ids: a real 500m's tables
    have 5b's 9.39M item rows.)"""
    if size not in YAMBDA_USERS:
        raise ValueError(f"size: expected one of {', '.join(YAMBDA_USERS)}, got {size!r}")
    items = {"50m": 934_057, "500m": 3_004_578, "5b": 9_390_623}[size]
    return SynthConfig(
        users=YAMBDA_USERS[size] if users is None else users,
        seed=seed,
        size=size,
        median_events_per_user=3_076,
        events_sigma=0.95,
        max_events_per_user=28_000,
        items=items,
        artists=round(items * 1_293_394 / 9_390_623),
        albums=round(items * 3_367_691 / 9_390_623),
        id_sparsity=1.0,
    )
