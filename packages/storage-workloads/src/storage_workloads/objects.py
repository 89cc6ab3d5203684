"""Object-storage workloads (the sai3-bench ResNet50 and UNet3D object workloads), no I/O.

An :class:`ObjectWorkload` describes a dataset of objects laid out as a directory tree (``width``
subdirectories per level, ``depth`` levels, objects only in the leaf directories) with object
sizes from a lognormal clipped to ``[size_min, size_max]``, a uniform or a fixed distribution,
and the timed phase that uses it: a weighted mix of GET, PUT, LIST, STAT and DELETE (GET only
by default), ``concurrency`` requests in flight per client, for ``duration_s`` seconds or a
fixed number of operations, optionally after a warm-up that is not counted.

Everything here is deterministic: the object keys depend only on the tree and the object count,
the object sizes only on the size parameters and the seed, and the operations of a thread (which
op, which object, which PUT size) only on the seed and the (client, thread) that draws them;
those draws are in :mod:`storage_workloads.objdraws`, whose names this module re-exports.
:mod:`storage_workloads.s3` runs the workloads.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import numbers
import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from storage_workloads.objdraws import (
    MAX_OBJECT_SIZE,
    OPS,
    SIZE_DISTRIBUTIONS,
    GiB,
    KiB,
    MiB,
    Op,
    clipped_lognormal_mean,
    draw_sizes,
    draw_uniform_sizes,
    lognormal_params,
    parse_mix,
    selection_rng,
    split_evenly,
)
from storage_workloads.workloads import UnknownWorkloadError

__all__ = [
    "DIR_MASK",
    "MAX_LIST_KEYS",
    "MAX_OBJECT_SIZE",
    "OBJECT_WORKLOADS",
    "OPS",
    "SIZE_DISTRIBUTIONS",
    "GiB",
    "KiB",
    "MiB",
    "ObjectWorkload",
    "Op",
    "clipped_lognormal_mean",
    "draw_sizes",
    "draw_uniform_sizes",
    "lognormal_params",
    "object_workload",
    "parse_mix",
    "selection_rng",
    "split_evenly",
]

#: The largest LIST page: S3's ``MaxKeys`` limit.
MAX_LIST_KEYS: Final = 1000
#: The most objects a dataset may have: a run keeps every object's size in memory
#: (:meth:`ObjectWorkload.object_sizes`, about :data:`BYTES_PER_OBJECT` each) before it
#: contacts the endpoint, so a typo of a few digits must be refused, not allocated.
MAX_OBJECTS: Final = 100_000_000
#: What one object of the dataset costs in memory (a list slot and an int), for the estimate.
BYTES_PER_OBJECT: Final = 40
#: The most client processes and threads per client: past what one host can run.
MAX_CLIENTS: Final = 1024
MAX_CONCURRENCY: Final = 4096

#: Directory name of the ``index``-th (1-based) child at tree ``level`` (1-based), as in the
#: sai3-bench configs (``dir_mask: "scan.d%d_w%d.dir"``).
DIR_MASK: Final = "scan.d{level}_w{index}.dir"

_LEAF_CACHE_MAX: Final = 1 << 16  # leaf directory names kept per workload, at most

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


def _int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"ObjectWorkload.{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"ObjectWorkload.{name} must be >= {minimum}, got {value}")


def _seconds(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"ObjectWorkload.{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"ObjectWorkload.{name} must be finite and > 0, got {value}")


def _check_prefix(name: str, value: object, *, allow_empty: bool) -> None:
    if not isinstance(value, str) or not (value.endswith("/") or (allow_empty and value == "")):
        empty = "'' or " if allow_empty else ""
        raise ValueError(f"ObjectWorkload.{name} must be {empty}end with '/', got {value!r}")
    if value.startswith("/") or "//" in value:
        raise ValueError(
            f"ObjectWorkload.{name} must not start with '/' or hold '//', got {value!r}"
        )


@dataclass(frozen=True, kw_only=True)
class ObjectWorkload:
    """One object-storage workload: the dataset tree, the size distribution and the timed phase.

    Attributes:
        name: registry name (``resnet50_object``, ``unet3d_object``), lower case.
        prefix: key prefix of the dataset in the bucket (``""`` or ending in ``/``).
        width: subdirectories per directory, at every level of the tree.
        depth: levels of directories; objects live in the ``width ** depth`` leaf directories.
        files_per_dir: objects per leaf directory at full size (per client with
            ``scale_with_clients``).
        size_mean, size_stdev: mean and standard deviation (bytes) of the lognormal, before
            clipping; only for ``size_distribution="lognormal"`` (``None`` otherwise).
        size_min, size_max: the clip range of the lognormal, the range of the uniform
            distribution or the fixed size, in bytes (both included; at most 5 GiB).
        concurrency: requests in flight per client, in every phase.
        duration_s: length of a timed phase, in seconds (after the warm-up, if any).
        clients: client processes.
        scale_with_clients: ``files_per_dir`` objects per directory *per client*, as
            sai3-bench's multi-host configs; off: one dataset for any number of clients.
        num_objects: objects in the dataset; ``None`` means the full size,
            ``width ** depth * files_per_dir`` (times ``clients`` with ``scale_with_clients``).
        ops: operations in all, over all clients, after the warm-up; ``None`` runs for
            ``duration_s`` instead.
        size_distribution: ``lognormal`` (the default), ``uniform`` or ``fixed``; see
            :meth:`with_sizes` to switch.
        mix: the operations and their relative weights, ``(op, weight)`` pairs in :data:`OPS`
            order (:func:`parse_mix` takes ``"get=70,put=30"`` too); GET only by default.
        warmup_period_s: a warm-up of this many seconds before the timed phase; its operations
            run but are not counted.
        warmup_ops: a warm-up of this many operations in all instead (split like ``ops``).
        put_prefix: where PUTs write (a run under ``{put_prefix}{run id}/``), outside the
            dataset; ``None``: the prefix with ``-put/`` (:attr:`effective_put_prefix`).
        list_max_keys: the page size of a LIST (S3's ``MaxKeys``), 1 to 1000.
    """

    name: str
    prefix: str
    width: int
    depth: int
    files_per_dir: int
    size_mean: int | None = None
    size_stdev: int | None = None
    size_min: int
    size_max: int
    concurrency: int
    duration_s: float
    clients: int = 1
    scale_with_clients: bool = False
    num_objects: int | None = None
    ops: int | None = None
    size_distribution: str = "lognormal"
    mix: tuple[Op, ...] = (("get", 100),)
    warmup_period_s: float | None = None
    warmup_ops: int | None = None
    put_prefix: str | None = None
    list_max_keys: int = MAX_LIST_KEYS

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"ObjectWorkload.name must be a lower-case name ([a-z0-9_.-]), got {self.name!r}"
            )
        _check_prefix("prefix", self.prefix, allow_empty=True)
        for name, minimum in (
            ("width", 1),
            ("depth", 1),
            ("files_per_dir", 1),
            ("size_min", 1),
            ("size_max", 1),
            ("concurrency", 1),
            ("clients", 1),
        ):
            _int(name, getattr(self, name), minimum)
        for name, maximum in (("clients", MAX_CLIENTS), ("concurrency", MAX_CONCURRENCY)):
            if getattr(self, name) > maximum:
                raise ValueError(
                    f"ObjectWorkload.{name} must be <= {maximum:,}, got {getattr(self, name):,}"
                )
        self._check_sizes()
        _seconds("duration_s", self.duration_s)
        if not isinstance(self.scale_with_clients, bool):
            raise TypeError(
                f"ObjectWorkload.scale_with_clients must be a bool, got {self.scale_with_clients!r}"
            )
        if self.num_objects is not None:
            _int("num_objects", self.num_objects, 1)
        self._check_object_count()
        if self.ops is not None:
            _int("ops", self.ops, 1)
        try:
            mix = parse_mix(self.mix)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"ObjectWorkload.mix: {exc}") from None
        object.__setattr__(self, "mix", mix)
        ops = dict(mix)
        if "delete" in ops and "put" not in ops:
            raise ValueError(
                "ObjectWorkload.mix has delete but no put: a delete removes only objects the run "
                "itself put, so the mix needs put too"
            )
        if self.warmup_period_s is not None:
            _seconds("warmup_period_s", self.warmup_period_s)
        if self.warmup_ops is not None:
            _int("warmup_ops", self.warmup_ops, 1)
        if self.warmup_period_s is not None and self.warmup_ops is not None:
            raise ValueError(
                "ObjectWorkload.warmup_period_s and warmup_ops exclude each other: give one"
            )
        if self.put_prefix is not None:
            self._check_put_prefix()
        _int("list_max_keys", self.list_max_keys, 1)
        if self.list_max_keys > MAX_LIST_KEYS:
            raise ValueError(
                f"ObjectWorkload.list_max_keys must be <= {MAX_LIST_KEYS} (S3's MaxKeys limit), "
                f"got {self.list_max_keys}"
            )

    def _check_sizes(self) -> None:
        kind = self.size_distribution
        if kind not in SIZE_DISTRIBUTIONS:
            raise ValueError(
                f"ObjectWorkload.size_distribution must be one of {', '.join(SIZE_DISTRIBUTIONS)}, "
                f"got {kind!r}"
            )
        if self.size_max > MAX_OBJECT_SIZE:
            raise ValueError(
                f"ObjectWorkload.size_max must be <= {MAX_OBJECT_SIZE} (5 GiB, the largest "
                f"single S3 PUT), got {self.size_max}"
            )
        if self.size_min > self.size_max:
            raise ValueError(
                f"ObjectWorkload.size_min must be <= size_max ({self.size_max}), "
                f"got {self.size_min}"
            )
        if kind != "lognormal":
            for name in ("size_mean", "size_stdev"):
                if getattr(self, name) is not None:
                    raise ValueError(
                        f"ObjectWorkload.{name} applies to the lognormal distribution only; it "
                        f"must be None for {kind} sizes, got {getattr(self, name)!r}"
                    )
            if kind == "fixed" and self.size_min != self.size_max:
                raise ValueError(
                    f"ObjectWorkload: fixed sizes need size_min == size_max, got "
                    f"{self.size_min} and {self.size_max}"
                )
            return
        for name in ("size_mean", "size_stdev"):
            if getattr(self, name) is None:
                raise ValueError(f"ObjectWorkload.{name} is required for lognormal sizes")
        _int("size_mean", self.size_mean, 1)
        _int("size_stdev", self.size_stdev, 0)
        assert self.size_mean is not None
        if not self.size_min <= self.size_mean <= self.size_max:
            raise ValueError(
                f"ObjectWorkload.size_mean must lie in [size_min, size_max] = "
                f"[{self.size_min}, {self.size_max}], got {self.size_mean}"
            )

    def _check_put_prefix(self) -> None:
        put = self.put_prefix
        _check_prefix("put_prefix", put, allow_empty=False)
        assert put is not None
        if self.prefix:
            inside = put.startswith(self.prefix) or self.prefix.startswith(put)
        else:
            inside = put.startswith("scan.")
        if inside:
            raise ValueError(
                f"ObjectWorkload.put_prefix must lie outside the dataset ({self.prefix!r}), so "
                f"PUTs cannot touch it, got {put!r}"
            )

    # -- the dataset ---------------------------------------------------------------------------

    @property
    def leaf_dirs(self) -> int:
        """Leaf directories of the tree, ``width ** depth``."""
        return self.width**self.depth

    def _check_object_count(self) -> None:
        """Refuse a dataset of more than MAX_OBJECTS, with what it would take in memory.
        Counted without building the tree: ``width ** depth`` of 10**6 ** 10**6 is not."""
        if self.num_objects is not None:
            total, field = int(self.num_objects), "num_objects"
        else:
            field = "width ** depth * files_per_dir" + (
                " * clients" if self.scale_with_clients else ""
            )
            factor = self.files_per_dir * (self.clients if self.scale_with_clients else 1)
            if self.depth * math.log2(self.width) + math.log2(factor) > 63:
                total = 1 << 64  # past any bound; the number itself is not needed
            else:
                total = self.width**self.depth * factor
        if total > MAX_OBJECTS:
            shown = (
                f"{total:,}"
                if self.num_objects is not None or total < 1 << 64
                else ("more than 2**64")
            )
            raise ValueError(
                f"ObjectWorkload.{field}: {shown} objects, more than {MAX_OBJECTS:,} (the run "
                f"keeps every object's size in memory, about {BYTES_PER_OBJECT} bytes each: "
                f"{total * BYTES_PER_OBJECT / 1e9:,.0f} GB for these)"
            )

    @property
    def total_objects(self) -> int:
        """Objects in the dataset: ``num_objects``, else ``leaf_dirs * files_per_dir`` (times
        ``clients`` with ``scale_with_clients``)."""
        if self.num_objects is not None:
            return self.num_objects
        return (
            self.leaf_dirs * self.files_per_dir * (self.clients if self.scale_with_clients else 1)
        )

    @property
    def lognormal(self) -> tuple[float, float]:
        """``(mu, sigma)`` of the lognormal size distribution (see :func:`lognormal_params`)."""
        if self.size_mean is None or self.size_stdev is None:
            raise ValueError(
                f"ObjectWorkload {self.name} has {self.size_distribution} sizes, not lognormal"
            )
        return lognormal_params(self.size_mean, self.size_stdev)

    @property
    def expected_object_bytes(self) -> float:
        """Expected size of one object: the clipped lognormal's mean
        (:func:`clipped_lognormal_mean`), ``(size_min + size_max) / 2`` for uniform sizes (the
        mean of the integers in the range), and the size itself for fixed ones."""
        if self.size_distribution == "uniform":
            return (self.size_min + self.size_max) / 2
        if self.size_distribution == "fixed":
            return float(self.size_min)
        mu, sigma = self.lognormal
        return clipped_lognormal_mean(mu, sigma, self.size_min, self.size_max)

    @property
    def expected_dataset_bytes(self) -> float:
        """Expected size of the whole dataset, ``total_objects * expected_object_bytes``."""
        return self.total_objects * self.expected_object_bytes

    @property
    def effective_put_prefix(self) -> str:
        """Where PUTs write: ``put_prefix``, else ``{prefix without '/'}-put/`` (``put/`` for an
        empty prefix), which lies outside the dataset."""
        if self.put_prefix is not None:
            return self.put_prefix
        return f"{self.prefix[:-1]}-put/" if self.prefix else "put/"

    def leaf_dir(self, index: int) -> str:
        """Leaf directory (with ``prefix``, ending in ``/``) of object ``index``.

        Objects are dealt round-robin over the leaf directories in order, so object ``i`` is
        in leaf ``i % leaf_dirs`` and every leaf holds ``total_objects // leaf_dirs`` or one
        more object. Leaf ``j`` is ``j`` written in base ``width``, most significant digit at
        level 1, each digit ``d`` naming the directory ``scan.d{level}_w{d + 1}.dir``.
        """
        self._check_index(index)
        return self._leaf(index % self.leaf_dirs)

    def leaf_prefix(self, leaf: int) -> str:
        """Leaf directory number ``leaf`` (with ``prefix``, ending in ``/``): what a LIST lists."""
        if isinstance(leaf, bool) or not isinstance(leaf, numbers.Integral):
            raise TypeError(f"leaf index must be an integer, got {leaf!r}")
        if not 0 <= leaf < self.leaf_dirs:
            raise IndexError(f"leaf index {leaf} out of range [0, {self.leaf_dirs})")
        return self._leaf(leaf)

    def object_key(self, index: int) -> str:
        """Key of object ``index`` (0-based): ``{leaf_dir}obj_{index:08d}.dat``."""
        self._check_index(index)
        return self._key(index)

    def object_keys(self) -> Iterator[str]:
        """Every key of the dataset, in index order."""
        key = self._key
        for i in range(self.total_objects):
            yield key(i)

    def object_sizes(self, seed: int = 0) -> list[int]:
        """Size of every object of the dataset for ``seed``, in index order."""
        n = self.total_objects
        if self.size_distribution == "fixed":
            return [self.size_min] * n
        if self.size_distribution == "uniform":
            return draw_uniform_sizes(n, minimum=self.size_min, maximum=self.size_max, seed=seed)
        assert self.size_mean is not None and self.size_stdev is not None
        return draw_sizes(
            n,
            mean=self.size_mean,
            stdev=self.size_stdev,
            minimum=self.size_min,
            maximum=self.size_max,
            seed=seed,
        )

    def size_sampler(self, rng: random.Random) -> Callable[[], int]:
        """A function that draws one object size from the workload's distribution with ``rng``.

        It consumes ``rng`` exactly as :meth:`object_sizes` consumes its generator (two uniforms
        per lognormal draw, one ``randint`` per uniform one, nothing for fixed sizes).
        """
        low, high = self.size_min, self.size_max
        if self.size_distribution == "fixed":
            return lambda: low
        if self.size_distribution == "uniform":
            randint = rng.randint
            return lambda: randint(low, high)
        mu, sigma = self.lognormal
        uniform = rng.random
        log, sqrt, cos, exp = math.log, math.sqrt, math.cos, math.exp
        two_pi = 2 * math.pi

        def draw() -> int:
            z = sqrt(-2.0 * log(1.0 - uniform())) * cos(two_pi * uniform())
            size = round(exp(mu + sigma * z))
            return low if size < low else high if size > high else size

        return draw

    # -- the timed phase -----------------------------------------------------------------------

    def op_stream(self, seed: int, client: int, thread: int) -> Iterator[Op]:
        """The endless sequence of operations of one thread of one client, as :data:`Op` pairs.

        Each op is drawn by weight from ``selection_rng(seed, client, thread)``: an integer
        ``r`` uniform in ``[0, total weight)`` picks the op whose cumulative weight (in
        :data:`OPS` order) first exceeds ``r``. The same generator then draws the op's argument:
        a GET or STAT object uniformly from the dataset, a LIST leaf directory uniformly from
        those that hold objects, a PUT size from the size distribution; a DELETE draws nothing.
        A GET-only mix draws no op at all, so its GETs are those of a plain GET phase. A warm-up
        takes the first ops of each stream and the counted phase goes on from there.
        """
        rng = selection_rng(seed, client, thread)
        randrange = rng.randrange
        n = self.total_objects
        leaves = min(self.leaf_dirs, n)
        put_size = self.size_sampler(rng)
        names = [op for op, _ in self.mix]
        cumulative = list(itertools.accumulate(weight for _, weight in self.mix))
        total = cumulative[-1]
        single = names[0] if len(names) == 1 else None
        while True:
            op = single or names[bisect.bisect_right(cumulative, randrange(total))]
            if op == "get" or op == "stat":
                yield op, randrange(n)
            elif op == "list":
                yield op, randrange(leaves)
            elif op == "put":
                yield op, put_size()
            else:
                yield op, 0

    def ops_per_thread(self) -> list[list[int]]:
        """For an op-count run: the counted ops of each thread of each client
        (``[client][thread]``)."""
        if self.ops is None:
            raise ValueError("ObjectWorkload.ops is None: this is a timed run")
        return [split_evenly(n, self.concurrency) for n in split_evenly(self.ops, self.clients)]

    def warmup_ops_per_thread(self) -> list[list[int]]:
        """For an op-count warm-up: the warm-up ops of each thread of each client."""
        if self.warmup_ops is None:
            raise ValueError("ObjectWorkload.warmup_ops is None: no op-count warm-up")
        return [
            split_evenly(n, self.concurrency) for n in split_evenly(self.warmup_ops, self.clients)
        ]

    def thread_plan(self, seed: int, client: int, thread: int) -> tuple[list[Op], list[Op]]:
        """``(warm-up ops, counted ops)`` of one thread in an op-count run.

        The warm-up must be an op count (or absent): how many ops a timed warm-up takes from
        the stream is known only when it has run.
        """
        if self.warmup_period_s is not None:
            raise ValueError(
                "ObjectWorkload.warmup_period_s is set: a timed warm-up's ops are not known "
                "in advance"
            )
        count = self.ops_per_thread()[client][thread]
        warm = self.warmup_ops_per_thread()[client][thread] if self.warmup_ops else 0
        stream = self.op_stream(seed, client, thread)
        return list(itertools.islice(stream, warm)), list(itertools.islice(stream, count))

    def planned_ops(self, seed: int = 0) -> list[Op]:
        """Every counted op of an op-count run (a multiset, in no useful order)."""
        out: list[Op] = []
        for client, threads in enumerate(self.ops_per_thread()):
            for thread in range(len(threads)):
                out.extend(self.thread_plan(seed, client, thread)[1])
        return out

    def planned_get_indices(self, seed: int = 0) -> list[int]:
        """Every object index the counted GETs of an op-count run fetch (a multiset)."""
        return [index for op, index in self.planned_ops(seed) if op == "get"]

    # -- derived workloads ---------------------------------------------------------------------

    def override(self, **changes: Any) -> ObjectWorkload:
        """A copy with the given fields changed; ``None`` values are ignored (CLI defaults).

        To set ``num_objects`` or ``ops`` back to ``None`` use :func:`dataclasses.replace`;
        to change the size distribution use :meth:`with_sizes`.
        """
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise TypeError(f"ObjectWorkload has no field {', '.join(unknown)}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def with_sizes(
        self,
        distribution: str,
        *,
        size: int | None = None,
        minimum: int | None = None,
        maximum: int | None = None,
        mean: int | None = None,
        stdev: int | None = None,
    ) -> ObjectWorkload:
        """A copy with another size distribution (sai3-bench's names and parameters).

        - ``fixed``: ``size`` (required), every object that size.
        - ``uniform``: integers uniform in ``[minimum, maximum]``; each defaults to this
          workload's ``size_min`` / ``size_max``.
        - ``lognormal``: ``mean``, ``stdev``, ``minimum``, ``maximum``; each defaults to this
          workload's when it has lognormal sizes, and is required otherwise.

        A parameter that the distribution does not take is an error, as is any invalid value
        (the message names the field).
        """
        given = {
            "size": size,
            "minimum": minimum,
            "maximum": maximum,
            "mean": mean,
            "stdev": stdev,
        }
        takes = {
            "fixed": ("size",),
            "uniform": ("minimum", "maximum"),
            "lognormal": ("mean", "stdev", "minimum", "maximum"),
        }
        if distribution not in takes:
            raise ValueError(
                f"size distribution must be one of {', '.join(SIZE_DISTRIBUTIONS)}, "
                f"got {distribution!r}"
            )
        extra = [k for k, v in given.items() if v is not None and k not in takes[distribution]]
        if extra:
            raise ValueError(
                f"{distribution} sizes take {', '.join(takes[distribution])}, not "
                f"{', '.join(extra)}"
            )
        if distribution == "fixed":
            if size is None:
                raise ValueError("fixed sizes need size")
            low = high = size
        else:
            low = self.size_min if minimum is None else minimum
            high = self.size_max if maximum is None else maximum
        if distribution == "lognormal":
            mean = self.size_mean if mean is None else mean
            stdev = self.size_stdev if stdev is None else stdev
            if mean is None or stdev is None:
                raise ValueError(f"lognormal sizes need mean and stdev ({self.name} has none)")
        return dataclasses.replace(
            self,
            size_distribution=distribution,
            size_min=low,
            size_max=high,
            size_mean=mean,
            size_stdev=stdev,
        )

    def as_dict(self) -> dict[str, Any]:
        """The fields plus the derived counts, for results files (``mix`` as a mapping)."""
        mu, sigma = self.lognormal if self.size_distribution == "lognormal" else (None, None)
        return {
            **dataclasses.asdict(self),
            "mix": dict(self.mix),
            "leaf_dirs": self.leaf_dirs,
            "total_objects": self.total_objects,
            "lognormal_mu": mu,
            "lognormal_sigma": sigma,
            "expected_object_bytes": self.expected_object_bytes,
            "effective_put_prefix": self.effective_put_prefix,
        }

    # -- key helpers (cached per instance; not fields, so equality and pickling ignore them) ----

    @functools.cached_property
    def _digits(self) -> int:
        return max(8, len(str(self.total_objects - 1)))

    @functools.cached_property
    def _level_names(self) -> tuple[tuple[str, ...], ...]:
        return tuple(
            tuple(DIR_MASK.format(level=level, index=d + 1) + "/" for d in range(self.width))
            for level in range(1, self.depth + 1)
        )

    @functools.cached_property
    def _leaf_cache(self) -> tuple[str, ...] | None:
        if self.leaf_dirs > _LEAF_CACHE_MAX:
            return None
        return tuple(self._leaf_uncached(j) for j in range(self.leaf_dirs))

    def _leaf_uncached(self, leaf: int) -> str:
        parts = []
        for names in reversed(self._level_names):
            leaf, digit = divmod(leaf, self.width)
            parts.append(names[digit])
        return self.prefix + "".join(reversed(parts))

    def _leaf(self, leaf: int) -> str:
        cache = self._leaf_cache
        return cache[leaf] if cache is not None else self._leaf_uncached(leaf)

    def _key(self, index: int) -> str:
        return f"{self._leaf(index % self.leaf_dirs)}obj_{index:0{self._digits}d}.dat"

    def _check_index(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, numbers.Integral):
            raise TypeError(f"object index must be an integer, got {index!r}")
        if not 0 <= index < self.total_objects:
            raise IndexError(f"object index {index} out of range [0, {self.total_objects})")

    def __getstate__(self) -> dict[str, Any]:  # leave the caches behind
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)


def _sai3(
    model: str,
    width: int,
    files_per_dir: int,
    size_mean: int,
    size_stdev: int,
    size_min: int,
    size_max: int,
    concurrency: int,
) -> ObjectWorkload:
    """A sai3-bench object workload: ``<model>_object`` under ``<model>/``, a two-level tree,
    lognormal sizes, 300 s."""
    return ObjectWorkload(
        name=f"{model}_object",
        prefix=f"{model}/",
        width=width,
        depth=2,
        files_per_dir=files_per_dir,
        size_mean=size_mean,
        size_stdev=size_stdev,
        size_min=size_min,
        size_max=size_max,
        concurrency=concurrency,
        duration_s=300.0,
    )


_ALL: Final = (
    # model, width, files per dir, size mean, stdev, min and max (bytes), concurrency.
    # 64 x 64 leaf directories x 150 objects = 614,400 objects (about 131 GiB).
    _sai3("resnet50", 64, 150, 229_376, 160_563, 32 * KiB, 1 * MiB, 64),
    # 28 x 28 leaf directories x 64 objects = 50,176 objects (about 336 GiB). The
    # stdev and the tree are those of sai3-bench's unet3d configs.
    _sai3("unet3d", 28, 64, 7_235_174, 5_788_139, 1 * MiB, 32 * MiB, 32),
)

#: The object workloads by name. Read-only.
OBJECT_WORKLOADS: Final[Mapping[str, ObjectWorkload]] = MappingProxyType({w.name: w for w in _ALL})


def object_workload(name: str) -> ObjectWorkload:
    """Look up an object workload; case-insensitive, and ``resnet50`` means ``resnet50_object``.

    Raises :class:`storage_workloads.UnknownWorkloadError` listing the known names.
    """
    key = str(name).strip().lower().replace("-", "_")
    for candidate in (key, f"{key}_object"):
        if candidate in OBJECT_WORKLOADS:
            return OBJECT_WORKLOADS[candidate]
    raise UnknownWorkloadError(
        f"unknown object workload {name!r}; known object workloads: {', '.join(OBJECT_WORKLOADS)}"
    )
