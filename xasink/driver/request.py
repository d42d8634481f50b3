"""The values one job passes between its steps: the validated request, then what
preflight found, the registered job, and what phase 1 told the driver."""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import defaults
from .._testing.faults import Fault, armed
from ..errors import ConfigurationError
from ..protocol.actions import BranchAction
from ..protocol.journal import Journal
from ..protocol.sinkmarks import SinkBatch, SinkMark
from ..spec import CommitProperties, ConnectionSpec, TableRef, WriterProperties
from ..tables.catalog import check_create
from ..tables.columns import TableColumn
from ..tables.evolution import check_schema_mode
from ..tables.modes import ModeOptions
from ..tables.new_table import NewTable
from ..tables.staging import ApplyPlan
from ..xid import BranchId


@dataclass(frozen=True)
class JobRequest:
    """A write's validated arguments: write_xa's keywords, or format("xasink")'s options."""

    spec: ConnectionSpec
    target: TableRef
    options: ModeOptions
    create: defaults.Create = defaults.CREATE
    writer: WriterProperties = field(default_factory=WriterProperties)
    commit: CommitProperties = field(default_factory=CommitProperties)
    journal_schema: str | None = None
    sink: SinkBatch | None = None
    #: The column types and options of the table, when the write creates it.
    new_table: NewTable = field(default_factory=NewTable)
    #: "merge": add the frame's columns that the table lacks (`tables.evolution`).
    schema_mode: defaults.SchemaMode | None = None
    #: The test suite's armed faults (xasink._testing), taken when the request is made.
    faults: tuple[Fault, ...] = field(default_factory=armed)

    def __post_init__(self) -> None:
        lock_wait = self.commit.lock_wait_timeout
        if self.spec.network_timeout <= lock_wait:
            raise ConfigurationError(
                f"network_timeout ({self.spec.network_timeout:g} s) must be above "
                f"lock_wait_timeout ({lock_wait:g} s): a lock wait would otherwise be "
                "taken for a dead connection."
            )
        check_create(self.create)
        check_schema_mode(self.schema_mode)


@dataclass(frozen=True)
class Preflight:
    """What the checks before a job found: the journal (with its tag), the target's
    columns for the written ones, whether the table was created, and its identity."""

    journal: Journal
    targets: list[TableColumn]
    created: bool
    #: The target as the server resolves it (`Dialect.table_identity`): the job writes,
    #: locks and journals this, so that two spellings of one table are one table.
    table: TableRef
    #: The request's mode options for this table (whether it stores the `order` column).
    options: ModeOptions


@dataclass(frozen=True)
class Begun:
    """A job registered in the journal (its branches may open from now on)."""

    job_id: str
    apply: ApplyPlan | None
    recovered: list[BranchAction]


@dataclass(frozen=True)
class Skipped:
    """A streaming batch that is already decided (and finished): nothing to write."""

    mark: SinkMark
    recovered: list[BranchAction]


@dataclass(frozen=True)
class PhaseOne:
    """What the partition messages told the driver."""

    winners: list[BranchId]
    #: Rows per winning partition.
    rows_of: dict[int, int]
    rows: int
    empty_partitions: int
    worker_peak_rss_kb: int
    load_paths: tuple[str, ...]
