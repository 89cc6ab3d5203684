"""The settings of a synthetic dataset (:mod:`yambda_data.synth`): :class:`SynthConfig`, the
paths of the files it writes, and the settings with the shape of a published Yambda size."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from yambda_data._atomic import check_creatable
from yambda_data.schema import mapping_path, multi_event_path

DAY = 86_400
SESSION_GAP = 1_800
_QUANTUM = 5
_UINT32_MAX = 2**32 - 1


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
            check_creatable(path)


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
