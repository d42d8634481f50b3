"""Test-only fault injection points, armed by the test suite with `injected(...)`.

They let the test suite kill, fail or stall a worker or the driver at the exact protocol step
that matters (after rows, after PREPARE, before and after the decision, during phase 2), on
both write paths: a small frame's branch, written by the driver itself, meets the same
after-rows and after-PREPARE points in the driver's process. With no faults given,
`trigger` is a no-op.

A fault that never fires is a test that tests nothing (a path a refactor made unreachable):
each firing is recorded in a ledger file, in whichever process fires it (the driver, a
Python worker), and the `injected` block fails with `FaultNeverFired` when one of its faults
has no record at its end.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace

POINTS = (
    "after_rows",
    "after_prepare",
    "before_decision",
    "after_decision_stamp",
    "after_decision",
    "before_participants",
    "after_first_commit",
    "before_finish",
    "before_local_commit",
)
ACTIONS = ("raise", "exit", "hang", "pause", "hold")
#: How long a held job waits for `release` before it fails (InjectedFault).
HOLD_SECONDS = 120.0


class InjectedFault(RuntimeError):
    """Raised by a `raise` fault; a real failure as far as Spark is concerned."""


class FaultNeverFired(BaseException):
    """An armed fault was never met: the test did not exercise what it names. Not an
    `Exception`, so that a test's `pytest.raises(Exception)` cannot swallow it."""


@dataclass(frozen=True)
class Fault:
    point: str
    action: str
    partition: int | None = None
    attempt_number: int | None = 0
    #: The file a firing creates (set by `injected`; it travels with the job's plan).
    ledger: str | None = None

    def __post_init__(self) -> None:
        if self.point not in POINTS or self.action not in ACTIONS:
            raise ValueError(f"unknown fault {self.point}/{self.action}")


#: The faults armed in this process; a job takes them when it starts (process-wide, not
#: per thread: foreachBatch runs its function on a thread of Spark's).
_armed: tuple[Fault, ...] = ()


@contextmanager
def injected(*faults: Fault) -> Iterator[tuple[Fault, ...]]:
    """Arm `faults` for the jobs that start inside the block; they travel with each job's
    plan to its tasks. At the block's end, however it ends, every fault must have fired
    at least once (`FaultNeverFired` otherwise, chained to the block's own error). Yields
    the armed faults, which `held` and `release` take."""
    global _armed
    folder = tempfile.mkdtemp(prefix="xasink-faults-")
    ledgered = tuple(
        replace(f, ledger=os.path.join(folder, f"{i}-{f.point}")) for i, f in enumerate(faults)
    )
    previous, _armed = _armed, ledgered
    try:
        try:
            yield ledgered
        except BaseException as exc:
            _check_fired(ledgered, exc)
            raise
        _check_fired(ledgered, None)
    finally:
        _armed = previous
        shutil.rmtree(folder, ignore_errors=True)


def _check_fired(faults: tuple[Fault, ...], error: BaseException | None) -> None:
    never = [f for f in faults if f.ledger and not os.path.exists(f.ledger)]
    if never:
        names = ", ".join(f"{f.point}/{f.action}" for f in never)
        why = f" (the block ended with {type(error).__name__}: {error})" if error else ""
        raise FaultNeverFired(
            f"armed fault(s) never fired: {names}{why}. The test no longer reaches the "
            "point it names: arm it where the path goes now."
        ) from error


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
        if fault.action == "hold":  # the first job to reach it waits; the others go on
            if _claimed(fault):
                _wait_for_release(fault, point)
            continue
        _record(fault)
        if fault.action == "raise":
            raise InjectedFault(f"injected fault at {point} (partition {partition})")
        if fault.action == "exit":
            os._exit(17)
        # "hang": announce the point, then wait to be killed from outside. "pause": announce
        # it and stop this process (SIGSTOP) until a test sends SIGCONT: a stalled driver.
        # "hold" (above): one job, on one thread, waits at the point until the test
        # releases it while the process goes on: a decision held open, say.
        print(f"XASINK-FAULT {point}", flush=True)
        sys.stdout.flush()
        if fault.action == "pause":
            os.kill(os.getpid(), signal.SIGSTOP)
            return
        while True:
            time.sleep(3600)


def held(fault: Fault) -> bool:
    """Whether a job has reached the `hold` fault (it waits there until `release`)."""
    return bool(fault.ledger) and os.path.exists(str(fault.ledger))


def release(fault: Fault) -> None:
    """Let the job held at `fault` go on (or the first to reach it, if none has yet)."""
    if fault.ledger:
        with open(f"{fault.ledger}.release", "a"):
            pass


def _claimed(fault: Fault) -> bool:
    """Record the firing; True only for the first job (of any process) that reaches it."""
    if not fault.ledger:
        return True
    try:
        os.close(os.open(fault.ledger, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _wait_for_release(fault: Fault, point: str) -> None:
    deadline = time.monotonic() + HOLD_SECONDS
    while not os.path.exists(f"{fault.ledger}.release"):
        if time.monotonic() > deadline:
            raise InjectedFault(f"held at {point} for {HOLD_SECONDS:.0f}s, never released")
        time.sleep(0.02)


def _record(fault: Fault) -> None:
    """The firing, on disk before the fault acts (an `exit` ends the process at once)."""
    if fault.ledger:
        with suppress(OSError), open(fault.ledger, "a"):
            pass
