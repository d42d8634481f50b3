"""df.write.format("xasink") and df.writeStream.format("xasink") (Python Data Source API):
the same exactly-once guarantees as write_xa, checked with psycopg/pymysql.

No registration call is made anywhere: Spark finds the source through `pyspark_xasink`.
"""

from __future__ import annotations

import shutil

import pytest
from support import (
    assert_clean,
    assert_exactly,
    contents,
    events_df,
    failing_once,
    file_stream,
    journaled,
    new_table,
    old_contents,
    run_script,
    seeded_table,
    sink_mark,
    stream_files,
    xasink_stream,
    xasink_writer,
)

#: The data source's own code, the same on both servers: make test runs each case on one
#: of them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server


def latest_jobs(db, table: str) -> list[str]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT state FROM xasink_jobs WHERE target_table = %s ORDER BY created_at",
            (journaled(db, table),),
        )
        return [str(row[0]) for row in cursor.fetchall()]


def test_append_through_the_format(spark, db):
    table = new_table(db)
    xasink_writer(events_df(spark, 3000, 3), db, table).save()
    assert_exactly(db, table, range(3000))
    assert latest_jobs(db, table) == ["committed"]


@pytest.mark.parametrize("bound", ["4194304", "0"], ids=["shipped", "branches"])
def test_append_and_overwrite_through_a_task_failure(spark, db, bound):
    """One task fails mid-partition in its first attempt and is retried: its first attempt
    shipped nothing (or its branch never prepares and is rolled back); the retry wins."""
    options = {"xasink.driverWriteBytes": bound}
    table = new_table(db)
    xasink_writer(failing_once(events_df(spark, 3000, 3), 1700), db, table, **options).save()
    assert_exactly(db, table, range(3000))
    table = seeded_table(db)
    rows = [(i, "new", i * 2.0) for i in range(50, 550)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    xasink_writer(failing_once(df, 300), db, table, "overwrite", **options).save()
    assert contents(db, table) == {i: ("new", i * 2.0) for i in range(50, 550)}
    assert_clean(db)


def test_overwrite_and_upsert_through_the_format(spark, db):
    table = seeded_table(db)
    rows = [(i, "new", i * 2.0) for i in range(50, 150)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    xasink_writer(df, db, table, "overwrite").save()
    assert contents(db, table) == {i: ("new", i * 2.0) for i in range(50, 150)}
    # Upsert without key routing: versions of one key land in different partitions, and
    # the apply keeps the highest `order` across all of them.
    changes = [(i, "v1", 1.0, 1) for i in range(100, 200)] + [
        (i, "v2", 2.0, 2) for i in range(100, 120)
    ]
    df = spark.createDataFrame(changes, "id long, name string, v double, seq int")
    xasink_writer(
        df.repartition(4), db, table, **{"xasink.mode": "upsert", "key": "id", "order": "seq"}
    ).save()
    expected = {i: ("new", i * 2.0) for i in range(50, 100)}
    expected |= {i: ("v1", 1.0) for i in range(100, 200)} | {
        i: ("v2", 2.0) for i in range(100, 120)
    }
    assert contents(db, table) == expected
    assert_clean(db)


@pytest.mark.parametrize("bound", ["4194304", "0"], ids=["shipped", "branches"])
def test_a_merge_through_the_format_keeps_its_deletes_order(spark, db, bound):
    """Deleted at seq 20, changed late at seq 15: the rows stay deleted; at 25 they come
    back (docs/modes.md), whether the batch's rows ship to commit() or prepare branches."""
    table = seeded_table(db, order="seq")
    merge = {"xasink.mode": "merge", "key": "id", "op": "op", "order": "seq"}
    merge["xasink.driverWriteBytes"] = bound
    schema = "id long, name string, v double, seq long, op string"

    def changes(rows: list[tuple[object, ...]]) -> None:
        df = spark.createDataFrame(rows, schema).repartition(2)
        xasink_writer(df, db, table, **merge).save()

    changes([(i, "", 0.0, 20, "d") for i in range(10)])
    changes([(i, "late", 1.0, 15, "u") for i in range(10)])
    expected = {i: row for i, row in old_contents().items() if i >= 10}
    assert contents(db, table) == expected
    changes([(i, "back", 2.0, 25, "u") for i in range(5)])
    assert contents(db, table) == expected | {i: ("back", 2.0) for i in range(5)}
    assert set(latest_jobs(db, table)) == {"committed"}
    assert_clean(db)


def test_duplicate_keys_in_different_partitions_are_refused_whole(spark, db):
    """Spark does not route keys to partitions for a data source: the apply transaction's
    check over the whole staging table must catch a key written by two partitions."""
    table = seeded_table(db)
    rows = [(i, "a", 1.0) for i in range(150, 160)] + [(155, "b", 2.0)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    with pytest.raises(Exception, match="duplicate key"):
        xasink_writer(df, db, table, **{"xasink.mode": "upsert", "key": "id"}).save()
    assert contents(db, table) == old_contents()
    assert latest_jobs(db, table)[-1] == "aborted"
    assert_clean(db)


@pytest.mark.parametrize("bound", ["4194304", "0"], ids=["shipped", "branches"])
def test_a_failing_partition_leaves_nothing(spark, db, bound):
    """A NULL into a NOT NULL column fails one task every attempt (or, shipped, commit()'s
    one transaction): Spark aborts the job, abort() rolls back every branch, and the table
    is unchanged."""
    table = new_table(db)
    from pyspark.sql import functions as F

    df = events_df(spark, 1000, 2).withColumn(
        "id", F.when(F.col("id") == 777, F.lit(None)).otherwise(F.col("id"))
    )
    with pytest.raises(Exception, match=r"(?i)null"):
        xasink_writer(df, db, table, **{"xasink.driverWriteBytes": bound}).save()
    assert_exactly(db, table, [])
    assert latest_jobs(db, table) == ["aborted"]


def test_options_are_checked_with_clear_messages(spark, db):
    df = events_df(spark, 10, 1)
    with pytest.raises(Exception, match=r"Unknown option.*xasink.modee"):
        xasink_writer(df, db, "t", **{"xasink.modee": "upsert"}).save()
    with pytest.raises(Exception, match="createTableColumnTypes names no column 'nope'"):
        xasink_writer(df, db, "t", createTableColumnTypes="nope INT").save()
    with pytest.raises(Exception, match=r"mode\('overwrite'\) and xasink.mode='upsert' disagree"):
        xasink_writer(df, db, "t", "overwrite", **{"xasink.mode": "upsert", "key": "id"}).save()
    with pytest.raises(Exception, match=r"password authentication failed|Access denied") as bad:
        xasink_writer(df, db, "t").option("password", db.password + "-wrong").save()
    assert db.password not in str(bad.value)


SECRETS_DRIVER = """
import sys
from support import events_df, failing_once, spark_builder
url, user, password, table, events = sys.argv[1:6]
spark = (
    spark_builder("secrets-check")
    .config("spark.eventLog.enabled", "true")
    .config("spark.eventLog.dir", events)
    .config("spark.eventLog.compress", "false")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("INFO")
def writer(df, secret):
    return (
        df.write.format("xasink").mode("append").option("url", url).option("dbtable", table)
        .option("user", user).option("password", secret)
    )
writer(failing_once(events_df(spark, 1000, 2), 700), password).save()
try:
    writer(events_df(spark, 10, 1), password + "-wrong").save()
except Exception as exc:
    print("REFUSED", exc)
spark.stop()
"""


@pytest.mark.ci_postgres
def test_the_password_is_in_no_plan_log_or_error(db, tmp_path):
    """A driver with Spark's event log on (every plan, every task failure) and INFO logs
    writes through a task failure, then with a wrong password: the password (and the wrong
    one) appears in none of it, while the plans are there."""
    table, events = new_table(db), tmp_path / "events"
    events.mkdir()
    done = run_script(SECRETS_DRIVER, db.jdbc_url, db.user, db.password, table, str(events))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "REFUSED" in done.stdout, done.stdout[-3000:]
    assert_exactly(db, table, range(1000))
    event_log = "".join(p.read_text() for p in events.rglob("*") if p.is_file())
    assert "planned task failure" in event_log and "AppendData xasink" in event_log
    for text in (done.stdout, done.stderr, event_log):
        assert db.password not in text


def test_more_partitions_than_num_partitions_is_refused(spark, db):
    """numPartitions bounds the prepared branches: partitions that ship their rows to
    commit() hold none, and pass; partitions that write branches are refused."""
    table = new_table(db)
    xasink_writer(events_df(spark, 100, 4), db, table, numPartitions="2").save()
    assert_exactly(db, table, range(100))
    table = new_table(db)
    options = {"numPartitions": "2", "xasink.driverWriteBytes": "0"}
    with pytest.raises(Exception, match=r"coalesce\(2\)"):
        xasink_writer(events_df(spark, 100, 4), db, table, **options).save()
    assert_exactly(db, table, [])


# -- streaming ---------------------------------------------------------------------------------
def format_stream(spark, db, table, source, checkpoint) -> None:
    """The file stream over `source` through format('xasink'), until its input is consumed."""
    query = (
        xasink_stream(file_stream(spark, source), db, table, checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def sink_of(db, table: str) -> str:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT DISTINCT sink_id FROM xasink_jobs WHERE target_table = %s "
            "AND sink_id IS NOT NULL",
            (journaled(db, table),),
        )
        sinks = [str(row[0]) for row in cursor.fetchall()]
    assert len(sinks) == 1, sinks
    return sinks[0]


def test_a_stream_through_the_format_is_exactly_once_across_a_replay(spark, db, tmp_path):
    """Three micro-batches; then Spark's record of the last batch is removed (as if the
    query died after the sink committed it, before Spark noted it), so the restarted query
    replays batch 2: the sink recognizes it and writes nothing twice."""
    table, source, checkpoint = new_table(db), tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, 3, 100)
    format_stream(spark, db, table, source, checkpoint)
    assert_exactly(db, table, range(300))
    sink = sink_of(db, table)
    assert sink.startswith("query-")
    assert sink_mark(db, sink)[0] == 2
    (checkpoint / "commits" / "2").unlink()
    shutil.rmtree(checkpoint / "commits" / ".2.crc", ignore_errors=True)
    (checkpoint / "commits" / ".2.crc").unlink(missing_ok=True)
    stream_files(source, 1, 100, start=3)
    format_stream(spark, db, table, source, checkpoint)
    assert_exactly(db, table, range(400))
    assert sink_mark(db, sink)[0] == 3
    assert set(latest_jobs(db, table)) <= {"committed", "aborted"}
    assert_clean(db)
