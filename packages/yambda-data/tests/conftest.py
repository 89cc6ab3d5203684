"""Shared fixtures: small synthetic datasets generated once per test session."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from yambda_data.synth import SynthConfig, SynthData, generate

TINY = SynthConfig(
    users=24, median_events_per_user=150, items=1_500, artists=150, albums=400, seed=7
)


@pytest.fixture(scope="session")
def tiny_config() -> SynthConfig:
    return TINY


@pytest.fixture(scope="session")
def tiny_data() -> SynthData:
    return generate(TINY)


@pytest.fixture(scope="session")
def default_data() -> SynthData:
    """The default config (400 users), as train.py uses it."""
    return generate(SynthConfig())


@pytest.fixture(scope="session")
def built_store(tmp_path_factory):
    """The tiny dataset written, preprocessed in 3 partitions and stored (min_history 16).

    Returns (raw root, preprocess dir, store dir); tests must not modify them.
    """
    from yambda_data.preprocess import preprocess
    from yambda_data.store import build_store
    from yambda_data.synth import synthesize

    base = tmp_path_factory.mktemp("store")
    synthesize(base / "raw", TINY)
    preprocess(base / "raw", TINY.size, base / "pre", partitions=3)
    build_store(base / "pre", base / "raw", base / "store", min_history=16)
    return base / "raw", base / "pre", base / "store"


@pytest.fixture(scope="session")
def run_benchmark():
    """Runs ``benchmarks/NAME`` of this package with the given arguments, as a user would:
    ``run_benchmark("bench_write.py", out, "--repeat", "1")`` gives the CompletedProcess
    (text output captured)."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks"

    def run(name: str, *args: object) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(folder / name), *map(str, args)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120)

    return run
