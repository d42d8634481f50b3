"""The job-end line: one line per job on `xasink.jobs`, logfmt after a fixed prefix, the
same fields as a dict for JSON handlers, and never a secret; a job that fails logs exactly
one line, which says how it was left."""

from __future__ import annotations

import contextlib
import logging
import pickle
import shlex
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from xasink.driver.job import Job
from xasink.driver.report import (
    JOBS,
    JobEnd,
    JobOutcome,
    JobTrace,
    PhaseSeconds,
    log_job_end,
    logfmt,
)
from xasink.driver.request import JobRequest
from xasink.errors import JournalError, WriteError
from xasink.masking import Redactor
from xasink.protocol.sinkmarks import SinkBatch
from xasink.spec import ConnectionSpec, TableRef
from xasink.tables.modes import ModeOptions

JOB = "0123456789abcdef0123456789abcdef"
SECRET = "s3cr3t-Pa55word!"


def end(**changes: object) -> JobEnd:
    base = {
        "outcome": JobOutcome.COMMITTED,
        "job_id": JOB,
        "table": "public.events",
        "mode": "append",
        "rows": 1000,
        "branches": 4,
        "load_paths": ("copy-binary",),
        "writer": "tasks",
        "seconds": PhaseSeconds(0.0414, 1.2, 0.0125, 0.055, 1.3111),
        "redact": Redactor([SECRET]),
    }
    return JobEnd(**{**base, **changes})  # type: ignore[arg-type]


def parsed(line: str) -> dict[str, str]:
    """A logfmt line read back the way a shell would split it."""
    assert line.startswith("job end ")
    return dict(pair.split("=", 1) for pair in shlex.split(line[len("job end ") :]))


def test_a_committed_job_is_one_line_of_its_fields_in_order() -> None:
    assert end().line() == (
        f"job end job={JOB} table=public.events mode=append outcome=committed rows=1000 "
        "branches=4 load=copy-binary writer=tasks preflight_s=0.041 write_s=1.200 "
        "decide_s=0.013 commit_s=0.055 total_s=1.311"
    )


def test_a_stream_batch_carries_its_sink_batch_and_lag() -> None:
    line = end(sink_id="events to pg", batch_id=7, lag_seconds=2.5).line()
    assert line.endswith('sink="events to pg" batch=7 lag_s=2.500')


def test_a_failure_names_the_error_class_and_a_job_that_never_began_shows_a_dash() -> None:
    line = end(
        outcome=JobOutcome.FAILED,
        job_id="",
        rows=0,
        branches=0,
        load_paths=(),
        error="PreflightError",
    ).line()
    fields = parsed(line)
    assert (fields["job"], fields["outcome"], fields["load"]) == ("-", "failed", "-")
    assert fields["error"] == "PreflightError"


@pytest.mark.parametrize(
    ("value", "rendered"),
    [
        ("plain", "plain"),
        ("with space", '"with space"'),
        ("a=b", '"a=b"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash", '"back\\\\slash"'),
        ("", '""'),
        ("two\nlines\ttab\x1b", '"two\\nlines\\ttab\\x1b"'),
        ("événements", "événements"),
        (None, "-"),
        (["copy-csv", "batched"], "copy-csv,batched"),
        (0.5, "0.500"),
        (12, "12"),
    ],
)
def test_values_are_quoted_only_when_they_must_be(value: object, rendered: str) -> None:
    assert logfmt({"k": value}) == f"k={rendered}"


def test_quoted_values_read_back_whole() -> None:
    table = 'my schema.tab "x" = y'
    assert parsed(end(table=table).line())["table"] == table
    assert "\n" not in end(table="a\nb", sink_id="c\rd", batch_id=0).line()


def test_no_password_nor_url_credentials_in_the_line_or_the_dict() -> None:
    """The password as a token (the Redactor leaves it inside a longer word: a password
    `x` must not turn `xasink_jobs` into `***asink_jobs`)."""
    odd = end(
        table=f"t.{SECRET}",
        sink_id=f"jdbc:postgresql://app:{SECRET}@db/app?password={SECRET}",
        batch_id=1,
    )
    line, fields = odd.line(), odd.fields()
    assert SECRET not in line and SECRET not in repr(fields)
    assert "t.***" in line and fields["table"] == "t.***"


def test_levels_say_who_has_to_act() -> None:
    assert end().level == end(outcome=JobOutcome.SKIPPED).level == logging.INFO
    assert end(outcome=JobOutcome.ABORTED).level == logging.WARNING
    assert end(outcome=JobOutcome.CANCELLED).level == logging.WARNING
    assert end(outcome=JobOutcome.IN_DOUBT).level == logging.ERROR


def test_the_record_carries_the_same_fields_for_json_handlers(caplog) -> None:
    with caplog.at_level(logging.INFO, JOBS.name):
        log_job_end(end())
    (record,) = caplog.records
    assert record.name == "xasink.jobs" and record.levelno == logging.INFO
    assert record.getMessage() == end().line()
    assert record.xasink == end().fields()  # type: ignore[attr-defined]
    assert record.xasink["load"] == ["copy-binary"]  # type: ignore[attr-defined]


def test_in_a_spark_worker_with_no_handler_the_line_goes_to_stderr(monkeypatch, capsys) -> None:
    monkeypatch.setattr(JOBS, "propagate", False)  # as in a worker: no handler anywhere
    log_job_end(end(), spark_worker=True)
    assert "INFO xasink.jobs: job end job=" in capsys.readouterr().err


def request() -> JobRequest:
    spec = ConnectionSpec("jdbc:postgresql://db/app", "app", SECRET, dialect="postgres")
    return JobRequest(spec, TableRef("events", "public"), ModeOptions())


def test_a_trace_ends_once_and_adds_up_its_phases(caplog) -> None:
    trace = JobTrace.of(request())
    trace.job_id = JOB
    for phase in ("preflight", "write", "decide", "commit"):
        trace.done(phase)
    with caplog.at_level(logging.INFO, JOBS.name):
        first = trace.end(JobOutcome.COMMITTED)
        again = trace.end(JobOutcome.ABORTED)
    assert again is first and len(caplog.records) == 1
    seconds = first.seconds
    assert seconds.total >= seconds.preflight + seconds.write + seconds.decide + seconds.commit
    assert (first.table, first.mode, first.sink_id, first.lag_seconds) == (
        "public.events",
        "append",
        None,
        None,
    )


def test_a_stream_trace_lags_by_its_total() -> None:
    trace = JobTrace.of(request())
    trace.sink = SinkBatch("sink", 3)
    ended = trace.end(JobOutcome.SKIPPED)
    assert (ended.sink_id, ended.batch_id, ended.lag_seconds) == ("sink", 3, ended.seconds.total)


@pytest.mark.parametrize(
    ("job_id", "state", "outcome"),
    [
        ("", None, JobOutcome.FAILED),
        (JOB, "aborted", JobOutcome.ABORTED),
        (JOB, "running", JobOutcome.IN_DOUBT),
        (JOB, "committing", JobOutcome.IN_DOUBT),
        (JOB, None, JobOutcome.IN_DOUBT),
        (JOB, "committed", JobOutcome.COMMITTED),
    ],
)
def test_a_failure_is_told_by_the_state_it_left(job_id: str, state: str | None, outcome) -> None:
    trace = JobTrace.of(request())
    trace.job_id, trace.state = job_id, state
    with pytest.raises(WriteError), trace.ending():
        raise WriteError("boom")
    assert trace.ended is not None
    assert (trace.ended.outcome, trace.ended.error) == (outcome, "WriteError")


def fake_job(fakes, state: str = "running") -> tuple[Job, JobTrace]:
    ops = fakes.Ops([fakes.branch(0, 0)])
    journal = fakes.Journal()
    journal.jobs[JOB] = fakes.record(state)
    job_request = JobRequest(ops.spec, TableRef("events"), ModeOptions())
    trace = JobTrace.of(job_request)
    job = Job(job_request, SimpleNamespace(connection="conn"), journal, trace)
    job.job_id, job._ops = JOB, ops
    trace.job_id, trace.state = JOB, "running"
    return job, trace


def job_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == JOBS.name]


def test_a_job_failing_before_its_decision_logs_one_aborted_line(fakes, caplog) -> None:
    job, trace = fake_job(fakes)
    caplog.set_level(logging.INFO, "xasink")
    with pytest.raises(WriteError), trace.ending(), job.running():
        raise WriteError(f"partition 3 failed ({SECRET})")
    (line,) = job_lines(caplog)
    fields = parsed(line.getMessage())
    assert (fields["job"], fields["outcome"], fields["error"]) == (JOB, "aborted", "WriteError")
    assert line.levelno == logging.WARNING
    assert SECRET not in caplog.text


def test_a_decided_job_failing_in_phase_two_logs_in_doubt(fakes, caplog) -> None:
    job, trace = fake_job(fakes, state="committing")
    job.decided = True
    caplog.set_level(logging.INFO, "xasink")
    with pytest.raises(WriteError), trace.ending(), job.running():
        raise WriteError("the server went away in phase 2")
    (line,) = job_lines(caplog)
    assert parsed(line.getMessage())["outcome"] == "in-doubt"
    assert line.levelno == logging.ERROR


def test_spark_cancelling_a_running_job_logs_it_once_and_an_ended_one_not_again(
    fakes, caplog
) -> None:
    job, _ = fake_job(fakes)
    with caplog.at_level(logging.INFO, "xasink"):
        assert job.cancel() == "aborted"
        again, _ = fake_job(fakes, state="aborted")  # e.g. commit() failed and logged it
        again.cancel()
    (line,) = job_lines(caplog)
    assert parsed(line.getMessage())["outcome"] == "cancelled"


def _unreachable(*args: object, **kwargs: object) -> contextlib.AbstractContextManager[Job]:
    @contextlib.contextmanager
    def journal() -> Iterator[Job]:
        raise JournalError("the journal's server did not answer")
        yield  # pragma: no cover

    return journal()


def test_a_format_commit_failing_before_it_ends_its_job_leaves_the_one_line_to_abort(
    fakes, caplog, monkeypatch
) -> None:
    """format("xasink")'s commit() cannot reach the journal, so the job is still running;
    Spark then calls abort() in another process, with its own copy of the trace, and abort()
    ends the job. One line between them, the one that ended it."""
    from xasink.spark import datasource

    job, minted = fake_job(fakes)
    sent = pickle.dumps(minted)  # the trace as commit() and abort() each receive it
    monkeypatch.setattr(datasource, "resume_job", _unreachable)
    caplog.set_level(logging.INFO, "xasink")
    plan = SimpleNamespace(job_id=JOB)
    with pytest.raises(JournalError):
        datasource.conclude(plan, job.request, [], pickle.loads(sent))  # type: ignore[arg-type]
    job.trace = pickle.loads(sent)
    assert job.cancel() == "aborted"  # Spark's abort(), the journal answering again
    (line,) = job_lines(caplog)
    assert parsed(line.getMessage())["outcome"] == "cancelled"


def test_a_stream_commit_rebuilds_the_trace_from_the_stopwatch_its_tasks_carry() -> None:
    """Tasks ship only the job's stopwatch, not its trace (which holds the redactor's
    secrets); commit() continues the phases from it."""
    from xasink.spark.datasource import BranchMessage, _trace

    minted = JobTrace.of(request(), spark_worker=True)
    minted.done("preflight")
    message = BranchMessage(SimpleNamespace(partition=0), None, "3", "q", minted.clock)  # type: ignore[arg-type]
    assert SECRET not in str(pickle.dumps(message))
    trace = _trace([message], request())
    assert (trace.clock.started, trace.running) == (minted.clock.started, 1)
    trace.job_id = JOB
    ended = trace.end(JobOutcome.ABORTED)
    assert ended.seconds.preflight == minted.clock.seconds["preflight"]
