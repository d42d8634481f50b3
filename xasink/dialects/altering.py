"""What adding a column to a user's table (schema evolution) needs to know of each server:
its duplicate-column error, what lets a login ALTER the table, and who holds a lock on it."""

from __future__ import annotations

from ..runtime.jdbc import JdbcConnection, query, sql_error_code, sql_state
from ..spec import TableRef
from .base import Dialect

#: A prepared transaction's locks have no backend (pid NULL); its transaction id lock
#: shares their virtual transaction, and names it in pg_prepared_xacts.
_PG_HOLDERS = (
    "SELECT DISTINCT coalesce('prepared transaction ' || p.gid, CASE WHEN l.pid IS NULL "
    "THEN 'a prepared transaction' ELSE 'session pid ' || l.pid::text END) FROM pg_locks l "
    "LEFT JOIN pg_locks x ON l.pid IS NULL AND x.locktype = 'transactionid' AND "
    "x.virtualtransaction = l.virtualtransaction LEFT JOIN pg_prepared_xacts p ON "
    "p.transaction = x.transactionid WHERE l.granted AND l.relation = to_regclass(?) AND "
    "l.pid IS DISTINCT FROM pg_backend_pid()"
)


def is_duplicate_column(exc: BaseException) -> bool:
    """ADD COLUMN failed because the table has the column: PostgreSQL's 42701, MySQL's and
    MariaDB's 1060 (another writer added it a moment ago)."""
    return sql_state(exc) == "42701" or sql_error_code(exc) == 1060


def alter_grant(dialect: Dialect, conn: JdbcConnection, table: TableRef, grantee: str) -> str:
    """What lets `grantee` (as a GRANT names it) add columns to `table`."""
    table = dialect.table_identity(conn, table) or table  # a GRANT needs its schema
    if dialect.name == "mysql":  # ALTER TABLE needs ALTER, CREATE and INSERT on the table
        return f"GRANT ALTER, CREATE, INSERT ON {dialect.qualified(table)} TO {grantee}"
    if dialect.name != "postgres":
        return f"the privilege to ALTER TABLE {dialect.qualified(table)}, granted to {grantee}"
    # No privilege lets a role ALTER a table: its owner, or a member of the owning role.
    rows = query(
        conn,
        "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass(?)",
        (dialect.qualified(table),),
    )
    owner = dialect.quote(str(rows[0][0])) if rows else "<the table's owner>"
    return (
        f"GRANT {owner} TO {grantee} (on PostgreSQL only the table's owner, or a member of "
        "the owning role, may add columns to it)"
    )


def lock_holders(dialect: Dialect, conn: JdbcConnection, table: TableRef) -> list[str] | None:
    """Who holds a lock on `table` now, as one looks them up (a prepared transaction's id,
    a session's pid); None: this server cannot tell (MySQL's metadata locks are listed only
    where performance_schema instruments them)."""
    if dialect.name != "postgres":
        return None
    rows = query(conn, _PG_HOLDERS, (dialect.qualified(table),))
    return sorted(str(r[0]) for r in rows if r[0] is not None)


__all__ = ["alter_grant", "is_duplicate_column", "lock_holders"]
