"""What one call costs the server, from the server's own counters (not from xasink's code).

A counting block is: wait for the server's statistics to settle, take a snapshot, make N
calls, wait again, take a second snapshot. The difference, minus that of an empty block
(the snapshots' own cost), divided by N, is the per-call cost. What is counted:

MariaDB/MySQL (``SHOW GLOBAL STATUS`` and ``information_schema.INNODB_METRICS``, both
server-wide and updated as each statement ends):

- statements: ``Questions``, the statements clients sent (``COM_PING`` is not one);
- connections: ``Connections``;
- write commits: InnoDB's ``trx_rw_commits``, transactions that wrote (an ``XA COMMIT`` of
  a prepared branch included). ``Handler_commit`` and ``Com_commit`` are not used: they
  also count read-only commits (calibrated: ``BEGIN; SELECT; COMMIT`` adds 2 to
  ``Handler_commit``, nothing to ``trx_rw_commits``);
- prepares: ``Handler_prepare``, i.e. ``XA PREPARE`` (the binary log, whose internal
  two-phase commit would count too, is off on the benchmark servers);
- InnoDB's committed transactions of every kind (``trx_rw/ro/nl_ro_commits``),
  ``trx_rollbacks`` and every ``Com_*`` counter (which statements) are recorded too.

PostgreSQL (the server's statement log, ``pg_stat_statements``, ``pg_stat_database`` of the
application database and user, and the WAL itself through ``pg_walinspect``):

- statements: the statements the server logged for the application user and database with
  ``log_statement = all`` (switched on for the counting blocks only; one ``statement:`` or
  ``execute <name>:`` line per statement executed). The sum of ``calls`` in
  ``pg_stat_statements`` is kept too, but it undercounts on PostgreSQL 15: a utility
  statement run again through a cached server-side prepared statement (pgjdbc's COMMIT on
  a connection that is kept open, e.g. xasink's pooled sessions) is counted only the first
  time (its cached plan's queryId is reset to 0). It is the figure only when the log
  cannot be read (a server named by URL);
- connections: ``pg_stat_database.sessions``;
- write commits: WAL records ``Transaction/COMMIT`` and ``Transaction/COMMIT_PREPARED``;
- prepares: WAL records ``Transaction/PREPARE``;
- ``xact_commit`` / ``xact_rollback`` are recorded but not used: a PostgreSQL 15 backend
  adds its transaction counts to ``pg_stat_database`` only when it also has other pending
  statistics to flush (a table it touched), so the commits of statements that touch no
  table (``SELECT 1``, the list of prepared transactions) on a connection kept open arrive
  late, in some later block (measured: 10 pgjdbc ``SELECT 1`` added 0).

Flushes = write commits + prepares: with durable settings (``innodb_flush_log_at_trx_commit
= 1``; ``synchronous_commit = on``) each of them waits for its log flush, before any group
commit merges concurrent ones. The benchmark servers run without fsync, so the servers'
own flush counters say nothing: ``pg_stat_wal.wal_sync`` stays 0 with ``fsync = off``,
``wal_write`` counts the WAL writer's background writes, and InnoDB's ``Innodb_log_writes``
also counts the master thread's once-a-second writes. Counting the records that a durable
server would flush for is exact whatever the settings.

``pg_stat_database`` is updated asynchronously: a backend flushes its counters at most once
a second while busy, and 10 s after going idle (PostgreSQL 15; ``pg_stat_force_next_flush()``
only acts on the calling backend, not on the writers' connections). So on PostgreSQL a block
waits 11 s before each snapshot. ``pg_stat_statements`` and the WAL are current at once.

A statement is not a round trip: pgjdbc sends its implicit BEGIN with the next statement,
a JDBC batch (Spark's rewritten multi-row INSERTs) goes out in one flush, and statements
sent together before one Sync run in one implicit transaction. So statements are an upper
bound on round trips.

Background work is switched off for the blocks, since it commits transactions of its own
at random: autovacuum on PostgreSQL (``ALTER SYSTEM``, only on a throwaway server), InnoDB's
automatic persistent-statistics recalculation on MariaDB (``innodb_stats_auto_recalc``,
restored afterwards).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .databases import Database

#: Seconds to wait before each snapshot: PostgreSQL's idle backends flush their counters
#: 10 s after their last transaction (PGSTAT_IDLE_INTERVAL); MariaDB's are current at once.
SETTLE_SECONDS = {"postgres": 11.0, "mariadb": 0.5}

#: The per-call figures, in table order: (key, column title).
FIGURES = (
    ("statements", "statements"),
    ("connections", "connections"),
    ("write_commits", "write commits"),
    ("prepares", "prepares"),
    ("flushes", "flushes"),
)

#: The statement log's line prefix while counting (timestamp, pid, user@database).
_LOG_PREFIX = "%m [%p] %u@%d "
_LOGGED = re.compile(
    r"^\S+ \S+ \S+ \[\d+\] (?P<who>\S*) LOG:  (?:statement|execute [^:]+): (?P<sql>.*)$"
)

_INNODB_METRICS = ("trx_rw_commits", "trx_ro_commits", "trx_nl_ro_commits", "trx_rollbacks")
_WAL_COMMITS = ("Transaction/COMMIT", "Transaction/COMMIT_PREPARED")
_WAL_PREPARES = ("Transaction/PREPARE",)


@dataclass
class Snapshot:
    """Counter values at one moment; `statements` per statement text (PG) or kind (MariaDB)."""

    values: dict[str, int]
    statements: dict[str, int] = field(default_factory=dict)
    wal_lsn: str | None = None
    #: PostgreSQL: the statement log's size, where the next block's lines start.
    log_offset: int | None = None


def _normalise(query: str) -> str:
    """A statement text with literals and whitespace folded, so repeats group together."""
    query = re.sub(r"'(?:[^']|'')*'", "'?'", query)
    query = re.sub(r"\b\d+\b", "N", query)
    return " ".join(query.split())[:160]


class ServerCounters:
    """Snapshots of one server's counters, through an admin connection of its own."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.kind = db.kind
        self.settle_seconds = SETTLE_SECONDS[db.kind]
        #: What could not be counted, and why (recorded with the results).
        self.notes: list[str] = []
        self.statement_stats = False
        self.wal_records = False
        self.statement_log: Path | None = None
        if db.kind == "postgres":
            self.conn = self._pg_admin()
            self._pg_setup()
        else:
            self.conn = db.server.admin_connect()
            with self.conn.cursor() as cur:
                for name in _INNODB_METRICS:
                    cur.execute(f"SET GLOBAL innodb_monitor_enable = '{name}'")

    # -- PostgreSQL --------------------------------------------------------------------

    def _pg_admin(self) -> Any:
        """A superuser connection, to the maintenance database when there is one, so the
        snapshots themselves add nothing to the application database's counters."""
        try:
            return self.db.server.admin_connect(dbname="postgres")
        except Exception:
            self.notes.append("snapshots run in the application database (no 'postgres')")
            return self.db.server.admin_connect()

    def _pg_setup(self) -> None:
        """pg_stat_statements (needs shared_preload_libraries) and pg_walinspect (PG 15+)."""
        for extension in ("pg_stat_statements", "pg_walinspect"):
            try:
                self.conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
                if extension == "pg_stat_statements":
                    self.conn.execute("SELECT count(*) FROM pg_stat_statements")
                    self.statement_stats = True
                else:
                    self.wal_records = True
            except Exception as exc:
                self.notes.append(f"no {extension}: {type(exc).__name__}: {exc}".strip())
        # A throwaway server from local binaries logs to <its directory>/postgres.log.
        data = self.conn.execute("SHOW data_directory").fetchone()[0]
        log = Path(data).parent / "postgres.log"
        if self.db.settings and os.access(log, os.R_OK):
            self.statement_log = log
        else:
            self.notes.append("statements from pg_stat_statements (no server log to read)")

    def _pg_snapshot(self) -> Snapshot:
        server = self.db.server
        conn = self.conn
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit, xact_rollback, sessions FROM pg_stat_database WHERE datname = %s",
            (server.database,),
        ).fetchone()
        values = {"xact_commit": int(row[0]), "xact_rollback": int(row[1]), "sessions": int(row[2])}
        statements: dict[str, int] = {}
        if self.statement_stats:
            rows = conn.execute(
                "SELECT s.query, s.calls FROM pg_stat_statements s "
                "JOIN pg_roles r ON r.oid = s.userid JOIN pg_database d ON d.oid = s.dbid "
                "WHERE r.rolname = %s AND d.datname = %s",
                (server.user, server.database),
            ).fetchall()
            for query, calls in rows:
                key = _normalise(query)
                statements[key] = statements.get(key, 0) + int(calls)
            values["statement_calls"] = sum(statements.values())
            dealloc = conn.execute("SELECT dealloc FROM pg_stat_statements_info").fetchone()
            values["pg_stat_statements_dealloc"] = int(dealloc[0])
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()::text").fetchone()[0]
        offset = self.statement_log.stat().st_size if self.statement_log else None
        return Snapshot(values, statements, lsn, offset)

    def _pg_logged(self, start: int, end: int) -> dict[str, int]:
        """The statements the application user ran, from the log between two offsets."""
        assert self.statement_log is not None
        with open(self.statement_log, "rb") as log:
            log.seek(start)
            text = log.read(end - start).decode("utf-8", "replace")
        who = f"{self.db.server.user}@{self.db.server.database}"
        statements: dict[str, int] = {}
        for line in text.splitlines():
            match = _LOGGED.match(line)
            if match and match["who"] == who:
                key = _normalise(match["sql"])
                statements[key] = statements.get(key, 0) + 1
        return statements

    def _pg_wal_records(self, start: str, end: str) -> dict[str, int]:
        """Transaction WAL records (commits, prepares, aborts) written between two LSNs."""
        conn = self.conn
        if conn.execute("SELECT %s::pg_lsn <= %s::pg_lsn", (end, start)).fetchone()[0]:
            return {}
        deadline = time.monotonic() + 30
        # pg_walinspect reads only flushed WAL; the WAL writer flushes within a second.
        while conn.execute("SELECT pg_current_wal_flush_lsn() < %s::pg_lsn", (end,)).fetchone()[0]:
            if time.monotonic() > deadline:
                raise TimeoutError(f"WAL not flushed up to {end} within 30 s")
            time.sleep(0.1)
        rows = conn.execute(
            'SELECT "resource_manager/record_type", count FROM pg_get_wal_stats(%s, %s, true) '
            "WHERE count > 0 AND \"resource_manager/record_type\" LIKE 'Transaction/%%'",
            (start, end),
        ).fetchall()
        return {str(name): int(count) for name, count in rows}

    # -- MariaDB -----------------------------------------------------------------------

    def _mariadb_snapshot(self) -> Snapshot:
        with self.conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS")
            status = dict(cur.fetchall())
            names = ", ".join(f"'{n}'" for n in _INNODB_METRICS)
            cur.execute(
                f"SELECT NAME, COUNT FROM information_schema.INNODB_METRICS WHERE NAME IN ({names})"
            )
            metrics = {str(k): int(v) for k, v in cur.fetchall()}

        def number(name: str) -> int:
            try:
                return int(status.get(name, 0))
            except ValueError:
                return 0

        keep = ("Questions", "Connections", "Handler_commit", "Handler_prepare")
        keep += ("Handler_rollback", "Innodb_log_writes")
        values = {name: number(name) for name in keep} | metrics
        kinds = {name: number(name) for name in status if name.startswith("Com_")}
        return Snapshot(values, kinds)

    # -- common ------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._pg_snapshot() if self.kind == "postgres" else self._mariadb_snapshot()

    def delta(self, before: Snapshot, after: Snapshot) -> dict[str, Any]:
        """Raw differences: `counters` (plus WAL records on PostgreSQL) and `statements`."""
        counters = {k: after.values.get(k, 0) - v for k, v in before.values.items()}
        if self.kind == "postgres" and self.wal_records and before.wal_lsn and after.wal_lsn:
            counters |= self._pg_wal_records(before.wal_lsn, after.wal_lsn)
        if before.log_offset is not None and after.log_offset is not None:
            statements = self._pg_logged(before.log_offset, after.log_offset)
            counters["logged_statements"] = sum(statements.values())
        else:
            statements = {
                k: n - before.statements.get(k, 0)
                for k, n in after.statements.items()
                if n != before.statements.get(k, 0)
            }
        return {"counters": counters, "statements": statements}

    def figures(self, counters: dict[str, float]) -> dict[str, float | None]:
        """The per-call figures (FIGURES) from counter differences (any scale)."""

        def get(*names: str) -> float:
            return float(sum(counters.get(n, 0) for n in names))

        if self.kind == "postgres":
            if self.statement_log is not None:
                statements: float | None = get("logged_statements")
            else:
                statements = get("statement_calls") if self.statement_stats else None
            result: dict[str, float | None] = {
                "statements": statements,
                "connections": get("sessions"),
                "write_commits": get(*_WAL_COMMITS) if self.wal_records else None,
                "prepares": get(*_WAL_PREPARES) if self.wal_records else None,
            }
        else:
            result = {
                "statements": get("Questions"),
                "connections": get("Connections"),
                "write_commits": get("trx_rw_commits"),
                "prepares": get("Handler_prepare"),
            }
        wc, pr = result["write_commits"], result["prepares"]
        result["flushes"] = wc + pr if wc is not None and pr is not None else None
        return result

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """No background transactions while counting (see the module docstring)."""
        if self.kind == "postgres":
            if not self.db.settings:  # a server named by URL: not ours to reconfigure
                self.notes.append("autovacuum left on (server named by URL)")
                yield
                return
            changed = {"autovacuum": "off"}
            if self.statement_log is not None:
                changed |= {"log_statement": "all", "log_line_prefix": _LOG_PREFIX}
            for name, value in changed.items():
                self.conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
            self.conn.execute("SELECT pg_reload_conf()")
            try:
                self._wait_for_autovacuum()
                yield
            finally:
                for name in changed:
                    self.conn.execute(f"ALTER SYSTEM RESET {name}")
                self.conn.execute("SELECT pg_reload_conf()")
            return
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.innodb_stats_auto_recalc")
            (previous,) = cur.fetchone()
            cur.execute("SET GLOBAL innodb_stats_auto_recalc = OFF")
        try:
            yield
        finally:
            with self.conn.cursor() as cur:
                cur.execute(f"SET GLOBAL innodb_stats_auto_recalc = {int(previous)}")

    def _wait_for_autovacuum(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'"
        ).fetchone()[0]:
            if time.monotonic() > deadline:
                self.notes.append("an autovacuum worker was still running when counting began")
                return
            time.sleep(0.2)

    def close(self) -> None:
        self.conn.close()


def count_block(counters: ServerCounters, call: Callable[[], Any], calls: int) -> dict[str, Any]:
    """Settle, snapshot, `calls` calls, settle, snapshot: the raw differences (`delta`)."""
    time.sleep(counters.settle_seconds)
    before = counters.snapshot()
    for _ in range(calls):
        call()
    time.sleep(counters.settle_seconds)
    return counters.delta(before, counters.snapshot())


def per_call(
    counters: ServerCounters, block: dict[str, Any], baseline: dict[str, Any], calls: int
) -> dict[str, Any]:
    """A block's differences minus the empty block's, per call: figures, counters and the
    statements seen (PostgreSQL: normalised texts; MariaDB: ``Com_*`` kinds)."""

    def minus(part: str) -> dict[str, float]:
        mine, base = block[part], baseline[part]
        keys = dict.fromkeys([*mine, *base])
        return {
            k: round((mine.get(k, 0) - base.get(k, 0)) / calls, 3)
            for k in keys
            if mine.get(k, 0) != base.get(k, 0)
        }

    raw = minus("counters")
    statements = dict(sorted(minus("statements").items(), key=lambda kv: (-kv[1], kv[0])))
    return {"figures": counters.figures(raw), "counters": raw, "statements": statements}


def count_text(value: float | None) -> str:
    """A per-call count: integral ones as integers, others with one decimal."""
    if value is None:
        return "—"
    return f"{value:.0f}" if abs(value - round(value)) < 0.05 else f"{value:.1f}"
