"""One partition, one XA branch, prepared and never committed: the branch's whole life.

Runs in a Spark task (or, for a small frame, in the driver): Arrow batches stream through
the loader one at a time, so a worker's memory does not grow with its partition. The only
output is one small report. Nothing here knows Spark (see xasink.spark.tasks).
"""

from __future__ import annotations

import itertools
import logging
import resource
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .._testing.faults import trigger
from ..dialects import get_dialect
from ..errors import JobAbortedError, WriteError
from ..loaders import Loader, open_loader
from ..protocol import applying, sessions
from ..protocol.applying import JobOrderError
from ..protocol.heartbeat import Heartbeat
from ..protocol.sessions import open_session
from ..protocol.states import Decision, JobState
from ..protocol.xa import XaFailure, XaSession
from ..runtime.jdbc import JdbcConnection, execute
from ..spec import ConnectionSpec
from ..tables.catalog import table_columns
from ..tables.modes import OP_COLUMN
from ..tables.retyping import ChangedTypesError
from ..tables.staging import ApplyPlan, branch_problem, is_data_error, refused
from ..xid import BranchId, Xid
from .contract import JOB_ENDED, BranchOutcome, BranchReport, WritePlan

log = logging.getLogger("xasink")

#: The kept-session role (xasink.protocol.sessions) of a writer's session, kept by a
#: reused Python worker between tasks (a driver's own writes keep one too).
BRANCH_ROLE = "branch"


def _report(
    partition: int, attempt: int, xid: str, outcome: BranchOutcome | None = None
) -> BranchReport:
    # Peak RSS of this worker process so far: shows that memory does not grow with rows.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if outcome is None:
        return BranchReport(partition, attempt, xid, peak_rss_kb=peak)
    return BranchReport(partition, attempt, xid, outcome.rows, peak, outcome.path, outcome.problem)


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
    session, started, keep = sessions.unpark(plan.spec, BRANCH_ROLE), False, False
    loader: _Load | None = None
    try:
        session = _start(plan.spec, session, xid)
        started = True
        loader = _Load(plan, session.connection, plan.column_types)
        rows, path = loader.run(batches, branch.partition, attempt_number)
        problem = plan.apply and branch_problem(
            session.connection, get_dialect(plan.spec.dialect), plan.apply
        )
        if not problem and plan.journal.state(session.connection, plan.job_id) != JobState.RUNNING:
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
            sessions.park(plan.spec, BRANCH_ROLE, session)  # for this worker's next partition
        elif session is not None:
            session.close()


class _Load:
    """One branch's rows through the dialect's loader, opened at the first batch (its
    schema picks the encoding); `abort` stops a load cut short."""

    def __init__(self, plan: WritePlan, conn: JdbcConnection, column_types: Sequence[str]):
        self.plan, self.conn, self.column_types = plan, conn, column_types
        self.loader: Loader | None = None

    def run(
        self, batches: Iterator[pa.RecordBatch], partition: int, attempt_number: int
    ) -> tuple[int, str]:
        """Load every batch; returns (rows, load path)."""
        plan, rows = self.plan, 0
        for batch in batches:
            if self.loader is None:
                self.loader = open_loader(
                    get_dialect(plan.spec.dialect),
                    self.conn,
                    plan.table,
                    plan.columns,
                    batch.schema,
                    plan.batch_size,
                    plan.bulk,
                    self.column_types,
                )
            self.loader.write(batch)
            rows += batch.num_rows
            trigger(plan.faults, "after_rows", partition, attempt_number)
        if self.loader is None:
            return rows, ""
        self.loader.finish()
        return rows, self.loader.path

    def abort(self) -> None:
        if self.loader is not None:
            self.loader.abort()


class LocalCommitUnknown(Exception):
    """The commit of a single-branch job's local transaction failed without saying whether
    it landed (e.g. the connection broke): the driver settles it (`fence_one_phase`).
    `report` is the branch's report, should it have landed."""

    def __init__(self, reason: str, report: BranchReport) -> None:
        super().__init__(reason)
        self.reason, self.report = reason, report


class InterruptedAfterCommit(BaseException):
    """An interrupt (KeyboardInterrupt, SystemExit) that landed once a single-branch job's
    local COMMIT had returned: the job is committed, and the driver must say so before it
    passes `interrupt` on. A BaseException, as the interrupt is: nothing may swallow it."""

    def __init__(self, report: BranchReport, interrupt: BaseException) -> None:
        super().__init__(type(interrupt).__name__)
        self.report, self.interrupt = report, interrupt


def write_one_phase(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> BranchReport:
    """A single-branch job in one local transaction, committed in one phase: the rows, and
    with them the job's row born committed, a streaming batch's sink mark, a staged mode's
    apply from a temporary staging table (`Journal.commit_in_branch`). Nothing is prepared
    and nothing survives a crash before the commit: there is nothing to decide or recover.

    Returns the partition's report; `problem` is set (nothing committed) for rows a staged
    mode cannot apply, or ONE_PHASE_TAKEN when the sink's mark had reached the batch. Raises
    LocalCommitUnknown when the commit's outcome is unknown, JobOrderError while an older
    decided staged job on the table is unfinished, JobAbortedError when an operator's fence
    settled the job first, InputDataError when the target refuses staged rows, WriteError
    for any other failure (nothing committed)."""
    if plan.apply is not None and plan.apply.op_skip:
        batches = without_skipped_ops(plan.apply, batches)
    dialect = get_dialect(plan.spec.dialect)
    session, keep = _local_session(plan.spec), False
    conn = session.connection
    load: _Load | None = None
    bound, unbound = dialect.lock_wait_sql(max(1, int(plan.journal.lock_wait)))
    try:
        if bound:  # nothing in the transaction waits for a lock longer than the journal's
            execute(conn, bound)
        conn.setAutoCommit(False)
        column_types: Sequence[str] = plan.column_types
        if plan.stage_ddl:
            execute(conn, plan.stage_ddl)
            column_types = tuple(
                table_columns(conn, dialect, plan.table, plan.spec.redact).values()
            )
        load = _Load(plan, conn, column_types)
        rows, path = load.run(batches, 0, 0)
        problem = plan.apply and branch_problem(conn, dialect, plan.apply)
        if not problem:  # reads, then waits for locks: READ COMMITTED (see Journal)
            decision = plan.journal.commit_in_branch(
                conn, plan.job_id, plan.target, rows, plan.sink, plan.apply
            )
            problem = "" if decision == Decision.DECIDED else ONE_PHASE_TAKEN
        if problem:
            conn.rollback()
            return _report(0, 0, "", BranchOutcome(0, path, problem))
        if plan.stage_ddl:
            execute(conn, f"{dialect.drop_temporary} {dialect.qualified(plan.table)}")
        trigger(plan.faults, "before_local_commit", 0, 0)
        report = _report(0, 0, "", BranchOutcome(rows, path))
        try:
            conn.commit()
            keep = True
        except BaseException as exc:  # an interrupt too: the COMMIT may have been sent
            raise LocalCommitUnknown(plan.spec.redact(exc), report) from None
    except BaseException as exc:
        if load is not None:
            _quietly(load.abort, session)
        _quietly(conn.rollback, session)
        passed = (KeyboardInterrupt, SystemExit, LocalCommitUnknown, JobOrderError, JobAbortedError)
        if isinstance(exc, passed):
            raise
        if isinstance(exc, ChangedTypesError):
            raise ChangedTypesError(
                f"{exc}: job {plan.job_id} was rolled back and nothing of it was written. Run "
                "the write again: it reads the table's column types as they are now."
            ) from None
        if plan.apply is not None and is_data_error(exc):
            raise refused(plan.target, plan.job_id, plan.spec.redact(exc)) from None
        raise WriteError(
            f"Writing job {plan.job_id} into {plan.target} failed by the driver (a "
            f"small frame, one local transaction) ({type(exc).__name__}: "
            f"{plan.spec.redact(exc)}). The transaction was rolled back: nothing was "
            "written. Fix the cause and run the write again."
        ) from None
    finally:
        if not keep:
            session.close()  # a temporary table and any half-done load go with it
    # Committed: from here on nothing may say otherwise. The session is kept for the next
    # job only if it is back in autocommit.
    try:
        conn.setAutoCommit(True)
        if unbound:
            execute(conn, unbound)
        if plan.apply is not None:
            applying.release_apply_lock(plan.journal, conn, plan.apply)
        sessions.park(plan.spec, BRANCH_ROLE, session)
    except Exception:
        session.close()
    except BaseException as interrupt:  # KeyboardInterrupt, SystemExit: committed all the same
        session.close()
        raise InterruptedAfterCommit(report, interrupt) from interrupt
    return report


#: A single-branch job's problem when its sink's mark had reached its batch.
ONE_PHASE_TAKEN = "the sink's batch was taken"


def _local_session(spec: ConnectionSpec) -> XaSession:
    """The kept writer session if it still answers, else a new one."""
    return sessions.take(spec, BRANCH_ROLE) or open_session(spec)


def _job_ended(plan: WritePlan, session: XaSession) -> bool:
    try:
        return plan.journal.state(session.connection, plan.job_id) != JobState.RUNNING
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
