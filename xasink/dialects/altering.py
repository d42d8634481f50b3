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
        "SELECT r.rolname, r.rolsuper OR r.rolcreaterole FROM pg_class c JOIN pg_roles r "
        "ON r.oid = c.relowner WHERE c.oid = to_regclass(?)",
        (dialect.qualified(table),),
    )
    if not rows:
        return (
            f"GRANT <the table's owner> TO {grantee} (on PostgreSQL only the table's owner, "
            "or a member of the owning role, may add columns to it)"
        )
    owner, powerful = dialect.quote(str(rows[0][0])), bool(rows[0][1])
    if not powerful:
        return (
            f"GRANT {owner} TO {grantee} (on PostgreSQL only the table's owner, or a member "
            "of the owning role, may add columns to it)"
        )
    # A member of a superuser or CREATEROLE role can make itself a superuser: never that.
    role = dialect.quote(f"{table.name}_owner"[:63])
    return (
        f"CREATE ROLE {role} NOLOGIN; ALTER TABLE {dialect.qualified(table)} OWNER TO {role}; "
        f"GRANT {role} TO {grantee} (on PostgreSQL only the table's owner, or a member of the "
        f"owning role, may add columns to it; its owner {owner} is a superuser or may create "
        "roles, and a member of such a role can make itself a superuser, so give the table "
        "to a role of its own rather than granting that one)"
    )


def lock_holders(dialect: Dialect, conn: JdbcConnection, table: TableRef) -> str | None:
    """Who holds a lock on `table` now, as one looks them up: on PostgreSQL the prepared
    transactions (by id) and sessions (by pid) holding one; on MySQL and MariaDB, whose
    metadata locks are listed only where performance_schema instruments them, the prepared
    XA transactions of the server (XA RECOVER), any of which may. None: nothing known."""
    if dialect.name == "postgres":
        rows = query(conn, _PG_HOLDERS, (dialect.qualified(table),))
        held = sorted(str(r[0]) for r in rows if r[0] is not None)
        more = " ..." if len(held) > 5 else ""
        return f"held by: {', '.join(held[:5])}{more}" if held else None
    if dialect.name != "mysql":
        return None
    prepared = [_xa_name(row) for row in query(conn, "XA RECOVER")]
    if not prepared:
        return None
    return (
        "prepared XA transactions on the server, any of which may hold it: "
        f"{', '.join(prepared[:5])}{' ...' if len(prepared) > 5 else ''}"
    )


def _xa_name(row: tuple[object, ...]) -> str:
    """An XA RECOVER row as XA ROLLBACK would name it: its gtrid when printable."""
    data, length = row[3], int(str(row[1]))
    raw = data if isinstance(data, bytes) else str(data).encode("latin-1")
    gtrid = raw[:length].decode("latin-1")
    if gtrid.isprintable() and "'" not in gtrid:
        return f"'{gtrid}'"
    return f"one of formatID {row[0]}"


__all__ = ["alter_grant", "is_duplicate_column", "lock_holders"]
