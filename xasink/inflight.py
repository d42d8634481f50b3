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
import functools
import gc
import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

log = logging.getLogger("xasink")

#: How long the interpreter's exit waits for writes still running on other threads.
EXIT_WAIT_SECONDS = 120.0

_changed = threading.Condition()
_calls: dict[int, int] = {}  # thread ident -> write_xa calls running on it
_callbacks: list[Callable[[], None]] = []  # run at exit, once the writes ended
_registered = False


def _register() -> None:
    """Register the exit handlers once (caller holds `_changed`)."""
    global _registered
    if not _registered:
        # The wait runs with threading's own exit hooks, before concurrent.futures refuses
        # new work (a MariaDB load's background thread) and before any atexit handler.
        register_early = getattr(threading, "_register_atexit", None)
        if register_early is not None:
            register_early(wait_for_writes)
        atexit.register(_at_exit)  # registered late: runs before pyspark's and JPype's
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


P = ParamSpec("P")
R = TypeVar("R")


def tracked(write: Callable[P, R]) -> Callable[P, R]:
    """`write` counts as in progress until its frames and their Java objects are freed: a
    thread must not be releasing JPype objects while the interpreter finalizes. A failure's
    traceback would keep the frames (and their Java objects) alive past the count, so their
    locals are cleared first."""

    @functools.wraps(write)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with write_in_progress():
            try:
                return write(*args, **kwargs)
            except BaseException as exc:
                traceback.clear_frames(exc.__traceback__)
                raise

    return run


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
    # Java objects in garbage cycles are freed here, on the exiting thread, while the JVM
    # runs; and no other thread starts a collection from now on. A daemon thread freeing a
    # JPype object once the interpreter finalizes is ended inside JPype's C++ and aborts
    # the process ("FATAL: exception not rethrown", seen in a thread "Garbage-collecting").
    gc.collect()
    gc.disable()
    with _changed:
        callbacks = list(_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:  # an exit must go on (the type only: no URL or secret)
            log.warning("xasink: cleanup at exit failed (%s)", type(exc).__name__)
