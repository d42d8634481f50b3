"""The public entry points: `write_xa`, a DataFrame into a table, and `transaction`, several
tables of one database. Both run one `Transaction` (xasink.spark.transaction): write_xa is
the transaction of one write, whose append, alone, writes its table from its branches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .. import defaults
from ..driver.participants import abort_all
from ..driver.report import JobEnd, JobOutcome, PhaseSeconds
from ..driver.request import PhaseOne
from ..driver.sinks import sink_batch
from ..driver.transaction import TransactionSettings
from ..errors import ConfigurationError, DecisionUnknownError, XasinkError
from ..protocol.actions import BranchAction
from ..protocol.connecting import make_spec
from ..protocol.states import JobState
from ..runtime.jdbc import java_errors_redacted, redacting_java_errors
from ..runtime.shutdown import tracked
from ..runtime.timing import Stopwatch, step
from ..tables.modes import APPEND
from .transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


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
    #: Changes not applied because the table's row was as new or newer by the `order`
    #: column, which the table stores (upsert, merge): late changes, replays.
    stale: int = 0


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
        settings = _settings(
            url,
            user,
            password,
            properties,
            jars,
            dialect,
            xa_datasource,
            journal_schema,
            connect_timeout,
            network_timeout,
            commit_retries,
            commit_parallelism,
            recover_first,
            grace,
            heartbeat_interval,
            lock_wait_timeout,
            mode == APPEND,  # alone, an append writes its table from its branches
            sink_id,
            batch_id,
        )
    tx = Transaction(settings, clock)
    with run(tx):
        tx.write(
            df,
            table,
            mode=mode,
            key=key,
            op=op,
            order=order,
            op_values=op_values,
            create=create,
            batch_size=batch_size,
            bulk=bulk,
            max_branches=max_branches,
            driver_write_bytes=driver_write_bytes,
        )
    ended = tx.ended
    assert ended is not None and tx.result is not None
    return _result(ended.end, tx.result.recovered, ended.created, ended.phase_one, ended.losers)


@contextlib.contextmanager
def transaction(
    url: str,
    *,
    user: str | None = None,
    password: str | None = None,
    properties: Mapping[str, object] | None = None,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = defaults.CONNECT_TIMEOUT,
    network_timeout: float = defaults.NETWORK_TIMEOUT,
    commit_retries: int = defaults.COMMIT_RETRIES,
    commit_parallelism: int = defaults.COMMIT_PARALLELISM,
    recover_first: bool = True,
    grace: float = defaults.GRACE,
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL,
    lock_wait_timeout: float = defaults.LOCK_WAIT,
    per_branch_appends: bool = False,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> Iterator[Transaction]:
    """Several writes into the tables of one database, all or nothing, and at once for
    readers: `tx.write(df, table, mode=...)` in the block, one decision when it ends.

    Every write is staged (appends too) and the staging tables are applied in one local
    transaction, parents before children (the catalog's foreign keys, else the order of
    the writes): a reader at READ COMMITTED sees every table old or every table new. With
    `per_branch_appends=True` (appends only), branches write the tables themselves, as
    write_xa's appends do: faster, but each branch's rows show as it commits. Small
    writes are held by the driver and written in one local transaction, without XA.

    An exception in the block, or a failed write, aborts the transaction: nothing of any
    write is committed. `sink_id` and `batch_id` make it one micro-batch of a stream
    (`foreachBatch`): a batch whose decision is recorded is not written again
    (`tx.result.skipped`). The other keywords are write_xa's; see docs/transactions.md.
    """
    with step("arguments"):
        settings = _settings(
            url,
            user,
            password,
            properties,
            jars,
            dialect,
            xa_datasource,
            journal_schema,
            connect_timeout,
            network_timeout,
            commit_retries,
            commit_parallelism,
            recover_first,
            grace,
            heartbeat_interval,
            lock_wait_timeout,
            per_branch_appends,
            sink_id,
            batch_id,
        )
    with run(Transaction(settings)) as tx:
        yield tx


def _settings(
    url: str,
    user: str | None,
    password: str | None,
    properties: Mapping[str, object] | None,
    jars: Sequence[str] | None,
    dialect: str | None,
    xa_datasource: str | None,
    journal_schema: str | None,
    connect_timeout: int,
    network_timeout: float,
    commit_retries: int,
    commit_parallelism: int,
    recover_first: bool,
    grace: float,
    heartbeat_interval: float,
    lock_wait_timeout: float,
    per_branch_appends: bool,
    sink_id: str | None,
    batch_id: int | None,
) -> TransactionSettings:
    """The database, its journal and the stream batch, validated, as both entry points
    take them."""
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
    sink_batch(sink_id, batch_id)
    if not heartbeat_interval > 0:
        raise ConfigurationError("heartbeat_interval must be a number of seconds above 0.")
    return TransactionSettings(
        spec,
        journal_schema,
        lock_wait_timeout,
        grace,
        recover_first,
        commit_retries,
        commit_parallelism,
        heartbeat_interval,
        per_branch_appends,
        sink_id,
        batch_id,
    )


@contextlib.contextmanager
def run(tx: Transaction) -> Iterator[Transaction]:
    """The block's rules: an exception inside, or a write that failed even if the block
    went on, aborts the transaction; leaving it normally commits every write."""
    try:
        yield tx
        if tx._failed is not None:
            raise ConfigurationError(
                "A write of this transaction failed, so it committed nothing (the block "
                "went on after the failure): fix the cause and run the transaction again."
            ) from tx._failed
        _ended(tx)
    except BaseException as exc:
        _failed(tx, exc)
        raise
    finally:
        tx._ended = True


@tracked
def _ended(tx: Transaction) -> None:
    with java_errors_redacted("the transaction's commit", tx.redactor()):
        tx._commit()


def _failed(tx: Transaction, exc: BaseException) -> None:
    """The block or the commit failed: abort unless decided (`Job.running`), log its end."""
    if isinstance(exc, XasinkError) and tx.job_id and exc.job_id is None:
        exc.job_id = tx.job_id
    trace = tx._trace
    if trace is not None and tx._held is not None and trace.state == JobState.RUNNING:
        trace.state = JobState.ABORTED  # held: nothing of the job exists
    if tx._job is not None and tx._members and not isinstance(exc, DecisionUnknownError):
        abort_all(tx._job, list(tx._members.values()))  # the coordinator's first
    try:
        tx._stack.__exit__(type(exc), exc, exc.__traceback__)
    finally:
        if trace is not None and trace.ended is None:
            trace.failed(exc)


#: What WriteResult takes from the job's end as it is (the job-end line shows the same).
_FROM_END = (
    *("job_id", "table", "rows", "mode", "load_paths", "decided_by", "branches"),
    *("seconds", "outcome", "writer", "sink_id", "batch_id", "lag_seconds", "stale"),
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


__all__ = ["JobOutcome", "PhaseSeconds", "WriteResult", "transaction", "write_xa"]
