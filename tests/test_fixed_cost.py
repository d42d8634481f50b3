"""What write_xa keeps per process to cut its fixed cost per call, against real servers:
the check cache (xasink.driver.check_cache: a failed call forgets it, a changed table is described
again after a failure or once its entry expired) and the shared heartbeat thread. Contents
are read with psycopg / pymysql."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
from pyspark.sql import functions as F
from support import (
    assert_exactly,
    connection_args,
    events_df,
    failing_once,
    journal_session,
    new_table,
    run_sql,
    xasink_writer,
)

import xasink.spark.datasource
import xasink.spark.transaction
from xasink import CommitProperties, SchemaMismatchError, WriteError, WriterProperties, write_xa
from xasink.driver.check_cache import CheckCache
from xasink.protocol.heartbeat import Heartbeat


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """write_xa's cache on a clock the test moves."""
    clock = Clock()
    monkeypatch.setattr(xasink.spark.transaction, "CHECKS", CheckCache(ttl=60, clock=clock))
    return clock


def drop_column(db, table: str, column: str) -> None:
    with db.admin_connect() as conn:
        conn.cursor().execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        if db.kind != "postgres":
            conn.commit()


def test_a_failed_call_forgets_and_the_next_describes_the_table_again(spark, db, clock):
    table = new_table(db)
    df = events_df(spark, 100, 2)
    write_xa(df, table=table, **connection_args(db))
    assert len(xasink.spark.transaction.CHECKS) == 4  # server, table, its identity, journal
    drop_column(db, table, "n")
    # Still cached: the stale description passes preflight, and the server refuses the rows.
    with pytest.raises(WriteError):
        write_xa(
            df.withColumn("id", df.id + 100),
            table=table,
            **connection_args(db),
        )
    assert len(xasink.spark.transaction.CHECKS) == 0
    assert_exactly(db, table, range(100))
    # Described again: preflight names the column, nothing is written.
    with pytest.raises(SchemaMismatchError, match="'n'"):
        write_xa(df, table=table, **connection_args(db))
    assert_exactly(db, table, range(100))


def test_a_changed_table_is_described_again_once_its_entry_expired(spark, db, clock):
    table = new_table(db)
    df = events_df(spark, 50, 1)
    write_xa(df, table=table, **connection_args(db))
    drop_column(db, table, "v")
    clock.now += 61
    with pytest.raises(SchemaMismatchError, match="'v'"):
        write_xa(df.withColumn("id", df.id + 50), table=table, **connection_args(db))
    assert_exactly(db, table, range(50))
    write_xa(df.drop("v").withColumn("id", df.id + 50), table=table, **connection_args(db))
    assert_exactly(db, table, range(100))


def test_a_column_added_a_moment_ago_is_written_at_once(spark, db, clock, monkeypatch):
    """A remembered description may let a write on, never refuse it: a refusal rests on the
    table read again (write_xa, then format("xasink")'s planner, which keeps the same cache)."""
    monkeypatch.setattr(
        xasink.spark.datasource, "CHECKS", xasink.spark.transaction.CHECKS, raising=True
    )
    table = new_table(db)
    df = events_df(spark, 50, 1)
    write_xa(df, table=table, **connection_args(db))
    run_sql(db, f"ALTER TABLE {table} ADD COLUMN extra INT")
    write_xa(
        df.withColumn("id", df.id + 50).withColumn("extra", F.lit(7)),
        table=table,
        **connection_args(db),
    )
    run_sql(db, f"ALTER TABLE {table} ADD COLUMN more INT")
    later = df.withColumn("id", df.id + 100).withColumn("extra", F.lit(7))
    xasink_writer(later.withColumn("more", F.lit(8)), db, table).save()
    assert_exactly(db, table, range(150))
    counts = run_sql(db, f"SELECT COUNT(extra), COUNT(more) FROM {table}")
    assert counts == [(100, 50)]


def beats(db, job_id: str) -> int:
    """The job row's count of heartbeats, read by the test's own driver."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT beats FROM xasink_jobs WHERE job_id = '{job_id}'")
        return int(cursor.fetchone()[0])


@contextlib.contextmanager
def running_jobs(db, count: int):
    """`count` running jobs' rows in a fresh journal: (spec, journal, job ids); aborted after."""
    table = new_table(db)
    with journal_session(db) as (spec, session, journal):
        journal = journal.ensure(session.connection, spec)
        jobs = [uuid.uuid4().hex for _ in range(count)]
        for job_id in jobs:
            journal.begin_job(session.connection, job_id, table, None, 3.0)
        yield spec, journal, jobs
        for job_id in jobs:
            assert journal.abort(session.connection, job_id)


def test_one_heartbeat_thread_beats_every_live_job_and_none_after_stop(db):
    with running_jobs(db, 2) as (spec, journal, jobs):
        hearts = [Heartbeat(journal, spec, job_id, 0.2).start() for job_id in jobs]
        time.sleep(1.0)
        threads = [t for t in threading.enumerate() if t.name == "xasink-heartbeat"]
        assert len(threads) == 1
        for heart in hearts:
            heart.stop()
        stopped = [beats(db, job_id) for job_id in jobs]
        assert all(n >= 2 for n in stopped), stopped
        time.sleep(0.6)
        assert [beats(db, job_id) for job_id in jobs] == stopped


def test_a_flushed_stop_sends_the_beat_that_was_due_first(db):
    """An instant task of an older job (format's shipping tasks) beats at its start, and
    its stop waits for that one beat: it must reach the row however quick the task is."""
    with running_jobs(db, 10) as (spec, journal, jobs):
        for job_id in jobs:
            Heartbeat(journal, spec, job_id, 5.0, beat_now=True).start().stop(flushed=True)
        assert [beats(db, job_id) for job_id in jobs] == [1] * len(jobs)


#: Branches of a 3-partition append into a keyless table, written by tasks (MariaDB loads
#: one stream into a table without a key: see the test after these).
TASK_BRANCHES = {"postgres": 3, "mysql": 1}


def test_a_small_frame_is_written_by_the_driver_in_one_branch(spark, db):
    """Spark estimates the frame below driver_write_bytes: the driver collects it and writes
    one branch itself (no worker reports a peak RSS); with 0, each partition is a task's
    branch. A task that fails while the rows are collected is retried by Spark before any
    branch opens."""
    table = new_table(db)
    small = failing_once(events_df(spark, 3000, 3), at_id=1500)
    result = write_xa(small, table=table, **connection_args(db))
    assert (result.partitions, result.worker_peak_rss_kb, result.rows) == (1, 0, 3000)
    assert result.rolled_back_attempts == 0
    tasks = write_xa(
        events_df(spark, 3000, 3).withColumn("id", F.col("id") + 3000),
        table=table,
        **connection_args(db),
        writer_properties=WriterProperties(driver_write_bytes=0),
    )
    assert tasks.partitions == TASK_BRANCHES[db.dialect] and tasks.worker_peak_rss_kb > 0
    assert_exactly(db, table, range(6000))
    assert db.prepared_transactions() == []


def test_a_frame_estimated_above_the_limit_is_written_by_tasks(spark, db):
    table = new_table(db)
    result = write_xa(
        events_df(spark, 3000, 3),
        table=table,
        **connection_args(db),
        writer_properties=WriterProperties(driver_write_bytes=1),
    )
    assert result.partitions == TASK_BRANCHES[db.dialect] and result.worker_peak_rss_kb > 0
    assert_exactly(db, table, range(3000))
    assert db.prepared_transactions() == []


@pytest.mark.mariadb11_ci
def test_mariadb_appends_to_a_keyless_table_through_one_branch(spark, db):
    """Concurrent LOAD DATA streams into an InnoDB table without a unique key contend, so
    write_xa appends to one through a single branch; a keyed table (and any PostgreSQL
    table) gets a branch per partition. An explicit max_branches is kept."""
    keyless, keyed = new_table(db), new_table(db)
    with db.admin_connect() as conn:
        conn.cursor().execute(f"ALTER TABLE {keyed} ADD PRIMARY KEY (id)")
    tasks = {"writer_properties": WriterProperties(driver_write_bytes=0), **connection_args(db)}
    counts = [
        write_xa(events_df(spark, 3000, 3), table=table, **tasks).partitions
        for table in (keyless, keyed)
    ]
    assert counts == ([1, 3] if db.kind != "postgres" else [3, 3])
    explicit = write_xa(
        events_df(spark, 3000, 3).withColumn("id", F.col("id") + 3000),
        table=keyless,
        writer_properties=WriterProperties(driver_write_bytes=0, max_branches=3),
        **connection_args(db),
    )
    assert explicit.partitions == 3
    assert_exactly(db, keyless, range(6000))
    assert_exactly(db, keyed, range(3000))
    assert db.prepared_transactions() == []


def _ask_kept(sql: str) -> dict[str, str]:
    """`sql`'s one value on every session this process keeps, by the session's role."""
    from xasink.protocol import sessions

    answers = {}
    for (_, role), (session, _) in sessions._idle.items():
        statement = session.connection.createStatement()
        result = statement.executeQuery(sql)
        result.next()
        answers[role] = str(result.getString(1))
        statement.close()
    return answers


def _kill_kept_sessions(db) -> set[str]:
    """The server ends the connection of every session this process keeps (as a restart
    or an idle timeout would); returns the kept sessions' roles."""
    from test_protocol import admin_sql

    ask = "SELECT pg_backend_pid()" if db.kind == "postgres" else "SELECT CONNECTION_ID()"
    kill = "SELECT pg_terminate_backend({})" if db.kind == "postgres" else "KILL {}"
    server_ids = _ask_kept(ask)
    for server_id in server_ids.values():
        admin_sql(db, kill.format(int(server_id)))
    return set(server_ids)


def test_sessions_kept_between_calls_are_replaced_once_the_server_ended_them(spark, db):
    """A call keeps its journal and phase-two sessions, and the driver's one-branch writer
    its own, for the next call; a kept session's first statement is its check. Here the
    server ends each kept session's connection between calls: the next calls open new
    sessions and write every row once, without an error."""
    from xasink.protocol import sessions

    sessions.close_all()
    table = new_table(db)
    with db.admin_connect() as conn:  # a keyed table: tasks write a branch each (MariaDB too)
        conn.cursor().execute(f"ALTER TABLE {table} ADD PRIMARY KEY (id)")
    tasks = {"writer_properties": WriterProperties(driver_write_bytes=0), **connection_args(db)}

    def both(start: int) -> None:
        frame = events_df(spark, 3000, 3).withColumn("id", F.col("id") + start)
        assert write_xa(frame, table=table, **tasks).partitions == 3
        small = events_df(spark, 100, 1).withColumn("id", F.col("id") + start + 3000)
        assert write_xa(small, table=table, **connection_args(db)).partitions == 1

    both(0)
    assert _kill_kept_sessions(db) == {"journal", "branch ops", "branch"}
    before = {role: session for (_, role), (session, _) in sessions._idle.items()}
    both(10_000)
    assert_exactly(db, table, [*range(3100), *range(10_000, 13_100)])
    after = {role: session for (_, role), (session, _) in sessions._idle.items()}
    assert set(after) == set(before) and all(after[r] is not before[r] for r in after)


def _kept_lock_bounds(db) -> dict[str, str]:
    """The lock bound each session this process keeps holds on the server, by role."""
    return _ask_kept(
        "SHOW lock_timeout"
        if db.kind == "postgres"
        else "SELECT CONCAT(@@SESSION.innodb_lock_wait_timeout, '/', @@SESSION.lock_wait_timeout)"
    )


def test_kept_sessions_keep_the_journals_lock_bound_and_a_branch_waits_as_the_server_does(
    spark, db
):
    """A call bounds every lock wait of its journal session and of its one local transaction
    by `lock_wait_timeout`. The kept sessions keep that bound, so the next call sends it no
    more; a call with another bound sets its own; and an XA branch the driver writes on the
    kept writer session waits as long as the server lets it again."""
    from xasink import transaction
    from xasink.protocol import sessions

    sessions.close_all()
    table = new_table(db)
    args = connection_args(db)
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SHOW lock_timeout"
            if db.kind == "postgres"
            else "SELECT CONCAT(@@GLOBAL.innodb_lock_wait_timeout, '/', @@GLOBAL.lock_wait_timeout)"
        )
        server_default = str(cursor.fetchone()[0])

    def bound(seconds: int) -> str:
        return f"{seconds}s" if db.kind == "postgres" else f"{seconds}/{seconds}"

    def small(start: int):
        return events_df(spark, 100, 1).withColumn("id", F.col("id") + start)

    write_xa(small(0), table=table, **args, commit_properties=CommitProperties(lock_wait_timeout=7))
    assert _kept_lock_bounds(db) == {"journal": bound(7), "branch": bound(7)}
    write_xa(
        small(100), table=table, **args, commit_properties=CommitProperties(lock_wait_timeout=7)
    )
    assert _kept_lock_bounds(db) == {"journal": bound(7), "branch": bound(7)}
    write_xa(
        small(200), table=table, **args, commit_properties=CommitProperties(lock_wait_timeout=9)
    )
    assert _kept_lock_bounds(db) == {"journal": bound(9), "branch": bound(9)}
    # The small write is held, then the large one makes it a branch the driver prepares on
    # the kept writer session (xasink.spark.small_writes.promote).
    other = new_table(db)
    with transaction(**args, commit_properties=CommitProperties(lock_wait_timeout=9)) as tx:
        tx.write(small(300), table)
        tx.write(
            events_df(spark, 3000, 3),
            other,
            writer_properties=WriterProperties(driver_write_bytes=0),
        )
    kept = _kept_lock_bounds(db)
    assert kept["journal"] == bound(9)
    # MariaDB closes a session once its branch is prepared; PostgreSQL's is kept.
    assert kept.get("branch", server_default) == server_default
    assert_exactly(db, table, range(400))
    assert_exactly(db, other, range(3000))
