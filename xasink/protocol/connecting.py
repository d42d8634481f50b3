"""From a caller's connection arguments to a checked spec, and to a session on the journal:
the plumbing every write, recovery and operator command starts with."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ..defaults import LOCK_WAIT
from ..dialects import dialect_name_for, get_dialect
from ..runtime.timing import step
from ..spec import ConnectionSpec, Database, properties_tuple
from . import sessions
from .applying import StagedApply
from .journal import Journal
from .sessions import check_reachable, classpath_for, open_session
from .xa import XaSession

#: The kept-session role (see `sessions`) of a write's journal session.
JOURNAL_ROLE = "journal"


def make_spec(database: Database | str) -> ConnectionSpec:
    """The caller's database checked, its dialect named and its driver jars found."""
    db = Database.of(database)
    name = dialect_name_for(db.url, db.dialect, db.xa_datasource)
    spec = ConnectionSpec(
        url=db.url,
        user=db.user,
        password=db.password,
        properties=properties_tuple(db.properties),
        dialect=name,
        xa_datasource=db.xa_datasource,
        jars=tuple(db.jars or ()),
        connect_timeout=db.connect_timeout,
        network_timeout=float(db.network_timeout),
        session_init=tuple(db.session_init or ()),  # a tuple of statements by now
    )
    return replace(spec, jars=tuple(classpath_for(spec)))


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
            sessions.check_properties(spec)
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
    database: Database | str, lock_wait: float, staged: StagedApply[Any] | None = None
) -> Iterator[tuple[ConnectionSpec, Any, Journal]]:
    """(spec, journal connection, journal as found) for the journal of `database`."""
    spec = make_spec(database)
    schema = Database.of(database).journal_schema
    session, journal = open_journal(spec, schema, lock_wait, staged=staged)
    with session:
        yield spec, session.connection, journal
