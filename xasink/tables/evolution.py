"""Schema evolution (`schema_mode="merge"`, as delta-rs names it): the DataFrame's columns
that the target table lacks are added to it, each NULLABLE and of the type a created table
would give it, before any branch opens.

Why here and so:

* DDL is not transactional on MySQL and MariaDB, and cannot run inside an XA branch on any
  of the three: so the columns are added in preflight, in autocommit, before the job
  exists. A job that fails afterwards leaves only the new columns, empty (NULL in every
  old row), and a rerun finds them there.
* Only ever ADD COLUMN ... NULL: nothing is dropped, narrowed or retyped, and no NOT NULL
  is added (the table's existing rows have no value for it). A column of another type is
  refused by the usual check (`catalog.check_fit`), as without evolution.
* Two writers adding the same column at once both succeed: the second one's duplicate-
  column error (PostgreSQL 42701, MySQL and MariaDB 1060; MySQL has no ADD COLUMN IF NOT
  EXISTS) is taken for "it is there now", and the columns are read again, so a type the
  other writer chose that does not fit is refused then.
* The ALTER waits for its lock (PostgreSQL's ACCESS EXCLUSIVE, MySQL's metadata lock) no
  longer than the write's `lock_wait_timeout`, which binds the preflight session; behind a
  prepared branch or a long reader it gives up saying who held the table."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pyspark.sql.types import StructType

from ..defaults import SchemaMode
from ..dialects import Dialect
from ..dialects.altering import alter_grant, is_duplicate_column, lock_holders
from ..errors import ConfigurationError, PreflightError, SchemaMismatchError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection, execute, is_denied, java_message
from ..spec import TableRef
from .catalog import check_fit, described_columns, spelled_columns
from .columns import TableColumn
from .modes import ModeOptions
from .new_table import NewTable
from .types import column_ddl_type

log = logging.getLogger("xasink")

MERGE_SCHEMA: SchemaMode = "merge"
SCHEMA_MODES = (MERGE_SCHEMA,)


def check_schema_mode(value: object, name: str = "schema_mode") -> SchemaMode | None:
    """`value` as a schema mode, or the ConfigurationError that says what it takes."""
    if value is None:
        return None
    if value == MERGE_SCHEMA:
        return MERGE_SCHEMA
    raise ConfigurationError(
        f"{name} takes 'merge' (add the DataFrame's columns that the table lacks, as nullable "
        f"columns) or, by default, nothing (refuse such a column); got {value!r}."
    )


def new_columns(
    dialect: Dialect, schema: StructType, options: ModeOptions, columns: Sequence[TableColumn]
) -> list[str]:
    """The written DataFrame columns that the table has no column for, in DataFrame order."""
    written = options.written(schema.names)
    spelled = spelled_columns(dialect, written, [c.name for c in columns])
    return [c for c, name in zip(written, spelled, strict=True) if name is None]


def add_columns(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    options: ModeOptions,
    missing: Sequence[str],
    *,
    new_table: NewTable,
    lock_wait: float,
    redact: Redactor,
    user: str | None,
) -> tuple[list[str], list[TableColumn]]:
    """Add `missing` (DataFrame columns) to `table` in one ALTER TABLE, nullable, typed as a
    created table would type them (`new_table`'s column types first): all or none. Where
    another writer added some first (a duplicate-column error), the table is read again
    and the rest are added, in one statement again. Returns the columns this call added
    and the table's columns, read after the last ALTER."""
    added: list[str] = []
    for _ in range(len(missing) + 1):  # each retry follows another writer's columns
        try:
            execute(conn, _alter_sql(dialect, table, schema, new_table, missing))
        except Exception as exc:
            if not is_duplicate_column(exc):
                raise _refusal(
                    conn, dialect, table, missing, exc, lock_wait, redact, user
                ) from None
        else:
            added += missing
            log.warning(
                "xasink: schema_mode='merge' added column(s) %s to table %s (nullable)",
                ", ".join(repr(c) for c in missing),
                table,
            )
        columns = described_columns(conn, dialect, table, redact)
        missing = new_columns(dialect, schema, options, columns)
        if not missing:
            return added, columns
    raise PreflightError(
        f"schema_mode='merge' could not add column(s) {_names(missing)} to table {table}: "
        "other writers kept adding columns of the same names. Nothing was written. Run the "
        "write again."
    )


def _alter_sql(
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    new_table: NewTable,
    missing: Sequence[str],
) -> str:
    """One ALTER TABLE adding every column of `missing`: atomic on PostgreSQL (DDL is
    transactional), one statement on MySQL and MariaDB."""

    def typed(name: str) -> str:
        data_type = schema[name].dataType
        return new_table.type_of(name) or column_ddl_type(dialect.name, name, data_type, key=False)

    adds = ", ".join(f"ADD COLUMN {dialect.quote(name)} {typed(name)} NULL" for name in missing)
    return f"ALTER TABLE {dialect.qualified(table)} {adds}"


def _names(columns: Sequence[str]) -> str:
    return ", ".join(repr(c) for c in columns)


def check_before_adding(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    schema: StructType,
    options: ModeOptions,
    columns: Sequence[TableColumn],
    missing: Sequence[str],
) -> None:
    """Refuse the write before any column is added when what the table has already does
    not fit (a column of another type, a key it lacks): a refused write leaves the table
    as it was."""
    refuse_new_keys(table, options, missing)
    kept = StructType([f for f in schema.fields if f.name not in missing])
    check_fit(conn, dialect, table, kept, options, columns)


def refuse_new_keys(table: TableRef, options: ModeOptions, missing: Sequence[str]) -> None:
    """A key column is never added: it would be NULL in every existing row, so it could key
    nothing (and a staged write's `order` is stored only where the table has it)."""
    keyed = [c for c in missing if c in options.key]
    if keyed:
        raise SchemaMismatchError(
            f"key column(s) {', '.join(repr(c) for c in keyed)} are not in table {table}, and "
            "schema_mode='merge' does not add them: a column it adds is NULL in every existing "
            "row, so it cannot key the table. Add the column and its primary key or unique "
            "index yourself, or write with the table's key. Nothing was written."
        )


def _refusal(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    columns: Sequence[str],
    exc: BaseException,
    lock_wait: float,
    redact: Redactor,
    user: str | None,
) -> PreflightError:
    said = redact(java_message(exc))
    adding = f"schema_mode='merge' could not add column(s) {_names(columns)} to table {table}"
    if dialect.is_lock_timeout(exc):
        try:
            holders = lock_holders(dialect, conn, table)
        except Exception:  # only words for the message: the refusal stands without them
            holders = None
        held = f" ({holders})" if holders else ""
        return PreflightError(
            f"{adding}: ALTER TABLE waited lock_wait_timeout ({max(1, int(lock_wait))} s, as "
            "the session is bound: whole seconds, at least 1) for the table, "
            f"which another transaction held{held}: one that read or wrote it and is still "
            "open, e.g. a prepared branch of an unfinished job (`xasink jobs` lists them, "
            "`xasink recover` finishes them) or a long query. Nothing was written. Run the "
            f"write again once it has ended, or raise lock_wait_timeout. ({said})"
        )
    if is_denied(exc):
        grantee = dialect.quote(user) if user else "<the writing user>"
        try:
            grantee = dialect.grantee(conn, user)
            grant = alter_grant(dialect, conn, table, grantee)
        except Exception:  # only words for the message: the refusal stands without them
            grant = (
                f"the right to ALTER TABLE {dialect.qualified(table)}, granted to {grantee} "
                "(on PostgreSQL ownership of the table or membership in its owning role, "
                "unless that role is a superuser or may create roles; on MySQL and MariaDB "
                "GRANT ALTER, CREATE, INSERT on it)"
            )
        return PreflightError(
            f"{adding}: this login may not alter the table ({said}). Nothing was written. "
            f"Have its owner allow it: {grant}; or add the column yourself, or write "
            "without schema_mode."
        )
    return PreflightError(f"{adding}: {said}. Nothing was written.")


__all__ = [
    "MERGE_SCHEMA",
    "SCHEMA_MODES",
    "add_columns",
    "check_before_adding",
    "check_schema_mode",
    "new_columns",
    "refuse_new_keys",
]
