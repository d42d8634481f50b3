"""The fault hooks report an armed fault that never fired: a test whose path a change made
unreachable fails instead of passing without testing anything."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time

import pytest

from xasink._testing.faults import (
    Fault,
    FaultNeverFired,
    InjectedFault,
    armed,
    held,
    injected,
    release,
    trigger,
)


def test_a_fault_that_fires_passes():
    with injected(Fault("after_rows", "raise", partition=1)), pytest.raises(InjectedFault):
        trigger(armed(), "after_rows", partition=1, attempt_number=0)


def test_a_fault_that_never_fires_fails_the_block():
    with (
        pytest.raises(FaultNeverFired, match="after_prepare/raise"),
        injected(Fault("after_prepare", "raise"), Fault("after_rows", "raise")),
    ):
        with pytest.raises(InjectedFault):
            trigger(armed(), "after_rows", partition=0, attempt_number=0)
        trigger(armed(), "after_prepare", partition=0, attempt_number=1)  # another attempt


def test_an_error_in_the_block_does_not_hide_a_fault_that_never_fired():
    """A test expecting any error would otherwise pass on the wrong one."""
    with (
        pytest.raises(FaultNeverFired) as never,
        pytest.raises(Exception),  # noqa: B017
        injected(Fault("before_decision", "raise")),
    ):
        raise ValueError("failed before the point")
    assert isinstance(never.value.__cause__, ValueError)
    assert "ValueError: failed before the point" in str(never.value)


def test_a_firing_in_another_process_counts():
    """Tasks fire in Spark's Python workers: the fault travels pickled with the job's plan."""
    with injected(Fault("after_prepare", "exit", partition=3)):
        (fault,) = armed()
        code = (
            "import pickle, sys; from xasink._testing.faults import trigger; "
            "trigger((pickle.loads(sys.stdin.buffer.read()),), 'after_prepare', 3, 0)"
        )
        done = subprocess.run([sys.executable, "-c", code], input=pickle.dumps(fault))
        assert done.returncode == 17


def test_no_faults_arm_nothing():
    with injected():
        assert armed() == ()
    assert armed() == ()


def test_a_hold_stops_the_first_job_to_reach_it_until_released():
    """`hold`: the first caller waits at the point while the others go on, until the test
    releases it (a decision held open while another one decides)."""
    passed: list[str] = []
    with injected(Fault("after_decision_stamp", "hold", attempt_number=None)) as (hold,):
        first = threading.Thread(
            target=lambda: (trigger(armed(), "after_decision_stamp"), passed.append("first"))
        )
        first.start()
        deadline = time.monotonic() + 30
        while not held(hold):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        trigger(armed(), "after_decision_stamp")  # a second job goes on at once
        passed.append("second")
        assert first.is_alive()
        release(hold)
        first.join(30)
    assert passed == ["second", "first"]
