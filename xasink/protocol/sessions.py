"""Open XA sessions for a ConnectionSpec: jars, JVM, data source class, session setup."""

from __future__ import annotations

import socket
from typing import Any

import jpype

from ..dialects import Dialect, get_dialect
from ..errors import ConfigurationError, PreflightError
from ..runtime.jars import resolve_classpath, visible
from ..runtime.jdbc import java_message
from ..runtime.jvm import attach_as_daemon, ensure_jvm, jclass
from ..spark.session import shipped_copy
from ..spec import ConnectionSpec
from .xa import XaSession, classify

_datasources: dict[ConnectionSpec, Any] = {}


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


def classpath_for(spec: ConnectionSpec) -> list[str]:
    return resolve_classpath(get_dialect(spec.dialect).jar_kinds, spec.jars)


def _local_jars(spec: ConnectionSpec) -> list[str]:
    """The driver's resolved jars: on an executor, the copies shipped with the job first;
    else the driver's paths if they exist here; else this machine's own search."""
    shipped = [shipped_copy(jar) for jar in spec.jars]
    if spec.jars and all(shipped):
        return [str(path) for path in shipped]
    if spec.jars and all(visible(jar) for jar in spec.jars):
        return list(spec.jars)
    return resolve_classpath(get_dialect(spec.dialect).jar_kinds, None)


def _datasource(spec: ConnectionSpec, dialect: Dialect) -> Any:
    cached = _datasources.get(spec)
    if cached is not None:
        attach_as_daemon()
        return cached
    ensure_jvm(_local_jars(spec))
    attach_as_daemon()
    candidates = (spec.xa_datasource,) if spec.xa_datasource else dialect.datasource_classes
    if not candidates:
        raise ConfigurationError("Name the driver's XADataSource class with xa_datasource=...")
    for name in candidates:
        try:
            jclass(name)
        except (TypeError, ImportError, jpype.JException):
            continue
        datasource = dialect.new_datasource(spec, name)
        _datasources[spec] = datasource
        return datasource
    raise ConfigurationError(
        f"None of the XADataSource classes {', '.join(candidates)} is in the driver jars "
        f"{', '.join(spec.jars) or '(none)'}. Check the jar, or name the class with "
        "xa_datasource=..."
    )


def open_session(spec: ConnectionSpec) -> XaSession:
    """A new XA session with the dialect's session settings applied."""
    dialect = get_dialect(spec.dialect)
    datasource = _datasource(spec, dialect)
    try:
        session = XaSession(datasource.getXAConnection(), spec.redact)
    except jpype.JException as exc:
        failure = classify("connect", exc, spec.redact)
        raise PreflightError(
            f"Cannot connect to {spec.masked_url} as {spec.user or '(default user)'}: "
            f"{spec.redact(java_message(exc))}"
        ) from failure
    try:
        statement = session.connection.createStatement()
        for sql in dialect.session_sql():
            statement.execute(sql)
        statement.close()
    except BaseException:
        session.close()
        raise
    return session
