"""Object-storage workloads (the sai3-bench ResNet50 and UNet3D object workloads), no I/O.

An :class:`ObjectWorkload` describes a dataset of objects laid out as a directory tree (``width``
subdirectories per level, ``depth`` levels, objects only in the leaf directories) with
lognormal object sizes clipped to ``[size_min, size_max]``, and the GET phase that reads it
(uniform random selection, ``concurrency`` requests in flight per client, for ``duration_s``
seconds or a fixed number of operations).

Everything here is deterministic: the object keys depend only on the tree and the object count,
the object sizes only on the size parameters and the seed, and the GET selection only on the
seed and the (client, thread) that draws it. :mod:`storage_workloads.s3` runs the workloads.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import random
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from storage_workloads.workloads import UnknownWorkloadError

__all__ = [
    "DIR_MASK",
    "OBJECT_WORKLOADS",
    "KiB",
    "MiB",
    "ObjectWorkload",
    "clipped_lognormal_mean",
    "draw_sizes",
    "lognormal_params",
    "object_workload",
    "selection_rng",
    "split_evenly",
]

KiB: Final = 1 << 10
MiB: Final = 1 << 20

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


def lognormal_params(mean: float, stdev: float) -> tuple[float, float]:
    """``(mu, sigma)`` of the lognormal whose (unclipped) mean and stdev are the given ones.

    ``sigma**2 = ln(1 + stdev**2 / mean**2)`` and ``mu = ln(mean) - sigma**2 / 2``, the
    conversion sai3-bench uses for its ``size_spec: {type: lognormal, mean, std_dev}``.
    """
    if not (math.isfinite(mean) and mean > 0):
        raise ValueError(f"mean must be finite and > 0, got {mean}")
    if not (math.isfinite(stdev) and stdev >= 0):
        raise ValueError(f"stdev must be finite and >= 0, got {stdev}")
    sigma2 = math.log1p((stdev / mean) ** 2)
    return math.log(mean) - sigma2 / 2, math.sqrt(sigma2)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2))


def clipped_lognormal_mean(mu: float, sigma: float, low: float, high: float) -> float:
    """``E[min(max(X, low), high)]`` for ``X ~ LogNormal(mu, sigma)``, in closed form.

    ``low * P(X < low) + high * P(X > high) + exp(mu + sigma**2/2) * (Phi(b - sigma) -
    Phi(a - sigma))`` with ``a, b`` the standardised logs of ``low`` and ``high``. Clipping
    moves the mean of the drawn sizes away from the nominal mean; this is by how much.
    """
    if not 0 < low <= high:
        raise ValueError(f"need 0 < low <= high, got low={low}, high={high}")
    if sigma == 0:
        return min(max(math.exp(mu), low), high)
    a = (math.log(low) - mu) / sigma
    b = (math.log(high) - mu) / sigma
    inner = math.exp(mu + sigma * sigma / 2) * (_phi(b - sigma) - _phi(a - sigma))
    return low * _phi(a) + high * (1 - _phi(b)) + inner


def draw_sizes(
    n: int, *, mean: float, stdev: float, minimum: int, maximum: int, seed: int = 0
) -> list[int]:
    """``n`` object sizes: lognormal draws rounded to whole bytes, then clipped.

    Each draw is ``round(exp(mu + sigma * z))`` with ``(mu, sigma)`` from
    :func:`lognormal_params` and ``z`` a standard normal (Box-Muller on ``random.Random``, so the
    sequence is the same on every platform and Python version); the result is clamped to
    ``[minimum, maximum]`` (sai3-bench rounds and clamps the same way). The sequence for a seed
    is prefix-stable: the first ``k`` of ``n`` draws are the ``k`` draws for the same seed.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if not 1 <= minimum <= maximum:
        raise ValueError(f"need 1 <= minimum <= maximum, got minimum={minimum}, maximum={maximum}")
    mu, sigma = lognormal_params(mean, stdev)
    rng = random.Random(f"storage-workloads/sizes/{seed}")
    uniform = rng.random
    log, sqrt, cos, exp = math.log, math.sqrt, math.cos, math.exp
    two_pi = 2 * math.pi
    out: list[int] = []
    append = out.append
    for _ in range(int(n)):
        u1 = 1.0 - uniform()  # (0, 1]: log(u1) is finite
        z = sqrt(-2.0 * log(u1)) * cos(two_pi * uniform())
        size = round(exp(mu + sigma * z))
        append(minimum if size < minimum else maximum if size > maximum else size)
    return out


def selection_rng(seed: int, client: int, thread: int) -> random.Random:
    """The generator that picks the GET objects of one thread of one client.

    Each (seed, client, thread) has its own stream, so an op-count run fetches a
    deterministic multiset of objects however the threads interleave.
    """
    return random.Random(f"storage-workloads/get/{seed}/{client}/{thread}")


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one, larger ones first."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]


@dataclass(frozen=True, kw_only=True)
class ObjectWorkload:
    """One object-storage workload: the dataset tree, the size distribution and the GET phase.

    Attributes:
        name: registry name (``resnet50_object``, ``unet3d_object``), lower case.
        prefix: key prefix of the dataset in the bucket (``""`` or ending in ``/``).
        width: subdirectories per directory, at every level of the tree.
        depth: levels of directories; objects live in the ``width ** depth`` leaf directories.
        files_per_dir: objects per leaf directory at full size (per client with
            ``scale_with_clients``).
        size_mean, size_stdev: mean and standard deviation (bytes) of the lognormal, before
            clipping.
        size_min, size_max: the clip range of the sizes, in bytes.
        concurrency: GET (and PUT) requests in flight per client.
        duration_s: length of a timed GET phase, in seconds.
        clients: client processes.
        scale_with_clients: grow the full-size dataset with the clients,
            ``files_per_dir`` per directory *per client* (sai3-bench's 4- and 8-host configs do
            this: 2,457,600 and 4,915,200 ResNet50 objects). Off by default: one dataset, read
            by any number of clients.
        num_objects: objects in the dataset; ``None`` means the full size,
            ``width ** depth * files_per_dir`` (times ``clients`` with ``scale_with_clients``).
        ops: GET operations in all, over all clients; ``None`` runs for ``duration_s`` instead.
    """

    name: str
    prefix: str
    width: int
    depth: int
    files_per_dir: int
    size_mean: int
    size_stdev: int
    size_min: int
    size_max: int
    concurrency: int
    duration_s: float
    clients: int = 1
    scale_with_clients: bool = False
    num_objects: int | None = None
    ops: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(
                f"ObjectWorkload.name must be a lower-case name ([a-z0-9_.-]), got {self.name!r}"
            )
        if not isinstance(self.prefix, str) or (self.prefix and not self.prefix.endswith("/")):
            raise ValueError(
                f"ObjectWorkload.prefix must be '' or end with '/', got {self.prefix!r}"
            )
        if self.prefix.startswith("/") or "//" in self.prefix:
            raise ValueError(
                f"ObjectWorkload.prefix must not start with '/' or hold '//', got {self.prefix!r}"
            )
        for name, minimum in (
            ("width", 1),
            ("depth", 1),
            ("files_per_dir", 1),
            ("size_mean", 1),
            ("size_stdev", 0),
            ("size_min", 1),
            ("size_max", 1),
            ("concurrency", 1),
            ("clients", 1),
        ):
            _int(name, getattr(self, name), minimum)
        if self.size_min > self.size_max:
            raise ValueError(
                f"ObjectWorkload.size_min must be <= size_max ({self.size_max}), "
                f"got {self.size_min}"
            )
        if not self.size_min <= self.size_mean <= self.size_max:
            raise ValueError(
                f"ObjectWorkload.size_mean must lie in [size_min, size_max] = "
                f"[{self.size_min}, {self.size_max}], got {self.size_mean}"
            )
        value = self.duration_s
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"ObjectWorkload.duration_s must be a number, got {value!r}")
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"ObjectWorkload.duration_s must be finite and > 0, got {value}")
        if not isinstance(self.scale_with_clients, bool):
            raise TypeError(
                f"ObjectWorkload.scale_with_clients must be a bool, got {self.scale_with_clients!r}"
            )
        if self.num_objects is not None:
            _int("num_objects", self.num_objects, 1)
        if self.ops is not None:
            _int("ops", self.ops, 1)

    # -- the dataset ---------------------------------------------------------------------------

    @property
    def leaf_dirs(self) -> int:
        """Leaf directories of the tree, ``width ** depth``."""
        return self.width**self.depth

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
        """``(mu, sigma)`` of the size distribution (see :func:`lognormal_params`)."""
        return lognormal_params(self.size_mean, self.size_stdev)

    @property
    def expected_object_bytes(self) -> float:
        """Expected size of one object after clipping (:func:`clipped_lognormal_mean`)."""
        mu, sigma = self.lognormal
        return clipped_lognormal_mean(mu, sigma, self.size_min, self.size_max)

    @property
    def expected_dataset_bytes(self) -> float:
        """Expected size of the whole dataset, ``total_objects * expected_object_bytes``."""
        return self.total_objects * self.expected_object_bytes

    def leaf_dir(self, index: int) -> str:
        """Leaf directory (with ``prefix``, ending in ``/``) of object ``index``.

        Objects are dealt round-robin over the leaf directories in order, so object ``i`` is
        in leaf ``i % leaf_dirs`` and every leaf holds ``total_objects // leaf_dirs`` or one
        more object. Leaf ``j`` is ``j`` written in base ``width``, most significant digit at
        level 1, each digit ``d`` naming the directory ``scan.d{level}_w{d + 1}.dir``.
        """
        self._check_index(index)
        return self._leaf(index % self.leaf_dirs)

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
        return draw_sizes(
            self.total_objects,
            mean=self.size_mean,
            stdev=self.size_stdev,
            minimum=self.size_min,
            maximum=self.size_max,
            seed=seed,
        )

    # -- the GET phase -------------------------------------------------------------------------

    def ops_per_thread(self) -> list[list[int]]:
        """For an op-count run: the GETs of each thread of each client (``[client][thread]``)."""
        if self.ops is None:
            raise ValueError("ObjectWorkload.ops is None: this is a timed run")
        return [split_evenly(n, self.concurrency) for n in split_evenly(self.ops, self.clients)]

    def planned_get_indices(self, seed: int = 0) -> list[int]:
        """Every object index an op-count GET phase fetches (a multiset, in no useful order)."""
        out: list[int] = []
        for client, threads in enumerate(self.ops_per_thread()):
            for thread, count in enumerate(threads):
                rng = selection_rng(seed, client, thread)
                out.extend(rng.randrange(self.total_objects) for _ in range(count))
        return out

    # -- derived workloads ---------------------------------------------------------------------

    def override(self, **changes: Any) -> ObjectWorkload:
        """A copy with the given fields changed; ``None`` values are ignored (CLI defaults).

        To set ``num_objects`` or ``ops`` back to ``None`` use :func:`dataclasses.replace`.
        """
        fields = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - fields)
        if unknown:
            raise TypeError(f"ObjectWorkload has no field {', '.join(unknown)}")
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        """The fields plus the derived counts, for results files."""
        mu, sigma = self.lognormal
        return {
            **dataclasses.asdict(self),
            "leaf_dirs": self.leaf_dirs,
            "total_objects": self.total_objects,
            "lognormal_mu": mu,
            "lognormal_sigma": sigma,
            "expected_object_bytes": self.expected_object_bytes,
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


_ALL: Final = (
    # 64 x 64 leaf directories x 150 objects = 614,400 objects (about 131 GiB).
    ObjectWorkload(
        name="resnet50_object",
        prefix="resnet50/",
        width=64,
        depth=2,
        files_per_dir=150,
        size_mean=229_376,
        size_stdev=160_563,
        size_min=32 * KiB,
        size_max=1 * MiB,
        concurrency=64,
        duration_s=300.0,
    ),
    # 28 x 28 leaf directories x 64 objects = 50,176 objects (about 336 GiB). The
    # stdev and the tree are those of sai3-bench's unet3d configs.
    ObjectWorkload(
        name="unet3d_object",
        prefix="unet3d/",
        width=28,
        depth=2,
        files_per_dir=64,
        size_mean=7_235_174,
        size_stdev=5_788_139,
        size_min=1 * MiB,
        size_max=32 * MiB,
        concurrency=32,
        duration_s=300.0,
    ),
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
