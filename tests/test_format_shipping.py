"""format("xasink")'s small partitions: each task ships its rows to commit() in its message,
and commit() writes them all in one local transaction with the job's bookkeeping; a batch
with a partition above `xasink.driverWriteBytes` commits in two phases, its shipped rows
written by the driver as one more branch. Rows and journal read with psycopg/pymysql.

The journal tells the paths apart: a job committed in one transaction has one winner row
(partition 0, every row); a two-phase job has one per branch.
"""

from __future__ import annotations

import json

import pytest
from support import (
    assert_clean,
    assert_exactly,
    cli,
    contents,
    events_df,
    journaled,
    new_table,
    old_contents,
    run_script,
    seeded_table,
    sink_mark,
    xasink_writer,
)

#: A bound between the small partitions' bytes (a few rows) and the large one's.
BOUND = str(64 << 10)


def jobs_of(db, table: str) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """(job id, state, its winner rows as (partition, rows)), oldest first."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT job_id, state FROM xasink_jobs WHERE target_table = %s ORDER BY created_at",
            (journaled(db, table),),
        )
        jobs = [(str(j), str(s)) for j, s in cursor.fetchall()]
        found = []
        for job_id, state in jobs:
            cursor.execute(
                "SELECT partition_id, row_count FROM xasink_winners WHERE job_id = %s "
                "ORDER BY partition_id",
                (job_id,),
            )
            found.append((job_id, state, [(int(p), int(r)) for p, r in cursor.fetchall()]))
    return found


def mixed_df(spark, small_rows: int, large_rows: int):
    """Three partitions: two of `small_rows` ids each, then one of `large_rows`; ids from 0."""
    small = events_df(spark, 2 * small_rows, 2)
    large = events_df(spark, large_rows, 1)
    from pyspark.sql import functions as F

    return small.unionByName(large.withColumn("id", F.col("id") + 2 * small_rows))


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_small_partitions_commit_in_one_transaction(spark, db):
    table = new_table(db)
    xasink_writer(events_df(spark, 3000, 3), db, table).save()
    assert_exactly(db, table, range(3000))
    [(_, state, winners)] = jobs_of(db, table)
    assert (state, winners) == ("committed", [(0, 3000)])
    # A staged mode: the shipped rows go through the job's staging table, applied in the
    # same transaction, which is then dropped.
    table = seeded_table(db)
    rows = [(i, "new", i * 2.0) for i in range(50, 550)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    xasink_writer(df, db, table, "overwrite").save()
    assert contents(db, table) == {i: ("new", i * 2.0) for i in range(50, 550)}
    [(_, state, winners)] = jobs_of(db, table)
    assert (state, winners) == ("committed", [(0, 500)])
    assert_clean(db)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_partition_above_the_bound_makes_the_batch_two_phase(spark, db):
    table = new_table(db)
    options = {"xasink.driverWriteBytes": BOUND}
    xasink_writer(mixed_df(spark, 5, 20_000), db, table, **options).save()
    assert_exactly(db, table, range(20_010))
    [(_, state, winners)] = jobs_of(db, table)
    # The large partition's branch (partition 2), and the driver's branch of the shipped
    # rows of partitions 0 and 1 (as partition 0's attempt).
    assert state == "committed"
    assert winners == [(0, 10), (2, 20_000)]
    assert_clean(db)


@pytest.mark.ci_one_server
def test_a_merge_of_mixed_partitions_applies_once(spark, db):
    """A staged mode through the mixed path: the driver's branch loads the job's staging
    table beside the tasks' branches, and one apply takes them all."""
    table = seeded_table(db)
    small = [(i, "s", 1.0) for i in range(0, 10)]
    large = [(i, "l", 2.0) for i in range(1000, 6000)]
    df = spark.createDataFrame(small, "id long, name string, v double").repartition(2)
    df = df.union(spark.createDataFrame(large, "id long, name string, v double").coalesce(1))
    options = {"xasink.driverWriteBytes": BOUND, "xasink.mode": "upsert", "key": "id"}
    xasink_writer(df, db, table, **options).save()
    expected = old_contents() | {i: ("s", 1.0) for i in range(10)}
    assert contents(db, table) == expected | {i: ("l", 2.0) for i in range(1000, 6000)}
    [(_, state, winners)] = jobs_of(db, table)
    assert state == "committed" and len(winners) == 2
    assert_clean(db)


#: A stream's batch through the data source's own steps, in a driver process of its own:
#: the writer pickled (which mints the job), three shipped partitions, then commit(), with
#: a fault armed before the one transaction's COMMIT.
BATCH_SCRIPT = """
import json, pickle, sys, time
from types import SimpleNamespace
import pyarrow as pa
import xasink
from xasink.spark import shipping, tasks
from pyspark.sql.types import LongType, StructField, StructType
from xasink._testing.faults import Fault, injected
from xasink.executor.branch import write_rows
from xasink.spark.datasource import BranchMessage, XasinkStreamWriter
from xasink.spark.options import parse
from xasink.spark.shipping import ship

options, batch_id, fault = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
schema = StructType([StructField("id", LongType())])
faults = [Fault("before_local_commit", fault)] if fault in ("exit", "raise") else []
with injected(*faults):
    fmt = parse(options, schema.names, overwrite=False, streaming=True)
    task_side = pickle.loads(pickle.dumps(XasinkStreamWriter(fmt, schema)))
    minted = task_side.minted
    def lose():  # partition 0's first attempt (task attempt id 0) outgrew the bound and
        # prepared its branch, then lost to a copy that shipped (keyed: the same keys)
        first = 0 if fault == "keyed loser" else 1000
        ids = pa.array(range(first, first + 100), pa.int64())
        write_rows(minted.plan, iter([pa.RecordBatch.from_arrays([ids], names=["id"])]), 0, 0, 0)
    if fault == "keyed loser":
        lose()
    if fault == "late loser":  # it prepares once commit() has rolled back what was prepared,
        # as an attempt still running then would
        one_phase = shipping.commit_one_phase
        def late(*args, **kwargs):
            lose()
            return one_phase(*args, **kwargs)
        shipping.commit_one_phase = late
    messages = []
    if fault == "quiet":  # the tasks' own steps, one after another: partition 0 outgrows
        # the bound and prepares a branch (its task beats), then 15 instant partitions ship,
        # one after another, for twice a task's lease
        lease = float(options["xasink.leaseSeconds"])
        for part in range(16):
            time.sleep(0 if part == 0 else 2 * lease / 15 + 0.01)  # > an interval
            task = SimpleNamespace(
                partitionId=lambda part=part: part,
                attemptNumber=lambda: 0,
                taskAttemptId=lambda part=part: 1000 + part,
            )
            shipping.task_context = tasks.task_context = lambda task=task: task
            ids = pa.array(range(part * 100, part * 100 + (100 if part == 0 else 10)))
            rows = pa.RecordBatch.from_arrays([ids], names=["id"])
            shipment = shipping.ship_or_write(minted.plan, iter([rows]), 400, lambda: None)
            assert (shipment.rows is None) == (part == 0)
            messages.append(BranchMessage(shipment, minted.plan, str(batch_id), None))
        login = xasink.Database(options["url"], options["user"], options["password"])
        job = minted.plan.job_id
        print("recovery", xasink.recover(login, job=job, grace=0.5), flush=True)
    else:
        for part in range(3):
            ids = pa.array(range(part * 100, part * 100 + 100), pa.int64())
            rows = pa.RecordBatch.from_arrays([ids], names=["id"])
            shipment = ship([rows], part, 1000 + part)
            messages.append(BranchMessage(shipment, minted.plan, str(batch_id), None))
    XasinkStreamWriter(fmt, schema).commit(pickle.loads(pickle.dumps(messages)), batch_id)
print("job", minted.plan.job_id)
"""


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_run_of_quick_shipping_tasks_keeps_a_mixed_batchs_job_alive(db):
    """A partition above the bound prepares its branch, its task beating with a task's
    lease; then instant partitions ship, one after another, for twice that lease. A
    recovery run right after must find the job alive (the tasks of a job older than an
    interval beat at their start, and an instant one waits for that beat), and commit()
    writes every row."""
    table = id_table(db)
    leases = {"xasink.leaseSeconds": "2", "xasink.heartbeatInterval": "0.2"}
    options = batch_options(db, table, "quiet", **leases)
    run = run_script(BATCH_SCRIPT, json.dumps(options), "0", "quiet")
    assert run.returncode == 0, run.stderr[-3000:]
    quick = [i for p in range(1, 16) for i in range(p * 100, p * 100 + 10)]
    assert_exactly(db, table, [*range(100), *quick])
    [(_, state, winners)] = jobs_of(db, table)
    assert state == "committed" and len(winners) == 2
    assert_clean(db)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_losing_attempts_branch_is_rolled_back_before_the_shipped_batch_commits(db, mode):
    """A speculative copy of partition 0 outgrew the bound and prepared a branch holding
    the keys of partition 0's rows (append: in the table; upsert: in the job's staging
    table), then lost to the first attempt, which shipped them (no retry). Every branch of
    an all-shipped batch is a loser, so commit() rolls them back before its one
    transaction, which would otherwise wait on their locks: the batch commits once, with
    nothing left prepared or staged and no recovery run."""
    table = id_table(db, key=True)
    staged = {"xasink.mode": "upsert", "key": "id"} if mode == "upsert" else {}
    options = batch_options(db, table, "keyed", **{"xasink.lockWaitTimeout": "3"}, **staged)
    run = run_script(BATCH_SCRIPT, json.dumps(options), "0", "keyed loser")
    assert run.returncode == 0, run.stderr[-3000:]
    assert db.prepared_transactions() == []
    assert_exactly(db, table, range(300))
    [(_, state, winners)] = jobs_of(db, table)
    assert (state, winners) == ("committed", [(0, 300)])
    assert_clean(db)


def batch_options(db, table: str, sink: str, **more: str) -> dict[str, str]:
    """format's options for BATCH_SCRIPT: `table` on `db`, a sink named after both."""
    login = {"url": db.jdbc_url, "user": db.user, "password": db.password}
    return {**login, "dbtable": table, "xasink.sinkId": f"{sink}-{table}", **more}


def id_table(db, key: bool = False) -> str:
    table = new_table(db, "ids")
    with db.connect() as conn:
        conn.cursor().execute(f"DROP TABLE {table}")
        primary = " PRIMARY KEY" if key else ""
        conn.cursor().execute(f"CREATE TABLE {table} (id BIGINT NOT NULL{primary})")
    return table


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_commit_that_dies_before_its_commit_is_written_once_by_the_replay(db):
    """commit() dies before its one transaction's COMMIT: nothing is in the table, the job
    stays running until recovery aborts it, and Spark's replay of the batch (a new job)
    writes every row once; a replay after that is skipped."""
    table = id_table(db)
    short_leases = {
        "xasink.startTimeout": "1",
        "xasink.leaseSeconds": "1",
        "xasink.heartbeatInterval": "0.2",
    }
    options = batch_options(db, table, "ship", **short_leases)
    died = run_script(BATCH_SCRIPT, json.dumps(options), "0", "exit")
    assert died.returncode == 17, died.stderr[-3000:]
    assert_exactly(db, table, [])
    [(first, state, _)] = jobs_of(db, table)
    assert state == "running"
    replay = run_script(BATCH_SCRIPT, json.dumps(options), "0", "none")
    assert replay.returncode == 0, replay.stderr[-3000:]
    assert_exactly(db, table, range(300))
    again = run_script(BATCH_SCRIPT, json.dumps(options), "0", "none")
    assert again.returncode == 0, again.stderr[-3000:]
    assert_exactly(db, table, range(300))
    recovered = cli(db, "--grace", "0")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    states = {job: state for job, state, _ in jobs_of(db, table)}
    assert states[first] == "aborted"
    assert sorted(states.values()) == ["aborted", "aborted", "committed"]
    assert sink_mark(db, options["xasink.sinkId"])[0] == 0
    assert_clean(db)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_losing_attempts_branch_is_never_taken_for_the_shipped_winner(db):
    """A losing attempt of partition 0 prepared a branch (it outgrew the bound, then lost
    to a copy that shipped its rows) late, once commit() had rolled back what was
    prepared. The batch commits the shipped rows in one transaction; recovery must roll
    the loser back, never commit it as the winner: the shipped batch's winner row names no
    task's attempt."""
    table = id_table(db)
    options = batch_options(db, table, "loser")
    run = run_script(BATCH_SCRIPT, json.dumps(options), "0", "late loser")
    assert run.returncode == 0, run.stderr[-3000:]
    assert db.prepared_transactions() != []  # the loser, left to recovery
    recovered = cli(db, "--grace", "0")
    assert recovered.returncode == 0, recovered.stderr[-3000:]
    assert_exactly(db, table, range(300))
    [(_, state, winners)] = jobs_of(db, table)
    assert (state, winners) == ("committed", [(0, 300)])
    assert_clean(db)
