"""Any XA-capable JDBC driver whose XADataSource class the caller names: ANSI SQL, the
JDBC escapes for time arithmetic, SQLSTATEs for errors, and the driver's own XAResource
for everything XA. Tested against Apache Derby's network server (docs/deployment.md)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from ..runtime.jdbc import JdbcConnection, execute, sql_error_code, sql_state
from ..runtime.jvm import jclass
from ..spec import ConnectionSpec
from .base import Dialect, TableIndex
from .beans import configure, set_properties

#: SQLSTATEs of a failure, by server: X/Open's own, PostgreSQL's, Derby's, DB2's.
#: A table in a schema that does not exist is missing too (Derby's 42Y07: a user's default
#: schema exists only once something is created in it).
_MISSING_TABLE = frozenset({"42S02", "42P01", "42X05", "42Y07", "42704"})
_EXISTING = frozenset({"42S01", "42P07", "X0Y32", "42710"})
_DUPLICATE_INDEX = frozenset({"42S11", "X0Y32", "42710"})
#: A column that exists: X/Open's, Derby's (as for a table), DB2's, PostgreSQL's.
_DUPLICATE_COLUMN = frozenset({"42S21", "X0Y32", "42711", "42701"})
#: A lock wait given up: Derby's 40XL1 and 40XL2 (the same with derby.locks.deadlockTrace
#: on; it rolls the transaction back, as DB2's 40001 with reason 68 does), PostgreSQL's
#: 55P03, DB2's 57033 (a deadlock or a timeout, the transaction left as it was: either way
#: a wait on a lock another transaction holds, which is what a caller reports).
_LOCK_TIMEOUT = frozenset({"40XL1", "40XL2", "55P03", "57033"})


def _oracle(state: str) -> bool:
    """Oracle's driver reports ORA-nnnnn under a class-wide SQLSTATE (42000 for syntax and
    objects, 61000 for resources, 72000 for SQL*Plus-era statements, 99999 unmapped)."""
    return state in ("42000", "61000", "72000", "99999")


def _sql_server(state: str) -> bool:
    """Microsoft's driver: S0001/S0002 for an existing or missing table, else S000 and the
    error's state number; 42000 and 42S0x with xopenStates=true."""
    return state.startswith("S000") or state in ("42000", "42S01", "42S02")


#: Vendor codes, each with the SQLSTATEs its own vendor's driver sends it under: the same
#: number from another server (MySQL's 1222 under 21000) means something else.
_VendorCodes = tuple[tuple[int, Callable[[str], bool]], ...]
_MISSING_TABLE_CODES: _VendorCodes = ((942, _oracle), (208, _sql_server))
_EXISTING_CODES: _VendorCodes = ((955, _oracle), (2714, _sql_server))
_DUPLICATE_INDEX_CODES: _VendorCodes = ((955, _oracle), (1913, _sql_server))
_DUPLICATE_COLUMN_CODES: _VendorCodes = ((1430, _oracle), (2705, _sql_server))
#: Oracle's ORA-00054 (NOWAIT) and ORA-30006 (WAIT n), SQL Server's 1222.
_LOCK_TIMEOUT_CODES: _VendorCodes = ((54, _oracle), (30006, _oracle), (1222, _sql_server))


class GenericDialect(Dialect):
    """ANSI quoting, a data source configured by its URL or its JavaBean properties
    (`beans`), batched inserts; append only (no upsert statement is ANSI)."""

    name: ClassVar[str] = "generic"
    stages: ClassVar[bool] = False
    evolves: ClassVar[bool] = False

    bean_properties: ClassVar[bool] = True

    def new_datasource(self, spec: ConnectionSpec, datasource_class: str) -> Any:
        """The class configured by its URL (setURL) or, lacking one, by the URL's host, port,
        database and attributes (`beans`); `Database(properties=...)` through the setters of
        their names, which refuse a name the class lacks."""
        ds = jclass(datasource_class)()
        setter = next((s for s in ("setURL", "setUrl") if hasattr(ds, s)), None)
        if setter is not None:
            getattr(ds, setter)(spec.url)
            set_properties(ds, spec.properties)
        else:
            configure(ds, spec.url, spec.properties)
        if spec.user is not None:
            ds.setUser(spec.user)
        if spec.password is not None:
            ds.setPassword(spec.password)
        return ds

    # -- errors, by SQLSTATE ----------------------------------------------------------
    def is_missing_table(self, exc: BaseException) -> bool:
        return sql_state(exc) in _MISSING_TABLE or _vendor(exc, _MISSING_TABLE_CODES)

    def is_existing_table(self, exc: BaseException) -> bool:
        return sql_state(exc) in _EXISTING or _vendor(exc, _EXISTING_CODES)

    def is_duplicate_index(self, exc: BaseException) -> bool:
        return sql_state(exc) in _DUPLICATE_INDEX or _vendor(exc, _DUPLICATE_INDEX_CODES)

    def is_lock_timeout(self, exc: BaseException) -> bool:
        return sql_state(exc) in _LOCK_TIMEOUT or _vendor(exc, _LOCK_TIMEOUT_CODES)

    # -- DDL without IF NOT EXISTS (SQL:2016 has none) --------------------------------
    def create_table_sql(
        self, table: str, name: str, columns: str, indexes: Sequence[TableIndex] = ()
    ) -> list[str]:
        # No creation lock here: a first writer racing another one gets `is_existing_table`
        # and waits for the other's journal (`JournalLayout._create_first`); an upgrade
        # skips what exists (`JournalLayout._create_unless_there`).
        return [f"CREATE TABLE {table} ({columns})"] + [
            sql for index in indexes if (sql := self.create_index_sql(table, name, index))
        ]

    def create_index_sql(self, table: str, name: str, index: TableIndex) -> str | None:
        if index.present is not None:
            return None
        # An index lives in its table's schema; a caller adding it again ignores
        # `is_duplicate_index`.
        schema = table.rsplit(".", 1)[0] + "." if "." in table else ""
        return (
            f"CREATE INDEX {schema}{self.quote(index.name(name))} "
            f"ON {table} ({', '.join(index.columns)})"
        )

    def drop_index(self, conn: JdbcConnection, table: str, name: str) -> None:
        schema = table.rsplit(".", 1)[0] + "." if "." in table else ""
        try:
            execute(conn, f"DROP INDEX {schema}{self.quote(name)}")
        except Exception as exc:
            if not self.is_missing_table(exc) and sql_state(exc) != "42X65":  # Derby: no index
                raise

    def add_column(self, conn: JdbcConnection, table: str, column: str) -> None:
        try:  # no ADD COLUMN IF NOT EXISTS in SQL:2016
            execute(conn, f"ALTER TABLE {table} ADD COLUMN {column}")
        except Exception as exc:
            if sql_state(exc) not in _DUPLICATE_COLUMN and not _vendor(
                exc, _DUPLICATE_COLUMN_CODES
            ):
                raise

    # -- time and paging: JDBC escapes and SQL:2008 ------------------------------------
    def age_sql(self, column: str) -> str:
        return f"{{fn TIMESTAMPDIFF(SQL_TSI_SECOND, {column}, CURRENT_TIMESTAMP)}}"

    def ago_sql(self, seconds: float) -> str:
        # Whole seconds, rounded up: a range a second older than asked holds nothing newer.
        return f"{{fn TIMESTAMPADD(SQL_TSI_SECOND, {-math.ceil(seconds)}, CURRENT_TIMESTAMP)}}"

    def estimated_rows(
        self, conn: JdbcConnection, table: str, schema: str | None, name: str
    ) -> int | None:
        return None  # no standard statistics: counted

    def limit_sql(self, rows: int) -> str:
        return f"FETCH FIRST {int(rows)} ROWS ONLY"


def _vendor(exc: BaseException, codes: _VendorCodes) -> bool:
    """A vendor code of `codes` under a SQLSTATE of that vendor's driver (a class-wide one
    that does not say it: Oracle's 42000, SQL Server's S0001 and friends)."""
    code, state = sql_error_code(exc), sql_state(exc) or ""
    return any(code == number and of_vendor(state) for number, of_vendor in codes)
