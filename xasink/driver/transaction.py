"""The driver's side of `xasink.transaction`: one job that grows by a write at a time (each
write's staged plan joins the job's row before its staging table exists, and its partitions
are numbered after the earlier writes'), then one decision for every write's winners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import defaults
from ..errors import JobAbortedError
from ..protocol.actions import BranchAction
from ..protocol.connecting import make_spec
from ..protocol.jobtables import joined_modes
from ..spec import CommitProperties, ConnectionSpec, Database, TableRef, WriterProperties
from ..tables.modes import ModeOptions
from ..tables.new_table import NewTable
from ..tables.staging import ApplyPlan, ApplyPlans, temporary_stage
from .job import Job
from .plan import apply_plan_for
from .report import JobEnd, JobOutcome, PhaseSeconds
from .request import JobRequest, PhaseOne, Preflight
from .sinks import sink_batch


@dataclass(frozen=True)
class TableWrite:
    """One `tx.write`: its table (as the server resolved it), mode, rows and branches, and
    its database when it is not the transaction's own (its address, without secrets)."""

    table: str
    mode: str
    rows: int
    branches: int
    database: str = ""


@dataclass(frozen=True)
class TransactionResult:
    """What a transaction did (`tx.result`, once its block has ended without an error)."""

    job_id: str
    writes: tuple[TableWrite, ...]
    rows: int
    #: "committed", or "skipped": a streaming batch decided before, nothing written.
    outcome: JobOutcome
    seconds: PhaseSeconds
    decided_by: str | None = None
    recovered: list[BranchAction] = field(default_factory=list)

    @property
    def skipped(self) -> bool:
        return self.outcome == JobOutcome.SKIPPED


@dataclass(frozen=True)
class TransactionEnd:
    """A transaction's job end, and what write_xa's result says beyond it."""

    end: JobEnd
    created: bool
    phase_one: PhaseOne | None
    losers: int


@dataclass(frozen=True)
class TransactionSettings:
    """The transaction's own keywords: one database, its journal, its stream batch."""

    spec: ConnectionSpec
    journal_schema: str | None
    commit: CommitProperties
    per_branch_appends: bool = False
    sink_id: str | None = None
    batch_id: int | None = None

    @classmethod
    def of(
        cls,
        database: Database | str,
        commit: CommitProperties | None,
        per_branch_appends: bool = False,
        sink_id: str | None = None,
        batch_id: int | None = None,
    ) -> TransactionSettings:
        """The database, its journal and the stream batch, checked, as the entry points
        take them."""
        db = Database.of(database)
        sink_batch(sink_id, batch_id)
        commit = commit or CommitProperties()
        return cls(make_spec(db), db.journal_schema, commit, per_branch_appends, sink_id, batch_id)


def write_request(
    settings: TransactionSettings,
    table: TableRef,
    options: ModeOptions,
    create: defaults.Create,
    writer: WriterProperties,
    query_id: str | None,
    new_table: NewTable,
    schema_mode: defaults.SchemaMode | None = None,
) -> JobRequest:
    """One `tx.write`'s request: its table and mode, on the transaction's database."""
    s = settings
    sink = sink_batch(s.sink_id, s.batch_id, query_id)
    return JobRequest(
        s.spec,
        table,
        options,
        create,
        writer,
        s.commit,
        s.journal_schema,
        sink,
        new_table,
        schema_mode,
    )


def add_write(
    job: Job, pre: Preflight, columns: Sequence[str], registered: bool = True
) -> list[BranchAction]:
    """A transaction's next write (`job.request` is that write's) joins the job: what
    earlier jobs left on its table is resolved, and its staged plan is recorded in the
    job's row before its staging table exists (in a temporary table, for a job not
    `registered`: held small writes). Returns what recovery did."""
    assert job.job_id is not None
    request, target = job.request, job.request.target
    recovered = job.recover(True)
    index = len(job.apply.stages) if job.apply is not None else 0
    apply = apply_plan_for(
        request.options, target, columns, pre.targets, job.job_id, job.journal, index
    )
    job.modes.append(request.options.mode)
    if apply is not None and not registered:
        apply = temporary_stage(apply, job.dialect)
        job.apply = ApplyPlans.of(job.apply).adding(apply) if job.apply else apply
    elif apply is not None:
        grown = ApplyPlans.of(job.apply).adding(apply) if job.apply else apply
        if not job.journal.store_plan(job.conn, job.job_id, grown, joined_modes(job.modes)):
            raise aborted_while_writing(job.job_id)
        job.apply = grown
    job.current = apply
    return recovered


def aborted_while_writing(job_id: str) -> JobAbortedError:
    """A recovery run aborted the job between two of its writes: nothing is committed."""
    return JobAbortedError(
        f"Job {job_id} was aborted by a recovery run while the transaction was writing "
        "(its heartbeat looked older than that run's grace). Nothing was committed. Run "
        "the transaction again."
    )


def first_staged(job: Job) -> ApplyPlan | None:
    """The job's first staged write: the plan its WritePlan names (its row names all)."""
    return ApplyPlans.of(job.apply).writes[0] if job.apply else None


def joined(parts: Sequence[PhaseOne]) -> PhaseOne:
    """Every write's winners as one job's (their partitions are apart: `partition_base`)."""
    return PhaseOne(
        winners=[w for p in parts for w in p.winners],
        rows_of={k: v for p in parts for k, v in p.rows_of.items()},
        rows=sum(p.rows for p in parts),
        empty_partitions=sum(p.empty_partitions for p in parts),
        worker_peak_rss_kb=max((p.worker_peak_rss_kb for p in parts), default=0),
        load_paths=tuple(sorted({path for p in parts for path in p.load_paths})),
    )


__all__ = [
    "TableWrite",
    "TransactionEnd",
    "TransactionResult",
    "TransactionSettings",
    "aborted_while_writing",
    "add_write",
    "first_staged",
    "joined",
    "write_request",
]
