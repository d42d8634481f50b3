"""Structured Streaming exactly-once: the batch id is part of the commit decision.

Each test checks the exact id set (or contents) with psycopg/pymysql, the sink's mark as the
journal holds it, and that no prepared branch is left.
"""

from __future__ import annotations

import json
import uuid

import pytest
from support import (
    PARTITIONS,
    ROWS,
    DriverProcess,
    assert_exactly,
    cli,
    connection_args,
    contents,
    database_of,
    events_df,
    job_states,
    kill_driver_at,
    new_table,
    old_contents,
    run_script,
    seeded_table,
    sink_mark,
    stage_tables,
    start_foreach_stream,
    stream_files,
    xasink_cli,
)
from test_protocol import admin_sql

from xasink import WriterProperties, foreach_batch, write_xa
from xasink._testing.faults import Fault, injected
from xasink.errors import ConfigurationError, InputDataError

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server


def new_sink() -> str:
    return f"test-sink-{uuid.uuid4().hex[:8]}"


def assert_clean(db) -> None:
    assert db.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(db) == [], "a staging table was left behind"


@pytest.mark.mysql_ci
def test_a_replayed_batch_is_skipped(spark, db):
    table, sink = new_table(db), new_sink()
    first = write_xa(
        events_df(spark, 500, 2), table=table, sink_id=sink, batch_id=0, **connection_args(db)
    )
    again = write_xa(
        events_df(spark, 500, 2), table=table, sink_id=sink, batch_id=0, **connection_args(db)
    )
    assert (first.skipped, first.rows) == (False, 500)
    assert (again.skipped, again.rows, again.decided_by) == (True, 0, first.job_id)
    assert_exactly(db, table, range(500))
    assert sink_mark(db, sink) == (0, first.job_id)
    listed = json.loads(xasink_cli(db, "jobs", "--json", "--table", table).stdout)
    assert [(j["job_id"], j["sink_id"], j["batch_id"]) for j in listed] == [(first.job_id, sink, 0)]


def test_batches_of_two_sinks_are_independent(spark, db):
    table, one, two = new_table(db), new_sink(), new_sink()
    write_xa(events_df(spark, 50, 1), table=table, sink_id=one, batch_id=0, **connection_args(db))
    write_xa(
        events_df(spark, 50, 1).selectExpr("id + 50 AS id", "name", "v", "n", "ts"),
        table=table,
        sink_id=two,
        batch_id=0,
        **connection_args(db),
    )
    assert_exactly(db, table, range(100))


def test_sink_arguments_are_checked(spark, db):
    df = events_df(spark, 1, 1)
    with pytest.raises(ConfigurationError, match="go together"):
        write_xa(df, table="t", sink_id="s", **connection_args(db))
    with pytest.raises(ConfigurationError, match="batch_id must be an integer"):
        write_xa(df, table="t", sink_id="s", batch_id=-1, **connection_args(db))
    with pytest.raises(ConfigurationError, match="sink_id must be"):
        foreach_batch(db.jdbc_url, "t", sink_id="")
    with pytest.raises(ConfigurationError, match="sets batch_id itself"):
        foreach_batch(db.jdbc_url, "t", sink_id="s", batch_id=3)


def test_two_writers_of_one_batch_cannot_both_commit(spark, db):
    """A second query (or an old run still alive) writes the same batch: it is stalled just
    before its decision while the other commits the batch; its decision then fails with a
    clear error, and its branches are rolled back."""
    table, sink = new_table(db), new_sink()
    stalled = DriverProcess(db, table, "before_decision", action="pause", sink=f"{sink}:4")
    stalled.wait_for_point()
    winner = write_xa(
        events_df(spark, ROWS, PARTITIONS),
        table=table,
        sink_id=sink,
        batch_id=4,
        **connection_args(db),
    )
    assert not winner.skipped
    final = stalled.resume()
    assert final.startswith("ERROR SinkConflictError"), final
    assert f"Batch 4 of sink '{sink}' was committed by job {winner.job_id}" in final
    assert "two queries" in final
    assert_exactly(db, table, range(ROWS))
    assert sink_mark(db, sink) == (4, winner.job_id)
    states = sink_jobs(db, sink)
    assert states.pop(winner.job_id) == "committed"
    assert list(states.values()) == ["aborted"]


def sink_jobs(db, sink: str) -> dict[str, str]:
    """job id -> state of every job of one sink, read independently."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT job_id, state FROM xasink_jobs WHERE sink_id = %s", (sink,))
        return {str(j): str(s) for j, s in cursor.fetchall()}


@pytest.mark.ci_one_server
def test_a_decided_batch_is_finished_before_it_is_skipped(spark, db):
    """The driver dies in phase 2 of batch 2 (one branch committed): the replay of batch 2
    commits the rest of that job, writes nothing new, and reports the batch as done."""
    table, sink = new_table(db), new_sink()
    kill_driver_at(db, table, "after_first_commit", sink=f"{sink}:2")
    decided = sink_mark(db, sink)
    assert decided is not None and decided[0] == 2
    assert job_states(db)[decided[1]] == "committing"
    replay = write_xa(
        events_df(spark, ROWS, PARTITIONS),
        table=table,
        sink_id=sink,
        batch_id=2,
        **connection_args(db),
    )
    assert (replay.skipped, replay.decided_by) == (True, decided[1])
    assert job_states(db)[decided[1]] == "committed"
    assert_exactly(db, table, range(ROWS))


def test_a_batch_whose_apply_is_refused_is_written_on_replay(spark, db):
    """A decided staged batch whose apply the target refuses ends aborted: the sink's mark
    goes back with it, so the replay (after the cause is fixed) writes the batch instead of
    skipping it as done."""
    table, sink = seeded_table(db), new_sink()
    rows = [(i, "new", 1.0) for i in range(150, 160)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(2)
    write_xa(
        df, table=table, mode="upsert", key="id", sink_id=sink, batch_id=0, **connection_args(db)
    )
    admin_sql(db, f"ALTER TABLE {table} ADD CONSTRAINT no_big CHECK (v < 100)")
    bad = spark.createDataFrame(
        [(200, "bad", 500.0), (201, "ok", 1.0)], "id long, name string, v double"
    ).repartition(2)
    with pytest.raises(InputDataError, match="refused the rows"):
        write_xa(
            bad,
            table=table,
            mode="upsert",
            key="id",
            sink_id=sink,
            batch_id=1,
            **connection_args(db),
        )
    assert sink_mark(db, sink)[0] == 0, "the refused batch must not count as written"
    admin_sql(db, f"ALTER TABLE {table} DROP CONSTRAINT no_big")
    replay = write_xa(
        bad, table=table, mode="upsert", key="id", sink_id=sink, batch_id=1, **connection_args(db)
    )
    assert not replay.skipped
    expected = old_contents() | {i: ("new", 1.0) for i in range(150, 160)}
    expected |= {200: ("bad", 500.0), 201: ("ok", 1.0)}
    assert contents(db, table) == expected
    assert sink_mark(db, sink) == (1, replay.job_id)
    assert_clean(db)


# -- a real stream ---------------------------------------------------------------------------
def _run_stream(spark, source, checkpoint, write) -> None:
    start_foreach_stream(spark, source, checkpoint, write).awaitTermination()


def test_a_stream_replays_a_batch_that_failed_in_phase_2(spark, db, tmp_path):
    """foreachBatch over three files, one per micro-batch. The first run fails in phase 2
    of batch 0 (one branch committed, the query stops with the batch uncommitted in its
    checkpoint). The restarted query replays batch 0: the decided job is finished, nothing
    is written twice, and the next batches follow."""
    from pyspark.errors import StreamingQueryException

    table, sink = new_table(db), new_sink()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, batches=3, per_batch=200)
    options = {"writer_properties": WriterProperties(max_branches=2)}
    url = database_of(db)
    failing = foreach_batch(url, table, sink_id=sink, **options)
    with (
        pytest.raises(StreamingQueryException, match="injected fault at after_first_commit"),
        injected(Fault("after_first_commit", "raise")),
    ):
        _run_stream(spark.newSession(), source, checkpoint, failing)
    assert sink_mark(db, sink)[0] == 0
    _run_stream(
        spark.newSession(), source, checkpoint, foreach_batch(url, table, sink_id=sink, **options)
    )
    assert_exactly(db, table, range(600))
    assert sink_mark(db, sink)[0] == 2
    assert cli(db, "--grace", "0").returncode == 0


# -- change feeds in many spellings ----------------------------------------------------------
SPELLINGS = {
    "debezium": ("r", "u", "d", "c"),
    "upper-case": ("I", "U", "D", "I"),
    "delta-cdf": ("insert", "update_postimage", "delete", "insert"),
}


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_merge_knows_common_change_feed_spellings(spark, db, spelling):
    """Without op_values, merge reads Debezium, I/U/D and Delta change-data-feed ops, case-
    insensitively; Delta's update_preimage rows are skipped (same commit version as the
    postimage, so they would otherwise tie on `order`)."""
    snapshot, update, delete, insert = SPELLINGS[spelling]
    table = seeded_table(db)
    changes = [(i, "u", 7.0, update, 3) for i in range(10, 20)]
    changes += [(i, None, None, delete, 3) for i in range(0, 5)]
    changes += [(i, "c", 1.0, insert, 3) for i in range(300, 305)]
    changes += [(i, "r", 2.0, snapshot, 1) for i in range(400, 402)]
    if spelling == "delta-cdf":
        changes += [(i, "old", 0.0, "update_preimage", 3) for i in range(10, 20)]
    df = spark.createDataFrame(changes, "id long, name string, v double, op string, seq int")
    write_xa(
        df.repartition(3),
        table=table,
        mode="merge",
        key="id",
        op="op",
        order="seq",
        **connection_args(db),
    )
    expected = {i: row for i, row in old_contents().items() if i >= 5}
    expected |= {i: ("u", 7.0) for i in range(10, 20)}
    expected |= {i: ("c", 1.0) for i in range(300, 305)} | {i: ("r", 2.0) for i in range(400, 402)}
    assert contents(db, table) == expected
    assert_clean(db)


def test_an_unknown_op_value_is_named(spark, db):
    table = seeded_table(db)
    df = spark.createDataFrame(
        [(1, "x", 1.0, "upsert-ish")], "id long, name string, v double, op string"
    )
    with pytest.raises(InputDataError, match="upsert-ish"):
        write_xa(df, table=table, mode="merge", key="id", op="op", **connection_args(db))
    assert contents(db, table) == old_contents()
    assert_clean(db)


EXITING_DRIVER = """
import sys
from support import events_df, spark_builder
from xasink import Database, foreach_batch
url, user, password, table = sys.argv[1:5]
spark = spark_builder("xasink-exit").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
db = Database(url, user=user, password=password)
write = foreach_batch(db, table, sink_id="exit-" + table)
stream = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
query = stream.selectExpr("value AS id").writeStream.foreachBatch(write).start()
query.processAllAvailable()
query.stop()
spark.stop()
print("DONE", flush=True)
"""


@pytest.mark.ci_one_server
def test_a_streaming_driver_exits_when_it_is_done(db, tmp_path):
    """foreachBatch functions run on py4j's callback threads, which never end: the JVM that
    xasink starts in the driver must not keep the process from exiting."""
    table = new_table(db)
    done = run_script(EXITING_DRIVER, db.jdbc_url, db.user, db.password, table)
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    assert db.prepared_transactions() == []


EXIT_SCRIPT = """
import atexit, sys, threading, time
sys.modules["IPython"] = None  # as where IPython is missing: the write is then the first
                               # to import concurrent.futures, while the interpreter exits
import jpype
url, user, password, table, where, driver_write_bytes = sys.argv[1:7]

def check():  # runs after xasink's exit hook, where JPype would stop the JVM
    from xasink.protocol import sessions
    threads = [t.name for t in threading.enumerate() if t.name.startswith("xasink")]
    queue = jpype.JClass("org.jpype.ref.JPypeReferenceQueue").getInstance().isRunning()
    print("AT JVM STOP:", threads, len(sessions._idle), queue, flush=True)

atexit.register(check)
from pyspark.sql import functions as F
from support import events_df, spark_builder
from xasink import CommitProperties, Database, WriterProperties, write_xa
from xasink.runtime.shutdown import writes_in_progress
spark = spark_builder("xasink-exit").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
def slow(i):
    if i % 500 == 0:
        time.sleep(0.4)
    return i
df = events_df(spark, 2000, 2).withColumn("id", F.udf(slow, "long")(F.col("id")))
def write():
    write_xa(df, Database(url, user=user, password=password), table,
             writer_properties=WriterProperties(driver_write_bytes=int(driver_write_bytes)),
             commit_properties=CommitProperties(heartbeat_interval=0.2))
    print("WRITTEN", flush=True)
if where == "main":
    write()
else:  # the main thread ends while the write runs on another
    threading.Thread(target=write, daemon=True).start()
    while not writes_in_progress():
        time.sleep(0.05)
    print("EXITING", flush=True)
"""


@pytest.mark.ci_one_server
@pytest.mark.parametrize(
    ("where", "written_by"),
    [("other thread", "driver"), ("other thread", "tasks"), ("main thread", "driver")],
)
def test_a_driver_exits_cleanly_after_a_write(db, where, written_by):
    """The interpreter exits after a write, or while one runs on another thread (as a
    foreachBatch call does after `query.stop()`): the exit waits for the write, which
    commits, and ends with the script's own exit code. By the time JPype stops the JVM, no
    xasink thread or kept session is left and JPype's reference queue (the Java thread that
    calls into Python) is stopped, so nothing can enter the interpreter while it finalizes."""
    table = new_table(db)
    limit = "0" if written_by == "tasks" else str(64 << 20)
    done = run_script(EXIT_SCRIPT, db.jdbc_url, db.user, db.password, table, where, limit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WRITTEN" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "AT JVM STOP: [] 0 False" in done.stdout, done.stdout
    if where == "other thread":
        assert "write(s) in progress before exit" in done.stderr
    assert_exactly(db, table, range(2000))


FAULTHANDLER_SCRIPT = """
import faulthandler, sys, threading
faulthandler.enable()  # as pytest's faulthandler plugin does, before anything starts a JVM
import jpype
from support import events_df, spark_builder
from xasink import Database, WriterProperties, write_xa
url, user, password, table = sys.argv[1:5]
spark = spark_builder("xasink-exit-signals").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
write_xa(events_df(spark, 2000, 2), Database(url, user=user, password=password), table,
         writer_properties=WriterProperties(driver_write_bytes=64 << 20))  # the driver writes
spark.stop()
faulthandler.disable()  # as pytest does at unconfigure, and Python as it finalizes
print("WRITTEN", flush=True)
# Threads in compiled Java code while the JVM brings every thread to a safepoint, as the
# JVM's own threads and a session being closed may be while the interpreter exits.
# One thread calls Java: JPype's overload matching is not safe against two Python threads
# resolving the same overloaded method at once (it crashed in JPConversionObject::matches).
Arrays, System = jpype.JClass("java.util.Arrays"), jpype.JClass("java.lang.System")
data = jpype.JArray(jpype.JInt)(list(range(300_000, 0, -1)))
def sort():
    for _ in range(120):
        Arrays.sort(Arrays.copyOf(data, len(data)))
sorters = [threading.Thread(target=sort)]
for thread in sorters:
    thread.start()
while any(thread.is_alive() for thread in sorters):
    System.gc()
    sorters[0].join(0.05)
for thread in sorters:
    thread.join()
print("JAVA RAN", flush=True)
"""


def test_a_driver_exits_cleanly_after_faulthandler_was_disabled(postgres):
    """Python's faulthandler, enabled before the JVM started (pytest's plugin, `python -X
    faulthandler`), puts back the handlers that preceded it when disabled. The JVM keeps
    its own SIGSEGV handler through that, which its safepoints in compiled code need: the
    process goes on running Java and ends with its own exit code, the rows committed."""
    table = new_table(postgres)
    done = run_script(
        FAULTHANDLER_SCRIPT, postgres.jdbc_url, postgres.user, postgres.password, table
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    assert "WRITTEN" in done.stdout and "JAVA RAN" in done.stdout, done.stdout
    assert_exactly(postgres, table, range(2000))


REENABLED_SCRIPT = """
import faulthandler, signal, sys
from support import spec_for
from servers import DbServer
from xasink.protocol.connecting import open_journal
from xasink.runtime import signals
server = DbServer("postgres", sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4],
                  sys.argv[5], "", "")
open_journal(spec_for(server), None)[0].close()  # the JVM, as a worker's first task starts it
call, kept = signals._sigaction(), signals._handler(signals._jvm_handlers[signal.SIGSEGV])
faulthandler.disable()  # as PySpark's worker does after each task
faulthandler.enable()  # and before the next: now over the JVM's handlers
print("REPLACED", signals._handler(signals._current(call, signal.SIGSEGV)) != kept, flush=True)
open_journal(spec_for(server), None)[0].close()  # the next task's session
print("RESTORED", signals._handler(signals._current(call, signal.SIGSEGV)) == kept, flush=True)
"""


def test_a_faulthandler_enabled_over_the_jvm_gives_its_handlers_back_at_the_next_session(
    postgres,
):
    """A reused Python worker may enable faulthandler for each task (PySpark's
    spark.python.worker.faulthandler.enabled), over the handlers of the JVM an earlier task
    started, whose deliberate faults would then reach it: the next session's opening puts
    the JVM's handlers back on top."""
    server = postgres
    args = (server.host, str(server.port), server.user, server.password, server.database)
    done = run_script(REENABLED_SCRIPT, *args, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr[-3000:])
    assert "REPLACED True" in done.stdout and "RESTORED True" in done.stdout, done.stdout
