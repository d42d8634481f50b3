"""A small job in one local transaction, committed in one phase (no XA): the driver loads
its rows, and a transaction's other small writes, then `single_branch.commit_in_branch` adds the
job's whole bookkeeping and the staged apply, and one COMMIT makes all of it durable."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa

from .._testing.faults import trigger
from ..dialects import Dialect, get_dialect
from ..errors import JobAbortedError, WriteError
from ..protocol import applying, sessions
from ..protocol.applying import Finished, JobOrderError, StagedPlan
from ..protocol.jobtables import joined_modes
from ..protocol.sessions import open_session
from ..protocol.single_branch import commit_in_branch
from ..protocol.states import JobEnded
from ..protocol.xa import XaSession
from ..runtime.jdbc import JdbcConnection, execute
from ..spec import ConnectionSpec
from ..tables.actions import refused_by
from ..tables.applier import load_order
from ..tables.catalog import table_columns
from ..tables.modes import APPEND
from ..tables.retyping import ChangedTypesError, check_types
from ..tables.staging import ApplyPlan, ApplyPlans, branch_problem, is_data_error
from .branch import BRANCH_ROLE, Load, quietly, report_of, without_skipped_ops
from .contract import JOB_ENDED, BranchOutcome, BranchReport, WritePlan

log = logging.getLogger("xasink")

#: A job's writes: each one's plan and its rows.
Parts = Sequence[tuple[WritePlan, Iterator[pa.RecordBatch]]]


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


def write_one_phase(
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    more: Sequence[tuple[WritePlan, Iterator[pa.RecordBatch]]] = (),
    registered: bool = False,
) -> BranchReport:
    """A single-branch job in one local transaction, committed in one phase: the rows, and
    with them the job's row born committed, a streaming batch's sink mark, a staged mode's
    apply from a temporary staging table (`single_branch.commit_in_branch`). Nothing is prepared
    and nothing survives a crash before the commit: there is nothing to decide or recover.
    `more`: a transaction's other small writes, loaded into the same transaction, and
    applied with this one's (parents first). A `registered` job (format("xasink")'s, whose
    tasks shipped their rows to its commit) has a running row and its own staging table.

    Returns the partition's report; `problem` is set (nothing committed) for rows a staged
    mode cannot apply, or ONE_PHASE_TAKEN when the sink's mark had reached the batch. Raises
    LocalCommitUnknown when the commit's outcome is unknown, JobOrderError while an older
    decided staged job on the table is unfinished, JobAbortedError when an operator's fence
    settled the job first, InputDataError when the target refuses staged rows, WriteError
    for any other failure (nothing committed)."""
    parts = [(plan, batches), *more]
    staged = ApplyPlans.together([p.apply for p, _ in parts])
    dialect = get_dialect(plan.spec.dialect)
    session, keep = _local_session(plan.spec), False
    conn = session.connection
    loads: list[Load] = []
    direct: Parts | None = None
    try:
        # Nothing in the transaction waits for a lock longer than the journal's. The kept
        # session stays bounded for the next job (a task's branch unbinds it first).
        sessions.bind_lock_wait(session, dialect, plan.journal.lock_wait)
        conn.setAutoCommit(False)
        direct = _direct(parts, conn, dialect, staged)
        if staged is not None:  # before any row is loaded: see `_direct`
            applying.lock_apply(plan.journal, conn, staged)
        rows, path, problem = _load(direct or parts, conn, loads, direct is not None)
        if not problem:  # reads, then waits for locks: READ COMMITTED (see Journal)
            try:
                finished = _bookkeeping(parts, conn, rows, staged, registered, direct is None)
                problem = "" if finished else ONE_PHASE_TAKEN
            except JobEnded:  # a recovery run aborted the registered job first
                finished, problem = None, JOB_ENDED
        if problem:
            conn.rollback()
            return report_of(0, 0, "", BranchOutcome(0, path, problem))
        for load in loads:  # the temporary staging tables this transaction made
            if load.plan.stage_ddl:
                execute(conn, f"{dialect.drop_temporary} {dialect.qualified(load.plan.table)}")
        trigger(plan.faults, "before_local_commit", 0, 0)
        stale = finished.stale if finished else 0
        report = report_of(0, 0, "", BranchOutcome(rows, path, stale=stale))
        try:
            conn.commit()
            keep = True
        except BaseException as exc:  # an interrupt too: the COMMIT may have been sent
            raise LocalCommitUnknown(plan.spec.redact(exc), report) from None
    except BaseException as exc:
        for load in loads:
            quietly(load.abort, session)
        quietly(conn.rollback, session)
        passed = (KeyboardInterrupt, SystemExit, LocalCommitUnknown, JobOrderError, JobAbortedError)
        if isinstance(exc, passed):
            raise
        if isinstance(exc, ChangedTypesError):
            raise ChangedTypesError(
                f"{exc}: job {plan.job_id} was rolled back and nothing of it was written. Run "
                "the write again: it reads the table's column types as they are now."
            ) from None
        if staged is not None and is_data_error(exc):
            redact = plan.spec.redact
            raise refused_by(plan.target, plan.job_id, exc, redact, direct is None) from None
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
        if staged is not None:
            applying.release_apply_lock(plan.journal, conn, staged)
        # Closed instead where the apply ran a write's own statements (`run_actions` marks it).
        sessions.park(plan.spec, BRANCH_ROLE, session)
    except Exception:
        session.close()
    except BaseException as interrupt:  # KeyboardInterrupt, SystemExit: committed all the same
        session.close()
        raise InterruptedAfterCommit(report, interrupt) from interrupt
    return report


def _bookkeeping(
    parts: Parts,
    conn: JdbcConnection,
    rows: int,
    staged: StagedPlan | None,
    registered: bool,
    applies: bool,
) -> Finished | None:
    """The job's bookkeeping in its one transaction (`commit_in_branch`), with the modes
    of its writes, in order."""
    plan = parts[0][0]
    table = str(plan.apply.target) if plan.apply is not None else str(plan.table)
    modes = joined_modes(p.apply.mode if p.apply else APPEND for p, _ in parts)
    return commit_in_branch(
        plan.journal, conn, plan.job_id, table, rows, plan.sink, staged, registered, modes, applies
    )


def _direct(
    parts: Parts, conn: JdbcConnection, dialect: Dialect, staged: StagedPlan | None
) -> Parts | None:
    """A transaction's held appends (every part a staged append without statements), to
    load straight into their tables, parents first; None: the parts load as they are.

    No temporary staging table and no apply, yet the same guarantees: one transaction,
    so readers see every table old or every one new; the catalog's foreign keys order
    the loads (a table that references itself, or a cycle, stays staged, where the apply
    orders its rows); and the order with staged jobs, as their applies keep it: the apply
    locks are taken before the first row is loaded, and `lock_apply_order` refuses the
    transaction while an older decided staged job on one of its tables is unapplied
    (whose later apply would otherwise overwrite the appended rows). Model:
    `model/apply.pml` -DDIRECT."""
    plans = [p.apply for p, _ in parts]
    if staged is None or not all(_appends_directly(p) for p in plans):
        return None
    order = load_order(conn, dialect, [p.target for p in plans if p is not None])
    return None if order is None else [parts[i] for i in order]


def _load(
    parts: Parts, conn: JdbcConnection, loads: list[Load], direct: bool = False
) -> tuple[int, str, str]:
    """Every part's rows into its table (a temporary staging table made here, or its
    target; `direct`: a staged append's target, its column types held as planned);
    returns (rows, load paths, the first part's problem or "")."""
    rows, paths, problem = 0, set[str](), ""
    for part, batches in parts:
        dialect = get_dialect(part.spec.dialect)
        if direct and part.apply is not None:
            part = _into_target(conn, dialect, part)
        loads.append(Load(part, conn, _staged_types(part, conn, dialect)))
        if part.apply is not None and part.apply.op_skip:
            batches = without_skipped_ops(part.apply, batches)
        part_rows, path = loads[-1].run(batches, 0, 0)
        rows, paths = rows + part_rows, paths | {path}
        problem = problem or (part.apply and branch_problem(conn, dialect, part.apply)) or ""
    return rows, ",".join(sorted(filter(None, paths))), problem


def _into_target(conn: JdbcConnection, dialect: Dialect, plan: WritePlan) -> WritePlan:
    """A staged append's plan, loading its target instead, once the target's column types
    are those its rows were shaped for (and held so until the commit, as a staged apply
    checks them: `retyping.check_types`)."""
    apply = plan.apply
    assert apply is not None
    check_types(conn, dialect, apply.target, apply.columns, apply.types)
    return dataclasses.replace(plan, table=apply.target, stage_ddl="", apply=None)


def _appends_directly(plan: ApplyPlan | None) -> bool:
    """A staged append that runs no statements of its own (`_direct`)."""
    return plan is not None and plan.mode == APPEND and not plan.pre_sql and not plan.post_sql


def _staged_types(plan: WritePlan, conn: JdbcConnection, dialect: Dialect) -> Sequence[str]:
    """The load table's column types: a temporary staging table's are read once this
    statement has made it (inside the transaction), a target's come with the plan."""
    if not plan.stage_ddl:
        return plan.column_types
    execute(conn, plan.stage_ddl)
    return tuple(table_columns(conn, dialect, plan.table, plan.spec.redact).values())


#: A single-branch job's problem when its sink's mark had reached its batch.
ONE_PHASE_TAKEN = "the sink's batch was taken"


def _local_session(spec: ConnectionSpec) -> XaSession:
    """The kept writer session if it still answers, else a new one."""
    return sessions.take(spec, BRANCH_ROLE) or open_session(spec)
