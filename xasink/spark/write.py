"""The public entry points: `write_xa`, a DataFrame into a table, and `transaction`, several
tables. Both run one `Transaction` (xasink.spark.transaction) in a block (xasink.spark.block):
write_xa is the transaction of one write, whose append, alone, writes its table from its
branches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import defaults
from ..driver.report import JobEnd, JobOutcome, PhaseSeconds
from ..driver.request import PhaseOne
from ..driver.transaction import TransactionSettings
from ..protocol.actions import BranchAction
from ..runtime.jdbc import redacting_java_errors
from ..runtime.shutdown import tracked
from ..runtime.timing import Stopwatch, step
from ..spec import CommitProperties, Database, WriteOptions, write_options
from ..tables.modes import APPEND
from .arguments import check_database, check_properties, check_write
from .block import run
from .transaction import Transaction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from typing_extensions import Unpack


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


#: How write_xa's messages name it: the order of its arguments is half of what they say.
_WRITE_XA = "write_xa(df, database, table)"


@tracked  # the interpreter's exit waits for it (xasink.runtime.shutdown)
@redacting_java_errors
def write_xa(
    df: DataFrame,
    database: Database | str,
    table: str | Sequence[str],
    *,
    commit_properties: CommitProperties | None = None,
    sink_id: str | None = None,
    batch_id: int | None = None,
    **options: Unpack[WriteOptions],
) -> WriteResult:
    """Write every row of `df` into `table` exactly once, or none of them.

    Each partition writes into its own XA branch and PREPAREs it; the driver records the
    commit decision in the target database, then commits the winning branches. A failure
    before the decision rolls everything back and re-raises; a crash after it is finished
    by `xasink recover` (or by the next write_xa on this table). Every XasinkError raised
    once the job exists carries its id as `job_id`.

    Args:
        df: the rows; its column names match the table's (case-insensitively).
        database: where to write (`xasink.Database`, or a JDBC URL string).
        table: "name", "schema.name", or (schema, name) for names with dots.
        commit_properties: how the job commits and recovers (`CommitProperties`).
        sink_id, batch_id: one micro-batch of a stream (see `foreach_batch`): a batch
            whose decision is recorded is not written again (`WriteResult.skipped`).
        **options: how the write changes the table (`WriteOptions`): `mode` ("append",
            "overwrite", "upsert", "merge"), `key`, `op`, `order`, `op_values`, `create`,
            `schema_mode` ("merge" adds the frame's columns the table lacks),
            `writer_properties`, `replace_where` (overwrite only the rows a SQL condition
            selects), `pre_sql` and `post_sql` (statements run in the apply's transaction).
    """
    clock = Stopwatch()
    with step("arguments"):
        given = write_options("write_xa", options)
        check_database(_WRITE_XA, database, table)
        check_write(_WRITE_XA, df, table, given, commit_properties)
        # An append's branches write the table, unless it has actions to run in an apply.
        actions = given.get("pre_sql") is not None or given.get("post_sql") is not None
        alone = given.get("mode", defaults.MODE) == APPEND and not actions
        settings = TransactionSettings.of(database, commit_properties, alone, sink_id, batch_id)
    tx = Transaction(settings, clock)
    with run(tx):
        tx.write(df, table, **given)
    ended = tx.ended
    assert ended is not None and tx.result is not None
    return _result(ended.end, tx.result.recovered, ended.created, ended.phase_one, ended.losers)


@contextlib.contextmanager
def transaction(
    database: Database | str,
    *,
    commit_properties: CommitProperties | None = None,
    per_branch_appends: bool = False,
    sink_id: str | None = None,
    batch_id: int | None = None,
) -> Iterator[Transaction]:
    """Several writes into the tables of one database (and of others, as participants),
    all or nothing, and at once for readers: `tx.write(df, table, mode=...)` in the
    block, one decision when it ends.

    Every write is staged (appends too) and the staging tables are applied in one local
    transaction, parents before children (the catalog's foreign keys, else the order of
    the writes): a reader at READ COMMITTED sees every table old or every table new. With
    `per_branch_appends=True` (appends only), branches write the tables themselves, as
    write_xa's appends do: faster, but each branch's rows show as it commits. Small
    writes are held by the driver and written in one local transaction, without XA.

    An exception in the block, or a failed write, aborts the transaction: nothing of any
    write is committed. `sink_id` and `batch_id` make it one micro-batch of a stream
    (`foreachBatch`): a batch whose decision is recorded is not written again
    (`tx.result.skipped`). `commit_properties` are write_xa's; see docs/transactions.md.
    """
    with step("arguments"):
        check_database("xasink.transaction(database)", database)
        check_properties("xasink.transaction(database)", commit_properties=commit_properties)
        settings = TransactionSettings.of(
            database, commit_properties, per_branch_appends, sink_id, batch_id
        )
    with run(Transaction(settings)) as tx:
        yield tx


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
