"""`xasink.transaction`: several writes into the tables of one database, one commit decision.

    with xasink.transaction(url, user="app", password=pw) as tx:
        tx.write(orders, "orders")
        tx.write(items, "order_items", mode="upsert", key="id")

Every write is one more part of one `Job`: `tx.write` runs its Spark job at once (its
branches load the write's own staging table and PREPARE; the driver keeps no rows), and
leaving the block records one decision for every branch of every write, then commits them
and applies every staging table in one local transaction (`ApplyPlans`), parents before
children. So readers see all the tables old, or all of them new; an exception in the block,
a failed write or a driver death before the decision leaves nothing of any write once
recovered; a death after it is finished by `xasink recover`, as one job.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import defaults
from ..driver.check_cache import CHECKS
from ..driver.decision import select_winners
from ..driver.job import Job
from ..driver.opening import open_job
from ..driver.participants import Member, elsewhere, enlist, same_database, settle_left
from ..driver.plan import one_stream
from ..driver.report import JobTrace
from ..driver.request import JobRequest, PhaseOne, Preflight, Skipped
from ..driver.transaction import (
    TableWrite,
    TransactionEnd,
    TransactionResult,
    TransactionSettings,
    add_write,
    write_request,
)
from ..errors import ConfigurationError, XasinkError
from ..masking import Redactor
from ..protocol.actions import BranchAction
from ..runtime.jdbc import java_errors_redacted
from ..runtime.shutdown import tracked
from ..runtime.timing import Stopwatch, step
from ..spec import (
    ConnectionSpec,
    Database,
    TableRef,
    WriteOptions,
    WriterProperties,
    secrets_of,
    write_options,
)
from ..tables.evolution import check_schema_mode
from ..tables.modes import APPEND, ModeOptions
from ..tables.new_table import NewTable
from .arguments import check_write
from .frame import branch_count, shape_frame, writes_on_driver
from .session import PYSPARK_MEMORY, check_spark_conf, ship_jars, static_conf, streaming_query_id
from .small_writes import HeldWrite, hold, promote
from .tasks import write_branches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from typing_extensions import Unpack

log = logging.getLogger("xasink")


class Transaction:
    """The block's handle: `write` adds a write; the block's end decides for all of them.
    Open one with `xasink.transaction`."""

    def __init__(self, settings: TransactionSettings, clock: Stopwatch | None = None) -> None:
        self._settings = settings
        self._clock = clock
        self._trace: JobTrace | None = None
        self._stack = contextlib.ExitStack()
        self._job: Job | None = None
        self._skipped: Skipped | None = None
        self._recovered: list[BranchAction] = []
        self._parts: list[PhaseOne] = []
        self._writes: list[TableWrite] = []
        self._tables: set[tuple[str, TableRef]] = set()
        self._partitions = 0
        #: The transaction's other databases, by their connection (`driver.participants`).
        self._members: dict[ConnectionSpec, Member] = {}
        #: Small writes held for one local transaction while the job is not registered.
        self._held: list[HeldWrite] | None = None
        self._failed: BaseException | None = None
        self._ended = False
        #: What the transaction did, once its block has ended without an error.
        self.result: TransactionResult | None = None
        #: Its job's end, and what write_xa's result reports beyond it.
        self.ended: TransactionEnd | None = None
        self._created = False

    @property
    def job_id(self) -> str | None:
        """The transaction's one job (None before its first write)."""
        return self._job.job_id if self._job else None

    @tracked
    def write(
        self,
        df: DataFrame,
        table: str | Sequence[str],
        *,
        database: Database | str | None = None,
        **options: Unpack[WriteOptions],
    ) -> None:
        """Write `df` into `table` as part of the transaction: its branches prepare now,
        and nothing of it is visible before the block ends. `options` are write_xa's
        (`WriteOptions`). A failure here fails the whole transaction, even when the block
        goes on.

        `database` writes into another database, a participant: the transaction's own
        database (its first write goes there) records the one decision for every one.

        Each database's one apply transaction runs the `pre_sql` of all its writes, in the
        order of the `tx.write` calls, then every write's apply, then their `post_sql`."""
        if self._ended:
            raise ConfigurationError("This transaction has ended: open a new one to write.")
        if self._failed is not None:
            raise ConfigurationError(
                "An earlier write of this transaction failed, so it commits nothing: leave "
                "the block and run the transaction again."
            ) from self._failed
        given = write_options("tx.write", options)
        check_write("tx.write(df, table)", df, table, given)
        settings = self._settings if database is None else elsewhere(self._settings, database)
        try:
            with java_errors_redacted("tx.write", self.redactor(settings.spec)):
                self._write(settings, df, table, given)
        except BaseException as exc:
            self._failed = exc
            if isinstance(exc, XasinkError) and self.job_id:
                exc.job_id = self.job_id
            raise

    def _write(
        self,
        s: TransactionSettings,
        df: DataFrame,
        table: str | Sequence[str],
        given: WriteOptions,
    ) -> None:
        writer = given.get("writer_properties") or WriterProperties()
        max_branches, create = writer.max_branches, given.get("create", defaults.CREATE)
        options = _mode_options(given, df.columns, s.per_branch_appends)
        staged_append = options.mode == APPEND and not s.per_branch_appends
        options = dataclasses.replace(options, stage_append=staged_append)
        schema_mode = check_schema_mode(given.get("schema_mode"))
        new_table = NewTable.build(
            given.get("create_table_options"),
            given.get("create_table_column_types"),
            options.written(df.columns),
            create,
            evolving=schema_mode is not None,
        )
        query = streaming_query_id(df.sparkSession) if s.sink_id else None
        target = TableRef.parse(table)
        request = write_request(s, target, options, create, writer, query, new_table, schema_mode)
        with step("spark conf, jars, branch count"):
            memory = static_conf(df.sparkSession, PYSPARK_MEMORY)
            check_spark_conf({PYSPARK_MEMORY: memory} if memory else {})
            ship_jars(df.sparkSession, s.spec.jars)
            on_driver = max_branches == "auto" and writes_on_driver(df, writer.driver_write_bytes)
            branches, planned = (1, True) if on_driver else branch_count(df, max_branches, options)
        if s.spec == self._settings.spec and s.journal_schema == self._settings.journal_schema:
            job, pre = self._joined(df, request, branches, on_driver)
        elif self._skipped is not None and self._job is not None:  # decided before
            replayed = self._stack.enter_context(open_job(request))
            self._recovered += settle_left(self._job, replayed)
            return
        else:
            job, pre = self._elsewhere(df, request, branches)
        if job is None:
            return  # a streaming batch decided before: nothing to write
        self._created |= pre.created
        options = pre.options  # as the table has it (its `order` column written or not)
        if (
            max_branches == "auto"
            and branches > 1
            and one_stream(job.conn, job.dialect, pre.table, options)
        ):
            log.info("xasink: one branch into %s, which has no unique key", pre.table)
            branches = 1
        if self._held is not None:
            held = hold(job, pre, df)
            self._held.append(held)
            self._writes.append(TableWrite(str(pre.table), options.mode, held.rows, 1))
            return
        plan, columns = job.make_plan(pre, df.schema, partition_base=self._partitions)
        with step("shape frame"):
            shaped = shape_frame(df, plan, options, job.dialect, columns, branches, on_driver)
        log.info(
            "xasink job %s: writing %s into %s (mode %s, write %d of the transaction)",
            plan.job_id,
            "1 branch from the driver" if on_driver else f"{branches} branches",
            pre.table,
            options.mode,
            len(self._writes) + 1,
        )
        part = select_winners(plan, write_branches(shaped, plan, on_driver), branches, planned)
        self._partitions += branches
        member = self._members.get(s.spec)
        (member.parts if member else self._parts).append(part)
        where = member.where if member else ""
        self._writes.append(
            TableWrite(str(pre.table), options.mode, part.rows, len(part.winners), where)
        )

    def _joined(
        self, df: DataFrame, request: JobRequest, branches: int, on_driver: bool
    ) -> tuple[Job | None, Preflight]:
        """The job with this write's request, preflight done and the write added: the
        first write opens the job (registered, or, while every write is small, held for
        one local transaction); a later one joins it, registering a held job first when
        it is large."""
        job = self._job
        # The branches this write adds to the server's prepared ones (held writes too,
        # when it makes them branches); the earlier writes' are prepared already.
        needed = branches + (len(self._held or ()) if not on_driver else 0)
        if job is None:
            self._trace = JobTrace.of(request, self._clock)
            self._trace.writer = "driver" if on_driver else "tasks"
            job = self._stack.enter_context(
                open_job(request, reuse=True, checks=CHECKS, trace=self._trace)
            )
            self._job = job
            pre = job.preflight(df.schema, needed)
            self._check_table(job, pre.table)
            staged = request.options.staged
            small = on_driver and (not staged or job.can_stage_temporarily())
            begun = job.begin(pre, df.columns, self._lease, one_phase=small)
            self._recovered += begun.recovered
            if isinstance(begun, Skipped):
                self._skipped = begun
                return None, pre
            if small:
                self._held = []
            else:
                self._run(job)
        else:
            job.request = request
            self._check_table(job, self._identity(job, request.target), record=False)
            pre = job.preflight(df.schema, needed)
            self._check_table(job, pre.table)
            assert self._trace is not None
            self._trace.table += f", {request.target}"
            if self._skipped is not None:
                return None, pre
            small = on_driver and (not request.options.staged or job.can_stage_temporarily())
            if self._held is not None and not small:
                resolved = job.request  # the promotion plans each held write with its own
                self._promote(job)
                job.request = resolved
            self._recovered += add_write(job, pre, df.columns, self._held is None)
        return job, pre

    def _elsewhere(
        self, df: DataFrame, request: JobRequest, branches: int
    ) -> tuple[Job | None, Preflight]:
        """A write into another database: its participant job (opened and enlisted at its
        first write) with this write added. The coordinator's job must exist, registered."""
        coordinator = self._job
        if coordinator is None:
            raise ConfigurationError(
                "The first write of a transaction goes into its own database (the one "
                "xasink.transaction was given), which records the decision: write there first, "
                "then into the others with tx.write(df, table, database=...)."
            )
        if self._held is not None:
            self._promote(coordinator)
        member = self._members.get(request.spec)
        job = member.job if member else self._stack.enter_context(open_job(request))
        if member is None:
            same_database(coordinator, job, [m.job for m in self._members.values()])
        job.request = request
        if member is not None:
            self._check_table(job, self._identity(job, request.target), record=False)
        pre = job.preflight(df.schema, branches)
        self._check_table(job, pre.table)
        if member is None:
            self._recovered += enlist(coordinator, job, pre, df.columns, self._lease)
            member = self._members[request.spec] = Member(job)
            self._stack.enter_context(job.running(self._settings.commit.heartbeat_interval))
        else:
            self._recovered += add_write(job, pre, df.columns)
        assert self._trace is not None
        self._trace.table += f", {member.where}:{request.target}"
        return job, pre

    def redactor(self, *more: ConnectionSpec) -> Redactor:
        """Every password of the transaction's databases (and of `more`), for its errors."""
        specs = [self._settings.spec, *(m.job.spec for m in self._members.values()), *more]
        return Redactor(secrets_of(specs))

    @property
    def _named(self) -> str:
        """The tables a transaction of several writes names in its messages, as the server
        resolved them ("": one write's plan names its own table)."""
        return ", ".join(w.table for w in self._writes) if len(self._writes) > 1 else ""

    @property
    def _lease(self) -> float:
        return defaults.LEASE_INTERVALS * self._settings.commit.heartbeat_interval

    def _run(self, job: Job) -> None:
        self._stack.enter_context(job.running(self._settings.commit.heartbeat_interval))

    def _promote(self, job: Job) -> None:
        """A large write joins held small ones: they become the registered job's first
        branches, and the transaction goes on in two phases."""
        assert self._held is not None and self._trace is not None
        held, self._held = self._held, None
        self._trace.writer = "tasks"
        parts = promote(job, held, self._lease, self._partitions, lambda: self._run(job))
        self._parts += parts
        self._partitions += len(parts)

    def _check_table(self, job: Job, table: TableRef, record: bool = True) -> None:
        """Refuse a table the transaction wrote already; checked before preflight too, so
        that schema evolution never waits to alter a table the transaction's own prepared
        branches hold."""
        if (job.journal.tag, table) in self._tables:
            raise ConfigurationError(
                f"{table} is written twice in one transaction: union the DataFrames (or "
                "deduplicate them) and write it once."
            )
        if record:
            self._tables.add((job.journal.tag, table))

    @staticmethod
    def _identity(job: Job, target: TableRef) -> TableRef:
        """The table as the server resolves it (as preflight names it), or as given."""
        return job.dialect.table_identity(job.conn, target) or target


def _mode_options(
    given: WriteOptions, columns: Sequence[str], per_branch_appends: bool
) -> ModeOptions:
    """The write's mode and what goes with it, checked against the DataFrame's columns
    and the transaction's `per_branch_appends`."""
    options = ModeOptions.build(
        given.get("mode", defaults.MODE),
        given.get("key"),
        given.get("op"),
        given.get("order"),
        given.get("op_values"),
        columns,
        given.get("replace_where"),
        given.get("pre_sql"),
        given.get("post_sql"),
    )
    if per_branch_appends and options.mode != APPEND:
        raise ConfigurationError(
            f"per_branch_appends=True takes appends only, not mode={options.mode!r}: a "
            "staged apply refused after the appends committed could not take them back."
        )
    if per_branch_appends and options.actions:
        raise ConfigurationError(
            "per_branch_appends=True commits each append's branches into its table, with "
            "no apply transaction to run pre_sql or post_sql in: drop them, or "
            "per_branch_appends."
        )
    return options


__all__ = ["TableWrite", "Transaction", "TransactionResult"]
