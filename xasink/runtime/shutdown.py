"""An orderly interpreter exit: no thread may call between Python and the JVM once it ends.

At exit Python ends daemon threads wherever they are, and a thread that takes the GIL
during finalization is ended on the spot. A thread with JPype's C++ frames on its stack is
then unwound through them, which aborts the process ("FATAL: exception not rethrown", exit
code -6). Three kinds of thread can be in that position:

- a write (or an `xasink.recover()` call) on another thread, e.g. a foreachBatch call on
  one of py4j's callback threads still running after `query.stop()` (which interrupts
  Spark's side of the batch, not the Python call). The exit waits a bounded time for it to
  end as it would anyway: committed, or failed and rolled back;
- xasink's own background work (the heartbeat thread, idle sessions). It registers a
  callback with `call_at_exit`, run after the writes ended: stop the thread, close the
  sessions, on the exiting thread;
- JPype's reference-queue thread, a Java thread that calls into Python whenever the JVM
  collects its sentinel object (to run a Python garbage collection) or a Java object that
  holds a Python one. A write that moves its rows through this JVM (the driver's own small
  writes) makes the JVM collect often, so that call could land during finalization (seen:
  aborts in 2 of 4 exits mid-write, 7 of 8 when the exit first collects garbage). It is
  stopped here, after the callbacks, while the interpreter is whole. JPype's own exit
  handler would stop it again, which waits 10 s for a thread that is gone, so it is told not
  to run: the JVM ends with the process, every connection already closed.

First of all, the hook gives the JVM back its fault handlers if anything replaced them
(xasink.runtime.signals): the JVM runs on through finalization, and its safepoints in
compiled code fault on purpose, which without its SIGSEGV handler kills the process.

All of it runs in one of threading's own exit hooks: before any atexit handler (pyspark's,
JPype's), and before concurrent.futures refuses new work (a MariaDB load's background
thread). The hook is registered when xasink is imported, never lazily: a registration made
once the exit has begun is refused ("can't register atexit after shutdown"), and a write on
another thread must not be the first to touch anything that registers one.
"""

from __future__ import annotations

import concurrent.futures.thread  # noqa: F401  (registers its exit hook before ours)
import functools
import gc
import logging
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import jpype
import jpype.config

from .jvm import started_here
from .signals import restore_jvm_handlers

log = logging.getLogger("xasink")

#: How long the interpreter's exit waits for writes still running on other threads.
EXIT_WAIT_SECONDS = 120.0

_changed = threading.Condition()
_calls: dict[int, int] = {}  # thread ident -> write_xa calls running on it
_callbacks: list[Callable[[], None]] = []  # run at exit, once the writes ended


def call_at_exit(callback: Callable[[], None]) -> None:
    """Run `callback` at exit, after writes on other threads ended (or the wait gave up)."""
    with _changed:
        if callback not in _callbacks:
            _callbacks.append(callback)


@contextmanager
def write_in_progress() -> Iterator[None]:
    """Mark a write_xa call as running on this thread until the block ends."""
    me = threading.get_ident()
    with _changed:
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


def stop_java_callbacks() -> None:
    """Stop JPype's reference-queue thread, the one Java thread that calls into Python, in a
    JVM that xasink started (another library's JVM keeps JPype's own exit)."""
    if not jpype.isJVMStarted() or not started_here():
        return
    try:
        queue = jpype.JClass("org.jpype.ref.JPypeReferenceQueue").getInstance()
        if queue.isRunning():
            queue.stop()
        # JPype's own exit handler would stop it again, and a second stop() waits 10 s for
        # a thread that is gone; the JVM then simply ends with the process.
        jpype.config.onexit = False
    except Exception as exc:  # a JPype without this class: its own shutdown stops it later
        log.debug("xasink: JPype's reference queue left running (%s)", type(exc).__name__)


def at_exit() -> None:
    """The exit hook: give the JVM its fault handlers back, wait for writes, then end
    xasink's and JPype's Java-calling threads."""
    lost = restore_jvm_handlers()
    if lost:
        log.debug("xasink: the JVM's handlers of signals %s were replaced; restored", lost)
    wait_for_writes()
    with _changed:
        callbacks = list(_callbacks)
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:  # an exit must go on (the type only: no URL or secret)
            log.warning("xasink: cleanup at exit failed (%s)", type(exc).__name__)
    # No thread starts a collection from now on; the one below frees Java objects in
    # garbage cycles here, on the exiting thread, while the JVM runs.
    stop_java_callbacks()
    gc.disable()
    gc.collect()


threading._register_atexit(at_exit)  # type: ignore[attr-defined]
