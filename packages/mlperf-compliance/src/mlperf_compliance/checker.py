"""Run the official MLPerf compliance checker on a log and report its outcome.

The checker is mlperf-logging's own (``python -m mlperf_logging.compliance_checker``), run in a
subprocess with the current interpreter: it keeps module-level state between checks and
configures the root logger, so it is not safe to call in-process more than once.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DEV_RULESET", "DEV_RULESET_BASE", "CheckResult", "check_log", "dev_rules_dir"]

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
class CheckResult:
    """The outcome of one checker run.

    Attributes:
        passed: the checker exited 0 and reported SUCCESS.
        messages: each problem the checker reported (failed rules, missing keys, parse errors),
            as the checker wrote it.
        output: the checker's whole standard output and error.
        returncode: the checker's exit status.
        ruleset: the ruleset checked (``"6.1.0"``, ``"dev"``, ...).
    """

    passed: bool
    messages: list[str] = field(default_factory=list)
    output: str = ""
    returncode: int = 0
    ruleset: str = DEV_RULESET_BASE

    @property
    def ruleset_note(self) -> str:
        """How the verdict names its ruleset (the dev ruleset says what it relaxes)."""
        if self.ruleset == DEV_RULESET:
            return DEV_RULESET_NOTE
        return f"ruleset {self.ruleset}"

    def summary(self) -> list[str]:
        """The first line of each message."""
        return [m.splitlines()[0] for m in self.messages if m.strip()]


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


def _messages(output: str) -> list[str]:
    messages: list[str] = []
    for level, text in _records(output):
        if level == "ERROR" and text.strip() == "FAILED":
            continue
        if level in ("WARNING", "ERROR", "CRITICAL"):
            for part in text.split("\n" + _SEPARATOR + "\n"):
                part = part.strip()
                if part:
                    messages.append(part)
    if not messages and "Traceback (most recent call last)" in output:
        # The checker crashed instead of reporting: the traceback is the message.
        messages.append(output[output.index("Traceback (most recent call last)") :].strip())
    return messages


def check_log(
    path: str | os.PathLike[str],
    *,
    ruleset: str = "6.1.0",
    usage: str = "training",
    timeout: float | None = 600.0,
) -> CheckResult:
    """Check ``path`` with the official checker for ``usage``/``ruleset``.

    Raises ``FileNotFoundError`` if the log does not exist and ``subprocess.TimeoutExpired``
    if the checker runs longer than ``timeout`` seconds. ``messages`` can hold warnings even
    when ``passed`` (a key repeated with the same value, say). The checker's own log file is
    written to a temporary directory, so nothing is left in the working directory.

    ``ruleset="dev"`` (training only) runs the same official engine with the rule files in
    :func:`dev_rules_dir`: the 6.1.0 structure rules, with the DLRMv4 dataset pins recomputed
    from the logged values (see the package README).
    """
    log = Path(path)
    if not log.is_file():
        raise FileNotFoundError(f"no MLPerf log at {log}")
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
        proc = subprocess.run(
            command,
            cwd=tmp,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    # The checker names its own log file, which was in the temporary directory just removed.
    output = "".join(
        line
        for line in proc.stdout.splitlines(keepends=True)
        if not line.startswith("** Logging output also at")
    )
    success = any(level == "INFO" and text.strip() == "SUCCESS" for level, text in _records(output))
    passed = proc.returncode == 0 and success
    messages = _messages(output)
    if not passed and not messages:
        messages.append(f"compliance checker exited with status {proc.returncode}")
    return CheckResult(
        passed=passed,
        messages=messages,
        output=output,
        returncode=proc.returncode,
        ruleset=ruleset,
    )
