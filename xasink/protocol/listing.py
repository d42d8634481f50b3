"""`xasink jobs`: the newest jobs of a journal, each with what keeps it from being final
and what to do about it. The database picks the newest through an index (of a state's
jobs, of a table's, a transaction's tables included, or of all), so a listing reads what
it shows, however long the history."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from ..defaults import GRACE
from ..errors import ConfigurationError
from ..runtime.jdbc import JdbcConnection, query
from ..spec import TableRef
from ..xid import BranchId
from . import jobtables, links
from .branches import BranchOps, Outcome
from .journal import Journal
from .records import Winner
from .states import FINAL_STATES, JobState
from .waiting import awaits_coordinator


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
    for job_id, state, target, total, age, beat, plan, resolution, lease, sink, batch, _ in rows:
        job_id, state = str(job_id), str(state)
        tables, mode = _tables_and_mode(str(target), plan, listed.get(job_id, []))
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
        f"j.apply_plan, j.resolution, j.lease_seconds, j.sink_id, j.batch_id, j.created_at "
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


def _tables_and_mode(table: str, plan: object, listed: list[str]) -> tuple[list[str], str]:
    """The tables a job changes and its mode, from its row: a transaction's plan names
    each of its tables and their modes (`mode` lists them, comma-separated); once its
    staging tables are gone, `job_tables` still names its tables."""
    if not plan:
        return (listed or [table]), "append"
    try:
        raw = json.loads(str(plan))
        writes = raw["writes"] if str(plan).startswith(jobtables.SEVERAL_WRITES) else [raw]
        tables = jobtables.tables_in_plan(str(plan))
        return (tables if len(writes) > 1 else [table]), ",".join(str(w["mode"]) for w in writes)
    except (ValueError, KeyError, TypeError):
        return (listed or [table]), "?"


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


def _blocker(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    job_id: str,
    state: str,
    beat: float | None,
    lease: float | None,
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
    lost = lost_winners(ops, journal, job_id, winners, mine)
    if lost:
        link = journal.linked(conn, job_id)
        return f"winning branch(es) of partition(s) {lost[:20]} were rolled back outside " + (
            f"xasink: `xasink resolve {job_id} --abandon` ends the job"
            if link is None
            else f"xasink, {links.lost_here(link, _staged(conn, journal, job_id))}"
        )
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
