"""`df.write.format("xasink")` and `df.writeStream.format("xasink")`, through Spark's Python
Data Source API, with write_xa's guarantees.

The steps of one job run in different processes here: Spark calls `writer()` (batch) or
`streamWriter()` (each micro-batch) in a Python worker on the driver, `write()` in each task,
and `commit()` / `abort()` in another driver-side worker. So everything a later step needs
travels in the pickled writer (the job's plan) or in the tasks' messages, and each step opens
its own journal connection. A task whose partition is small ships its rows to commit() in its
message (xasink.spark.shipping); one that prepares a branch sends the job's heartbeat from
its first moment (a slow shipping task after one interval), as no driver process lives
through the whole job; until a task beats, the job keeps a long start lease (it holds
nothing yet). A stream's sink is named by Spark's query id, which the tasks read and report,
unless `xasink.sinkId` names it.

Differences from write_xa, each checked: the input's large partitions are the branches (Spark
does not let a data source repartition; `numPartitions` bounds them), so upsert/merge rows of one
key may sit in different branches, which the apply transaction's whole-table key check
handles; array/map/struct columns need write_xa (their conversion runs as Spark expressions).

The job's end is logged (`xasink.jobs`) by the step that ends it: writer() when it fails,
commit(), or abort() when Spark gives up on a job still running (a commit() that failed
before ending the job leaves the line to abort()). Its `JobTrace` travels with the pickled
writer, and for a stream only its stopwatch with the tasks' messages, so its phases add up
across the processes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.types import StructType

from .. import defaults
from ..driver.check_cache import CHECKS
from ..driver.job import Job
from ..driver.opening import open_job, resume_job
from ..driver.report import JobOutcome, JobTrace
from ..driver.request import Begun, JobRequest, Preflight
from ..driver.sinks import decided_already
from ..errors import CommitError, ConfigurationError, WriteError
from ..executor.contract import WritePlan
from ..protocol.branches import BranchOps
from ..protocol.connecting import open_journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.sinkmarks import SinkBatch
from ..protocol.states import JobState
from ..runtime.jdbc import redacting_java_errors
from ..runtime.timing import Stopwatch
from ..tables.applier import STAGED_APPLY
from ..tables.types import needs_spark_conversion
from .options import FormatRequest, parse
from .session import QUERY_ID_PROPERTY, task_property
from .shipping import Shipment, commit_shipped, ship_or_write
from .versions import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

log = logging.getLogger("xasink")


@dataclass
class BranchMessage(WriterCommitMessage):
    """One task's report, sent to commit(), with its rows when it shipped them."""

    shipment: Shipment
    #: Streaming: the write side's plan (commit() runs in a writer Spark made anew).
    plan: WritePlan | None = None
    #: Streaming: the batch id the task read from Spark.
    batch_id: str | None = None
    #: Streaming: the query id the task read from Spark (names the sink by default).
    query_id: str | None = None
    #: Streaming: the job's stopwatch so far (its phases before commit()); the rest of
    #: its trace commit() rebuilds from the plan, so no task ships it.
    clock: Stopwatch | None = None


class XasinkDataSource(DataSource):
    """`format("xasink")`: see the module's docstring and README."""

    @classmethod
    def name(cls) -> str:
        return "xasink"

    def schema(self) -> StructType:
        raise ConfigurationError("format('xasink') writes only; read with format('jdbc').")

    def writer(self, schema: StructType, overwrite: bool) -> XasinkBatchWriter:
        return XasinkBatchWriter(parse(self.options, schema.names, overwrite=overwrite), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> XasinkStreamWriter:
        format_request = parse(self.options, schema.names, overwrite=overwrite, streaming=True)
        return XasinkStreamWriter(format_request, schema)


@dataclass(frozen=True)
class MintedJob:
    """A job registered by writer()/streamWriter(), and how tasks turn their input into
    its rows."""

    plan: WritePlan
    #: Input column positions, in the order of plan.columns.
    positions: tuple[int, ...]
    trace: JobTrace


@redacting_java_errors
def mint(fmt: FormatRequest, schema: StructType) -> MintedJob:
    """Preflight, recover what earlier jobs left on the table, register a job."""
    request = fmt.request
    frame = schema.names
    # The prepared-slot check's branch count when nothing bounds the branches (MySQL and
    # MariaDB, whose servers have no such slots).
    branches = fmt.max_branches or defaults.BRANCH_HINT
    if request.writer.driver_write_bytes:  # and a mixed batch's shipped rows: one more
        branches += 1
    trace = JobTrace.of(request, spark_worker=True)
    # The planner's Python worker serves batch after batch: keep its sessions and checks.
    with trace.ending(), open_job(request, reuse=True, checks=CHECKS, trace=trace) as job:
        pre = job.preflight(schema, branches)
        _check_conversions(request, pre, schema)
        # Until its first task beats, the job waits for Spark (upstream stages, a queue for
        # executors): it holds no lock or slot then, so it may wait long.
        lease = max(fmt.start_timeout, fmt.lease)
        begun = job.begin(pre, frame, lease, fmt.stream_key, fmt.sink_id)
        assert isinstance(begun, Begun)  # no sink here: never skipped
        with job.running():  # tasks beat for it from now on
            plan, _ = job.make_plan(pre, schema, fmt.heartbeat_interval, fmt.lease)
    plan = replace(plan, minted_at=time.time())
    ordered = [*pre.options.written(frame), *pre.options.steering]
    log.info("xasink job %s: writing into %s (format xasink)", plan.job_id, request.target)
    return MintedJob(plan, tuple(frame.index(c) for c in ordered), trace)


def _check_conversions(request: JobRequest, pre: Preflight, schema: StructType) -> None:
    written = pre.options.written(schema.names)
    pairs = zip((schema[c] for c in written), pre.targets, strict=True)
    needing = [
        f.name for f, c in pairs if needs_spark_conversion(f.dataType, request.spec.dialect, c)
    ]
    if needing:
        raise ConfigurationError(
            f"Column(s) {', '.join(needing)} (arrays, maps, structs, or booleans into numbers) "
            "are converted by Spark expressions, which format('xasink') cannot add: write "
            "with xasink.write_xa(df, ...) instead, which has the same guarantees."
        )


def _rows(minted: MintedJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The input batches as the plan's columns (in its order, with its names)."""
    names = list(minted.plan.columns)
    for batch in batches:
        yield pa.RecordBatch.from_arrays([batch.column(i) for i in minted.positions], names=names)


def _check_partition(fmt: FormatRequest) -> None:
    """Refuse a task beyond the job's branch bound before it opens a branch: the server
    check counted that many (on PostgreSQL, prepared-transaction slots)."""
    context = TaskContext.get()
    if fmt.max_branches and context is not None and context.partitionId() >= fmt.max_branches:
        default = (
            " (PostgreSQL's default for format('xasink'): each branch holds one of its "
            "max_prepared_transactions slots)"
            if fmt.request.spec.dialect == "postgres"
            else ""
        )
        raise WriteError(
            f"The DataFrame has more partitions than numPartitions={fmt.max_branches}"
            f"{default}, and a data source cannot merge them: call df.coalesce("
            f"{fmt.max_branches}) before .write (or .writeStream), or raise numPartitions "
            "within the server's free slots. Nothing was written."
        )


@redacting_java_errors
def conclude(
    plan: WritePlan,
    request: JobRequest,
    shipments: Sequence[Shipment],
    trace: JobTrace | None = None,
) -> None:
    """Decide and commit a job from its tasks' messages (`shipping.commit_shipped`)."""
    trace = trace if trace is not None else JobTrace.of(request, spark_worker=True)
    with trace.ending(aborted_next=True), resume_job(plan, request, trace, reuse=True) as job:
        finish(job, shipments)


def finish(job: Job, shipments: Sequence[Shipment]) -> None:
    """Decide and commit the resumed `job` from its tasks' messages."""
    with job.running():
        commit_shipped(job, shipments)
    job.trace.end(JobOutcome.COMMITTED)


def _task(fmt: FormatRequest, minted: MintedJob, iterator: Iterator[pa.RecordBatch]) -> Shipment:
    """A task: its rows shipped, or written into a branch (the bound checked first)."""
    bound = fmt.request.writer.driver_write_bytes
    rows = _rows(minted, iterator)
    return ship_or_write(minted.plan, rows, bound, lambda: _check_partition(fmt))


@redacting_java_errors
def cancel(
    plan: WritePlan,
    request: JobRequest,
    trace: JobTrace | None = None,
    outcome: JobOutcome = JobOutcome.CANCELLED,
    error: BaseException | None = None,
) -> str | None:
    """Spark gave up on the job (or on its commit): abort it unless its decision is
    recorded, in which case it is finished instead (a decided job is never rolled back).
    Returns the job's state at the end; a job this ends is logged as `outcome`."""
    with resume_job(plan, request, trace) as job:
        return job.cancel(outcome, error)


@redacting_java_errors
def end_stream_jobs(fmt: FormatRequest) -> None:
    """Spark aborted a micro-batch without a single task message (every task failed):
    abort the running jobs this stream minted and roll back whatever they prepared, now
    rather than once a recovery run takes them for dead."""
    request = fmt.request
    assert fmt.stream_key is not None
    session, journal = open_journal(
        request.spec,
        request.journal_schema,
        request.commit.lock_wait_timeout,
        staged=STAGED_APPLY,
    )
    with session, BranchOps(request.spec, journal) as ops:
        conn = session.connection
        for job_id in journal.running_of_stream(conn, fmt.stream_key):
            journal.abort(conn, job_id)
            resolve_in_doubt(ops, conn, journal, job=job_id, grace=defaults.GRACE)
            trace = JobTrace.of(request, spark_worker=True)
            trace.job_id, trace.state = job_id, journal.state(conn, job_id)
            aborted = trace.state == JobState.ABORTED
            trace.end(JobOutcome.CANCELLED if aborted else trace.outcome_now())


class XasinkBatchWriter(DataSourceArrowWriter):
    """writer() registers the job; tasks ship their rows or prepare branches; commit()
    writes and commits (`shipping.commit_shipped`)."""

    def __init__(self, fmt: FormatRequest, schema: StructType) -> None:
        self.fmt = fmt
        self.minted = mint(fmt, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BranchMessage:
        return BranchMessage(_task(self.fmt, self.minted, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        conclude(self.minted.plan, self.fmt.request, _shipments(messages), self.minted.trace)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        plan = self.minted.plan
        if cancel(plan, self.fmt.request, self.minted.trace) == JobState.COMMITTED:
            error = CommitError(
                f"Spark reports this write as failed, but job {plan.job_id} had committed "
                f"every row into {plan.table} before: do not run an append again (it would "
                "duplicate the rows)."
            )
            error.job_id = plan.job_id
            raise error


class XasinkStreamWriter(DataSourceStreamArrowWriter):
    """Spark calls streamWriter() for every micro-batch twice: once for the writer it ships
    to the tasks, and once for the one whose commit()/abort() it calls. Only the first is
    ever pickled, so the batch's job is registered when the writer is pickled; the tasks'
    messages carry that job's plan to commit(), which records the batch id (known only to
    the tasks and to commit()) in the decision."""

    def __init__(self, fmt: FormatRequest, schema: StructType) -> None:
        self.fmt, self.schema = fmt, schema
        self.minted: MintedJob | None = None

    def __getstate__(self) -> dict[str, Any]:
        if self.minted is None:
            self.minted = mint(self.fmt, self.schema)
        return self.__dict__

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BranchMessage:
        minted = self.minted
        assert minted is not None
        batch = task_property("streaming.sql.batchId")
        query_id = task_property(QUERY_ID_PROPERTY)
        shipment = _task(self.fmt, minted, iterator)
        return BranchMessage(shipment, minted.plan, batch, query_id, minted.trace.clock)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        plan = self._batch_plan(messages, batchId)
        if plan is None:
            end_stream_jobs(self.fmt)  # no task ran: nothing was written
            return
        request, trace = self.fmt.request, _trace(messages, self.fmt.request)
        # One journal session for the whole commit, kept for the next batch's: this
        # worker commits batch after batch.
        with trace.ending(aborted_next=True), resume_job(plan, request, trace, reuse=True) as job:
            assert plan.sink is not None
            try:
                mark = decided_already(job.ops, job.conn, job.journal, plan.sink, register=True)
            except Exception as exc:  # refused by the sink (SinkConflictError): roll back now
                with contextlib.suppress(Exception):  # else Spark's abort() does
                    job.cancel(JobOutcome.ABORTED, exc)
                raise
            if mark is not None:
                trace.decided_by = mark.job_id or ""
                # Its branches hold a replay's copy of the rows.
                job.cancel(JobOutcome.SKIPPED)
                return
            finish(job, _shipments(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        plan = self._batch_plan(messages, batchId, naming=False)
        if plan is not None:
            cancel(plan, self.fmt.request, _trace(messages, self.fmt.request))
        else:
            end_stream_jobs(self.fmt)

    def _batch_plan(
        self, messages: list[WriterCommitMessage | None], batch_id: int, naming: bool = True
    ) -> WritePlan | None:
        """The write side's plan, from the messages, with this batch in its decision (its
        sink: `xasink.sinkId`, else named after the streaming query's id)."""
        sent = [m for m in messages if isinstance(m, BranchMessage) and m.plan is not None]
        if not sent:
            return None
        plan = sent[0].plan
        assert plan is not None
        if any(m.plan is None or m.plan.job_id != plan.job_id for m in sent):
            raise WriteError(f"Tasks of batch {batch_id} report different jobs; not committing.")
        if any(m.batch_id not in (str(batch_id), None) for m in sent):
            raise WriteError(f"Tasks wrote another batch than {batch_id}; not committing.")
        queries = {m.query_id for m in sent if m.query_id}
        if len(queries) > 1:
            raise WriteError(f"Tasks of batch {batch_id} report different streaming queries.")
        query_id = queries.pop() if queries else None
        sink_id = self.fmt.sink_id or (f"query-{query_id}" if query_id else None)
        if sink_id is None:
            if not naming:
                return plan
            raise WriteError(
                "Spark did not tell the streaming query's id to the tasks, which names the "
                "sink by default: set .option('xasink.sinkId', ...) to a name kept for every "
                "run of this query. Nothing was written."
            )
        return replace(plan, sink=SinkBatch(sink_id, int(batch_id), query_id))


def _trace(messages: Sequence[WriterCommitMessage | None], request: JobRequest) -> JobTrace:
    """The job's trace from the stopwatch its tasks carry (a new one if none did)."""
    sent = [m.clock for m in messages if isinstance(m, BranchMessage) and m.clock is not None]
    return JobTrace.continued(request, sent[0]) if sent else JobTrace.of(request, spark_worker=True)


def _shipments(messages: Sequence[WriterCommitMessage | None]) -> list[Shipment]:
    missing = [i for i, m in enumerate(messages) if not isinstance(m, BranchMessage)]
    if missing:
        raise WriteError(f"Partitions {missing[:20]} sent no report; refusing to commit.")
    return [m.shipment for m in messages if isinstance(m, BranchMessage)]


__all__ = ["BranchMessage", "XasinkDataSource"]
