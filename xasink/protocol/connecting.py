"""From a caller's connection arguments to a checked spec, and to a session on the journal:
the plumbing every write, recovery and operator command starts with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..defaults import LOCK_WAIT, NETWORK_TIMEOUT
from ..dialects import dialect_name_for, get_dialect
from ..errors import ConfigurationError
from ..runtime.timing import step
from ..spec import ConnectionSpec, properties_tuple
from . import sessions
from .applying import StagedApply
from .journal import Journal
from .sessions import check_reachable, classpath_for, open_session
from .xa import XaSession

#: The kept-session role (see `sessions`) of a write's journal session.
JOURNAL_ROLE = "journal"


def make_spec(
    url: str,
    *,
    user: str | None,
    password: str | None,
    properties: Mapping[str, object] | None,
    dialect: str | None,
    xa_datasource: str | None,
    jars: Sequence[str] | None,
    connect_timeout: int,
    network_timeout: float = NETWORK_TIMEOUT,
) -> ConnectionSpec:
    """Validate the connection arguments and resolve the driver jars up front."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError("url must be a JDBC URL string, e.g. jdbc:postgresql://host/db")
    if not network_timeout > 0:
        raise ConfigurationError("network_timeout must be a number of seconds above 0.")
    name = dialect_name_for(url, dialect, xa_datasource)
    spec = ConnectionSpec(
        url=url,
        user=user,
        password=password,
        properties=properties_tuple(properties),
        dialect=name,
        xa_datasource=xa_datasource,
        jars=tuple(jars or ()),
        connect_timeout=connect_timeout,
        network_timeout=float(network_timeout),
    )
    return ConnectionSpec(**{**spec.__dict__, "jars": tuple(classpath_for(spec))})


def journal_connection(
    spec: ConnectionSpec, lock_wait: float = LOCK_WAIT, reuse: bool = False
) -> XaSession:
    """A session for a journal the caller already knows (a job's plan carries it): no
    lock wait of it is unbounded. With `reuse`, a session an earlier call of this process
    handed back (see `sessions`) if it still answers."""
    with step("journal connection"):
        session = sessions.take(spec, JOURNAL_ROLE) if reuse else None
        if session is None:
            with step("reachability probe"):
                check_reachable(spec)
            session = open_session(spec)
        try:
            sessions.bind_lock_wait(session, get_dialect(spec.dialect), lock_wait)
            return session
        except BaseException:
            session.close()
            raise


def open_journal(
    spec: ConnectionSpec,
    schema: str | None,
    lock_wait: float = LOCK_WAIT,
    reuse: bool = False,
    staged: StagedApply[Any] | None = None,
) -> tuple[XaSession, Journal]:
    """A session on the journal (`journal_connection`), and the journal as found.
    `staged`: how the journal applies and drops staged jobs (a caller that finishes,
    recovers or drops them passes `xasink.tables.applier.STAGED_APPLY`)."""
    session = journal_connection(spec, lock_wait, reuse)
    try:
        with step("journal tag"):
            return session, Journal.locate(session.connection, spec, schema, lock_wait, staged)
    except BaseException:
        session.close()
        raise


@contextlib.contextmanager
def journal_session(
    url: str,
    journal_schema: str | None,
    lock_wait: float,
    staged: StagedApply[Any] | None = None,
    **connection: Any,
) -> Iterator[tuple[ConnectionSpec, Any, Journal]]:
    """(spec, journal connection, journal as found) for the journal at `url`;
    `connection` takes make_spec's keyword arguments."""
    spec = make_spec(url, **connection)
    session, journal = open_journal(spec, journal_schema, lock_wait, staged=staged)
    with session:
        yield spec, session.connection, journal
