"""The target table before any branch opens: created when missing, then checked against the
DataFrame, so that a mismatch is reported by column name and nothing is written."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql.types import StructType

from ..dialects import Dialect
from ..errors import ConfigurationError, PreflightError, SchemaMismatchError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection, execute, java_message
from ..spec import TableRef
from .columns import TableColumn, column_by_key, describe_table, unique_keys
from .modes import APPEND, MERGE, OVERWRITE, UPSERT, ModeOptions
from .new_table import NewTable
from .order_precision import order_refusal, string_refusal
from .types import column_ddl_type, compatibility_problem

log = logging.getLogger("xasink")

CREATE_CHOICES = ("if_missing", "never")
#: The privileges a write needs on its table, by mode (SELECT: its columns are read first).
_PRIVILEGES = {
    APPEND: "SELECT, INSERT",
    OVERWRITE: "SELECT, INSERT, DELETE",
    UPSERT: "SELECT, INSERT, UPDATE",
    MERGE: "SELECT, INSERT, UPDATE, DELETE",
}
#: A created table shaped by the DataFrame's schema alone.
NO_SHAPE = NewTable()


def check_create(create: str) -> None:
    if create not in CREATE_CHOICES:
        raise ConfigurationError(
            f"create must be 'if_missing' (create the table from the DataFrame's schema) or "
            f"'never'; got {create!r}."
        )


def create_table_sql(
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    key: Sequence[str],
    new_table: NewTable = NO_SHAPE,
) -> str:
    """CREATE TABLE from the DataFrame's schema; the key columns become the primary key.
    `new_table`'s column types replace the mapped ones, its options follow the columns."""
    columns = []
    for field in schema.fields:
        is_key = field.name in key
        sql_type = new_table.type_of(field.name) or column_ddl_type(
            dialect.name, field.name, field.dataType, key=is_key
        )
        null = " NOT NULL" if is_key or not field.nullable else ""
        columns.append(f"{dialect.quote(field.name)} {sql_type}{null}")
    if key:
        columns.append(f"PRIMARY KEY ({', '.join(dialect.quote(k) for k in key)})")
    sql = f"CREATE TABLE {dialect.qualified(table)} ({', '.join(columns)})"
    return f"{sql} {new_table.options}" if new_table.options else sql


def ensure_table(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    options: ModeOptions,
    create: str,
    redact: Redactor,
    user: str | None = None,
    new_table: NewTable = NO_SHAPE,
) -> tuple[list[TableColumn], bool]:
    """The table's columns, creating the table first when it is missing and allowed
    (shaped by `new_table`, which an existing table does not need).

    Returns (columns, created). DDL runs here, before any branch: a later failure leaves
    the new table empty. A table this login may not read looks missing until CREATE says
    it exists: then the refusal names the GRANT the write needs."""
    try:
        return described_columns(conn, dialect, table, redact), False
    except PreflightError:
        if create == "never":
            raise
    written = StructType([schema[c] for c in options.written(schema.names)])
    sql = create_table_sql(dialect, table, written, options.key, new_table)
    try:
        execute(conn, sql)
    except Exception as exc:
        if not dialect.is_existing_table(exc):
            raise PreflightError(
                f"Creating table {table} failed: {redact(java_message(exc))}. Create it "
                "yourself (and pass create='never'), or check the user's CREATE privilege."
            ) from None
        # There after all: another writer's a moment ago, or one this login may not read.
        try:
            types = column_types(conn, dialect, table)
        except Exception as again:
            grant = f"GRANT {_PRIVILEGES[options.mode]} ON {dialect.qualified(table)}"
            raise PreflightError(
                f"Table {table} exists, but this login may not read it "
                f"({redact(java_message(again))}); nothing was written. Have its owner grant "
                f"what mode={options.mode!r} needs: {grant} TO {dialect.grantee(conn, user)}; or "
                "write into another table."
            ) from None
        return describe_table(conn, dialect, table, types), False
    log.info("xasink: created table %s", table)
    return described_columns(conn, dialect, table, redact), True


def described_columns(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, redact: Redactor
) -> list[TableColumn]:
    """The table's columns as read now, described (or a PreflightError)."""
    return describe_table(conn, dialect, table, table_columns(conn, dialect, table, redact))


def check_fit(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    options: ModeOptions,
    columns: Sequence[TableColumn],
) -> list[TableColumn]:
    """The target column of each written DataFrame column, in DataFrame order.

    Names every column that is missing, of an incompatible type, NOT NULL without a
    default yet not written, a stored `order` column that cannot hold the order values
    exactly or takes different strings for one (see order_precision), and the missing
    unique key an upsert or merge needs."""
    fields = [schema[c] for c in options.written(schema.names)]
    names = match_columns(dialect, table, [f.name for f in fields], [c.name for c in columns])
    by_key = column_by_key(dialect, columns)
    targets = [by_key[dialect.column_key(n)] for n in names]
    problems = [
        problem
        for field, column in zip(fields, targets, strict=True)
        if (problem := compatibility_problem(dialect.name, field.dataType, column))
    ]
    written = {dialect.column_key(n) for n in names}
    problems += [
        f"column {c.name!r} is NOT NULL without a default, and the DataFrame does not write it "
        f"(to let rows leave it out: {dialect.nullable_sql(table, c.name, c.sql_type)})"
        for c in columns
        if not c.nullable and not c.has_default and dialect.column_key(c.name) not in written
    ]
    if problems:
        raise SchemaMismatchError(
            f"The DataFrame does not fit table {table}: {'; '.join(problems)}. Change the "
            "DataFrame (select, cast, rename) or the table, then run the write again."
        )
    if options.order and options.order_stored:
        at = [f.name for f in fields].index(options.order)
        refusal = order_refusal(
            dialect.name, str(table), fields[at].dataType, targets[at]
        ) or string_refusal(conn, dialect, table, fields[at].dataType, targets[at])
        if refusal:
            raise SchemaMismatchError(refusal)
    if options.key:
        spelled = dict(zip((f.name for f in fields), names, strict=True))
        key = [spelled[k] for k in options.key]
        if frozenset(key) not in unique_keys(conn, dialect, table):
            raise SchemaMismatchError(_keyless(dialect, table, options, key))
    return targets


def _keyless(dialect: Dialect, table: TableRef, options: ModeOptions, key: list[str]) -> str:
    """Why `key` needs a unique key on `table`: upsert and merge match rows on it; append
    and overwrite use it only as the primary key of a table they create, so on a table
    without it, it would change nothing (a forgotten mode='upsert')."""
    columns = ", ".join(key)
    if not options.routed:
        return (
            f"key=({columns}) has no use in mode={options.mode!r} on {table}, which has no "
            "primary key or unique index on exactly these columns (append and overwrite "
            "use a key only as the primary key of a table they create): did you mean "
            "mode='upsert', insert or update by key? Else drop key. Nothing was written."
        )
    return (
        f"mode={options.mode!r} matches rows on ({columns}), but {table} has no "
        "primary key or unique index on exactly these columns. Add one, e.g. ALTER "
        f"TABLE {dialect.qualified(table)} ADD PRIMARY KEY "
        f"({', '.join(dialect.quote(k) for k in key)})."
    )


def table_columns(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, redact: Redactor
) -> dict[str, str]:
    """The table's columns (name → the database's type name), or a PreflightError."""
    try:
        return column_types(conn, dialect, table)
    except Exception as exc:
        raise PreflightError(
            f"Target table {table} does not exist or cannot be read: "
            f"{redact(java_message(exc))}. Create it first (or check the schema, the name's "
            "case, and the user's privileges)."
        ) from None


def column_types(conn: JdbcConnection, dialect: Dialect, table: TableRef) -> dict[str, str]:
    """The table's columns (name → the database's type name), as a query of it returns
    them: it fails where this login may not read the table."""
    statement = conn.prepareStatement(f"SELECT * FROM {dialect.qualified(table)} WHERE 1=0")
    try:
        meta = statement.executeQuery().getMetaData()
        return {
            str(meta.getColumnName(i)): str(meta.getColumnTypeName(i)).lower()
            for i in range(1, int(meta.getColumnCount()) + 1)
        }
    finally:
        statement.close()


def match_columns(
    dialect: Dialect, table: TableRef, frame_columns: Sequence[str], table_columns: Sequence[str]
) -> tuple[str, ...]:
    """The table's own spelling of each DataFrame column; names every missing one."""
    matched = spelled_columns(dialect, frame_columns, table_columns)
    missing = [c for c, name in zip(frame_columns, matched, strict=True) if name is None]
    if missing:
        raise SchemaMismatchError(
            f"Table {table} has no column(s) {', '.join(repr(c) for c in missing)} that the "
            f"DataFrame writes. Table columns: {', '.join(table_columns)}. Add the columns to "
            "the table (or let the write add them: schema_mode='merge', format('xasink')'s "
            "option xasink.schemaMode=merge), or select/rename DataFrame columns to match."
        )
    return tuple(name for name in matched if name is not None)


def spelled_columns(
    dialect: Dialect, frame_columns: Sequence[str], table_columns: Sequence[str]
) -> list[str | None]:
    """The table's own spelling of each DataFrame column (its exact name, else the one
    column equal to it but for case), or None where the table has no such column."""
    exact = {dialect.column_key(c): c for c in table_columns}
    folded: dict[str, list[str]] = {}
    for column in table_columns:
        folded.setdefault(column.lower(), []).append(column)
    matched: list[str | None] = []
    for column in frame_columns:
        name = exact.get(dialect.column_key(column))
        if name is None and len(folded.get(column.lower(), [])) == 1:
            name = folded[column.lower()][0]
        matched.append(name)
    return matched
