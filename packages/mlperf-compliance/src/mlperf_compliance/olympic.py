"""The olympic score: how many result logs a benchmark needs, how many are dropped, the mean.

The numbers come from the installed mlperf-logging where it has them (:func:`olympic_rule`);
the mean is the result summarizer's (:func:`olympic_mean`), computed here because the
summarizer's own entry points cannot be used with the mlperf-logging 4.1.68 wheel (see
:mod:`mlperf_compliance.score`).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OlympicRule", "olympic_mean", "olympic_rule"]

# What mlperf-logging 4.1.68 writes in result_summarizer._compute_strong_score_standalone, the
# only place the number of dropped scores is set (a local variable, not importable). Used when
# the installed source no longer has this line.
_DROPPED_LINE = re.compile(
    r"max_dropped_scores\s*=\s*(?P<special>\d+)\s+if\s+benchmark\s*==\s*['\"](?P<bench>\w+)['\"]"
    r"\s+else\s+(?P<default>\d+)"
)
_DROPPED_FALLBACK = {"unet3d": 4}
_DROPPED_DEFAULT = 1


@dataclass(frozen=True)
class OlympicRule:
    """The numbers of the olympic score for one benchmark, and where each came from.

    Attributes:
        benchmark: the benchmark.
        required_runs: how many result logs a submission has.
        max_dropped: how many scores are dropped at each end.
        required_runs_source: where ``required_runs`` was read.
        max_dropped_source: where ``max_dropped`` was read.
    """

    benchmark: str
    required_runs: int
    max_dropped: int
    required_runs_source: str
    max_dropped_source: str


def package_file(module: str, name: str) -> Path | None:
    """``name`` inside the installed package ``module``, or ``None`` when it is not installed."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / name


def olympic_rule(benchmark: str = "dlrmv4", usage: str = "training") -> OlympicRule:
    """The olympic-score numbers for ``benchmark``, read from the installed mlperf-logging.

    ``required_runs`` is ``mlperf_logging.benchmark_meta.get_result_file_counts(usage)``
    (what the package checker and ``compute_score`` require). ``max_dropped`` is read from the
    line of the installed ``result_summarizer.py`` that sets it (``max_dropped_scores = 4 if
    benchmark == "unet3d" else 1`` in 4.1.68); if that line is not found, the 4.1.68 values
    are used and the source says so. Raises ``ValueError`` for a benchmark the installed
    package does not know.
    """
    from mlperf_logging.benchmark_meta import get_result_file_counts

    counts = get_result_file_counts(usage)
    if benchmark not in counts:
        known = ", ".join(sorted(counts))
        raise ValueError(f"mlperf-logging knows no {usage} benchmark {benchmark!r} ({known})")
    source = package_file("mlperf_logging.result_summarizer", "result_summarizer.py")
    match = None
    if source is not None and source.is_file():
        match = _DROPPED_LINE.search(source.read_text(encoding="utf-8", errors="replace"))
    if match is not None:
        special = {match["bench"]: int(match["special"])}
        max_dropped = special.get(benchmark, int(match["default"]))
        where = (
            f"mlperf_logging/result_summarizer/result_summarizer.py "
            f"({' '.join(match.group(0).split())})"
        )
    else:
        max_dropped = _DROPPED_FALLBACK.get(benchmark, _DROPPED_DEFAULT)
        where = (
            "the result summarizer rule of mlperf-logging 4.1.68 (4 for unet3d, else 1); "
            "not found in the installed package"
        )
    return OlympicRule(
        benchmark=benchmark,
        required_runs=int(counts[benchmark]),
        max_dropped=max_dropped,
        required_runs_source=(
            f"mlperf_logging.benchmark_meta.get_result_file_counts({usage!r})[{benchmark!r}]"
        ),
        max_dropped_source=where,
    )


def olympic_mean(
    scores: Sequence[float], failed: int, max_dropped: int
) -> tuple[float | None, list[int]]:
    """The result summarizer's olympic mean of ``scores`` (the successful runs' minutes).

    ``failed`` runs did not succeed and count as dropped slowest runs. The fastest
    ``max_dropped`` scores and the slowest ``max_dropped - failed`` are dropped and the rest
    averaged (``_compute_olympic_average`` in mlperf_logging's result summarizer). Returns the
    mean (``None`` when more than ``max_dropped`` runs failed or nothing is left) and the
    indices into ``scores`` of the runs averaged.
    """
    if failed > max_dropped:
        return None, []
    order = sorted(range(len(scores)), key=lambda i: (scores[i], i))
    kept = order[max_dropped : len(order) - (max_dropped - failed)]
    if not kept:
        return None, []
    return sum(scores[i] for i in kept) / len(kept), sorted(kept)
