"""format("xasink")'s small partitions: shipped to `commit()` in the tasks' messages.

A task whose partition fits `driver_write_bytes` writes nothing: it puts its rows in its
commit message (Arrow IPC), which Spark carries to the driver-side `commit()`, one message
per partition from the attempt it chose (a losing, failed or killed attempt's never
arrives). A batch whose every partition was shipped is then written by `commit()` in ONE
local transaction with the job's bookkeeping (`commit_one_phase` on the job registered by
`mint`, whose running row the transaction moves to committed, as a decision does): no XA,
nothing prepared, no task connection. A partition above the bound goes on into its own
prepared branch, as before; then the shipped rows become one more branch, written by the
driver before the decision, and the job commits in two phases. Should `commit()` die, Spark
runs the batch again (a new job); the old one, running, is aborted by recovery.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa

from ..driver.decision import select_winners
from ..driver.job import Job
from ..driver.one_phase import commit_one_phase
from ..driver.phase_two import roll_back_others
from ..driver.request import PhaseOne
from ..executor.branch import write_rows
from ..executor.contract import BranchReport, WritePlan
from ..executor.one_phase import write_one_phase
from ..protocol.heartbeat import Heartbeat
from ..runtime.timing import step
from ..xid import FORMAT_ID, BranchId
from .tasks import task_context, write_task

log = logging.getLogger("xasink")


@dataclasses.dataclass(frozen=True)
class Shipment:
    """One task's outcome: its report, and its rows when it shipped them."""

    report: BranchReport
    #: The partition's rows as an Arrow IPC stream; None when a branch holds them (or none).
    #: Left out of repr: rows are the user's data, never a log line's.
    rows: bytes | None = dataclasses.field(default=None, repr=False)
    #: Not the partition's first attempt: an earlier one may have prepared a branch.
    retried: bool = False


def ship_or_write(
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    bound: int,
    before_branch: Callable[[], None],
) -> Shipment:
    """Hold the partition's rows up to `bound` bytes (0: never): all of them fit, ship
    them; else write them all into one prepared branch (`before_branch` first). A worker
    holds at most the bound and one batch."""
    if not bound:
        before_branch()
        return Shipment(write_task(plan, batches))
    context = task_context()
    held: list[pa.RecordBatch] = []
    size = 0
    heartbeat = _task_heartbeat(plan)
    try:
        for batch in batches:
            held.append(batch)
            size += batch.nbytes
            if size > bound:
                break
        else:
            partition = plan.partition_base + context.partitionId()
            retried = context.attemptNumber() > 0
            return ship(held, partition, context.taskAttemptId(), retried)
    finally:
        if heartbeat is not None:
            heartbeat.stop(flushed=heartbeat.beat_now)
    before_branch()
    return Shipment(write_task(plan, itertools.chain(held, batches)))


def _task_heartbeat(plan: WritePlan) -> Heartbeat | None:
    """The task's beats for the job. Within the job's first interval a quick task sends
    none (it opens no connection at all: a micro-batch's tasks) and a slow one beats after
    an interval; later, every task beats at its start, as a branch's task does, even a
    quick one: a run of quick tasks must not leave the job silent past its lease."""
    if not plan.task_heartbeat:
        return None
    # (the driver's clock against this executor's: one behind it beats too, at a cost only)
    elapsed = time.time() - plan.minted_at
    late = bool(plan.minted_at) and not 0 <= elapsed < plan.task_heartbeat
    beats = Heartbeat(
        plan.journal, plan.spec, plan.job_id, plan.task_heartbeat, plan.task_lease, late
    )
    return beats.start()


def ship(
    batches: Sequence[pa.RecordBatch], partition: int, attempt: int, retried: bool = False
) -> Shipment:
    """A partition's rows as its message carries them (an Arrow IPC stream)."""
    rows = sum(b.num_rows for b in batches)
    report = BranchReport(partition, attempt, "", rows)
    if not rows:
        return Shipment(report, None, retried)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return Shipment(report, bytes(sink.getvalue()), retried)


def _batches(shipped: Sequence[Shipment]) -> Iterator[pa.RecordBatch]:
    """The shipped rows, partition after partition, read back one at a time."""
    for shipment in shipped:
        if shipment.rows is not None:
            yield from pa.ipc.open_stream(shipment.rows)


def commit_shipped(job: Job, shipments: Sequence[Shipment]) -> PhaseOne:
    """Decide and commit the resumed, running `job` from its tasks' shipments: in one local
    transaction when no task prepared a branch, else with the shipped rows as one more
    branch, written here, in two phases."""
    assert job.plan is not None
    if any(s.report.xid for s in shipments):
        return _as_branch(job, shipments)  # its decision checks the reports
    reports = [s.report for s in shipments]
    select_winners(job.plan, reports, len(reports), True)  # one per partition, every one
    job.plan = dataclasses.replace(job.plan, one_phase=True)
    job.trace.writer = "driver"

    def write(plan: WritePlan) -> BranchReport:  # again after finishing an older job
        with step("one local transaction"):
            return write_one_phase(plan, _batches(shipments), registered=True)

    lost = _roll_back_losers(job, committed=False)
    done = commit_one_phase(job, write, registered=True)
    if lost or any(s.retried for s in shipments):  # other attempts ran: one may prepare late
        _roll_back_losers(job, committed=True)
    return done


def _roll_back_losers(job: Job, committed: bool) -> bool:
    """Roll back what losing attempts prepared, now rather than at the next recovery run;
    returns whether the server listed any. None of them is a winner (`states.SHIPPED`), so
    before the one transaction every prepared branch of the job goes: a speculative copy
    that outgrew the bound holds the keys of the rows shipped (an append's) or the job's
    staging table, on which that transaction would wait, then fail. Spark never tells
    `commit()` of a losing attempt, so the server is asked every time: one listing on the
    job's connection, and the rollbacks' session only when it lists one of the job's. A
    failure is logged, never raised: before, the transaction may still go through; after
    (`committed`), it would report committed rows as failed."""
    job_id, tag = job.job_id, job.journal.tag
    assert job_id is not None
    try:
        with step("losers"):
            listed = job.dialect.prepared_xids(job.conn, FORMAT_ID)
            if listed is not None and not any(
                (b := BranchId.parse(x)) is not None and (b.journal, b.job_id) == (tag, job_id)
                for x in listed
            ):
                return False
            roll_back_others(job.spec, job_id, job.ops, keep=set())
    except Exception as exc:
        log.warning(
            "xasink job %s: %s; rolling back its losing attempts failed (%s): "
            "`xasink recover` rolls them back",
            job_id,
            "committed" if committed else "before its commit",
            job.spec.redact(exc),
        )
    return True


def _as_branch(job: Job, shipments: Sequence[Shipment]) -> PhaseOne:
    """Mixed: the shipped rows as one branch of the job, as the first shipping partition's
    attempt (which opened none), and the other shipping partitions as empty."""
    assert job.plan is not None
    shipped = [s for s in shipments if s.rows is not None]
    reports = [s.report for s in shipments if s.rows is None]
    if shipped:
        first = shipped[0].report
        plan = dataclasses.replace(job.plan, task_heartbeat=0.0)
        with step("shipped rows' branch"):
            report = write_rows(plan, _batches(shipped), first.partition, first.attempt, 0)
        reports.append(dataclasses.replace(report, peak_rss_kb=0))
        reports += [dataclasses.replace(s.report, rows=0) for s in shipped[1:]]
    phase_one = job.decide(reports, len(reports), planned=True)
    job.commit(phase_one)
    return phase_one


__all__ = ["Shipment", "commit_shipped", "ship", "ship_or_write"]
