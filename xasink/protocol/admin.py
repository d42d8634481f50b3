"""Operating the journal: recover it, list jobs and what blocks them, end a stuck job on
purpose, and delete finished jobs' rows. These are the ways out the protocol leaves to a
person (`xasink recover`, `jobs`, `resolve --abandon`, `reset-sink`, `prune`)."""

from __future__ import annotations

import contextlib
import getpass
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

from ..defaults import GRACE, LOCK_WAIT
from ..errors import ConfigurationError, JournalError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection
from ..spec import ConnectionSpec, Database, secrets_of
from ..xid import Xid, valid_job_id
from . import links
from .actions import BranchAction, RecoveryAction, RecoveryReport
from .applying import StagedApply
from .branches import BranchOps
from .connecting import journal_session, open_journal
from .journal import Journal
from .listing import lost_winners, table_named
from .orphans import no_journal, presume_abort
from .participants import finish as finish_participants
from .participants import given
from .recovery import describe, resolve_in_doubt
from .retention import MINIMUM_DAYS, Swept, retention_days, sweep
from .single_branch import fence_one_phase
from .states import FINAL_STATES, JobState


def abandon(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    reason: str,
    table: str | None = None,
    linked: bool = False,
) -> tuple[JobState, RecoveryReport]:
    """End a job that cannot finish, on an operator's word, and record who did what.

    A running job is aborted. A decided staged job is aborted: its apply never ran, so the
    target is unchanged. A decided append job ends `abandoned`: the decision stands for the
    winners that are still prepared (they are committed), the lost ones stay lost. Then the
    job's branches are resolved at once. A job with no row, given its `table`, is a
    single-branch job whose one-phase commit's outcome was unknown (`settle_one_phase`).
    A job of a transaction over several databases is ended here only when it is decided,
    a winner of it here was lost behind xasink's back, and `linked` says the operator knows
    the databases will disagree. It ends `abandoned` (staged or not): the decision stands
    for the other databases, and recovery from its coordinator closes the transaction
    (`participants._finish_one`). Returns the final state and that recovery's report.
    """
    if not valid_job_id(job_id):
        raise ConfigurationError(f"{job_id!r} is not an xasink job id (32 hex digits).")
    if table is not None:
        return settle_one_phase(ops, conn, journal, job_id, reason, table)
    record = journal.job(conn, job_id)
    if record is None:
        raise ConfigurationError(
            f"No job {job_id} in this journal (`xasink jobs` lists them). A single-branch "
            "job whose commit's outcome was unknown has no row until it is settled: "
            f"`xasink resolve {job_id} --abandon --table <its table>` settles it."
        )
    if record.state in FINAL_STATES:
        raise ConfigurationError(f"Job {job_id} is already {record.state}; nothing to abandon.")
    link = links.linked(journal, conn, job_id)
    if link is not None and not (linked and record.state == JobState.COMMITTING):
        raise ConfigurationError(
            f"Job {job_id} is one transaction over several databases (with {link.where}): "
            "ending it in one of them would commit it in some and not in others. Finish it "
            "from its coordinator: `xasink recover --participant URL`, with the coordinator's "
            "--url (`xasink jobs` names it). Only a decided job whose branch was lost behind "
            "xasink's back (recover reports LOST) may be ended here alone, with --linked."
        )
    if link is not None:
        mine = [b for b, _ in ops.prepared() if b.job_id == job_id]
        if not lost_winners(ops, journal, job_id, journal.winners_of(conn, job_id), mine):
            raise ConfigurationError(
                f"Job {job_id} is one transaction over several databases (with {link.where})"
                " and no winning branch of it was lost here: `xasink recover --participant "
                "URL` from its coordinator finishes it (a refused apply, once the rows or "
                "the constraint are mended). --linked ends only a job whose branch was "
                "rolled back behind xasink's back (recover reports LOST)."
            )
    running = record.state == JobState.RUNNING
    # A linked job's decision stands for its other databases, which may have committed
    # their part already: aborting it here would put a stream's batch back for a replay
    # that writes their part twice. It ends `abandoned`, a staged one without its apply.
    aborts = link is None and (running or record.staged)
    final = JobState.ABORTED if aborts else JobState.ABANDONED
    who, what = _operator(ops), _resolution(record.state, final, reason)
    if link is not None:
        what = f"{links.LINKED_END} (with {link.where}); {what}"[:2000]
    if not journal.end_by_operator(conn, job_id, record.state, final, who, what):
        raise ConfigurationError(
            f"Job {job_id} changed state while it was being abandoned; look again with "
            "`xasink jobs`."
        )
    report = resolve_in_doubt(ops, conn, journal, job=job_id, grace=0)
    if link is not None:
        ended = links.ended_here(link, record.staged)
        report.actions.insert(0, BranchAction(job_id, -1, -1, RecoveryAction.ENDED, ended))
    return final, report


def settle_one_phase(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, job_id: str, reason: str, table: str
) -> tuple[JobState, RecoveryReport]:
    """A single-branch job whose one-phase COMMIT had an unknown outcome (its driver raised
    DecisionUnknownError): its row exists only if that COMMIT landed. The fence
    (`single_branch.fence_one_phase`) inserts the row as aborted, waiting on a COMMIT still in
    flight: a duplicate means it landed (COMMITTED, nothing changed), else the job is
    aborted for good and nothing of it is in `table`. It prepared nothing, so there is no
    branch to resolve. A job that has a row already is reported as it stands if it ended
    committed or aborted, and refused otherwise (the fence's duplicate key changes nothing)."""
    what = _resolution("unknown (one-phase commit)", JobState.ABORTED, reason)
    table = table_named(conn, journal, table)
    try:
        state = fence_one_phase(journal, conn, job_id, table, _operator(ops), what)
    except Exception as exc:
        raise ConfigurationError(
            f"Job {job_id} could not be settled ({ops.spec.redact(exc)}): a transaction of "
            "it may still be open on the server. Run the command again later."
        ) from None
    if state not in (JobState.COMMITTED, JobState.ABORTED):
        raise ConfigurationError(
            f"Job {job_id} is {state}: --table settles only a one-phase job whose commit's "
            "outcome was unknown. Leave it out to abandon this job (`xasink jobs` shows it)."
        )
    return JobState(state), RecoveryReport(dry_run=False, journal=describe(journal))


def _operator(ops: BranchOps) -> str:
    """Who ended a job by hand: the operator's login, host and database user."""
    user = ops.spec.user or "(default user)"
    return f"{getpass.getuser()}@{socket.gethostname()} as {user}"[:900]


def _resolution(before: str, final: JobState, reason: str) -> str:
    return (
        f"{before} -> {final} by `xasink resolve --abandon`" + (f": {reason}" if reason else "")
    )[:2000]


def prune(
    conn: JdbcConnection,
    journal: Journal,
    older_than_days: float,
    *,
    dry_run: bool,
    force: bool = False,
    redact: Redactor | None = None,
    recovered: Callable[[], list[Xid]] | None = None,
) -> Swept:
    """Delete the journal rows of jobs that ended more than `older_than_days` ago, and the
    tombstones of keys deleted longer ago but never one younger than the journal's
    retention (none where it keeps everything), as the retention does by itself, all at
    once (`retention.sweep`). Rows that are still evidence stay, whatever the age asked
    for. Below the retention's floor of a day, only with `force`: a one-phase job whose
    commit's outcome was unknown is told committed by its row alone (`set_retention` says
    why). A table of tombstones it could not sweep is skipped (`Swept.skipped`); `redact`
    masks the log's word of it."""
    if 0 <= older_than_days < MINIMUM_DAYS and not force:
        raise ConfigurationError(
            f"--older-than {older_than_days:g} is below {MINIMUM_DAYS:g} day, the floor of a "
            "journal's retention, for one reason: when a write raised DecisionUnknownError, "
            "its job's row is what `xasink resolve JOB --abandon --table T` tells a "
            "committed job by; once the row is deleted, that command reports the job aborted, "
            "and running the write again writes its rows twice. Nothing was deleted. Give "
            f"--older-than {MINIMUM_DAYS:g} or more, or add --force once every such job is "
            "settled."
        )
    return sweep(
        journal,
        conn,
        older_than_days,
        dry_run=dry_run,
        staged=journal.staged,
        redact=redact or Redactor(),
        retention=retention_days(journal, conn),
        recovered=recovered,
    )


# -- the commands' sessions ----------------------------------------------------------
@contextlib.contextmanager
def operate(
    database: Database | str,
    *,
    lock_wait_timeout: float = LOCK_WAIT,
    staged: StagedApply[Any] | None = None,
) -> Iterator[tuple[Any, Journal, BranchOps]]:
    """(connection, journal, branch ops) for operating an existing journal; `staged` is
    what finishes staged jobs."""
    with journal_session(database, lock_wait_timeout, staged) as (spec, conn, journal):
        if not journal.exists(conn):
            raise JournalError(
                f"No xasink journal in {describe(journal)} at {spec.masked_url}: check --url "
                "and --journal-schema."
            )
        journal = journal.ensure(conn, spec)
        with BranchOps(spec, journal) as ops:
            yield conn, journal, ops


def recover(
    spec: ConnectionSpec,
    staged: StagedApply[Any],
    *,
    table: str | None = None,
    job: str | None = None,
    grace: float = GRACE,
    dry_run: bool = False,
    journal_schema: str | None = None,
    lock_wait_timeout: float = LOCK_WAIT,
    presume_abort_tag: str | None = None,
    participants: Sequence[ConnectionSpec] = (),
    run_statements: bool = False,
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in the database `spec` reaches (see `recovery`);
    `staged` applies and drops staged jobs' staging tables; a staged job whose stored
    plan runs the write's own statements is finished only with `run_statements`. The
    public entry point is `xasink.recover`. Then carry the decisions of its transactions
    over several databases to their `participants` (`participants.finish`): one not given
    is reported as left.

    Without a journal nothing is touched, unless `presume_abort_tag` names the tag whose
    prepared branches are to be rolled back (once older than `grace`, where the server
    tells a branch's age)."""
    session, journal = open_journal(spec, journal_schema, lock_wait_timeout, staged=staged)
    with session:
        conn = session.connection
        report = _recover(
            spec, conn, journal, table, job, grace, dry_run, presume_abort_tag, run_statements
        )
        if presume_abort_tag is None and journal.exists(conn):
            redact = Redactor(secrets_of(spec, participants))
            with given(participants, staged, lock_wait_timeout) as opener:
                finish_participants(
                    journal,
                    conn,
                    report,
                    opener,
                    job=job,
                    grace=grace,
                    dry_run=dry_run,
                    redact=redact,
                )
        return report


def _recover(
    spec: ConnectionSpec,
    conn: JdbcConnection,
    journal: Journal,
    table: str | None,
    job: str | None,
    grace: float,
    dry_run: bool,
    presume_abort_tag: str | None,
    run_statements: bool,
) -> RecoveryReport:
    exists = journal.exists(conn)  # raises unless the journal is truly missing
    if presume_abort_tag is not None:
        if exists:
            raise ConfigurationError(
                "The journal exists, so recovery decides from it: drop --presume-abort."
            )
        orphan = replace(journal, tag=presume_abort_tag)
        with BranchOps(spec, orphan) as ops:
            return presume_abort(
                ops, presume_abort_tag, grace=grace, dry_run=dry_run, conn=conn, journal=orphan
            )
    if not exists:
        with BranchOps(spec, journal) as ops:
            return no_journal(ops, journal, dry_run)
    if dry_run:
        journal.check_complete(conn)
    else:
        journal = journal.ensure(conn, spec)  # checks it whole
    if table is not None:
        table = table_named(conn, journal, table)
    with BranchOps(spec, journal) as ops:
        return resolve_in_doubt(
            ops,
            conn,
            journal,
            table=table,
            job=job,
            grace=grace,
            dry_run=dry_run,
            run_statements=run_statements,
        )


__all__ = ["abandon", "operate", "prune", "recover"]
