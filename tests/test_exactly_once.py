"""Exactly-once under task faults, on PostgreSQL and MariaDB, with real Spark.

Every test checks the exact id set with psycopg/pymysql and that no prepared branch is
left; Spark's status tracker proves the injected fault really failed a task.
"""

from __future__ import annotations

import uuid

import pytest
from support import assert_exactly, connection_args, events_df, job_states, new_table

from xasink import WriterProperties, write_xa
from xasink._testing.faults import Fault, injected
from xasink.runtime.jars import find_driver_jar

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server

ROWS, PARTITIONS = 4000, 4


def failed_tasks(spark, group: str) -> int:
    """Failed task attempts in the Spark jobs of `group`."""
    tracker = spark.sparkContext.statusTracker()
    total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job else []:
            stage = tracker.getStageInfo(stage_id)
            total += stage.numFailedTasks if stage else 0
    return total


def run(spark, db, table, faults=(), rows=ROWS, partitions=PARTITIONS):
    group = f"xasink-test-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "xasink test")
    with injected(*faults):
        result = write_xa(
            events_df(spark, rows, partitions),
            table=table,
            **connection_args(db),
            writer_properties=WriterProperties(max_branches=partitions),
        )
    return result, failed_tasks(spark, group)


@pytest.mark.mysql_ci
def test_plain_write_commits_every_row_once(spark, db):
    table = new_table(db)
    result, failures = run(spark, db, table)
    assert (result.rows, result.partitions, failures) == (ROWS, PARTITIONS, 0)
    assert_exactly(db, table, range(ROWS))
    assert job_states(db)[result.job_id] == "committed"


@pytest.mark.parametrize(
    ("fault", "swept"),
    [
        # The first attempt raises after it has written rows: it rolls itself back.
        pytest.param(Fault("after_rows", "raise", partition=1), 0, id="raise-after-rows"),
        # The Python worker dies mid-partition: the server drops the open branch.
        pytest.param(Fault("after_rows", "exit", partition=2), 0, id="worker-dies-mid-partition"),
        # The worker dies after PREPARE, before its message reaches the driver: a prepared
        # duplicate that only the driver's XA RECOVER sweep can find and roll back.
        pytest.param(
            Fault("after_prepare", "exit", partition=3), 1, id="worker-dies-after-prepare"
        ),
    ],
)
def test_task_fault_keeps_exactly_once(spark, db, fault, swept):
    table = new_table(db)
    result, failures = run(spark, db, table, faults=[fault])
    assert failures == 1, "the injected fault did not fail a task"
    assert result.rows == ROWS
    assert result.rolled_back_attempts == swept
    assert_exactly(db, table, range(ROWS))


def test_failed_job_leaves_nothing(spark, db):
    """Every attempt of one partition fails: the job fails and every branch is rolled back."""
    table = new_table(db)
    fault = Fault("after_rows", "raise", partition=0, attempt_number=None)
    with pytest.raises(Exception, match="injected fault"):
        run(spark, db, table, faults=[fault])
    assert_exactly(db, table, [])
    assert "aborted" in job_states(db).values()


@pytest.mark.parametrize("point", ["after_rows", "before_local_commit"])
def test_a_fault_in_the_drivers_own_write_leaves_nothing(spark, db, point):
    """A small frame's one branch is written by the driver itself in one local transaction,
    so a failure there is not retried by Spark: the transaction is rolled back before its
    commit, no row of the job exists (not even its job row), and the error says where it
    failed and that nothing was written."""
    from xasink.errors import WriteError

    table = new_table(db)
    with (
        pytest.raises(WriteError, match=r"failed by the driver .*nothing was written") as error,
        injected(Fault(point, "raise", attempt_number=None)),
    ):
        write_xa(events_df(spark, 500, 2), table=table, **connection_args(db))
    assert f"injected fault at {point}" in str(error.value)
    assert_exactly(db, table, [])
    assert error.value.job_id and error.value.job_id not in job_states(db)


def test_empty_partitions_open_no_branch(spark, db):
    table = new_table(db)
    df = events_df(spark, 60, 6).where("id < 10")  # only the first of 6 partitions has rows
    result = write_xa(
        df,
        table=table,
        **connection_args(db),
        writer_properties=WriterProperties(max_branches=None),
    )
    assert (result.rows, result.partitions, result.empty_partitions) == (10, 1, 5)
    assert_exactly(db, table, range(10))


def test_generic_driver_path(spark, postgres):
    """An XADataSource named by class and its jar, with the generic dialect, on a real server."""
    table = new_table(postgres)
    result = write_xa(
        events_df(spark, 1000, 2),
        table=table,
        **connection_args(
            postgres,
            jars=[find_driver_jar("postgres")],
            dialect="generic",
            xa_datasource="org.postgresql.xa.PGXADataSource",
        ),
    )
    assert result.rows == 1000
    assert_exactly(postgres, table, range(1000))


@pytest.mark.parametrize(("max_branches", "branches"), [("auto", 4), (None, 40), (7, 7)])
def test_many_partitions_are_coalesced_into_few_branches(spark, postgres, max_branches, branches):
    """local[2]: "auto" allows 2 x 2 branches; None keeps one branch per partition."""
    table = new_table(postgres)
    result = write_xa(
        events_df(spark, 400, 40),
        table=table,
        **connection_args(postgres),
        writer_properties=WriterProperties(max_branches=max_branches, driver_write_bytes=0),
    )
    assert result.partitions + result.empty_partitions == branches
    assert_exactly(postgres, table, range(400))


def test_the_callers_spark_job_description_is_restored(spark, postgres):
    spark.sparkContext.setJobDescription("nightly load")
    try:
        write_xa(events_df(spark, 10, 1), table=new_table(postgres), **connection_args(postgres))
        assert spark.sparkContext.getLocalProperty("spark.job.description") == "nightly load"
    finally:
        spark.sparkContext.setJobDescription(None)
