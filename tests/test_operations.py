"""Exactly once under ordinary operations: a column migrated between two writes, two
processes finishing one job, a slow upstream stage, every task of a micro-batch failing, a
micro-batch with more partitions than prepared slots, a server that stops answering, a
journal that lost part of itself. Each checked on real servers with psycopg/pymysql.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
import uuid

import pytest
from support import (
    DriverProcess,
    assert_exactly,
    cli,
    connection_args,
    events_df,
    in_background,
    job_states,
    journaled,
    new_table,
    spec_for,
    xasink_prepared,
    xasink_writer,
)
from test_format import latest_jobs
from test_protocol import admin_sql, q

from xasink import CommitProperties, WriterProperties, write_xa
from xasink.driver.check_cache import CHECKS
from xasink.errors import JournalError
from xasink.protocol.connecting import open_journal
from xasink.protocol.heartbeat import close_idle_sessions
from xasink.protocol.journal import Journal


def _values(db, table: str) -> dict[int, float]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id, amount FROM {q(db, table)}")
        return {int(i): float(a) for i, a in cursor.fetchall()}


# -- a column's type changes between two writes ----------------------------------------------
def test_a_column_migrated_between_writes_keeps_its_values(spark, db):
    """Two appends of a bigint column within the description cache's lifetime, with the
    column changed to double precision between them: every value is stored as written. On
    PostgreSQL the second write's branch reads the types again under its table lock and
    loads as CSV (binary COPY would store 7001 as 3.46e-320); elsewhere the server types
    the load."""
    table = f"mig_{uuid.uuid4().hex[:10]}"
    with db.connect() as conn:
        conn.cursor().execute(f"CREATE TABLE {q(db, table)} (id BIGINT NOT NULL, amount BIGINT)")
    frame = "id long, amount long"
    first = spark.createDataFrame([(i, 7000 + i) for i in range(10)], frame)
    write_xa(first, table=table, **connection_args(db))
    change = (
        "ALTER COLUMN amount TYPE double precision"
        if db.kind == "postgres"
        else ("MODIFY amount DOUBLE")
    )
    admin_sql(db, f"ALTER TABLE {q(db, table)} {change}")
    second = spark.createDataFrame([(i, 7000 + i) for i in range(10, 20)], frame)
    write_xa(second, table=table, **connection_args(db))
    assert _values(db, table) == {i: float(7000 + i) for i in range(20)}
    assert db.prepared_transactions() == []


# -- two processes finish one branch at once ---------------------------------------------------
def _backend_committing(db, gid: str) -> threading.Thread:
    """A session that COMMITs PREPARED `gid` and stays inside that commit, holding the
    branch, until the test cancels its wait (waiting for a synchronous standby that does
    not exist; the commit is durable locally by then)."""

    def hang() -> None:
        with db.admin_connect() as conn:
            cursor = conn.cursor()
            cursor.execute("SET synchronous_commit = on")
            # Canceled in the end: "the transaction has already committed locally".
            with contextlib.suppress(Exception):
                cursor.execute(f"COMMIT PREPARED '{gid}'")

    thread = threading.Thread(target=hang, daemon=True)
    thread.start()
    return thread


def _cancel_sync_waits(db) -> int:
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
            "WHERE wait_event = 'SyncRep' AND pid <> pg_backend_pid()"
        )
        return len(cursor.fetchall())


def _wait_for_sync_wait(db) -> None:
    for _ in range(100):
        with db.admin_connect() as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")
            if cursor.fetchone()[0]:
                return
        time.sleep(0.1)
    raise AssertionError("the blocking COMMIT PREPARED never waited")


def test_a_branch_another_session_is_committing_is_waited_for(pg_sync_standby):
    """The driver stalls before its decision; an operator's session starts COMMIT PREPARED
    of one of its branches and stays inside it. The driver resumes, decides, and meets that
    branch "busy" (PostgreSQL 55000) in phase 2: it backs off and looks again until the
    other session is done, then settles the branch by its marker. The write reports
    success, which is the truth, instead of a CommitError."""
    db = pg_sync_standby
    table = new_table(db)
    driver = DriverProcess(db, table, "before_decision", action="pause")
    driver.wait_for_point()
    gids = xasink_prepared(db)
    assert len(gids) == 3
    blocker = _backend_committing(db, gids[0])
    _wait_for_sync_wait(db)
    timer = threading.Timer(4.0, _cancel_sync_waits, args=(db,))
    timer.start()
    final = driver.resume()
    blocker.join(30)
    assert final.startswith("RESULT "), final
    assert_exactly(db, table, range(3000))
    assert list(job_states(db).values()).count("committed") >= 1


def test_recovery_waits_for_a_branch_another_session_is_committing(pg_sync_standby):
    """The driver dies in phase 2; while one winner's COMMIT PREPARED hangs in another
    session, `xasink recover` meets it "busy": it waits and settles it, no FAILED."""
    db = pg_sync_standby
    table = new_table(db)
    from support import kill_driver_at

    kill_driver_at(db, table, "after_first_commit")
    gids = xasink_prepared(db)
    assert len(gids) == 2
    blocker = _backend_committing(db, gids[0])
    _wait_for_sync_wait(db)
    threading.Timer(4.0, _cancel_sync_waits, args=(db,)).start()
    done = cli(db, "--grace", "0")
    blocker.join(30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed" not in done.stdout.lower()
    assert_exactly(db, table, range(3000))


# -- format("xasink"): beats from the start, a long wait for the first task -----------------
def _journal_row(db, table: str) -> tuple[str, int, int] | None:
    with db.connect() as conn:
        cursor = conn.cursor()
        try:
            cursor.execute(
                "SELECT state, beats, lease_seconds FROM xasink_jobs WHERE target_table = %s",
                (journaled(db, table),),
            )
        except Exception as exc:
            if "xasink_jobs" in str(exc):  # no journal yet
                return None
            raise
        row = cursor.fetchone()
    return None if row is None else (str(row[0]), int(row[1]), int(row[2]))


def test_a_job_waiting_for_its_first_task_keeps_its_start_lease(spark, db):
    """A format('xasink') job is registered before Spark runs anything (upstream stages, a
    queue for executors): it keeps its start lease (xasink.startTimeout) until a task beats,
    so a recovery run with a short grace leaves it alone while it waits."""
    from xasink.spark.datasource import cancel, mint
    from xasink.spark.options import parse

    table = new_table(db)
    frame = events_df(spark, 10, 1)
    options = {
        "url": db.jdbc_url,
        "dbtable": table,
        "user": db.user,
        "password": db.password,
        "xasink.startTimeout": "120",
        "xasink.leaseSeconds": "1",
        "xasink.heartbeatInterval": "0.2",
    }
    fmt = parse(options, frame.columns, overwrite=False)
    minted = mint(fmt, frame.schema)  # what Spark's writer() call does
    assert _journal_row(db, table) == ("running", 0, 120)
    time.sleep(2.5)  # silent longer than the grace and the running lease
    early = cli(db, "--grace", "1", "--table", table)
    assert "aborted" not in early.stdout and _journal_row(db, table)[0] == "running", early
    cancel(minted.plan, fmt.request)  # what Spark's abort() does
    assert _journal_row(db, table)[0] == "aborted"
    assert_exactly(db, table, [])


@pytest.mark.ci_one_server
def test_a_task_beats_before_its_first_row(spark, db, tmp_path):
    """A format('xasink') task whose first row takes long to come (a slow upstream
    operator in its stage): it beats from its first moment, with the running lease
    (xasink.leaseSeconds), not from its first row. The write commits every row. (A task
    that ships its rows to commit() opens nothing and sends no beat: a branch is asked for.)"""
    table, first_row = new_table(db), tmp_path / "first-row"

    def slow(batches):
        import time as t

        t.sleep(6)
        first_row.touch()  # the first row leaves this operator now
        yield from batches

    frame = events_df(spark, 400, 1).mapInArrow(slow, events_df(spark, 1, 1).schema)
    options = {"xasink.leaseSeconds": "3", "xasink.heartbeatInterval": "0.5"}
    options["xasink.driverWriteBytes"] = "0"
    seen: list[tuple[tuple[str, int, int] | None, bool]] = []
    finished = threading.Event()

    def watch() -> None:  # the journal row, as a monitoring script would see it
        while not finished.is_set():
            seen.append((_journal_row(db, table), first_row.exists()))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        xasink_writer(frame, db, table, **options).save()
    finally:
        finished.set()
        watcher.join(30)
    beating = [row for row, after in seen if row and row[1] >= 1 and not after]
    assert beating and all(row[2] == 3 for row in beating), seen
    assert_exactly(db, table, range(400))


@pytest.mark.ci_one_server
def test_a_micro_batch_whose_tasks_all_fail_ends_its_job(spark, db, tmp_path):
    """The only task of a micro-batch fails every attempt: Spark's abort() gets no task
    message at all. The batch's job is aborted then and there, not left running until a
    recovery run takes it for dead."""
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F
    from support import file_stream, stream_files, xasink_stream

    table, source = new_table(db), tmp_path / "in"
    stream_files(source, 1, 50)

    def boom(value: int) -> int:
        raise RuntimeError("upstream always fails")

    stream = file_stream(spark, source).withColumn("id", F.udf(boom, "long")(F.col("id")))
    query = xasink_stream(stream, db, table, tmp_path / "checkpoint").start()
    with pytest.raises(StreamingQueryException, match="upstream always fails"):
        query.awaitTermination(120)
    assert latest_jobs(db, table) == ["aborted"]
    assert_exactly(db, table, [])


# -- prepared slots -------------------------------------------------------------------------
def test_branches_beyond_the_prepared_slots_are_refused_before_they_prepare(spark, db):
    """format('xasink') cannot learn the input's partition count before its tasks run. On
    PostgreSQL, whose prepared-transaction slots are few, it bounds the branches (numPartitions,
    default 8) and checks that many slots at the start; a task beyond the bound refuses to
    open a branch, and numPartitions above the free slots is refused before any task runs.
    MySQL/MariaDB have no such slots: no bound unless numPartitions is given. (Partitions
    that ship their rows to commit() hold no slot: here every partition writes a branch.)"""
    table = new_table(db)
    frame = events_df(spark, 1600, 16)
    branches = {"xasink.driverWriteBytes": "0"}
    if db.kind != "postgres":
        xasink_writer(frame, db, table, **branches).save()
        assert_exactly(db, table, range(1600))
        return
    with pytest.raises(Exception, match=r"numPartitions=8 \(PostgreSQL's default"):
        xasink_writer(frame, db, table, **branches).save()
    with pytest.raises(Exception, match="max_prepared_transactions = 100"):
        xasink_writer(frame, db, table, numPartitions="500", **branches).save()
    assert_exactly(db, table, [])
    xasink_writer(frame.coalesce(8), db, table, **branches).save()
    assert_exactly(db, table, range(1600))


# -- a server that stops answering -----------------------------------------------------------
def test_a_silent_heartbeat_connection_cannot_hang_a_write(spark, postgres):
    """The server process behind the heartbeat's connection stops (SIGSTOP: a frozen peer,
    a half-open connection) while a job runs. The beat gives up after its network bound,
    and write_xa returns with every row committed instead of waiting forever. (PostgreSQL
    only: a backend per connection is what lets one connection freeze; MySQL/MariaDB
    connections get the same timeouts from the same code.)"""
    from pyspark.sql import functions as F

    db = postgres
    table = new_table(db)

    def slow(i: int) -> int:
        import time as t

        if i % 250 == 0:
            t.sleep(1.0)
        return i

    df = events_df(spark, 2000, 2).withColumn("id", F.udf(slow, "long")(F.col("id")))
    close_idle_sessions()  # the session stopped below must be this job's own
    thread, outcome = in_background(
        lambda: write_xa(
            df,
            table=table,
            **connection_args(db, network_timeout=6),
            writer_properties=WriterProperties(driver_write_bytes=0),
            commit_properties=CommitProperties(heartbeat_interval=0.5, lock_wait_timeout=2),
        )
    )
    stopped = None
    try:
        stopped = _stop_heartbeat_backend(db)
        thread.join(90)
        assert not thread.is_alive(), "write_xa waited forever on the silent connection"
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        thread.join(120)
    assert len(outcome) == 1 and not isinstance(outcome[0], Exception), outcome
    assert_exactly(db, table, range(2000))


def _stop_heartbeat_backend(db) -> int:
    """SIGSTOP the backend of the heartbeat's connection while it is idle between beats."""
    for _ in range(300):
        with db.admin_connect() as conn:
            cursor = conn.cursor()
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE state = 'idle' "
                "AND query LIKE 'UPDATE%heartbeat_at%'"
            )
            row = cursor.fetchone()
            if row is not None:
                pid = int(row[0])
                os.kill(pid, signal.SIGSTOP)
                cursor.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,))
                if cursor.fetchone()[0] == "idle":
                    return pid
                os.kill(pid, signal.SIGCONT)  # caught mid-beat: try the next gap
        time.sleep(0.05)
    raise AssertionError("no heartbeat connection showed up")


# -- the journal defends itself --------------------------------------------------------------
def _rows(db, sql: str) -> list[tuple]:
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(sql)
        return [tuple(row) for row in cursor.fetchall()]


def _journal_state(db, meta: str, sinks: str) -> tuple[list[tuple], bool]:
    """(the meta rows, whether the sinks table exists)."""
    try:
        _rows(db, f"SELECT 1 FROM {sinks} WHERE 1 = 0")
        present = True
    except Exception:
        present = False
    return _rows(db, f"SELECT tag, version FROM {meta}"), present


def test_a_damaged_journal_is_an_error_never_recreated(spark, db, journal_schema):
    """A journal that lost its tag row, or its sinks table, is refused by writes and by
    recovery (exit 2), and nothing is recreated: a new tag would hide the journal's
    prepared branches from recovery, an empty sinks table would write replays again. A
    journal of another schema version is refused the same way."""
    table, schema = new_table(db), journal_schema
    write_xa(events_df(spark, 10, 1), table=table, **connection_args(db, journal_schema=schema))
    meta, sinks = f"{schema}.xasink_meta", f"{schema}.xasink_sinks"
    damages = [
        ([f"DELETE FROM {meta}"], "lost its tag"),
        ([f"UPDATE {meta} SET version = 99"], "schema version 99"),
        ([f"DROP TABLE {sinks}"], "xasink_sinks.? is missing"),
    ]
    for statements, message in damages:
        saved = _rows(db, f"SELECT tag, version FROM {meta}")
        admin_sql(db, *statements)
        damaged = _journal_state(db, meta, sinks)
        refused = cli(db, "--journal-schema", schema)
        assert refused.returncode == 2 and re.search(message, refused.stderr), refused.stderr
        CHECKS.clear()
        with pytest.raises(JournalError, match=message):
            write_xa(
                events_df(spark, 10, 1), table=table, **connection_args(db, journal_schema=schema)
            )
        assert _journal_state(db, meta, sinks) == damaged, "the journal was repaired silently"
        if "DROP" not in statements[0]:
            admin_sql(
                db,
                f"DELETE FROM {meta}",
                f"INSERT INTO {meta} (id, tag, version) VALUES (1, '{saved[0][0]}', {saved[0][1]})",
            )
    assert_exactly(db, table, range(10))


def test_the_journal_indexes_what_every_call_reads(spark, db):
    """Every write reads its table's open jobs and a sink's jobs: indexed, not a full scan of
    a table that grows by a row per micro-batch (tests/test_journal_history.py asks the
    servers' plans of every statement)."""
    write_xa(events_df(spark, 1, 1), table=new_table(db), **connection_args(db))
    if db.kind == "postgres":
        sql = (
            "SELECT i.relname, array_to_string(array_agg(a.attname ORDER BY k.n), ',') "
            "FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
            "JOIN pg_class t ON t.oid = x.indrelid "
            "CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum "
            "WHERE t.relname = 'xasink_jobs' AND t.relnamespace = 'public'::regnamespace "
            "GROUP BY i.relname"
        )
    else:
        sql = (
            "SELECT INDEX_NAME, GROUP_CONCAT(COLUMN_NAME ORDER BY SEQ_IN_INDEX) "
            "FROM information_schema.STATISTICS WHERE TABLE_NAME = 'xasink_jobs' "
            "AND TABLE_SCHEMA = DATABASE() GROUP BY INDEX_NAME"
        )
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(sql)
        indexed = {str(columns) for _, columns in cursor.fetchall()}
    # The open jobs by state, a table's and every job newest first, a sink's, and (PostgreSQL:
    # partial; MySQL: after the state, the plan's first character) the jobs with a plan.
    staged = "state" if db.kind == "postgres" else "state,apply_plan"
    wanted = {"state,created_at", "target_table,created_at", "created_at", "sink_id,batch_id"}
    assert wanted | {staged} <= indexed, indexed


def test_two_first_writers_create_one_journal(db):
    """Two writers starting at the same moment on a database without a journal (two streams,
    or a stream and a backfill) both create it: neither fails, and they share one tag."""
    spec, sessions = spec_for(db), []
    for _ in range(2):
        sessions.append(open_journal(spec, None)[0])
    barrier = threading.Barrier(2, timeout=30)
    for iteration in range(12 if db.kind == "postgres" else 6):
        schema = f"j_{uuid.uuid4().hex[:8]}"
        if db.kind == "postgres":
            admin_sql(db, f"CREATE SCHEMA {schema} AUTHORIZATION {db.user}")
        else:
            admin_sql(
                db, f"CREATE DATABASE {schema}", f"GRANT ALL ON {schema}.* TO '{db.user}'@'%'"
            )

        def first_writer(conn, schema=schema):
            journal = Journal.locate(conn, spec, schema)
            barrier.wait()
            return journal.ensure(conn, spec).tag

        runs = [in_background(lambda s=s: first_writer(s.connection)) for s in sessions]
        for thread, _ in runs:
            thread.join(60)
        tags = [outcome[0] if outcome else "hung" for _, outcome in runs]
        assert not any(isinstance(t, BaseException) for t in tags), (iteration, tags)
        assert tags[0] == tags[1] and _rows(db, f"SELECT tag FROM {schema}.xasink_meta") == [
            (tags[0],)
        ]
        _rows(db, f"SELECT * FROM {schema}.xasink_jobs WHERE 1 = 0")
        admin_sql(
            db,
            f"DROP SCHEMA {schema} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {schema}",
        )
    for session in sessions:
        session.close()
    assert xasink_prepared(db) == []


def test_a_journal_creation_held_up_too_long_says_so(db):
    """A first writer waits for another one's journal creation only as long as its lock
    bound, then says what held it up; the lock it never got leaves nothing behind."""
    from xasink.dialects.base import advisory_key

    key = advisory_key("journal creation")
    if db.kind == "postgres":
        take, held = f"SELECT pg_advisory_lock({key})", f"SELECT pg_advisory_unlock({key})"
    else:
        take, held = (
            f"SELECT GET_LOCK('xasink-{key:x}', 5)",
            f"SELECT RELEASE_LOCK('xasink-{key:x}')",
        )
    spec, schema = spec_for(db), f"j_{uuid.uuid4().hex[:8]}"
    if db.kind == "postgres":
        admin_sql(db, f"CREATE SCHEMA {schema} AUTHORIZATION {db.user}")
    else:
        admin_sql(db, f"CREATE DATABASE {schema}", f"GRANT ALL ON {schema}.* TO '{db.user}'@'%'")
    with db.admin_connect() as holder:
        holder.cursor().execute(take)
        session, journal = open_journal(spec, schema, lock_wait=1)
        with session, pytest.raises(JournalError, match="creating the journal"):
            journal.ensure(session.connection, spec)
        holder.cursor().execute(held)
    session, journal = open_journal(spec, schema, lock_wait=1)
    with session:
        assert journal.ensure(session.connection, spec).tag
    assert len(_rows(db, f"SELECT tag FROM {schema}.xasink_meta")) == 1
    admin_sql(
        db, f"DROP SCHEMA {schema} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {schema}"
    )
