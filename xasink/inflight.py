"""An orderly interpreter exit: no xasink thread may be inside a JPype call when it ends.

At exit Python ends daemon threads wherever they are. One that returns from a Java call
during finalization is unwound through JPype's C++ frames, which aborts the process
("FATAL: exception not rethrown", exit code -6). Two kinds of thread are ours:

- a write on another thread, e.g. a foreachBatch call on one of py4j's callback threads
  still running after `query.stop()` (which interrupts Spark's side of the batch, not the
  Python call). The exit waits a bounded time for it to end as it would anyway: committed,
  or failed and rolled back;
- xasink's own background work (the heartbeat thread, idle sessions). It registers a
  callback with `call_at_exit`, run after the writes ended: stop the thread, close the
  sessions, on the exiting thread.

The handler is registered on first use, after JPype's own, so it runs before the JVM stops.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

log = logging.getLogger("xasink")

#: How long the interpreter's exit waits for writes still running on other threads.
EXIT_WAIT_SECONDS = 120.0

_changed = threading.Condition()
_calls: dict[int, int] = {}  # thread ident -> write_xa calls running on it
_callbacks: list[Callable[[], None]] = []  # run at exit, once the writes ended
_registered = False


def _register() -> None:
    """Register the exit handler once (caller holds `_changed`)."""
    global _registered
    if not _registered:  # registered late: runs before pyspark's and JPype's handlers
        atexit.register(_at_exit)
        _registered = True


def call_at_exit(callback: Callable[[], None]) -> None:
    """Run `callback` at exit, after writes on other threads ended (or the wait gave up)."""
    with _changed:
        _register()
        if callback not in _callbacks:
            _callbacks.append(callback)


@contextmanager
def write_in_progress() -> Iterator[None]:
    """Mark a write_xa call as running on this thread until the block ends."""
    me = threading.get_ident()
    with _changed:
        _register()
        _calls[me] = _calls.get(me, 0) + 1
    try:
        yield
    finally:
        with _changed:
            _calls[me] -= 1
            if not _calls[me]:
                del _calls[me]
            _changed.notify_all()


def writes_in_progress() -> int:
    """How many threads other than the caller's are inside write_xa."""
    with _changed:
        return len(_calls.keys() - {threading.get_ident()})


def wait_for_writes(timeout: float = EXIT_WAIT_SECONDS) -> bool:
    """Wait until no other thread is inside write_xa; False if `timeout` passed first."""
    with _changed:
        running = writes_in_progress()
        if running:
            log.warning(
                "xasink: waiting up to %.0f s for %d write(s) in progress before exit",
                timeout,
                running,
            )
        return _changed.wait_for(lambda: not writes_in_progress(), timeout)


def _at_exit() -> None:
    wait_for_writes()
    with _changed:
        callbacks = list(_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:  # an exit must go on (the type only: no URL or secret)
            log.warning("xasink: cleanup at exit failed (%s)", type(exc).__name__)
