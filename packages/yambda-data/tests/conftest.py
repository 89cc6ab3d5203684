"""Shared fixtures: small synthetic datasets generated once per test session."""

from __future__ import annotations

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
