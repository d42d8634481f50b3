"""`xasink jobs`: the newest jobs of a journal, each with what keeps it from being final
and what to do about it. The database picks the newest through an index (of a state's
jobs, of a table's, a transaction's tables included, or of all), so a listing reads what
it shows, however long the history."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any, NamedTuple

from ..defaults import GRACE
from ..errors import ConfigurationError
from ..runtime.jdbc import JdbcConnection, query
from ..spec import TableRef
from ..xid import BranchId
from . import jobtables, links
from .branches import BranchOps, Outcome
from .journal import Journal
from .records import JobRecord, Winner
from .states import FINAL_STATES, JobState
from .waiting import awaits_coordinator, lost_detail

#: A job's mode when its row does not say: written before the journal kept modes
#: (`JournalTables.moded`), with no plan left to read it from.
UNKNOWN_MODE = "?"


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    state: str
    table: str
    #: The rows of the job that are in its table(s): every decided row once committed,
    #: none once aborted, those of its committed branches while it is decided (a staged
    #: job's arrive with its apply: none) or once abandoned; None while it runs, or when
    #: the journal cannot tell (a transaction over several databases ended by hand).
    rows: int | None
    #: The rows its decision counted (its winners'); None before the decision.
    rows_decided: int | None
    #: Partitions whose decided branch was rolled back behind xasink's back: their rows
    #: are not in the table, and never will be.
    lost_partitions: tuple[int, ...]
    age_seconds: float | None
    heartbeat_seconds: float | None
    #: Its writes' modes, comma-separated (`UNKNOWN_MODE` when the journal cannot tell).
    mode: str
    #: What keeps the job from being final, and what to do about it ("" when final).
    blocker: str
    resolution: str
    #: A streaming job's sink and batch ("" / None otherwise).
    sink_id: str = ""
    batch_id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Row(NamedTuple):
    """A job row as `_newest` reads it."""

    job_id: Any
    state: Any
    target: Any
    decided: Any
    age: Any
    heartbeat_age: Any
    plan: Any
    resolution: Any
    lease: Any
    sink_id: Any
    batch_id: Any
    created_at: Any
    modes: Any


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
    """Jobs, newest first, with rows, age and what blocks the unfinished ones. The
    database finds the newest `limit` by an index (of a state's jobs, of a table's, a
    transaction's tables included, or of all), whatever the history holds."""
    if limit < 1:
        raise ConfigurationError("--limit takes a number of jobs, 1 or more.")
    named = sorted({table, table_named(conn, journal, table)}) if table is not None else []
    rows = _newest(conn, journal, states, named, limit)
    prepared: dict[str, list[BranchId]] = {}
    for branch, _ in ops.prepared():
        prepared.setdefault(branch.job_id, []).append(branch)
    listed = jobtables.listed(journal, conn, [str(r[0]) for r in rows])
    jobs = []
    for row in map(_Row._make, rows):
        job_id, state, plan = str(row.job_id), str(row.state), row.plan
        tables, mode = _tables_and_mode(str(row.target), plan, row.modes, listed.get(job_id, []))
        decided = None if row.decided is None else int(row.decided)
        mine = prepared.get(job_id, [])
        held, lost = _in_table(ops, conn, journal, job_id, state, decided, bool(plan), mine)
        beat = row.heartbeat_age
        jobs.append(
            JobInfo(
                job_id,
                state,
                ", ".join(tables),
                rows=held,
                rows_decided=decided,
                lost_partitions=tuple(lost),
                age_seconds=None if row.age is None else float(row.age),
                heartbeat_seconds=None if beat is None else float(beat),
                mode=mode,
                blocker=_blocker(conn, journal, job_id, state, beat, row.lease, mine, lost, grace),
                resolution=str(row.resolution or ""),
                sink_id=str(row.sink_id or ""),
                batch_id=None if row.batch_id is None else int(row.batch_id),
            )
        )
    return jobs


def _newest(
    conn: JdbcConnection,
    journal: Journal,
    states: tuple[str, ...],
    tables: list[str],
    limit: int,
) -> list[tuple[Any, ...]]:
    """The newest `limit` job rows that match: one indexed read per state, per table
    spelling (its own jobs, and the transactions that list it), each newest first and
    cut at `limit` by the database, then merged here."""
    d = journal.dialect
    select = (
        f"SELECT j.job_id, j.state, j.target_table, "
        f"(SELECT SUM(w.row_count) FROM {journal.winners} w WHERE w.job_id = j.job_id), "
        f"{d.age_sql('j.created_at') or 'NULL'}, {d.age_sql('j.heartbeat_at') or 'NULL'}, "
        f"j.apply_plan, j.resolution, j.lease_seconds, j.sink_id, j.batch_id, j.created_at, "
        f"{'j.write_mode' if journal.moded else 'NULL'} "
    )
    jobs, listing = (
        f"FROM {journal.jobs} j",
        (f"FROM {journal.job_tables} x JOIN {journal.jobs} j ON j.job_id = x.job_id"),
    )
    only = f" AND j.state IN ({', '.join('?' for _ in states)})" if states else ""
    # (from, where, params, newest-first key) of each indexed read
    reads: list[tuple[str, str, tuple[Any, ...], str]] = []
    for name in tables:
        reads.append((jobs, f"j.target_table = ?{only}", (name, *states), "j.created_at"))
        if journal.layered:  # the transactions that list the table
            reads.append((listing, f"x.target_table = ?{only}", (name, *states), "x.created_at"))
    if not tables:
        reads = [(jobs, "j.state = ?", (state,), "j.created_at") for state in states]
    found: dict[str, tuple[Any, ...]] = {}
    for source, where, params, key in reads or [(jobs, "1 = 1", (), "j.created_at")]:
        sql = f"{select} {source} WHERE {where} ORDER BY {key} DESC {d.limit_sql(limit)}"
        for row in query(conn, sql, params):
            found[str(row[0])] = tuple(row)
    newest = sorted(found.values(), key=lambda r: (r[11], str(r[0])), reverse=True)
    return newest[:limit]


def _tables_and_mode(
    table: str, plan: object, written: object, listed: list[str]
) -> tuple[list[str], str]:
    """The tables a job changes and its modes, from its row: the modes it keeps
    (`write_mode`), else those of its plan, which names a transaction's tables too; once
    its staging tables are gone, `job_tables` still names its tables."""
    tables = (listed or [table]) if not plan else jobtables.tables_in_plan(str(plan))
    if plan and len(tables) < 2:
        tables = [table]
    mode = str(written or "") or (jobtables.modes_in_plan(str(plan)) if plan else "")
    return tables or [table], mode or UNKNOWN_MODE


def _in_table(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    state: str,
    decided: int | None,
    staged: bool,
    mine: list[BranchId],
) -> tuple[int | None, list[int]]:
    """(rows of the job in its table, partitions whose decided branch was lost). Only a
    decided job that is not committed, or one abandoned, reads its winners' markers: a
    marker is in the table exactly when its branch committed; a winner with none that is
    not prepared either was committed (`BranchOps.settled`: the job finished since) or lost.
    The prepared branches were listed after the job's row was read, as recovery lists them."""
    if state == JobState.COMMITTED:
        return decided or 0, []
    if state not in (JobState.COMMITTING, JobState.ABANDONED):
        return (0 if state == JobState.ABORTED else None), []
    listed = {(b.partition, b.attempt) for b in mine}
    held, lost = 0, []
    for partition, attempt, rows, marked in query(
        conn,
        f"SELECT w.partition_id, w.attempt, w.row_count, m.job_id FROM {journal.winners} w "
        f"LEFT JOIN {journal.markers} m ON m.job_id = w.job_id AND m.partition_id = "
        "w.partition_id AND m.attempt = w.attempt WHERE w.job_id = ? ORDER BY w.partition_id",
        (job_id,),
    ):
        branch = BranchId(journal.tag, job_id, int(partition), int(attempt))
        if marked is None and (branch.partition, branch.attempt) in listed:
            continue  # still prepared: decided, not committed yet
        if marked is None and ops.settled(branch) is Outcome.LOST:
            lost.append(branch.partition)
        else:
            held += int(rows or 0)
    if state == JobState.COMMITTING and staged:
        return 0, lost  # its rows are in its staging table until the apply
    if state == JobState.ABANDONED and journal.linked(conn, job_id) is not None:
        return None, lost  # staged or not: its plan is gone, its resolution says
    return held, lost


def lost_winners(
    ops: BranchOps,
    journal: Journal,
    job_id: str,
    winners: frozenset[Winner],
    mine: list[BranchId],
) -> list[int]:
    """The partitions of a decided job whose winning branch is neither prepared (`mine`)
    nor proven committed by its marker: rolled back behind xasink's back."""
    listed = {(b.partition, b.attempt) for b in mine}
    return [
        p
        for p, a in sorted(winners - listed)
        if ops.settled(BranchId(journal.tag, job_id, p, a)) is Outcome.LOST
    ]


def lost_of_decided(
    ops: BranchOps, journal: Journal, records: Iterable[JobRecord]
) -> dict[str, list[int]]:
    """The lost winners' partitions of each decided (committing) job of `records`, read
    before this call lists the prepared branches (a winner committed in between has its
    marker by then); the jobs that lost none are left out."""
    deciding = [r for r in records if r.state == JobState.COMMITTING]
    prepared = [b for b, _ in ops.prepared()] if deciding else []
    found = {}
    for record in deciding:
        mine = [b for b in prepared if b.job_id == record.job_id]
        lost = lost_winners(ops, journal, record.job_id, record.winners, mine)
        if lost:
            found[record.job_id] = lost
    return found


def _blocker(
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    state: str,
    beat: float | None,
    lease: float | None,
    mine: list[BranchId],
    lost: list[int],
    grace: float,
) -> str:
    """What keeps the job from being final, and what to do ("" when nothing does); `mine`
    are its prepared branches, `lost` its lost winners' partitions (`_in_table`)."""
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
    if lost:
        return lost_detail(journal, conn, job_id, lost, _staged(conn, journal, job_id))
    winners = journal.winners_of(conn, job_id)
    still_prepared = len(winners & {(b.partition, b.attempt) for b in mine})
    if still_prepared:
        return f"decided, {still_prepared} winner(s) still prepared: run `xasink recover`"
    return "decided, all winners committed, not finished: run `xasink recover`"


def _staged(conn: JdbcConnection, journal: Journal, job_id: str) -> bool:
    record = journal.job(conn, job_id)
    return record is not None and record.staged


def table_named(conn: JdbcConnection, journal: Journal, table: str) -> str:
    """The table an operator's `--table` spelling names, as jobs record it: resolved by
    the server (`Dialect.table_identity`), or the spelling when it finds no such table."""
    try:
        ref = TableRef.parse(table)
    except ConfigurationError:
        return table
    found = journal.dialect.table_identity(conn, ref)
    return str(found) if found is not None else table


__all__ = ["JobInfo", "list_jobs", "table_named"]
