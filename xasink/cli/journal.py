"""The commands that act on a journal as it is: `xasink jobs`, `resolve`, `reset-sink`
and `prune`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ..driver.sinks import sink_batch
from ..protocol.admin import abandon, operate, prune
from ..protocol.listing import list_jobs
from ..protocol.retention import Swept, retention_days, set_retention
from ..rendering import jobs_text
from ..tables.applier import STAGED_APPLY
from .common import confirmed, database, said
from .parser import EXIT_ERROR, EXIT_OK, EXIT_UNRESOLVED


def run(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    if args.command == "resolve":
        return _resolve(args, ask)
    if args.command == "reset-sink":
        return _reset_sink(args, ask)
    return _prune(args) if args.command == "prune" else _jobs(args)


def _operate(args: argparse.Namespace) -> Any:
    """The journal at --url, for a command that acts on it (staged jobs finish with
    xasink's own apply)."""
    return operate(database(args), lock_wait_timeout=args.lock_wait, staged=STAGED_APPLY)


def _jobs(args: argparse.Namespace) -> int:
    with _operate(args) as (conn, journal, ops):
        found = list_jobs(
            ops, conn, journal, states=tuple(args.state or ()), table=args.table, limit=args.limit
        )
    if args.json:
        print(json.dumps([j.as_dict() for j in found], indent=2), file=args.out)
    else:
        print(jobs_text(found), file=args.out)
    return EXIT_UNRESOLVED if any(j.blocker for j in found) else EXIT_OK


def _resolve(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    if not confirmed(args, ask, f"Abandon job {args.job_id}", args.job_id):
        return EXIT_ERROR
    with _operate(args) as (conn, journal, ops):
        final, report = abandon(
            ops, conn, journal, args.job_id, args.reason, args.table, linked=args.linked
        )
    if args.json:
        print(
            json.dumps({"job_id": args.job_id, "state": final, **json.loads(report.to_json())}),
            file=args.out,
        )
    else:
        print(f"job={args.job_id} state={final}", file=args.out)
        for action in report.actions:
            print(action.line(), file=args.out)
    return EXIT_OK if report.ok else EXIT_UNRESOLVED


def _reset_sink(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    sink_batch(args.sink_id, 0)  # the same rules as a writer's sink id

    if not confirmed(args, ask, f"Forget the last batch of sink {args.sink_id!r}", args.sink_id):
        return EXIT_ERROR
    with _operate(args) as (conn, journal, _):
        mark = journal.reset_sink(conn, args.sink_id)
    before = (
        f"was at batch {mark.batch_id} (job {mark.job_id}, query {mark.query_id or 'unknown'})"
        if mark
        else "had no batch"
    )
    if args.json:
        print(json.dumps({"sink_id": args.sink_id, "reset": mark is not None}), file=args.out)
    else:
        print(f"sink {args.sink_id!r} {before}; its next batch starts it again", file=args.out)
    return EXIT_OK


def _prune(args: argparse.Namespace) -> int:
    with _operate(args) as (conn, journal, ops):
        before = retention_days(journal, conn)
        if args.set_retention is not None:
            set_retention(journal, conn, args.set_retention)
            text = (
                f"the journal's retention is now {args.set_retention:g} days (was {before:g}): "
                "writers delete the rows of jobs finished longer ago by themselves"
            )
            print(said(args, text, retention_days=args.set_retention, was=before), file=args.out)
            return EXIT_OK
        keep_all = args.older_than is None and before == 0  # a retention of 0 keeps all
        days = before if args.older_than is None else args.older_than
        swept = (
            Swept(0, False)
            if keep_all
            else prune(
                conn,
                journal,
                days,
                dry_run=args.dry_run,
                force=args.force,
                redact=ops.spec.redact,
                recovered=lambda: [xid for _, xid in ops.prepared()],
            )
        )
    verb = "would delete" if args.dry_run else "deleted"
    text = f"{verb} the journal rows of {swept.jobs} job(s) finished over {days:g} days ago"
    if swept.tombstones:
        text += f", and the order of {swept.tombstones} deleted key(s)"
        if before > days:  # never younger than the retention, whatever --older-than says
            text += f" (deleted over {before:g} days ago: the retention)"
    if swept.skipped:  # the log says why
        text += f"; skipped {', '.join(swept.skipped)}, which this login could not sweep"
    if keep_all:
        text = "the journal's retention is 0 (keep everything): give --older-than DAYS"
    figures = {"jobs": swept.jobs, "tombstones": swept.tombstones, "skipped": list(swept.skipped)}
    print(said(args, text, dry_run=args.dry_run, **figures), file=args.out)
    return EXIT_OK


__all__ = ["run"]
