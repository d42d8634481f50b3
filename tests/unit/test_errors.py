"""The error hierarchy callers catch, and messages that name the job and hide secrets:
a streaming sink's refusals, the sink arguments, and the driver's job errors."""

from __future__ import annotations

import pytest

from xasink import errors
from xasink.driver.sinks import refusal, sink_batch
from xasink.errors import ConfigurationError, LostBranchError, SinkConflictError
from xasink.protocol.sinkmarks import SinkBatch, SinkMark

JOB = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32


@pytest.mark.parametrize(
    ("error", "bases"),
    [
        ("ConfigurationError", ["XasinkError"]),
        ("DriverNotFoundError", ["ConfigurationError", "XasinkError"]),
        ("PreflightError", ["XasinkError"]),
        ("SchemaMismatchError", ["PreflightError", "XasinkError"]),
        ("UnsupportedTypeError", ["SchemaMismatchError", "PreflightError"]),
        ("WriteError", ["XasinkError"]),
        ("CommitError", ["XasinkError"]),
        ("LostBranchError", ["CommitError"]),
        ("JobAbortedError", ["CommitError"]),
        ("DecisionUnknownError", ["CommitError"]),
        ("SinkConflictError", ["JobAbortedError", "CommitError"]),
        ("JournalError", ["XasinkError"]),
        ("XaError", ["XasinkError"]),
        ("InputDataError", ["XasinkError"]),
    ],
)
def test_what_each_error_is_caught_as(error, bases):
    cls = getattr(errors, error)
    assert issubclass(cls, Exception)
    for base in bases:
        assert issubclass(cls, getattr(errors, base)), base


def test_input_errors_are_not_commit_errors():
    # A refused batch committed nothing: callers must not take it for a phase-2 failure.
    assert not issubclass(errors.InputDataError, errors.CommitError)
    assert not issubclass(errors.PreflightError, errors.CommitError)


def test_lost_branch_error_lists_the_branches():
    error = LostBranchError("2 winning branches lost", [f"{JOB}/p1/a0", f"{JOB}/p3/a2"])
    assert error.branches == [f"{JOB}/p1/a0", f"{JOB}/p3/a2"]
    assert str(error) == "2 winning branches lost"


# -- streaming sinks -----------------------------------------------------------------------
RESET = (
    "If the query's checkpoint was reset on purpose, run `xasink reset-sink 'orders'` (the sink "
    "then starts again at this query's next batch); if another query uses this sink id, give "
    "each query its own."
)


@pytest.mark.parametrize(
    ("mark", "sink"),
    [
        (SinkMark("orders", 6, OTHER, "q1"), SinkBatch("orders", 7, "q1")),  # the next batch
        (SinkMark("orders", 7, OTHER, "q1"), SinkBatch("orders", 7, "q1")),  # a replay
        (SinkMark("orders", 7, OTHER, None), SinkBatch("orders", 8, "q2")),  # query unknown
        (SinkMark("orders", 7, OTHER, "q1"), SinkBatch("orders", 9, None)),
    ],
)
def test_a_sink_takes_its_next_batch_and_replays(mark, sink):
    assert refusal(mark, sink, JOB) is None


def test_a_batch_below_the_mark_is_refused_naming_the_jobs():
    error = refusal(SinkMark("orders", 7, OTHER, "q1"), SinkBatch("orders", 5, "q1"), JOB)
    assert isinstance(error, SinkConflictError)
    assert str(error) == (
        f"Batch 5 of sink 'orders' is below the sink's last committed batch 7 (job {OTHER}). "
        "Spark only ever replays the batch after its last committed one, so this is a reset "
        "checkpoint or a second writer, not a replay; skipping it would lose its rows. "
        f"Job {JOB} committed nothing. {RESET}"
    )


def test_a_mark_of_another_query_is_refused_whatever_the_batch():
    error = refusal(SinkMark("orders", 7, OTHER, "q1"), SinkBatch("orders", 8, "q2"))
    assert isinstance(error, SinkConflictError)
    assert str(error) == (
        "Sink 'orders' was advanced to batch 7 by streaming query q1, and query q2 is now "
        "writing its batch 8: a reset checkpoint (Spark gives it a new query id) or a second "
        f"query with the same sink id. Nothing was written. {RESET}"
    )


@pytest.mark.parametrize(
    ("sink_id", "batch_id", "message"),
    [
        (None, 3, "sink_id and batch_id go together: pass both (a streaming batch) or neither."),
        ("orders", None, "sink_id and batch_id go together"),
        ("", 0, "sink_id must be 1 to 200 printable ASCII characters"),
        ("orders ", 0, "sink_id must be 1 to 200 printable ASCII characters"),
        ("ördérs", 0, "sink_id must be 1 to 200 printable ASCII characters"),
        ("x" * 201, 0, "sink_id must be 1 to 200 printable ASCII characters"),
        ("orders", -1, "batch_id must be an integer, 0 or more (got -1)."),
        ("orders", True, "batch_id must be an integer, 0 or more (got True)."),
        ("orders", 1.0, "batch_id must be an integer, 0 or more (got 1.0)."),
    ],
)
def test_sink_arguments_are_checked(sink_id, batch_id, message):
    with pytest.raises(ConfigurationError) as caught:
        sink_batch(sink_id, batch_id)
    assert str(caught.value).startswith(message)


def test_valid_sink_arguments():
    assert sink_batch(None, None) is None
    assert sink_batch("a b", 0, "q") == SinkBatch("a b", 0, "q")
    assert sink_batch("x" * 200, 2**40) == SinkBatch("x" * 200, 2**40, None)
