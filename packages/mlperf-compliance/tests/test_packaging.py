"""The package stays free of torch and exposes what it documents."""

from __future__ import annotations

import subprocess
import sys

import mlperf_compliance


def test_import_does_not_load_torch() -> None:
    code = (
        "import sys\n"
        "import mlperf_compliance, mlperf_compliance.cli, mlperf_compliance.checker\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_public_api() -> None:
    assert mlperf_compliance.__version__ == "0.1.0"
    for name in mlperf_compliance.__all__:
        assert hasattr(mlperf_compliance, name), name
