"""PostgreSQL through pgjdbc's PGXADataSource."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import ClassVar
from urllib.parse import urlencode

from ..errors import PreflightError
from ..runtime.jdbc import JdbcConnection, execute, query
from ..spec import ConnectionSpec, TableRef
from ..xid import Xid
from .base import Dialect, TableIndex, advisory_key
from .grants import EVERY_WRITE, STAGED_WRITES

#: What an upsert that compares order values calls the stored row.
_STORED = "xasink_stored"


class PostgresDialect(Dialect):
    name: ClassVar[str] = "postgres"
    session_locks: ClassVar[bool] = True
    jar_kinds: ClassVar[tuple[str, ...]] = ("postgres",)
    tls_ca_property: ClassVar[str | None] = "sslrootcert"
    datasource_classes: ClassVar[tuple[str, ...]] = ("org.postgresql.xa.PGXADataSource",)
    driver_classes: ClassVar[Mapping[str, str]] = {
        "org.postgresql.xa.PGXADataSource": "org.postgresql.Driver"
    }
    default_port: ClassVar[int | None] = 5432
    text_type: ClassVar[str] = "TEXT"
    long_text_type: ClassVar[str] = "TEXT"
    timestamp_type: ClassVar[str] = "TIMESTAMPTZ"
    now_sql: ClassVar[str] = "clock_timestamp()"
    reuse_after_prepare: ClassVar[bool] = True
    temporary_schema: ClassVar[str | None] = "pg_temp"
    temporary_tables: ClassVar[bool] = True
    current_schema_sql: ClassVar[str | None] = "SELECT current_schema()"

    def datasource_url(self, spec: ConnectionSpec, datasource_class: str) -> str:
        props = {
            "connectTimeout": str(spec.connect_timeout),
            "loginTimeout": str(spec.connect_timeout),
            "tcpKeepAlive": "true",
            "socketTimeout": str(max(1, int(spec.network_timeout))),
            "ApplicationName": "xasink",
            **dict(spec.properties),
        }
        sep = "&" if "?" in spec.url else "?"
        return spec.url + sep + urlencode(props)

    def session_sql(self) -> list[str]:
        # PostgreSQL's own default, fixed so that a server or role default of REPEATABLE
        # READ or SERIALIZABLE cannot fail a wait-then-write (see Dialect.session_sql).
        return [
            "SET TIME ZONE 'UTC'",
            "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED",
        ]

    def create_index_sql(self, table: str, name: str, index: TableIndex) -> str | None:
        where = f" WHERE {index.present} IS NOT NULL" if index.present else ""
        return (
            f"CREATE INDEX IF NOT EXISTS {self.quote(index.name(name))} "
            f"ON {table} ({', '.join(index.columns)}){where}"
        )

    def drop_index(self, conn: JdbcConnection, table: str, name: str) -> None:
        # Index names are per schema: the table's own, not the first on the search path.
        rows = query(
            conn,
            "SELECT quote_ident(n.nspname) FROM pg_class c JOIN pg_namespace n ON n.oid = "
            "c.relnamespace WHERE c.oid = to_regclass(?)",
            (table,),
        )
        if rows:
            execute(conn, f"DROP INDEX IF EXISTS {rows[0][0]}.{self.quote(name)}")

    def check_server(self, conn: JdbcConnection, branches: int, user: str | None) -> None:
        limit = int(query(conn, "SELECT current_setting('max_prepared_transactions')")[0][0])
        in_use = int(query(conn, "SELECT count(*) FROM pg_prepared_xacts")[0][0])
        fix = (
            "Raise it in postgresql.conf (max_prepared_transactions = {n}) or with "
            "ALTER SYSTEM SET max_prepared_transactions = {n}, then restart PostgreSQL."
        )
        if limit == 0:
            raise PreflightError(
                "PostgreSQL has max_prepared_transactions = 0, so it cannot hold prepared (XA) "
                f"transactions, and this job needs {branches}. "
                + fix.format(n=max(branches * 2, 64))
            )
        if limit - in_use < branches:
            raise PreflightError(
                f"PostgreSQL allows max_prepared_transactions = {limit} and {in_use} are in use, "
                f"but this job holds up to {branches} prepared at once (one per partition). "
                "Lower WriterProperties(max_branches=...) (or repartition the DataFrame), "
                "resolve old ones with `xasink recover`, or "
                + fix.format(n=max(branches + in_use, branches * 2))
            )

    def estimated_rows(
        self, conn: JdbcConnection, table: str, schema: str | None, name: str
    ) -> int | None:
        rows = query(conn, "SELECT reltuples FROM pg_class WHERE oid = to_regclass(?)", (table,))
        return int(rows[0][0]) if rows and float(rows[0][0]) >= 0 else None  # -1: never analyzed

    def limit_sql(self, rows: int) -> str:
        return f"LIMIT {int(rows)}"

    def delete_some_sql(self, table: str, where: str, rows: int) -> str:
        return (
            f"DELETE FROM {table} WHERE ctid = ANY(ARRAY(SELECT ctid FROM {table} "
            f"WHERE {where} LIMIT {int(rows)}))"
        )

    def age_sql(self, column: str) -> str:
        return f"EXTRACT(EPOCH FROM (clock_timestamp() - {column}))"

    def ago_sql(self, seconds: float) -> str:
        # The statement's start, not clock_timestamp(): a volatile clock bounds no index range.
        return f"statement_timestamp() - make_interval(secs => {float(seconds):.6f})"

    def prepared_ages_sql(self) -> str:
        return (
            "SELECT gid, EXTRACT(EPOCH FROM (clock_timestamp() - prepared)) "
            "FROM pg_prepared_xacts WHERE database = current_database()"
        )

    def prepared_xids(self, conn: JdbcConnection, format_id: int) -> list[Xid]:
        rows = query(
            conn,
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND split_part(gid, '_', 1) = ?",
            (str(format_id),),
        )
        found = []
        for (gid,) in rows:
            with contextlib.suppress(ValueError):  # not pgjdbc's layout: not ours
                found.append(Xid.from_string(str(gid)))
        return found

    def prepared_count(self, conn: JdbcConnection, format_id: int) -> int:
        # pgjdbc's gid is `formatId_base64(gtrid)_base64(bqual)`; its recover() lists only
        # the current database's transactions.
        return int(
            query(
                conn,
                "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database() "
                "AND split_part(gid, '_', 1) = ?",
                (str(format_id),),
            )[0][0]
        )

    def lock_wait_sql(self, seconds: int) -> tuple[str | None, str | None]:
        return f"SET lock_timeout = '{int(seconds)}s'", "SET lock_timeout = DEFAULT"

    def lock_apply(self, conn: JdbcConnection, key: str, seconds: int) -> None:
        # A transaction-level advisory lock: lock_timeout bounds the wait. Advisory locks
        # are scoped to the current database by the server.
        query(conn, "SELECT pg_advisory_xact_lock(?)", (advisory_key(key),))

    def try_lock_apply(self, conn: JdbcConnection, key: str) -> bool:
        return bool(query(conn, "SELECT pg_try_advisory_xact_lock(?)", (advisory_key(key),))[0][0])

    def collation_problem(
        self, conn: JdbcConnection, table: TableRef, column: str, sql_type: str
    ) -> str | None:
        rows = query(
            conn,
            "SELECT c.collname, c.collisdeterministic FROM pg_attribute a JOIN pg_collation c "
            "ON c.oid = a.attcollation WHERE a.attrelid = to_regclass(?) AND a.attname = ?",
            (self.qualified(table), column),
        )
        if not rows or str(rows[0][1]).lower() not in ("false", "f", "0"):
            return None
        return (
            f"compares strings by the nondeterministic collation {str(rows[0][0])!r}, which "
            "takes some different ones for equal"
        )

    def index_names(self, conn: JdbcConnection, table: TableRef) -> set[str] | None:
        rows = query(
            conn,
            "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = to_regclass(?)",
            (self.qualified(table),),
        )
        return {str(r[0]).lower() for r in rows}

    def table_identity(self, conn: JdbcConnection, table: TableRef) -> TableRef | None:
        rows = query(
            conn,
            "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE c.oid = to_regclass(?)",
            (self.qualified(table),),
        )
        return TableRef(str(rows[0][1]), str(rows[0][0])) if rows else None

    def foreign_keys_sql(self, tables: Sequence[TableRef]) -> tuple[str, tuple[str, ...]] | None:
        marks = ", ".join("?" for _ in tables)
        return (
            "SELECT cn.nspname, c.relname, pn.nspname, p.relname FROM pg_constraint k "
            "JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace cn ON cn.oid = "
            "c.relnamespace JOIN pg_class p ON p.oid = k.confrelid JOIN pg_namespace pn ON "
            f"pn.oid = p.relnamespace WHERE k.contype = 'f' AND c.relname IN ({marks})",
            tuple(t.name for t in tables),
        )

    def types_lock_sql(self, table: TableRef) -> str | None:
        # ROW EXCLUSIVE (the apply's own DML lock, taken first) conflicts with the ACCESS
        # EXCLUSIVE an ALTER ... TYPE needs: the types read after it hold until commit.
        return f"LOCK TABLE {self.qualified(table)} IN ROW EXCLUSIVE MODE"

    def lock_session(self, conn: JdbcConnection, name: str, seconds: int) -> bool:
        # A session-level advisory lock; lock_timeout bounds the wait (an error once spent).
        query(conn, "SELECT pg_advisory_lock(?)", (advisory_key(name),))
        return True

    def unlock_session(self, conn: JdbcConnection, name: str) -> None:
        query(conn, "SELECT pg_advisory_unlock(?)", (advisory_key(name),))

    def upsert_clause(
        self, key: Sequence[str], others: Sequence[str], newer: str | None = None, target: str = ""
    ) -> str:
        keys = ", ".join(self.quote(k) for k in key)
        if not others:
            return f"ON CONFLICT ({keys}) DO NOTHING"
        updates = ", ".join(f"{self.quote(c)} = EXCLUDED.{self.quote(c)}" for c in others)
        if newer is None:
            return f"ON CONFLICT ({keys}) DO UPDATE SET {updates}"
        stored, column = self.quote(_STORED), self.quote(newer)  # `upsert_target`'s alias
        return (
            f"ON CONFLICT ({keys}) DO UPDATE SET {updates} WHERE {stored}.{column} IS NULL "
            f"OR {stored}.{column} < EXCLUDED.{column}"
        )

    def delete_joined(self, target: str, alias: str, source: str, on: str, where: str) -> str:
        return f"DELETE FROM {target} AS {alias} USING {source} WHERE {on} AND {where}"

    def upsert_target(self, target: str) -> str:
        return f"{target} AS {self.quote(_STORED)}"

    def describe_columns_sql(self, table: TableRef) -> tuple[str | None, tuple[str | None, ...]]:
        # The quoted name is a bind parameter that to_regclass parses: never pasted into SQL.
        # A collation other than the type's default is part of the type: a staging column
        # or a tombstone's compares as the table's does (an order, a key).
        return (
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) || CASE WHEN "
            "a.attcollation <> 0 AND a.attcollation <> t.typcollation THEN ' COLLATE ' || "
            "(SELECT quote_ident(n.nspname) || '.' || quote_ident(c.collname) FROM "
            "pg_collation c JOIN pg_namespace n ON n.oid = c.collnamespace WHERE c.oid = "
            "a.attcollation) ELSE '' END, NOT a.attnotnull, "
            "a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '' "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid WHERE a.attrelid = "
            "to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (self.qualified(table),),
        )

    def unique_keys_sql(self, table: TableRef) -> tuple[str, tuple[str | None, ...]]:
        return (
            "SELECT i.indexrelid::regclass::text, a.attname FROM pg_index i "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = to_regclass(?) AND i.indisunique AND i.indpred IS NULL "
            "AND i.indexprs IS NULL",
            (self.qualified(table),),
        )

    def writer_grants(
        self, conn: JdbcConnection, schema: str, tables: list[str], login: str | None
    ) -> dict[str, list[str]]:
        # A small staged write's temporary table needs TEMP on the database, which
        # PostgreSQL grants to PUBLIC; a larger one's staging table is the login's own.
        who = self.quote(login or str(query(conn, "SELECT current_user")[0][0]))
        where = self.quote(schema)
        every = [f"GRANT USAGE ON SCHEMA {where} TO {who}"]
        every += [f"GRANT SELECT, INSERT, UPDATE, DELETE ON {where}.{t} TO {who}" for t in tables]
        return {EVERY_WRITE: every, STAGED_WRITES: [self.create_grant(schema, who)]}
