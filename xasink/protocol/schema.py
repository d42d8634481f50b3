"""The journal's tables: where they live, how they are laid out, created and checked.

One journal has exactly one tag, stored in `xasink_meta` when the journal is created: every
connection, role or schema spelling that finds the journal finds the same tag, and the tag
is what tells this journal's branches from every other transaction on the server. Nothing
of a journal is ever recreated once it exists: a lost table is an error, never an empty
stand-in.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from ..defaults import LOCK_WAIT as DEFAULT_LOCK_WAIT
from ..dialects import Dialect, get_dialect
from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, execute, query
from ..spec import ConnectionSpec

META_TABLE = "xasink_meta"
JOBS_TABLE = "xasink_jobs"
WINNERS_TABLE = "xasink_winners"
MARKERS_TABLE = "xasink_markers"
#: One row per streaming sink: the highest batch id whose commit decision is recorded.
SINKS_TABLE = "xasink_sinks"
#: A transaction over several databases: its coordinator, or its participants (`links`).
LINKS_TABLE = "xasink_links"

#: How a job row's apply plan starts when it holds a transaction's several writes (the
#: staged apply writes it so): such a row may change any table, its plan says which.
SEVERAL_WRITES = '{"writes": '

#: The journal's table layout; stored in `xasink_meta`, checked on every use. A journal is
#: created at version 1; it becomes `LINKED_VERSION` (1 and the links table) the first time
#: it takes part in a transaction over several databases, so that a release which knows
#: nothing of links refuses it rather than abort a job another journal decides.
SCHEMA_VERSION = 1
LINKED_VERSION = 2
_LOSS_IF_RECREATED = (
    "an empty stand-in would forget decisions, sink marks or the tag that tells this "
    "journal's prepared branches from every other transaction"
)

L = TypeVar("L", bound="JournalLayout")


@dataclass(frozen=True)
class JournalLayout:
    """Where the bookkeeping tables live, and their tag; picklable for the executors."""

    dialect_name: str
    schema: str | None
    tag: str
    lock_wait: float = DEFAULT_LOCK_WAIT

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

    # -- finding it ------------------------------------------------------------------
    @classmethod
    def locate(
        cls: type[L],
        conn: JdbcConnection,
        spec: ConnectionSpec,
        schema: str | None,
        lock_wait: float = DEFAULT_LOCK_WAIT,
    ) -> L:
        """The journal in this schema, with its stored tag ("" while it has none: it does not
        exist, or it lost its tag, which `ensure` and `check_complete` refuse). `conn`'s
        lock waits are bounded by `lock_wait` already (`sessions.bind_lock_wait`)."""
        journal = cls(spec.dialect, schema, "", lock_wait)
        return replace(journal, tag=journal._stored_tag(conn) or "")

    def _stored_tag(self, conn: JdbcConnection) -> str | None:
        try:
            rows = query(conn, f"SELECT tag FROM {self.meta} WHERE id = 1")
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                return None
            raise
        return str(rows[0][0]) if rows else None

    def exists(self, conn: JdbcConnection) -> bool:
        """Whether the journal's tables are here. Only "no such table" means no; any other
        failure (a privilege, a lock timeout, a lost connection) is raised: recovery must
        never mistake an unreadable journal for a missing one."""
        return self._table_exists(conn, self.jobs)

    def _table_exists(self, conn: JdbcConnection, table: str) -> bool:
        try:
            query(conn, f"SELECT 1 FROM {table} WHERE 1=0")
            return True
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                return False
            raise

    # -- checking it -----------------------------------------------------------------
    def check_complete(self, conn: JdbcConnection) -> None:
        """An existing journal must be whole and of this version: every table, and the one
        row of `xasink_meta` with its tag. An empty stand-in for a lost table would turn
        decided jobs into undecided ones (winners, markers), replays into new batches
        (sinks), or the tag into another one, which hides every prepared branch of the
        journal from recovery (meta). So nothing is ever recreated: it is an error."""
        try:
            rows = query(
                conn,
                f"SELECT m.tag, m.version, (SELECT COUNT(*) FROM {self.winners} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.markers} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.sinks} WHERE 1=0) FROM {self.meta} m WHERE m.id = 1",
            )
        except Exception:  # look table by table, to say what is wrong
            rows = None
        if rows and int(rows[0][1]) == SCHEMA_VERSION:
            return
        if rows and int(rows[0][1]) == LINKED_VERSION:
            if self._table_exists(conn, self.links):
                return
            raise JournalError(
                f"The journal is incomplete: {self.links} is missing although the journal "
                "took part in a transaction over several databases. xasink will not "
                f"recreate it ({_LOSS_IF_RECREATED}) and touches nothing until it is "
                "restored from a backup."
            )
        for table in (self.meta, self.winners, self.markers, self.sinks):
            if not self._table_exists(conn, table):
                raise JournalError(
                    f"The journal is incomplete: {table} is missing although {self.jobs} "
                    f"exists. xasink will not recreate it ({_LOSS_IF_RECREATED}) and touches "
                    "nothing until it is restored from a backup."
                )
        if rows is None:
            raise JournalError(
                f"The journal's tables ({self.meta} and the others) are not laid out as "
                f"schema version {SCHEMA_VERSION} or {LINKED_VERSION} lays them out (a "
                "journal of another xasink release, or changed by hand). xasink touches "
                "nothing in it: use the release that wrote it, or restore it."
            )
        if not rows:
            raise JournalError(
                f"The journal has lost its tag: {self.meta} has no row. xasink will not make "
                f"a new one ({_LOSS_IF_RECREATED}) and touches nothing until the row is "
                "restored from a backup (`xasink recover` then finds this journal's branches "
                "again)."
            )
        raise JournalError(
            f"The journal in {self.meta} has schema version {rows[0][1]}; this xasink reads "
            f"version {SCHEMA_VERSION} or {LINKED_VERSION}. Use the xasink release that wrote it."
        )

    def _check_not_half_gone(self, conn: JdbcConnection) -> None:
        """No jobs table, yet the journal's tag is there: under the creation lock no first
        writer is creating it, so the jobs table was lost."""
        if self._stored_tag(conn) is None:
            return
        raise JournalError(
            f"The journal is incomplete: {self.jobs} is missing although {self.meta} holds "
            f"its tag. xasink will not recreate it ({_LOSS_IF_RECREATED}) and touches "
            "nothing until it is restored from a backup."
        )

    # -- creating it -----------------------------------------------------------------
    def ensure(self: L, conn: JdbcConnection, spec: ConnectionSpec | None = None) -> L:
        """Create the journal if this schema has none (DDL, before any branch opens), or
        check that the existing one is whole; returns the journal with its tag."""
        if not self.exists(conn):  # only a first writer pays for the creation lock
            with self._creation_lock(conn):
                if not self.exists(conn):  # else another first writer created it meanwhile
                    self._check_not_half_gone(conn)
                    self._create(conn)
        self.check_complete(conn)
        return replace(self, tag=str(self._stored_tag(conn)))

    def ensure_linked(
        self, conn: JdbcConnection, upgrade: Callable[[JdbcConnection], None]
    ) -> None:
        """The journal with its links table (`links.ensure`, under the creation lock),
        before it takes part in a transaction over several databases."""
        if self._table_exists(conn, self.links) and self.version(conn) == LINKED_VERSION:
            return
        with self._creation_lock(conn):
            upgrade(conn)

    def version(self, conn: JdbcConnection) -> int:
        """The journal's version as stored now (0: no meta row)."""
        rows = query(conn, f"SELECT version FROM {self.meta} WHERE id = 1")
        return int(rows[0][0]) if rows else 0

    @contextlib.contextmanager
    def _creation_lock(self, conn: JdbcConnection) -> Iterator[None]:
        """One first writer at a time creates a journal: PostgreSQL's CREATE TABLE and CREATE
        INDEX IF NOT EXISTS fail (a duplicate key in its catalog) when another session
        creates the same table at the same moment. One lock for every journal of the
        database (the server's, on MySQL): however a writer spells the schema, or leaves it
        to the connection's default, it takes the same lock; creations are rare and short."""
        d, name = self.dialect, "journal creation"
        seconds = max(1, int(self.lock_wait))
        try:
            got = d.lock_session(conn, name, seconds)
        except Exception as exc:
            if not d.is_lock_timeout(exc):
                raise
            got = False
        if not got:
            raise JournalError(
                f"Another writer has been creating the journal {self.jobs} for {seconds}s "
                "(xasink's creation lock); try again once it has finished."
            )
        try:
            yield
        finally:  # never hides the outcome: a session that cannot unlock is broken, and
            with contextlib.suppress(Exception):  # a broken session drops its locks anyway
                d.unlock_session(conn, name)

    def _create(self, conn: JdbcConnection) -> None:
        """The tables and the tag (under the creation lock). The meta row first and the jobs
        table last: whoever sees the jobs table (the sign that a journal exists) finds every
        other table and the tag already there."""
        d = self.dialect
        meta = "id INTEGER NOT NULL PRIMARY KEY, tag VARCHAR(16) NOT NULL, version INTEGER NOT NULL"
        for sql in d.create_table_sql(self.meta, META_TABLE, meta):
            execute(conn, sql)
        execute(
            conn,
            f"INSERT INTO {self.meta} (id, tag, version) VALUES (1, ?, ?)",
            (secrets.token_hex(4), SCHEMA_VERSION),
        )
        for table, name, columns, indexes in self._tables():
            for sql in d.create_table_sql(table, name, columns, indexes):
                execute(conn, sql)

    def _tables(self) -> list[tuple[str, str, str, tuple[tuple[str, ...], ...]]]:
        """(table, name, columns, indexes) of every table but meta, the jobs table last."""
        d = self.dialect
        ts, sink_id = d.timestamp_type, d.ascii_id_type(200)
        return [
            (
                self.winners,
                WINNERS_TABLE,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
                "NOT NULL, row_count BIGINT, PRIMARY KEY (job_id, partition_id)",
                (),
            ),
            (
                self.markers,
                MARKERS_TABLE,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
                "NOT NULL, row_count BIGINT NOT NULL, PRIMARY KEY (job_id, partition_id, "
                "attempt)",
                (),
            ),
            (
                self.sinks,
                SINKS_TABLE,
                f"sink_id {sink_id} NOT NULL PRIMARY KEY, batch_id BIGINT NOT NULL, "
                f"job_id VARCHAR(64), query_id VARCHAR(64), updated_at {ts} NOT NULL",
                (),
            ),
            (
                self.jobs,
                JOBS_TABLE,
                f"job_id VARCHAR(64) NOT NULL PRIMARY KEY, target_table {d.text_type} NOT "
                f"NULL, state VARCHAR(16) NOT NULL, beats BIGINT NOT NULL, lease_seconds "
                f"BIGINT, created_at {ts} NOT NULL, heartbeat_at {ts} NOT NULL, decided_at "
                f"{ts}, finished_at {ts}, apply_plan {d.long_text_type}, resolved_by "
                f"{d.text_type}, resolution {d.long_text_type}, sink_id {sink_id}, batch_id "
                f"BIGINT, query_id VARCHAR(64), stream_key VARCHAR(64), prev_batch_id BIGINT, "
                f"prev_job_id VARCHAR(64), prev_query_id VARCHAR(64)",
                # What every call reads: the table's open jobs, a state's jobs, a sink's.
                (("state",), ("target_table", "state"), ("sink_id", "batch_id")),
            ),
        ]


__all__ = [
    "DEFAULT_LOCK_WAIT",
    "LINKED_VERSION",
    "LINKS_TABLE",
    "SCHEMA_VERSION",
    "SEVERAL_WRITES",
    "JournalLayout",
]
