"""A streaming sink's batches: each is written once, by one query, in order.

Spark runs a micro-batch again after a crash, with the same batch id, and only ever the
batch after the last one in its commit log. The journal keeps one row per sink: the highest
decided batch id (its mark), the job that decided it and the streaming query that wrote it,
moved in the decision's own transaction (`deciding.decide_commit`). So for a batch B:

- B above the mark is new: it is written;
- B at the mark is a replay (the driver died between the sink's commit and Spark's commit
  log): its job is finished, then B is skipped, so "skipped" always means its rows are in;
- B below the mark cannot be a replay: the checkpoint was reset, or a second writer uses the
  sink. It is an error, never a silent skip (the rows would be lost);
- a mark written by another query (Spark's query id, stored with the mark, changes exactly
  when the checkpoint is reset) is an error whatever the batch id.
"""

from __future__ import annotations

import logging
import re

from .. import defaults
from ..errors import CommitError, ConfigurationError, SinkConflictError
from ..protocol import sinkmarks
from ..protocol.branches import BranchOps
from ..protocol.journal import Journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.sinkmarks import SinkBatch, SinkMark, foreign
from ..protocol.states import JobState
from ..runtime.jdbc import JdbcConnection

log = logging.getLogger("xasink")

#: Printable ASCII, no space at either end: MySQL's binary collations ignore trailing
#: spaces, so ids that differ only there could not be told apart on every database.
_SINK_ID = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,198}[\x21-\x7e])?")


def sink_batch(
    sink_id: str | None, batch_id: int | None, query_id: str | None = None
) -> SinkBatch | None:
    """Validate write_xa's streaming arguments: both or neither."""
    if sink_id is None and batch_id is None:
        return None
    if sink_id is None or batch_id is None:
        raise ConfigurationError(
            "sink_id and batch_id go together: pass both (a streaming batch) or neither."
        )
    if not isinstance(sink_id, str) or not _SINK_ID.fullmatch(sink_id):
        raise ConfigurationError(
            "sink_id must be 1 to 200 printable ASCII characters, not starting or ending with "
            "a space, the same for every run of one query (e.g. its name); ids are compared "
            "byte for byte."
        )
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ConfigurationError(f"batch_id must be an integer, 0 or more (got {batch_id!r}).")
    return SinkBatch(sink_id, batch_id, query_id)


def refusal(mark: SinkMark, sink: SinkBatch, job_id: str | None = None) -> SinkConflictError | None:
    """Why `sink`'s batch may not be written against this mark (None: it may, or it is the
    replay of the mark's batch). `job_id`: the job that was refused at its decision."""
    nothing = f"Job {job_id} committed nothing." if job_id else "Nothing was written."
    reset = (
        f"If the query's checkpoint was reset on purpose, run `xasink reset-sink "
        f"{sink.sink_id!r}` (the sink then starts again at this query's next batch); if "
        "another query uses this sink id, give each query its own."
    )
    if foreign(mark, sink):
        return SinkConflictError(
            f"Sink {sink.sink_id!r} was advanced to batch {mark.batch_id} by streaming query "
            f"{mark.query_id}, and query {sink.query_id} is now writing its batch "
            f"{sink.batch_id}: a reset checkpoint (Spark gives it a new query id) or a second "
            f"query with the same sink id. {nothing} {reset}"
        )
    if mark.batch_id > sink.batch_id:
        return SinkConflictError(
            f"Batch {sink.batch_id} of sink {sink.sink_id!r} is below the sink's last "
            f"committed batch {mark.batch_id} (job {mark.job_id}). Spark only ever replays the "
            "batch after its last committed one, so this is a reset checkpoint or a second "
            f"writer, not a replay; skipping it would lose its rows. {nothing} {reset}"
        )
    return None


def conflict_at_decision(
    journal: Journal, conn: JdbcConnection, sink: SinkBatch, job_id: str
) -> Exception:
    """The decision of `job_id` was refused by its sink's mark: say why."""
    mark = journal.sink_mark(conn, sink.sink_id)
    if mark is not None:
        refused = refusal(mark, sink, job_id)
        if refused is not None:
            return refused
    if mark is None:
        return SinkConflictError(
            f"Sink {sink.sink_id!r} was reset (`xasink reset-sink`) while job {job_id} was "
            f"deciding its batch {sink.batch_id}. This job committed nothing; the query's "
            "next run writes the batch."
        )
    by = f"job {mark.job_id}"
    return SinkConflictError(
        f"Batch {sink.batch_id} of sink {sink.sink_id!r} was committed by {by} while job "
        f"{job_id} was writing it: two queries (or two runs of one query) are writing with "
        f"sink_id {sink.sink_id!r}. This job committed nothing. Stop the other query, or give "
        "each query its own sink_id (its own checkpoint)."
    )


def decided_already(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, sink: SinkBatch, register: bool
) -> SinkMark | None:
    """The sink's mark if this batch is a replay of the last decided one, finished now
    (nothing to write); None if it is to be written. Raises SinkConflictError for a batch
    below the mark or a mark of another query. `register`: give a sink without a mark row
    its row now (a one-phase commit moves the mark only from a row that exists)."""
    mark = journal.sink_mark(conn, sink.sink_id)
    if mark is None and register:
        sinkmarks.register(journal, conn, sink.sink_id)
    return None if mark is None else replayed(ops, conn, journal, sink, mark)


def replayed(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, sink: SinkBatch, mark: SinkMark
) -> SinkMark | None:
    """`decided_already` for the sink's `mark` as just read."""
    refused = refusal(mark, sink)
    if refused is not None:
        raise refused
    if mark.batch_id < sink.batch_id:
        return None
    assert mark.job_id is not None  # a mark at a batch always names its job
    state = journal.state(conn, mark.job_id)
    if state is None:
        # Pruned by hand: a mark's job is final and not aborted (an abort restores the mark).
        log.warning(
            "xasink sink %r: batch %d was committed by job %s, whose journal row is gone: skipped",
            sink.sink_id,
            sink.batch_id,
            mark.job_id,
        )
        return mark
    if state == JobState.COMMITTING:
        log.info(
            "xasink sink %r: batch %d is decided (job %s) but unfinished: finishing it",
            sink.sink_id,
            sink.batch_id,
            mark.job_id,
        )
        resolve_in_doubt(ops, conn, journal, job=mark.job_id, grace=defaults.GRACE)
        state = journal.state(conn, mark.job_id)
    if state not in (JobState.COMMITTED, JobState.ABANDONED):
        raise CommitError(
            f"Batch {sink.batch_id} of sink {sink.sink_id!r} is decided by job {mark.job_id}, "
            f"which is {state} and could not be finished now. Run `xasink recover` (`xasink "
            "jobs` shows what blocks it), then restart the query: the batch is not written "
            "twice."
        )
    if state == JobState.ABANDONED:
        log.warning(
            "xasink sink %r: batch %d was abandoned by an operator (job %s): skipped",
            sink.sink_id,
            sink.batch_id,
            mark.job_id,
        )
    else:
        log.info(
            "xasink sink %r: batch %d was already committed by job %s: skipped",
            sink.sink_id,
            sink.batch_id,
            mark.job_id,
        )
    return mark


__all__ = ["conflict_at_decision", "decided_already", "refusal", "replayed", "sink_batch"]
