"""The `xasink` command line."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from .errors import XasinkError
from .recovery import DEFAULT_GRACE

EXIT_OK, EXIT_UNRESOLVED, EXIT_ERROR = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="xasink",
        description="Exactly-once JDBC sink for PySpark. Subcommands act on a database that "
        "xasink writes to.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    recover = commands.add_parser(
        "recover",
        help="resolve in-doubt xasink branches (commit decided jobs, roll back dead ones)",
        description="Scan XA RECOVER and resolve xasink's own prepared branches: commit the "
        "winners of jobs with a recorded commit decision, roll back every other attempt, and "
        "roll back jobs without a decision once their heartbeat is older than --grace. "
        "Transactions of other applications are never touched. Exit status: 0 when nothing "
        "is left in doubt, 1 when branches remain (live jobs, --dry-run, lost or failed "
        "branches), 2 on an error.",
    )
    recover.add_argument("--url", required=True, help="JDBC URL, e.g. jdbc:postgresql://h/db")
    recover.add_argument("--user", help="database user")
    recover.add_argument(
        "--password-env",
        metavar="VAR",
        help="name of the environment variable that holds the password (never pass it inline)",
    )
    recover.add_argument("--table", help="only jobs that wrote this table ('schema.table')")
    recover.add_argument(
        "--grace",
        type=float,
        default=DEFAULT_GRACE,
        metavar="SECONDS",
        help=f"treat an undecided job as dead once its heartbeat is this old (default "
        f"{DEFAULT_GRACE:.0f}); 0 resolves now",
    )
    recover.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    recover.add_argument("--json", action="store_true", help="print a JSON report for scripts")
    recover.add_argument("--jars", nargs="+", metavar="JAR", help="JDBC driver jar(s)")
    recover.add_argument("--journal-schema", help="schema of xasink's bookkeeping tables")
    recover.add_argument("--xa-datasource", help="XADataSource class for other drivers")
    recover.add_argument("--dialect", choices=("postgres", "mysql", "generic"))
    recover.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return parser


def _recover(args: argparse.Namespace) -> int:
    from .api import recover

    password = None
    if args.password_env:
        if args.password_env not in os.environ:
            print(f"xasink: environment variable {args.password_env} is not set", file=sys.stderr)
            return EXIT_ERROR
        password = os.environ[args.password_env]
    report = recover(
        args.url,
        user=args.user,
        password=password,
        table=args.table,
        grace=args.grace,
        dry_run=args.dry_run,
        jars=args.jars,
        journal_schema=args.journal_schema,
        xa_datasource=args.xa_datasource,
        dialect=args.dialect,
    )
    if args.json:
        print(report.to_json())
    else:
        for action in report.actions:
            print(action.line())
        left = len(report.unresolved)
        summary = f"{len(report.actions)} branch(es) seen, {left} left unresolved"
        print(summary + (" (dry run: nothing changed)" if args.dry_run else ""))
    return EXIT_OK if report.ok else EXIT_UNRESOLVED


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    try:
        if args.command == "recover":
            return _recover(args)
    except XasinkError as exc:
        print(f"xasink: {exc}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
