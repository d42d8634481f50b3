"""A streaming sink's replays: a batch whose commit decision is recorded is never written
again, and is finished (phase 2, apply) before it counts as done.

Spark runs a micro-batch again after a crash, with the same batch id. The journal keeps one
row per sink with the highest decided batch id, moved in the decision's own transaction
(`Journal.decide_commit`), so this check can only ever skip a batch whose rows are decided.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from .commit import BranchOps
from .errors import CommitError, ConfigurationError
from .journal import ABANDONED, COMMITTED, COMMITTING, Journal, SinkBatch, SinkMark
from .recovery import DEFAULT_GRACE, resolve_in_doubt

log = logging.getLogger("xasink")

_SINK_ID = re.compile(r"[\x20-\x7e]{1,200}")


def sink_batch(sink_id: str | None, batch_id: int | None) -> SinkBatch | None:
    """Validate write_xa's streaming arguments: both or neither."""
    if sink_id is None and batch_id is None:
        return None
    if sink_id is None or batch_id is None:
        raise ConfigurationError(
            "sink_id and batch_id go together: pass both (a streaming batch) or neither."
        )
    if not isinstance(sink_id, str) or not _SINK_ID.fullmatch(sink_id):
        raise ConfigurationError(
            "sink_id must be 1 to 200 printable ASCII characters, the same for every run of "
            "one query (e.g. its name, or derived from its checkpoint location)."
        )
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise ConfigurationError(f"batch_id must be an integer, 0 or more (got {batch_id!r}).")
    return SinkBatch(sink_id, batch_id)


def decided_already(
    ops: BranchOps, conn: Any, journal: Journal, sink: SinkBatch
) -> SinkMark | None:
    """The sink's mark if this batch needs no writing (it, or a later one, is decided);
    None if it is to be written. A replay of the last decided batch first finishes that
    batch's job, so "skipped" always means the batch's rows are in the table."""
    mark = journal.sink_mark(conn, sink.sink_id)
    if mark is None or mark.batch_id < sink.batch_id:
        return None
    if mark.batch_id > sink.batch_id:
        log.warning(
            "xasink sink %r: batch %d is older than the last committed batch %d: skipped. If "
            "the query's checkpoint was reset (its batch ids start again at 0), give it a new "
            "sink_id.",
            sink.sink_id,
            sink.batch_id,
            mark.batch_id,
        )
        return mark
    assert mark.job_id is not None
    if journal.state(conn, mark.job_id) == COMMITTING:
        log.info(
            "xasink sink %r: batch %d is decided (job %s) but unfinished: finishing it",
            sink.sink_id,
            sink.batch_id,
            mark.job_id,
        )
        resolve_in_doubt(ops, conn, journal, job=mark.job_id, grace=DEFAULT_GRACE)
    state = journal.state(conn, mark.job_id)
    if state not in (COMMITTED, ABANDONED):
        raise CommitError(
            f"Batch {sink.batch_id} of sink {sink.sink_id!r} is decided by job {mark.job_id}, "
            f"which is {state} and could not be finished now. Run `xasink recover` (`xasink "
            "jobs` shows what blocks it), then restart the query: the batch is not written "
            "twice."
        )
    if state == ABANDONED:
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


__all__ = ["decided_already", "sink_batch"]
