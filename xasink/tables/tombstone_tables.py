"""A table's tombstones (`tombstones`) made ready before anything is written: created beside
the table if missing (DDL: never inside a branch, nor inside the apply's transaction,
where MySQL would commit it), listed in the writing journal's `xasink_tombstones`, checked
to hold the target's key and order exactly, and written once by no-op statements, so that
a login that may not write it is refused in preflight rather than after a decision it
could not apply."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

from ..dialects import Dialect
from ..dialects.base import TableIndex
from ..errors import PreflightError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection, execute, java_message, query
from ..spec import TableRef
from .columns import TableColumn
from .modes import MERGE, ModeOptions
from .tombstones import DELETED_AT, ORDER, REGISTRY, described, holds, tomb_table

log = logging.getLogger("xasink")

#: The session lock one first writer at a time creates tables of tombstones under.
_CREATION_LOCK = "tombstones creation"


def ensure_tombstones(
    conn: JdbcConnection,
    dialect: Dialect,
    target: TableRef,
    schema: str | None,
    options: ModeOptions,
    frame_columns: Sequence[str],
    targets: Sequence[TableColumn],
    user: str | None,
    lock_wait: float,
    redact: Redactor,
) -> None:
    """Make `target`'s table of tombstones ready (see the module), listed by the journal in
    `schema`; `target` is the table's identity, `targets` the columns written, in the order
    `options.written` gives them. Raises PreflightError saying what to grant or do."""
    spelled = dict(zip(options.written(frame_columns), targets, strict=True))
    key = [spelled[k] for k in options.key]
    order = spelled[options.order or ""]
    tombs = tomb_table(target)
    registry = TableRef(REGISTRY, schema)
    if options.mode != MERGE:  # an upsert only reads them, where a merge made them
        _readable(conn, dialect, (target, tombs), key, order, user, redact)
        return
    _refuse_unkeyable(dialect, target, key)

    def creating() -> str:  # what to do, should it fail
        where = target.schema or _current_schema(conn, dialect)
        return _create_fix(conn, dialect, where, user, registry)

    seconds = max(1, int(lock_wait))
    with _refused(dialect, (target, tombs), redact, "creating it failed", creating):
        columns = described(conn, dialect, tombs)
        if not columns or not _registered(conn, dialect, registry, tombs):
            # One first writer at a time: PostgreSQL's CREATE TABLE IF NOT EXISTS fails (a
            # duplicate key in its catalog) when another session creates the table at once.
            with dialect.session_locked(conn, _CREATION_LOCK, seconds) as got:
                if not got:
                    raise PreflightError(
                        f"Another writer has been creating {tombs} for {seconds}s (xasink's "
                        "creation lock); nothing was written. Try again once it has finished."
                    )
                _create(conn, dialect, tombs, registry, target, key, order)
            columns = described(conn, dialect, tombs)
    _check_shape(dialect, target, tombs, key, order, columns)
    _indexed(conn, dialect, tombs, seconds, redact)
    table = dialect.qualified(tombs)

    def granting() -> str:
        grantee = dialect.grantee(conn, user)
        return f"grant it: GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO {grantee}"

    with _refused(dialect, (target, tombs), redact, "this login may not write it", granting):
        _probe(conn, dialect, tombs)


def _readable(
    conn: JdbcConnection,
    dialect: Dialect,
    tables: tuple[TableRef, TableRef],
    key: Sequence[TableColumn],
    order: TableColumn,
    user: str | None,
    redact: Redactor,
) -> None:
    """An upsert's part: the table of tombstones, where a merge made one, holds the key and
    order and this login may read it. None made: no delete of the table has an order."""
    target, tombs = tables
    table = dialect.qualified(tombs)
    with _refused(dialect, tables, redact, "reading it failed", lambda: "resolve that error"):
        columns = described(conn, dialect, tombs)
    if not columns:
        return
    _check_shape(dialect, target, tombs, key, order, columns)

    def granting() -> str:
        return f"grant it: GRANT SELECT ON {table} TO {dialect.grantee(conn, user)}"

    with _refused(dialect, tables, redact, "this login may not read it", granting):
        query(conn, f"SELECT 1 FROM {table} WHERE 1 = 0")


def _refuse_unkeyable(dialect: Dialect, target: TableRef, key: Sequence[TableColumn]) -> None:
    """A merge's deletes leave tombstones keyed like the table: a key column no primary key
    can hold whole (MySQL's TEXT and BLOB, which a unique key holds by a prefix) cannot
    keep their order, so such a merge is refused before anything is written."""
    for column in key:
        if not dialect.keyable(column.sql_type):
            raise PreflightError(
                f"The key column {column.name!r} of {target} is {column.sql_type}, which an "
                "index holds only by a prefix (the table's unique key is on a prefix of it), "
                "so xasink cannot keep the order of its deletes: a merge with `order` leaves "
                "a tombstone of each deleted key, keyed like the table. Nothing was written. "
                "Make the key column a VARCHAR (or VARBINARY) long enough for its values, or "
                "merge without the table's order column (rename the DataFrame's), where a "
                "change of a deleted key applies whatever its order."
            )


def _current_schema(conn: JdbcConnection, dialect: Dialect) -> str:
    if dialect.current_schema_sql is None:
        return "<the table's schema>"
    return str(query(conn, dialect.current_schema_sql)[0][0])


def _create_fix(
    conn: JdbcConnection, dialect: Dialect, schema: str, user: str | None, registry: TableRef
) -> str:
    grant = dialect.create_grant(schema, dialect.grantee(conn, user))
    return (
        f"let this login create tables in the table's schema ({grant}), or have a login "
        "that may run one such write first (through this journal), then grant this one "
        "SELECT, INSERT, UPDATE, DELETE on the tables it makes: that one, and "
        f"{registry} if this login may not create it either"
    )


@contextlib.contextmanager
def _refused(
    dialect: Dialect,
    tables: tuple[TableRef, TableRef],
    redact: Redactor,
    what: str,
    fix: Callable[[], str],
) -> Iterator[None]:
    """A failure inside, as the PreflightError that says what to do. A wait for a lock
    another session holds on the table (an ALTER or DROP queued there, a LOCK TABLE) is
    said as such: no GRANT would help it."""
    target, tombs = tables
    try:
        yield
    except PreflightError:
        raise
    except Exception as exc:
        said = redact(java_message(exc))
        where = f"xasink keeps the order of the deleted keys of {target} in {tombs}, beside it"
        if dialect.is_lock_timeout(exc):
            raise PreflightError(
                f"{where}, and another session held a lock on it for as long as this write "
                f"waits for one ({said}): an ALTER or DROP of it, queued or running, or a LOCK "
                "TABLE. Nothing was written. Run the write again once that session is done."
            ) from None
        raise PreflightError(
            f"{where}, and {what}: {said}. Nothing was written. To write into {target} with "
            f"`order`, {fix()}."
        ) from None


def _registered(
    conn: JdbcConnection, dialect: Dialect, registry: TableRef, tombs: TableRef
) -> bool:
    if dialect.table_identity(conn, registry) is None:
        return False
    sql = f"SELECT 1 FROM {dialect.qualified(registry)} WHERE tomb_table = ?"
    return bool(query(conn, sql, (tombs.name,)))


def _create(
    conn: JdbcConnection,
    dialect: Dialect,
    tombs: TableRef,
    registry: TableRef,
    target: TableRef,
    key: Sequence[TableColumn],
    order: TableColumn,
) -> None:
    """Whatever is missing (CREATE, even with IF NOT EXISTS, needs the privilege to create
    there): the list, the table, its row in the list."""
    q = dialect.quote
    if dialect.table_identity(conn, registry) is None:
        listing = (
            f"tomb_table {dialect.ascii_id_type(64)} NOT NULL PRIMARY KEY, target_schema "
            f"{dialect.text_type}, target_name {dialect.text_type} NOT NULL, created_at "
            f"{dialect.timestamp_type} NOT NULL"
        )
        for sql in dialect.create_table_sql(dialect.qualified(registry), REGISTRY, listing):
            execute(conn, sql)
    if dialect.table_identity(conn, tombs) is None:
        columns = ", ".join(f"{q(c.name)} {c.sql_type} NOT NULL" for c in key)
        columns += (
            f", {q(ORDER)} {order.sql_type} NOT NULL, {q(DELETED_AT)} {dialect.timestamp_type} "
            f"NOT NULL, PRIMARY KEY ({', '.join(q(c.name) for c in key)})"
        )
        # The retention's sweep finds the old ones by when they were deleted.
        index = TableIndex("at", (DELETED_AT,))
        for sql in dialect.create_table_sql(dialect.qualified(tombs), tombs.name, columns, [index]):
            execute(conn, sql)
    execute(
        conn,
        f"INSERT INTO {dialect.qualified(registry)} (tomb_table, target_schema, target_name, "
        f"created_at) VALUES (?, ?, ?, {dialect.now_sql}) "
        + dialect.upsert_clause(["tomb_table"], []),
        (tombs.name, target.schema, target.name),
    )


def _indexed(
    conn: JdbcConnection, dialect: Dialect, tombs: TableRef, seconds: int, redact: Redactor
) -> None:
    """The index the retention's sweep finds old tombstones by, made again where it is
    missing: PostgreSQL makes it after the table, in a statement of its own (a crash in
    between leaves the table without it), and a person may drop it. Where this login may
    not make it (on PostgreSQL, only the table's owner may), the log says so and the write
    goes on: a sweep without it reads the whole table, never a wrong row."""
    names = dialect.index_names(conn, tombs)
    index = TableIndex("at", (DELETED_AT,))
    if names is None or index.name(tombs.name).lower() in names:
        return
    sql = dialect.create_index_sql(dialect.qualified(tombs), tombs.name, index)
    if sql is None:
        return
    try:
        with dialect.session_locked(conn, _CREATION_LOCK, seconds) as got:
            if got:
                execute(conn, sql)
    except Exception as exc:
        if not dialect.is_duplicate_index(exc):
            log.warning(
                "xasink: %s has no index by when its deletes applied, and making it failed "
                "(%s): the retention's sweep of it reads the whole table. Its owner can make "
                "it: %s",
                tombs,
                redact(java_message(exc)),
                sql,
            )


def _check_shape(
    dialect: Dialect,
    target: TableRef,
    tombs: TableRef,
    key: Sequence[TableColumn],
    order: TableColumn,
    columns: dict[str, str],
) -> None:
    """The tombstones hold every value of the target's key and order columns unchanged."""
    wanted = {c.name: c.sql_type for c in key} | {ORDER: order.sql_type}
    if holds(dialect, wanted, columns):
        return
    now = ", ".join(f"{n} {t}" for n, t in columns.items())
    needed = ", ".join(f"{n} {t}" for n, t in wanted.items())
    raise PreflightError(
        f"{tombs} keeps the order of the deleted keys of {target} as ({now}), which cannot "
        f"hold {target}'s key and order as they are now ({needed}). Nothing was written. "
        f"Alter its columns to those types, or drop it (the deletes it keeps then keep no "
        "order) and write again: it is made afresh."
    )


def _probe(conn: JdbcConnection, dialect: Dialect, tombs: TableRef) -> None:
    """Every statement the apply runs on the table, on no row: a privilege it lacks fails."""
    table, order = dialect.qualified(tombs), dialect.quote(ORDER)
    execute(conn, f"INSERT INTO {table} SELECT * FROM {table} WHERE 1 = 0")
    execute(conn, f"UPDATE {table} SET {order} = {order} WHERE 1 = 0")
    execute(conn, f"DELETE FROM {table} WHERE 1 = 0")
