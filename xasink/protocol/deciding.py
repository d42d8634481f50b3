"""The commit decision: one local transaction that moves a job's row from `running` to
`committing`, stamped (`decided_at`), with its winners, a streaming job's sink mark and a
transaction's participants' winners (`links`). Until it commits nobody else sees it; once it
has, every branch of the job is decided for commit.

The stamp orders decisions: staged applies into one table run in stamp order
(`applying.check_apply_order`), and a transaction's participants receive its decisions in
that order (`participants.settle_earlier`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .._testing.faults import Fault, trigger
from ..runtime.jdbc import JdbcConnection, execute, local_transaction
from . import links, sinkmarks
from .journal import Journal
from .sinkmarks import SinkBatch
from .states import Decision, JobState


def decide_commit(
    journal: Journal,
    conn: JdbcConnection,
    job_id: str,
    winners: Iterable[tuple[int, int, int]],
    sink: SinkBatch | None = None,
    participants: Mapping[str, Sequence[tuple[int, int, int]]] = {},
    faults: tuple[Fault, ...] = (),
) -> Decision:
    """Durably record the commit decision. Returns DECIDED, JOB_ENDED (the job is no
    longer running) or BATCH_TAKEN (the sink's mark already reached this batch, belongs
    to another query, or was reset meanwhile: nothing was recorded).

    `winners` are (partition, attempt, rows); `participants`, the winners of a
    transaction's other databases (into their link rows, `links`). A streaming job's
    decision also moves its sink's mark to its batch, in the same local transaction, if
    the mark is below it and not another query's: one batch is decided once."""
    if sink is not None:
        sinkmarks.register(journal, conn, sink.sink_id)
    try:
        with local_transaction(conn):
            changed = execute(
                conn,
                f"UPDATE {journal.jobs} SET state = ?, decided_at = {journal.dialect.now_sql} "
                "WHERE job_id = ? AND state = ?",
                (JobState.COMMITTING, job_id, JobState.RUNNING),
            )
            if changed != 1:
                return Decision.JOB_ENDED
            trigger(faults, "after_decision_stamp")
            if sink is not None:
                sinkmarks.advance(journal, conn, job_id, sink)
            journal.batch(
                conn,
                f"INSERT INTO {journal.winners} (job_id, partition_id, attempt, row_count) "
                "VALUES (?, ?, ?, ?)",
                job_id,
                winners,
            )
            links.record_winners(journal, conn, job_id, participants)
    except sinkmarks.BatchTaken:  # rolled back: the job is still running, and undecided
        return Decision.BATCH_TAKEN
    return Decision.DECIDED


__all__ = ["decide_commit"]
