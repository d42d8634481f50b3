"""Every journal and one-phase transaction is correct whatever isolation the server would
give a session: xasink's sessions run at READ COMMITTED, so a transaction that read, then
waited for a lock, acts on the rows committed meanwhile instead of failing.

The servers here are made to hand new sessions a snapshot that a write after a wait must
match: PostgreSQL with `default_transaction_isolation = 'repeatable read'` (40001), MariaDB
with `innodb_snapshot_isolation = ON` (1020; its default from 11.6.2). MySQL has no such
setting: its REPEATABLE READ writes the latest rows, so it has no case here.

Every test checks the exact contents with psycopg/pymysql, the jobs' states, and that no
prepared branch and no staging table is left.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support import (
    assert_exactly,
    connection_args,
    contents,
    events_df,
    hold_apply_lock,
    in_background,
    journaled,
    new_table,
    old_contents,
    released_by_apply_lock,
    seeded_table,
    stage_tables,
    waiting_on_apply_lock,
)

import xasink.protocol.applying as applying
from xasink import CommitProperties, WriterProperties, write_xa
from xasink.errors import PreflightError
from xasink.protocol import sessions


@pytest.fixture
def snapshot_reads(db) -> Iterator[object]:
    """`db`, handing every new session a snapshot that a later write must match; the
    server's setting is restored afterwards. xasink's kept sessions are closed on both
    sides, so that the writes open new ones."""
    if db.kind == "mysql":
        pytest.skip("MySQL's REPEATABLE READ writes the latest rows: no snapshot to break")
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        if db.kind == "postgres":
            from psycopg import sql

            role = sql.Identifier(db.user)
            cursor.execute(
                sql.SQL(
                    "ALTER ROLE {} SET default_transaction_isolation = 'repeatable read'"
                ).format(role)
            )
            undo = sql.SQL("ALTER ROLE {} RESET default_transaction_isolation").format(role)
            probe, expected = "SHOW default_transaction_isolation", "repeatable read"
        else:
            try:
                cursor.execute("SELECT @@GLOBAL.innodb_snapshot_isolation")
            except Exception as exc:  # 1193: a MariaDB before 10.6.18 / 10.11.8 has none
                pytest.skip(f"this server has no innodb_snapshot_isolation ({exc})")
            undo = f"SET GLOBAL innodb_snapshot_isolation = {int(cursor.fetchone()[0])}"
            cursor.execute("SET GLOBAL innodb_snapshot_isolation = ON")
            probe, expected = "SELECT @@innodb_snapshot_isolation", "1"
    sessions.close_all()
    try:
        with db.connect() as conn:  # the premise: a new session of the user gets it
            cursor = conn.cursor()
            cursor.execute(probe)
            assert str(cursor.fetchone()[0]) == expected
        yield db
    finally:
        sessions.close_all()
        with db.admin_connect() as conn:
            conn.cursor().execute(undo)


def table_states(db, table: str) -> list[str]:
    """The states of the jobs that wrote `table`, read independently."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT state FROM xasink_jobs WHERE target_table = %s", (journaled(db, table),)
        )
        return sorted(str(state) for (state,) in cursor.fetchall())


def small_frame(spark, rows: list, schema: str):
    """A cached frame: Spark then knows its size, so the driver writes it itself."""
    df = spark.createDataFrame(rows, schema).cache()
    df.count()
    return df


#: The inputs of the two staged writes: (name, ids).
_INPUTS = (("a", range(0, 30)), ("b", range(20, 60)))


def _expected(mode: str, order: tuple[int, int]) -> dict:
    """The table after both inputs are applied in `order` (indexes into _INPUTS)."""
    table = dict(old_contents()) if mode == "upsert" else {}
    for index in order:
        name, ids = _INPUTS[index]
        if mode == "overwrite":
            table = {}
        table.update({i: (name, 1.0) for i in ids})
    return table


@pytest.mark.mariadb11_ci
def test_one_phase_upserts_into_one_table_take_turns_under_snapshot_reads(spark, snapshot_reads):
    """Two small upserts of one table check their staged keys, then wait for its apply lock
    together (the test holds it until both wait). The second applies once the first has
    committed, onto the rows committed meanwhile: both commit, and the table holds exactly
    both inputs applied one after the other."""
    db = snapshot_reads
    table = seeded_table(db)
    inputs = [
        small_frame(spark, [(i, name, 1.0) for i in ids], "id long, name string, v double")
        for name, ids in _INPUTS
    ]
    args = connection_args(db)
    outcomes = released_by_apply_lock(
        db,
        table,
        [lambda df=df: write_xa(df, table=table, mode="upsert", key="id", **args) for df in inputs],
    )
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert contents(db, table) in (_expected("upsert", (0, 1)), _expected("upsert", (1, 0)))
    assert table_states(db, table) == ["committed"] * 2
    assert db.prepared_transactions() == [] and stage_tables(db) == []


def _beats(db, table: str) -> int:
    """The heartbeats of the job writing `table` (it has one), read independently."""
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT beats FROM xasink_jobs WHERE target_table = %s", (journaled(db, table),)
        )
        return int(cursor.fetchone()[0])


@pytest.mark.mariadb11_ci
def test_a_heartbeat_while_finish_waits_for_the_apply_lock_does_not_fail_it(spark, snapshot_reads):
    """A two-phase overwrite's finish reads its job's row, then waits for the table's apply
    lock (the test holds it until the job has beaten since the wait began): it then
    applies and commits, the table holds exactly its input, and the next staged write
    runs."""
    db = snapshot_reads
    table = seeded_table(db)
    args = connection_args(db) | {"writer_properties": WriterProperties(driver_write_bytes=0)}
    frame = small_frame(spark, [(i, "a", 1.0) for i in range(30)], "id long, name string, v double")
    holder, unlock = hold_apply_lock(db, table)
    try:
        writer, outcome = in_background(
            lambda: write_xa(
                frame,
                table=table,
                mode="overwrite",
                **args,
                commit_properties=CommitProperties(heartbeat_interval=0.2),
            )
        )
        deadline = time.monotonic() + 120
        while waiting_on_apply_lock(db) < 1:
            assert time.monotonic() < deadline, "the writer never reached the apply lock"
            assert writer.is_alive(), outcome
            time.sleep(0.05)
        waiting_since = _beats(db, table)
        while _beats(db, table) == waiting_since:
            assert time.monotonic() < deadline, "the job never beat while it waited"
            time.sleep(0.05)
        holder.cursor().execute(unlock)
    finally:
        holder.close()
    writer.join(240)
    assert not isinstance(outcome[0], BaseException), outcome
    assert contents(db, table) == {i: ("a", 1.0) for i in range(30)}
    assert table_states(db, table) == ["committed"]
    assert db.prepared_transactions() == [] and stage_tables(db) == []
    newer = small_frame(spark, [(i, "c", 2.0) for i in range(5)], "id long, name string, v double")
    write_xa(newer, table=table, mode="overwrite", **args)
    assert contents(db, table) == {i: ("c", 2.0) for i in range(5)}
    assert table_states(db, table) == ["committed"] * 2
    assert db.prepared_transactions() == [] and stage_tables(db) == []


@pytest.mark.mariadb11_ci
def test_a_heartbeat_during_finish_does_not_fail_it_under_snapshot_reads(
    spark, snapshot_reads, monkeypatch
):
    """The job's heartbeat updates its row between `finish`'s first read of that row and
    its conditional UPDATE (the read waits until the server shows a beat): the job is
    committed, exactly once."""
    db = snapshot_reads
    table = new_table(db)
    read_plan = applying.stored_plan
    beats_seen: list[int] = []

    def beats(job_id: str) -> int:
        with db.connect() as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT beats FROM xasink_jobs WHERE job_id = %s", (job_id,))
            return int(cursor.fetchone()[0])

    def read_then_wait_for_a_beat(journal, conn, job_id, staged):
        plan = read_plan(journal, conn, job_id, staged)
        before, deadline = beats(job_id), time.monotonic() + 30
        while beats(job_id) == before:
            assert time.monotonic() < deadline, "no heartbeat came"
            time.sleep(0.05)
        beats_seen.append(before)
        return plan

    monkeypatch.setattr(applying, "stored_plan", read_then_wait_for_a_beat)
    args = connection_args(db)
    write_xa(
        events_df(spark, 100, 2),
        table=table,
        **args,
        writer_properties=WriterProperties(driver_write_bytes=0),
        commit_properties=CommitProperties(heartbeat_interval=0.2),
    )
    assert beats_seen, "finish never read the job's row"
    assert_exactly(db, table, range(100))
    assert table_states(db, table) == ["committed"]
    assert db.prepared_transactions() == []


@pytest.mark.mysql_ci
def test_a_statement_format_binary_log_is_refused_before_anything_is_written(spark, mysql):
    """At READ COMMITTED, InnoDB writes are logged by row only, so a server logging
    statements would refuse every write (1665): preflight says so and how to fix it, and
    nothing is written."""
    import xasink.spark.transaction
    from xasink.driver.check_cache import CheckCache

    table = new_table(mysql)
    with mysql.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format")
        on, previous = cursor.fetchone()
        assert int(on) == 1, "the MySQL test server logs its binary log"
        cursor.execute("SET GLOBAL binlog_format = 'STATEMENT'")
    sessions.close_all()
    try:
        with pytest.MonkeyPatch.context() as patch:  # nothing checked earlier is reused
            patch.setattr(xasink.spark.transaction, "CHECKS", CheckCache())
            with pytest.raises(PreflightError, match=r"binlog_format = 'MIXED'"):
                write_xa(events_df(spark, 10, 1), table=table, **connection_args(mysql))
    finally:
        sessions.close_all()
        with mysql.admin_connect() as conn:
            conn.cursor().execute(f"SET GLOBAL binlog_format = '{previous}'")
    assert_exactly(mysql, table, [])
    assert mysql.prepared_transactions() == []


def test_a_staged_write_behind_a_decided_job_that_failed_to_finish_says_to_retry(spark, db):
    """A decided staged job whose finish failed on a passing cause (its apply-lock wait
    timed out) stays decided. The next staged write on the table fails its preflight with
    the reason and says to run it again, not to abandon the job; once the cause is gone,
    the next write finishes that job first, then applies its own rows."""
    from xasink.errors import CommitError

    table = seeded_table(db)
    args = connection_args(db) | {
        "writer_properties": WriterProperties(driver_write_bytes=0),
        "commit_properties": CommitProperties(lock_wait_timeout=1),
    }
    schema = "id long, name string, v double"
    first, second = (
        small_frame(spark, [(i, name, 1.0) for i in ids], schema) for name, ids in _INPUTS
    )
    holder, unlock = hold_apply_lock(db, table)
    try:
        with pytest.raises(CommitError, match="xasink recover"):
            write_xa(first, table=table, mode="overwrite", **args)
        assert table_states(db, table) == ["committing"]
        with pytest.raises(PreflightError, match="Run the write again") as refused:
            write_xa(second, table=table, mode="overwrite", **args)
        assert "finishing it failed just now" in str(refused.value)
        assert contents(db, table) == old_contents()
        holder.cursor().execute(unlock)
    finally:
        holder.close()
    write_xa(second, table=table, mode="overwrite", **args)
    assert contents(db, table) == {i: ("b", 1.0) for i in range(20, 60)}
    assert table_states(db, table) == ["committed"] * 2
    assert db.prepared_transactions() == [] and stage_tables(db) == []
