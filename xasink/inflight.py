"""Writes in progress in this process, so that the interpreter's exit waits for them.

A streaming driver can exit while a foreachBatch call still writes on one of py4j's callback
threads: `query.stop()` interrupts Spark's side of the batch, not the Python call. At exit
Python ends such daemon threads wherever they are; inside a JPype call that aborts the
process ("FATAL: exception not rethrown", exit code -6) and leaves the job to recovery.
Waiting a bounded time lets the call end as it would anyway: committed, or failed and
rolled back.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("xasink")

#: How long the interpreter's exit waits for writes still running on other threads.
EXIT_WAIT_SECONDS = 120.0

_changed = threading.Condition()
_calls: dict[int, int] = {}  # thread ident -> write_xa calls running on it
_registered = False


@contextmanager
def write_in_progress() -> Iterator[None]:
    """Mark a write_xa call as running on this thread until the block ends."""
    global _registered
    me = threading.get_ident()
    with _changed:
        if not _registered:  # registered late: runs before pyspark's and JPype's handlers
            atexit.register(wait_for_writes)
            _registered = True
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
