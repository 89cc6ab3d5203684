from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

TRAIN_TOOL = Path(__file__).resolve().parents[3] / "tools" / "train.py"


@pytest.fixture(name="train_tool")
def train_tool_fixture():
    """tools/train.py as a module (the command line of the run), where the repository has it."""
    if not TRAIN_TOOL.is_file():
        pytest.skip(f"no {TRAIN_TOOL.name} beside this package")
    spec = importlib.util.spec_from_file_location("train_tool", TRAIN_TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
