"""The deterministic draws of the object-storage workloads, no I/O: object sizes (a clipped
lognormal, a uniform or a fixed distribution) and operation mixes.

The sizes depend only on the size parameters and the seed, and the operations of a thread
(which op, which object, which PUT size) only on the seed and the (client, thread) that draws
them: the same on every platform and Python version. :mod:`storage_workloads.objects` uses
them; it re-exports every public name here.
"""

from __future__ import annotations

import math
import numbers
import random
from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "MAX_OBJECT_SIZE",
    "OPS",
    "SIZE_DISTRIBUTIONS",
    "GiB",
    "KiB",
    "MiB",
    "Op",
    "clipped_lognormal_mean",
    "draw_sizes",
    "draw_uniform_sizes",
    "lognormal_params",
    "parse_mix",
    "selection_rng",
    "split_evenly",
]


KiB: Final = 1 << 10

MiB: Final = 1 << 20

GiB: Final = 1 << 30

#: The operations of a mix, in the order results list them (sai3-bench's op names).
OPS: Final = ("get", "put", "list", "stat", "delete")

#: The object size distributions (sai3-bench's ``size_distribution`` types, plus ``fixed``).
SIZE_DISTRIBUTIONS: Final = ("lognormal", "uniform", "fixed")

#: The largest object size: an S3 PUT in one request stores at most 5 GiB.
MAX_OBJECT_SIZE: Final = 5 * GiB

#: One drawn operation: ``(op, argument)``. The argument is the object index for ``get`` and
#: ``stat``, the leaf directory index for ``list``, the object size for ``put`` and 0 for
#: ``delete`` (which removes the oldest object its thread put and has not deleted yet).
Op = tuple[str, int]


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


def draw_uniform_sizes(n: int, *, minimum: int, maximum: int, seed: int = 0) -> list[int]:
    """``n`` object sizes drawn uniformly from the integers ``minimum..maximum`` (both included).

    ``random.Random.randint`` on the same seeded generator as :func:`draw_sizes`, so a seed gives
    the same sizes on every platform, and the sequence is prefix-stable.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"n must be an integer >= 0, got {n!r}")
    if not 1 <= minimum <= maximum:
        raise ValueError(f"need 1 <= minimum <= maximum, got minimum={minimum}, maximum={maximum}")
    randint = random.Random(f"storage-workloads/sizes/{seed}").randint
    return [randint(minimum, maximum) for _ in range(int(n))]


def parse_mix(spec: str | Mapping[str, int] | Iterable[tuple[str, int]]) -> tuple[Op, ...]:
    """An op mix in its canonical form: ``(op, weight)`` pairs in :data:`OPS` order.

    ``spec`` is ``"get=70,put=20,list=5,stat=4,delete=1"``, a mapping or ``(op, weight)`` pairs.
    Weights are relative integers >= 0 (they need not add up to 100); ops of weight 0 are
    dropped, and at least one weight must be positive. Op names are case-insensitive. Raises
    ``ValueError`` naming the bad item.
    """
    pairs: list[tuple[object, object]] = []
    if isinstance(spec, str):
        for item in spec.split(","):
            name, sep, weight = item.strip().partition("=")
            if not sep:
                raise ValueError(f"op mix item {item.strip()!r} is not OP=WEIGHT")
            try:
                value: object = int(weight.strip())
            except ValueError:
                raise ValueError(
                    f"op mix weight of {name.strip()!r} must be an integer, got {weight.strip()!r}"
                ) from None
            pairs.append((name.strip(), value))
    elif isinstance(spec, Mapping):
        pairs = list(spec.items())
    else:
        try:
            pairs = [(name, weight) for name, weight in spec]
        except (TypeError, ValueError):
            raise TypeError(
                f"an op mix is 'op=weight,...', a mapping or (op, weight) pairs, got {spec!r}"
            ) from None
    weights: dict[str, int] = {}
    for name, weight in pairs:
        op = str(name).strip().lower()
        if op not in OPS:
            raise ValueError(f"op mix: unknown op {name!r}; the ops are {', '.join(OPS)}")
        if op in weights:
            raise ValueError(f"op mix: {op} is given twice")
        if isinstance(weight, bool) or not isinstance(weight, numbers.Integral):
            raise ValueError(f"op mix weight of {op} must be an integer, got {weight!r}")
        if weight < 0:
            raise ValueError(f"op mix weight of {op} must be >= 0, got {weight}")
        weights[op] = int(weight)
    mix = tuple((op, weights[op]) for op in OPS if weights.get(op, 0) > 0)
    if not mix:
        raise ValueError(f"op mix needs at least one weight > 0, got {spec!r}")
    return mix


def selection_rng(seed: int, client: int, thread: int) -> random.Random:
    """The generator that draws the operations of one thread of one client.

    Each (seed, client, thread) has its own stream, so an op-count run issues a deterministic
    multiset of operations however the threads interleave.
    """
    return random.Random(f"storage-workloads/get/{seed}/{client}/{thread}")


def split_evenly(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` integers that differ by at most one, larger ones first."""
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    q, r = divmod(total, parts)
    return [q + (1 if i < r else 0) for i in range(parts)]
