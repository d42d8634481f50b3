"""Wall-clock time of a job: its phases, for the job-end line and WriteResult (`Stopwatch`),
and write_xa's finer driver steps, for attributing its fixed cost per call (`step`).

Steps are recorded only when a caller asks with `recording()` (the benchmarks' `fixed`
breakdown does); otherwise `step` only reads a context variable. Timings never change
what a step does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

_current: ContextVar[dict[str, float] | None] = ContextVar("xasink_steps", default=None)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Add the time spent inside to `name` in the active recording, if any."""
    record = _current.get()
    if record is None:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        record[name] = record.get(name, 0.0) + time.perf_counter() - started


@contextlib.contextmanager
def recording() -> Iterator[dict[str, float]]:
    """Seconds per step name, in the order the steps first ran, for the calls inside."""
    record: dict[str, float] = {}
    token = _current.set(record)
    try:
        yield record
    finally:
        _current.reset(token)


@dataclass
class Stopwatch:
    """Consecutive phases of one job. By the wall clock, not a monotonic one: a
    format("xasink") job runs its phases in several processes of the driver's host (the
    stopwatch is pickled from one to the next), and only the wall clock is shared by them.
    A clock stepped backwards counts as no time, never as negative."""

    started: float = field(default_factory=time.time)
    #: When the last phase ended (None: none yet, the next one runs from `started`).
    marked: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)

    def mark(self, phase: str) -> None:
        """`phase` ran from the previous mark (or the start) until now."""
        now = time.time()
        since = self.started if self.marked is None else self.marked
        self.seconds[phase] = self.seconds.get(phase, 0.0) + max(0.0, now - since)
        self.marked = now

    def elapsed(self) -> float:
        return max(0.0, time.time() - self.started)
