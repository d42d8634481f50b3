"""`xasink check`: the journal's health as lines, JSON or Prometheus' text format. What
cron and monitoring run every minute: it loads the health check and its rendering, and
nothing of the write path."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..protocol.health import check_health
from ..rendering import check_json, check_prometheus, check_text
from .common import database
from .parser import EXIT_OK, EXIT_UNRESOLVED


def run(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    if args.json and args.prometheus:
        args.refuse("argument --prometheus: not allowed with argument --json")
    report = check_health(
        database(args), max_age=args.max_age, grace=args.grace, lock_wait_timeout=args.lock_wait
    )
    render = check_json if args.json else check_prometheus if args.prometheus else check_text
    print(render(report), file=args.out)
    return EXIT_OK if report.healthy else EXIT_UNRESOLVED


__all__ = ["run"]
