"""Operating the journal: recover it, list jobs and what blocks them, end a stuck job on
purpose, and delete finished jobs' rows. These are the ways out the protocol leaves to a
person (`xasink recover`, `jobs`, `resolve --abandon`, `reset-sink`, `prune`)."""

from __future__ import annotations

import contextlib
import getpass
import json
import socket
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..defaults import CONNECT_TIMEOUT, GRACE, LOCK_WAIT
from ..errors import ConfigurationError, JournalError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection, query
from ..spec import ConnectionSpec, TableRef
from ..xid import BranchId, valid_job_id
from . import links
from .actions import RecoveryReport
from .applying import StagedApply
from .branches import BranchOps, Outcome
from .connecting import journal_session, open_journal
from .journal import Journal
from .participants import finish as finish_participants
from .participants import given
from .recovery import awaits_coordinator, describe, no_journal, presume_abort, resolve_in_doubt
from .schema import SEVERAL_WRITES
from .states import FINAL_STATES, JobState


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    table: str
    rows: int | None
    age_seconds: float | None
    heartbeat_seconds: float | None
    mode: str
    #: What keeps the job from being final, and what to do about it ("" when final).
    blocker: str
    resolution: str
    #: A streaming job's sink and batch ("" / None otherwise).
    sink_id: str = ""
    batch_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_jobs(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    *,
    states: tuple[str, ...] = (),
    table: str | None = None,
    limit: int = 200,
    grace: float = GRACE,
) -> list[JobInfo]:
    """Jobs, newest first, with rows, age and what blocks the unfinished ones."""
    d = journal.dialect
    where, params = [], []
    if states:
        where.append(f"j.state IN ({', '.join('?' for _ in states)})")
        params.extend(states)
    named: set[str] = set()
    if table is not None:  # rows written before tables were resolved hold the spelling
        named = {table, table_named(conn, journal, table)}
        where.append("(j.target_table IN (?, ?) OR j.apply_plan LIKE ?)")
        params.extend((*sorted(named), f"{SEVERAL_WRITES}%"))
    rows = query(
        conn,
        f"SELECT j.job_id, j.state, j.target_table, "
        f"(SELECT SUM(w.row_count) FROM {journal.winners} w WHERE w.job_id = j.job_id), "
        f"{d.age_sql('j.created_at') or 'NULL'}, {d.age_sql('j.heartbeat_at') or 'NULL'}, "
        f"j.apply_plan, j.resolution, j.lease_seconds, j.sink_id, j.batch_id "
        f"FROM {journal.jobs} j "
        f"{'WHERE ' + ' AND '.join(where) if where else ''} ORDER BY j.created_at DESC",
        params,
    )[:limit]
    prepared: dict[str, list[BranchId]] = {}
    for branch, _ in ops.prepared():
        prepared.setdefault(branch.job_id, []).append(branch)
    jobs = []
    for job_id, state, target, total, age, beat, plan, resolution, lease, sink, batch in rows:
        job_id, state = str(job_id), str(state)
        tables, mode = _tables_and_mode(str(target), plan)
        if named and not named & set(tables):
            continue  # a transaction of other tables
        jobs.append(
            JobInfo(
                job_id,
                state,
                ", ".join(tables),
                None if total is None else int(total),
                None if age is None else float(age),
                None if beat is None else float(beat),
                mode,
                _blocker(ops, conn, journal, job_id, state, beat, lease, prepared, grace),
                str(resolution or ""),
                str(sink or ""),
                None if batch is None else int(batch),
            )
        )
    return jobs


def _tables_and_mode(table: str, plan: object) -> tuple[list[str], str]:
    """The tables a job changes and its mode, from its row: a transaction's plan names
    each of its tables and their modes (`mode` lists them, comma-separated)."""
    if not plan:
        return [table], "append"
    try:
        raw = json.loads(str(plan))
        writes = raw["writes"] if str(plan).startswith(SEVERAL_WRITES) else [raw]
        tables = [str(TableRef(**w["target"])) for w in writes]
        return (tables if len(writes) > 1 else [table]), ",".join(str(w["mode"]) for w in writes)
    except (ValueError, KeyError, TypeError):
        return [table], "?"


def _blocker(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    state: str,
    beat: object,
    lease: object,
    prepared: dict[str, list[BranchId]],
    grace: float,
) -> str:
    mine = prepared.get(job_id, [])
    if state in FINAL_STATES:
        pending = links.participants(journal, conn, job_id)
        if pending:
            where = " ".join(f"--participant {p.address}" for p in pending)
            return f"not yet {state} in its other database(s): `xasink recover {where}`"
        return f"{len(mine)} straggler branch(es): run `xasink recover`" if mine else ""
    if state == JobState.RUNNING:
        silent = float(beat) if beat is not None else float("inf")
        if silent < max(grace, float(lease or 0)):
            return f"writing (heartbeat {silent:.0f}s ago)"
        coordinator = journal.coordinator(conn, job_id)
        if coordinator is not None:
            return f"silent for {silent:.0f}s; {awaits_coordinator(coordinator)}"
        return f"silent for {silent:.0f}s: `xasink recover` aborts it"
    if state != JobState.COMMITTING:
        return f"unknown state {state!r}"
    winners = journal.winners_of(conn, job_id)
    listed = {(b.partition, b.attempt) for b in mine}
    lost = [
        p
        for p, a in sorted(winners - listed)
        if ops.settled(BranchId(journal.tag, job_id, p, a)) is Outcome.LOST
    ]
    if lost:
        return (
            f"winning branch(es) of partition(s) {lost[:20]} were rolled back outside xasink: "
            f"`xasink resolve {job_id} --abandon` ends the job"
        )
    pending = len(winners & listed)
    if pending:
        return f"decided, {pending} winner(s) still prepared: run `xasink recover`"
    return "decided, all winners committed, not finished: run `xasink recover`"


def abandon(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    reason: str,
    table: str | None = None,
) -> tuple[JobState, RecoveryReport]:
    """End a job that cannot finish, on an operator's word, and record who did what.

    A running job is aborted. A decided staged job is aborted: its apply never ran, so the
    target is unchanged. A decided append job ends `abandoned`: the decision stands for the
    winners that are still prepared (they are committed), the lost ones stay lost. Then the
    job's branches are resolved at once. A job with no row, given its `table`, is a
    single-branch job whose one-phase commit's outcome was unknown (`settle_one_phase`).
    Returns the final state and that recovery's report.
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
    if link is not None:
        raise ConfigurationError(
            f"Job {job_id} is one transaction over several databases (with {link.where}): "
            "ending it in one of them would commit it in some and not in others. Finish it "
            "from its coordinator: `xasink recover --participant URL`, with the coordinator's "
            "--url (`xasink jobs` names it)."
        )
    running = record.state == JobState.RUNNING
    final = JobState.ABORTED if running or record.staged else JobState.ABANDONED
    who, what = _operator(ops), _resolution(record.state, final, reason)
    if not journal.end_by_operator(conn, job_id, record.state, final, who, what):
        raise ConfigurationError(
            f"Job {job_id} changed state while it was being abandoned; look again with "
            "`xasink jobs`."
        )
    report = resolve_in_doubt(ops, conn, journal, job=job_id, grace=0)
    return final, report


def settle_one_phase(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, job_id: str, reason: str, table: str
) -> tuple[JobState, RecoveryReport]:
    """A single-branch job whose one-phase COMMIT had an unknown outcome (its driver raised
    DecisionUnknownError): its row exists only if that COMMIT landed. The fence
    (`Journal.fence_one_phase`) inserts the row as aborted, waiting on a COMMIT still in
    flight: a duplicate means it landed (COMMITTED, nothing changed), else the job is
    aborted for good and nothing of it is in `table`. It prepared nothing, so there is no
    branch to resolve. A job that has a row already is reported as it stands if it ended
    committed or aborted, and refused otherwise (the fence's duplicate key changes nothing)."""
    what = _resolution("unknown (one-phase commit)", JobState.ABORTED, reason)
    table = table_named(conn, journal, table)
    try:
        state = journal.fence_one_phase(conn, job_id, table, _operator(ops), what)
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


def prune(conn: JdbcConnection, journal: Journal, older_than_days: float, *, dry_run: bool) -> int:
    """Delete the journal rows of jobs that ended more than `older_than_days` ago (and
    whose staging table is gone); returns how many jobs.

    Rows that are still evidence stay, whatever the age asked for: a job that some sink's
    mark names (a replay of its batch reads it), a transaction's whose participant is not
    finished yet (its decision is read from here), and a job that ended within its own lease
    or the default grace (a stalled driver of it may still settle its branches by its
    state)."""
    if older_than_days < 0:
        raise ConfigurationError("--older-than takes a number of days, 0 or more.")
    d = journal.dialect
    age = d.age_sql("j.finished_at")
    if age is None:
        raise ConfigurationError(f"The {d.name} dialect cannot compute ages; prune by hand.")
    marks = ", ".join("?" for _ in FINAL_STATES)
    old = (
        f"SELECT j.job_id FROM {journal.jobs} j WHERE j.state IN ({marks}) "
        f"AND j.apply_plan IS NULL AND j.finished_at IS NOT NULL AND {age} > ? "
        f"AND {age} > COALESCE(j.lease_seconds, 0) AND {age} > ? "
        f"AND NOT EXISTS (SELECT 1 FROM {journal.sinks} s WHERE s.job_id = j.job_id)"
    )
    params = (*FINAL_STATES, older_than_days * 86400.0, GRACE)
    pending = links.linked_jobs(journal, conn)  # a participant still to finish reads them
    jobs = [job for row in query(conn, old, params) if (job := str(row[0])) not in pending]
    if dry_run or not jobs:
        return len(jobs)
    journal.forget(conn, jobs)
    links.forget(journal, conn, jobs)
    return len(jobs)


# -- the commands' sessions ----------------------------------------------------------
@contextlib.contextmanager
def operate(
    url: str,
    *,
    journal_schema: str | None = None,
    lock_wait_timeout: float = LOCK_WAIT,
    staged: StagedApply[Any] | None = None,
    **connection: Any,
) -> Iterator[tuple[Any, Journal, BranchOps]]:
    """(connection, journal, branch ops) for operating an existing journal; `connection`
    takes make_spec's keyword arguments, `staged` is what finishes staged jobs."""
    connection = {"connect_timeout": CONNECT_TIMEOUT, "properties": None, **connection}
    with journal_session(url, journal_schema, lock_wait_timeout, staged, **connection) as (
        spec,
        conn,
        journal,
    ):
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
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in the database `spec` reaches (see `recovery`);
    `staged` applies and drops staged jobs' staging tables. The public entry point is
    `xasink.recover`. Then carry the decisions of its transactions over several databases
    to their `participants` (`participants.finish`): one not given is reported as left.

    Without a journal nothing is touched, unless `presume_abort_tag` names the tag whose
    prepared branches are to be rolled back (once older than `grace`, where the server
    tells a branch's age)."""
    session, journal = open_journal(spec, journal_schema, lock_wait_timeout, staged=staged)
    with session:
        conn = session.connection
        report = _recover(spec, conn, journal, table, job, grace, dry_run, presume_abort_tag)
        if presume_abort_tag is None and journal.exists(conn):
            redact = Redactor([spec.password, *(p.password for p in participants)])
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
            ops, conn, journal, table=table, job=job, grace=grace, dry_run=dry_run
        )


def table_named(conn: JdbcConnection, journal: Journal, table: str) -> str:
    """The table an operator's `--table` spelling names, as jobs record it: resolved by
    the server (`Dialect.table_identity`), or the spelling when it finds no such table."""
    try:
        ref = TableRef.parse(table)
    except ConfigurationError:
        return table
    found = journal.dialect.table_identity(conn, ref)
    return str(found) if found is not None else table


__all__ = ["JobInfo", "abandon", "list_jobs", "operate", "prune", "recover"]
