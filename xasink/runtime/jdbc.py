"""Small JDBC helpers for bookkeeping SQL (never the row path)."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias, TypeVar

import jpype

from ..errors import XasinkError
from ..masking import Redactor

Param = int | float | str | bytes | bool | None

#: A java.sql.Connection as JPype hands it to Python. JPype proxies have no Python type to
#: check, so this is Any to a type checker; the name says what a parameter holds.
JdbcConnection: TypeAlias = Any


def _bind(statement: Any, params: Sequence[Param]) -> None:
    types = jpype.JClass("java.sql.Types")
    for index, value in enumerate(params, start=1):
        if value is None:
            statement.setNull(index, types.NULL)  # untyped: the server infers it
        elif isinstance(value, bool):
            statement.setBoolean(index, value)
        elif isinstance(value, int):
            statement.setLong(index, value)
        elif isinstance(value, float):
            statement.setDouble(index, value)
        elif isinstance(value, bytes):
            statement.setBytes(index, jpype.JArray(jpype.JByte)(value))
        else:
            statement.setString(index, str(value))


def _to_python(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, jpype.JString):
        return str(value)
    if isinstance(value, jpype.JClass("java.sql.Timestamp")):
        epoch_ms = int(value.getTime())
        return dt.datetime.fromtimestamp(epoch_ms / 1000, tz=dt.timezone.utc)
    if isinstance(value, jpype.JClass("java.lang.Number")):
        text = str(value.toString())
        return float(text) if any(c in text for c in ".eE") else int(text)
    if isinstance(value, jpype.JClass("java.lang.Boolean")):
        return bool(value.booleanValue())
    return str(value.toString())


def execute(conn: JdbcConnection, sql: str, params: Sequence[Param] = ()) -> int:
    """Run one statement; returns the update count."""
    statement = conn.prepareStatement(sql)
    try:
        _bind(statement, params)
        return int(statement.executeUpdate())
    finally:
        statement.close()


def query(conn: JdbcConnection, sql: str, params: Sequence[Param] = ()) -> list[tuple[Any, ...]]:
    """Run a query; returns all rows as Python tuples (bookkeeping results are small)."""
    statement = conn.prepareStatement(sql)
    try:
        _bind(statement, params)
        results = statement.executeQuery()
        try:
            width = int(results.getMetaData().getColumnCount())
            rows = []
            while results.next():
                rows.append(tuple(_to_python(results.getObject(i)) for i in range(1, width + 1)))
            return rows
        finally:
            results.close()
    finally:
        statement.close()


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
    current: Any = exc
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


def java_message(exc: BaseException) -> str:
    """The innermost useful Java message, without JPype's class-name prefix noise."""
    messages = []
    for item in _sql_exceptions(exc):
        text = item.getMessage() if hasattr(item, "getMessage") else str(item)
        if text is not None and str(text) not in messages:
            messages.append(str(text))
    return " / caused by: ".join(messages) if messages else type(exc).__name__


F = TypeVar("F", bound=Callable[..., Any])


def redacting_java_errors(func: F) -> F:
    """No raw Java exception leaves a public call: it becomes an XasinkError whose message
    has the call's passwords (argument, or `properties`) and URL credentials masked."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except jpype.JException as exc:
            properties = kwargs.get("properties") or {}
            secrets = [kwargs.get("password")] + [
                str(v) for k, v in dict(properties).items() if "pass" in str(k).lower()
            ]
            message = Redactor(secrets)(java_message(exc))
            raise XasinkError(
                f"{func.__name__} failed in the JDBC driver ({message}). Nothing was left "
                "half-written; `xasink recover` resolves anything in doubt."
            ) from None

    return wrapper  # type: ignore[return-value]
