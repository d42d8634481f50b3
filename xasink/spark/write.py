"""`write_xa`: a DataFrame into a table, exactly once, through one `Job`."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from .. import defaults
from ..driver.check_cache import CHECKS
from ..driver.decision import phase_one_failed
from ..driver.job import Job
from ..driver.one_phase import commit_one_phase
from ..driver.plan import one_stream
from ..driver.report import JobEnd, JobOutcome, JobTrace, PhaseSeconds
from ..driver.request import JobRequest, PhaseOne, Preflight, Skipped
from ..driver.sinks import sink_batch
from ..errors import ConfigurationError, XasinkError
from ..executor.contract import BranchReport, WritePlan
from ..executor.one_phase import write_one_phase
from ..protocol.actions import BranchAction
from ..protocol.connecting import make_spec
from ..protocol.states import JobState
from ..runtime.jdbc import redacting_java_errors
from ..runtime.shutdown import tracked
from ..runtime.timing import Stopwatch, step
from ..spec import TableRef
from ..tables.modes import ModeOptions
from .frame import branch_count, shape_frame, writes_on_driver
from .session import (
    PYSPARK_MEMORY,
    check_spark_conf,
    conf,
    job_label,
    ship_jars,
    streaming_query_id,
)
from .tasks import MESSAGE_DDL, collect_small_frame, write_from_driver, write_partition

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("xasink")


@dataclass(frozen=True)
class WriteResult:
    """What a write_xa call did: the figures of its job-end line (xasink.jobs), and more."""

    job_id: str
    table: str
    rows: int
    partitions: int
    empty_partitions: int
    prepare_seconds: float
    commit_seconds: float
    total_seconds: float
    rolled_back_attempts: int = 0
    recovered: list[BranchAction] = field(default_factory=list)
    #: Highest peak RSS reported by a partition writer's Python worker, in KiB.
    worker_peak_rss_kb: int = 0
    #: How rows were loaded: "copy-binary", "copy-csv", "load-data" and/or "batched".
    load_paths: tuple[str, ...] = ()
    mode: defaults.Mode = defaults.MODE
    #: Whether write_xa created the table (create="if_missing").
    created: bool = False
    #: A streaming batch (`sink_id`/`batch_id`) that was decided before: nothing written.
    skipped: bool = False
    #: The job that decided a skipped batch.
    decided_by: str | None = None
    #: Branches the job wrote: `partitions` plus `empty_partitions` (0 when skipped).
    branches: int = 0
    #: Seconds per phase: preflight, write, decide, commit, and the total.
    seconds: PhaseSeconds = field(default_factory=PhaseSeconds)
    #: "committed", or "skipped" (a failed write raises; its job-end line has its outcome).
    outcome: JobOutcome = JobOutcome.COMMITTED
    #: Who wrote the branches: Spark "tasks", or the "driver" itself (a small frame).
    writer: str = "tasks"
    #: A streaming batch's sink and batch id (`sink_id`, `batch_id`), else None.
    sink_id: str | None = None
    batch_id: int | None = None
    #: A streaming batch: seconds from the batch reaching write_xa to the end of its commit.
    lag_seconds: float | None = None


@tracked  # the interpreter's exit waits for it (xasink.runtime.shutdown)
@redacting_java_errors
def write_xa(
    df: DataFrame,
    url: str,
    table: str | Sequence[str],
    *,
    mode: defaults.Mode = defaults.MODE,
    key: str | Sequence[str] | None = None,
    op: str | None = None,
    order: str | None = None,
    op_values: Mapping[str, str | Sequence[str]] | None = None,
    create: defaults.Create = defaults.CREATE,
    user: str | None = None,
    password: str | None = None,
    properties: Mapping[str, object] | None = None,
    batch_size: int = defaults.BATCH_SIZE,
    bulk: bool = True,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = defaults.CONNECT_TIMEOUT,
    network_timeout: float = defaults.NETWORK_TIMEOUT,
    commit_retries: int = defaults.COMMIT_RETRIES,
    commit_parallelism: int = defaults.COMMIT_PARALLELISM,
    max_branches: int | Literal["auto"] | None = "auto",
    driver_write_bytes: int = defaults.DRIVER_WRITE_BYTES,
    recover_first: bool = True,
    grace: float = defaults.GRACE,
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL,
    lock_wait_timeout: float = defaults.LOCK_WAIT,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> WriteResult:
    """Write every row of `df` into `table` exactly once, or none of them.

    Each partition writes into its own XA branch and PREPAREs it; the driver records the
    commit decision in the target database, then commits the winning branches. A failure
    before the decision rolls everything back and re-raises; a crash after it is finished
    by `xasink recover` (or by the next write_xa on this table). Every XasinkError raised
    once the job exists carries its id as `job_id`.

    Args:
        df: the rows; its column names match the table's (case-insensitively).
        url: a JDBC URL (`jdbc:postgresql://...`, `jdbc:mariadb://...`, `jdbc:mysql://...`).
        table: "name", "schema.name", or (schema, name) for names with dots.
        mode: "append" inserts; "overwrite" replaces the contents; "upsert" inserts or
            updates by `key`; "merge" applies change rows (`op`, `op_values`). The last
            three stage the rows and change the table in one transaction after phase 2.
        key: the key columns of upsert and merge (the primary key of a created table).
        op: merge's column saying insert/update/delete; `op_values` maps its spellings.
        order: the column whose highest value per key wins (upsert, merge).
        create: "if_missing" creates the table from the DataFrame's schema; "never" refuses.
        user, password, properties: the login and further JDBC connection properties.
        batch_size: rows per JDBC batch when rows go through batched INSERTs.
        bulk: use the dialect's bulk loader (COPY, LOAD DATA LOCAL) where it can.
        jars, dialect, xa_datasource: the JDBC driver's jars (found on this machine when
            None), and for another driver its dialect name and XADataSource class.
        journal_schema: the schema of xasink's bookkeeping tables (the login's default).
        connect_timeout, network_timeout: seconds to connect, and to wait for any answer
            (above `lock_wait_timeout`; a staged apply is bounded by TCP keepalive).
        commit_retries, commit_parallelism: phase 2's retries and parallel connections.
        max_branches: "auto" (about twice Spark's parallelism, or one branch written by
            the driver for a frame Spark estimates at most `driver_write_bytes`), a number,
            or None for one branch per partition.
        driver_write_bytes: the driver-written frame's size limit; 0 turns it off.
        recover_first, grace: resolve what earlier jobs left on the table first, taking a
            job's owner for dead after `grace` seconds of silence.
        heartbeat_interval: seconds between the job's heartbeats.
        lock_wait_timeout: the longest any bookkeeping or apply statement waits for a lock.
        sink_id, batch_id: one micro-batch of a stream (see `foreach_batch`): a batch
            whose decision is recorded is not written again (`WriteResult.skipped`).
    """
    clock = Stopwatch()
    with step("arguments"):
        spec = make_spec(
            url,
            user=user,
            password=password,
            properties=properties,
            dialect=dialect,
            xa_datasource=xa_datasource,
            jars=jars,
            connect_timeout=connect_timeout,
            network_timeout=network_timeout,
        )
        query = streaming_query_id(df.sparkSession) if sink_id else None
        request = JobRequest(
            spec=spec,
            target=TableRef.parse(table),
            options=ModeOptions.build(mode, key, op, order, op_values, df.columns),
            create=create,
            batch_size=batch_size,
            bulk=bulk,
            journal_schema=journal_schema,
            lock_wait=lock_wait_timeout,
            grace=grace,
            recover_first=recover_first,
            commit_retries=commit_retries,
            commit_parallelism=commit_parallelism,
            sink=sink_batch(sink_id, batch_id, query),
        )
    if not heartbeat_interval > 0:
        raise ConfigurationError("heartbeat_interval must be a number of seconds above 0.")
    trace = JobTrace.of(request, clock)
    with trace.ending():  # from here on, the call is a job: its end is logged
        return _write(df, request, max_branches, driver_write_bytes, heartbeat_interval, trace)


def _write(
    df: DataFrame,
    request: JobRequest,
    max_branches: int | Literal["auto"] | None,
    driver_write_bytes: int,
    heartbeat_interval: float,
    trace: JobTrace,
) -> WriteResult:
    """The job's steps, from preflight to finish."""
    with step("spark conf, jars, branch count"):
        spark = df.sparkSession
        memory = conf(spark, PYSPARK_MEMORY)
        check_spark_conf({PYSPARK_MEMORY: memory} if memory else {})
        ship_jars(spark, request.spec.jars)
        on_driver = max_branches == "auto" and writes_on_driver(df, driver_write_bytes)
        branches, planned = (
            (1, True) if on_driver else branch_count(df, max_branches, request.options)
        )
    trace.writer = "driver" if on_driver else "tasks"
    with Job.opened(request, reuse=True, checks=CHECKS, trace=trace) as job:
        pre = job.preflight(df.schema, branches)
        if max_branches == "auto" and branches > 1:
            with step("stream count"):
                if one_stream(job.conn, job.dialect, request.target, request.options):
                    log.info("xasink: one branch into %s, which has no unique key", request.target)
                    branches = 1
        lease = defaults.LEASE_INTERVALS * heartbeat_interval
        # One branch needs no second phase, where the login can stage inside it.
        one_phase = on_driver and (not request.options.staged or job.can_stage_temporarily())
        begun = job.begin(pre, df.columns, lease, one_phase=one_phase)
        if isinstance(begun, Skipped):
            return _result(trace.end(JobOutcome.SKIPPED), begun.recovered)
        if one_phase:
            phase_one = _one_phase(df, job, pre)
            return _result(trace.end(JobOutcome.COMMITTED), begun.recovered, pre.created, phase_one)
        with job.running(heartbeat_interval):
            plan, columns = job.make_plan(pre, df.schema)
            with step("shape frame"):
                options, dialect = request.options, job.dialect
                shaped = shape_frame(df, plan, options, dialect, columns, branches, on_driver)
            what = "1 branch from the driver" if on_driver else f"{branches} branches"
            log.info(
                "xasink job %s: writing %s into %s (mode %s)",
                plan.job_id,
                what,
                request.target,
                options.mode,
            )
            phase_one = job.decide(write_branches(shaped, plan, on_driver), branches, planned)
            log.info(
                "xasink job %s: %d branches prepared (%d rows) and commit decided in %.1fs",
                plan.job_id,
                len(phase_one.winners),
                phase_one.rows,
                trace.clock.elapsed(),
            )
            losers = job.commit(phase_one)
    end = trace.end(JobOutcome.COMMITTED)
    return _result(end, begun.recovered, pre.created, phase_one, losers)


def _one_phase(df: DataFrame, job: Job, pre: Preflight) -> PhaseOne:
    """A small frame's job: the driver writes its only branch and commits it, with the
    job's bookkeeping, in one local transaction (`driver.one_phase.commit_one_phase`). Until then,
    nothing of the job exists: any failure ends it aborted."""
    try:
        return _one_phase_steps(df, job, pre)
    except BaseException as exc:
        if isinstance(exc, XasinkError):
            exc.job_id = job.job_id
        if job.trace.state == JobState.RUNNING:
            job.trace.state = JobState.ABORTED
        raise


def _one_phase_steps(df: DataFrame, job: Job, pre: Preflight) -> PhaseOne:
    plan, columns = job.make_plan(pre, df.schema, one_phase=True)
    options, dialect = job.request.options, job.dialect
    with step("shape frame"):
        shaped = shape_frame(df, plan, options, dialect, columns, 1, True)
    log.info(
        "xasink job %s: writing 1 branch from the driver into %s in one transaction (mode %s)",
        plan.job_id,
        job.request.target,
        options.mode,
    )
    label = f"xasink write_xa into {job.request.target} (job {plan.job_id})"
    try:
        with (
            step("collect the frame"),
            job_label(df.sparkSession, label, f"xasink-{plan.job_id}"),
        ):
            batches = collect_small_frame(shaped)
    except Exception as exc:  # Spark could not produce the rows: nothing was written
        raise phase_one_failed(plan, exc, on_driver=True) from exc

    def write(plan: WritePlan) -> BranchReport:
        with step("one local transaction"):
            return write_one_phase(plan, iter(batches))

    return commit_one_phase(job, write)


def write_branches(df: DataFrame, plan: WritePlan, on_driver: bool) -> list[Any]:
    """Phase 1: the Spark job whose tasks prepare one branch per partition, or the
    driver's own write of a small frame; the partitions' messages."""
    label = f"xasink write_xa into {plan.table} (job {plan.job_id})"
    try:
        with (
            step("phase 1 (Spark job)"),
            job_label(df.sparkSession, label, f"xasink-{plan.job_id}"),
        ):
            if on_driver:
                return [write_from_driver(plan, df)]
            writer = functools.partial(write_partition, plan)
            return df.mapInArrow(writer, MESSAGE_DDL).collect()
    except Exception as exc:
        raise phase_one_failed(plan, exc, on_driver) from exc


#: What WriteResult takes from the job's end as it is (the job-end line shows the same).
_FROM_END = (
    *("job_id", "table", "rows", "mode", "load_paths", "decided_by", "branches"),
    *("seconds", "outcome", "writer", "sink_id", "batch_id", "lag_seconds"),
)


def _result(
    end: JobEnd,
    recovered: list[BranchAction],
    created: bool = False,
    phase_one: PhaseOne | None = None,
    losers: int = 0,
) -> WriteResult:
    """The call's result: its job-end figures, and what only the caller is told."""
    seconds = end.seconds
    return WriteResult(
        **{name: getattr(end, name) for name in _FROM_END},
        partitions=len(phase_one.winners) if phase_one else 0,
        empty_partitions=phase_one.empty_partitions if phase_one else 0,
        prepare_seconds=seconds.preflight + seconds.write + seconds.decide,
        commit_seconds=seconds.commit,
        total_seconds=seconds.total,
        rolled_back_attempts=losers,
        recovered=recovered,
        worker_peak_rss_kb=phase_one.worker_peak_rss_kb if phase_one else 0,
        created=created,
        skipped=end.outcome == JobOutcome.SKIPPED,
    )


__all__ = ["JobOutcome", "PhaseSeconds", "WriteResult", "write_xa"]
