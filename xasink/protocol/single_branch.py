"""A single-branch job's bookkeeping: no decision of its own, because its one branch's
local transaction commits everything at once (`commit_in_branch`), and, when that commit's
outcome is unknown, the fence that settles it for good (`fence_one_phase`).

A small frame, most micro-batches and a format("xasink") batch whose partitions shipped
their rows commit so (`executor.one_phase.write_one_phase`); the driver settles a lost
reply (`driver.one_phase.settle`), an operator an unknown outcome (`xasink resolve --abandon
--table`).
"""

from __future__ import annotations

from ..errors import JobAbortedError
from ..runtime.jdbc import JdbcConnection, execute, network_timeout_lifted, sql_state
from . import applying, jobtables, sinkmarks
from .applying import Finished, StagedPlan
from .journal import Journal
from .sinkmarks import SinkBatch
from .states import SHIPPED, JobEnded, JobState


def commit_in_branch(
    journal: Journal,
    conn: JdbcConnection,
    job_id: str,
    table: str,
    rows: int,
    sink: SinkBatch | None = None,
    plan: StagedPlan | None = None,
    registered: bool = False,
    modes: str = "",
    applies: bool = True,
) -> Finished | None:
    """A single-branch job's whole bookkeeping, inside its branch's own local
    transaction (the caller commits it, or rolls it back unless finished): the job row,
    born committed (a `registered` one, minted running by format("xasink"), moved to
    committed if still running, as a decision moves it); for a streaming batch the
    sink's conditional mark move, which serialises writers racing for the batch on the
    mark's row lock; for a staged mode the apply from the branch's staging table. A row
    born here keeps `modes`, its writes'. One commit makes all of it durable at once; a
    crash before it leaves nothing new.

    The caller holds `plan`'s apply locks (`applying.lock_apply`, taken before any row was
    loaded: applies into one table, one at a time, see `finish`). `applies` False: a
    transaction's appends, loaded straight into their tables, ordered after every staged
    job decided before them on those tables with nothing to apply.

    Returns what it finished, or None: the mark had reached the batch, belongs to
    another query or was reset. Raises JobOrderError while an older decided staged job
    on the table is unfinished, and the target's own refusal of staged rows."""
    try:
        if not registered:
            values = {"lease_seconds": 0, **sinkmarks.job_columns(sink)}
            values |= journal.mode_column(modes)
            stamped = ("decided_at", "finished_at")
            journal.insert_job(conn, job_id, table, JobState.COMMITTED, values, stamped)
        elif not journal.end(conn, job_id, JobState.RUNNING, JobState.COMMITTED, decided=True):
            raise JobEnded(job_id)
    except Exception as exc:  # a duplicate key: the job's row is an operator's fence
        if (sql_state(exc) or "").startswith("23"):
            raise JobAbortedError(
                f"Job {job_id} was settled as aborted (`xasink resolve {job_id} --abandon "
                "--table`) before it could commit: nothing of it was written. Run the "
                "write again."
            ) from None
        raise
    if plan is not None:  # before the mark: a decision takes its job row, then the mark
        jobtables.record(journal, conn, job_id, map(str, plan.targets))
        applying.lock_apply_order(journal, conn, job_id, plan, journal.staged)
    if sink is not None:
        try:
            sinkmarks.advance(journal, conn, job_id, sink)
        except sinkmarks.BatchTaken:
            return None
    execute(
        conn,
        f"INSERT INTO {journal.winners} (job_id, partition_id, attempt, row_count) "
        "VALUES (?, 0, ?, ?)",  # a registered job's: no task's attempt (they have losers)
        (job_id, SHIPPED if registered else 0, rows),
    )
    if plan is None or not applies:
        return Finished()
    staged = applying.need(journal.staged)
    staged.check(conn, journal.dialect, plan)
    with network_timeout_lifted(conn):  # may run long on a live server
        return Finished(staged.apply(conn, journal.dialect, plan)[1])


def fence_one_phase(
    journal: Journal,
    conn: JdbcConnection,
    job_id: str,
    table: str,
    resolved_by: str | None = None,
    resolution: str | None = None,
) -> str | None:
    """After a single-branch job's commit failed ambiguously: settle it for good.

    Inserting the job's row as aborted waits on the key lock of a commit still in
    flight; a duplicate key means the commit landed (the state read then says so),
    success means it never will. Returns ABORTED when this call settled it so. An
    operator's fence (`xasink resolve --table`) records who did it in the same row."""
    try:
        by = {"resolved_by": resolved_by, "resolution": resolution}
        journal.insert_job(conn, job_id, table, JobState.ABORTED, by, ("finished_at",))
    except Exception:
        state = journal.state(conn, job_id)
        if state is None:
            raise
        return state
    return JobState.ABORTED


__all__ = ["commit_in_branch", "fence_one_phase"]
