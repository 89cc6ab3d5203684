"""The packages CI tests one by one are the workspace's packages, in `.ci/run` and in the workflow.

`.ci/run` (what CI runs) and `.github/workflows/ci.yml` (the per-package matrix of a GitHub
run, with its GPU columns) each list the packages; a package added to the workspace and to one
list only would go untested alone in the other. The lists are read from the files themselves.
"""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def workspace_packages() -> dict[str, str]:
    """Distribution name -> folder, for every member of the workspace."""
    return {
        tomllib.loads(path.read_text())["project"]["name"]: f"packages/{path.parent.name}"
        for path in sorted((ROOT / "packages").glob("*/pyproject.toml"))
    }


def ci_run_loop(header: str) -> list[str]:
    """The words of the `for VAR in ...; do` loop of `.ci/run` that starts with `header`."""
    text = (ROOT / ".ci" / "run").read_text()
    match = re.search(re.escape(header) + r"(.*?);\s*do", text, re.S)
    assert match, f".ci/run has no loop starting {header!r}"
    return match.group(1).replace("\\\n", " ").split()


def workflow_jobs() -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]


def test_ci_run_tests_and_builds_every_workspace_package_alone():
    packages = workspace_packages()
    tested = dict(word.split(":", 1) for word in ci_run_loop("for package in"))
    assert {name: f"packages/{folder}" for name, folder in tested.items()} == packages
    assert sorted(ci_run_loop("for name in")) == sorted(packages)


def test_the_workflow_matrix_lists_the_packages_ci_run_tests():
    packages = workspace_packages()
    jobs = workflow_jobs()
    cpu = jobs["cpu"]["strategy"]["matrix"]["package"]
    assert {entry["name"]: entry["dir"] for entry in cpu} == packages
    folders = sorted(folder.removeprefix("packages/") for folder in packages.values())
    for column in ("cuda", "rocm"):
        assert sorted(jobs[column]["strategy"]["matrix"]["package"]) == folders, column
