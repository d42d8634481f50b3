"""The two rules of a job on the driver, on fakes: any failure before the commit decision
aborts the job and rolls back its branches (after it, nothing is rolled back), and every
XasinkError raised while the job exists carries its id."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from xasink.driver.job import Job
from xasink.driver.phase_two import roll_back_others
from xasink.driver.request import JobRequest
from xasink.errors import DecisionUnknownError, PreflightError, WriteError
from xasink.spec import TableRef
from xasink.tables.modes import ModeOptions
from xasink.tables.staging import ApplyPlan, stage_name

JOB = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32


def make_job(fakes, state="running", prepared=((0, 0), (1, 0)), apply=None):
    ops = fakes.Ops([fakes.branch(p, a) for p, a in prepared] + [fakes.branch(0, 0, OTHER)])
    journal = fakes.Journal()
    journal.jobs[JOB] = fakes.record(state)
    request = JobRequest(ops.spec, TableRef("events"), ModeOptions())
    job = Job(request, SimpleNamespace(connection="conn"), journal)
    job.job_id, job.apply, job._ops = JOB, apply, ops
    return job, journal, ops


def test_a_failure_before_the_decision_aborts_and_rolls_back(fakes):
    job, journal, ops = make_job(fakes)
    with pytest.raises(WriteError) as caught, job.running():
        raise WriteError("partition 3 failed")
    assert caught.value.job_id == JOB
    assert journal.jobs[JOB].state == "aborted"
    assert ("abort", JOB, None) in journal.calls
    assert ops.calls == [("rollback", f"{JOB}/p0/a0"), ("rollback", f"{JOB}/p1/a0")]
    assert ops.branches == [fakes.branch(0, 0, OTHER)]  # another job's branch is untouched


def test_any_exception_aborts_but_only_xasink_errors_get_the_id(fakes):
    job, journal, _ = make_job(fakes)
    with pytest.raises(KeyboardInterrupt) as caught, job.running():
        raise KeyboardInterrupt
    assert not hasattr(caught.value, "job_id")
    assert journal.jobs[JOB].state == "aborted"


def test_after_the_decision_nothing_is_rolled_back(fakes):
    job, journal, ops = make_job(fakes, state="committing")
    job.decided = True
    with pytest.raises(PreflightError) as caught, job.running():
        raise PreflightError("lost the connection in phase 2")
    assert caught.value.job_id == JOB
    assert journal.calls == [] and ops.calls == []


def test_an_unknown_decision_is_left_to_recovery(fakes):
    job, journal, ops = make_job(fakes)
    with pytest.raises(DecisionUnknownError) as caught, job.running():
        raise DecisionUnknownError("the decision's commit failed")
    assert caught.value.job_id == JOB
    assert journal.calls == [] and ops.calls == []
    assert journal.jobs[JOB].state == "running"


def test_a_job_the_journal_does_not_show_aborted_keeps_its_branches(fakes, caplog):
    job, journal, ops = make_job(fakes, state="committing")  # decided by another process
    with caplog.at_level(logging.ERROR, "xasink"), pytest.raises(WriteError), job.running():
        raise WriteError("late failure")
    assert ops.calls == []
    assert journal.jobs[JOB].state == "committing"
    assert f"xasink job {JOB} is committing, not aborted" in caplog.text


def test_a_final_jobs_stage_is_dropped_when_it_ends(fakes):
    plan = ApplyPlan("overwrite", TableRef("events"), stage_name(JOB, None), ("id",))
    job, journal, _ = make_job(fakes, apply=plan)
    with job.running():
        pass
    assert journal.calls == []  # still running: the stage stays
    with pytest.raises(WriteError), job.running():
        raise WriteError("boom")
    assert journal.calls[-1] == ("release", JOB, f"xasink_stage_{JOB}")


def test_roll_back_others_keeps_winners_and_survives_one_failure(fakes, caplog):
    ops = fakes.Ops([fakes.branch(0, 0), fakes.branch(0, 1), fakes.branch(1, 0)])
    ops.outcomes[fakes.branch(1, 0)] = RuntimeError(f"busy ({fakes.SECRET})")
    with caplog.at_level(logging.WARNING, "xasink"):
        done = roll_back_others(ops.spec, JOB, ops, keep={(0, 1)})
    assert done == 1
    assert ops.calls == [("rollback", f"{JOB}/p0/a0"), ("rollback", f"{JOB}/p1/a0")]
    assert f"could not roll back {JOB}/p1/a0 yet (busy (***))" in caplog.text
    assert fakes.SECRET not in caplog.text
