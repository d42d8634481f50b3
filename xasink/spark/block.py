"""A transaction's block and its end: leaving it normally records one decision for every
write, runs phase 2 and the one apply (or skips a batch decided before, or commits held
small writes in one local transaction); an exception, or a write that failed even if the
block went on, aborts every write, in every database."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..driver.participants import abort_all, commit_all, copy_decisions, winners_of, with_command
from ..driver.report import JobEnd, JobOutcome, PhaseSeconds
from ..driver.request import PhaseOne
from ..driver.transaction import TransactionEnd, TransactionResult, first_staged, joined
from ..errors import ConfigurationError, DecisionUnknownError, XasinkError
from ..protocol.states import JobState
from ..runtime.jdbc import java_errors_redacted
from ..runtime.shutdown import tracked
from .small_writes import commit_held

if TYPE_CHECKING:
    from .transaction import Transaction

log = logging.getLogger("xasink")


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
        _commit(tx)


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


def _commit(tx: Transaction) -> None:
    """One decision for every write, phase 2, and the one apply; or a skip."""
    job, trace = tx._job, tx._trace
    if job is None or trace is None:
        tx.result = TransactionResult("", (), 0, JobOutcome.COMMITTED, PhaseSeconds())
        return
    if tx._skipped is not None:
        trace.decided_by = tx._skipped.mark.job_id
        tx._stack.close()
        _end(tx, trace.end(JobOutcome.SKIPPED))
        return
    if tx._held is not None:
        phase_one = commit_held(job, tx._held, tx._named)
        tx._stack.close()
        _end(tx, trace.end(JobOutcome.COMMITTED), phase_one)
        return
    assert job.plan is not None
    staged = first_staged(job)
    job.plan = dataclasses.replace(job.plan, tables=tx._named, apply=staged, partition_base=0)
    trace.done("write")
    members = list(tx._members.values())
    try:
        phase_one = job.record_decision(joined(tx._parts), winners_of(members) or None)
        copy_decisions(job, members)
        log.info(
            "xasink job %s: %d branches of %d writes prepared (%d rows) and commit decided",
            job.job_id,
            len(phase_one.winners) + sum(len(m.phase_one().winners) for m in members),
            len(tx._writes),
            phase_one.rows + sum(m.phase_one().rows for m in members),
        )
        losers = job.commit(phase_one) + commit_all(job, members)
    except XasinkError as exc:
        if job.decided or isinstance(exc, DecisionUnknownError):
            with_command(exc, job, members)
        raise
    tx._stack.close()  # heartbeat stopped, staging tables dropped, session kept
    _end(tx, trace.end(JobOutcome.COMMITTED), phase_one, losers)


def _end(tx: Transaction, end: JobEnd, phase_one: PhaseOne | None = None, losers: int = 0) -> None:
    tx.ended = TransactionEnd(end, tx._created, phase_one, losers)
    tx.result = TransactionResult(
        tx.job_id or "",
        tuple(tx._writes),
        sum(w.rows for w in tx._writes),
        end.outcome,
        end.seconds,
        end.decided_by,
        tx._recovered,
    )
