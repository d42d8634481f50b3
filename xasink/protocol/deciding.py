"""The commit decision: one local transaction that moves a job's row from `running` to
`committing`, stamped (`decided_at`), with its winners, a streaming job's sink mark and a
transaction's participants' winners (`links`). Until it commits nobody else sees it; once it
has, every branch of the job is decided for commit.

The stamp orders decisions: staged applies into one table run in stamp order
(`applying.check_apply_order`), and a transaction's participants receive its decisions in
that order (`participants.settle_earlier`). For that the stamp order must be the commit
order: a decision stamped first but committed after a later one is invisible to the later
one's driver, which then copies its own decision to a participant first, and the two
databases apply the two in opposite orders (review 5, D1). So a decision that has
participants takes the journal's order lock (its meta row) before it stamps and holds it
until it commits: among such decisions, one stamped later begins after every earlier one
is committed and visible. The stamp is the database's clock read after the lock (the
statement's own time on MySQL, `clock_timestamp()` on PostgreSQL), so a later stamp is
never smaller unless that clock steps back. A decision without participants meets no other
database, and does not wait.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from .._testing.faults import Fault, trigger
from ..runtime.jdbc import JdbcConnection, execute, local_transaction, query
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
    modes: str = "",
) -> Decision:
    """Durably record the commit decision. Returns DECIDED, JOB_ENDED (the job is no
    longer running) or BATCH_TAKEN (the sink's mark already reached this batch, belongs
    to another query, or was reset meanwhile: nothing was recorded).

    `winners` are (partition, attempt, rows); `participants`, the winners of a
    transaction's other databases (into their link rows, `links`). A streaming job's
    decision also moves its sink's mark to its batch, in the same local transaction, if
    the mark is below it and not another query's: one batch is decided once. `modes`, the
    job's writes' modes once every write is known (a transaction's), join its row."""
    if sink is not None:
        sinkmarks.register(journal, conn, sink.sink_id)
    try:
        with local_transaction(conn):
            if participants:
                _lock_decision_order(journal, conn)
            also, mode = journal.mode_set(modes)
            changed = execute(
                conn,
                f"UPDATE {journal.jobs} SET state = ?, decided_at = {journal.dialect.now_sql}"
                f"{also} WHERE job_id = ? AND state = ?",
                (JobState.COMMITTING, *mode, job_id, JobState.RUNNING),
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


def _lock_decision_order(journal: Journal, conn: JdbcConnection) -> None:
    """The journal's one order lock, held until the decision's transaction ends (waits at
    most the session's lock bound, as every journal lock does)."""
    query(conn, f"SELECT id FROM {journal.meta} WHERE id = 1 FOR UPDATE")


__all__ = ["decide_commit"]
