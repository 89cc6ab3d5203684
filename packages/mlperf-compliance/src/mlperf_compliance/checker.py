"""Run the official MLPerf compliance checker on a log and report its outcome.

The checker is mlperf-logging's own (``python -m mlperf_logging.compliance_checker``), run in a
subprocess with the current interpreter: it keeps module-level state between checks and
configures the root logger, so it is not safe to call in-process more than once.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import dlrmv4_cli
from mlperf_compliance.records import (
    MLLOG_PREFIX,
    LogLine,
    LogProblem,
    LogScan,
    scan_log,
    why_not_a_log,
)

__all__ = [
    "DEV_RULESET",
    "DEV_RULESET_BASE",
    "CheckResult",
    "RuleVerdict",
    "check_log",
    "check_ruleset",
    "dev_rules_dir",
    "known_benchmarks",
    "known_rulesets",
]

#: Name of the ruleset for runs on synthetic or subsampled data (see ``rules/dev/``).
DEV_RULESET = "dev"
#: The official ruleset whose structure rules the dev ruleset runs.
DEV_RULESET_BASE = "6.1.0"
#: How a verdict names the dev ruleset.
DEV_RULESET_NOTE = (
    "dev ruleset: official 6.1.0 structure rules; dataset pins (train_samples, eval_samples, "
    "eval grid, first eval) recomputed from the logged values; lr band and target accuracy "
    "not checked"
)

_LEVEL = re.compile(r"^(DEBUG|INFO|WARNING|ERROR|CRITICAL) - ")
# ComplianceChecker.log_messages joins its messages with a line of 30 dashes.
_SEPARATOR = "-" * 30


def dev_rules_dir() -> Path:
    """The directory of the ``dev`` rule YAML files shipped in this package."""
    return Path(__file__).resolve().parent / "rules" / "dev"


@dataclass(frozen=True)
class RuleVerdict:
    """The verdict on one rule, or one message the checker reported about a rule.

    A rule is a ``KEY`` record of the rule files the checker ran (named by its key, such as
    ``run_stop``), ``END`` (the end-of-log checks), ``log_format`` (lines the parser could not
    read), ``config`` (a rule file not found), ``checker`` (the checker crashed) or
    ``division`` (the ``division=`` expectation of :func:`check_log`, checked by this package,
    not by mlperf-logging), ``one_run_per_log`` or ``time_order`` (this package's own checks). A rule with several messages has one verdict per message.

    Attributes:
        rule: the rule's name (the key for ``KEY`` rules).
        passed: ``False`` when the checker reported an error about the rule. A warning (a key
            logged twice with the same value, say) leaves ``passed`` true.
        message: the message, in one line (empty for a silent pass).
        line: the 1-based line in the log file the message is about, when the checker names a
            record (``CHECK`` failures and failed rule code), else ``None``.
        key: the log key the rule is about, or ``None``.
        severity: ``"error"``, ``"warning"`` or ``None`` (no message).
        requirement: the rule's ``REQ`` (``EXACTLY_ONE``, ``AT_LEAST_ONE``, ...), if any.
        configs: the rule files (as the checker names them) that define the rule.
        detail: the checker's full text for the message (with its context dump).
    """

    rule: str
    passed: bool
    message: str = ""
    line: int | None = None
    key: str | None = None
    severity: str | None = None
    requirement: str | None = None
    configs: tuple[str, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data."""
        return {
            "rule": self.rule,
            "key": self.key,
            "passed": self.passed,
            "severity": self.severity,
            "message": self.message,
            "line": self.line,
            "requirement": self.requirement,
            "configs": list(self.configs),
            "detail": self.detail,
        }


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one checker run.

    Attributes:
        passed: the checker exited 0 and reported SUCCESS (and the ``division`` expectation,
            if any, held).
        messages: each problem the checker reported (failed rules, missing keys, warnings), as
            the checker wrote it; a line it could not parse is named as ``path:line: ...``.
        output: the checker's whole standard output and error (empty if it was not run).
        returncode: the checker's exit status, or ``None`` when it was not run (the log has a
            line that would crash its parser).
        ruleset: the ruleset checked (``"6.1.0"``, ``"dev"``, ...).
        rules: the verdict on each rule the checker ran or reported (see :class:`RuleVerdict`).
        division: the division whose rules the checker applied (``closed``/``open``), else the
            log's ``submission_division``, else ``None``.
        path: the log file.
        usage: the working group (``training``).
        configs: the rule files the checker ran, in order.
    """

    passed: bool
    messages: list[str] = field(default_factory=list)
    output: str = ""
    returncode: int | None = 0
    ruleset: str = DEV_RULESET_BASE
    rules: list[RuleVerdict] = field(default_factory=list)
    division: str | None = None
    path: str = ""
    usage: str = "training"
    configs: list[str] = field(default_factory=list)

    @property
    def ruleset_note(self) -> str:
        """How the verdict names its ruleset (the dev ruleset says what it relaxes)."""
        if self.ruleset == DEV_RULESET:
            return DEV_RULESET_NOTE
        return f"ruleset {self.ruleset}"

    @property
    def failed_rules(self) -> list[RuleVerdict]:
        """The verdicts that failed, in the order the checker reported them."""
        return [r for r in self.rules if not r.passed]

    @property
    def warnings(self) -> list[RuleVerdict]:
        """The verdicts that passed with a warning."""
        return [r for r in self.rules if r.passed and r.severity == "warning"]

    def summary(self) -> list[str]:
        """The first line of each message."""
        return [m.splitlines()[0] for m in self.messages if m.strip()]

    def to_dict(self) -> dict[str, Any]:
        """The structured verdict as plain JSON data (what ``check --format json`` prints)."""
        return {
            "path": self.path,
            "passed": self.passed,
            "usage": self.usage,
            "ruleset": self.ruleset,
            "ruleset_note": self.ruleset_note,
            "division": self.division,
            "returncode": self.returncode,
            "configs": list(self.configs),
            "rules_checked": len({r.rule for r in self.rules}),
            "rules_failed": len({r.rule for r in self.failed_rules}),
            "rules": [r.to_dict() for r in self.rules],
        }


def _records(output: str) -> list[tuple[str, str]]:
    """Split checker output into (level, text) records; continuation lines join the record."""
    records: list[tuple[str, list[str]]] = []
    for line in output.splitlines():
        match = _LEVEL.match(line)
        if match:
            records.append((match.group(1), [line[match.end() :]]))
        elif records:
            records[-1][1].append(line)
        else:
            records.append(("TEXT", [line]))
    return [(level, "\n".join(lines)) for level, lines in records]


_PARSE_ERRORS = "Found parsing errors:"
_PARSE_FAILED = "Log lines had parsing errors."
_CONFIG_RUN = re.compile(r"^\s*Compliance checks: (?P<config>.+?)\s*$")
_CHECK = re.compile(r"^CHECK for '(?P<key>.*?)' failed in line (?P<index>\d+):")
_FAILED_TEST = re.compile(r"^failed test: (?P<test>.*)$", re.M)
_CHECK_CODE = re.compile(
    r"^Failed executing CHECK code:\n(?P<test>.*?)\ntriggered by line:\n(?P<record>[^\n]*)", re.S
)
_END_CODE = re.compile(r"^Failed executing CHECK code:\n(?P<test>.*?)\ncurrent context", re.S)
_ACTION_CODE = re.compile(
    r"^Failed executing code (?P<action>\w+) code triggered by line :\n(?P<record>[^\n]*)"
)
_EXACTLY_ONE = re.compile(
    r"^Required EXACTLY_ONE occurrence of '(?P<key>.*?)' but found (?P<n>\d+)(?P<diff> with)?"
)
_AT_LEAST = re.compile(
    r"^Required AT_LEAST(?:_ONE|\((?P<n>\d+)\)) occurrence of '(?P<key>[^']*)'"
    r" but found"
)
_ALTERNATIVES = re.compile(r"^Required AT_LEAST_ONE occurrence of (?P<alts>'.*')$")
_AT_LEAST_ONE_CHECK = re.compile(r"^Failed checks for (?P<key>.*?) : (?P<test>.*)$", re.S)
_END_TEST = re.compile(r"^failed test: (?P<test>.*?)\ncurrent context", re.S)
_CONFIG_MISSING = re.compile(r"^Could not find config file: (?P<config>.*)$")


@dataclass
class _Rule:
    """A ``KEY`` rule of the rule files the checker ran."""

    name: str
    requirement: str | None
    configs: list[str]


def _checker_dir() -> Path:
    """Where mlperf_logging's compliance checker keeps its rule files."""
    spec = importlib.util.find_spec("mlperf_logging.compliance_checker")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover
        raise RuntimeError("mlperf_logging.compliance_checker is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def known_rulesets() -> dict[str, list[str]]:
    """The rulesets of the installed compliance checker, by usage (its ``<usage>_<ruleset>``
    rule directories), e.g. ``{"training": ["0.6.0", ..., "6.1.0"], "hpc": [...]}``; the
    ``dev`` ruleset is added to ``training``."""
    found: dict[str, list[str]] = {}
    for entry in sorted(_checker_dir().iterdir()):
        usage, sep, version = entry.name.partition("_")
        if sep and entry.is_dir() and re.fullmatch(r"\d+\.\d+\.\d+", version):
            found.setdefault(usage, []).append(version)
    for versions in found.values():
        versions.sort(key=lambda v: tuple(int(x) for x in v.split(".")))
    found.setdefault("training", []).append(DEV_RULESET)
    return found


def check_ruleset(ruleset: str, usage: str = "training") -> None:
    """Raise ``ValueError`` naming the value unless the installed checker has rules for
    ``usage`` and ``ruleset`` (``dev`` is the training ruleset of this package)."""
    if ruleset == DEV_RULESET and usage != "training":
        raise ValueError(f"the dev ruleset is for usage 'training', not {usage!r}")
    known = known_rulesets()
    if usage not in known:
        raise ValueError(
            f"usage {usage!r}: the compliance checker knows {', '.join(sorted(known))}"
        )
    if ruleset not in known[usage]:
        raise ValueError(
            f"ruleset {ruleset!r}: the compliance checker has no {usage} ruleset of that "
            f"name (known: {', '.join(known[usage])})"
        )


def known_benchmarks(ruleset: str, usage: str = "training") -> list[str]:
    """The benchmarks the installed checker has rules for in ``usage``/``ruleset`` (its
    ``closed_<benchmark>.yaml`` and ``open_<benchmark>.yaml``); the dev ruleset's are those of
    the official ruleset it builds on."""
    version = DEV_RULESET_BASE if ruleset == DEV_RULESET else ruleset
    folder = _checker_dir() / f"{usage}_{version}"
    names = {
        p.stem.partition("_")[2]
        for pattern in ("closed_*.yaml", "open_*.yaml")
        for p in folder.glob(pattern)
    }
    return sorted(names - {"common"})


def _refuse_unknown_benchmark(scan: LogScan, name: str, ruleset: str, usage: str) -> None:
    """Raise ``ValueError`` for a log whose ``submission_benchmark`` the ruleset has no rules
    for: the official checker would crash looking for ``<division>_<benchmark>.yaml``, and no
    verdict on the log can be given. The reference's own convergence logs name ``hstu``."""
    entry = scan.first("submission_benchmark")
    logged = entry.record.get("value") if entry is not None else None
    known = known_benchmarks(ruleset, usage)
    if entry is None or not isinstance(logged, str) or not known or logged in known:
        return
    raise ValueError(
        f"{name}:{entry.line}: the log names the benchmark {logged!r} (submission_benchmark); "
        f"the {usage} {ruleset} ruleset knows {', '.join(known)}"
    )


def _rules_of(configs: list[str]) -> tuple[dict[str, _Rule], list[str]]:
    """The ``KEY`` rules of the rule files the checker ran, and those with an END check."""
    import yaml  # a dependency of mlperf-logging; only needed here

    base = _checker_dir()
    rules: dict[str, _Rule] = {}
    with_end: list[str] = []
    for config in configs:
        path = Path(config) if os.path.isabs(config) else base / config
        try:
            with path.open(encoding="utf-8") as fh:
                # The checker loads its rules with the same loader.
                checks = yaml.load(fh, Loader=yaml.BaseLoader) or []
        except (OSError, yaml.YAMLError):
            continue
        for item in checks if isinstance(checks, list) else []:
            if not isinstance(item, dict) or not item:
                continue
            kind = next(iter(item))
            body = item[kind]
            if kind == "KEY" and isinstance(body, dict) and "NAME" in body:
                name = str(body["NAME"])
                rule = rules.setdefault(name, _Rule(name, None, []))
                if "REQ" in body:
                    rule.requirement = str(body["REQ"])
                rule.configs.append(config)
            elif kind == "END" and isinstance(body, dict) and "CHECK" in body:
                with_end.append(config)
    return rules, with_end


def _record_key(text: str) -> str | None:
    """The key of a record line the checker quoted (``:::MLLOG {...}``)."""
    at = text.rfind(MLLOG_PREFIX)
    try:
        record = json.loads(text[at + len(MLLOG_PREFIX) :] if at >= 0 else text)
    except ValueError:
        return None
    key = record.get("key") if isinstance(record, dict) else None
    return key if isinstance(key, str) else None


_ONCE_PER_RUN = ("init_start", "init_stop", "run_start", "run_stop")
"""Keys this package requires exactly once even where the official checker only warns."""


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _classify(message: str, scan: LogScan, rules: dict[str, _Rule]) -> RuleVerdict:
    """Turn one message of the checker into a verdict on the rule it is about."""
    text = message.strip()
    first = text.splitlines()[0] if text else ""

    def on_key(key: str, summary: str, line: int | None, severity: str = "error") -> RuleVerdict:
        rule = rules.get(key)
        return RuleVerdict(
            rule=key,
            key=key,
            passed=severity != "error",
            message=summary,
            line=line,
            severity=severity,
            requirement=rule.requirement if rule else None,
            configs=tuple(rule.configs) if rule else (),
            detail=text,
        )

    if match := _CHECK.match(text):
        test = _FAILED_TEST.search(text)
        summary = f"CHECK for '{match['key']}' failed: {test['test'].strip() if test else first}"
        return on_key(match["key"], summary, scan.file_line(int(match["index"])))
    if match := _CHECK_CODE.match(text):
        key = _record_key(match["record"]) or "checker"
        summary = f"failed executing CHECK code for '{key}': {_one_line(match['test'])}"
        return on_key(key, summary, scan.find_line(match["record"]))
    if match := _END_CODE.match(text):
        return RuleVerdict(
            "END",
            False,
            f"failed executing END CHECK code: {_one_line(match['test'])}",
            severity="error",
            detail=text,
        )
    if match := _ACTION_CODE.match(text):
        key = _record_key(match["record"]) or "checker"
        summary = f"failed executing {match['action']} code for '{key}'"
        return on_key(key, summary, scan.find_line(match["record"]))
    if match := _EXACTLY_ONE.match(text):
        # The checker only warns when every occurrence has the same value (and never with
        # "with different values"); --werror is not used here.
        warning = int(match["n"]) >= 2 and not match["diff"]
        return on_key(match["key"], first, None, "warning" if warning else "error")
    if match := _AT_LEAST.match(text):
        return on_key(match["key"], first, None)
    if match := _ALTERNATIVES.match(text):
        alts = re.findall(r"'([^']*)'", match["alts"])
        either = [
            a
            for a in alts
            if (rules.get(a) and str(rules[a].requirement).startswith("AT_LEAST_ONE_OR"))
        ]
        return on_key((either or sorted(alts) or ["checker"])[0], first, None)
    if match := _AT_LEAST_ONE_CHECK.match(text):
        summary = f"no '{match['key']}' record satisfies: {_one_line(match['test'])}"
        return on_key(match["key"], summary, None)
    if match := _END_TEST.match(text):
        return RuleVerdict(
            "END",
            False,
            f"END check failed: {_one_line(match['test'])}",
            severity="error",
            detail=text,
        )
    if match := _CONFIG_MISSING.match(text):
        return RuleVerdict(
            "config",
            False,
            f"rule file not found: {match['config']}",
            severity="error",
            detail=text,
        )
    if text == "No log lines detected":
        return RuleVerdict(
            "log_format", False, "no :::MLLOG records in the log", severity="error", detail=text
        )
    return RuleVerdict("checker", False, _one_line(text), severity="error", detail=text)


def _problem_verdict(problem: LogProblem) -> RuleVerdict:
    return RuleVerdict(
        rule="log_format",
        passed=False,
        message=problem.message,
        line=problem.line,
        severity="error",
        detail=str(problem),
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def value_verdicts(scan: LogScan) -> list[RuleVerdict]:
    """Failed verdicts, each naming its line, for ``eval_accuracy`` records whose value is not a
    number: the official rules compare it with the target and crash on a string or null."""
    found = []
    for entry in scan.all("eval_accuracy"):
        value = entry.record.get("value")
        if not _is_number(value):
            message = f"eval_accuracy must be a number, got {json.dumps(value)}"
            found.append(
                RuleVerdict(
                    rule="eval_accuracy",
                    passed=False,
                    message=message,
                    line=entry.line,
                    key="eval_accuracy",
                    severity="error",
                    detail=f"{scan.path}:{entry.line}: {message}",
                )
            )
    return found


def time_order_verdicts(scan: LogScan) -> list[RuleVerdict]:
    """A failed ``time_order`` verdict for the first record whose ``time_ms`` is before an
    earlier record's (a run's time is ``run_stop`` - ``run_start``, so a log must not go back
    in time), naming both lines and how many more records go back."""
    latest: LogLine | None = None
    backwards: list[tuple[LogLine, LogLine]] = []
    for entry in scan.lines:
        try:
            time_ms = entry.time_ms
        except (TypeError, ValueError):
            continue  # scan.problems names it
        if latest is not None and time_ms < latest.time_ms:
            backwards.append((entry, latest))
        elif latest is None or time_ms > latest.time_ms:
            latest = entry
    if not backwards:
        return []
    entry, before = backwards[0]
    more = f" (and {len(backwards) - 1} more records)" if len(backwards) > 1 else ""
    message = (
        f"'{entry.key}' is logged at time_ms {entry.record['time_ms']}, before '{before.key}' "
        f"at {before.record['time_ms']} (line {before.line}): the timestamps go back{more}"
    )
    return [
        RuleVerdict(
            rule="time_order",
            passed=False,
            message=message,
            line=entry.line,
            key=entry.key,
            severity="error",
            detail=f"{scan.path}:{entry.line}: {message}",
        )
    ]


def _division_of(configs: list[str], scan: LogScan) -> str | None:
    for config in configs:
        name = Path(config).name
        for division in ("closed", "open"):
            if name.startswith(f"{division}_"):
                return division
    entry = scan.first("submission_division")
    return str(entry.record.get("value")) if entry is not None else None


def _verdicts(
    output: str, returncode: int, scan: LogScan
) -> tuple[bool, list[RuleVerdict], list[str], list[RuleVerdict]]:
    """Read the checker's output.

    Returns whether it reported SUCCESS, the verdicts in rule order (one per rule, or one per
    message about it), the rule files it ran, and its messages as verdicts in its own order.
    """
    records = _records(output)
    success = any(level == "INFO" and text.strip() == "SUCCESS" for level, text in records)
    # A crash's traceback continues the record of the last rule file named: read first lines.
    configs = [m["config"] for _, t in records if (m := _CONFIG_RUN.match(t.split("\n", 1)[0]))]
    rules, with_end = _rules_of(configs)

    findings: list[RuleVerdict] = []
    in_parse_errors = False
    for level, text in records:
        body = text.strip()
        if level == "WARNING" and body == _PARSE_ERRORS:
            in_parse_errors = True
            continue
        if in_parse_errors and level == "WARNING" and text.startswith("  "):
            continue  # a line the parser rejected, or its error: scan.problems has both
        in_parse_errors = False
        if level == "ERROR" and body == "FAILED":
            continue
        if level not in ("WARNING", "ERROR", "CRITICAL"):
            continue
        for part in text.split("\n" + _SEPARATOR + "\n"):
            part = part.strip()
            if not part:
                continue
            if part == _PARSE_FAILED:
                findings.extend(_problem_verdict(p) for p in scan.problems)
                if not scan.problems:
                    findings.append(
                        RuleVerdict("log_format", False, part, severity="error", detail=part)
                    )
                continue
            findings.append(_classify(part, scan, rules))
    crashed = "Traceback (most recent call last)" in output and not success
    explained = [
        v for v in value_verdicts(scan) if not any(f.line == v.line for f in findings if f.line)
    ]
    if crashed and explained:
        # The checker's rule code compared a value it cannot (a string accuracy, say): the
        # lines that hold such values are the problems, the traceback their detail.
        trace = output[output.index("Traceback (most recent call last)") :].strip()
        explained = [replace(v, detail=f"{v.detail}\n{trace}") for v in explained]
    findings.extend(explained)
    if crashed and not any(not f.passed for f in findings):
        # The checker crashed instead of reporting: name the exception, keep the traceback.
        trace = output[output.index("Traceback (most recent call last)") :].strip()
        last = [line for line in trace.splitlines() if line.strip()][-1]
        findings.append(
            RuleVerdict(
                "checker",
                False,
                f"the compliance checker crashed: {last}",
                severity="error",
                detail=trace,
            )
        )
    if returncode != 0 and not any(not f.passed for f in findings):
        findings.append(
            RuleVerdict(
                "checker",
                False,
                f"compliance checker exited with status {returncode}",
                severity="error",
                detail=f"compliance checker exited with status {returncode}",
            )
        )

    # One entry per rule, in the order of the rule files; a rule's messages replace its pass.
    verdicts: list[RuleVerdict] = []
    reported = {f.rule for f in findings}
    for name, rule in rules.items():
        if name in reported:
            verdicts.extend(f for f in findings if f.rule == name)
        else:
            verdicts.append(
                RuleVerdict(
                    name, True, key=name, requirement=rule.requirement, configs=tuple(rule.configs)
                )
            )
    end = [replace(f, configs=tuple(with_end)) for f in findings if f.rule == "END"]
    if with_end and not end:
        end = [RuleVerdict("END", True, configs=tuple(with_end))]
    verdicts.extend(end)
    verdicts.extend(f for f in findings if f.rule not in rules and f.rule != "END")
    return success, verdicts, configs, findings


def check_log(
    path: str | os.PathLike[str],
    *,
    ruleset: str = "6.1.0",
    usage: str = "training",
    timeout: float | None = 600.0,
    division: str | None = None,
) -> CheckResult:
    """Check ``path`` with the official checker for ``usage``/``ruleset``.

    Raises ``FileNotFoundError`` if the log does not exist, ``ValueError`` for a ``usage``,
    ``ruleset`` or ``division`` the checker does not know (:func:`check_ruleset`) or a log
    whose ``submission_benchmark`` the ruleset has no rules for (:func:`known_benchmarks`), and
    ``subprocess.TimeoutExpired`` if the checker runs longer than ``timeout`` seconds. ``messages`` can hold warnings even
    when ``passed`` (a key repeated with the same value, say). The checker's own log file is
    written to a temporary directory, so nothing is left in the working directory.

    ``rules`` holds a verdict per rule, derived from the checker's output and the rule files it
    ran (see :class:`RuleVerdict`). The log is first read as the checker's parser reads it
    (:func:`~mlperf_compliance.records.scan_log`): each malformed or truncated ``:::MLLOG``
    line becomes a failed ``log_format`` verdict naming its line. If a line would crash the
    official parser (a record without ``key``, say), the checker is not run at all and
    ``returncode`` is ``None``.

    ``division`` (``"closed"``/``"open"``), if given, must be the division whose rules the
    checker applied (the log's ``submission_division``), else the result fails with a
    ``division`` verdict. This expectation is this package's, not a rule of mlperf-logging.

    ``ruleset="dev"`` (training only) runs the same official engine with the rule files in
    :func:`dev_rules_dir`: the 6.1.0 structure rules, with the DLRMv4 dataset pins recomputed
    from the logged values (see the package's docs/checker.md, The dev ruleset).
    """
    log = Path(path)
    if not log.is_file():
        raise FileNotFoundError(why_not_a_log(log))
    if division is not None and division not in ("closed", "open"):
        raise ValueError(f"division must be 'closed' or 'open', not {division!r}")
    check_ruleset(ruleset, usage)
    env = None
    extra: list[str] = []
    engine_ruleset = ruleset
    if ruleset == DEV_RULESET:
        if usage != "training":
            raise ValueError(f"the dev ruleset is for usage 'training', not {usage!r}")
        engine_ruleset = DEV_RULESET_BASE
        rules = dev_rules_dir()
        extra = ["--config", str(rules / "common.yaml")]
        env = dict(os.environ, MLPERF_COMPLIANCE_DEV_RULES=str(rules))
    scan = scan_log(log)
    name = os.fspath(path)
    _refuse_unknown_benchmark(scan, name, ruleset, usage)
    if scan.fatal:
        # mlperf_logging's parser would raise on these lines (KeyError, TypeError): report
        # them by line instead of running the checker into a traceback.
        verdicts = [_problem_verdict(p) for p in scan.problems]
        return CheckResult(
            passed=False,
            messages=[v.detail for v in verdicts],
            output="",
            returncode=None,
            ruleset=ruleset,
            rules=verdicts,
            division=_division_of([], scan),
            path=name,
            usage=usage,
        )
    with tempfile.TemporaryDirectory(prefix="mlperf-check-") as tmp:
        command = [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            usage,
            "--ruleset",
            engine_ruleset,
            *extra,
            "--log_output",
            str(Path(tmp) / "compliance_checker.log"),
            str(log.resolve()),
        ]
        # In a process group of its own, ended with this process (Ctrl-C, SIGTERM under
        # stop_on_signals, the timeout): an orphaned checker would run on at full CPU.
        proc = dlrmv4_cli.run_child(
            command,
            cwd=tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    # The checker names its own log file, which was in the temporary directory just removed.
    output = "".join(
        line
        for line in proc.stdout.splitlines(keepends=True)
        if not line.startswith("** Logging output also at")
    )
    success, verdicts, configs, findings = _verdicts(output, proc.returncode, scan)
    passed = proc.returncode == 0 and success
    found = _division_of(configs, scan)
    if division is not None and found != division:
        where = scan.first("submission_division")
        expectation = RuleVerdict(
            rule="division",
            passed=False,
            message=f"expected the {division} division, the log is "
            + (f"for the {found} division" if found else "for no division"),
            line=where.line if where else None,
            key="submission_division",
            severity="error",
            detail=f"{name}: expected division {division!r}, found {found!r}",
        )
        verdicts.append(expectation)
        findings.append(expectation)
        passed = False
    for verdict in time_order_verdicts(scan):
        verdicts.append(verdict)
        findings.append(verdict)
        passed = False
    if any(v.rule == "eval_accuracy" and not v.passed for v in verdicts):
        passed = False
    for once in _ONCE_PER_RUN:
        repeats = scan.all(once)
        if len(repeats) > 1:
            # The official checker only warns about a repeated key with equal values, which is
            # how a resumed run that restarted its log would look; that is a second run.
            second = repeats[1]
            verdict = RuleVerdict(
                rule="one_run_per_log",
                passed=False,
                message=f"'{once}' appears {len(repeats)} times: a log holds exactly one run",
                line=second.line,
                key=once,
                severity="error",
                detail=f"{name}:{second.line}: a second '{once}' record",
            )
            verdicts.append(verdict)
            findings.append(verdict)
            passed = False
    return CheckResult(
        passed=passed,
        messages=[f.detail for f in findings],
        output=output,
        returncode=proc.returncode,
        ruleset=ruleset,
        rules=verdicts,
        division=found,
        path=name,
        usage=usage,
        configs=configs,
    )
