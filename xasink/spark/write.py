"""`write_xa` and `recover`: the orchestration, kept apart from XA, journal and writers."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .._testing.faults import Fault
from ..dialects import get_dialect
from ..driver.checks import CHECKS
from ..driver.job import (
    JOURNAL_ROLE,
    JobRequest,
    PhaseOne,
    Skipped,
    abort,
    abort_quietly,
    begin,
    commit_all,
    decide_all,
    make_spec,
    open_journal,
    phase_one_failed,
    plan_job,
    preflight,
    release_stage,
)
from ..driver.plan import (
    DRIVER_WRITE_BYTES,
    branch_count,
    one_stream,
    shape_frame,
    writes_on_driver,
)
from ..driver.sinks import sink_batch
from ..errors import (
    ConfigurationError,
    JournalError,
    XasinkError,
)
from ..executor.branch import MESSAGE_DDL, WritePlan, write_from_driver, write_partition
from ..protocol.branches import BranchOps
from ..protocol.heartbeat import LEASE_INTERVALS, Heartbeat
from ..protocol.idle import kept_on_success
from ..protocol.journal import (
    DEFAULT_LOCK_WAIT,
    Journal,
)
from ..protocol.recovery import (
    DEFAULT_GRACE,
    BranchAction,
    RecoveryReport,
    describe,
    no_journal,
    presume_abort,
    resolve_in_doubt,
)
from ..runtime.jdbc import redacting_java_errors
from ..runtime.shutdown import tracked
from ..runtime.timing import step
from ..spec import DEFAULT_NETWORK_TIMEOUT, ConnectionSpec, TableRef
from ..target.fit import PYSPARK_MEMORY, check_spark_conf
from ..target.staging import APPEND, ModeOptions
from .session import conf, job_label, ship_jars, streaming_query_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("xasink")


@dataclass(frozen=True)
class WriteResult:
    """What a write_xa call did."""

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
    mode: str = APPEND
    #: Whether write_xa created the table (create="if_missing").
    created: bool = False
    #: A streaming batch (`sink_id`/`batch_id`) that was decided before: nothing written.
    skipped: bool = False
    #: The job that decided a skipped batch.
    decided_by: str | None = None


@tracked  # the interpreter's exit waits for it (xasink.runtime.shutdown)
@redacting_java_errors
def write_xa(
    df: DataFrame,
    url: str,
    table: str | Sequence[str],
    *,
    mode: str = APPEND,
    key: str | Sequence[str] | None = None,
    op: str | None = None,
    order: str | None = None,
    op_values: Mapping[str, str | Sequence[str]] | None = None,
    create: str = "if_missing",
    user: str | None = None,
    password: str | None = None,
    properties: Mapping[str, object] | None = None,
    batch_size: int = 10_000,
    bulk: bool = True,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = 10,
    network_timeout: float = DEFAULT_NETWORK_TIMEOUT,
    commit_retries: int = 5,
    commit_parallelism: int = 4,
    max_branches: int | Literal["auto"] | None = "auto",
    driver_write_bytes: int = DRIVER_WRITE_BYTES,
    recover_first: bool = True,
    grace: float = DEFAULT_GRACE,
    heartbeat_interval: float = 10.0,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    sink_id: str | None = None,
    batch_id: int | None = None,
    _faults: Sequence[Fault] = (),
) -> WriteResult:
    """Write every row of `df` into `table` exactly once, or none of them.

    Each partition writes into its own XA branch and PREPAREs it; the driver records the
    commit decision in the target database, then commits the winning branches. A failure
    before the decision rolls everything back and re-raises; a crash after it is finished
    by `xasink recover` (or by the next write_xa on this table).

    `mode`: "append" (default) inserts the rows. "overwrite" replaces the table's contents,
    "upsert" inserts or updates by `key`, and "merge" applies change rows: `op` names the
    column saying insert/update/delete (values per `op_values`), and `order` the column whose
    highest value per key wins (for upsert too). These three load a staging table in the
    branches and change the table in one transaction after phase 2, so readers see the old
    contents or the new, never a mix. `create="if_missing"` creates the table from the
    DataFrame's schema (`key` becomes its primary key); "never" refuses.

    A DataFrame that Spark estimates at most `driver_write_bytes` (default 4 MiB) is
    collected as Arrow and written by the driver itself, in one branch: a Python task per
    branch costs more than the rest of a small call. 0 turns this off, as does an explicit
    `max_branches`; under Spark Connect the branches are always tasks.

    Rows go through the dialect's bulk loader (PostgreSQL COPY, MySQL/MariaDB LOAD DATA
    LOCAL) unless `bulk=False`, the server refuses it, or a column type has no bulk encoding;
    then through JDBC batches of `batch_size` rows.

    No bookkeeping or apply statement waits longer than `lock_wait_timeout` seconds for a
    lock, and no JDBC call longer than `network_timeout` seconds for an answer (it must be
    longer than the lock wait, so that a live server's lock waits never run into it; a
    staged apply, which may run long, is bounded by TCP keepalive instead). Every
    XasinkError raised once the job exists carries its id as `job_id`.

    `sink_id` and `batch_id` make the write one micro-batch of a stream (see
    `xasink.foreach_batch`): the decision records the batch, and a batch whose decision is
    recorded is not written again (`WriteResult.skipped`).
    """
    started = time.monotonic()
    with step("arguments"):
        request = JobRequest(
            spec=make_spec(
                url,
                user=user,
                password=password,
                properties=properties,
                dialect=dialect,
                xa_datasource=xa_datasource,
                jars=jars,
                connect_timeout=connect_timeout,
                network_timeout=network_timeout,
            ),
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
            sink=sink_batch(
                sink_id, batch_id, streaming_query_id(df.sparkSession) if sink_id else None
            ),
            faults=tuple(_faults),
        )
    with step("spark conf, jars, branch count"):
        spark = df.sparkSession
        memory = conf(spark, PYSPARK_MEMORY)
        check_spark_conf({PYSPARK_MEMORY: memory} if memory else {})
        ship_jars(spark, request.spec.jars)
        on_driver = max_branches == "auto" and writes_on_driver(df, driver_write_bytes)
        if on_driver:
            branches, planned = 1, True
        else:
            branches, planned = branch_count(df, max_branches, request.options)
    spec, target, options = request.spec, request.target, request.options
    session, journal = open_journal(spec, journal_schema, lock_wait_timeout, reuse=True)
    with (
        kept_on_success(spec, JOURNAL_ROLE, session),
        CHECKS.forgotten_on_failure(spec),
    ):
        conn = session.connection
        pre = preflight(conn, journal, request, df.schema, branches, CHECKS)
        journal = pre.journal
        if max_branches == "auto" and branches > 1:
            with step("stream count"):
                if one_stream(conn, get_dialect(spec.dialect), target, options):
                    log.info("xasink: one branch into %s, which has no unique key", target)
                    branches = 1
        with BranchOps(spec, journal, retries=commit_retries, reuse=True) as ops:
            heartbeat_lease = LEASE_INTERVALS * heartbeat_interval
            begun = begin(conn, ops, request, pre, df.columns, heartbeat_lease)
            if isinstance(begun, Skipped):
                return _skipped(begun, target, options.mode, started)
            job_id = begun.job_id
            with step("heartbeat start"):
                heartbeat = Heartbeat(journal, spec, job_id, heartbeat_interval)
                heartbeat.start()  # from the first moment the job can be seen
            try:
                plan, columns = plan_job(conn, request, pre, begun, df.schema)
                try:
                    with step("shape frame"):
                        shaped = shape_frame(
                            df,
                            plan,
                            options,
                            get_dialect(spec.dialect),
                            columns,
                            branches,
                            on_driver,
                        )
                except BaseException:
                    abort_quietly(journal, conn, job_id, spec)  # no branch has opened yet
                    raise
                log.info(
                    "xasink job %s: writing %s into %s (mode %s)",
                    job_id,
                    "1 branch from the driver" if on_driver else f"{branches} branches",
                    target,
                    options.mode,
                )
                phase_one = _prepare_all(shaped, plan, branches, planned, ops, conn, on_driver)
                winners, rows = phase_one.winners, phase_one.rows
                prepare_seconds = time.monotonic() - started
                log.info(
                    "xasink job %s: %d branches prepared (%d rows) and commit decided in %.1fs",
                    job_id,
                    len(winners),
                    rows,
                    prepare_seconds,
                )
                commit_started = time.monotonic()
                losers = commit_all(plan, ops, conn, phase_one, commit_parallelism)
                commit_seconds = time.monotonic() - commit_started
            except XasinkError as exc:
                exc.job_id = job_id  # type: ignore[attr-defined]
                raise
            finally:
                with step("heartbeat stop"):
                    heartbeat.stop()
                with step("stage release"):
                    release_stage(journal, conn, job_id, begun.apply, spec)
    total = time.monotonic() - started
    log.info("xasink job %s: committed %d rows in %.1fs", job_id, rows, total)
    return WriteResult(
        job_id=job_id,
        table=str(target),
        rows=rows,
        partitions=len(winners),
        empty_partitions=phase_one.empty_partitions,
        prepare_seconds=prepare_seconds,
        commit_seconds=commit_seconds,
        total_seconds=total,
        rolled_back_attempts=losers,
        recovered=begun.recovered,
        worker_peak_rss_kb=phase_one.worker_peak_rss_kb,
        load_paths=phase_one.load_paths,
        mode=options.mode,
        created=pre.created,
    )


def _skipped(skipped: Skipped, target: TableRef, mode: str, started: float) -> WriteResult:
    return WriteResult(
        job_id="",
        table=str(target),
        rows=0,
        partitions=0,
        empty_partitions=0,
        prepare_seconds=0.0,
        commit_seconds=0.0,
        total_seconds=time.monotonic() - started,
        recovered=skipped.recovered,
        mode=mode,
        skipped=True,
        decided_by=skipped.mark.job_id,
    )


def _prepare_all(
    df: DataFrame,
    plan: WritePlan,
    branches: int,
    planned: bool,
    ops: BranchOps,
    conn: Any,
    on_driver: bool,
) -> PhaseOne:
    """Phase 1 (the Spark job) and the decision. Any failure before the decision rolls the
    job back.

    `planned`: `df` has exactly `branches` partitions; else at most that many (Spark
    Connect cannot tell a DataFrame's partition count). `on_driver`: one branch, written by
    this process from the collected rows."""
    label = f"xasink write_xa into {plan.table} (job {plan.job_id})"
    try:
        with (
            step("phase 1 (Spark job)"),
            job_label(df.sparkSession, label, f"xasink-{plan.job_id}"),
        ):
            if on_driver:
                messages: list[Any] = [write_from_driver(plan, df)]
            else:
                writer = functools.partial(write_partition, plan)
                messages = df.mapInArrow(writer, MESSAGE_DDL).collect()
    except Exception as exc:
        abort(plan, ops, conn)
        raise phase_one_failed(plan, exc, on_driver) from exc
    return decide_all(plan, ops, conn, messages, branches, planned)


@contextlib.contextmanager
def _journal_session(
    url: str, journal_schema: str | None, lock_wait_timeout: float, **connection: Any
) -> Iterator[tuple[ConnectionSpec, Any, Journal]]:
    """(spec, journal connection, journal as found) for the journal at `url`."""
    spec = make_spec(url, **connection)
    session, journal = open_journal(spec, journal_schema, lock_wait_timeout)
    with session:
        yield spec, session.connection, journal


@contextlib.contextmanager
def operate(
    url: str,
    *,
    journal_schema: str | None = None,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    **connection: Any,
) -> Iterator[tuple[Any, Journal, BranchOps]]:
    """(connection, journal, branch ops) for operating an existing journal; `connection`
    takes make_spec's keyword arguments."""
    connection = {"connect_timeout": 10, "properties": None, **connection}
    with _journal_session(url, journal_schema, lock_wait_timeout, **connection) as (
        spec,
        conn,
        journal,
    ):
        if not journal.exists(conn):
            raise JournalError(
                f"No xasink journal in {describe(journal)} at {spec.masked_url}: check --url "
                "and --journal-schema."
            )
        journal = journal.ensure(conn, spec)
        with BranchOps(spec, journal) as ops:
            yield conn, journal, ops


@redacting_java_errors
def recover(
    url: str,
    *,
    user: str | None = None,
    password: str | None = None,
    table: str | Sequence[str] | None = None,
    job: str | None = None,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
    properties: Mapping[str, object] | None = None,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = 10,
    network_timeout: float = DEFAULT_NETWORK_TIMEOUT,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    presume_abort_tag: str | None = None,
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in this database; see :mod:`xasink.recovery`.

    Without a journal nothing is touched, unless `presume_abort_tag` names the tag whose
    prepared branches are to be rolled back (once older than `grace`, where the server
    tells a branch's age)."""
    with _journal_session(
        url,
        journal_schema,
        lock_wait_timeout,
        user=user,
        password=password,
        properties=properties,
        dialect=dialect,
        xa_datasource=xa_datasource,
        jars=jars,
        connect_timeout=connect_timeout,
        network_timeout=network_timeout,
    ) as (spec, conn, journal):
        exists = journal.exists(conn)  # raises unless the journal is truly missing
        if presume_abort_tag is not None:
            if exists:
                raise ConfigurationError(
                    "The journal exists, so recovery decides from it: drop --presume-abort."
                )
            orphan = replace(journal, tag=presume_abort_tag)
            with BranchOps(spec, orphan) as ops:
                return presume_abort(
                    ops, presume_abort_tag, grace=grace, dry_run=dry_run, conn=conn, journal=orphan
                )
        if not exists:
            with BranchOps(spec, journal) as ops:
                return no_journal(ops, journal, dry_run)
        if dry_run:
            journal.check_complete(conn)
        else:
            journal = journal.ensure(conn, spec)  # checks it whole
        with BranchOps(spec, journal) as ops:
            return resolve_in_doubt(
                ops,
                conn,
                journal,
                table=str(TableRef.parse(table)) if table is not None else None,
                job=job,
                grace=grace,
                dry_run=dry_run,
            )


__all__ = ["WriteResult", "recover", "write_xa"]
