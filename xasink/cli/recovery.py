"""`xasink recover`: its report, one line per action, on stdout."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..operations import recover
from .common import database, participants
from .parser import EXIT_OK, EXIT_UNRESOLVED


def run(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    own = database(args)
    report = recover(
        own,
        table=args.table,
        job=args.job,
        dry_run=args.dry_run,
        grace=args.grace,
        lock_wait_timeout=args.lock_wait,
        presume_abort_tag=args.presume_abort,
        participants=participants(args, own),
        run_statements=args.run_statements,
    )
    if args.json:
        print(report.to_json(), file=args.out)
    else:
        print(report.journal, file=args.out)
        for action in report.actions:
            print(action.line(), file=args.out)
        print(
            report.summary() + (" (dry run: nothing changed)" if args.dry_run else ""),
            file=args.out,
        )
    return EXIT_OK if report.ok else EXIT_UNRESOLVED


__all__ = ["run"]
