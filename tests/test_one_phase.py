"""A single-branch job (a small frame the driver writes itself, so most micro-batches)
commits in one local transaction: its rows, its job row born committed, a streaming batch's
sink mark and a staged mode's apply, together or not at all.

Every test checks the exact contents with psycopg/pymysql, the journal as those read it,
and that nothing is left prepared and no staging table is left.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid

import pytest
from support import (
    ROWS,
    apply_lock_name,
    assert_exactly,
    connection_args,
    contents,
    events_df,
    in_background,
    journal_session,
    journaled,
    kill_driver_at,
    mode_case,
    mode_rows,
    new_table,
    old_contents,
    released_by_apply_lock,
    released_together,
    seeded_table,
    sink_mark,
    stage_tables,
    xasink_cli,
)

from xasink import CommitProperties, WriterProperties, transaction, write_xa
from xasink.errors import InputDataError, JobAbortedError, SinkConflictError
from xasink.protocol.states import JobState

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server


def small_frame(spark, rows: list, schema: str):
    """A cached frame: Spark then knows its size, so the driver writes it itself."""
    df = spark.createDataFrame(rows, schema).cache()
    df.count()
    return df


def _job_row(db, job_id: str) -> tuple[str, object, object, object] | None:
    """(state, created_at, decided_at, finished_at) of a job, read independently."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT state, created_at, decided_at, finished_at FROM xasink_jobs WHERE job_id = %s",
            (job_id,),
        )
        row = cursor.fetchone()
    return None if row is None else (str(row[0]), row[1], row[2], row[3])


def _xa_counters(db) -> dict[str, int]:
    """The server's counters of XA statements that open or end a branch (MySQL family;
    XA RECOVER is the startup recovery scan's), or {} (PostgreSQL)."""
    if db.dialect != "mysql":
        return {}
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Com_xa_%'")
        counters = {str(name): int(value) for name, value in cursor.fetchall()}
    return {k: v for k, v in counters.items() if k != "Com_xa_recover"}


def _all_jobs(db) -> set[str]:
    """Every job id of the default journal; none before a first write made it."""
    with db.connect() as conn:
        cursor = conn.cursor()
        try:
            cursor.execute("SELECT job_id FROM xasink_jobs")
        except Exception as exc:  # a test run alone meets a server without a journal yet
            if "xasink_jobs" not in str(exc):
                raise
            return set()
        return {str(row[0]) for row in cursor.fetchall()}


def assert_one_transaction(db, job_id: str) -> None:
    """The job's row was born committed, by one statement (a two-phase job's row is
    created before its branches write, and decided and finished later)."""
    row = _job_row(db, job_id)
    assert row is not None and row[0] == JobState.COMMITTED, row
    if db.kind != "postgres":  # PostgreSQL's clock_timestamp() moves within a statement
        assert row[1] == row[2] == row[3], f"not one statement: {row}"
    assert db.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(db) == [], "a staging table was left behind"


def ids_written_with_job(db, table: str, job_id: str) -> set[int]:
    """PostgreSQL: ids of the rows that the job row's own transaction wrote (same xmin)."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            f'SELECT id FROM "{table}" WHERE xmin::text = '
            "(SELECT xmin::text FROM xasink_jobs WHERE job_id = %s)",
            (job_id,),
        )
        return {int(row[0]) for row in cursor.fetchall()}


@pytest.mark.mysql_ci
@pytest.mark.parametrize("mode", ["append", "overwrite", "upsert", "merge"])
def test_a_small_frame_commits_in_one_local_transaction(spark, db, mode):
    table = seeded_table(db)
    rows, schema, options, expected = mode_rows(mode)
    df = small_frame(spark, rows, schema)
    before = _xa_counters(db)
    result = write_xa(df, table=table, **options, **connection_args(db))
    assert (result.writer, result.outcome, result.branches) == ("driver", "committed", 1)
    assert result.rows == df.count()
    assert contents(db, table) == expected
    assert_one_transaction(db, result.job_id)
    if db.kind == "postgres":
        old = old_contents()
        changed = {i for i, v in expected.items() if mode == "overwrite" or old.get(i) != v}
        assert ids_written_with_job(db, table, result.job_id) == changed
    after = _xa_counters(db)
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == {}, (
        "a one-phase job ran XA statements"
    )


@pytest.mark.mysql_ci
def test_a_micro_batch_commits_once_and_its_replay_is_skipped(spark, db):
    table, sink = new_table(db), f"one-phase-{uuid.uuid4().hex[:8]}"
    args = connection_args(db)
    first = write_xa(events_df(spark, 300, 2), table=table, sink_id=sink, batch_id=0, **args)
    assert (first.writer, first.skipped) == ("driver", False)
    assert sink_mark(db, sink) == (0, first.job_id)
    assert_one_transaction(db, first.job_id)
    again = write_xa(events_df(spark, 300, 2), table=table, sink_id=sink, batch_id=0, **args)
    assert (again.skipped, again.decided_by) == (True, first.job_id)
    later = events_df(spark, 300, 2).selectExpr("id + 300 AS id", "name", "v", "n", "ts")
    second = write_xa(later, table=table, sink_id=sink, batch_id=1, **args)
    assert sink_mark(db, sink) == (1, second.job_id)
    with pytest.raises(SinkConflictError, match="below the sink's last committed batch"):
        write_xa(events_df(spark, 300, 2), table=table, sink_id=sink, batch_id=0, **args)
    assert_exactly(db, table, range(600))


def _waiting_on_locks(db, statement: str) -> int:
    """Sessions waiting for a row lock now, in a statement containing `statement`."""
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        if db.kind == "postgres":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query LIKE %s",
                (f"%{statement}%",),
            )
        else:  # MariaDB's INNODB_TRX may not list a waiter at READ COMMITTED: its statement
            # still running after a second is (the test holds the row it needs)
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist WHERE user = %s "
                "AND command = 'Query' AND time >= 1 AND info LIKE %s",
                (db.user, f"%{statement}%"),
            )
        return int(cursor.fetchone()[0])


@pytest.mark.mariadb11_ci
def test_two_writers_racing_for_one_batch_commit_it_once(spark, db):
    """Two writers of one batch reach the sink's mark at the same time (the test holds the
    mark's row lock until both wait on it): one commits the batch, the other rolls back
    everything it wrote and says that another job committed it."""
    table, sink = new_table(db), f"race-{uuid.uuid4().hex[:8]}"
    args = connection_args(db)
    write_xa(events_df(spark, 10, 1), table=table, sink_id=sink, batch_id=0, **args)
    rows = events_df(spark, 200, 2).selectExpr("id + 10 AS id", "name", "v", "n", "ts")
    rows.cache().count()
    holder = db.connect(autocommit=False) if db.kind == "postgres" else db.connect()
    try:
        cursor = holder.cursor()
        if db.kind != "postgres":
            cursor.execute("START TRANSACTION")
        cursor.execute("SELECT batch_id FROM xasink_sinks WHERE sink_id = %s FOR UPDATE", (sink,))
        outcomes = released_together(
            [lambda: write_xa(rows, table=table, sink_id=sink, batch_id=1, **args)] * 2,
            lambda: _waiting_on_locks(db, "xasink_sinks"),
            holder.commit,
            "the sink's mark",
        )
    finally:
        holder.close()
    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    assert isinstance(lost[0], SinkConflictError), repr(lost[0])
    assert f"committed by job {won[0].job_id}" in str(lost[0])
    assert sink_mark(db, sink) == (1, won[0].job_id)
    assert lost[0].job_id not in _all_jobs(db)
    assert_exactly(db, table, range(210))


@pytest.mark.ci_one_server
@pytest.mark.parametrize("point", ["after_rows", "before_local_commit"])
def test_a_driver_killed_before_its_local_commit_leaves_nothing(spark, db, point):
    """SIGKILLed with its rows sent, or just before COMMIT: the server rolls the whole
    transaction back, so there is nothing to recover, not even a job row; the batch's
    replay then writes it once."""
    table, sink = new_table(db), f"killed-{uuid.uuid4().hex[:8]}"
    jobs = _all_jobs(db)
    kill_driver_at(db, table, point, sink=f"{sink}:0", writer="driver")
    assert db.prepared_transactions() == []
    assert _all_jobs(db) == jobs, "a killed one-phase job left a job row"
    assert sink_mark(db, sink) in (None, (-1, None))
    assert contents_count(db, table) == 0
    replay = write_xa(
        events_df(spark, ROWS, 2), table=table, sink_id=sink, batch_id=0, **connection_args(db)
    )
    assert replay.writer == "driver" and not replay.skipped
    assert_exactly(db, table, range(ROWS))


def contents_count(db, table: str) -> int:
    quote = '"' if db.kind == "postgres" else "`"
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT count(*) FROM {quote}{table}{quote}")
        return int(cursor.fetchone()[0])


def test_a_refused_staged_apply_leaves_the_target_unchanged(spark, db):
    """The target refuses the applied rows (a CHECK): the one transaction rolls back, the
    error says nothing changed, and no job row claims otherwise."""
    table = seeded_table(db)
    with db.connect() as conn:
        conn.cursor().execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pos CHECK (v >= 0)")
        if db.kind != "postgres":
            conn.commit()
    df = small_frame(
        spark, [(i, "new", -1.0) for i in range(50, 70)], "id long, name string, v double"
    )
    jobs = _all_jobs(db)
    with pytest.raises(InputDataError, match="Nothing was changed") as raised:
        write_xa(df, table=table, mode="upsert", key="id", **connection_args(db))
    assert raised.value.job_id and raised.value.job_id not in _all_jobs(db)
    assert _all_jobs(db) == jobs
    assert contents(db, table) == old_contents()
    assert db.prepared_transactions() == [] and stage_tables(db) == []


@pytest.mark.parametrize("commit", ["lands", "rolls back", "landed before"])
def test_an_operator_settles_a_commit_whose_reply_was_lost(db, commit):
    """A lost COMMIT reply leaves a job with no row unless that COMMIT landed. The driver
    settles it with a fence, and where it could not, its error names `xasink resolve JOB
    --abandon --table T`, which runs the same fence: inserting the job's row as aborted
    waits for the transaction still in flight, then fails (the commit landed: its row is
    there) or succeeds (it never will). A COMMIT that landed before the command is reported
    so too. Without --table the command says to pass it."""
    job_id = uuid.uuid4().hex
    with journal_session(db) as (spec, session, journal):
        journal.ensure(session.connection, spec)
    refused = xasink_cli(db, "resolve", job_id, "--abandon", "--yes")
    assert refused.returncode != 0 and "--table" in refused.stderr, refused.stderr
    args = ("resolve", job_id, "--abandon", "--table", "t", "--yes", "--reason", "lost")
    flight = db.connect(autocommit=False) if db.kind == "postgres" else db.connect()
    try:
        cursor = flight.cursor()
        if db.kind != "postgres":
            cursor.execute("START TRANSACTION")
        now = "CURRENT_TIMESTAMP" if db.kind == "postgres" else "UTC_TIMESTAMP(6)"
        cursor.execute(
            "INSERT INTO xasink_jobs (job_id, target_table, state, beats, created_at, "
            f"heartbeat_at) VALUES (%s, 't', 'committed', 0, {now}, {now})",
            (job_id,),
        )
        if commit == "landed before":
            flight.commit()
            done = xasink_cli(db, *args)
        else:
            thread, outcome = in_background(lambda: xasink_cli(db, *args))
            _until_a_session_waits_for_a_lock(db, thread)
            flight.commit() if commit == "lands" else flight.rollback()
            thread.join(60)
            (done,) = outcome
    finally:
        flight.close()
    expected = JobState.ABORTED if commit == "rolls back" else JobState.COMMITTED
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"job={job_id} state={expected}" in done.stdout
    row = _job_row(db, job_id)
    assert row is not None and row[0] == expected
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT resolution FROM xasink_jobs WHERE job_id = %s", (job_id,))
        (resolution,) = cursor.fetchone()
    assert (resolution is not None and "lost" in resolution) == (expected == JobState.ABORTED)
    assert db.prepared_transactions() == []


def test_a_job_whose_id_an_operator_settled_first_writes_nothing(spark, db, monkeypatch):
    """An operator's `xasink resolve JOB --abandon --table T` names a job before its
    transaction reached the job row (a mistyped id can): the fence's ABORTED row is there
    first, so the transaction's insert of the job row meets a duplicate key, rolls back
    everything, and says the job was settled as aborted (not that the rows were refused)."""
    from types import SimpleNamespace

    job_id = uuid.uuid4().hex
    fixed = SimpleNamespace(uuid4=lambda: SimpleNamespace(hex=job_id))
    monkeypatch.setattr("xasink.driver.job.uuid", fixed)
    table = seeded_table(db)
    with journal_session(db) as (spec, session, journal):
        journal.ensure(session.connection, spec)
    fenced = xasink_cli(db, "resolve", job_id, "--abandon", "--table", table, "--yes")
    assert f"state={JobState.ABORTED}" in fenced.stdout, fenced.stdout + fenced.stderr
    df = small_frame(
        spark, [(i, "late", 1.0) for i in range(60, 80)], "id long, name string, v double"
    )
    with pytest.raises(JobAbortedError, match="settled as aborted") as raised:
        write_xa(df, table=table, mode="upsert", key="id", **connection_args(db))
    assert raised.value.job_id == job_id
    assert contents(db, table) == old_contents()
    assert _job_row(db, job_id)[0] == JobState.ABORTED
    assert db.prepared_transactions() == [] and stage_tables(db) == []


def _until_a_session_waits_for_a_lock(db, thread) -> None:
    """Until the server shows the fence waiting on the job row's key, while `thread` (which
    runs it) is still alive: on PostgreSQL a lock not granted; on MySQL/MariaDB its INSERT
    into the jobs table still executing (it cannot end while the row's insert is open).
    MariaDB's INNODB_TRX was seen not to list such a waiting autocommit INSERT."""
    waiting = (
        "SELECT count(*) FROM pg_locks WHERE NOT granted"
        if db.kind == "postgres"
        else "SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND = 'Query' "
        "AND INFO LIKE 'INSERT INTO `xasink_jobs`%'"
    )
    deadline = time.monotonic() + 60
    with db.admin_connect() as conn:  # MariaDB shows other users' sessions to PROCESS
        cursor = conn.cursor()
        while True:
            cursor.execute(waiting)
            if cursor.fetchone()[0]:
                break
            assert thread.is_alive(), "the fence ended without waiting for the commit in flight"
            assert time.monotonic() < deadline, "no session waited for the job row's lock"
            time.sleep(0.05)
    assert thread.is_alive()


@pytest.mark.ci_one_server
def test_an_older_decided_staged_job_is_finished_first(spark, db):
    """An upsert decided earlier on the table but not yet applied (its driver died after
    the decision) is applied before a one-phase upsert on the same table, as staged jobs
    are applied in decision order; the later rows win."""
    table = seeded_table(db)
    kill_driver_at(db, table, "after_decision", mode="upsert")
    (older,) = [j for j, s in _states_on(db, table).items() if s == JobState.COMMITTING]
    result = write_xa(
        _newest(spark),
        table=table,
        mode="upsert",
        key="id",
        order="seq",
        **connection_args(db),
        commit_properties=CommitProperties(recover_first=False),
    )
    _assert_newest_after(spark, db, table, older)
    assert_one_transaction(db, result.job_id)


@pytest.mark.ci_one_server
def test_a_transaction_retried_after_an_older_staged_job_keeps_every_writes_rows(spark, db):
    """The same, for a transaction of two small writes whose second meets the older job:
    its one local transaction is rolled back, the older job applied, and the transaction
    written again, every write with all its rows (the second's included)."""
    table, other = seeded_table(db), new_table(db)
    first = events_df(spark, 50, 1).cache()
    first.count()  # Spark knows the size: held for the one local transaction
    kill_driver_at(db, table, "after_decision", mode="upsert")
    (older,) = [j for j, s in _states_on(db, table).items() if s == JobState.COMMITTING]
    with transaction(
        **connection_args(db), commit_properties=CommitProperties(recover_first=False)
    ) as tx:
        tx.write(first, other)
        tx.write(_newest(spark), table, mode="upsert", key="id", order="seq")
    _assert_newest_after(spark, db, table, older)
    assert_exactly(db, other, range(50))
    assert_one_transaction(db, tx.job_id)


def _newest(spark):
    """Rows 60-79, newer (seq 9) than the older upsert's."""
    rows = [(i, "newest", 7.0, 9) for i in range(60, 80)]
    return small_frame(spark, rows, "id long, name string, v double, seq int")


def _assert_newest_after(spark, db, table: str, older: str) -> None:
    """The older upsert was applied first, then `_newest`'s rows over it."""
    assert _states_on(db, table)[older] == JobState.COMMITTED
    _, _, expected = mode_case(spark, "upsert")
    expected.update({i: ("newest", 7.0) for i in range(60, 80)})
    assert contents(db, table) == expected


def _states_on(db, table: str) -> dict[str, str]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT job_id, state FROM xasink_jobs WHERE target_table = %s",
            (journaled(db, table),),
        )
        return {str(j): str(s) for j, s in cursor.fetchall()}


def test_a_writer_session_is_kept_between_one_phase_jobs(spark, db):
    """A one-phase job hands its session back idle in autocommit, without its temporary
    staging table or its apply lock, and the next job writes on the same session."""
    from xasink.executor.branch import BRANCH_ROLE
    from xasink.protocol import sessions

    sessions.close_all()
    table = seeded_table(db)
    rows = [(i, "new", 1.0) for i in range(10)]
    args = {"mode": "upsert", "key": "id", **connection_args(db)}
    first = write_xa(
        small_frame(spark, rows, "id long, name string, v double"), table=table, **args
    )
    kept = [s for key, (s, _) in sessions._idle.items() if key[1] == BRANCH_ROLE]
    assert len(kept) == 1, "the writer's session was not kept"
    conn = kept[0].connection
    assert bool(conn.getAutoCommit())
    from xasink.dialects.base import advisory_key

    key = advisory_key(apply_lock_name(db, table))
    if db.kind == "postgres":
        stage = f'pg_temp."xasink_stage_{first.job_id}"'
        low = key & 0xFFFFFFFF
        held = f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = {low}"
    else:
        stage = f"`xasink_stage_{first.job_id}`"
        held = f"SELECT IS_USED_LOCK('xasink-apply-{key:x}') IS NOT NULL"
    statement = conn.createStatement()
    try:
        result = statement.executeQuery(held)
        result.next()
        assert int(result.getLong(1)) == 0, "the apply lock is still held"
        with pytest.raises(Exception, match=r"(?i)exist"):
            statement.executeQuery(f"SELECT 1 FROM {stage}")
    finally:
        statement.close()
    rows = [(i, "newer", 2.0) for i in range(10)]
    write_xa(small_frame(spark, rows, "id long, name string, v double"), table=table, **args)
    again = [s for key, (s, _) in sessions._idle.items() if key[1] == BRANCH_ROLE]
    assert again == kept, "the next job opened another session"


@pytest.mark.mariadb11_ci
def test_one_phase_applies_into_one_table_never_interleave(spark, db):
    """Two small overwrites of one table reach the apply at the same time (the test holds
    the table's apply lock until both wait for it): one applies after the other, so the
    table holds exactly one of the two inputs, never their union."""
    _overwrites_racing_for_the_apply(spark, db)


@pytest.mark.mariadb11_ci
def test_staged_jobs_of_task_branches_apply_into_one_table_never_interleave(spark, db):
    """The same race between two overwrites whose rows tasks wrote through two XA branches
    each: the second applies after the first committed, never their union."""
    tasks = WriterProperties(driver_write_bytes=0)
    results = _overwrites_racing_for_the_apply(spark, db, partitions=2, writer_properties=tasks)
    assert [r.partitions for r in results] == [2, 2]


def _overwrites_racing_for_the_apply(spark, db, partitions: int = 1, **write_args) -> list:
    """Two overwrites of one table, released together once both wait for its apply lock
    (held here); asserts the table holds one input whole, and returns both results."""

    table = seeded_table(db)
    inputs = [
        small_frame(spark, [(i, name, 1.0) for i in ids], "id long, name string, v double")
        for name, ids in (("a", range(0, 30)), ("b", range(20, 60)))
    ]
    if partitions > 1:
        inputs = [df.repartition(partitions) for df in inputs]
    outcomes = released_by_apply_lock(
        db,
        table,
        [
            lambda df=df: write_xa(
                df, table=table, mode="overwrite", **write_args, **connection_args(db)
            )
            for df in inputs
        ],
    )
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    found = contents(db, table)
    assert found in ({i: ("a", 1.0) for i in range(30)}, {i: ("b", 1.0) for i in range(20, 60)})
    assert db.prepared_transactions() == [] and stage_tables(db) == []
    return outcomes


def test_a_mariadb_login_without_temporary_tables_stages_small_writes_in_two_phases(
    spark, mariadb, caplog
):
    """MariaDB has the CREATE TEMPORARY TABLES privilege too: a login without it writes a
    small upsert through a real staging table in two phases, exactly, and says so once."""
    name = f"xasink_notemp_{uuid.uuid4().hex[:6]}"
    with mariadb.admin_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (name, mariadb.password))
        grants = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP"  # no CREATE TEMPORARY TABLES
        cur.execute(f"GRANT {grants} ON `{name}`.* TO %s@'%%'", (name,))
    db = dataclasses.replace(mariadb, user=name, database=name)
    try:
        caplog.set_level(logging.WARNING, logger="xasink")
        table = seeded_table(db)
        rows, schema, options, expected = mode_rows("upsert")
        df = small_frame(spark, rows, schema)
        result = write_xa(df, table=table, **options, **connection_args(db))
        assert (result.writer, result.outcome) == ("driver", "committed")
        assert contents(db, table) == expected
        warned = [r.getMessage() for r in caplog.records if "temporary table" in r.getMessage()]
        assert len(warned) == 1 and f"GRANT CREATE TEMPORARY TABLES ON `{name}`.*" in warned[0]
        assert stage_tables(db) == [] and db.prepared_transactions() == []
    finally:
        with mariadb.admin_connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{name}`")
            cur.execute("DROP USER %s@'%%'", (name,))
