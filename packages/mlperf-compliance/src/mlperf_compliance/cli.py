"""``mlperf-compliance`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mlperf_compliance.checker import check_log

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mlperf-compliance",
        description="MLPerf compliance tools for DLRMv4 logs.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="run the official mlperf-logging compliance checker on a log",
        description="Run the official mlperf-logging compliance checker on LOG. "
        "Exit status: 0 compliant, 1 not compliant (or the log is missing), 2 usage error.",
    )
    check.add_argument("log", metavar="LOG", help="the MLPerf log file")
    check.add_argument(
        "--ruleset",
        default="6.1.0",
        help="rules version, or 'dev' for synthetic/subsampled runs (default: 6.1.0)",
    )
    check.add_argument("--usage", default="training", help="working group (default: training)")
    check.add_argument(
        "--verbose", "-v", action="store_true", help="print the checker's full output"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "check":
        try:
            result = check_log(args.log, ruleset=args.ruleset, usage=args.usage)
        except (FileNotFoundError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.verbose:
            print(result.output, end="" if result.output.endswith("\n") else "\n")
        else:
            for message in result.messages:
                print(message)
                print()
        verdict = "PASSED" if result.passed else "FAILED"
        print(f"{verdict}: {args.log} ({args.usage} {result.ruleset_note})")
        return 0 if result.passed else 1
    raise AssertionError(f"unhandled command {args.command!r}")  # pragma: no cover


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
