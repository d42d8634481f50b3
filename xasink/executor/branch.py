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

import jpype
import pyarrow as pa
import pyarrow.compute as pc

from .._testing.faults import trigger
from ..dialects import get_dialect
from ..errors import WriteError
from ..loaders import Loader, open_loader
from ..protocol import sessions
from ..protocol.heartbeat import Heartbeat
from ..protocol.sessions import open_session
from ..protocol.states import JobState
from ..protocol.xa import XaFailure, XaSession
from ..runtime.jdbc import JdbcConnection
from ..spec import ConnectionSpec
from ..tables.modes import OP_COLUMN
from ..tables.staging import ApplyPlan, branch_problem
from ..xid import BranchId, Xid
from .contract import JOB_ENDED, BranchOutcome, BranchReport, WritePlan

log = logging.getLogger("xasink")

#: The kept-session role (xasink.protocol.sessions) of a writer's session, kept by a
#: reused Python worker between tasks (a driver's own writes keep one too).
BRANCH_ROLE = "branch"


def report_of(
    partition: int, attempt: int, xid: str, outcome: BranchOutcome | None = None
) -> BranchReport:
    # Peak RSS of this worker process so far: shows that memory does not grow with rows.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if outcome is None:
        return BranchReport(partition, attempt, xid, peak_rss_kb=peak)
    return BranchReport(
        partition, attempt, xid, outcome.rows, peak, outcome.path, outcome.problem, outcome.stale
    )


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
            return report_of(partition, attempt, "")
        branch = BranchId(plan.journal.tag, plan.job_id, partition, attempt)
        rows = itertools.chain([first], non_empty)
        outcome = _write_branch(plan, branch, rows, attempt_number)
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    if outcome.problem:
        return report_of(partition, attempt, "", outcome)  # rolled back: nothing to commit
    trigger(plan.faults, "after_prepare", partition, attempt_number)
    return report_of(partition, attempt, str(branch.xid), outcome)


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
    loader: Load | None = None
    try:
        session = _start(plan.spec, session, xid)
        started = True
        loader = Load(plan, session.connection, plan.column_types)
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
        # A loader or a started branch implies the session it was made on.
        if loader is not None and session is not None:
            quietly(loader.abort, session)
        if started and session is not None:
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


class Load:
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


def _job_ended(plan: WritePlan, session: XaSession) -> bool:
    try:
        return plan.journal.state(session.connection, plan.job_id) != JobState.RUNNING
    except Exception:
        return False  # cannot tell: let the task fail and Spark retry it


def _start(spec: ConnectionSpec, idle: XaSession | None, xid: Xid) -> XaSession:
    """Start the branch on the idle session if it still works, else on a new one."""
    if idle is not None:
        try:
            # A single-branch job kept it with the journal's lock bound (one_phase).
            sessions.unbind_lock_wait(idle, get_dialect(spec.dialect))
            idle.start(xid)
            return idle
        except (XaFailure, jpype.JException) as exc:  # a dead connection, most likely
            log.debug("xasink: a kept writer session failed its first call: %s", spec.redact(exc))
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
    quietly(lambda: session.end(xid, success=False), session)
    quietly(lambda: session.rollback(xid), session)


def quietly(step: Callable[[], object], session: XaSession) -> None:
    try:
        step()
    except Exception as exc:  # the server also rolls back when the connection closes
        log.debug("xasink cleanup step failed: %s", session.redact(exc))
