"""``mlperf-compliance`` command line: ``check`` one log, ``score`` a directory of result logs.

Exit status: 0 the verdict is PASS (a compliant log, a valid result set), 1 the verdict is FAIL,
2 no verdict: a usage or I/O error (a bad argument, an unknown ruleset, a missing or unreadable
log or directory). An error is one line on stderr; its traceback is printed too only with
``--debug`` or the environment variable ``DLRMV4_DEBUG=1`` (the convention of :mod:`dlrmv4_cli`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import dlrmv4_cli
from dlrmv4_cli import DEBUG_ENV, EXIT_FAILED, EXIT_REFUSED, OneLineParser, debug_requested
from mlperf_compliance.checker import CheckResult, check_log, check_ruleset
from mlperf_compliance.reference import score_reference
from mlperf_compliance.score import score_results

__all__ = ["DEBUG_ENV", "EXIT_ERROR", "EXIT_FAIL", "EXIT_PASS", "main"]

FORMATS = ("text", "json")
EXIT_PASS = 0
EXIT_FAIL = EXIT_FAILED
EXIT_ERROR = EXIT_REFUSED


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="mlperf-compliance",
        description="MLPerf compliance tools for DLRMv4 logs. Exit status: 0 PASS, 1 FAIL, 2 a "
        f"usage or I/O error (one line on stderr; the traceback with --debug or {DEBUG_ENV}=1).",
    )
    dlrmv4_cli.add_debug_option(parser)
    common = argparse.ArgumentParser(add_help=False)
    dlrmv4_cli.add_debug_option(common, subcommand=True)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=OneLineParser
    )
    check = commands.add_parser(
        "check",
        parents=[common],
        help="run the official mlperf-logging compliance checker on a log",
        description="Run the official mlperf-logging compliance checker on LOG and print a "
        "verdict per rule. Exit status: 0 compliant, 1 not compliant, 2 usage or I/O error "
        "(a bad argument or ruleset, a missing or unreadable log).",
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
        parents=[common],
        help="time-to-train scores, olympic score and RCP check of a directory of result logs",
        description="Score the result logs in DIR (result_*.txt or result_*.log, else *.log): "
        "time to train per run, the olympic score the result summarizer computes, and the RCP "
        "check of mlperf_logging.rcp_checker. Exit status: 0 a valid result set, 1 not valid "
        "(too few runs, too many failed, RCP failed), 2 usage or I/O error (a bad argument, "
        "ruleset or benchmark, a missing directory or one without result logs, an unreadable "
        "log).",
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
        "--reference",
        action="store_true",
        help="read DIR as the reference's convergence runs (no run_stop needed, whatever "
        "benchmark they name; *.log in DIR or one folder down): per global batch, the samples "
        "to the target as an RCP record, next to the installed one; exit 0 when each batch "
        "size is its installed RCP record",
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


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"the compliance checker ran longer than {exc.timeout:g} s and was stopped"
    return dlrmv4_cli.describe(exc)


def _error(command: str, exc: BaseException, fmt: str, debug: bool, **fields: object) -> int:
    """Report an error (no verdict): JSON on stdout with ``--format json``, one line on stderr
    (after the traceback when debugging); exit status 2."""
    message = _one_line(exc)
    if fmt == "json":
        print(json.dumps({**fields, "passed": False, "error": message}, indent=2))
    return dlrmv4_cli.report_error(
        f"mlperf-compliance {command}", exc, debug=debug, message=message
    )


def _check(args: argparse.Namespace, debug: bool) -> int:
    try:
        check_ruleset(args.ruleset, args.usage)
        result = check_log(args.log, ruleset=args.ruleset, usage=args.usage, division=args.division)
    except Exception as exc:  # no verdict: one line, status 2
        return _error("check", exc, args.format, debug, path=args.log, rules=[])
    if args.format == "json":
        print(json.dumps(result.to_dict(), indent=2, allow_nan=False))
    else:
        _print_check(result, args.log, args.verbose)
    return EXIT_PASS if result.passed else EXIT_FAIL


def _score(args: argparse.Namespace, debug: bool) -> int:
    try:
        check_ruleset(args.ruleset, args.usage)
        if args.reference:
            return _score_reference(args)
        report = score_results(
            args.directory,
            benchmark=args.benchmark,
            ruleset=args.ruleset,
            usage=args.usage,
            check=args.check,
        )
    except Exception as exc:  # no verdict: one line, status 2
        return _error("score", exc, args.format, debug, directory=args.directory, valid=False)
    if args.format == "json":
        print(json.dumps(report.to_dict(), indent=2, allow_nan=False))
    else:
        print(report.format_table())
    return EXIT_PASS if report.valid else EXIT_FAIL


def _score_reference(args: argparse.Namespace) -> int:
    if not args.check:
        raise ValueError("--no-check applies to result logs; --reference runs no checker")
    reference = score_reference(
        args.directory, benchmark=args.benchmark, ruleset=args.ruleset, usage=args.usage
    )
    if args.format == "json":
        print(json.dumps(reference.to_dict(), indent=2, allow_nan=False))
    else:
        print(reference.format_table())
    return EXIT_PASS if reference.valid else EXIT_FAIL


_COMMANDS: dict[str, Any] = {"check": _check, "score": _score}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status: 0 PASS, 1 FAIL, 2 a usage or I/O error."""
    args = _parser().parse_args(argv)  # an argument error exits with status 2
    debug = debug_requested(getattr(args, "debug", False))
    try:
        with dlrmv4_cli.stop_on_signals():
            status = _COMMANDS[args.command](args, debug)
            sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        return dlrmv4_cli.interrupted(f"mlperf-compliance {args.command}")
    except dlrmv4_cli.Stopped as exc:
        return dlrmv4_cli.stopped(f"mlperf-compliance {args.command}", exc)
    except BrokenPipeError:
        return dlrmv4_cli.reader_gone()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
