"""The target databases: throwaway servers from ``tests/servers.py`` and small SQL helpers.

Reads and truncates go through psycopg / pymysql, never through xasink or Spark, so the
row-count check after a run is independent of the contender being measured.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from servers import DbServer

Kind = Literal["postgres", "mariadb"]
KINDS: tuple[Kind, ...] = ("postgres", "mariadb")

_TESTS = Path(__file__).resolve().parent.parent / "tests"

#: The harness's own statements give up after this long instead of hanging behind a lock
#: (e.g. a prepared branch a failed run left behind: PostgreSQL would wait forever).
LOCK_TIMEOUT_SECONDS = 60

#: Server settings for throwaway servers. The test defaults (16 MB shared buffers, a 32 MB
#: buffer pool) would make every contender wait on page eviction, which is not what we
#: want to measure. Servers named by URL are used as they are.
BENCH_SETTINGS: dict[Kind, dict[str, object]] = {
    "postgres": {"shared_buffers": "512MB", "max_wal_size": "4GB"},
    "mariadb": {
        "local_infile": "ON",
        "innodb_buffer_pool_size": "1G",
        "innodb_log_file_size": "512M",
        "max_allowed_packet": "64M",
    },
}

#: Added for `breakdown fixed`, which counts each call's statements (PostgreSQL only; the
#: Debian package ships the module). Only there: the other benchmarks run without it.
STATEMENT_STATS_SETTINGS: dict[Kind, dict[str, object]] = {
    "postgres": {
        "shared_preload_libraries": "pg_stat_statements",
        # Utility statements are keyed by their text, so every gid is an entry of its own:
        # room for them all, so none is evicted mid-count (eviction is checked anyway).
        "pg_stat_statements.max": 20000,
    },
    "mariadb": {},
}


def servers_module() -> Any:
    """``tests/servers.py``, imported the way the tests import it (tests/ on sys.path)."""
    if str(_TESTS) not in sys.path:
        sys.path.insert(0, str(_TESTS))
    import servers

    return servers


@dataclass(frozen=True)
class Database:
    """One server plus what each contender needs to reach it."""

    kind: Kind
    server: DbServer
    settings: dict[str, object]

    @property
    def jdbc_url(self) -> str:
        """One URL for Spark and xasink alike.

        For MariaDB it is ``jdbc:mysql:``: Spark picks its MySQL dialect (backtick quoting)
        only for that scheme, and MariaDB Connector/J 2.7 accepts it.
        """
        if self.kind == "postgres":
            return self.server.jdbc_url
        s = self.server
        return f"jdbc:mysql://{s.host}:{s.port}/{s.database}"

    def sink(self, url: str | None = None, **more: Any) -> Any:
        """This server as xasink's Database, with the application user's login (`url`:
        another URL of it; `more`: further fields)."""
        from xasink import Database as XasinkDatabase

        s = self.server
        return XasinkDatabase(url or self.jdbc_url, user=s.user, password=s.password, **more)

    @property
    def driver_class(self) -> str:
        return "org.postgresql.Driver" if self.kind == "postgres" else "org.mariadb.jdbc.Driver"

    @property
    def batch_rewrite_property(self) -> str:
        """The driver property that turns a JDBC batch into multi-row INSERTs."""
        return "reWriteBatchedInserts" if self.kind == "postgres" else "rewriteBatchedStatements"

    def connect(self) -> Any:
        """An autocommit psycopg / pymysql connection as the application user."""
        conn = self.server.connect()
        if self.kind == "postgres":
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT_SECONDS}s'")
        else:
            with conn.cursor() as cur:
                cur.execute(
                    f"SET time_zone = '+00:00', lock_wait_timeout = {LOCK_TIMEOUT_SECONDS}, "
                    f"innodb_lock_wait_timeout = {LOCK_TIMEOUT_SECONDS}"
                )
        return conn

    def execute(self, sql: str) -> None:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(sql)

    def scalar(self, sql: str) -> Any:
        with contextlib.closing(self.connect()) as conn, conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            return row[0] if row else None

    def count(self, table: str) -> int:
        return int(self.scalar(f"SELECT COUNT(*) FROM {table}"))

    def truncate(self, table: str) -> None:
        self.execute(f"TRUNCATE TABLE {table}")

    def drop(self, table: str) -> None:
        self.execute(f"DROP TABLE IF EXISTS {table}")

    @contextlib.contextmanager
    def fresh_tables(self, ddl: Mapping[str, str], label: str) -> Iterator[None]:
        """Each table (name: its CREATE TABLE) created anew for the block and dropped after
        it. A table that cannot be dropped is reported, not raised: a later block uses its
        own."""
        for table, create in ddl.items():
            self.drop(table)
            self.execute(create)
        try:
            yield
        finally:
            for table in ddl:
                try:
                    self.drop(table)
                except Exception as exc:
                    print(f"[{self.kind} {label}] could not drop {table}: {exc}", flush=True)

    def version(self) -> str:
        return str(self.scalar("SELECT version()"))

    def describe_settings(self) -> dict[str, str]:
        """The server settings that matter for load speed, as the server reports them."""
        names = {
            "postgres": [
                "shared_buffers",
                "max_wal_size",
                "fsync",
                "synchronous_commit",
                "full_page_writes",
                "max_prepared_transactions",
            ],
            "mariadb": [
                "innodb_buffer_pool_size",
                "innodb_log_file_size",
                "innodb_flush_log_at_trx_commit",
                "innodb_doublewrite",
                "local_infile",
                "max_allowed_packet",
            ],
        }[self.kind]
        query = "SHOW {}" if self.kind == "postgres" else "SELECT @@GLOBAL.{}"
        return {name: str(self.scalar(query.format(name))) for name in names}


def start_database(
    stack: contextlib.ExitStack, kind: Kind, max_prepared: int, *, statement_stats: bool = False
) -> Database:
    """A server of `kind` for the whole run: the tests' env URL if set, else a throwaway one.

    `max_prepared` must exceed the largest partition count (one prepared branch each).
    `statement_stats` loads pg_stat_statements into a throwaway PostgreSQL.
    """
    servers = servers_module()
    from_env = bool(os.environ.get(servers.ENV_URL[kind], "").strip())
    settings: dict[str, object] = {} if from_env else dict(BENCH_SETTINGS[kind])
    if statement_stats and not from_env:
        settings |= STATEMENT_STATS_SETTINGS[kind]
    if kind == "postgres":
        server = stack.enter_context(
            servers.start_postgres(max_prepared_transactions=max_prepared, **settings)
        )
    else:
        server = stack.enter_context(servers.start_mariadb(**settings))
        # LOAD DATA LOCAL needs it server-side; a no-op on our own servers.
        with contextlib.closing(server.admin_connect()) as conn, conn.cursor() as cur:
            cur.execute("SET GLOBAL local_infile = 1")
    return Database(kind, server, settings)
