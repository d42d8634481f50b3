"""What an existing table looks like: its columns and its unique keys, read once up front."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..dialects import Dialect
from ..runtime.jdbc import JdbcConnection, query
from ..spec import TableRef


@dataclass(frozen=True)
class TableColumn:
    """One column of the target table, as the database describes it."""

    name: str
    #: The driver's type name, lowercased (JDBC metadata: "int4", "_int4", "jsonb", "longtext").
    type_name: str
    #: The full SQL type as the database spells it ("numeric(38,10)", "integer[]",
    #: "decimal(38,10)", "tinyint(1)"): enough to declare a staging column of the same type.
    sql_type: str
    nullable: bool
    #: A default, identity or generated value fills the column when a row leaves it out.
    has_default: bool


def describe_table(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, type_names: dict[str, str]
) -> list[TableColumn]:
    """The table's columns in declaration order, completed from the dialect's catalog.

    `type_names` comes from JDBC metadata (see preflight.table_columns); a dialect without
    a catalog query describes every column as nullable, without default, of that type."""
    sql, params = dialect.describe_columns_sql(table)
    if sql is None:
        return [TableColumn(n, t, t, True, False) for n, t in type_names.items()]
    described = {
        str(name): (spelled_type(str(sql_type)), _truthy(nullable), _truthy(has_default))
        for name, sql_type, nullable, has_default in query(conn, sql, params)
    }
    return [
        TableColumn(name, type_name, *described.get(name, (type_name, True, False)))
        for name, type_name in type_names.items()
    ]


def spelled_type(sql_type: str) -> str:
    """A described type, lowercased but for the name of its collation (` COLLATE `, as the
    dialects' descriptions spell it): PostgreSQL's are case-sensitive ("C")."""
    head, marker, collation = sql_type.partition(" COLLATE ")
    return head.lower() + (f" collate {collation}" if marker else "")


def unique_keys(conn: JdbcConnection, dialect: Dialect, table: TableRef) -> list[frozenset[str]]:
    """Column sets of the table's primary key and unique indexes (exact names)."""
    sql, params = dialect.unique_keys_sql(table)
    keys: dict[str, set[str]] = {}
    for index_name, column in query(conn, sql, params):
        keys.setdefault(str(index_name), set()).add(str(column))
    return [frozenset(columns) for columns in keys.values()]


def _truthy(value: object) -> bool:
    return str(value).strip().lower() in ("1", "true", "t", "yes")


def column_by_key(dialect: Dialect, columns: Sequence[TableColumn]) -> dict[str, TableColumn]:
    return {dialect.column_key(c.name): c for c in columns}
