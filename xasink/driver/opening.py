"""Opening a job: its journal connection, kept or closed when the job ends, and a due round
of its journal's retention after a job that ended. A new job (`open_job`: `write_xa`, a
transaction, a data source's `writer()`) or one minted by another process and resumed
from its pickled plan (`resume_job`: a data source's `commit()` or `abort()`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from ..executor.contract import WritePlan
from ..protocol import retention, sessions
from ..protocol.connecting import JOURNAL_ROLE, journal_connection, open_journal
from ..protocol.states import FINAL_STATES, JobState
from ..tables.actions import runs_actions
from ..tables.applier import STAGED_APPLY
from .check_cache import UNCACHED, CheckCache
from .job import Job
from .report import JobTrace
from .request import JobRequest


@contextlib.contextmanager
def open_job(
    request: JobRequest,
    reuse: bool = False,
    checks: CheckCache = UNCACHED,
    trace: JobTrace | None = None,
) -> Iterator[Job]:
    """A new job's journal connection. With `reuse` (write_xa), sessions are kept for the
    next call of this process; preflight checks that passed are kept in `checks`. Both are
    forgotten on any failure."""
    spec, lock_wait = request.spec, request.commit.lock_wait_timeout
    session, journal = open_journal(
        spec, request.journal_schema, lock_wait, reuse=reuse, staged=STAGED_APPLY
    )
    job = Job(request, session, journal, trace, reuse=reuse, checks=checks)
    with _held(job, reuse, checks.forgotten_on_failure(spec)):
        yield job


@contextlib.contextmanager
def resume_job(
    plan: WritePlan,
    request: JobRequest,
    trace: JobTrace | None = None,
    reuse: bool = False,
) -> Iterator[Job]:
    """The job of `plan`, in another process than the one that minted it. With `reuse`
    (a Spark worker that commits batch after batch), sessions are kept for the next job of
    this process, as `open_job` keeps them."""
    trace = trace if trace is not None else JobTrace.of(request, spark_worker=True)
    trace.job_id, trace.state, trace.sink = plan.job_id, JobState.RUNNING, plan.sink
    journal = plan.journal
    session = journal_connection(request.spec, journal.lock_wait, reuse=reuse)
    job = Job(request, session, journal, trace, reuse=reuse)
    job.job_id, job.apply, job.current, job.plan = plan.job_id, plan.apply, plan.apply, plan
    with _held(job, reuse):
        yield job


@contextlib.contextmanager
def _kept(job: Job) -> Iterator[None]:
    """The job's session, handed back for reuse if the block succeeds, unless its apply
    ran a write's own statements (they may have changed the session); else closed."""
    try:
        yield
    except BaseException:
        job.session.close()
        raise
    if runs_actions(job.apply):
        job.session.close()
    else:
        sessions.give(job.spec, JOURNAL_ROLE, job.session)


@contextlib.contextmanager
def _held(job: Job, reuse: bool, *more: AbstractContextManager[Any]) -> Iterator[None]:
    """The job's session (kept for reuse on success, else closed), `more`, and what the job
    opens, for the block; then, after a job that ended, a due round of its journal's
    retention."""
    with contextlib.ExitStack() as stack:
        if reuse:
            stack.enter_context(_kept(job))
        else:
            stack.enter_context(job.session)
        for context in more:
            stack.enter_context(context)
        stack.enter_context(job.closing)
        yield
        if job.trace.state in FINAL_STATES:
            retention.tend(job.journal, job.session, job.spec)


__all__ = ["open_job", "resume_job"]
