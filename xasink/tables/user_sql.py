"""The SQL a user gives a write: `replace_where`'s predicate and the `pre_sql`/`post_sql`
actions, checked before any job exists. They are SQL by design (as Delta's replaceWhere,
or the preactions of other Spark connectors): the server parses them, at preflight where it
can and in the apply otherwise. What is refused here is what would make them mean something
else inside xasink's statements: a second statement (`;`), a comment that hides the rest of
the statement xasink wraps around a predicate, parentheses that close xasink's own, and an
action that ends the apply's transaction (its rows would commit without the job's decision)
or, on MySQL and MariaDB, commits it implicitly (DDL)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from ..dialects import Dialect
from ..errors import ConfigurationError, PreflightError
from ..runtime.jdbc import JdbcConnection, java_message, query
from ..spec import TableRef
from .new_table import top_level_items

#: Where a quoted text ends: ' and " (doubled to escape one), ` (MySQL), $tag$ (PostgreSQL).
_DOLLAR = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)?\$")


def _unquoted(text: str, backslashes: bool, dollars: bool = True) -> str:
    """`text` with every quoted part blanked out (so that a `;` in a string literal is not a
    second statement). `backslashes`: a backslash escapes the next character in a quoted
    text, as MySQL reads it by default; `dollars`: $tag$ quotes, as PostgreSQL reads them
    (MySQL does not). Raises ValueError on a quote left open."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        dollar = _DOLLAR.match(text, i) if c == "$" and dollars else None
        if dollar:
            end = text.find(dollar.group(0), dollar.end())
            if end < 0:
                raise ValueError("a $-quoted text is not closed")
            out.append(" ")
            i = end + len(dollar.group(0))
            continue
        if c not in "'\"`":
            out.append(c)
            i += 1
            continue
        i += 1
        while True:
            if i >= len(text):
                raise ValueError(f"a {c}-quoted text is not closed")
            if backslashes and text[i] == "\\":
                i += 2
                continue
            if text[i] == c:
                if text[i + 1 : i + 2] == c:  # a doubled quote stays inside
                    i += 2
                    continue
                i += 1
                break
            i += 1
        out.append(" ")
    return "".join(out)


def _readings(dialect: str | None) -> list[tuple[bool, bool]]:
    """(backslashes, dollars): how `dialect`'s server may read quoted texts (None: any)."""
    dollars = {"postgres": (True,), None: (True, False)}.get(dialect, (False,))
    return [(b, d) for b in (False, True) for d in dollars]


def _problem(text: str, dialect: str | None = None) -> str | None:
    """Why `text` cannot be wrapped in xasink's statements, read every way `dialect`'s
    server may read quoted texts (None: any server); None if it can. `#` starts a comment
    on MySQL and MariaDB only (PostgreSQL's `#>>` is an operator), so it is looked for
    once the server is known."""
    markers = ("--", "/*", "*/") + (("#",) if dialect not in (None, "postgres") else ())
    for backslashes, dollars in _readings(dialect):
        try:
            bare = _unquoted(text, backslashes, dollars)
        except ValueError as exc:
            return str(exc)
        if ";" in bare:
            return "it holds a ';' (one statement only; give a list for several)"
        for marker in markers:
            if marker in bare:
                return f"it holds the comment marker {marker!r}"
        depth = 0
        for c in bare:
            depth += {"(": 1, ")": -1}.get(c, 0)
            if depth < 0:
                return "a ')' closes a parenthesis it did not open"
        if depth:
            return "a '(' is not closed"
    return None


def check_predicate(predicate: object, dialect: str | None = None) -> str:
    """`replace_where`'s predicate, refused (ConfigurationError) unless it is one non-empty
    SQL condition that can go inside `WHERE (...)` (as `dialect`'s server reads it)."""
    if not isinstance(predicate, str) or not predicate.strip():
        raise ConfigurationError(
            "replace_where takes a SQL condition on the table's columns, e.g. "
            f"\"day = '2024-02-29'\"; got {predicate!r}."
        )
    problem = _problem(predicate, dialect)
    if problem:
        raise ConfigurationError(
            f"replace_where {predicate!r} is refused: {problem}. It takes one SQL condition "
            "on the table's columns, with no comment, as a WHERE clause would."
        )
    return predicate.strip()


#: First words of a statement that ends or changes the apply's transaction, everywhere.
_ENDS_TRANSACTION = (
    "COMMIT",
    "ROLLBACK",
    "BEGIN",
    "START",
    "END",
    "ABORT",
    "SAVEPOINT",
    "RELEASE",
    "XA",
    "PREPARE TRANSACTION",
    "SET AUTOCOMMIT",
    "SET SESSION AUTOCOMMIT",
    "SET @@AUTOCOMMIT",
    "SET @@SESSION.AUTOCOMMIT",
    "SET TRANSACTION",
    "SET SESSION CHARACTERISTICS",
    "LOCK TABLES",
    "LOCK TABLE",
    "UNLOCK",
    "VACUUM",
    "CREATE DATABASE",
    "DROP DATABASE",
    "CREATE TABLESPACE",
    "DROP TABLESPACE",
    "ALTER SYSTEM",
)
#: First words of MySQL and MariaDB statements that commit the transaction implicitly.
_COMMITS_ON_MYSQL = (
    "CREATE",
    "ALTER",
    "DROP",
    "TRUNCATE",
    "RENAME",
    "GRANT",
    "REVOKE",
    "ANALYZE",
    "OPTIMIZE",
    "REPAIR",
    "CHECK",
    "FLUSH",
    "RESET",
    "INSTALL",
    "UNINSTALL",
    "CACHE INDEX",
    "LOAD INDEX",
    "CHANGE",
    "PURGE",
    "SET PASSWORD",
    "LOAD XML",
)


def check_actions(name: str, given: object, dialect: str | None = None) -> tuple[str, ...]:
    """`pre_sql` or `post_sql` (`name`): a statement or a list of them, each refused
    (ConfigurationError) when it is several statements, holds a comment, or would end the
    apply's transaction; with `dialect` ("postgres", "mysql"), also what that server
    commits implicitly. A trailing ';' is dropped."""
    if given is None:
        return ()
    statements = [given] if isinstance(given, str) else given
    if not isinstance(statements, Sequence) or not all(isinstance(s, str) for s in statements):
        raise ConfigurationError(
            f"{name} takes a SQL statement or a list of them; got {type(given).__name__}."
        )
    checked: list[str] = []
    for statement in statements:
        text = statement.strip()
        text = text[:-1].rstrip() if text.endswith(";") else text
        problem = "it is empty" if not text else _problem(text, dialect) or _ends(text, dialect)
        if problem:
            raise ConfigurationError(
                f"{name} statement {statement!r} is refused: {problem}. {name} runs inside "
                "the transaction that applies the rows, which commits or rolls back with "
                "them: one statement each (a list for several), no comments, none that "
                "commits or ends the transaction."
            )
        checked.append(text)
    return tuple(checked)


def _ends(text: str, dialect: str | None) -> str | None:
    """Why the statement would end the apply's transaction, or None."""
    words = " ".join(re.sub(r"[^A-Za-z_@.]+", " ", text.lstrip("( ")).upper().split())
    if any(words == w or words.startswith(w + " ") for w in _ENDS_TRANSACTION):
        return "it ends the transaction, or must run outside one"
    if words.split(" ")[0] in _SESSION_WORDS:
        return _session_problem(text, dialect)
    if re.search(r"\bCONCURRENTLY\b", words):
        return "PostgreSQL runs CONCURRENTLY outside a transaction only"
    if dialect not in (None, "postgres") and any(
        words == w or words.startswith(w + " ") for w in _COMMITS_ON_MYSQL
    ):
        return "MySQL and MariaDB commit the transaction before and after it (DDL)"
    return None


def stored_sql_problem(
    replace_where: str | None,
    pre_sql: Sequence[str],
    post_sql: Sequence[str],
    dialect: str | None = None,
) -> str | None:
    """Why a stored plan's SQL would have been refused as the write's options (on
    `dialect`'s server, when given), or None."""
    try:
        if replace_where is not None:
            check_predicate(replace_where, dialect)
        check_actions("pre_sql", list(pre_sql), dialect)
        check_actions("post_sql", list(post_sql), dialect)
    except ConfigurationError as exc:
        return str(exc)
    return None


#: First words of statements that change the session (its transaction mode, its schema,
#: role or settings), which outlive the apply or commit it: refused but for `_session_problem`.
_SESSION_WORDS = ("SET", "RESET", "USE", "DISCARD")
#: A MySQL user variable's assignment: `@name =` or `@name :=` (never `@@`, a setting).
_USER_VARIABLE = re.compile(r"\s*@[A-Za-z0-9_.$]+\s*:?=", re.ASCII)


def _session_problem(text: str, dialect: str | None) -> str | None:
    """Why a SET/RESET/USE/DISCARD statement is refused, or None for the two that stay in
    the apply: `SET LOCAL ...` on PostgreSQL (it ends with the transaction) and `SET
    @var = ...` on MySQL/MariaDB (a user variable, each of a list of them). Which server
    runs it is known at preflight; until then (None) either may pass."""
    words = text.split(None, 2)
    local = len(words) > 2 and words[0].upper() == "SET" and words[1].upper() == "LOCAL"
    if local and dialect in (None, "postgres"):
        return None
    if words[0].upper() == "SET" and dialect != "postgres" and _user_variables(text[3:]):
        return None
    return (
        "it changes the session (its transaction mode, schema, role or settings), which "
        "would outlive the apply or commit it; only SET LOCAL on PostgreSQL and SET @variable "
        "on MySQL and MariaDB are taken"
    )


def _user_variables(assignments: str) -> bool:
    """`assignments` (after SET) assign MySQL user variables only, each of them."""
    try:
        bare = _unquoted(assignments, True, False)
    except ValueError:
        return False
    return all(_USER_VARIABLE.match(p) for p in top_level_items(bare))


def check_on_server(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    columns: Sequence[str],
    replace_where: str | None,
    actions: dict[str, tuple[str, ...]],
    redact: Callable[[object], str],
) -> None:
    """At preflight, before any job exists: the actions against this server's rules
    (`check_actions`), and the predicate parsed by the server over the columns the write
    stages (`columns`, the table's spelling), which is what it will be evaluated on, and
    the apply's DELETE planned by the server (EXPLAIN, not run): a typo or a column the
    write does not have is refused here, with the server's words. Reads no row."""
    try:  # as this server reads them now (quotes, comments, what ends its transactions)
        for name, statements in actions.items():
            check_actions(name, list(statements), dialect.name)
        if replace_where is not None:
            check_predicate(replace_where, dialect.name)
    except ConfigurationError as exc:
        raise ConfigurationError(redact(str(exc))) from None
    if replace_where is None:
        return
    listed, target = ", ".join(dialect.quote(c) for c in columns), dialect.qualified(table)
    try:
        query(
            conn,
            f"SELECT 1 FROM (SELECT {listed} FROM {target}) xasink_slice "
            f"WHERE ({replace_where}) AND 1=0",
        )
        # The apply's own DELETE, planned and not run (no row, no trigger): MySQL refuses
        # one whose subquery reads the target (1093), which a SELECT would not show.
        query(conn, f"EXPLAIN DELETE FROM {target} WHERE ({replace_where})")
    except Exception as exc:
        raise PreflightError(
            f"replace_where {replace_where!r} cannot be evaluated on the columns the write "
            f"has in {table} ({', '.join(columns)}): {redact(java_message(exc))}. Fix the "
            "condition (it names the table's columns, unqualified). Nothing was written."
        ) from None


__all__ = ["check_actions", "check_on_server", "check_predicate", "stored_sql_problem"]
