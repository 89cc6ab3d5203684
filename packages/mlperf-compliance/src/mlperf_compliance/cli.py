"""``mlperf-compliance`` command line: ``check`` one log, ``score`` a directory of result logs."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from mlperf_compliance.checker import CheckResult, check_log
from mlperf_compliance.score import score_results

__all__ = ["main"]

FORMATS = ("text", "json")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlperf-compliance",
        description="MLPerf compliance tools for DLRMv4 logs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="run the official mlperf-logging compliance checker on a log",
        description="Run the official mlperf-logging compliance checker on LOG and print a "
        "verdict per rule. Exit status: 0 compliant, 1 not compliant (or the log is missing "
        "or unreadable), 2 usage error.",
    )
    check.add_argument("log", metavar="LOG", help="the MLPerf log file")
    check.add_argument(
        "--ruleset",
        default="6.1.0",
        help="rules version, or 'dev' for synthetic/subsampled runs (default: 6.1.0)",
    )
    check.add_argument("--usage", default="training", help="working group (default: training)")
    check.add_argument(
        "--division",
        choices=("closed", "open"),
        default=None,
        help="fail unless the log is for this division (default: whichever it declares)",
    )
    check.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="text: failing rules and the verdict; json: every rule (default: text)",
    )
    check.add_argument(
        "--verbose", "-v", action="store_true", help="also print the checker's full output"
    )

    score = commands.add_parser(
        "score",
        help="time-to-train scores, olympic score and RCP check of a directory of result logs",
        description="Score the result logs in DIR (result_*.txt or result_*.log, else *.log): "
        "time to train per run, the olympic score the result summarizer computes, and the RCP "
        "check of mlperf_logging.rcp_checker. Exit status: 0 a valid result set, 1 not valid "
        "(too few runs, too many failed, RCP failed) or no logs, 2 usage error.",
    )
    score.add_argument("directory", metavar="DIR", help="the directory of result logs")
    score.add_argument(
        "--ruleset",
        default="6.1.0",
        help="rules version for the compliance and RCP checks, or 'dev' (default: 6.1.0)",
    )
    score.add_argument("--benchmark", default="dlrmv4", help="benchmark (default: dlrmv4)")
    score.add_argument("--usage", default="training", help="working group (default: training)")
    score.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="do not run the compliance checker on each log (faster; the summarizer does)",
    )
    score.add_argument(
        "--format", choices=FORMATS, default="text", help="text table or json (default: text)"
    )
    return parser


def _print_check(result: CheckResult, log: str, verbose: bool) -> None:
    if verbose and result.output:
        print(result.output, end="" if result.output.endswith("\n") else "\n")
    for verdict in result.rules:
        if verdict.severity is None:
            continue
        where = f"{log}:{verdict.line}" if verdict.line is not None else log
        tag = "warning" if verdict.passed else "FAIL"
        print(f"{where}: {tag}: {verdict.rule}: {verdict.message}")
    failed = len({r.rule for r in result.failed_rules})
    checked = len({r.rule for r in result.rules})
    division = f"{result.division} division" if result.division else "no division"
    counts = f"{failed} of {checked} rules failed"
    if result.returncode is None:
        counts += "; the checker was not run, the log has lines its parser cannot read"
    verdict_word = "PASSED" if result.passed else "FAILED"
    print(f"{verdict_word}: {log} ({result.usage} {result.ruleset_note}, {division}; {counts})")


def _error(message: str, fmt: str, **fields: object) -> int:
    if fmt == "json":
        print(json.dumps({**fields, "passed": False, "error": message}, indent=2))
    print(f"error: {message}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        try:
            result = check_log(
                args.log, ruleset=args.ruleset, usage=args.usage, division=args.division
            )
        except (FileNotFoundError, ValueError, OSError) as exc:
            return _error(str(exc), args.format, path=args.log, rules=[])
        if args.format == "json":
            print(json.dumps(result.to_dict(), indent=2))
        else:
            _print_check(result, args.log, args.verbose)
        return 0 if result.passed else 1
    if args.command == "score":
        try:
            report = score_results(
                args.directory,
                benchmark=args.benchmark,
                ruleset=args.ruleset,
                usage=args.usage,
                check=args.check,
            )
        except (FileNotFoundError, ValueError, OSError) as exc:
            return _error(str(exc), args.format, directory=args.directory, valid=False)
        if args.format == "json":
            print(json.dumps(report.to_dict(), indent=2))
        else:
            print(report.format_table())
        return 0 if report.valid else 1
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
