"""hstu-model is the model, usable with any data: its source imports neither the data pipeline
(yambda-data) nor the MLPerf logger (mlperf-compliance). The run that wires them together is
the dlrmv4-train package. Every import is read from the source (ast), the ones inside functions
and `importlib.import_module("...")` calls included, so a lazy import is found too."""

from __future__ import annotations

import ast
from pathlib import Path

import hstu_model

FORBIDDEN = ("yambda_data", "mlperf_compliance")


def imported_modules(source: str) -> set[str]:
    """Every module `source` imports: `import a.b`, `from a.b import c` (absolute ones) and
    `importlib.import_module("a.b")` with a literal name."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


def forbidden_imports(root: Path) -> list[str]:
    """`file: module` for each import of a FORBIDDEN package by a module under `root`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for module in sorted(imported_modules(path.read_text())):
            if module.split(".")[0] in FORBIDDEN:
                found.append(f"{path.relative_to(root)}: {module}")
    return found


def test_the_model_package_imports_neither_the_data_pipeline_nor_the_mlperf_logger():
    root = Path(hstu_model.__file__).resolve().parent
    assert len(list(root.rglob("*.py"))) > 20  # the whole package was read
    assert forbidden_imports(root) == []


def test_every_kind_of_import_is_found(tmp_path):
    """The check above fails for each form an import of a forbidden package can take."""
    forms = {
        "plain.py": "import yambda_data\n",
        "dotted.py": "import mlperf_compliance.logger as logger\n",
        "from.py": "from yambda_data.loader import make_loader\n",
        "lazy.py": "def load():\n    from mlperf_compliance import RunTracker\n    return RunTracker\n",
        "dynamic.py": "import importlib\nloader = importlib.import_module('yambda_data.loader')\n",
        "allowed.py": "import hstu_ops\nfrom . import yambda_data_like\nimport yambda_datasets\n",
    }
    for name, source in forms.items():
        (tmp_path / name).write_text(source)
    assert forbidden_imports(tmp_path) == [
        "dotted.py: mlperf_compliance.logger",
        "dynamic.py: yambda_data.loader",
        "from.py: yambda_data.loader",
        "lazy.py: mlperf_compliance",
        "plain.py: yambda_data",
    ]
