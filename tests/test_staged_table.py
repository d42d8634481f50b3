"""A staged apply (overwrite, upsert, merge) stands on the table as it is when it applies:

* a column type changed since the staging table was built (a migration between two writes,
  within the check cache's minute, or during a long job) is refused when the change could
  alter a value, with nothing applied; a widening that keeps every value goes ahead;
* two spellings of one table (`t` and `public.t`, `db.t` and `t`) are one table: their
  applies take one lock and never leave the union of two overwrites.

One-phase (a small frame, one local transaction) and two-phase (`driver_write_bytes=0`).
Rows are read with psycopg/pymysql; nothing may be left prepared or staged.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pytest
from support import (
    assert_clean,
    cli,
    connection_args,
    contents,
    in_background,
    kill_driver_at,
    mode_rows,
    released_together,
    rows_in,
    run_sql,
    seeded_table,
    xasink_writer,
)

from xasink import WriterProperties, write_xa
from xasink.errors import SchemaMismatchError

PHASES = {
    "one_phase": {},
    "two_phase": {"writer_properties": WriterProperties(driver_write_bytes=0)},
}
UTC = dt.timezone.utc
UPSERT = {"xasink.mode": "upsert", "key": "id"}


def small_frame(spark, rows: list, schema: str):
    """A cached frame: Spark knows its size, so the driver may write it itself."""
    df = spark.createDataFrame(rows, schema).cache()
    df.count()
    return df


def _retyped_table(db) -> str:
    table = f"rt_{uuid.uuid4().hex[:10]}"
    at = "timestamptz" if db.kind == "postgres" else "datetime(6)"
    amount = "double precision" if db.kind == "postgres" else "double"
    run_sql(
        db, f"CREATE TABLE {table} (id bigint PRIMARY KEY, amount {amount}, at {at})", admin=False
    )
    return table


@pytest.mark.parametrize("phases", list(PHASES))
def test_a_staged_apply_refuses_a_column_type_changed_since_its_stage(spark, db, phases):
    """An upsert planned from the description of a minute ago (the check cache) meets a
    table whose double column became bigint and whose timestamp became a date: applying
    would round 1.5 to 2 and drop the time of day. It is refused, nothing changes."""
    table = _retyped_table(db)
    args = {"table": table, "mode": "upsert", "key": "id", **PHASES[phases]}
    schema = "id long, amount double, at timestamp"
    first = [(1, 0.5, dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC))]
    write_xa(small_frame(spark, first, schema), **args, **connection_args(db))
    if db.kind == "postgres":
        alter = (
            f"ALTER TABLE {table} ALTER COLUMN amount TYPE bigint USING amount::bigint, "
            "ALTER COLUMN at TYPE date"
        )
    else:
        alter = f"ALTER TABLE {table} MODIFY amount bigint, MODIFY at date"
    run_sql(db, alter, admin=False)
    before = rows_in(db, table)
    second = [(1, 1.5, dt.datetime(2024, 5, 1, 23, 59, tzinfo=UTC))]
    with pytest.raises(SchemaMismatchError) as raised:
        write_xa(small_frame(spark, second, schema), **args, **connection_args(db))
    message = str(raised.value)
    assert "'amount'" in message and "nothing" in message.lower(), message
    assert "Run the write again" in message, message
    assert rows_in(db, table) == before
    assert_clean(db)


@pytest.mark.parametrize("phases", list(PHASES))
def test_a_staged_apply_goes_ahead_after_a_widening(spark, db, phases):
    """int to bigint and varchar(10) to varchar(20) keep every value: the next upsert,
    planned from the earlier description, applies."""
    table = f"wd_{uuid.uuid4().hex[:10]}"
    run_sql(
        db, f"CREATE TABLE {table} (id bigint PRIMARY KEY, n integer, s varchar(10))", admin=False
    )
    args = {"table": table, "mode": "upsert", "key": "id", **PHASES[phases]}
    schema = "id long, n int, s string"
    write_xa(small_frame(spark, [(1, 1, "a")], schema), **args, **connection_args(db))
    if db.kind == "postgres":
        alter = f"ALTER TABLE {table} ALTER COLUMN n TYPE bigint, ALTER COLUMN s TYPE varchar(20)"
    else:
        alter = f"ALTER TABLE {table} MODIFY n bigint, MODIFY s varchar(20)"
    run_sql(db, alter, admin=False)
    rows = [(1, 2, "b"), (2, 3, "c")]
    result = write_xa(small_frame(spark, rows, schema), **args, **connection_args(db))
    assert result.rows == 2
    assert rows_in(db, table) == [(1, 2, "b"), (2, 3, "c")]
    assert_clean(db)


@pytest.mark.ci_postgres
def test_a_format_upsert_refuses_a_column_type_changed_since_its_stage(spark, db):
    """format("xasink") plans in a long-lived worker that remembers descriptions too."""
    table = _retyped_table(db)
    schema = "id long, amount double, at timestamp"
    first = [(1, 0.5, dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC))]
    xasink_writer(small_frame(spark, first, schema), db, table, **UPSERT).save()
    if db.kind == "postgres":
        alter = f"ALTER TABLE {table} ALTER COLUMN amount TYPE bigint USING amount::bigint"
    else:
        alter = f"ALTER TABLE {table} MODIFY amount bigint"
    run_sql(db, alter, admin=False)
    before = rows_in(db, table)
    second = [(1, 1.5, dt.datetime(2024, 5, 1, 23, 59, tzinfo=UTC))]
    with pytest.raises(Exception, match=r"'amount' double"):
        xasink_writer(small_frame(spark, second, schema), db, table, **UPSERT).save()
    assert rows_in(db, table) == before
    assert_clean(db)


def _waiting_for_metadata_lock(db, statement: str) -> bool:
    """Whether a session runs `statement` (a prefix of it) waiting for a metadata lock."""
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT count(*) FROM information_schema.processlist "
            "WHERE state = 'Waiting for table metadata lock' AND info LIKE %s",
            (statement.replace("_", "\\_") + "%",),
        )
        return int(cursor.fetchone()[0]) > 0


def _metadata_locks(db, table: str) -> list[str]:
    """The metadata lock types granted on `table` (MySQL's performance_schema)."""
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT lock_type FROM performance_schema.metadata_locks WHERE object_type = "
            "'TABLE' AND object_schema = DATABASE() AND object_name = %s AND lock_status = "
            "'GRANTED'",
            (table,),
        )
        return [str(row[0]) for row in cursor.fetchall()]


@pytest.mark.mysql_ci
def test_an_alter_between_the_type_check_and_the_apply_waits_for_its_commit(mysql_family):
    """The apply's type check locks the target's definition for writing: an ALTER issued
    between the check and the apply's DELETE/INSERT queues behind the apply, which then
    writes and commits; the ALTER runs after it. (A read-only lock there would let the
    queued ALTER block the apply's writes: a metadata-lock deadlock the apply loses.)"""
    from support import spec_for

    from xasink.dialects import get_dialect
    from xasink.protocol.connecting import open_journal
    from xasink.spec import TableRef
    from xasink.tables.retyping import check_types

    db = mysql_family
    table = f"ml_{uuid.uuid4().hex[:10]}"
    run_sql(
        db,
        f"CREATE TABLE {table} (id bigint PRIMARY KEY, v int)",
        f"INSERT INTO {table} VALUES (1, 1)",
        admin=False,
    )
    alter = f"ALTER TABLE {table} ADD COLUMN w int"

    def run_alter() -> None:
        with db.connect() as conn:
            conn.cursor().execute("SET SESSION lock_wait_timeout = 60")
            conn.cursor().execute(alter)

    session, _ = open_journal(spec_for(db), None)
    with session:
        conn = session.connection
        conn.setAutoCommit(False)
        try:
            check_types(conn, get_dialect("mysql"), TableRef(table), ["id", "v"], ["bigint", "int"])
            if db.kind == "mysql":  # MySQL shows the lock itself
                assert _metadata_locks(db, table) == ["SHARED_WRITE"]
            thread, outcome = in_background(run_alter)
            deadline = time.monotonic() + 30
            while not _waiting_for_metadata_lock(db, alter):
                assert thread.is_alive() and time.monotonic() < deadline, outcome or "no wait"
                time.sleep(0.05)  # polling the server's own state, not waiting for it
            conn.createStatement().execute(f"DELETE FROM {table} WHERE id = 1")
            conn.createStatement().execute(f"INSERT INTO {table} (id, v) VALUES (2, 2)")
            assert _waiting_for_metadata_lock(db, alter) and thread.is_alive()
            conn.commit()
        finally:
            conn.setAutoCommit(True)
    thread.join(60)
    assert outcome == [None], outcome
    assert rows_in(db, table) == [(2, 2, None)]  # the apply's row, then the ALTER's column


# -- two spellings of one table ---------------------------------------------------------
def _waiting(db) -> int:
    """The test user's sessions waiting for a lock now: a row lock, or xasink's apply lock
    (an advisory lock, or a MySQL named lock)."""
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        if db.kind == "postgres":
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND usename = %s",
                (db.user,),
            )
            return int(cursor.fetchone()[0])
        # MariaDB's INNODB_TRX may not list a row-lock waiter at READ COMMITTED: an apply's
        # DELETE still running after a second waits (the test holds a row it needs).
        cursor.execute(
            "SELECT count(*) FROM information_schema.processlist WHERE user = %s AND "
            "command = 'Query' AND (state LIKE %s OR (time >= 1 AND info LIKE %s))",
            (db.user, "%user lock%", "DELETE FROM%"),
        )
        return int(cursor.fetchone()[0])


@pytest.mark.mariadb11_ci
@pytest.mark.parametrize("phases", list(PHASES))
def test_overwrites_of_two_spellings_of_one_table_never_leave_their_union(spark, db, phases):
    """Two overwrites name one table differently (PostgreSQL `t` and `public.t`; MySQL
    `db.t` and `t`) and reach their applies together (the test holds a row of the table
    until both wait): they apply one after the other, so the table holds exactly one
    input, never both."""
    table = seeded_table(db)
    qualified = f"public.{table}" if db.kind == "postgres" else f"{db.database}.{table}"
    inputs = [
        (
            spelling,
            small_frame(spark, [(i, name, 1.0) for i in ids], "id long, name string, v double"),
        )
        for spelling, name, ids in ((table, "a", range(0, 30)), (qualified, "b", range(30, 60)))
    ]
    holder = db.connect(autocommit=False)
    try:
        cursor = holder.cursor()
        if db.kind != "postgres":
            cursor.execute("START TRANSACTION")
        cursor.execute(f"SELECT id FROM {table} WHERE id = 0 FOR UPDATE")
        outcomes = released_together(
            [
                lambda s=spelling, df=df: write_xa(
                    df, table=s, mode="overwrite", **PHASES[phases], **connection_args(db)
                )
                for spelling, df in inputs
            ],
            lambda: _waiting(db),
            holder.commit,
            "the row lock",
        )
    finally:
        holder.close()
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    found = contents(db, table)
    assert found in ({i: ("a", 1.0) for i in range(30)}, {i: ("b", 1.0) for i in range(30, 60)})
    assert_clean(db)


def test_a_decided_staged_job_under_another_spelling_applies_before_a_newer_write(spark, db):
    """A decided upsert of `public.t` (MySQL: `db.t`) whose driver died before its apply
    is finished before a newer upsert of `t` applies, never after it: staged jobs on one
    table apply in decision order, however each names the table."""
    table = seeded_table(db)
    qualified = f"public.{table}" if db.kind == "postgres" else f"{db.database}.{table}"
    kill_driver_at(db, qualified, "before_finish", mode="upsert")
    _, _, _, expected = mode_rows("upsert")
    newest = [(i, "newest", 7.0) for i in range(40, 80)]
    write_xa(
        small_frame(spark, newest, "id long, name string, v double"),
        table=table,
        mode="upsert",
        key="id",
        **connection_args(db),
    )
    assert cli(db, "--grace", "0").returncode == 0  # whatever was left, finished now
    expected.update({i: (n, v) for i, n, v in newest})
    assert contents(db, table) == expected
    assert_clean(db)
