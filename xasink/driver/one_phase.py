"""A single-branch job, committed in one phase: the driver's side.

The branch's one local transaction holds the rows and the job's whole bookkeeping
(`executor.one_phase.write_one_phase`, `single_branch.commit_in_branch`), so there is no decision to
record and nothing to recover: a failure before its COMMIT leaves nothing, not even the
job's row. What is left to the driver: finish an older decided staged job on the table
first, say why a batch was refused, and settle a COMMIT whose reply was lost with a fence
(never a plain read, which could miss a commit still in flight). Model: `model/sink.pml`.
"""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from .. import defaults
from ..errors import CommitError, DecisionUnknownError, JobAbortedError, XasinkError
from ..executor.contract import BranchReport, WritePlan
from ..executor.one_phase import ONE_PHASE_TAKEN, InterruptedAfterCommit, LocalCommitUnknown
from ..protocol.applying import JobOrderError
from ..protocol.connecting import journal_connection
from ..protocol.recovery import resolve_in_doubt
from ..protocol.single_branch import fence_one_phase
from ..protocol.states import JobState
from ..xid import BranchId
from .decision import select_winners
from .phase_two import HELP_ROUNDS
from .request import PhaseOne
from .sinks import conflict_at_decision

if TYPE_CHECKING:
    from .job import Job

log = logging.getLogger("xasink")


def commit_one_phase(
    job: Job, write: Callable[[WritePlan], BranchReport], registered: bool = False
) -> PhaseOne:
    """Run `write` (the branch's one transaction) and report the job as committed, or
    raise with the job's id; nothing of a failed job exists afterwards (a `registered`
    job's row stays running, for `Job.running` to abort)."""
    plan = job.plan
    assert plan is not None and plan.one_phase and job.job_id is not None
    trace = job.trace
    interrupted: BaseException | None = None
    try:
        report = _written(job, plan, write)
        if report.problem == ONE_PHASE_TAKEN:
            assert plan.sink is not None
            raise conflict_at_decision(job.journal, job.conn, plan.sink, plan.job_id)
        select_winners(plan, [report], 1, True)  # raises for rows a staged mode refuses
    except LocalCommitUnknown as exc:
        settle(job, exc.reason, registered)
        report = exc.report
    except InterruptedAfterCommit as exc:  # committed: recorded as such, then passed on
        report, interrupted = exc.report, exc.interrupt
    except BaseException as exc:
        if isinstance(exc, XasinkError):
            exc.job_id = job.job_id
        if not registered:  # nothing of the job exists: nothing written
            trace.state = JobState.ABORTED
        raise
    trace.done("write")
    phase_one = PhaseOne(
        [BranchId(job.journal.tag, plan.job_id, 0, 0)],
        {0: report.rows},
        report.rows,
        0,
        0,  # no Python worker ran
        (report.path,) if report.path else (),
    )
    trace.rows, trace.load_paths, trace.branches = report.rows, phase_one.load_paths, 1
    trace.stale = report.stale
    job.decided = True
    trace.state = JobState.COMMITTED
    trace.done("decide")
    trace.done("commit")
    if interrupted is not None:
        raise interrupted
    return phase_one


def _written(job: Job, plan: WritePlan, write: Callable[[WritePlan], BranchReport]) -> BranchReport:
    """`write`, after finishing an older decided staged job on the table that blocks it
    (staged jobs apply in decision order; this one's decision is its commit)."""
    for attempt in range(HELP_ROUNDS + 1):
        try:
            return write(plan)
        except JobOrderError as exc:
            if attempt == HELP_ROUNDS:
                raise _order_error(plan, exc) from None
            log.info("xasink job %s: finishing older job %s first", plan.job_id, exc.blocker)
            resolve_in_doubt(job.ops, job.conn, job.journal, job=exc.blocker, grace=defaults.GRACE)
    raise AssertionError("unreachable")


def settle(job: Job, reason: str, registered: bool = False) -> None:
    """The local COMMIT's reply was lost: fence it on a fresh connection (a `registered`
    job's running row as a decision's is: `Journal.fence_decision`). Returns if it landed;
    raises otherwise (aborted for good, or still unknown)."""
    plan = job.plan
    assert plan is not None and job.job_id is not None
    state: str | None = None
    try:
        session = journal_connection(job.spec, job.journal.lock_wait)
        with session:
            conn = session.connection
            state = (
                job.journal.fence_decision(conn, job.job_id)
                if registered
                else fence_one_phase(job.journal, conn, job.job_id, plan.target)
            )
    except Exception as exc:
        log.error("xasink job %s: settling the commit failed: %s", job.job_id, job.spec.redact(exc))
    if state == JobState.COMMITTED:
        log.warning("xasink job %s: the commit held despite: %s", job.job_id, reason)
        return
    error: XasinkError
    if state == JobState.ABORTED:
        job.trace.state = JobState.ABORTED
        error = JobAbortedError(
            f"Committing job {job.job_id} failed ({reason}); it is settled as aborted and "
            f"{plan.target} is unchanged. Run the write again."
        )
    else:
        job.trace.state = None
        where = ["--journal-schema", job.journal.schema] if job.journal.schema else []
        table = [] if registered else ["--table", plan.target]  # no row to settle by
        settle_it = shlex.join(["xasink", "resolve", job.job_id, "--abandon", *table, *where])
        error = DecisionUnknownError(
            f"Committing job {job.job_id} failed and its outcome is unknown ({reason}): its "
            "COMMIT may still be in flight. Do not run the write again yet. Settle it with "
            f"`{settle_it}` (with this job's connection options, within the journal's "
            "retention, 7 days unless set otherwise: the job's row is what tells a commit "
            "that landed): it waits for a COMMIT still in flight, then says "
            "`committed` (its rows are in the table) or `aborted` (nothing of it is; run the "
            "write again)."
        )
    error.job_id = job.job_id
    raise error


def _order_error(plan: WritePlan, exc: JobOrderError) -> CommitError:
    return CommitError(
        f"Job {plan.job_id} was not written: {exc}, and it could not be finished now. Nothing "
        f"of job {plan.job_id} is in {plan.target}. Run `xasink recover` (`xasink jobs` "
        f"shows what blocks job {exc.blocker}), then run the write again."
    )


__all__ = ["commit_one_phase", "settle"]
