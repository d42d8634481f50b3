"""The journal's tables: where they live, how they are laid out, created and checked.

One journal has exactly one tag, stored in `xasink_meta` when the journal is created: every
connection, role or schema spelling that finds the journal finds the same tag, and the tag
is what tells this journal's branches from every other transaction on the server. Nothing
of a journal is ever recreated once it exists: a lost table is an error, never an empty
stand-in.

What each table holds, and the indexes that keep a write off the history of finished jobs,
is `journal_tables`'.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import TypeVar

from ..defaults import LOCK_WAIT as DEFAULT_LOCK_WAIT
from ..dialects.base import TableIndex
from ..dialects.grants import EVERY_WRITE
from ..errors import JournalError, PreflightError
from ..runtime.jdbc import (
    JdbcConnection,
    execute,
    is_denied,
    java_message,
    network_timeout_lifted,
    query,
)
from ..spec import ConnectionSpec
from ..xid import FORMAT_ID
from . import jobtables
from .journal_tables import (
    JOB_TABLES_TABLE,
    LAYERED_VERSION,
    LINKS_TABLE,
    META_TABLE,
    SCHEMA_VERSION,
    WRITE_MODE_COLUMN,
    JournalTables,
    definitions,
)

#: The journal's table layout is stored in `xasink_meta` and checked on every use. This
#: release creates `SCHEMA_VERSION` and reads the layouts of earlier releases, 1,
#: `LINKED_VERSION` (1 and the links table, which joined a journal the first time it took
#: part in a transaction over several databases) and `LAYERED_VERSION` (a transaction's
#: tables listed, the retention, the indexes over the history), and `ensure` upgrades them
#: in place; a release that knows only those then refuses the journal rather than write
#: jobs whose tables or modes it does not record.
LINKED_VERSION = 2
EARLIER_VERSIONS = (1, LINKED_VERSION, LAYERED_VERSION)
#: Seconds the upgrade's DDL waits for a lock before it is left for a later call.
UPGRADE_LOCK_WAIT = 5
#: Seconds a first writer without a creation lock (`Dialect.session_locks`) waits for
#: another first writer's journal to be whole, then a pause between looks.
CREATION_RACE_WAIT = 10.0
_CREATION_POLL = 0.2
#: (schema, jobs table) of the journals whose deferred upgrade this process told of.
_DEFERRED: set[tuple[str | None, str]] = set()
#: The journal's own retention in days (`retention`), added to earlier layouts' meta.
_RETENTION_COLUMN = "retention_days DOUBLE PRECISION"
#: Indexes of earlier layouts that this one replaces (dropped by the upgrade).
_REPLACED_INDEXES = ("xasink_jobs_state_idx", "xasink_jobs_target_table_state_idx")
_LOSS_IF_RECREATED = (
    "an empty stand-in would forget decisions, sink marks or the tag that tells this "
    "journal's prepared branches from every other transaction"
)

log = logging.getLogger("xasink")

L = TypeVar("L", bound="JournalLayout")


@dataclass(frozen=True)
class JournalLayout(JournalTables):
    """A journal's tables (`JournalTables`), and how they are found, checked, created and
    upgraded; picklable for the executors."""

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
        tag, version = journal._stored(conn) or ("", SCHEMA_VERSION)
        return replace(journal, tag=tag, version=version)

    def _stored(self, conn: JdbcConnection) -> tuple[str, int] | None:
        """The stored (tag, version), in one read (None: no journal, or no tag row)."""
        try:
            rows = query(conn, f"SELECT tag, version FROM {self.meta} WHERE id = 1")
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                return None
            if is_denied(exc):
                raise self._denied(conn, java_message(exc)) from None
            raise
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def schema_name(self, conn: JdbcConnection) -> str:
        """The schema the journal is in, named ("" where the dialect cannot tell)."""
        d = self.dialect
        if self.schema or not d.current_schema_sql:
            return self.schema or ""
        return str(query(conn, d.current_schema_sql)[0][0])

    def grants(self, conn: JdbcConnection, login: str | None) -> dict[str, list[str]]:
        """The GRANTs `login` (None: this connection's) needs on this journal, by the writes
        that need them (`xasink init` prints them)."""
        d, schema = self.dialect, self.schema_name(conn)
        names = [META_TABLE, *(name for _, name, _, _ in definitions(self))]
        quoted = [d.quote(name) for name in names]
        return d.writer_grants(conn, schema, quoted, login) if schema else {}

    def _denied(self, conn: JdbcConnection, said: str) -> PreflightError:
        """This login may not read the journal: what a writer is granted, which `xasink
        check` needs the SELECT of."""
        needed = "; ".join(self.grants(conn, None).get(EVERY_WRITE, [])) or "DML on its tables"
        return PreflightError(
            f"This login may not use xasink's journal in {self.schema_name(conn)} ({said}). "
            f"Nothing was written. A writer needs: {needed} (`xasink init --writer LOGIN` "
            "prints them); `xasink check` needs SELECT on the same tables."
        )

    def _stored_tag(self, conn: JdbcConnection) -> str | None:
        stored = self._stored(conn)
        return stored[0] if stored else None

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
    def check_complete(self, conn: JdbcConnection) -> int:
        """An existing journal must be whole and of a layout this release reads: every
        table, and the one row of `xasink_meta` with its tag. An empty stand-in for a lost
        table would turn decided jobs into undecided ones (winners, markers), replays into
        new batches (sinks), or the tag into another one, which hides every prepared branch
        of the journal from recovery (meta). So nothing is ever recreated: it is an error.
        Returns the layout's version (an earlier one is for `ensure` to upgrade)."""
        try:
            rows = query(
                conn,
                f"SELECT m.tag, m.version, (SELECT COUNT(*) FROM {self.winners} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.markers} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.sinks} WHERE 1=0) FROM {self.meta} m WHERE m.id = 1",
            )
        except Exception:  # look table by table, to say what is wrong
            rows = None
        version = int(rows[0][1]) if rows else None
        if version in (LAYERED_VERSION, SCHEMA_VERSION):
            for table in (self.links, self.job_tables):
                self._require(conn, table, "although the journal's layout has it")
            return version
        if version == LINKED_VERSION:
            self._require(
                conn,
                self.links,
                "although the journal took part in a transaction over several databases",
            )
            return version
        if version == 1:
            return version
        for table in (self.meta, self.winners, self.markers, self.sinks):
            self._require(conn, table, f"although {self.jobs} exists")
        readable = f"{', '.join(map(str, EARLIER_VERSIONS))} or {SCHEMA_VERSION}"
        if rows is None:
            raise JournalError(
                f"The journal's tables ({self.meta} and the others) are not laid out as "
                f"schema version {readable} lays them out (a journal of another xasink "
                "release, or changed by hand). xasink touches nothing in it: use the release "
                "that wrote it, or restore it."
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
            f"version {readable}. Use the xasink release that wrote it."
        )

    def _require(self, conn: JdbcConnection, table: str, why: str) -> None:
        if not self._table_exists(conn, table):
            raise JournalError(
                f"The journal is incomplete: {table} is missing {why}. xasink will not "
                f"recreate it ({_LOSS_IF_RECREATED}) and touches nothing until it is "
                "restored from a backup."
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
        check that the existing one is whole, upgrading an earlier layout in place;
        returns the journal with its tag."""
        if not self.exists(conn):  # only a first writer pays for the creation lock
            with self._creation_lock(conn):
                if not self.exists(conn):  # else another first writer created it meanwhile
                    self._create_first(conn)
        version = self.check_complete(conn)
        if version != SCHEMA_VERSION:
            version = self.upgrade(conn)
        return replace(self, tag=str(self._stored_tag(conn)), version=version)

    def upgrade(self, conn: JdbcConnection) -> int:
        """An earlier layout to this one, once, under the creation lock: the tables,
        indexes and columns it lacks (each step a no-op when done, so a crash midway is
        finished by the next call), the tables of its open transactions recorded, and then
        its version.
        Returns the version the journal has now. Building an index over a long history
        takes a while, once. A prepared branch holds the jobs table until it is resolved,
        which the DDL would wait for: while any is prepared, or after a short wait, the
        upgrade is left for a later call and the journal is used as its layout is
        (recovery, which resolves those branches, works on it)."""
        with self._creation_lock(conn):
            found = self.check_complete(conn)
            if found == SCHEMA_VERSION:
                return found  # another writer upgraded it meanwhile
            held = self.dialect.prepared_count(conn, FORMAT_ID)
            if held:  # their locks on the journal's tables would stall the DDL
                return self._deferred(found, f"{held} prepared xasink branch(es)")
            log.warning(
                "xasink: upgrading the journal %s to layout version %d (once; new tables "
                "and indexes over its history)",
                self.jobs,
                SCHEMA_VERSION,
            )
            try:
                with self.dialect.waits_bounded(conn, UPGRADE_LOCK_WAIT, self.lock_wait):
                    self._upgrade_steps(conn)
            except Exception as exc:
                if not self.dialect.is_lock_timeout(exc):
                    raise
                return self._deferred(found, "a long transaction on its tables")
            return SCHEMA_VERSION

    def _deferred(self, found: int, why: str) -> int:
        """The upgrade left for a later call (said once per journal and process)."""
        if (self.schema, self.jobs) not in _DEFERRED:
            _DEFERRED.add((self.schema, self.jobs))
            log.warning(
                "xasink: the journal %s keeps layout version %d until %s end (`xasink "
                "recover` resolves in-doubt branches); a later write upgrades it.",
                self.jobs,
                found,
                why,
            )
        return found

    def _upgrade_steps(self, conn: JdbcConnection) -> None:
        d = self.dialect
        with network_timeout_lifted(conn):  # an index over a long history
            for table, name, columns, indexes in definitions(self):
                for sql in d.create_table_sql(table, name, columns, indexes):
                    self._create_unless_there(conn, sql)
                for index in indexes:  # an existing table lacks the newer indexes
                    self._add_index(conn, table, name, index)
        for name in _REPLACED_INDEXES:
            d.drop_index(conn, self.jobs, name)
        d.add_column(conn, self.meta, _RETENTION_COLUMN)
        d.add_column(conn, self.jobs, WRITE_MODE_COLUMN)
        jobtables.record_plans(replace(self, version=SCHEMA_VERSION), conn)  # its tables now
        execute(
            conn,
            f"UPDATE {self.meta} SET version = ? WHERE id = 1 AND version < ?",
            (SCHEMA_VERSION, SCHEMA_VERSION),
        )

    def _create_unless_there(self, conn: JdbcConnection, sql: str) -> None:
        """An upgrade's CREATE TABLE or INDEX, a no-op where it exists (the generic dialect's
        DDL has no IF NOT EXISTS, and an earlier layout has most of its tables)."""
        try:
            execute(conn, sql)
        except Exception as exc:
            if not (self.dialect.is_existing_table(exc) or self.dialect.is_duplicate_index(exc)):
                raise

    def _add_index(self, conn: JdbcConnection, table: str, name: str, index: TableIndex) -> None:
        sql = self.dialect.create_index_sql(table, name, index)
        if sql is None:
            return
        try:
            execute(conn, sql)
        except Exception as exc:
            if not self.dialect.is_duplicate_index(exc):
                raise

    def ensure_linked(self, conn: JdbcConnection) -> None:
        """The journal with its links table, before it takes part in a transaction over
        several databases: this layout has it; an earlier one is upgraded."""
        if self.stored_version(conn) != SCHEMA_VERSION and self.upgrade(conn) < LINKED_VERSION:
            raise JournalError(
                f"The journal {self.jobs} needs its links table to take part in a "
                "transaction over several databases, and its upgrade waits for prepared "
                "branches to be resolved: run `xasink recover`, then the transaction again."
            )

    def stored_version(self, conn: JdbcConnection) -> int:
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
        seconds = max(1, int(self.lock_wait))
        with self.dialect.session_locked(conn, "journal creation", seconds) as got:
            if not got:
                raise JournalError(
                    f"Another writer has been creating the journal {self.jobs} for {seconds}s "
                    "(xasink's creation lock); try again once it has finished."
                )
            yield

    def _create_first(self, conn: JdbcConnection) -> None:
        """Create the journal as its first writer. Without a creation lock (the generic
        dialect) another first writer may be creating it at this very moment: a table of it
        already there, or its tag without the jobs table, means waiting (bounded) for that
        writer's jobs table, not that the journal was lost."""
        if self.dialect.session_locks:
            self._check_not_half_gone(conn)
            self._create(conn)
            return
        try:
            if self._stored_tag(conn) is None:
                self._create(conn)
                return
        except Exception as exc:
            if not self.dialect.is_existing_table(exc):
                raise
        deadline = time.monotonic() + CREATION_RACE_WAIT
        while time.monotonic() < deadline:
            time.sleep(_CREATION_POLL)
            if self.exists(conn):
                return  # the other writer's journal: `ensure` checks it is whole
        self._check_not_half_gone(conn)
        raise JournalError(
            f"The journal {self.jobs} is half-created: {self.meta} exists without its tag "
            f"and {self.jobs} has not appeared for {CREATION_RACE_WAIT:.0f}s (a first "
            "writer died creating it, or is still at it). Try again; if this persists, drop "
            "the journal's tables that exist (they hold nothing yet) and write again."
        )

    def _create(self, conn: JdbcConnection) -> None:
        """The tables and the tag (under the creation lock). The meta row first and the jobs
        table last: whoever sees the jobs table (the sign that a journal exists) finds every
        other table and the tag already there."""
        d = self.dialect
        meta = (
            "id INTEGER NOT NULL PRIMARY KEY, tag VARCHAR(16) NOT NULL, version INTEGER NOT "
            f"NULL, {_RETENTION_COLUMN}"
        )
        for sql in d.create_table_sql(self.meta, META_TABLE, meta):
            execute(conn, sql)
        execute(
            conn,
            f"INSERT INTO {self.meta} (id, tag, version) VALUES (1, ?, ?)",
            (secrets.token_hex(4), SCHEMA_VERSION),
        )
        for table, name, columns, indexes in definitions(self):
            for sql in d.create_table_sql(table, name, columns, indexes):
                execute(conn, sql)


__all__ = [
    "DEFAULT_LOCK_WAIT",
    "JOB_TABLES_TABLE",
    "LINKED_VERSION",
    "LINKS_TABLE",
    "SCHEMA_VERSION",
    "JournalLayout",
]
