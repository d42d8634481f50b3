"""The `xasink` command line: recover, jobs, resolve, reset-sink, prune, check. Its
arguments are `parser`'s; each command's handler is here."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ..driver.sinks import sink_batch
from ..errors import XasinkError
from ..masking import Redactor
from ..operations import recover
from ..protocol.admin import abandon, operate, prune
from ..protocol.health import check_health
from ..protocol.listing import list_jobs
from ..protocol.retention import Swept, retention_days, set_retention
from ..rendering import check_json, check_prometheus, check_text, duration
from ..spec import Database, secrets_of
from ..tables.applier import STAGED_APPLY
from .parser import EXIT_ERROR, EXIT_OK, EXIT_UNRESOLVED, parse


def _database(args: argparse.Namespace) -> Database:
    """The database --url and its flags name (the password from --password-env's variable)."""
    return Database(
        args.url,
        user=args.user,
        password=_env(args.password_env) if args.password_env else None,
        jars=args.jars,
        dialect=args.dialect,
        xa_datasource=args.xa_datasource,
        journal_schema=args.journal_schema,
        network_timeout=args.network_timeout,
    )


def _participants(args: argparse.Namespace, own: Database) -> list[Database]:
    envs = args.participant_password_env
    if len(envs) not in (0, 1, len(args.participant)) or (envs and not args.participant):
        raise XasinkError("give --participant-password-env once, or once per --participant")
    found = []
    for i, url in enumerate(args.participant):  # never --url's password: its own, or none
        pw = _env(envs[min(i, len(envs) - 1)]) if envs else None
        user = None if "user=" in url else own.user  # the URL's own login, else --user
        found.append(Database(url, user=user, password=pw, jars=own.jars))
    return found


def _env(name: str) -> str:  # a password, from the variable an option names
    if name not in os.environ:
        raise XasinkError(f"environment variable {name} is not set")
    return os.environ[name]


def _operate(args: argparse.Namespace) -> Any:
    """The journal at --url, for a command that acts on it (staged jobs finish with
    xasink's own apply)."""
    return operate(_database(args), lock_wait_timeout=args.lock_wait, staged=STAGED_APPLY)


def _recover(args: argparse.Namespace) -> int:
    database = _database(args)
    report = recover(
        database,
        table=args.table,
        job=args.job,
        dry_run=args.dry_run,
        grace=args.grace,
        lock_wait_timeout=args.lock_wait,
        presume_abort_tag=args.presume_abort,
        participants=_participants(args, database),
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


def _jobs(args: argparse.Namespace) -> int:
    with _operate(args) as (conn, journal, ops):
        found = list_jobs(
            ops, conn, journal, states=tuple(args.state or ()), table=args.table, limit=args.limit
        )
    if args.json:
        print(json.dumps([j.as_dict() for j in found], indent=2), file=args.out)
    else:
        print(
            f"{'job':32}  {'state':10}  {'mode':9}  {'rows':>10}  {'age':>8}  table / blocker",
            file=args.out,
        )
        for j in found:
            rows = "-" if j.rows is None else str(j.rows)
            age = "-" if j.age_seconds is None else duration(j.age_seconds)
            print(
                f"{j.job_id:32}  {j.state:10}  {j.mode:9}  {rows:>10}  {age:>8}  {j.table}",
                file=args.out,
            )
            stream = f"sink {j.sink_id} batch {j.batch_id}" if j.sink_id else ""
            for note in (stream, j.blocker, j.resolution):
                if note:
                    print(f"{'':32}  -> {note}", file=args.out)
    return EXIT_UNRESOLVED if any(j.blocker for j in found) else EXIT_OK


def _confirmed(args: argparse.Namespace, ask: Callable[[str], str], what: str, word: str) -> bool:
    """--yes, or the operator typed `word` at the prompt (never without a terminal)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise XasinkError(f"{args.command} asks for confirmation: pass --yes in scripts")
    if ask(f"{what}? Type {word!r} to confirm: ").strip() == word:
        return True
    print("xasink: not confirmed; nothing changed", file=args.err)
    return False


def _resolve(args: argparse.Namespace, ask: Callable[[str], str]) -> int:
    if not _confirmed(args, ask, f"Abandon job {args.job_id}", args.job_id):
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

    if not _confirmed(args, ask, f"Forget the last batch of sink {args.sink_id!r}", args.sink_id):
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
            print(_said(args, text, retention_days=args.set_retention, was=before), file=args.out)
            return EXIT_OK
        keep_all = args.older_than is None and before == 0  # a retention of 0 keeps all
        days = before if args.older_than is None else args.older_than
        swept = (
            Swept(0, False)
            if keep_all
            else prune(
                conn, journal, days, dry_run=args.dry_run, force=args.force, redact=ops.spec.redact
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
    print(_said(args, text, dry_run=args.dry_run, **figures), file=args.out)
    return EXIT_OK


def _said(args: argparse.Namespace, text: str, **figures: object) -> str:
    """The command's one line of report: `text`, or its figures as JSON with --json."""
    return json.dumps(figures) if args.json else text


def _check(args: argparse.Namespace) -> int:
    if args.json and args.prometheus:
        args.refuse("argument --prometheus: not allowed with argument --json")
    report = check_health(
        _database(args), max_age=args.max_age, grace=args.grace, lock_wait_timeout=args.lock_wait
    )
    render = check_json if args.json else check_prometheus if args.prometheus else check_text
    print(render(report), file=args.out)
    return EXIT_OK if report.healthy else EXIT_UNRESOLVED


def main(
    argv: Sequence[str] | None = None,
    ask: Callable[[str], str] = input,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run one command; its report goes to `out`, errors to `err` (default: the process's
    stdout and stderr). Returns the exit status."""
    args = parse(argv)
    args.out, args.err = out or sys.stdout, err or sys.stderr
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    handlers = {"recover": _recover, "jobs": _jobs, "prune": _prune, "check": _check}
    try:
        if args.command == "resolve":
            return _resolve(args, ask)
        if args.command == "reset-sink":
            return _reset_sink(args, ask)
        return handlers[args.command](args)
    except XasinkError as exc:
        print(f"xasink: {_secrets(args)(str(exc))}", file=args.err)
    except Exception as exc:  # never a traceback, never a secret: exit 2 means "error"
        text = _secrets(args)(f"{type(exc).__name__}: {exc}")
        print(f"xasink: unexpected error: {text}", file=args.err)
    return EXIT_ERROR


def _secrets(args: argparse.Namespace) -> Redactor:
    """Masks every password the command was given: --password-env's, each
    --participant-password-env's, and any in its URLs."""
    names = [args.password_env, *(getattr(args, "participant_password_env", None) or [])]
    urls = [args.url, *(getattr(args, "participant", None) or [])]
    return Redactor([*(os.environ.get(n) for n in names if n), *secrets_of(urls)])


if __name__ == "__main__":
    sys.exit(main())
