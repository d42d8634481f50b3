"""The journal's tables: their names in a schema, and what each one holds (its columns,
key and secondary indexes).

Every statement a write makes reaches the rows it asks for through one of these indexes,
never by reading the history of finished jobs (`retention` bounds that history, but a
write must not depend on it): the open jobs through their state, a transaction's tables
through `xasink_job_tables`, a leftover staging table through the index of the rows that
still have a plan.

Finding, checking, creating and upgrading a journal is `schema`'s (`JournalLayout`, built on
`JournalTables`); the modules that write one kind of row (`jobtables`, `links`, ...) need
only the names here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..defaults import LOCK_WAIT as DEFAULT_LOCK_WAIT
from ..dialects import Dialect, get_dialect
from ..dialects.base import TableIndex

META_TABLE = "xasink_meta"

WINNERS_TABLE = "xasink_winners"
MARKERS_TABLE = "xasink_markers"
#: One row per streaming sink: the highest batch id whose commit decision is recorded.
SINKS_TABLE = "xasink_sinks"
#: A transaction over several databases: its coordinator, or its participants (`links`).
LINKS_TABLE = "xasink_links"
#: Every table a job of several tables changes (a transaction's), where an index finds it.
JOB_TABLES_TABLE = "xasink_job_tables"
JOBS_TABLE = "xasink_jobs"
#: The journal's table layout that this release creates (`schema`): every table, the links
#: and a job's tables included, the indexes that keep a write's statements off the history,
#: and each job's write modes (`write_mode`).
SCHEMA_VERSION = 4
#: The layout that first listed a transaction's tables, kept the retention and indexed the
#: history (`layered`); the next added the job row's `write_mode`.
LAYERED_VERSION = 3
#: A job row's write modes, as the writes of the job were made, each once and in order,
#: comma-separated (`jobtables.joined_modes`): what a job was is still known once its
#: staging plan is dropped, and of a small write's job, which never stores one.
WRITE_MODE_COLUMN = "write_mode VARCHAR(64)"
#: How a job row's apply plan starts when it holds a transaction's several writes (the
#: staged apply writes it so): such a row may change any table, its plan says which.
SEVERAL_WRITES = '{"writes": '


@dataclass(frozen=True)
class JournalTables:
    """Where the bookkeeping tables live, and their tag; picklable for the executors."""

    dialect_name: str
    schema: str | None
    tag: str
    lock_wait: float = DEFAULT_LOCK_WAIT
    #: Its layout as found: an earlier one (its upgrade deferred) is read and written as
    #: that release did (`layered`).
    version: int = SCHEMA_VERSION

    @property
    def layered(self) -> bool:
        """Whether the journal has this layout's tables (a transaction's tables listed in
        `job_tables`, the links, the retention); an earlier layout is used as it is until
        its upgrade can run (`JournalLayout.upgrade`)."""
        return self.version >= LAYERED_VERSION

    @property
    def moded(self) -> bool:
        """Whether job rows have `write_mode` (`WRITE_MODE_COLUMN`): an earlier layout's
        rows are written without it until its upgrade can run, and listed by their plan."""
        return self.version >= SCHEMA_VERSION

    @property
    def dialect(self) -> Dialect:
        return get_dialect(self.dialect_name)

    def _table(self, name: str) -> str:
        d = self.dialect
        return f"{d.quote(self.schema)}.{d.quote(name)}" if self.schema else d.quote(name)

    @property
    def meta(self) -> str:
        return self._table(META_TABLE)

    @property
    def jobs(self) -> str:
        return self._table(JOBS_TABLE)

    @property
    def winners(self) -> str:
        return self._table(WINNERS_TABLE)

    @property
    def markers(self) -> str:
        return self._table(MARKERS_TABLE)

    @property
    def sinks(self) -> str:
        return self._table(SINKS_TABLE)

    @property
    def links(self) -> str:
        return self._table(LINKS_TABLE)

    @property
    def job_tables(self) -> str:
        return self._table(JOB_TABLES_TABLE)

    def changes(self, alias: str, tables: Sequence[str]) -> tuple[str, tuple[str, ...]]:
        """A condition on the job row `alias`, and its parameters: it changes one of
        `tables`: its own table, or one of a transaction's (`job_tables`, reached by its
        key; in an earlier layout, any transaction's plan counts)."""
        marks = ", ".join("?" for _ in tables)
        if not self.layered:
            sql = f"({alias}.target_table IN ({marks}) OR {alias}.apply_plan LIKE ?)"
            return sql, (*tables, f"{SEVERAL_WRITES}%")
        return (
            f"({alias}.target_table IN ({marks}) OR EXISTS (SELECT 1 FROM {self.job_tables} "
            f"x WHERE x.job_id = {alias}.job_id AND x.target_table IN ({marks})))",
            (*tables, *tables),
        )


def definitions(journal: JournalTables) -> list[tuple[str, str, str, tuple[TableIndex, ...]]]:
    """(table, name, columns, indexes) of every table but meta, the jobs table last."""
    d = journal.dialect
    ts, sink_id = d.timestamp_type, d.ascii_id_type(200)
    return [
        (
            journal.winners,
            WINNERS_TABLE,
            "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
            "NOT NULL, row_count BIGINT, PRIMARY KEY (job_id, partition_id)",
            (),
        ),
        (
            journal.markers,
            MARKERS_TABLE,
            "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
            "NOT NULL, row_count BIGINT NOT NULL, PRIMARY KEY (job_id, partition_id, "
            "attempt)",
            (),
        ),
        (
            journal.sinks,
            SINKS_TABLE,
            f"sink_id {sink_id} NOT NULL PRIMARY KEY, batch_id BIGINT NOT NULL, "
            f"job_id VARCHAR(64), query_id VARCHAR(64), updated_at {ts} NOT NULL",
            (),
        ),
        (
            journal.links,
            LINKS_TABLE,
            "job_id VARCHAR(64) NOT NULL, peer VARCHAR(16) NOT NULL, role VARCHAR(16) NOT "
            f"NULL, address {d.text_type} NOT NULL, peer_schema {d.text_type}, winners "
            f"{d.long_text_type}, state VARCHAR(16) NOT NULL, PRIMARY KEY (job_id, peer)",
            # A coordinator's participants still to finish, of one peer or all.
            (TableIndex("role_state_peer", ("role", "state", "peer")),),
        ),
        (
            journal.job_tables,
            JOB_TABLES_TABLE,
            f"job_id VARCHAR(64) NOT NULL, target_table {d.text_type} NOT NULL, created_at "
            f"{ts} NOT NULL, PRIMARY KEY (job_id, target_table)",
            # `xasink jobs --table`, newest first.
            (TableIndex("table_created", ("target_table", "created_at")),),
        ),
        (
            journal.jobs,
            JOBS_TABLE,
            f"job_id VARCHAR(64) NOT NULL PRIMARY KEY, target_table {d.text_type} NOT "
            f"NULL, state VARCHAR(16) NOT NULL, beats BIGINT NOT NULL, lease_seconds "
            f"BIGINT, created_at {ts} NOT NULL, heartbeat_at {ts} NOT NULL, decided_at "
            f"{ts}, finished_at {ts}, apply_plan {d.long_text_type}, resolved_by "
            f"{d.text_type}, resolution {d.long_text_type}, sink_id {sink_id}, batch_id "
            f"BIGINT, query_id VARCHAR(64), stream_key VARCHAR(64), prev_batch_id BIGINT, "
            f"prev_job_id VARCHAR(64), prev_query_id VARCHAR(64), {WRITE_MODE_COLUMN}",
            (
                # The open jobs (few, whatever the history), a state's jobs newest
                # first, and the oldest finished ones (`retention`).
                TableIndex("state_created", ("state", "created_at")),
                # A table's jobs, newest first (`xasink jobs --table`).
                TableIndex("table_created", ("target_table", "created_at")),
                # Every job, newest first (`xasink jobs`).
                TableIndex("created", ("created_at",)),
                # A sink's jobs (replays, `reset-sink`).
                TableIndex("sink_id_batch_id", ("sink_id", "batch_id")),
                # Jobs with a plan: running or deciding staged jobs, and finished ones
                # whose staging tables are still to drop.
                TableIndex("staged", ("state",), present="apply_plan"),
            ),
        ),
    ]


__all__ = [
    "JOBS_TABLE",
    "JOB_TABLES_TABLE",
    "LAYERED_VERSION",
    "LINKS_TABLE",
    "MARKERS_TABLE",
    "META_TABLE",
    "SCHEMA_VERSION",
    "SEVERAL_WRITES",
    "SINKS_TABLE",
    "WINNERS_TABLE",
    "WRITE_MODE_COLUMN",
    "JournalTables",
    "definitions",
]
