"""The driver's heartbeat: proof to recovery runs that a job's driver is still alive.

One daemon thread per process beats every live job when its interval is due, instead of a
thread per call: most small calls end before their first beat, and starting and joining a
thread each time was a fixed cost of its own.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from ..defaults import LEASE_INTERVALS
from ..runtime import shutdown
from ..runtime.jdbc import execute, set_network_timeout
from ..spec import ConnectionSpec
from .journal import Journal
from .sessions import open_session
from .xa import XaSession

log = logging.getLogger("xasink")


class Heartbeat:
    """Refreshes the job row while its owner lives, so recovery can tell it from a dead one.

    Beats run on a connection of their own with bounded lock waits: a beat that waits
    behind the job's own apply gives up and tries again, rather than queueing. No beat
    waits long for a silent server either: its connection's network timeout is a few
    intervals, and `stop` never waits longer than that for a beat in flight.

    `lease`: stored on the job row by every beat (None: keep the row's). `beat_now`: the
    first beat goes out at once rather than after one interval."""

    def __init__(
        self,
        journal: Journal,
        spec: ConnectionSpec,
        job_id: str,
        interval: float,
        lease: float | None = None,
        beat_now: bool = False,
    ) -> None:
        self.journal, self.spec, self.job_id = journal, spec, job_id
        self.interval, self.lease, self.beat_now = interval, lease, beat_now
        #: Beats sent (attempted) so far, counted by the heartbeat thread.
        self.beats = 0

    @property
    def network_bound(self) -> float:
        """How long one beat may wait for the server, in seconds."""
        return min(self.spec.network_timeout, max(10.0, LEASE_INTERVALS * self.interval))

    def start(self) -> Heartbeat:
        _BEATER.add(self)
        return self

    def stop(self, flushed: bool = False) -> None:
        """No beat of this job starts once this returns; one in flight is waited for, at
        most its network bound (then it is left to fail on its own). `flushed`: a beat due
        now goes out first (a quick task's one beat), if it starts within one interval."""
        _BEATER.remove(self, flushed)


#: Seconds the heartbeat sessions stay open with no job to beat for, for the next one.
KEEP_IDLE = 30.0


class _Beater:
    """The process's heartbeat thread and its sessions, one per (connection, lock bound)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Heartbeat, float] = {}
        self._beating: Heartbeat | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._sessions: dict[tuple[ConnectionSpec, int], XaSession] = {}
        self._exiting = False
        self._close_idle = False

    def close_idle(self, timeout: float = 10.0) -> None:
        """Close the sessions kept for the next job now, if no job is beating."""
        with self._cond:
            self._close_idle = True
            self._cond.notify_all()
            deadline = time.monotonic() + timeout
            while self._sessions and not self._due and time.monotonic() < deadline:
                self._cond.wait(0.05)

    def add(self, heartbeat: Heartbeat) -> None:
        with self._cond:
            delay = 0.0 if heartbeat.beat_now else heartbeat.interval
            self._due[heartbeat] = time.monotonic() + delay
            alive = self._thread is not None and self._thread.is_alive()
            if not alive or self._pid != os.getpid():  # none yet, or forked after it started
                self._sessions = {}
                self._pid = os.getpid()
                self._thread = threading.Thread(
                    target=self._run, name="xasink-heartbeat", daemon=True
                )
                self._thread.start()
                shutdown.call_at_exit(self.shutdown)
            self._cond.notify_all()

    def remove(self, heartbeat: Heartbeat, flushed: bool = False) -> None:
        with self._cond:
            deadline = time.monotonic() + heartbeat.network_bound + 5
            if flushed:
                self._await_first_beat(
                    heartbeat, min(deadline, time.monotonic() + heartbeat.interval)
                )
            self._due.pop(heartbeat, None)
            while self._beating is heartbeat:
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning(
                        "xasink job %s: its last heartbeat is still waiting for the server; "
                        "not waiting for it any longer",
                        heartbeat.job_id,
                    )
                    break
                self._cond.wait(left)
            self._cond.notify_all()

    def _await_first_beat(self, heartbeat: Heartbeat, deadline: float) -> None:
        """Until `heartbeat`'s due beat has started (its due time moved on), the deadline, or
        no thread of this process could beat it (exiting, gone, forked). Holds the lock."""
        while not heartbeat.beats:
            now = time.monotonic()
            thread = self._thread
            if self._exiting or thread is None or not thread.is_alive() or self._pid != os.getpid():
                return
            if self._due.get(heartbeat, deadline) > now or now >= deadline:
                return
            self._cond.wait(deadline - now)

    def shutdown(self, timeout: float = 30.0) -> None:
        """End the thread at exit, after its beat in flight, and close its sessions: it must
        not be inside a Java call when the interpreter ends (xasink.runtime.shutdown)."""
        with self._cond:
            self._exiting = True
            self._due.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread.is_alive() and self._pid == os.getpid():
            thread.join(timeout)

    def _next(self) -> Heartbeat | None:
        """Wait for the next due beat (None: no job is left for KEEP_IDLE seconds; close
        the sessions). A worker that runs batch after batch beats on the same session."""
        idle_since: float | None = None
        with self._cond:
            while True:
                if self._exiting:
                    return None
                now = time.monotonic()
                if not self._due:
                    if not self._sessions:
                        self._cond.wait()
                        continue
                    idle_since = now if idle_since is None else idle_since
                    left = idle_since + KEEP_IDLE - now
                    if left <= 0 or self._close_idle:
                        self._close_idle = False
                        return None
                    self._cond.wait(left)
                    continue
                idle_since = None
                heartbeat, due = min(self._due.items(), key=lambda item: item[1])
                if due <= now:
                    self._due[heartbeat] = now + heartbeat.interval
                    self._beating = heartbeat
                    return heartbeat
                self._cond.wait(due - now)

    def _run(self) -> None:
        while True:
            heartbeat = self._next()
            if heartbeat is None:
                self._close_all()
                if self._exiting:
                    return
                continue
            try:
                self._beat(heartbeat)
            finally:
                with self._cond:
                    heartbeat.beats += 1
                    self._beating = None
                    self._cond.notify_all()

    def _beat(self, heartbeat: Heartbeat) -> None:
        bound_seconds = max(1, int(heartbeat.interval))
        key = (heartbeat.spec, bound_seconds)
        try:
            session = self._sessions.get(key)
            if session is None:
                session = open_session(heartbeat.spec)
                self._sessions[key] = session
                set_network_timeout(session.connection, heartbeat.network_bound)
                bound, _ = heartbeat.journal.dialect.lock_wait_sql(bound_seconds)
                if bound:
                    execute(session.connection, bound)
            heartbeat.journal.heartbeat(session.connection, heartbeat.job_id, heartbeat.lease)
        except Exception as exc:  # keep beating; recovery decides if we went silent
            log.warning("xasink heartbeat failed: %s", heartbeat.spec.redact(exc))
            broken = self._sessions.pop(key, None)
            if broken is not None:
                broken.close()

    def _close_all(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            session.close()
        with self._cond:
            self._cond.notify_all()


_BEATER = _Beater()


def close_idle_sessions() -> None:
    """Close the heartbeat sessions kept for the next job, if no job is beating now."""
    _BEATER.close_idle()
