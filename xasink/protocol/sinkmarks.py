"""A streaming sink's high-water mark (`xasink_sinks`): the highest decided batch.

The decision of a streaming job moves its sink's mark to its batch in the decision's own
transaction, and only if the mark is below the batch and was not written by another query
(`advance`): so one batch of a sink is decided once, whoever races for it, and a sink is
written by one query. A decided job that ends without its rows puts the mark back
(`restore`), so that the batch's replay writes it instead of skipping it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, execute, local_transaction, query
from .schema import JournalLayout
from .states import JobState

#: A sink's high-water mark before its first batch.
NO_BATCH = -1


@dataclass(frozen=True)
class SinkBatch:
    """A streaming job's place in its sink: batch `batch_id` of sink `sink_id`, written by
    the streaming query `query_id` (Spark's id of the query and its checkpoint; None where
    Spark does not tell it)."""

    sink_id: str
    batch_id: int
    query_id: str | None = None


@dataclass(frozen=True)
class SinkMark:
    """A sink's high-water mark: the highest decided batch, the job that decided it and the
    query that wrote it."""

    sink_id: str
    batch_id: int
    job_id: str | None
    query_id: str | None = None


def foreign(mark: SinkMark, sink: SinkBatch) -> bool:
    """The mark was written by another streaming query than the one writing `sink` (both
    known): a reset checkpoint, or two queries sharing one sink id."""
    return None not in (mark.query_id, sink.query_id) and mark.query_id != sink.query_id


class BatchTaken(Exception):
    """Raised inside the decision's transaction to roll it back: the mark had reached the
    batch, belongs to another query, or was reset meanwhile."""


def read(
    journal: JournalLayout, conn: JdbcConnection, sink_id: str, for_update: bool = False
) -> SinkMark | None:
    """The sink's high-water mark (None: the sink has never written)."""
    rows = query(
        conn,
        f"SELECT batch_id, job_id, query_id FROM {journal.sinks} WHERE sink_id = ?"
        + (" FOR UPDATE" if for_update else ""),
        (sink_id,),
    )
    if not rows:
        return None
    batch, job, query_id = rows[0]
    return SinkMark(
        sink_id, int(batch), str(job) if job else None, str(query_id) if query_id else None
    )


def register(journal: JournalLayout, conn: JdbcConnection, sink_id: str) -> None:
    """Give the sink its mark row (at NO_BATCH) unless it has one."""
    if read(journal, conn, sink_id) is not None:
        return
    try:  # two first batches may race: one insert wins
        execute(
            conn,
            f"INSERT INTO {journal.sinks} (sink_id, batch_id, job_id, updated_at) "
            f"VALUES (?, ?, NULL, {journal.dialect.now_sql})",
            (sink_id, NO_BATCH),
        )
    except Exception:
        if read(journal, conn, sink_id) is None:
            raise


def reset(journal: JournalLayout, conn: JdbcConnection, sink_id: str) -> SinkMark | None:
    """Forget a sink's mark (an operator's reset after a checkpoint was deleted on
    purpose), unless a job of the sink is still running or deciding. Returns the mark
    that was forgotten (None: there was none)."""
    with local_transaction(conn):
        mark = read(journal, conn, sink_id, for_update=True)
        if mark is None:
            return None
        rows = query(
            conn,
            f"SELECT job_id FROM {journal.jobs} WHERE sink_id = ? AND state IN (?, ?)",
            (sink_id, JobState.RUNNING, JobState.COMMITTING),
        )
        if rows:
            raise JournalError(
                f"Sink {sink_id!r} has job {rows[0][0]} still running or deciding: stop "
                "its query and run `xasink recover` first; nothing was changed."
            )
        execute(conn, f"DELETE FROM {journal.sinks} WHERE sink_id = ?", (sink_id,))
    return mark


def advance(journal: JournalLayout, conn: JdbcConnection, job_id: str, sink: SinkBatch) -> None:
    """Move the sink's mark to this job's batch, remembering the mark it replaces (inside
    the decision's transaction; raises BatchTaken to roll it back)."""
    mark = read(journal, conn, sink.sink_id, for_update=True)
    if mark is None or mark.batch_id >= sink.batch_id or foreign(mark, sink):
        raise BatchTaken()
    execute(
        conn,
        f"UPDATE {journal.sinks} SET batch_id = ?, job_id = ?, query_id = COALESCE(?, "
        f"query_id), updated_at = {journal.dialect.now_sql} WHERE sink_id = ?",
        (sink.batch_id, job_id, sink.query_id, sink.sink_id),
    )
    execute(
        conn,
        f"UPDATE {journal.jobs} SET sink_id = ?, batch_id = ?, query_id = ?, prev_batch_id = "
        "?, prev_job_id = ?, prev_query_id = ? WHERE job_id = ?",
        (
            sink.sink_id,
            sink.batch_id,
            sink.query_id,
            mark.batch_id,
            mark.job_id,
            mark.query_id,
            job_id,
        ),
    )


def job_columns(sink: SinkBatch | None) -> dict[str, Any]:
    """A streaming job's sink, batch and query columns of its job row (all NULL for a
    batch job)."""
    return {
        "sink_id": sink.sink_id if sink else None,
        "batch_id": sink.batch_id if sink else None,
        "query_id": sink.query_id if sink else None,
    }


def restore(journal: JournalLayout, conn: JdbcConnection, job_id: str) -> None:
    """A decided streaming job ended without its rows (aborted after its decision): put
    its sink's mark back, so that the batch's replay writes it instead of skipping it.
    Runs in the caller's transaction, with the job's state change. A mark that moved on
    since (a later batch decided) is left as it is."""
    rows = query(
        conn,
        f"SELECT sink_id, prev_batch_id, prev_job_id, prev_query_id FROM {journal.jobs} "
        "WHERE job_id = ?",
        (job_id,),
    )
    if not rows or rows[0][0] is None or rows[0][1] is None:
        return
    sink_id, previous, previous_job, previous_query = rows[0]
    execute(
        conn,
        f"UPDATE {journal.sinks} SET batch_id = ?, job_id = ?, query_id = ?, updated_at = "
        f"{journal.dialect.now_sql} WHERE sink_id = ? AND job_id = ?",
        (int(previous), previous_job, previous_query, str(sink_id), job_id),
    )


__all__ = ["NO_BATCH", "SinkBatch", "SinkMark", "foreign", "job_columns"]
