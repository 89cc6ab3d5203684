"""What the subcommands of ``storage-workloads`` share: the program name, the option types,
the default accelerator and the column layout of the text tables."""

from __future__ import annotations

import argparse
import math
from typing import Any

from storage_workloads.workloads import WORKLOADS, workload

PROG = "storage-workloads"


def _int_at_least(minimum: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def _flag_int(flag: str, text: str, minimum: int) -> int:
    """``text`` as an integer >= ``minimum``; a ``ValueError`` naming ``flag`` otherwise (one
    line on stderr, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{flag} must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise ValueError(f"{flag} must be an integer >= {minimum}, got {text!r}")
    return value


def _default_accelerator(model: str, accelerator: str | None) -> str:
    if accelerator is not None:
        return accelerator
    m = model.strip().lower()
    for mod, acc in WORKLOADS:
        if mod == m:
            return acc
    workload(model, "h100")  # raises UnknownWorkloadError naming the known models
    raise AssertionError("unreachable")


def _columns(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  "
        + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in rows
    )
