"""The in-process JVM (JPype): started lazily, once per Python process.

Spark forks Python workers from a daemon, so nothing here runs at import time: a JVM must
never exist in a process that forks afterwards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import jpype
import jpype.config

from ..xid import Xid
from .javahelpers import helper_class
from .signals import jvm_starting, restore_jvm_handlers

JVM_OPTIONS_ENV = "XASINK_JVM_OPTIONS"
#: The in-process JVM only moves bytes between Python and the JDBC driver. The client tier
#: of the JIT (C1) and the serial collector spare the 2-4 compiler and collector threads
#: that a worker's JVM would otherwise keep busy beside Spark and the database (measured
#: alternating on MariaDB loads: commit 11b8d1f's message).
DEFAULT_JVM_OPTIONS = (
    "-Xmx512m",
    "-Xss4m",
    "-Duser.timezone=UTC",
    "-Xrs",
    "-XX:TieredStopAtLevel=1",
)
_SERIAL_GC = "-XX:+UseSerialGC"
_COLLECTORS = frozenset(
    f"-XX:+Use{name}GC"
    for name in (
        "Serial",
        "Parallel",
        "ParallelOld",
        "G1",
        "Z",
        "Shenandoah",
        "Epsilon",
        "ConcMarkSweep",
    )
)
#: Where else the JVM reads options, so a collector chosen there would make two.
_OTHER_OPTIONS_ENV = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")


def jvm_options() -> list[str]:
    """The defaults, then $XASINK_JVM_OPTIONS (the later of two settings wins); the serial
    collector unless a collector is chosen there, in the JVM's own option variables or in
    an options file (two collectors would stop the JVM)."""
    extra = os.environ.get(JVM_OPTIONS_ENV, "").split()
    elsewhere = [o for name in _OTHER_OPTIONS_ENV for o in os.environ.get(name, "").split()]
    chosen = any(
        o in _COLLECTORS or o.startswith(("-XX:VMOptionsFile=", "-XX:Flags="))
        for o in [*extra, *elsewhere]
    )
    return [*DEFAULT_JVM_OPTIONS, *([] if chosen else [_SERIAL_GC]), *extra]


_lock = threading.Lock()
_started_here = False
_loaded_jars: list[str] = []
_loader: Any = None
_thread_class: Any = None


def ensure_jvm(classpath: Sequence[str]) -> None:
    """Start the JVM with `classpath`, or make jars loadable in one already running."""
    global _loader
    with _lock:
        if not jpype.isJVMStarted():
            if threading.current_thread() is not threading.main_thread():
                # The starting thread stays attached as a non-daemon, and the JVM's
                # shutdown at exit would wait for it forever when it is a thread that
                # never ends (a py4j callback thread running a foreachBatch function).
                jpype.config.destroy_jvm = False
            with jvm_starting():  # its fault handlers outlive faulthandler (.signals)
                jpype.startJVM(
                    *jvm_options(), classpath=list(classpath), convertStrings=False, interrupt=False
                )
            global _started_here
            _started_here = True
            _loaded_jars.extend(classpath)
            global _thread_class
            _thread_class = jpype.JClass("java.lang.Thread")
            return
        extra = [jar for jar in classpath if jar not in _loaded_jars]
        if extra:
            # A reused worker may meet a driver it has not loaded yet.
            url_class = jpype.JClass("java.net.URL")
            urls = jpype.JArray(url_class)([url_class(Path(j).resolve().as_uri()) for j in extra])
            parent = _loader or jpype.JClass("java.lang.ClassLoader").getSystemClassLoader()
            _loader = jpype.JClass("java.net.URLClassLoader")(urls, parent)
            _loaded_jars.extend(extra)


def started_here() -> bool:
    """Whether xasink started this process's JVM (then its exit is xasink's to order)."""
    return _started_here


def keep_fault_handlers() -> None:
    """Put the fault handlers of the JVM started here back on top, should something have
    enabled faulthandler over them since (.signals): a reused Spark worker may, for each
    task (spark.python.worker.faulthandler.enabled). A few system calls."""
    if _started_here:
        restore_jvm_handlers()


def attach_as_daemon() -> None:
    """Attach the calling thread to the JVM as a daemon, before its first Java call.

    JPype attaches a thread on its first call as a non-daemon, and the JVM's shutdown at
    exit waits for those. Threads xasink does not own never end (py4j's callback threads,
    which run foreachBatch functions, are reused), so the process would hang on exit."""
    if _thread_class is not None and not _thread_class.isAttached():
        _thread_class.attachAsDaemon()  # via a class looked up earlier: a lookup attaches


def jclass(name: str) -> Any:
    """A Java class from the classpath or from jars added after start."""
    if _loader is not None:
        return jpype.JClass(name, loader=_loader)
    return jpype.JClass(name)


def java_bytes(data: bytes) -> Any:
    return jpype.JArray(jpype.JByte)(data)


_Method = TypeVar("_Method", bound=Callable[..., Any])


class _MethodDecorator(Protocol):
    def __call__(self, method: _Method, /) -> _Method: ...


#: jpype.JOverride with its type: it marks a proxy's method as implementing a Java one and
#: gives the same function back.
java_override: _MethodDecorator = jpype.JOverride


def xid_from_java(java_xid: Any) -> Xid:
    """Copy a driver's Xid (e.g. from recover()) into our value type."""
    return Xid(
        int(java_xid.getFormatId()),
        bytes(java_xid.getGlobalTransactionId()),
        bytes(java_xid.getBranchQualifier()),
    )


_proxy_class: Any = None


def java_xid(xid: Xid) -> Any:
    """A javax.transaction.xa.Xid with value equality (pgjdbc compares XIDs by equals): our
    Java class where the JDK can compile it, else a Python proxy (JVM threads then call
    back into Python for it, which can abort a process at exit)."""
    global _proxy_class
    native = helper_class("XasinkXid")
    if native is not None:
        return native(xid.format_id, java_bytes(xid.gtrid), java_bytes(xid.bqual))
    if _proxy_class is None:
        _proxy_class = _make_proxy_class()
    return jpype.JObject(_proxy_class(xid), jpype.JClass("javax.transaction.xa.Xid"))


def _make_proxy_class() -> type:
    @jpype.JImplements("javax.transaction.xa.Xid")
    class JavaXid:
        def __init__(self, xid: Xid) -> None:
            self.xid = xid
            self._gtrid = java_bytes(xid.gtrid)
            self._bqual = java_bytes(xid.bqual)

        @java_override
        def getFormatId(self) -> int:
            return self.xid.format_id

        @java_override
        def getGlobalTransactionId(self) -> Any:
            return self._gtrid

        @java_override
        def getBranchQualifier(self) -> Any:
            return self._bqual

        @java_override
        def equals(self, other: Any) -> bool:
            # JPype hands a proxy back as its Python object, a driver's Xid as Java.
            if isinstance(other, JavaXid):
                return other.xid == self.xid
            try:
                return xid_from_java(other) == self.xid
            except (AttributeError, TypeError, ValueError):
                return False

        @java_override
        def hashCode(self) -> int:
            return hash(self.xid) & 0x7FFFFFFF

        @java_override
        def toString(self) -> str:
            return str(self.xid)

    return JavaXid
