"""The `xasink` command line: recover, jobs, resolve, reset-sink, prune, check."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from .defaults import GRACE, LOCK_WAIT, NETWORK_TIMEOUT
from .dialects import DIALECTS
from .driver.sinks import sink_batch
from .errors import XasinkError
from .masking import Redactor
from .operations import recover
from .protocol.admin import abandon, list_jobs, operate, prune
from .protocol.health import check_health
from .rendering import check_json, check_prometheus, check_text, duration
from .tables.applier import STAGED_APPLY

EXIT_OK, EXIT_UNRESOLVED, EXIT_ERROR = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse, except that a rejected argument is echoed with any URL password masked
    (a JDBC URL typed in the wrong place would otherwise be printed whole)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {Redactor()(message)}\n")


def _connection_options() -> argparse.ArgumentParser:
    """The options every subcommand needs to reach a database and its journal."""
    common = _Parser(add_help=False)
    common.add_argument("--url", required=True, help="JDBC URL, e.g. jdbc:postgresql://h/db")
    common.add_argument("--user", help="database user")
    common.add_argument(
        "--password-env",
        metavar="VAR",
        help="name of the environment variable that holds the password (never pass it inline, "
        "nor as user:password@ in --url: both are visible in the process list)",
    )
    common.add_argument("--jars", nargs="+", metavar="JAR", help="JDBC driver jar(s)")
    common.add_argument("--journal-schema", help="schema of xasink's bookkeeping tables")
    common.add_argument("--xa-datasource", help="XADataSource class for other drivers")
    common.add_argument("--dialect", choices=tuple(DIALECTS))
    common.add_argument(
        "--lock-wait",
        type=float,
        default=LOCK_WAIT,
        metavar="SECONDS",
        help=f"give up waiting for any lock after this long (default {LOCK_WAIT:.0f})",
    )
    common.add_argument(
        "--network-timeout",
        type=float,
        default=NETWORK_TIMEOUT,
        metavar="SECONDS",
        help="give up on a server that does not answer within this long (default "
        f"{NETWORK_TIMEOUT:.0f})",
    )
    common.add_argument("--json", action="store_true", help="print JSON for scripts")
    common.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    return common


def _seconds(text: str) -> float:
    """A number of seconds, 0 or more (argparse says which option refused it)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, not {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="xasink",
        description="Exactly-once JDBC sink for PySpark. Subcommands act on a database that "
        "xasink writes to. Exit status: 0 done and nothing left in doubt, 1 something is "
        "left (live jobs, --dry-run, lost or failed branches), 2 an error.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    common = _connection_options()
    recover = commands.add_parser(
        "recover",
        parents=[common],
        help="resolve in-doubt xasink branches (commit decided jobs, roll back dead ones)",
        description="Scan XA RECOVER and resolve xasink's own prepared branches: commit the "
        "winners of jobs with a recorded commit decision, roll back every other attempt, and "
        "roll back jobs without a decision once their heartbeat is older than --grace. "
        "Transactions of other applications are never touched.",
    )
    recover.add_argument("--table", help="only jobs that wrote this table ('schema.table')")
    recover.add_argument("--job", help="only this job")
    recover.add_argument(
        "--grace",
        type=float,
        default=GRACE,
        metavar="SECONDS",
        help=f"treat an undecided job as dead once its heartbeat is this old (default "
        f"{GRACE:.0f}, or the job's own lease if longer); 0 resolves now, and aborts "
        "jobs that are still writing",
    )
    recover.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    _add_participants(recover)
    recover.add_argument(
        "--presume-abort",
        metavar="TAG",
        help="only when the journal is gone for good: roll back the prepared branches "
        "carrying this journal tag (once older than --grace where the server tells)",
    )
    jobs = commands.add_parser(
        "jobs",
        parents=[common],
        help="list jobs: state, table, rows, age and what blocks them",
    )
    jobs.add_argument("--state", action="append", help="only jobs in this state (repeatable)")
    jobs.add_argument("--table", help="only jobs that wrote this table")
    jobs.add_argument("--limit", type=int, default=50, help="at most this many (default 50)")
    _add_resolve(commands, common)
    reset = commands.add_parser(
        "reset-sink",
        parents=[common],
        help="forget a streaming sink's last batch, after its query's checkpoint was reset",
        description="A sink refuses batches of another streaming query, and batch ids below "
        "its last committed one, so that a reset checkpoint never skips rows silently. After "
        "deleting a query's checkpoint on purpose, this lets the sink start again at the "
        "query's next batch. Refused while a job of the sink is running or deciding.",
    )
    reset.add_argument("sink_id", metavar="SINK")
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    prune = commands.add_parser(
        "prune",
        parents=[common],
        help="delete the journal rows of long-finished jobs",
        description="Delete the journal rows of jobs that ended more than --older-than days "
        "ago. Rows still needed stay whatever the age: a job named by a sink's mark, and a "
        "job that ended within its lease or the default grace.",
    )
    prune.add_argument("--older-than", type=float, required=True, metavar="DAYS")
    prune.add_argument("--dry-run", action="store_true", help="count only")
    _add_check(commands, common)
    return parser


def _add_participants(recover: argparse.ArgumentParser) -> None:
    recover.add_argument(
        "--participant",
        action="append",
        default=[],
        metavar="URL",
        help="another database of this journal's transactions (repeatable): carry each "
        "decision to it, as --user or its URL's user=",
    )
    recover.add_argument(
        "--participant-password-env",
        action="append",
        default=[],
        metavar="VAR",
        help="each --participant's password variable, in order (once: for all)",
    )


def _add_resolve(commands: Any, common: argparse.ArgumentParser) -> None:
    resolve = commands.add_parser(
        "resolve",
        parents=[common],
        help="end a stuck job on purpose (--abandon)",
        description="End a job that cannot finish. A running job, or a decided staged job, "
        "is aborted: the target is unchanged. A decided append job with a lost branch ends "
        "'abandoned': its other rows stay in the table. A one-phase job whose commit's outcome "
        "was unknown has no row: --table settles it, committed or aborted. Who did it, and "
        "why, is recorded.",
    )
    resolve.add_argument("job_id", metavar="JOB")
    resolve.add_argument("--abandon", action="store_true", required=True)
    resolve.add_argument("--reason", default="", help="recorded with the job")
    resolve.add_argument("--table", help="the table of a job with no row (see above)")
    resolve.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _add_check(commands: Any, common: argparse.ArgumentParser) -> None:
    check = commands.add_parser(
        "check",
        parents=[common],
        help="read-only health check for cron and monitoring: exit 1 lists each problem",
        description="Look, change nothing: exit 1, one line per problem, when one of this "
        "journal's branches has been prepared longer than --max-age, a job's owner is silent "
        "past its lease (undecided, or decided but unfinished), or the journal is damaged. "
        "Other applications' transactions are never problems. No journal here is healthy.",
    )
    check.add_argument(
        "--max-age",
        type=_seconds,
        default=GRACE,
        metavar="SECONDS",
        help=f"a prepared branch older than this is a problem (default {GRACE:.0f}); on "
        "MySQL/MariaDB a branch is aged from its job's start, and a live job's are not counted",
    )
    check.add_argument(
        "--grace",
        type=_seconds,
        default=GRACE,
        metavar="SECONDS",
        help=f"as for recover: a job's owner silent this long, and past the job's own lease, "
        f"is a problem (default {GRACE:.0f})",
    )
    check.add_argument(
        "--prometheus",
        action="store_true",
        help="print Prometheus text exposition format (for a node exporter's textfile "
        "collector) instead of lines",
    )
    check.set_defaults(refuse=check.error)


def _connection(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "user": args.user,
        "password": _env(args.password_env) if args.password_env else None,
        "jars": args.jars,
        "journal_schema": args.journal_schema,
        "xa_datasource": args.xa_datasource,
        "dialect": args.dialect,
        "lock_wait_timeout": args.lock_wait,
        "network_timeout": args.network_timeout,
    }


def _participants(args: argparse.Namespace) -> list[dict[str, Any]]:
    envs, own = args.participant_password_env, _connection(args)
    if len(envs) not in (0, 1, len(args.participant)) or (envs and not args.participant):
        raise XasinkError("give --participant-password-env once, or once per --participant")
    found = []
    for i, url in enumerate(args.participant):  # never --url's password: its own, or none
        pw = _env(envs[min(i, len(envs) - 1)]) if envs else None
        user = None if "user=" in url else own["user"]  # the URL's own login, else --user
        found.append({"url": url, "user": user, "jars": own["jars"], "password": pw})
    return found


def _env(name: str) -> str:  # a password, from the variable an option names
    if name not in os.environ:
        raise XasinkError(f"environment variable {name} is not set")
    return os.environ[name]


def _operate(args: argparse.Namespace) -> Any:
    """The journal at --url, for a command that acts on it (staged jobs finish with
    xasink's own apply)."""
    return operate(args.url, staged=STAGED_APPLY, **_connection(args))


def _recover(args: argparse.Namespace) -> int:
    report = recover(
        args.url,
        table=args.table,
        job=args.job,
        grace=args.grace,
        dry_run=args.dry_run,
        presume_abort_tag=args.presume_abort,
        participants=_participants(args),
        **_connection(args),
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
        final, report = abandon(ops, conn, journal, args.job_id, args.reason, args.table)
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
    with _operate(args) as (conn, journal, _):
        count = prune(conn, journal, args.older_than, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "jobs": count}), file=args.out)
    else:
        print(
            f"{verb} the journal rows of {count} job(s) finished over {args.older_than:g} days ago",
            file=args.out,
        )
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    if args.json and args.prometheus:
        args.refuse("argument --prometheus: not allowed with argument --json")
    report = check_health(args.url, max_age=args.max_age, grace=args.grace, **_connection(args))
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
    args = _parser().parse_args(argv)
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
        print(f"xasink: {exc}", file=args.err)
    except Exception as exc:  # never a traceback, never a secret: exit 2 means "error"
        secret = os.environ.get(args.password_env) if args.password_env else None
        text = Redactor([secret])(f"{type(exc).__name__}: {exc}")
        print(f"xasink: unexpected error: {text}", file=args.err)
    return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
