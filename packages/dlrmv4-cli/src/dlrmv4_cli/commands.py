"""The console scripts of the packages whose import takes seconds: each loads its package's
command through :func:`dlrmv4_cli.launch`, so that Ctrl-C while polars or torch loads ends in
one line with status 130 (the package's own module cannot catch what arrives while it is
being imported)."""

from __future__ import annotations

from typing import NoReturn

from dlrmv4_cli import launch


def yambda_data() -> NoReturn:
    """``yambda-data``: :func:`yambda_data.cli.run`."""
    launch("yambda-data", "yambda_data.cli", "run")
