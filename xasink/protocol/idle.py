"""The driver's idle XA sessions, kept between calls of one process.

Opening a session costs 2 ms (MariaDB) to tens of ms (PostgreSQL's SCRAM login): more than
all of a call's bookkeeping statements together. So the journal's and the branch
operations' sessions are handed back after a call that went well and taken by the next one.

Why that is safe: a session is kept only when the call using it ended without an error and
it is back in autocommit with no transaction open; driver sessions never start a branch
(they only commit, roll back or list prepared ones). It is checked alive before reuse and
closed instead once idle for `MAX_IDLE` seconds. Every failure closes the session, as before.
The writers keep their own idle session per Python worker (xasink.writer).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator

from ..runtime import shutdown
from ..spec import ConnectionSpec
from .xa import XaSession

log = logging.getLogger("xasink")

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
    with _lock:
        previous = _idle.pop((spec, role), None)
        _idle[(spec, role)] = (session, time.monotonic())
    shutdown.call_at_exit(close_all)
    if previous is not None:
        previous[0].close()


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
