"""Wall-clock time of write_xa's driver steps, for attributing its fixed cost per call.

Nothing is recorded unless a caller asks with `recording()` (the benchmarks' `fixed`
breakdown does); otherwise `step` only reads a context variable. Timings never change
what a step does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextvars import ContextVar

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
