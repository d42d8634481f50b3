"""Phase 2 on the driver: commit the winners, roll back every other attempt, then finish the
job (for a staged mode, apply it in the same transaction). From here on the job is decided:
nothing rolls it back, and every failure says to run `xasink recover`."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .. import defaults
from .._testing.faults import trigger
from ..errors import CommitError, LostBranchError
from ..executor.contract import WritePlan
from ..protocol import links
from ..protocol.applying import Finished, JobOrderError
from ..protocol.branches import BranchOps, commit_group
from ..protocol.connecting import journal_connection
from ..protocol.journal import Journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.states import JobState
from ..protocol.waiting import blocked_detail
from ..runtime.jdbc import JdbcConnection
from ..runtime.timing import step
from ..spec import ConnectionSpec
from ..tables.actions import refused_by
from ..tables.retyping import ChangedTypesError
from ..xid import BranchId
from .decision import fence
from .request import PhaseOne

log = logging.getLogger("xasink")
T = TypeVar("T")


def commit_all(
    plan: WritePlan, ops: BranchOps, conn: JdbcConnection, phase_one: PhaseOne, parallelism: int
) -> tuple[int, int]:
    """Phase 2: commit the winners, then roll back every other attempt of this job, then
    finish it. Returns (losing attempts rolled back, staged changes the apply skipped)."""
    trigger(plan.faults, "after_decision")
    last_report = time.monotonic()
    winners = phase_one.winners

    def progress(done: int, total: int) -> None:
        nonlocal last_report
        if time.monotonic() - last_report > 5:
            log.info("xasink job %s: committed %d/%d branches", plan.job_id, done, total)
            last_report = time.monotonic()

    with step("phase 2 (commit)"):
        group = commit_group(
            winners,
            ops=ops,
            parallelism=parallelism,
            after_first=lambda: trigger(plan.faults, "after_first_commit"),
            progress=progress,
        )
    if group.errors:
        failed = "; ".join(f"{b.name}: {e}" for b, e in list(group.errors.items())[:5])
        raise CommitError(
            f"Committing {len(group.errors)} branch(es) of job {plan.job_id} failed ({failed}). "
            "The commit decision is recorded, so run `xasink recover` to finish the commit. "
            "Do not run the write again."
        )
    winner_keys = {(w.partition, w.attempt) for w in winners}
    with step("sweep"):
        losers = roll_back_others(plan.spec, plan.job_id, ops, keep=winner_keys)
    if group.lost:
        _raise_lost(plan, conn, group.lost, phase_one.rows_of)
    trigger(plan.faults, "before_finish")
    with step("finish"):
        stale = _finish(plan, ops, conn, winner_keys)
    return losers, stale


def on_live_connection(plan: WritePlan, conn: JdbcConnection, call: Callable[[Any], T]) -> T:
    """`call(conn)`; if that fails because `conn` died (e.g. the server restarted during
    phase 2), once more on a fresh journal connection."""
    try:
        return call(conn)
    except Exception:
        try:
            alive = bool(conn.isValid(2))
        except Exception:
            alive = False
        if alive:
            raise
    session = journal_connection(plan.spec, plan.journal.lock_wait)
    with session:
        return call(session.connection)


#: How often a staged job helps older decided jobs on its table finish before its own apply.
HELP_ROUNDS = 3


def _finish_in_order(
    plan: WritePlan, ops: BranchOps, conn: JdbcConnection, winners: set[tuple[int, int]]
) -> tuple[Finished | None, Exception | None]:
    """`finish_or_refuse`; while an older decided staged job on the table is unfinished,
    finish that one first (as recovery would: it is decided), then try again."""
    for attempt in range(HELP_ROUNDS + 1):
        try:
            return plan.journal.finish_or_refuse(conn, plan.job_id, winners)
        except JobOrderError as exc:
            if attempt == HELP_ROUNDS:
                raise
            log.info("xasink job %s: finishing older job %s first", plan.job_id, exc.blocker)
            resolve_in_doubt(ops, conn, plan.journal, job=exc.blocker, grace=defaults.GRACE)
    raise AssertionError("unreachable")


def _raise_lost(
    plan: WritePlan, conn: JdbcConnection, lost: list[BranchId], rows_of: dict[int, int]
) -> None:
    names = [b.name for b in lost]
    partitions = ", ".join(f"{b.partition} ({rows_of.get(b.partition, 0)} rows)" for b in lost)
    link = links.linked(plan.journal, conn, plan.job_id)
    if link is not None:
        raise LostBranchError(
            f"{len(names)} winning branch(es) of job {plan.job_id} in {plan.target} were "
            f"rolled back before commit (partitions {partitions[:300]}) by something outside "
            f"xasink (an administrator, or a server without durable XA): "
            f"{links.lost_here(link, plan.apply is not None)}.",
            names,
        )
    if plan.apply is not None and plan.journal.abandon(conn, plan.job_id):
        raise LostBranchError(
            f"{len(names)} winning branch(es) of job {plan.job_id} were rolled back before "
            f"commit (partitions {partitions[:300]}), so the staged rows are incomplete. "
            f"Nothing was applied: {plan.target} is unchanged and the job is aborted. "
            "Something outside xasink rolled them back (an administrator, or a server "
            "without durable XA). Run the write again.",
            names,
        )
    raise LostBranchError(
        f"{len(names)} winning branch(es) of job {plan.job_id} were rolled back before "
        f"commit: the rows of partition(s) {partitions[:300]} are NOT in {plan.target}; the "
        "other partitions' rows ARE, so do not run the whole write again (it would duplicate "
        "them). Something outside xasink rolled them back (an administrator, or a server "
        "without durable XA). Write the missing rows again, then close the job with "
        f"`xasink resolve {plan.job_id} --abandon`.",
        names,
    )


def _finish(
    plan: WritePlan, ops: BranchOps, conn: JdbcConnection, winners: set[tuple[int, int]]
) -> int:
    """Mark the job committed (and, for a staged mode, apply it in the same transaction);
    returns how many staged changes the apply skipped (0 when another process applied).

    A staged apply the target refuses (constraint, value) ends the job aborted with the
    target unchanged; any other failure leaves the decision for `xasink recover`. Success
    is reported only for a job that is `committed`, by this call or by another process."""
    journal = plan.journal
    try:
        finished, refusal = on_live_connection(
            plan, conn, lambda c: _finish_in_order(plan, ops, c, winners)
        )
    except JobOrderError as exc:
        raise CommitError(
            f"Job {plan.job_id} is committed in its branches, but not applied yet: {exc}, and "
            f"it could not be finished now. Run `xasink recover` to finish both; `xasink "
            f"jobs` shows what blocks job {exc.blocker}."
        ) from None
    except Exception as exc:
        reason = plan.spec.redact(exc)
        if journal.dialect.is_lock_timeout(exc):
            reason = blocked_detail(ops, conn, journal, plan.job_id, reason)
        raise CommitError(
            f"Job {plan.job_id} is committed in its branches, but finishing it failed "
            f"({reason}). Run `xasink recover` to finish it; do not run the write again."
        ) from None
    if isinstance(refusal, ChangedTypesError):
        raise ChangedTypesError(
            f"Job {plan.job_id} is committed in its branches, but {refusal}: the job is "
            f"aborted and {plan.target} is unchanged (its staging table is dropped next, or "
            "by `xasink recover`). Run the write again: it reads the table's column types "
            "as they are now."
        )
    if refusal is not None and plan.apply is not None:
        raise refused_by(plan.target, plan.job_id, refusal, plan.spec.redact)
    if finished:
        return finished.stale
    state = on_live_connection(plan, conn, lambda c: journal.state(c, plan.job_id))
    if state == JobState.COMMITTED:
        log.info("xasink job %s: another process (a recovery run) finished it", plan.job_id)
        return 0
    raise CommitError(_ended_elsewhere(plan, state, len(winners)))


def _ended_elsewhere(plan: WritePlan, state: str | None, winners: int) -> str:
    """What is in the target when another process (`xasink resolve --abandon`, a recovery)
    ended the job after every winner committed: a staged job's apply never ran, while an
    append job's committed winners are its rows, whatever the job's final state."""
    ended = (
        f"Job {plan.job_id} was ended by another process after its commit decision (state {state})"
    )
    if plan.apply is not None:
        return (
            f"{ended}: nothing was applied and {plan.target} is unchanged. `xasink jobs` shows "
            "who resolved it; run the write again if it was aborted."
        )
    return (
        f"{ended}, but all {winners} of its winning branch(es) had committed: its rows ARE in "
        f"{plan.target}. Do not run the write again (it would duplicate them); `xasink jobs` "
        "shows who ended it."
    )


def roll_back_others(
    spec: ConnectionSpec, job_id: str, ops: BranchOps, keep: set[tuple[int, int]]
) -> int:
    """Roll back this job's prepared branches other than `keep`; returns how many.

    One branch that cannot be rolled back now (e.g. a zombie attempt still attached to its
    session) is logged and left to recovery: it must not hide the job's real outcome.
    """
    done = 0
    for branch, _ in ops.prepared():
        if branch.job_id != job_id or (branch.partition, branch.attempt) in keep:
            continue
        try:
            ops.rollback(branch)
            done += 1
        except Exception as exc:
            log.warning(
                "xasink job %s: could not roll back %s yet (%s); `xasink recover` will",
                job_id,
                branch.name,
                spec.redact(exc),
            )
    return done


def abort_job(
    spec: ConnectionSpec, journal: Journal, conn: JdbcConnection, ops: BranchOps, job_id: str
) -> str | None:
    """Mark the job aborted, then roll back its branches; returns its state then.

    Branches are rolled back only once the journal says `aborted`; if that cannot be
    established, they stay prepared for `xasink recover`, which decides from the journal.
    Never raises."""
    state: str | None = None
    try:
        try:
            journal.abort(conn, job_id)
            state = journal.state(conn, job_id)
        except Exception:  # the journal connection broke: the fence uses a fresh one
            state = fence(spec, journal, job_id)
        if state != JobState.ABORTED:
            log.error(
                "xasink job %s is %s, not aborted: leaving its branches to `xasink recover`",
                job_id,
                state or "in an unknown state",
            )
            return state
        roll_back_others(spec, job_id, ops, keep=set())
    except Exception as exc:
        log.error(
            "xasink job %s is aborted, but rolling back its branches is incomplete (%s); "
            "`xasink recover` rolls back the rest",
            job_id,
            spec.redact(exc),
        )
    return state
