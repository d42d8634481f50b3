"""What the driver and a branch writer tell each other: the plan pickled into every task
(or handed to the driver's own write), and the one report a branch sends back."""

from __future__ import annotations

from dataclasses import dataclass

from .._testing.faults import Fault
from ..protocol.journal import Journal
from ..protocol.sinkmarks import SinkBatch
from ..spec import ConnectionSpec, TableRef
from ..tables.staging import ApplyPlan

#: The message each partition sends the driver.
#: A branch's problem when its job is no longer running: the driver then reports that the
#: job was aborted (by a recovery run), instead of Spark retrying the task in vain.
JOB_ENDED = "job is no longer running"


@dataclass(frozen=True)
class WritePlan:
    """Everything a partition writer needs; pickled into the Spark task."""

    spec: ConnectionSpec
    table: TableRef
    columns: tuple[str, ...]
    journal: Journal
    job_id: str
    batch_size: int
    bulk: bool = True
    faults: tuple[Fault, ...] = ()
    #: The table's type name for each of `columns` (lets a loader pick an exact encoding).
    column_types: tuple[str, ...] = ()
    #: Staged modes: `table` is the job's staging table, checked in each branch before PREPARE.
    apply: ApplyPlan | None = None
    #: A streaming job's sink and batch: its decision moves the sink's mark to the batch.
    sink: SinkBatch | None = None
    #: Seconds between heartbeats sent by each task from its start to its end (0: the
    #: driver beats). A Data Source job has no driver process that lives through the write.
    task_heartbeat: float = 0.0
    #: The job's lease once its tasks beat (replaces the longer one it started with).
    task_lease: float | None = None
    #: format("xasink"): when the job was minted (epoch seconds; 0: unknown). A shipping
    #: task of a job older than one heartbeat interval beats at its start, as a branch's does.
    minted_at: float = 0.0
    #: A single-branch job committed in one local transaction (`write_one_phase`): a
    #: staged mode's `table` is then a temporary table, created by this statement inside it.
    one_phase: bool = False
    stage_ddl: str = ""
    #: A transaction's later write numbers its partitions from here: one job's branches,
    #: winners and markers stay apart however many writes it holds.
    partition_base: int = 0
    #: A transaction's tables, as its decision and commit name them ("" for one table).
    tables: str = ""

    @property
    def target(self) -> str:
        """The table the job changes (a staged job's branches load its staging table)."""
        if self.tables:
            return self.tables
        return str(self.apply.target) if self.apply is not None else str(self.table)


@dataclass(frozen=True)
class BranchOutcome:
    rows: int
    path: str
    #: Why the rows cannot be applied (the branch was rolled back), or "".
    problem: str = ""
    #: Staged changes its one-phase apply skipped as no newer than the stored rows.
    stale: int = 0


@dataclass(frozen=True)
class BranchReport:
    """What one partition tells the driver (a message row, or a Data Source commit
    message): its prepared branch's XID ("" for none), rows, and any problem."""

    partition: int
    attempt: int
    xid: str
    rows: int = 0
    peak_rss_kb: int = 0
    path: str = ""
    problem: str = ""
    #: A one-phase job's staged changes its apply skipped (never a task's: tasks do not
    #: apply, and the message rows do not carry it).
    stale: int = 0
