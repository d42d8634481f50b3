"""Bookkeeping SQL through DB-API cursors (jaydebeapi) on a Java connection; never the row
path, which stays on the Java helpers. Java errors keep their SQLSTATE and leave redacted."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeAlias, TypeVar

import jaydebeapi
import jpype

from .._testing import statements
from ..errors import XasinkError
from ..masking import Redactor
from ..spec import secrets_of

Param = int | float | str | bytes | bool | None

#: A java.sql.Connection as JPype hands it to Python. JPype proxies have no Python type to
#: check, so this is Any to a type checker; the name says what a parameter holds.
JdbcConnection: TypeAlias = Any

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


# -- values: Python -> Java (bound with setObject by jaydebeapi) ------------------------
def _java_param(value: Param) -> Any:
    """What setObject gets: JPype boxes bool, int, float and str as Boolean, Long, Double and
    String; bytes would become a String, so they go as byte[]; anything else as its text."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, bytes):
        return jpype.JArray(jpype.JByte)(value)
    return str(value)


# -- values: Java -> Python (jaydebeapi's converters, one per JDBC column type) ---------
# Its defaults return timestamps as text without their zone and boxed Java numbers, so
# every column type the journal or a server query uses has its own reader here.
def _timestamp(value: Any) -> dt.datetime:
    """An aware UTC datetime, to the microsecond (getTime counts whole seconds plus the
    milliseconds of getNanos, which alone holds the fraction)."""
    seconds = int(value.getTime()) // 1000
    return _EPOCH + dt.timedelta(seconds=seconds, microseconds=int(value.getNanos()) // 1000)


def _to_python(value: Any) -> Any:
    """Any value getObject returns, as Python: what a column type without a reader gets."""
    if value is None:
        return None
    if isinstance(value, jpype.JString):
        return str(value)
    if isinstance(value, jpype.JClass("java.sql.Timestamp")):
        return _timestamp(value)
    if isinstance(value, jpype.JClass("java.lang.Number")):
        text = str(value.toString())
        return float(text) if any(c in text for c in ".eE") else int(text)
    if isinstance(value, jpype.JClass("java.lang.Boolean")):
        return bool(value.booleanValue())
    if isinstance(value, jpype.JArray):
        return bytes(value)
    return str(value.toString())


def _read_object(results: Any, column: int) -> Any:
    return _to_python(results.getObject(column))


def _read_text(results: Any, column: int) -> str | None:
    value = results.getString(column)
    return None if value is None else str(value)


@functools.cache
def _boxed_whole() -> frozenset[Any]:
    return frozenset(jpype.JClass(f"java.lang.{n}") for n in ("Long", "Integer", "Short", "Byte"))


def _read_whole(results: Any, column: int) -> Any:
    value = results.getObject(column)
    if type(value) in _boxed_whole():
        return int(value)
    return _to_python(value)  # NULL, a BigInteger (unsigned BIGINT), a Boolean (TINYINT(1))


def _read_timestamp(results: Any, column: int) -> dt.datetime | None:
    value = results.getTimestamp(column)
    return None if value is None else _timestamp(value)


def _read_bytes(results: Any, column: int) -> bytes | None:
    value = results.getBytes(column)
    return None if value is None else bytes(value)


_READERS: dict[str, Callable[[Any, int], Any]] = {
    **dict.fromkeys(
        ("CHAR", "VARCHAR", "LONGVARCHAR", "NCHAR", "NVARCHAR", "LONGNVARCHAR"), _read_text
    ),
    **dict.fromkeys(("BIGINT", "INTEGER", "SMALLINT", "TINYINT"), _read_whole),
    **dict.fromkeys(("TIMESTAMP", "TIMESTAMP_WITH_TIMEZONE"), _read_timestamp),
    **dict.fromkeys(("BINARY", "VARBINARY", "LONGVARBINARY", "BLOB"), _read_bytes),
}


class _Converters(dict[int, Callable[[Any, int], Any]]):
    """jaydebeapi looks a column's java.sql.Types code up with `.get(code, default)`, whose
    default returns the raw Java object: every other type reads through `_to_python`."""

    def get(self, key: int, default: Any = None) -> Callable[[Any, int], Any]:
        return dict.get(self, key, _read_object)


@functools.cache
def _converters() -> _Converters:
    types = jpype.JClass("java.sql.Types")  # the JVM exists by the first statement
    return _Converters({int(getattr(types, name)): read for name, read in _READERS.items()})


# -- statements ------------------------------------------------------------------------
def _cursor(conn: JdbcConnection) -> jaydebeapi.Cursor:
    """A cursor on `conn` itself. The jaydebeapi Connection is a thin wrapper, made per
    statement and never closed (its close() would close `conn`); it never touches
    autocommit, so `conn`'s own mode (or XA branch) holds."""
    return jaydebeapi.Connection(conn, _converters()).cursor()


def _java_failure(exc: Exception) -> BaseException:
    """The SQLException a jaydebeapi.Error wrapped (or the error itself): callers sort failures by
    SQLSTATE and vendor code and redact Java messages, as for any other Java call.

    An interrupt (KeyboardInterrupt, SystemExit) that jaydebeapi's bare `except:` wrapped is
    given back as itself, so that no `except Exception` downstream mistakes it for a failed
    statement."""
    cause = exc.args[0] if exc.args else None
    if isinstance(cause, BaseException) and (
        not isinstance(cause, Exception) or isinstance(cause, jpype.JException)
    ):
        return cause
    return exc


def execute(conn: JdbcConnection, sql: str, params: Sequence[Param] = ()) -> int:
    """Run one statement; returns the update count."""
    statements.seen(sql, params)
    cursor = _cursor(conn)
    try:
        cursor.execute(sql, [_java_param(p) for p in params])
        return int(cursor.rowcount)
    except jaydebeapi.Error as exc:
        failure = _java_failure(exc)
    finally:
        cursor.close()
    raise failure  # outside the handler: the Java exception alone, as a direct call raises it


#: Connections whose session ran a write's own statements (pre_sql, post_sql), by id: they
#: may have changed it beyond their transaction, whichever job's apply ran them (its own,
#: or an older one's finished by recovery on its connection). Weak: gone with the session.
_ran_statements: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def mark_ran_statements(conn: JdbcConnection) -> None:
    """`conn`'s session ran a write's own statements: never kept for another job."""
    _ran_statements[id(conn)] = conn


def ran_statements(conn: JdbcConnection) -> bool:
    """Whether `mark_ran_statements` marked `conn` (this very object, not a reused id)."""
    return _ran_statements.get(id(conn)) is conn


def execute_text(conn: JdbcConnection, sql: str) -> None:
    """Run a statement as text (a plain java.sql.Statement, no parameters): a `?` in it is
    the server's (PostgreSQL's jsonb operators), never taken for a parameter marker."""
    statements.seen(sql, ())
    statement = conn.createStatement()
    try:
        statement.execute(sql)
    finally:
        statement.close()


def execute_many(conn: JdbcConnection, sql: str, rows: Iterable[Sequence[Param]]) -> None:
    """Run `sql` once per row of parameters, as one JDBC batch (one round trip)."""
    rows = list(rows)
    for row in rows:
        statements.seen(sql, row)
    cursor = _cursor(conn)
    try:
        cursor.executemany(sql, [[_java_param(p) for p in row] for row in rows])
    finally:
        cursor.close()


def query(conn: JdbcConnection, sql: str, params: Sequence[Param] = ()) -> list[tuple[Any, ...]]:
    """Run a query; returns all rows as Python tuples (bookkeeping results are small)."""
    statements.seen(sql, params)
    cursor = _cursor(conn)
    try:
        cursor.execute(sql, [_java_param(p) for p in params])
        rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows
    except jaydebeapi.Error as exc:
        failure = _java_failure(exc)
    finally:
        cursor.close()
    raise failure


def set_network_timeout(conn: JdbcConnection, seconds: float) -> None:
    """Bound how long any call on `conn` waits for the server (JDBC's setNetworkTimeout);
    a driver that cannot keeps the timeout of its connection properties."""
    executor = jpype.JClass("java.util.concurrent.ForkJoinPool").commonPool()
    with contextlib.suppress(jpype.JException):
        conn.setNetworkTimeout(executor, max(1000, int(seconds * 1000)))


@contextlib.contextmanager
def network_timeout_lifted(conn: JdbcConnection) -> Iterator[None]:
    """Run a statement that may legitimately run long (a staged apply of millions of rows)
    without the connection's network timeout; TCP keepalive still ends a dead peer's wait."""
    try:
        before = int(conn.getNetworkTimeout())
    except jpype.JException:
        yield
        return
    executor = jpype.JClass("java.util.concurrent.ForkJoinPool").commonPool()
    conn.setNetworkTimeout(executor, 0)
    try:
        yield
    finally:
        conn.setNetworkTimeout(executor, before)


@contextlib.contextmanager
def local_transaction(conn: JdbcConnection) -> Iterator[Any]:
    """Commit on success, roll back on error; autocommit restored afterwards."""
    conn.setAutoCommit(False)
    try:
        yield conn
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.setAutoCommit(True)


def _sql_exceptions(exc: BaseException) -> Iterator[Any]:
    """The exception and its Java causes, outermost first."""
    seen = 0
    current: Any = _java_failure(exc) if isinstance(exc, jaydebeapi.Error) else exc
    while current is not None and seen < 10:
        yield current
        seen += 1
        try:
            current = current.getCause()
        except AttributeError:
            current = current.__cause__
        if current is not None and not hasattr(current, "getCause"):
            break


def sql_error_code(exc: BaseException) -> int | None:
    """The vendor error code of the first SQLException in the chain."""
    for item in _sql_exceptions(exc):
        if hasattr(item, "getErrorCode") and hasattr(item, "getSQLState"):
            return int(item.getErrorCode())
    return None


def sql_state(exc: BaseException) -> str | None:
    """The SQLSTATE of the first SQLException in the chain that has one."""
    for item in _sql_exceptions(exc):
        if hasattr(item, "getSQLState"):
            state = item.getSQLState()
            if state is not None:
                return str(state)
    return None


def is_denied(exc: BaseException) -> bool:
    """The statement needs a privilege this login lacks: PostgreSQL's insufficient_privilege
    (42501), MySQL's denied command on a database (1044), a table (1142) or a column (1143)."""
    return sql_state(exc) == "42501" or sql_error_code(exc) in (1044, 1142, 1143)


def java_message(exc: BaseException) -> str:
    """The innermost useful Java message, without JPype's class-name prefix noise."""
    messages = []
    for item in _sql_exceptions(exc):
        text = item.getMessage() if hasattr(item, "getMessage") else str(item)
        if text is not None and str(text) not in messages:
            messages.append(str(text))
    return " / caused by: ".join(messages) if messages else type(exc).__name__


F = TypeVar("F", bound=Callable[..., Any])


@contextlib.contextmanager
def java_errors_redacted(name: str, redact: Callable[[str], str]) -> Iterator[None]:
    """A raw Java exception raised inside becomes an XasinkError saying `name` failed,
    its message passed through `redact` (the call's passwords and URL credentials)."""
    try:
        yield
    except (jpype.JException, jaydebeapi.Error) as exc:
        raise XasinkError(
            f"{name} failed in the JDBC driver ({redact(java_message(exc))}). Nothing was left "
            "half-written; `xasink recover` resolves anything in doubt."
        ) from None


def redacting_java_errors(func: F) -> F:
    """No raw Java exception leaves a public call: it becomes an XasinkError whose message
    has every password the call's arguments carry masked (a `Database`, a participant, a
    write's request or plan: `secrets_of`), and URL credentials. The arguments are read
    only when a Java exception is raised."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        def redact(text: str) -> str:
            return Redactor(secrets_of(args, kwargs))(text)

        with java_errors_redacted(func.__name__, redact):
            return func(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
