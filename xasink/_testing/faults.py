"""Test-only fault injection points, armed by the test suite with `injected(...)`.

They let the test suite kill, fail or stall a worker or the driver at the exact protocol step
that matters (after rows, after PREPARE, before and after the decision, during phase 2), on
both write paths: a small frame's branch, written by the driver itself, meets the same
after-rows and after-PREPARE points in the driver's process. With no faults given,
`trigger` is a no-op.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

POINTS = (
    "after_rows",
    "after_prepare",
    "before_decision",
    "after_decision",
    "before_participants",
    "after_first_commit",
    "before_finish",
    "before_local_commit",
)
ACTIONS = ("raise", "exit", "hang", "pause")


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault; a real failure as far as Spark is concerned."""


@dataclass(frozen=True)
class Fault:
    point: str
    action: str
    partition: int | None = None
    attempt_number: int | None = 0

    def __post_init__(self) -> None:
        if self.point not in POINTS or self.action not in ACTIONS:
            raise ValueError(f"unknown fault {self.point}/{self.action}")


#: The faults armed in this process; a job takes them when it starts (process-wide, not
#: per thread: foreachBatch runs its function on a thread of Spark's).
_armed: tuple[Fault, ...] = ()


@contextmanager
def injected(*faults: Fault) -> Iterator[None]:
    """Arm `faults` for the jobs that start inside the block; they travel with each job's
    plan to its tasks."""
    global _armed
    previous, _armed = _armed, tuple(faults)
    try:
        yield
    finally:
        _armed = previous


def armed() -> tuple[Fault, ...]:
    return _armed


def trigger(
    faults: tuple[Fault, ...],
    point: str,
    partition: int | None = None,
    attempt_number: int | None = None,
) -> None:
    for fault in faults:
        if fault.point != point:
            continue
        if fault.partition is not None and fault.partition != partition:
            continue
        if None not in (fault.attempt_number, attempt_number) and (
            fault.attempt_number != attempt_number
        ):
            continue
        if fault.action == "raise":
            raise InjectedFault(f"injected fault at {point} (partition {partition})")
        if fault.action == "exit":
            os._exit(17)
        # "hang": announce the point, then wait to be killed from outside. "pause": announce
        # it and stop this process (SIGSTOP) until a test sends SIGCONT: a stalled driver.
        print(f"XASINK-FAULT {point}", flush=True)
        sys.stdout.flush()
        if fault.action == "pause":
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        while True:
            time.sleep(3600)
