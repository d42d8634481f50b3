"""XA sessions for a ConnectionSpec: opened (jars, JVM, data source class, session setup),
and kept idle between the calls of one process.

Opening a session costs 2 ms (MariaDB) to tens of ms (PostgreSQL's SCRAM login): more than
all of a call's bookkeeping statements together. So the journal's and the branch
operations' sessions are handed back after a call that went well and taken by the next one
(`give`, `take`, `kept_on_success`).

Why that is safe: a session is kept only when the call using it ended without an error and
it is back in autocommit with no transaction open; driver sessions never start a branch
(they only commit, roll back or list prepared ones). It is checked alive before reuse and
closed instead once idle for `MAX_IDLE` seconds. Every failure closes the session, as before.

A writer keeps its session after its branch prepared, where the dialect allows a new branch
on it, for the next task of its Python worker (`park`, `unpark`): unchecked, since the
branch's first XA call tests it. `close_all` closes every kept session, at exit. (The
heartbeat thread's sessions are its own: it closes them itself, a beat may be in flight.)
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import jpype

from ..dialects import Dialect, get_dialect
from ..dialects.certificates import certificate_hint
from ..dialects.driver_properties import known, nearest_property
from ..errors import ConfigurationError, PreflightError
from ..runtime import shutdown
from ..runtime.jars import resolve_classpath, visible
from ..runtime.jdbc import execute, java_message, ran_statements
from ..runtime.jvm import attach_as_daemon, ensure_jvm, jclass, keep_fault_handlers
from ..spec import ConnectionSpec
from .xa import XaSession, classify

log = logging.getLogger("xasink")

_datasources: dict[ConnectionSpec, Any] = {}


# -- where the driver jars are ---------------------------------------------------------
def _no_shipped_copy(jar: str) -> str | None:
    return None


#: On an executor, this task's copy of a jar the driver shipped with the job (None outside
#: a task, or when it was not shipped). Set by the task entry (`set_jar_locator`).
_shipped_copy: Callable[[str], str | None] = _no_shipped_copy


def set_jar_locator(locate: Callable[[str], str | None]) -> None:
    """How a task finds its copy of a driver jar shipped with the job (xasink.spark)."""
    global _shipped_copy
    _shipped_copy = locate


def classpath_for(spec: ConnectionSpec) -> list[str]:
    return resolve_classpath(get_dialect(spec.dialect).jar_kinds, spec.jars)


def _local_jars(spec: ConnectionSpec) -> list[str]:
    """The driver's resolved jars: on an executor, the copies shipped with the job first;
    else the driver's paths if they exist here; else this machine's own search."""
    shipped = [_shipped_copy(jar) for jar in spec.jars]
    if spec.jars and all(shipped):
        return [str(path) for path in shipped]
    if spec.jars and all(visible(jar) for jar in spec.jars):
        return list(spec.jars)
    return resolve_classpath(get_dialect(spec.dialect).jar_kinds, None)


# -- opening ---------------------------------------------------------------------------
def check_reachable(spec: ConnectionSpec) -> None:
    """Fail within seconds, naming host:port, instead of hanging inside a driver."""
    address = get_dialect(spec.dialect).host_port(spec.url)
    if address is None:
        return
    host, port = address
    try:
        with socket.create_connection((host, port), timeout=spec.connect_timeout):
            pass
    except OSError as exc:
        raise PreflightError(
            f"Cannot reach the database at {host}:{port} ({exc.strerror or exc}). Check that "
            "the server is running, the host and port in the URL, and any firewall."
        ) from None


def _datasource(spec: ConnectionSpec, dialect: Dialect) -> Any:
    cached = _datasources.get(spec)
    if cached is not None:
        attach_as_daemon()
        keep_fault_handlers()
        return cached
    datasource = dialect.new_datasource(spec, _datasource_class(spec, dialect))
    _datasources[spec] = datasource
    return datasource


def _datasource_class(spec: ConnectionSpec, dialect: Dialect) -> str:
    """The XADataSource class the jars hold (the JVM started with them)."""
    ensure_jvm(_local_jars(spec))
    attach_as_daemon()
    candidates = (spec.xa_datasource,) if spec.xa_datasource else dialect.datasource_classes
    if not candidates:
        raise ConfigurationError(
            "Name the driver's XADataSource class: Database(url, xa_datasource=...)."
        )
    for name in candidates:
        try:
            jclass(name)
        except (TypeError, ImportError, jpype.JException):
            continue
        return name
    raise ConfigurationError(
        f"None of the XADataSource classes {', '.join(candidates)} is in the driver jars "
        f"{', '.join(spec.jars) or '(none)'}. Check the jar, or name the class: "
        "Database(url, xa_datasource=...)."
    )


#: The property names each database's driver declares, and the specs whose properties
#: this process has checked against them.
_declared: dict[ConnectionSpec, tuple[str, ...]] = {}
_checked: set[ConnectionSpec] = set()


def declared_properties(spec: ConnectionSpec) -> tuple[str, ...]:
    """The connection properties the JDBC driver behind `spec` declares
    (`java.sql.Driver.getPropertyInfo`), in its spelling; () when it declares none. Asked
    once per process and database (a stream's planner parses its options every batch)."""
    bare = replace(spec, properties=())
    if bare not in _declared:
        _declared[bare] = _ask_driver(bare)
    return _declared[bare]


def _ask_driver(spec: ConnectionSpec) -> tuple[str, ...]:
    dialect = get_dialect(spec.dialect)
    name = _datasource_class(spec, dialect)
    url = dialect.datasource_url(spec, name)
    try:
        driver_class = dialect.driver_classes.get(name)
        if driver_class is not None:
            driver = jclass(driver_class)()
        else:  # another driver: the one that takes the URL
            driver = jclass("java.sql.DriverManager").getDriver(url)
        info = driver.getPropertyInfo(url, jclass("java.util.Properties")())
    except (TypeError, ImportError, jpype.JException) as exc:
        log.warning("xasink: the JDBC driver's properties are unknown: %s", spec.redact(exc))
        return ()
    return tuple(str(item.name) for item in info or ())


def check_properties(spec: ConnectionSpec) -> None:
    """Refuse a connection property (`Database(properties=...)`) that the JDBC driver does
    not declare: drivers ignore such a property, so a misspelt one would change nothing."""
    if not spec.properties or spec in _checked:
        return
    if get_dialect(spec.dialect).bean_properties:
        return  # the data source's setters take them, and refuse a name they lack
    # None declared: nothing to check against.
    names = known(get_dialect(spec.dialect), declared_properties(spec))
    unknown = [name for name, _ in spec.properties if names and name not in names]
    if unknown:
        name = unknown[0]
        same = [n for n in names if n.lower() == name.lower()]
        near = same[0] if same else nearest_property(name, names)
        raise ConfigurationError(
            f"Database(properties=...) holds {name!r}, which the JDBC driver neither declares "
            f"nor reads (it would ignore it){f': did you mean {near!r}?' if near else '.'}"
        )
    _checked.add(spec)


def _connect_refused(
    spec: ConnectionSpec, dialect: Dialect, exc: BaseException
) -> tuple[PreflightError, BaseException]:
    """Why a connection failed, masked, and the classified failure as its cause."""
    failure = classify("connect", exc, spec.redact)
    message = spec.redact(java_message(exc))
    hint = dialect.login_hint(message) or certificate_hint(dialect.tls_ca_property, message)
    text = f"Cannot connect to {spec.masked_url} as {spec.user or '(default user)'}: {message}"
    return PreflightError(f"{text}{f'. {hint}' if hint else ''}"), failure


def open_session(spec: ConnectionSpec) -> XaSession:
    """A new XA session with the dialect's session settings applied."""
    dialect = get_dialect(spec.dialect)
    datasource = _datasource(spec, dialect)
    refused: tuple[PreflightError, BaseException] | None = None
    try:
        session = XaSession(datasource.getXAConnection(), spec.redact)
    except jpype.JException as exc:
        refused = _connect_refused(spec, dialect, exc)
    if refused is not None:  # raised out of the handler: the raw Java error is no context
        raise refused[0] from refused[1]
    try:
        statement = session.connection.createStatement()
        _initialize(spec, statement)
        for sql in dialect.session_sql():
            statement.execute(sql)
        statement.close()
    except BaseException:
        session.close()
        raise
    return session


def _initialize(spec: ConnectionSpec, statement: Any) -> None:
    """The caller's `session_init` statements, first: xasink's own session settings (time
    zone, READ COMMITTED) follow, so that none of them can be undone by it. A failure
    refuses the connection, so the write fails before anything is written."""
    for sql in spec.session_init:
        try:
            statement.execute(sql)
        except jpype.JException as exc:
            raise PreflightError(
                "The session_init statement (sessionInitStatement) failed on "
                f"{spec.masked_url}: {spec.redact(java_message(exc))}. Every connection a "
                "write opens runs it first; fix the statement or drop it."
            ) from None


# -- a session's lock bound -----------------------------------------------------------
def bind_lock_wait(session: XaSession, dialect: Dialect, seconds: float) -> None:
    """Bound every lock wait of `session` to `seconds` (whole, at least 1). A kept session
    keeps its bound, so a call that finds it already set sends nothing (a round trip per
    call saved)."""
    whole = max(1, int(seconds))
    if session.lock_bound == whole:
        return
    bound, _ = dialect.lock_wait_sql(whole)
    if bound:
        execute(session.connection, bound)
    session.lock_bound = whole


def unbind_lock_wait(session: XaSession, dialect: Dialect) -> None:
    """Back to the server's own lock waits (a task's branch waits as long as it must)."""
    if session.lock_bound is None:
        return
    _, unbound = dialect.lock_wait_sql(session.lock_bound)
    if unbound:
        execute(session.connection, unbound)
    session.lock_bound = None


# -- keeping idle ones -----------------------------------------------------------------
#: A session idle longer than this is closed rather than reused, in seconds.
MAX_IDLE = 60.0

_Key = tuple[ConnectionSpec, str]
_idle: dict[_Key, tuple[XaSession, float]] = {}
_lock = threading.Lock()


def take(spec: ConnectionSpec, role: str) -> XaSession | None:
    """A kept session for (spec, role) that still answers, or None."""
    with _lock:
        kept = _idle.pop((spec, role), None)
    if kept is None:
        return None
    session, since = kept
    try:
        if time.monotonic() - since < MAX_IDLE and session.connection.isValid(2):
            return session
    except Exception as exc:
        log.debug("xasink: an idle session failed its check: %s", spec.redact(exc))
    session.close()
    return None


def give(spec: ConnectionSpec, role: str, session: XaSession) -> None:
    """Keep `session` for the next call if it is idle in autocommit; else close it."""
    try:
        idle = bool(session.connection.getAutoCommit())
    except Exception:
        idle = False
    if not idle:
        session.close()
        return
    park(spec, role, session)


def park(spec: ConnectionSpec, role: str, session: XaSession) -> None:
    """Keep `session` as it is for the next `take` or `unpark` of (spec, role); one kept
    there before is closed."""
    if ran_statements(session.connection):  # an apply's pre_sql/post_sql, maybe another job's
        session.close()
        return
    with _lock:
        previous = _idle.pop((spec, role), None)
        _idle[(spec, role)] = (session, time.monotonic())
    shutdown.call_at_exit(close_all)
    if previous is not None:
        previous[0].close()


def unpark(spec: ConnectionSpec, role: str) -> XaSession | None:
    """The session kept for (spec, role), unchecked (None: there is none)."""
    with _lock:
        kept = _idle.pop((spec, role), None)
    return None if kept is None else kept[0]


def close_all() -> None:
    """Close every kept session (at exit: on the exiting thread, while the JVM runs)."""
    with _lock:
        kept = list(_idle.values())
        _idle.clear()
    for session, _ in kept:
        session.close()


@contextlib.contextmanager
def kept_on_success(spec: ConnectionSpec, role: str, session: XaSession) -> Iterator[XaSession]:
    """Use `session`; hand it back for reuse if the block succeeds, close it if not."""
    try:
        yield session
    except BaseException:
        session.close()
        raise
    give(spec, role, session)


__all__ = [
    "bind_lock_wait",
    "check_properties",
    "check_reachable",
    "classpath_for",
    "close_all",
    "declared_properties",
    "give",
    "kept_on_success",
    "open_session",
    "park",
    "set_jar_locator",
    "take",
    "unbind_lock_wait",
    "unpark",
]
