"""A transaction's small writes: collected by the driver and held until the block ends, then
written with every table's apply in ONE local transaction (no XA: the one-phase path of a
single small write_xa, generalised to several tables). Should a large write join the
transaction, the held writes become driver-written branches of the registered job first
(`promote`), and the transaction goes on in two phases."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from ..driver.decision import phase_one_failed, select_winners
from ..driver.job import Job
from ..driver.one_phase import commit_one_phase
from ..driver.plan import apply_plan_for
from ..driver.request import JobRequest, PhaseOne, Preflight
from ..executor.branch import without_skipped_ops, write_rows
from ..executor.contract import BranchReport, WritePlan
from ..executor.one_phase import write_one_phase
from ..protocol.jobtables import joined_modes
from ..runtime.timing import step
from ..tables.staging import ApplyPlan, ApplyPlans
from .frame import shape_frame
from .session import job_label
from .tasks import collect_small_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType


@dataclass(frozen=True)
class HeldWrite:
    """A small write's rows in the driver, and what writing them needs."""

    request: JobRequest
    pre: Preflight
    schema: StructType
    columns: tuple[str, ...]
    plan: WritePlan
    batches: list[pa.RecordBatch]

    @property
    def rows(self) -> int:
        """The rows it writes: a change feed's skipped ops (update_preimage) left out, as
        its load leaves them out."""
        apply, batches = self.plan.apply, iter(self.batches)
        if apply is not None and apply.op_skip:
            batches = without_skipped_ops(apply, batches)
        return sum(b.num_rows for b in batches)


def hold(job: Job, pre: Preflight, df: DataFrame) -> HeldWrite:
    """Collect a small write's rows, shaped for its temporary staging table (or its table)."""
    plan, columns = job.make_plan(pre, df.schema, one_phase=True)
    with step("shape frame"):
        shaped = shape_frame(df, plan, job.request.options, job.dialect, columns, 1, True)
    label = f"xasink transaction write into {pre.table} (job {plan.job_id})"
    try:
        with step("collect the frame"), job_label(df.sparkSession, label, f"xasink-{plan.job_id}"):
            batches = collect_small_frame(shaped)
    except Exception as exc:  # Spark could not produce the rows: nothing was written
        raise phase_one_failed(plan, exc, on_driver=True) from exc
    return HeldWrite(job.request, pre, df.schema, tuple(df.columns), plan, batches)


def commit_held(job: Job, held: Sequence[HeldWrite], tables: str) -> PhaseOne:
    """Every held write, and the job's bookkeeping, in one local transaction."""
    first, *rest = held
    job.plan = dataclasses.replace(first.plan, tables=tables)

    def write(plan: WritePlan) -> BranchReport:  # again after finishing an older job:
        more = [(h.plan, iter(h.batches)) for h in rest]  # every write's rows read anew
        with step("one local transaction"):
            return write_one_phase(plan, iter(first.batches), more)

    return commit_one_phase(job, write)


def promote(
    job: Job,
    held: Sequence[HeldWrite],
    lease: float,
    partitions: int,
    run: Callable[[], object],
) -> list[PhaseOne]:
    """Register the job with the held writes' real staging tables (recorded before they
    exist), `run` it (`Job.running`: from here a failure aborts it), then write each held
    write as a branch the driver prepares, its partitions numbered from `partitions`."""
    assert job.job_id is not None
    plans: list[ApplyPlan | None] = []
    for h in held:
        index = sum(p is not None for p in plans)
        options, table = h.request.options, h.pre.table
        plans.append(
            apply_plan_for(options, table, h.columns, h.pre.targets, job.job_id, job.journal, index)
        )
    staged = [p for p in plans if p is not None]
    job.apply = None if not staged else staged[0] if len(staged) == 1 else ApplyPlans(tuple(staged))
    first = held[0].request
    job.journal.begin_job(
        job.conn,
        job.job_id,
        str(held[0].pre.table),
        job.apply,
        lease,
        first.sink,
        modes=joined_modes(job.modes),
    )
    run()
    parts = []
    for number, (h, plan) in enumerate(zip(held, plans, strict=True)):
        job.request, job.current = h.request, plan
        written, _ = job.make_plan(h.pre, h.schema, partition_base=partitions + number)
        report = write_rows(written, iter(h.batches), written.partition_base, 0, 0)
        parts.append(select_winners(written, [dataclasses.replace(report, peak_rss_kb=0)], 1, True))
    return parts


__all__ = ["HeldWrite", "commit_held", "hold", "promote"]
