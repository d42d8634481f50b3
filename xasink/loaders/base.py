"""What every loader is given: the branch's connection and the table's columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..runtime.jdbc import JdbcConnection


@dataclass(frozen=True)
class LoadTarget:
    conn: JdbcConnection  # the XA branch's java.sql.Connection
    table_sql: str  # the quoted, qualified table name
    quoted_columns: Sequence[str]
    columns: Sequence[str]  # the table's column names (and the Arrow columns' names)
    column_types: Sequence[str]  # the table's type name for each column ("" if unknown)
    dialect: str = "generic"  # "postgres" | "mysql" | "generic": how strings are bound
