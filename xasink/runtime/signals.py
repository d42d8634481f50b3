"""The JVM's own fault handlers stay installed for as long as the JVM runs.

HotSpot raises SIGSEGV (and SIGBUS, SIGILL, SIGFPE) on purpose: a safepoint poll in
compiled code faults once a safepoint is requested, and so does an implicit null check;
its handler services the fault and the thread goes on. Python's faulthandler takes the same
signals. Enabled before the JVM starts (pytest's faulthandler plugin, `python -X
faulthandler`, PYTHONFAULTHANDLER), it saved the handlers that preceded it, and it puts
them back when disabled: at pytest's unconfigure, and late in the interpreter's
finalization. The JVM xasink starts is never destroyed (xasink.runtime.shutdown), so its
threads run on through that point, and the next safepoint that meets a thread in compiled
Java code then kills the process with SIGSEGV (exit -11), after the program ended well.

So the JVM starts with faulthandler set aside, and faulthandler is enabled again on top of
the JVM's handlers, then the JVM's put back above it: whoever disables faulthandler later
puts back the JVM's handlers, and faulthandler still reports an abort. The exit hook
reinstalls the JVM's handlers if something replaced them after all, and so does every
session's opening and every Spark task (`jvm.keep_fault_handlers`): a reused Spark worker
enables faulthandler again before each task (spark.python.worker.faulthandler.enabled),
over the handlers of the JVM an earlier task started.
"""

from __future__ import annotations

import ctypes
import faulthandler
import functools
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: The signals HotSpot handles itself in normal operation (faulthandler takes these too).
JVM_FAULT_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")
    if hasattr(signal, name)
)
#: Larger than any platform's `struct sigaction`: it is only copied and compared.
_SIGACTION_BYTES = 1024

_jvm_handlers: dict[int, ctypes.Array[ctypes.c_char]] = {}


@functools.cache
def _sigaction() -> Any:
    """libc's sigaction(signum, new, old); None where there is none (Windows: the JVM
    uses structured exceptions there, which faulthandler does not replace)."""
    if sys.platform == "win32":
        return None
    call = ctypes.CDLL(None, use_errno=True).sigaction
    call.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    call.restype = ctypes.c_int
    return call


def _current(call: Any, signum: int) -> ctypes.Array[ctypes.c_char]:
    action = ctypes.create_string_buffer(_SIGACTION_BYTES)
    call(signum, None, action)
    return action


@contextmanager
def jvm_starting() -> Iterator[None]:
    """Start the JVM inside this block: its fault handlers are recorded, and survive a
    later faulthandler.disable() (see the module's docstring)."""
    call = _sigaction()
    enabled = call is not None and faulthandler.is_enabled()
    if enabled:
        faulthandler.disable()  # the JVM then chains to the handlers from before it
    try:
        yield
    except BaseException:
        if enabled:
            _enable_faulthandler()
        raise
    if call is None:
        return
    _jvm_handlers.update({signum: _current(call, signum) for signum in JVM_FAULT_SIGNALS})
    if enabled and _enable_faulthandler():  # it saves the JVM's handlers as its previous
        _install(call)


def _enable_faulthandler() -> bool:
    stream = sys.__stderr__
    if stream is None:
        return False
    try:
        faulthandler.enable(stream, all_threads=True)
    except (AttributeError, OSError, RuntimeError, TypeError, ValueError):  # no usable fd
        return False
    return True


def _handler(action: ctypes.Array[ctypes.c_char]) -> bytes:
    """The handler's address, the first member of `struct sigaction`: what tells whose it
    is (the mask and flags read back may differ in bytes that carry nothing)."""
    return action.raw[: ctypes.sizeof(ctypes.c_void_p)]


def _install(call: Any) -> list[int]:
    """Install the JVM's recorded handlers; the signals where another had replaced them."""
    lost = []
    for signum, kept in _jvm_handlers.items():
        if _handler(_current(call, signum)) != _handler(kept):
            lost.append(signum)
            call(signum, kept, None)
    return lost


def restore_jvm_handlers() -> list[int]:
    """Reinstall the JVM's fault handlers where another replaced them since it started; the
    signals that had lost theirs (none where xasink started no JVM)."""
    call = _sigaction() if _jvm_handlers else None
    if call is None:
        return []
    lost = _install(call)
    if lost and faulthandler.is_enabled():
        # Enabled after the JVM started: it would put back whatever preceded it as the
        # interpreter finalizes, while the JVM still runs. Its previous ones are the JVM's.
        faulthandler.disable()
        _install(call)
    return lost
