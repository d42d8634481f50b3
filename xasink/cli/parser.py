"""The `xasink` command's arguments: every subcommand, its options and their help."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..defaults import DIALECT_NAMES, GRACE, LOCK_WAIT, NETWORK_TIMEOUT, RETENTION_DAYS
from ..defaults import MINIMUM_RETENTION_DAYS as MINIMUM_DAYS
from ..masking import MASK, Redactor

#: Done and nothing left in doubt; something left (live jobs, a dry run, lost or failed
#: branches); an error.
EXIT_OK, EXIT_UNRESOLVED, EXIT_ERROR = 0, 1, 2


#: An environment variable's name: what --password-env takes, and all it ever echoes.
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: An unknown option whose value may be a secret (`--pass`, `--pwd`, `--db-secret`).
_SECRET_OPTION = re.compile(r"(?i)-.*(pass|pwd|secret|token)")


class _Parser(argparse.ArgumentParser):
    """argparse, except that no option is taken by an abbreviation (`--password SECRET`
    would be `--password-env`'s, the password printed as a variable's name), and that a
    rejected argument is echoed with any URL password masked (a JDBC URL typed in the
    wrong place would otherwise be printed whole)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # every subparser is one too
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_ERROR, f"{self.prog}: error: {Redactor()(message)}\n")


class _Inline(argparse.Action):
    """A password given on the command line (`--password SECRET`, the natural guess):
    refused with where it goes instead, and never echoed."""

    def __init__(self, option_strings: Sequence[str], dest: str, instead: str) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)
        self.instead = instead

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        parser.error(
            f"argument {self.option_strings[0]}: pass it through {self.instead} (the name of "
            "an environment variable that holds it): a password on the command line shows in "
            "the process list and the shell's history"
        )


def _variable(text: str) -> str:
    """The name of an environment variable (argparse says which option refused it, never
    the value, which may be the password itself)."""
    if not _VARIABLE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            "takes the name of an environment variable that holds the password (letters, "
            "digits and _, e.g. PGPASSWORD), not the password itself"
        )
    return text


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command's arguments. An unknown one is echoed, except the value of a
    password-like option (`--pass SECRET`, `--pwd=SECRET`)."""
    command = parser()
    args, unknown = command.parse_known_args(argv)
    if unknown:
        command.error(f"unrecognized arguments: {' '.join(_unechoed(unknown))}")
    return args


def _unechoed(unknown: Sequence[str]) -> list[str]:
    """Unknown options as given; a value (which may be a password: a stray one, or one
    after `--pass`) as `***`."""
    shown: list[str] = []
    for i, token in enumerate(unknown):
        if not token.startswith("-") or (
            i and _SECRET_OPTION.match(unknown[i - 1]) and "=" not in unknown[i - 1]
        ):
            shown.append(MASK)
        elif _SECRET_OPTION.match(token) and "=" in token:
            shown.append(f"{token.split('=', 1)[0]}={MASK}")
        else:
            shown.append(token)
    return shown


def _connection_options() -> _Parser:
    """The options every subcommand needs to reach a database and its journal."""
    common = _Parser(add_help=False)
    common.add_argument("--url", required=True, help="JDBC URL, e.g. jdbc:postgresql://h/db")
    common.add_argument("--user", help="database user")
    common.add_argument(
        "--password-env",
        type=_variable,
        metavar="VAR",
        help="name of the environment variable that holds the password (never pass it inline, "
        "nor as user:password@ in --url: both are visible in the process list)",
    )
    common.add_argument("--password", "-p", action=_Inline, instead="--password-env VAR")
    common.add_argument("--jars", nargs="+", metavar="JAR", help="JDBC driver jar(s)")
    common.add_argument("--journal-schema", help="schema of xasink's bookkeeping tables")
    common.add_argument(
        "--session-init",
        action="append",
        metavar="SQL",
        help="a statement run first on every connection, as the writers' "
        "Database(session_init=...) (e.g. SET ROLE writer: PostgreSQL lets only the role "
        "that prepared a branch finish it); repeat for several",
    )
    common.add_argument("--xa-datasource", help="XADataSource class for other drivers")
    common.add_argument("--dialect", choices=DIALECT_NAMES)
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


def parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="xasink",
        description="Exactly-once JDBC sink for PySpark. Subcommands act on a database that "
        "xasink writes to. Exit status: 0 done and nothing left in doubt, 1 something is "
        "left (live jobs, --dry-run, lost or failed branches), 2 an error.",
    )
    # Before the command too: its value would otherwise be taken for the command's name.
    parser.add_argument("--password", "-p", action=_Inline, instead="--password-env VAR")
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
    recover.add_argument(
        "--run-statements",
        action="store_true",
        help="also finish decided jobs whose stored plans run the write's pre_sql/post_sql, "
        "as this login (whoever can write the journal can write them); without it they "
        "are left and reported",
    )
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
    _add_prune(commands, common)
    _add_check(commands, common)
    _add_init(commands, common)
    return parser


def _add_init(commands: Any, common: argparse.ArgumentParser) -> None:
    init = commands.add_parser(
        "init",
        parents=[common],
        help="create the journal as an administrator, and print what a writer login needs",
        description="Create xasink's journal in the schema of --url (or --journal-schema) "
        "with this login, unless it exists (an earlier layout is upgraded in place). A "
        "writer then needs no CREATE for it: --writer LOGIN prints the GRANTs that login "
        "needs on the journal, by the writes that need them. The target tables' own GRANTs "
        "(SELECT, INSERT; UPDATE for upsert, DELETE for overwrite, both for merge) are "
        "yours to give; a write refused for one names it.",
    )
    init.add_argument(
        "--writer",
        metavar="LOGIN",
        help="the writers' login (MySQL/MariaDB: name or name@host; no host: any)",
    )


def _add_prune(commands: Any, common: argparse.ArgumentParser) -> None:
    prune = commands.add_parser(
        "prune",
        parents=[common],
        help="delete the journal rows of long-finished jobs now, or set the journal's retention",
        description="Writers delete the rows of jobs that ended longer ago than the journal's "
        f"retention by themselves (default {RETENTION_DAYS:g} days), a few thousand at a time. "
        "This deletes them all at once, older than --older-than days (default: the "
        "retention). Rows still needed stay whatever the age: a job a sink's mark names, a "
        "transaction's whose other database is not finished, a participant's fence, and a "
        "job that ended within its lease or the default grace. The tombstones of keys "
        "deleted longer ago (the order a merge's delete keeps) go too, but never one younger "
        "than the retention, whatever --older-than says, and none while the retention is 0.",
    )
    when = prune.add_mutually_exclusive_group()
    when.add_argument(
        "--older-than",
        type=float,
        metavar="DAYS",
        help=f"jobs that ended more than DAYS ago (default: the retention); at least "
        f"{MINIMUM_DAYS:g}, as the retention, unless --force: below it, a job whose write "
        "raised DecisionUnknownError could lose the row `xasink resolve --abandon --table` "
        "tells a committed job by",
    )
    prune.add_argument(
        "--force",
        action="store_true",
        help="let --older-than go below a day (down to each job's lease or the grace)",
    )
    prune.add_argument("--dry-run", action="store_true", help="count only")
    when.add_argument(
        "--set-retention",
        type=float,
        metavar="DAYS",
        help="set the journal's retention instead (0 keeps everything), for every writer",
    )


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
        type=_variable,
        metavar="VAR",
        help="each --participant's password variable, in order (once: for all)",
    )
    recover.add_argument(
        "--participant-password", action=_Inline, instead="--participant-password-env VAR"
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
    resolve.add_argument(
        "--linked",
        action="store_true",
        help="a decided job of a transaction over several databases whose branch was lost: "
        "end it in this database alone (the databases then disagree: recovery from its "
        "coordinator closes the transaction and says what each holds)",
    )
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


__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_UNRESOLVED", "parse", "parser"]
