"""Executor side: one partition, one XA branch, prepared and never committed.

Runs inside `DataFrame.mapInArrow`: Arrow batches stream through the loader one at a time, so a
worker's memory does not grow with its partition. The only output is one small message.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import resource
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from .._testing.faults import Fault, trigger
from ..dialects import get_dialect
from ..errors import WriteError
from ..loaders import Loader, open_loader
from ..protocol.heartbeat import Heartbeat
from ..protocol.journal import RUNNING, Journal, SinkBatch
from ..protocol.sessions import open_session
from ..protocol.xa import XaFailure, XaSession
from ..runtime import shutdown
from ..spec import ConnectionSpec, TableRef
from ..target.staging import OP_COLUMN, ApplyPlan, branch_problem
from ..xid import BranchId, Xid

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("xasink")

#: The message each partition sends the driver.
#: A branch's problem when its job is no longer running: the driver then reports that the
#: job was aborted (by a recovery run), instead of Spark retrying the task in vain.
JOB_ENDED = "job is no longer running"

MESSAGE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("attempt", pa.int64()),
        ("xid", pa.string()),
        ("rows", pa.int64()),
        ("peak_rss_kb", pa.int64()),
        ("path", pa.string()),
        ("problem", pa.string()),
    ]
)
MESSAGE_DDL = (
    "partition int, attempt long, xid string, rows long, peak_rss_kb long, path string, "
    "problem string"
)


@dataclass(frozen=True)
class WritePlan:
    """Everything a partition writer needs; pickled into the Spark task."""

    spec: ConnectionSpec
    table: TableRef
    columns: tuple[str, ...]
    journal: Journal
    job_id: str
    batch_size: int
    bulk: bool = True
    faults: tuple[Fault, ...] = ()
    #: The table's type name for each of `columns` (lets a loader pick an exact encoding).
    column_types: tuple[str, ...] = ()
    #: Staged modes: `table` is the job's staging table, checked in each branch before PREPARE.
    apply: ApplyPlan | None = None
    #: A streaming job's sink and batch: its decision moves the sink's mark to the batch.
    sink: SinkBatch | None = None
    #: Seconds between heartbeats sent by each task from its start to its end (0: the
    #: driver beats). A Data Source job has no driver process that lives through the write.
    task_heartbeat: float = 0.0
    #: The job's lease once its tasks beat (replaces the longer one it started with).
    task_lease: float | None = None


@dataclass(frozen=True)
class BranchOutcome:
    rows: int
    path: str
    #: Why the rows cannot be applied (the branch was rolled back), or "".
    problem: str = ""


@dataclass(frozen=True)
class BranchReport:
    """What one partition tells the driver (a message row, or a Data Source commit
    message): its prepared branch's XID ("" for none), rows, and any problem."""

    partition: int
    attempt: int
    xid: str
    rows: int = 0
    peak_rss_kb: int = 0
    path: str = ""
    problem: str = ""


def _report(
    partition: int, attempt: int, xid: str, outcome: BranchOutcome | None = None
) -> BranchReport:
    # Peak RSS of this worker process so far: shows that memory does not grow with rows.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if outcome is None:
        return BranchReport(partition, attempt, xid, peak_rss_kb=peak)
    return BranchReport(partition, attempt, xid, outcome.rows, peak, outcome.path, outcome.problem)


def write_partition(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: write this partition into one prepared branch."""
    report = write_task(plan, batches)
    yield pa.RecordBatch.from_pylist([dataclasses.asdict(report)], schema=MESSAGE_SCHEMA)


def write_task(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> BranchReport:
    """Write this task's rows into one prepared branch (none if it has no rows)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise WriteError("xasink's partition writer must run inside a Spark task.")
    return write_rows(
        plan, batches, context.partitionId(), context.taskAttemptId(), context.attemptNumber()
    )


def write_from_driver(plan: WritePlan, df: DataFrame) -> BranchReport:
    """A small DataFrame, collected as Arrow and written by the driver itself as partition
    0's only attempt: no Python task, no worker connection. The rows arrive as the batches a
    mapInArrow task would get; nothing is written until all of them are here, so a failed
    Spark task is retried by Spark before any branch opens."""
    batches = df._collect_as_arrow()  # toArrow() less its cast
    report = write_rows(plan, iter(batches), 0, 0, 0)
    return dataclasses.replace(report, peak_rss_kb=0)  # no worker ran


def write_rows(
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    partition: int,
    attempt: int,
    attempt_number: int,
) -> BranchReport:
    """Write `batches` as (partition, attempt) into one prepared branch (none if empty).

    A task that beats for its job starts at once, before its first row: the stages before
    it may have taken long, and reading the first row may take long too."""
    if plan.apply is not None and plan.apply.op_skip:
        batches = without_skipped_ops(plan.apply, batches)
    heartbeat = (
        Heartbeat(
            plan.journal,
            plan.spec,
            plan.job_id,
            plan.task_heartbeat,
            lease=plan.task_lease,
            beat_now=True,
        ).start()
        if plan.task_heartbeat
        else None
    )
    try:
        non_empty = (batch for batch in batches if batch.num_rows)
        first = next(non_empty, None)
        if first is None:
            # Nothing to write: no branch at all, so nothing to commit or to leave behind.
            return _report(partition, attempt, "")
        branch = BranchId(plan.journal.tag, plan.job_id, partition, attempt)
        rows = itertools.chain([first], non_empty)
        outcome = _write_branch(plan, branch, rows, attempt_number)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    if outcome.problem:
        return _report(partition, attempt, "", outcome)  # rolled back: nothing to commit
    trigger(plan.faults, "after_prepare", partition, attempt_number)
    return _report(partition, attempt, str(branch.xid), outcome)


def without_skipped_ops(
    apply: ApplyPlan, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Drop the change rows that carry no change of their own (e.g. Delta's
    update_preimage), before they reach the staging table."""
    import pyarrow.compute as pc

    skip = pa.array(apply.op_skip, pa.string())
    for batch in batches:
        ops = batch.column(batch.schema.get_field_index(OP_COLUMN))
        if not pa.types.is_string(ops.type) and not pa.types.is_large_string(ops.type):
            yield batch
            continue
        if apply.op_fold:
            ops = pc.utf8_lower(ops)
        yield batch.filter(pc.invert(pc.fill_null(pc.is_in(ops, value_set=skip), False)))


def _write_branch(
    plan: WritePlan, branch: BranchId, batches: Iterator[pa.RecordBatch], attempt_number: int
) -> BranchOutcome:
    """start → rows → (checks) → marker → end → prepare; on any error end(TMFAIL) and roll
    back. Rows that fail a staged mode's checks are rolled back too, and reported: retrying
    the task could not fix them."""
    redact = plan.spec.redact
    xid = branch.xid
    session, started, keep = _idle_sessions.pop(plan.spec, None), False, False
    loader: Loader | None = None
    try:
        session = _start(plan.spec, session, xid)
        started = True
        rows = 0
        for batch in batches:
            if loader is None:
                loader = open_loader(
                    get_dialect(plan.spec.dialect),
                    session.connection,
                    plan.table,
                    plan.columns,
                    batch.schema,
                    plan.batch_size,
                    plan.bulk,
                    plan.column_types,
                )
            loader.write(batch)
            rows += batch.num_rows
            trigger(plan.faults, "after_rows", branch.partition, attempt_number)
        if loader is not None:
            loader.finish()
        path = loader.path if loader is not None else ""
        problem = plan.apply and branch_problem(
            session.connection, get_dialect(plan.spec.dialect), plan.apply
        )
        if not problem and plan.journal.state(session.connection, plan.job_id) != RUNNING:
            problem = JOB_ENDED  # aborted by a recovery run, or a zombie of a finished job
        if problem:
            _abandon(session, xid)
            return BranchOutcome(0, path, problem)
        plan.journal.write_marker(
            session.connection, plan.job_id, branch.partition, branch.attempt, rows
        )
        session.end(xid)
        session.prepare(xid)
        keep = get_dialect(plan.spec.dialect).reuse_after_prepare
        return BranchOutcome(rows, path)
    except BaseException as exc:
        if loader is not None:
            _quietly(loader.abort, session)
        if started:
            _abandon(session, xid)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        if session is not None and _job_ended(plan, session):
            # e.g. its staging table was dropped by the recovery run that aborted it:
            # report that once, rather than fail the task for Spark to retry in vain.
            return BranchOutcome(0, "", JOB_ENDED)
        raise WriteError(
            f"Writing partition {branch.partition} (task attempt {branch.attempt}) into "
            f"{plan.table} failed and its branch was rolled back: {type(exc).__name__}: "
            f"{redact(exc)}"
        ) from None
    finally:
        if session is not None and keep:
            _idle_sessions[plan.spec] = session  # this worker's next partition reuses it
            shutdown.call_at_exit(_close_idle_sessions)  # a driver's writes keep one too
        elif session is not None:
            session.close()


#: One idle session per connection spec, kept by a reused Python worker between tasks.
_idle_sessions: dict[ConnectionSpec, XaSession] = {}


def _close_idle_sessions() -> None:
    while _idle_sessions:
        _idle_sessions.popitem()[1].close()


def _job_ended(plan: WritePlan, session: XaSession) -> bool:
    try:
        return plan.journal.state(session.connection, plan.job_id) != RUNNING
    except Exception:
        return False  # cannot tell: let the task fail and Spark retry it


def _start(spec: ConnectionSpec, idle: XaSession | None, xid: Xid) -> XaSession:
    """Start the branch on the idle session if it still works, else on a new one."""
    if idle is not None:
        try:
            idle.start(xid)
            return idle
        except XaFailure:
            idle.close()  # nothing was written on it; a fresh connection is safe
    session = open_session(spec)
    try:
        session.start(xid)
    except BaseException:
        session.close()
        raise
    return session


def _abandon(session: XaSession, xid: Xid) -> None:
    """Best effort: the branch must not survive a failed write (the task will retry)."""
    _quietly(lambda: session.end(xid, success=False), session)
    _quietly(lambda: session.rollback(xid), session)


def _quietly(step: Callable[[], object], session: XaSession) -> None:
    try:
        step()
    except Exception as exc:  # the server also rolls back when the connection closes
        log.debug("xasink cleanup step failed: %s", session.redact(exc))
