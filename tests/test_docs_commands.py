"""The commands the documentation shows exist, and the quick ones run.

Every Markdown page of the repository is read for code: fenced blocks and inline spans. Where
a piece of code calls one of this repository's commands (`tools/train.py`, the packages'
command lines, a benchmark or tool script), each `--option` after it must be one that command
(or the subcommand it names) takes; an option written on its own in prose (`--resume auto`)
must be one that some command of the repository takes. The fenced lines that run a quick
command (`--help`, `list`, `show`, `size`, `describe`, a `check` of a file in the repository)
with no placeholder in them are run, and must succeed. So a renamed or removed option, or a
subcommand the pages still show, fails here with the page and line.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ROOT / "tools" / "train.py"


def _train_parser() -> argparse.ArgumentParser:
    spec = importlib.util.spec_from_file_location("train_entry_point", TRAIN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


def _parser_of(module: str, name: str) -> Callable[[], argparse.ArgumentParser]:
    def build() -> argparse.ArgumentParser:
        return getattr(importlib.import_module(module), name)()

    return build


# The repository's command lines: what a page writes to call one, and its argparse parser.
COMMANDS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "tools/train.py": _train_parser,
    "yambda-data": _parser_of("yambda_data.cli", "_parser"),
    "storage-workloads": _parser_of("storage_workloads.cli", "_parser"),
    "mlperf-compliance": _parser_of("mlperf_compliance.cli", "_parser"),
    "hstu-model": _parser_of("hstu_model.__main__", "build_parser"),
}
MODULES = {  # `python -m MODULE` is the same command
    "yambda_data": "yambda-data",
    "storage_workloads": "storage-workloads",
    "mlperf_compliance": "mlperf-compliance",
    "hstu_model": "hstu-model",
}
ENTRY_POINTS = {
    "yambda-data": ("yambda_data.cli", "main"),
    "storage-workloads": ("storage_workloads.cli", "main"),
    "mlperf-compliance": ("mlperf_compliance.cli", "main"),
    "hstu-model": ("hstu_model.__main__", "main"),
}

# Options of other programs that the pages name in prose: uv, pip, pytest, torchrun, sbatch,
# srun, docker, mpirun and git. An option of ours is never listed here.
OTHER_PROGRAMS_OPTIONS = {
    "--all-extras",
    "--group",
    "--no-group",
    "--no-sync",
    "--isolated",
    "--package",
    "--with",
    "--no-build-isolation",
    "--no-deps",
    "--no-index",
    "--constraint",
    "--override",
    "--python",
    "--durations",
    "--standalone",
    "--nproc-per-node",
    "--nnodes",
    "--rdzv-endpoint",
    "--rdzv-backend",
    "--rdzv-id",
    "--node-rank",
    "--max-restarts",
    "--nodes",
    "--ntasks",
    "--ntasks-per-node",
    "--open-mode",
    "--output",
    "--error",
    "--requeue",
    "--no-requeue",
    "--gpus",
    "--shm-size",
    "--device",
    "--group-add",
    "--oversubscribe",
    "--host",
    "--hostfile",
    "--bind-to",
    "--mca",
    "--allow-run-as-root",
    "--format",
    "--date",
    "--no-checkout",
    "--quiet",
    "--version",
    # mlpstorage's, quoted from the MLPerf Storage rules.
    "--num-checkpoints-write",
}


@dataclass(frozen=True)
class Code:
    page: Path
    line: int
    text: str
    fenced: bool


def pages() -> list[Path]:
    found = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("tools/**/README.md")]
    found += ROOT.glob("packages/*/README.md")
    found += ROOT.glob("packages/*/docs/**/*.md")
    return sorted(set(found))


def code_of(page: Path) -> Iterator[Code]:
    """Each fenced line (backslash continuations joined) and each inline span of `page`."""
    fenced, pending, start = False, "", 0
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if fenced:
            if not pending:
                start = number
            pending += line.rstrip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                yield Code(page, start, pending.strip(), True)
                pending = ""
            continue
        for span in re.findall(r"`([^`]+)`", line):
            yield Code(page, number, span.strip(), False)


def words(text: str) -> list[str]:
    try:
        split = shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose
        split = text.split("#", 1)[0].split()
    # `a; b` and `a| b`: the separator written against the word before it.
    return [part for word in split for part in re.split(r"(?<=\S)(;|\|)$", word) if part]


def commands_in(text: str) -> Iterator[list[str]]:
    """The simple commands of a shell line: split at pipes and command separators."""
    current: list[str] = []
    for word in words(text):
        if word in ("|", "||", "&&", ";", "&"):
            if current:
                yield current
            current = []
        else:
            current.append(word)
    if current:
        yield current


def script_path(word: str, page: Path) -> Path | None:
    """The repository's script that `word` names, from the root or the page's package."""
    if not word.endswith((".py", ".sh", ".sbatch")) or "<" in word:
        return None
    bases = [ROOT, page.parent]
    parts = page.relative_to(ROOT).parts
    if parts[0] == "packages":
        bases.append(ROOT / "packages" / parts[1])
    for base in bases:
        candidate = (base / word).resolve()
        if candidate.is_file() and ROOT in candidate.parents:
            return candidate
    return None


def script_options(path: Path) -> set[str]:
    """The options a script takes: every `--name` its source (and its sibling helpers: a
    `_common.py`, `lib.sh` or the `.py` a shell script runs) spells."""
    sources = [path, path.with_suffix(".py"), path.parent / "_common.py", path.parent / "lib.sh"]
    text = "".join(p.read_text() for p in dict.fromkeys(sources) if p.is_file())
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))


@dataclass
class Parsed:
    """A command's parser tree: the options of each subcommand path."""

    options: dict[tuple[str, ...], set[str]]

    @classmethod
    def of(cls, parser: argparse.ArgumentParser) -> Parsed:
        options: dict[tuple[str, ...], set[str]] = {}

        def walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
            options[path] = set()
            for action in p._actions:
                options[path].update(s for s in action.option_strings if s.startswith("--"))
                if isinstance(action, argparse._SubParsersAction):
                    for name, sub in action.choices.items():
                        walk(sub, (*path, name))

        walk(parser, ())
        return cls(options)

    def subcommand(self, args: list[str]) -> tuple[str, ...]:
        path: tuple[str, ...] = ()
        for word in args:
            word = word.split("|", 1)[0]  # `prepare|get|run`: the page's shorthand for three
            if (*path, word) not in self.options:
                break
            path = (*path, word)
        return path

    def takes(self, path: tuple[str, ...], option: str) -> bool:
        return any(option in self.options[path[:i]] for i in range(len(path) + 1))


@pytest.fixture(scope="module")
def parsed() -> dict[str, Parsed]:
    return {name: Parsed.of(build()) for name, build in COMMANDS.items()}


PACKAGE_OPTIONS = {"--package", "--with", "--from"}
"""uv's options whose value names a package, which may share its name with a command."""


def invocation(command: list[str], page: Path) -> tuple[str | Path, list[str]] | None:
    """The repository command that `command` calls, and the words after it."""
    for i, word in enumerate(command):
        if i and command[i - 1] in PACKAGE_OPTIONS:
            continue  # `uv run --package hstu-model python ...` runs python, not hstu-model
        if word == "train.py" or script_path(word, page) == TRAIN:
            return "tools/train.py", command[i + 1 :]
        if word in COMMANDS:
            return word, command[i + 1 :]
        if word == "-m" and i + 1 < len(command) and command[i + 1] in MODULES:
            return MODULES[command[i + 1]], command[i + 2 :]
        path = script_path(word, page)
        if path is not None:
            return path, command[i + 1 :]
    return None


def option_words(args: list[str]) -> list[str]:
    """The options among `args`, up to a `--` (after which a command passes its arguments on)."""
    found = []
    for word in args:
        if word == "--":
            break
        if re.match(r"--[A-Za-z0-9]", word) and "<" not in word:
            found.append(re.match(r"--[A-Za-z0-9][\w-]*", word).group())  # `--out/data`: the option
    return found


def every_option(parsed: dict[str, Parsed]) -> set[str]:
    known = {o for p in parsed.values() for options in p.options.values() for o in options}
    for pattern in (
        "tools/**/*.py",
        "tools/**/*.sh",
        "tools/**/*.sbatch",
        "packages/*/benchmarks/*.py",
        "packages/*/scripts/*.py",
        "packages/*/scripts/*.sh",
        "packages/*/ci/*.sh",
        ".ci/*",
    ):
        for path in ROOT.glob(pattern):
            if path.is_file():
                known |= script_options(path)
    return known


def test_every_option_the_docs_name_exists(parsed):
    known = every_option(parsed) | OTHER_PROGRAMS_OPTIONS
    wrong = []
    for page in pages():
        for code in code_of(page):
            for command in commands_in(code.text):
                called = invocation(command, page)
                if called is None:
                    if not code.fenced and command[0].startswith("--"):
                        wrong += [
                            (code, o, "any command here")
                            for o in option_words(command[:1])
                            if o not in known
                        ]
                    continue
                target, args = called
                if isinstance(target, Path):
                    options = script_options(target)
                    wrong += [
                        (code, o, target.name)
                        for o in option_words(args)
                        if o not in options and f"--{o.removeprefix('--no-')}" not in options
                    ]
                    continue
                tree = parsed[target]
                path = tree.subcommand(args)
                shown = " ".join((target, *path))
                wrong += [(code, o, shown) for o in option_words(args) if not tree.takes(path, o)]
    report = [
        f"{c.page.relative_to(ROOT)}:{c.line}: {o} is not an option of {where} ({c.text!r})"
        for c, o, where in wrong
    ]
    assert not report, "\n".join(report)


QUICK = {("list",), ("show",), ("size",), ("describe",), ("object", "list"), ("check",)}
PLACEHOLDER = re.compile(r"\.\.\.|…|<|\[|^[A-Z][A-Z0-9_]+(/|$)|=[A-Z][A-Z0-9_]+$")


def quick_commands(parsed: dict[str, Parsed]) -> list[tuple[Code, str, list[str]]]:
    found = []
    for page in pages():
        for code in code_of(page):
            if not code.fenced:
                continue
            for command in commands_in(code.text):
                called = invocation(command, page)
                if called is None or called[0] not in ENTRY_POINTS:
                    continue
                name, args = called
                if any(PLACEHOLDER.search(word) for word in args):
                    continue
                path = parsed[name].subcommand(args)
                positional = [w for w in args[len(path) :] if not w.startswith("-")]
                if path == ("check",) and not all((ROOT / w).exists() for w in positional):
                    continue  # a check of a file that a run writes, not of one in the repository
                if "--help" in args or path in QUICK:
                    found.append((code, name, args))
    return found


@pytest.mark.slow
def test_the_quick_commands_the_docs_show_run(parsed, monkeypatch):
    monkeypatch.chdir(ROOT)
    commands = quick_commands(parsed)
    assert any(name == "storage-workloads" for _, name, _ in commands), "no quick command found"
    failed = []
    for code, name, args in commands:
        module, function = ENTRY_POINTS[name]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                status = getattr(importlib.import_module(module), function)(args)
            except SystemExit as stop:
                status = stop.code
        if status not in (0, None) or not out.getvalue().strip():
            where = f"{code.page.relative_to(ROOT)}:{code.line}"
            failed.append(f"{where}: {name} {' '.join(args)} -> {status}: {out.getvalue()[-300:]}")
    assert not failed, "\n".join(failed)
