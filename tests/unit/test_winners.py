"""The driver's phase one: exactly one report per partition, and those attempts win; any
other picture refuses to commit. Also the job errors it raises, which name the job."""

from __future__ import annotations

import pytest

from xasink.driver.decision import phase_one_failed, select_winners
from xasink.errors import CommitError, InputDataError, JobAbortedError, WriteError
from xasink.executor.contract import JOB_ENDED
from xasink.xid import BranchId

JOB = "0123456789abcdef0123456789abcdef"


def test_one_report_per_partition_wins(fakes):
    reports = [
        fakes.report(1, 7, rows=20, peak_rss_kb=900, path="copy-binary"),
        fakes.report(0, 3, rows=10, peak_rss_kb=1200, path="copy-binary"),
        fakes.report(2, 9, xid="", peak_rss_kb=100),  # an empty partition: no branch
        fakes.report(3, 4, rows=5, path="batched"),
    ]
    phase = select_winners(fakes.plan(), reports, 4, True)
    assert phase.winners == [
        BranchId(fakes.TAG, JOB, 1, 7),
        BranchId(fakes.TAG, JOB, 0, 3),
        BranchId(fakes.TAG, JOB, 3, 4),
    ]
    assert phase.rows_of == {1: 20, 0: 10, 3: 5}
    assert (phase.rows, phase.empty_partitions, phase.worker_peak_rss_kb) == (35, 1, 1200)
    assert phase.load_paths == ("batched", "copy-binary")


def test_no_reports_at_all(fakes):
    phase = select_winners(fakes.plan(), [], 0, True)
    assert (phase.winners, phase.rows, phase.empty_partitions) == ([], 0, 0)
    assert phase.worker_peak_rss_kb == 0


def test_unplanned_counts_take_what_spark_reported(fakes):
    # Spark Connect cannot tell the partition count up front: at most `branches`.
    phase = select_winners(fakes.plan(), [fakes.report(1), fakes.report(0)], 8, False)
    assert [w.partition for w in phase.winners] == [1, 0]
    assert phase.empty_partitions == 0


def test_a_partition_reported_twice_is_refused(fakes):
    reports = [fakes.report(0, 1), fakes.report(1, 0), fakes.report(0, 2)]
    with pytest.raises(CommitError) as caught:
        select_winners(fakes.plan(), reports, 2, True)
    assert str(caught.value) == "Partition 0 reported twice; refusing to commit."


@pytest.mark.parametrize(
    ("partitions", "branches", "planned", "detail"),
    [
        ([0, 2], 3, True, "[0, 2] where 3 were planned (missing [1], unexpected [])"),
        ([0, 1, 3], 3, True, "[0, 1, 3] where 3 were planned (missing [2], unexpected [3])"),
        ([0, 2], 8, False, "[0, 2] where 2 were planned (missing [1], unexpected [2])"),
        ([1], 1, True, "[1] where 1 were planned (missing [0], unexpected [1])"),
    ],
)
def test_missing_or_unexpected_partitions_are_refused(fakes, partitions, branches, planned, detail):
    reports = [fakes.report(p) for p in partitions]
    with pytest.raises(CommitError) as caught:
        select_winners(fakes.plan(), reports, branches, planned)
    assert str(caught.value) == (
        f"Spark returned results for partitions {detail}; refusing to commit. Nothing was written."
    )


def test_a_job_ended_under_a_branch_was_aborted_by_recovery(fakes):
    reports = [fakes.report(0), fakes.report(1, problem=JOB_ENDED)]
    with pytest.raises(JobAbortedError) as caught:
        select_winners(fakes.plan(), reports, 2, True)
    assert str(caught.value).startswith(
        f"Job {JOB} was aborted by a recovery run before its commit decision"
    )
    assert "Nothing was committed: events is unchanged." in str(caught.value)


def test_rows_a_branch_cannot_apply_refuse_the_whole_job(fakes):
    reports = [
        fakes.report(0, problem="duplicate key(s) in the input: (id=1)"),
        fakes.report(1),
        fakes.report(2, problem="a key column (id) is NULL in some rows"),
    ]
    with pytest.raises(InputDataError) as caught:
        select_winners(fakes.plan(), reports, 3, True)
    assert str(caught.value) == (
        "The rows cannot be written into events (partition 0: duplicate key(s) in the input: "
        "(id=1); partition 2: a key column (id) is NULL in some rows). Nothing was written."
    )


def test_phase_one_failure_names_the_job_and_hides_the_password(fakes):
    plan = fakes.plan()
    cause = RuntimeError(
        "Job aborted due to stage failure: Task 3 failed\n"
        f"  xasink.errors.WriteError: login failed for app/{fakes.SECRET} at "
        "jdbc:postgresql://db/app?password=x\n"
        "  at org.apache.spark..."
    )
    error = phase_one_failed(plan, cause)
    assert isinstance(error, WriteError)
    assert str(error) == (
        f"Writing job {JOB} into events failed in Spark (RuntimeError: login failed for "
        "app/*** at jdbc:postgresql://db/app?password=***). Every branch of the job is rolled "
        "back: nothing was written. Fix the cause and run the write again."
    )
    on_driver = phase_one_failed(plan, ValueError(f"bad {fakes.SECRET}\nmore"), on_driver=True)
    assert str(on_driver).startswith(
        f"Writing job {JOB} into events failed by the driver (a small frame, one branch) "
        "(ValueError: bad ***). "
    )


#: A PythonException's text from a worker whose interpreter lacks xasink (PySpark 4.3).
WORKER_TRACEBACK = (
    "An exception was thrown from the Python worker:\n"
    "Traceback (most recent call last):\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/'
    'worker_util.py", line 75, in read_command\n'
    "    command = serializer.loads(file)\n"
    "              ^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/'
    'serializers.py", line 483, in loads\n'
    "    return cloudpickle.loads(obj, encoding=encoding)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "ModuleNotFoundError: No module named 'xasink'"
)


class PythonException(Exception):
    """As PySpark names the exception a Python worker's failure reaches the driver as."""


def test_phase_one_failure_quotes_the_workers_own_exception(fakes):
    """A PythonException's first line only says that a worker raised: the message quotes
    the worker's own exception line, and for a module the workers cannot import, says which
    interpreter they must run."""
    error = phase_one_failed(fakes.plan(), PythonException(WORKER_TRACEBACK))
    assert str(error) == (
        f"Writing job {JOB} into events failed in Spark (PythonException: "
        "ModuleNotFoundError: No module named 'xasink'). Every branch of the job is rolled "
        "back: nothing was written. Spark's Python workers cannot import xasink: the "
        "interpreter they run lacks it. Run them with one that has xasink: set "
        "PYSPARK_PYTHON to it before Spark starts (spark-submit: --conf "
        "spark.pyspark.python=...), or activate its virtual environment, whose python3 they "
        "then run; on a cluster, install xasink on every node. Then run the write again."
    )
    chained = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "w.py", line 1, in f\nKeyError: 1\n\nDuring handling of the above exception, '
        'another exception occurred:\n\nTraceback (most recent call last):\n  File "w.py", '
        "line 2, in g\nValueError: bad value\nsecond line of its message"
    )
    assert "(PythonException: ValueError: bad value). " in str(
        phase_one_failed(fakes.plan(), PythonException(chained))
    )
