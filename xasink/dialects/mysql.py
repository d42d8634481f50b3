"""MySQL and MariaDB through MariaDB Connector/J (or MySQL Connector/J when supplied)."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar
from urllib.parse import urlencode

from ..errors import JournalError, PreflightError
from ..runtime.jdbc import JdbcConnection, execute, query, sql_error_code
from ..runtime.jvm import jclass
from ..spec import ConnectionSpec, TableRef
from ..xid import Xid
from .base import Dialect, TableIndex, advisory_key
from .mysql_server import (
    PREFIX_ONLY,
    binlog_problem,
    grant_account,
    sql_string,
    version_problem,
    writer_grants,
)

MARIADB_DATASOURCE = "org.mariadb.jdbc.MariaDbDataSource"
MYSQL_DATASOURCE = "com.mysql.cj.jdbc.MysqlXADataSource"


#: ER_GTID_UNSAFE_CREATE_DROP_TEMPORARY_TABLE_IN_TRANSACTION (MySQL < 8.0.13 with GTIDs).
_GTID_UNSAFE = 1787
#: What a login that may not create a temporary table there gets: no CREATE TEMPORARY
#: TABLES on the database (1044), on the table (1142), or the GTID rule.
_TEMPORARY_REFUSED = (1044, 1142, _GTID_UNSAFE)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__


def _mariadb_connection_class() -> Any:
    return jclass("org.mariadb.jdbc.MariaDbConnection")


class MySQLDialect(Dialect):
    name: ClassVar[str] = "mysql"
    session_locks: ClassVar[bool] = True
    jar_kinds: ClassVar[tuple[str, ...]] = ("mariadb", "mysql")
    tls_ca_property: ClassVar[str | None] = "serverSslCert"
    datasource_classes: ClassVar[tuple[str, ...]] = (MARIADB_DATASOURCE, MYSQL_DATASOURCE)
    driver_classes: ClassVar[Mapping[str, str]] = {
        MARIADB_DATASOURCE: "org.mariadb.jdbc.Driver",
        MYSQL_DATASOURCE: "com.mysql.cj.jdbc.Driver",
    }
    default_port: ClassVar[int | None] = 3306
    quote_char: ClassVar[str] = "`"
    text_type: ClassVar[str] = "VARCHAR(512)"
    long_text_type: ClassVar[str] = "MEDIUMTEXT"
    timestamp_type: ClassVar[str] = "DATETIME(6)"
    # Measured (benchmarks/README.md): 1M rows into a keyless table load faster from one
    # LOAD DATA stream than from 2 or 4; into a table keyed on id, 2-4 streams are faster.
    one_stream_without_key: ClassVar[bool] = True
    drop_temporary: ClassVar[str] = "DROP TEMPORARY TABLE"
    temporary_tables: ClassVar[bool] = True
    now_sql: ClassVar[str] = "UTC_TIMESTAMP(6)"
    current_schema_sql: ClassVar[str | None] = "SELECT DATABASE()"

    def column_key(self, column: str) -> str:
        return column.lower()

    def datasource_url(self, spec: ConnectionSpec, datasource_class: str) -> str:
        url = spec.url
        if datasource_class == MARIADB_DATASOURCE:
            # Connector/J 3 accepts jdbc:mysql: only with permitMysqlScheme; 2.x takes both.
            url = re.sub(r"^jdbc:mysql:", "jdbc:mariadb:", url)
            props = {"connectTimeout": str(spec.connect_timeout * 1000)}
        else:
            props = {
                "connectTimeout": str(spec.connect_timeout * 1000),
                "pinGlobalTxToPhysicalConnection": "true",
            }
        props["socketTimeout"] = str(max(1000, int(spec.network_timeout * 1000)))
        props.update(dict(spec.properties))
        sep = "&" if "?" in url else "?"
        return url + sep + urlencode(props)

    def branch_properties(self) -> tuple[tuple[str, str], ...]:
        # LOAD DATA LOCAL lets the server ask the client for a file: only the branch
        # connections that load rows allow it, never the journal, heartbeat or recovery ones.
        return (("allowLocalInfile", "true"),)

    def login_hint(self, message: str) -> str | None:
        # caching_sha2_password (MySQL 8's default) logs in fast while the server has the
        # password cached; the first login after each server start needs the server's RSA
        # key or TLS, so a setup that worked can fail exactly when recovery must run.
        if "RSA public key" not in message and "Public Key Retrieval" not in message:
            return None
        return (
            "The user logs in with caching_sha2_password and the server has not cached the "
            "password since it started, so the login needs the server's RSA public key or TLS. "
            "Add one to the URL: serverRsaPublicKeyFile=<the server's public_key.pem>, TLS "
            "(useSsl=true&serverSslCert=<its CA file>), or on a trusted network "
            "allowPublicKeyRetrieval=true. Every server restart needs it again."
        )

    def bulk_problem(self, conn: JdbcConnection) -> str | None:
        if not conn.isWrapperFor(_mariadb_connection_class()):
            return "LOAD DATA from a stream needs MariaDB Connector/J"
        if str(query(conn, "SELECT @@GLOBAL.local_infile")[0][0]) in ("0", "OFF"):
            return "the server has local_infile=OFF (SET GLOBAL local_infile = 1 enables it)"
        return None

    def session_sql(self) -> list[str]:
        # READ COMMITTED: see Dialect.session_sql. (InnoDB logs such writes by row only, so
        # a binlog_format=STATEMENT server refuses them: check_server says so first.)
        return [
            "SET time_zone = '+00:00'",
            "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        ]

    def check_server(self, conn: JdbcConnection, branches: int, user: str | None) -> None:
        problem = version_problem(str(query(conn, "SELECT VERSION()")[0][0]))
        if problem or (problem := binlog_problem(conn)):
            raise PreflightError(problem)
        try:
            query(conn, "XA RECOVER")
        except Exception as exc:
            if sql_error_code(exc) in (1227, 1044, 1045, 1142):
                who = f"'{user}'" if user else "this user"
                raise PreflightError(
                    f"{who} may not run XA RECOVER, which xasink needs to find and resolve its "
                    f"branches. Grant it: GRANT XA_RECOVER_ADMIN ON *.* TO {who}; (MySQL 8)."
                ) from None
            raise

    def temporary_stage_refusal(
        self, conn: JdbcConnection, schema: str | None, user: str | None
    ) -> tuple[str, str] | None:
        # Tried, not read from the grants: roles, wildcard grants and MySQL < 8.0.13's GTID
        # rule (no CREATE TEMPORARY TABLE inside a transaction) all show only by trying.
        probe = self.qualified(TableRef(f"xasink_probe_{uuid.uuid4().hex}", schema))
        conn.setAutoCommit(False)
        try:
            conn.createStatement().execute(f"CREATE TEMPORARY TABLE {probe} (i INT)")
            conn.createStatement().execute(f"{self.drop_temporary} {probe}")
        except Exception as exc:
            code = sql_error_code(exc)
            if code not in _TEMPORARY_REFUSED:
                # Not a missing grant (a read-only server, say), but the one-transaction
                # path is just as closed: the job takes the two-phase one.
                return f"error {code}: {_first_line(exc)}", "resolve that error"
            where = self.quote(schema or str(query(conn, "SELECT DATABASE()")[0][0]))
            who = f"'{user}'" if user else "this user"
            fix = (
                "upgrade to MySQL 8.0.13 or later (GTID consistency refuses temporary "
                "tables inside transactions before it)"
                if code == _GTID_UNSAFE
                else f"GRANT CREATE TEMPORARY TABLES ON {where}.* TO {who}"
            )
            return f"error {code}: {_first_line(exc)}", fix
        finally:
            conn.rollback()
            conn.setAutoCommit(True)
        return None

    def ascii_id_type(self, length: int) -> str:
        # The default collations ignore case: 'A' and 'a' would be one sink. (Binary ones
        # still ignore trailing spaces, which sink ids may not have.)
        return f"VARCHAR({length}) CHARACTER SET ascii COLLATE ascii_bin"

    def create_table_sql(
        self, table: str, name: str, columns: str, indexes: Sequence[TableIndex] = ()
    ) -> list[str]:
        # MySQL has no CREATE INDEX IF NOT EXISTS: the indexes are declared with the table.
        declared = "".join(
            f", INDEX {self.quote(index.name(name))} ({self._key(index)})" for index in indexes
        )
        return [f"CREATE TABLE IF NOT EXISTS {table} ({columns}{declared})"]

    def create_index_sql(self, table: str, name: str, index: TableIndex) -> str | None:
        # No IF NOT EXISTS on MySQL: a caller adding an index to an existing table ignores
        # `is_duplicate_index`.
        return f"CREATE INDEX {self.quote(index.name(name))} ON {table} ({self._key(index)})"

    def drop_index(self, conn: JdbcConnection, table: str, name: str) -> None:
        try:
            execute(conn, f"DROP INDEX {self.quote(name)} ON {table}")
        except Exception as exc:
            if sql_error_code(exc) != 1091:  # no such index
                raise

    def nullable_sql(self, table: TableRef, column: str, sql_type: str) -> str:
        return f"ALTER TABLE {self.qualified(table)} MODIFY {self.quote(column)} {sql_type} NULL"

    def add_column(self, conn: JdbcConnection, table: str, column: str) -> None:
        try:  # MySQL has no ADD COLUMN IF NOT EXISTS
            execute(conn, f"ALTER TABLE {table} ADD COLUMN {column}")
        except Exception as exc:
            if sql_error_code(exc) != 1060:  # a duplicate column name
                raise

    @staticmethod
    def _key(index: TableIndex) -> str:
        """No partial indexes here: a one-character prefix of `present` after the key."""
        return ", ".join((*index.columns, *([f"{index.present}(1)"] if index.present else [])))

    def prepared_xids(self, conn: JdbcConnection, format_id: int) -> list[Xid]:
        found = []
        for row in query(conn, "XA RECOVER"):
            if int(row[0]) != format_id:
                continue
            data = row[3] if isinstance(row[3], bytes) else str(row[3]).encode("latin-1")
            gtrid, bqual = data[: int(row[1])], data[int(row[1]) : int(row[1]) + int(row[2])]
            with contextlib.suppress(ValueError, TypeError):
                found.append(Xid(format_id, gtrid, bqual))
        return found

    def prepared_count(self, conn: JdbcConnection, format_id: int) -> int:
        # Rows of (formatID, gtrid_length, bqual_length, data), the list XA RECOVER gives
        # the connector's recover() too.
        return sum(1 for row in query(conn, "XA RECOVER") if int(row[0]) == format_id)

    def lock_apply(self, conn: JdbcConnection, key: str, seconds: int) -> None:
        # A named lock of the session (kept through COMMIT; released by unlock_apply or
        # when the session ends). MySQL allows 64 characters.
        if not self._get_apply_lock(conn, key, max(1, seconds)):
            raise JournalError(
                f"Another job has been applying into the same table for {seconds}s "
                "(xasink's apply lock); try again once it has finished."
            )

    def try_lock_apply(self, conn: JdbcConnection, key: str) -> bool:
        return self._get_apply_lock(conn, key, 0)

    def _get_apply_lock(self, conn: JdbcConnection, key: str, seconds: int) -> bool:
        got = query(conn, "SELECT GET_LOCK(?, ?)", (f"xasink-apply-{advisory_key(key):x}", seconds))
        return bool(got) and got[0][0] is not None and int(got[0][0]) == 1

    def unlock_apply(self, conn: JdbcConnection, key: str) -> None:
        query(conn, "SELECT RELEASE_LOCK(?)", (f"xasink-apply-{advisory_key(key):x}",))

    def lock_session(self, conn: JdbcConnection, name: str, seconds: int) -> bool:
        got = query(conn, "SELECT GET_LOCK(?, ?)", (f"xasink-{advisory_key(name):x}", seconds))
        return bool(got) and got[0][0] is not None and int(got[0][0]) == 1

    def unlock_session(self, conn: JdbcConnection, name: str) -> None:
        query(conn, "SELECT RELEASE_LOCK(?)", (f"xasink-{advisory_key(name):x}",))

    def lock_wait_sql(self, seconds: int) -> tuple[str | None, str | None]:
        # lock_wait_timeout bounds metadata locks (DDL), innodb_lock_wait_timeout row locks.
        return (
            f"SET SESSION lock_wait_timeout = {int(seconds)}, "
            f"innodb_lock_wait_timeout = {max(1, int(seconds))}",
            "SET SESSION lock_wait_timeout = DEFAULT, innodb_lock_wait_timeout = DEFAULT",
        )

    def estimated_rows(
        self, conn: JdbcConnection, table: str, schema: str | None, name: str
    ) -> int | None:
        rows = query(
            conn,
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = "
            "COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (schema, name),
        )
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    def limit_sql(self, rows: int) -> str:
        return f"LIMIT {int(rows)}"

    def delete_some_sql(self, table: str, where: str, rows: int) -> str:
        return f"DELETE FROM {table} WHERE {where} LIMIT {int(rows)}"

    def collation_problem(
        self, conn: JdbcConnection, table: TableRef, column: str, sql_type: str
    ) -> str | None:
        # Only a binary collation compares by code point (its PAD SPACE ignores trailing
        # spaces: the one xasink's own tables have, utf8mb4_bin, too); the others by case,
        # accents or width as well. The description names it (`describe_columns_sql`).
        found = re.search(r" collate (\w+)", sql_type.lower())
        if found is None or found.group(1).endswith("_bin"):
            return None
        return (
            f"compares strings by the collation {found.group(1)}, which takes some different "
            "ones for equal (by case, accents or width)"
        )

    def keyable(self, sql_type: str) -> bool:
        # TEXT and BLOB columns are indexed by a prefix only ("used in key specification
        # without a key length").
        return sql_type.split("(")[0].split()[0].lower() not in PREFIX_ONLY

    def grantee(self, conn: JdbcConnection, user: str | None) -> str:
        # A GRANT names an account, user and host: the one the server took this login for.
        try:
            account = str(query(conn, "SELECT CURRENT_USER()")[0][0])
        except Exception:
            account = ""
        if "@" in account:
            return grant_account(account)
        return sql_string(user) if user else "<the writing user>"

    def create_grant(self, schema: str, grantee: str) -> str:
        return f"GRANT CREATE ON {self.quote(schema)}.* TO {grantee}"

    def writer_grants(
        self, conn: JdbcConnection, schema: str, tables: list[str], login: str | None
    ) -> dict[str, list[str]]:
        return writer_grants(conn, self.quote(schema), tables, login)

    def index_names(self, conn: JdbcConnection, table: TableRef) -> set[str] | None:
        rows = query(
            conn,
            "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (table.schema, table.name),
        )
        return {str(r[0]).lower() for r in rows}

    def age_sql(self, column: str) -> str:
        return f"TIMESTAMPDIFF(MICROSECOND, {column}, UTC_TIMESTAMP(6)) / 1000000.0"

    def ago_sql(self, seconds: float) -> str:
        return f"UTC_TIMESTAMP(6) - INTERVAL {int(seconds * 1e6)} MICROSECOND"

    def upsert_clause(
        self, key: Sequence[str], others: Sequence[str], newer: str | None = None, target: str = ""
    ) -> str:
        # VALUES(c) is the row being inserted (MySQL 8.0.20 deprecates it, but keeps it, and
        # MariaDB has no row alias syntax).
        q = self.quote
        if newer is None:
            updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in others or key)
            return f"ON DUPLICATE KEY UPDATE {updates}"
        # Each assignment sees the ones before it: the order column is assigned last, so
        # that every column's condition compares the stored order. The stored row's columns
        # are named through `target`: the SELECT's columns have the same names.
        stored = f"{target}.{q(newer)}"
        newest = f"({stored} IS NULL OR {stored} < VALUES({q(newer)}))"
        columns = [c for c in others if c != newer] + [newer]
        updates = ", ".join(
            f"{q(c)} = IF({newest}, VALUES({q(c)}), {target}.{q(c)})" for c in columns
        )
        return f"ON DUPLICATE KEY UPDATE {updates}"

    def delete_joined(self, target: str, alias: str, source: str, on: str, where: str) -> str:
        # The multi-table form: a single-table DELETE ... WHERE EXISTS would read the whole
        # target (no semi-join for it before MariaDB 11.1).
        return f"DELETE {alias} FROM {target} AS {alias} JOIN {source} ON {on} WHERE {where}"

    def describe_columns_sql(self, table: TableRef) -> tuple[str | None, tuple[str | None, ...]]:
        return (
            # COLUMN_TYPE omits the character set: a staging column must not fall back to
            # the schema's default (latin1 would refuse 4-byte characters).
            "SELECT COLUMN_NAME, CONCAT(COLUMN_TYPE, IF(CHARACTER_SET_NAME IS NULL, '', "
            "CONCAT(' CHARACTER SET ', CHARACTER_SET_NAME, ' COLLATE ', COLLATION_NAME))), "
            "IS_NULLABLE = 'YES', "
            # MariaDB spells "no default" on a nullable column as the string 'NULL'.
            "(COLUMN_DEFAULT IS NOT NULL AND COLUMN_DEFAULT <> 'NULL') OR EXTRA <> '' "
            "FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? "
            "ORDER BY ORDINAL_POSITION",
            (table.schema, table.name),
        )

    def table_identity(self, conn: JdbcConnection, table: TableRef) -> TableRef | None:
        # information_schema compares names by the server's case rules
        # (lower_case_table_names) and returns the stored spelling.
        rows = query(
            conn,
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
            (table.schema, table.name),
        )
        return TableRef(str(rows[0][1]), str(rows[0][0])) if len(rows) == 1 else None

    def foreign_keys_sql(self, tables: Sequence[TableRef]) -> tuple[str, tuple[str, ...]] | None:
        marks = ", ".join("?" for _ in tables)
        return (
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
            "REFERENCED_TABLE_NAME FROM information_schema.REFERENTIAL_CONSTRAINTS "
            f"WHERE TABLE_NAME IN ({marks})",
            tuple(t.name for t in tables),
        )

    def self_references_sql(self, table: TableRef) -> tuple[str, tuple[str | None, ...]] | None:
        return (
            "SELECT k.CONSTRAINT_NAME, k.COLUMN_NAME, k.REFERENCED_COLUMN_NAME, c.IS_NULLABLE "
            "FROM information_schema.KEY_COLUMN_USAGE k JOIN information_schema.COLUMNS c ON "
            "c.TABLE_SCHEMA = k.TABLE_SCHEMA AND c.TABLE_NAME = k.TABLE_NAME AND "
            "c.COLUMN_NAME = k.COLUMN_NAME WHERE k.TABLE_SCHEMA = COALESCE(?, DATABASE()) "
            "AND k.TABLE_NAME = ? AND k.REFERENCED_TABLE_SCHEMA = k.TABLE_SCHEMA AND "
            "k.REFERENCED_TABLE_NAME = k.TABLE_NAME ORDER BY k.CONSTRAINT_NAME, k.ORDINAL_POSITION",
            (table.schema, table.name),
        )

    def reopens_temporary(self, conn: JdbcConnection) -> bool:
        # MariaDB has since 10.2; MySQL still refuses it ("Can't reopen table", 1137).
        return "mariadb" in str(query(conn, "SELECT VERSION()")[0][0]).lower()

    def update_joined(
        self, target: str, alias: str, source: str, on: str, where: str, assignments: str
    ) -> str:
        return f"UPDATE {target} AS {alias} JOIN {source} ON {on} SET {assignments} WHERE {where}"

    def types_lock_sql(self, table: TableRef) -> str | None:
        # A locking read of no row opens the table for writing: it takes the SHARED_WRITE
        # metadata lock the apply's DELETE/INSERT need, before the catalog is read, and the
        # transaction keeps it until it ends; an ALTER issued meanwhile waits for the commit.
        # (A plain read takes SHARED_READ only: an ALTER queued behind it would then block
        # the apply's own write lock, a metadata-lock deadlock the apply loses.)
        return f"SELECT 1 FROM {self.qualified(table)} WHERE 1 = 0 FOR UPDATE"

    def unique_keys_sql(self, table: TableRef) -> tuple[str, tuple[str | None, ...]]:
        return (
            "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS "
            "WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? AND NON_UNIQUE = 0",
            (table.schema, table.name),
        )
