"""What MySQL and MariaDB servers are and name: their versions, the binary log's format,
string literals, the column types no key holds whole. Apart from the dialect's statements
(`mysql`), which use them."""

from __future__ import annotations

import re

from ..runtime.jdbc import JdbcConnection, query, sql_error_code
from .grants import EVERY_WRITE, STAGED_WRITES


def parse_version(version: str) -> tuple[int, int, int]:
    numbers = [int(n) for n in re.findall(r"\d+", version.split("-")[0])[:3]]
    major, minor, patch = [*numbers, 0, 0, 0][:3]
    return major, minor, patch


def version_problem(version: str) -> str | None:
    """Why this server cannot keep prepared branches across a disconnect, or None."""
    mariadb = "mariadb" in version.lower()
    needed = (10, 5, 0) if mariadb else (5, 7, 7)
    if parse_version(version) >= needed:
        return None
    product = "MariaDB" if mariadb else "MySQL"
    return (
        f"{product} {version} rolls prepared XA branches back when their connection closes, "
        f"so exactly-once cannot be guaranteed. Upgrade to {product} "
        f"{'.'.join(map(str, needed))} or later."
    )


def sql_string(text: str) -> str:
    """A MySQL string literal of `text`, to be read in a message (and run as written)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


#: Column types an index holds by a prefix only: never whole, as a primary key must.
PREFIX_ONLY = frozenset(
    ("tinytext", "text", "mediumtext", "longtext", "tinyblob", "blob", "mediumblob", "longblob")
)


def binlog_problem(conn: JdbcConnection) -> str | None:
    """Why this session's writes would be refused at READ COMMITTED (xasink's isolation,
    see `MySQLDialect.session_sql`), or None: InnoDB logs them by row only, and a binary
    log in STATEMENT format refuses them (error 1665)."""
    try:
        on, binlog_format = query(conn, "SELECT @@log_bin, @@SESSION.binlog_format")[0]
    except Exception as exc:
        if sql_error_code(exc) == 1193:  # a server without binlog_format logs by row
            return None
        raise
    if str(on) in ("0", "OFF") or str(binlog_format).upper() != "STATEMENT":
        return None
    return (
        "The server writes its binary log in STATEMENT format (binlog_format=STATEMENT), in "
        "which InnoDB refuses every write at READ COMMITTED, the isolation level xasink's "
        "sessions run at (so that a transaction that waited for a lock acts on the latest "
        "rows). Nothing was written. Switch the server to row-based or mixed logging: SET "
        "GLOBAL binlog_format = 'MIXED' (or 'ROW'), and the same in its configuration file; "
        "new sessions use it."
    )


def grant_account(login: str) -> str:
    """A GRANT's account for `login` (`name` or `name@host`; no host: any, `%`)."""
    name, at, host = login.rpartition("@")
    return f"{sql_string(name)}@{sql_string(host)}" if at else f"{sql_string(login)}@'%'"


def writer_grants(
    conn: JdbcConnection, database: str, tables: list[str], login: str | None
) -> dict[str, list[str]]:
    """What a writer login (None: this connection's) needs on a journal an administrator
    made (`xasink init`), by what it writes. Staging tables are real tables in the
    journal's database or, for a small write, temporary ones: without that privilege such a
    write takes the two-phase path instead."""
    who = grant_account(login or str(query(conn, "SELECT CURRENT_USER()")[0][0]))
    every = [f"GRANT SELECT, INSERT, UPDATE, DELETE ON {database}.{t} TO {who}" for t in tables]
    if "mariadb" not in str(query(conn, "SELECT VERSION()")[0][0]).lower():
        every.append(f"GRANT XA_RECOVER_ADMIN ON *.* TO {who}")  # MySQL 8+: XA RECOVER
    # MySQL gives a table's creator nothing on it: the staging tables' DML is the
    # database's (a journal in a database of its own keeps that to xasink's tables).
    staged = [
        f"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, DROP ON {database}.* TO {who}",
        f"GRANT CREATE TEMPORARY TABLES ON {database}.* TO {who}",
    ]
    return {EVERY_WRITE: every, STAGED_WRITES: staged}
