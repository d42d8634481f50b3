"""The driver's heartbeat: proof to recovery runs that a job's driver is still alive."""

from __future__ import annotations

import logging
import threading

from .journal import Journal
from .target import ConnectionSpec

log = logging.getLogger("xasink")

#: A job's lease, stored on its row, is this many heartbeat intervals: recovery never takes
#: a job for dead sooner, whatever grace it was given (except an explicit grace of 0).
LEASE_INTERVALS = 3


class Heartbeat:
    """Refreshes the job row while the driver lives, so recovery can tell it from a dead one.

    It runs on its own connection with bounded lock waits: a beat that waits behind the
    job's own apply gives up and tries again, rather than queueing."""

    def __init__(
        self, journal: Journal, spec: ConnectionSpec, job_id: str, interval: float
    ) -> None:
        self._journal, self._spec, self._job_id = journal, spec, job_id
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xasink-heartbeat", daemon=True)

    @property
    def lease(self) -> float:
        return LEASE_INTERVALS * self._interval

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        from .connect import open_session
        from .jdbc import execute

        session = None
        bound, _ = self._journal.dialect.lock_wait_sql(max(1, int(self._interval)))
        try:
            while not self._stop.wait(self._interval):
                try:
                    if session is None:
                        session = open_session(self._spec)
                        if bound:
                            execute(session.connection, bound)
                    self._journal.heartbeat(session.connection, self._job_id)
                except Exception as exc:  # keep beating; recovery decides if we went silent
                    log.warning("xasink heartbeat failed: %s", self._spec.redact(exc))
                    if session is not None:
                        session.close()
                        session = None
        finally:
            if session is not None:
                session.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
