"""Schema evolution (`schema_mode="merge"`): the frame's columns the table lacks are added,
nullable, before any branch opens, and the rows land in them; two writers adding one
column both succeed; a column of another type, a key column or no schema_mode is refused
with the table as it was; a job that fails after the ALTER leaves only the empty column;
an ALTER held up by a prepared transaction gives up within the lock wait, naming it.
Tables and rows are read with psycopg/pymysql."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import pytest
from pyspark.sql import functions as F
from servers import DbServer
from support import (
    ROWS,
    assert_clean,
    assert_exactly,
    contents,
    database_of,
    events_df,
    file_stream,
    in_background,
    json_files,
    kill_driver_at,
    mode_case,
    new_table,
    run_sql,
    seeded_table,
    start_foreach_stream,
    stream_files,
    until,
    xasink_prepared,
    xasink_stream,
    xasink_writer,
)

import xasink.driver.preflight
from xasink import (
    CommitProperties,
    ConfigurationError,
    PreflightError,
    SchemaMismatchError,
    WriteError,
    WriterProperties,
    foreach_batch,
    transaction,
    write_xa,
)
from xasink._testing.faults import Fault, held, injected, release

#: Every row through the executors' branches.
TASKS = WriterProperties(driver_write_bytes=0, max_branches=2)


def columns_of(db: DbServer, table: str) -> dict[str, tuple[str, str, Any]]:
    """The table's columns: name -> (nullable YES/NO, data type, character length)."""
    here = "current_schema()" if db.kind == "postgres" else "DATABASE()"
    rows = run_sql(
        db,
        "SELECT column_name, is_nullable, data_type, character_maximum_length FROM "
        f"information_schema.columns WHERE table_schema = {here} AND table_name = '{table}'",
        admin=False,
    )
    return {str(r[0]): (str(r[1]), str(r[2]).lower(), r[3]) for r in rows}


def with_extra(df: Any) -> Any:
    """`df` with a string column `extra` ('x<id>') and an int column `score` (2 * id)."""
    return df.withColumn("extra", F.concat(F.lit("x"), F.col("id").cast("string"))).withColumn(
        "score", (F.col("id") * 2).cast("int")
    )


def old_rows(db: DbServer, table: str, ids: range) -> None:
    values = ", ".join(f"({i}, 'old')" for i in ids)
    run_sql(db, f"INSERT INTO {table} (id, name) VALUES {values}", admin=False)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_batch_write_adds_the_new_columns_and_its_rows_land_in_them(spark, db, caplog):
    table = new_table(db)
    old_rows(db, table, range(3))
    before = columns_of(db, table)
    caplog.set_level(logging.INFO, logger="xasink")
    write_xa(
        with_extra(events_df(spark, 12, 2).where("id >= 3")),
        database_of(db),
        table,
        schema_mode="merge",
        create_table_column_types={"extra": "VARCHAR(40)"},
        writer_properties=TASKS,
    )
    assert_exactly(db, table, range(12))
    columns = columns_of(db, table)
    varchar = "character varying" if db.kind == "postgres" else "varchar"
    assert columns == {
        **before,
        "extra": ("YES", varchar, 40),
        "score": ("YES", "integer" if db.kind == "postgres" else "int", None),
    }
    rows = run_sql(db, f"SELECT id, extra, score FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, None, None) for i in range(3)] + [(i, f"x{i}", 2 * i) for i in range(3, 12)]
    said = [r.getMessage() for r in caplog.records if "schema_mode='merge' added" in r.message]
    line = f"added column(s) 'extra', 'score' to table {table} (nullable)"
    assert said == [f"xasink: schema_mode='merge' {line}"]


@pytest.mark.ci_one_server
def test_a_staged_upsert_adds_the_column_to_its_staging_and_target_tables(spark, db):
    """An upsert through tasks stages in a table typed from the evolved description, and
    its apply (which checks the target's types again) writes the new column."""
    table = seeded_table(db)
    frame, options, expected = mode_case(spark, "upsert", 2)
    frame = frame.withColumn("extra", F.concat(F.lit("u"), F.col("id").cast("string")))
    write_xa(frame, database_of(db), table, **options, schema_mode="merge", writer_properties=TASKS)
    assert contents(db, table) == expected
    rows = run_sql(db, f"SELECT id, extra FROM {table} WHERE extra IS NOT NULL", admin=False)
    assert sorted(rows) == [(i, f"u{i}") for i in range(50, 350)]
    assert_clean(db)


@pytest.mark.ci_one_server
def test_the_format_option_adds_them_too(spark, db):
    table = new_table(db)
    frame = with_extra(events_df(spark, 6, 1))
    with pytest.raises(Exception, match=r"SchemaMismatchError.*xasink.schemaMode=merge"):
        xasink_writer(frame, db, table).save()  # the default refuses
    assert set(columns_of(db, table)) == {"id", "name", "v", "n", "ts"}
    xasink_writer(frame, db, table, **{"xasink.schemaMode": "merge"}).save()
    assert_exactly(db, table, range(6))
    rows = run_sql(db, f"SELECT id, extra, score FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, f"x{i}", 2 * i) for i in range(6)]


@pytest.mark.ci_one_server
def test_a_stream_whose_second_batch_brings_a_column(spark, db, tmp_path):
    """The stream's checked columns are remembered between its batches (check_cache): a
    batch with a column they lack reads the table again and adds it."""
    table = new_table(db)
    stream_files(tmp_path / "in", batches=3, per_batch=4)
    write = foreach_batch(database_of(db), table, sink_id=f"s-{table}", schema_mode="merge")

    def evolving(df: Any, batch_id: int) -> None:
        write(df.withColumn("extra", F.lit(f"b{batch_id}")) if batch_id else df, batch_id)

    query = start_foreach_stream(spark, tmp_path / "in", tmp_path / "checkpoint", evolving)
    query.awaitTermination(180)
    assert query.exception() is None
    assert_exactly(db, table, range(12))
    rows = run_sql(db, f"SELECT id, extra FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, None if i < 4 else f"b{i // 4}") for i in range(12)]


@pytest.mark.full_only  # two streaming queries (~14 s); foreach_batch's case runs in make test
def test_a_format_stream_restarted_with_a_new_column(spark, postgres, tmp_path):
    """format("xasink")'s planner remembers the checked columns too: the query run again on
    its checkpoint with a wider schema adds the column at its next batch."""
    table, source = new_table(postgres), tmp_path / "in"
    batches = [
        [{"id": i, "name": "n", "v": 0.5, "extra": f"e{i}"} for i in ids]
        for ids in (range(3), range(3, 6))
    ]

    def run(schema: str) -> None:
        stream = xasink_stream(file_stream(spark, source, schema), postgres, table, tmp_path / "cp")
        query = stream.option("xasink.schemaMode", "merge").trigger(availableNow=True).start()
        query.awaitTermination(180)
        assert query.exception() is None

    json_files(source, batches[:1])
    run("id long, name string, v double")
    json_files(source, batches)
    run("id long, name string, v double, extra string")
    assert_exactly(postgres, table, range(6))
    rows = run_sql(postgres, f"SELECT id, extra FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, None if i < 3 else f"e{i}") for i in range(6)]


@pytest.mark.mysql_ci
def test_two_writers_adding_one_column_at_once_both_succeed(spark, db, monkeypatch):
    """Both writers read the table without the columns before either adds one (a barrier
    just before the ALTERs): each column is added by one of them, and the other meets the
    server's duplicate-column error (PostgreSQL 42701, MySQL and MariaDB 1060), reads the
    table again and writes."""
    table = new_table(db)
    barrier, added = threading.Barrier(2, timeout=120), []
    adding = xasink.driver.preflight.add_columns

    def together(*args: Any, **kwargs: Any) -> Any:
        barrier.wait()
        done = adding(*args, **kwargs)
        added.append(done[0])
        return done

    monkeypatch.setattr(xasink.driver.preflight, "add_columns", together)
    frames = [with_extra(events_df(spark, 20, 1).where(f"id % 2 = {i}")) for i in (0, 1)]
    runs = [
        in_background(lambda f=f: write_xa(f, database_of(db), table, schema_mode="merge"))
        for f in frames
    ]
    for thread, _ in runs:
        thread.join(240)
    assert [type(outcome[0]).__name__ for _, outcome in runs] == ["WriteResult"] * 2, runs
    # Each column added once, by one writer or the other (in one statement each): the rest
    # met it there.
    assert len(added) == 2 and sorted(added[0] + added[1]) == ["extra", "score"], added
    assert_exactly(db, table, range(20))
    rows = run_sql(db, f"SELECT id, extra FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, f"x{i}") for i in range(20)]


@pytest.mark.ci_one_server
def test_what_cannot_be_added_is_refused_and_the_table_stays_as_it_was(spark, db):
    table = new_table(db)
    before, merge = columns_of(db, table), {"schema_mode": "merge"}
    frame = with_extra(events_df(spark, 5, 1))
    with pytest.raises(SchemaMismatchError, match="schema_mode='merge'") as refused:
        write_xa(frame, database_of(db), table)  # no schema_mode: refused as ever
    assert "'extra', 'score'" in str(refused.value)
    retyped = frame.withColumn("n", F.lit("not a number"))
    with pytest.raises(SchemaMismatchError, match="column 'n'"):
        write_xa(retyped, database_of(db), table, **merge)
    keyed = frame.withColumn("k", F.col("id"))
    with pytest.raises(SchemaMismatchError, match=r"key column\(s\) 'k' are not in table"):
        write_xa(keyed, database_of(db), table, mode="upsert", key="k", **merge)
    assert columns_of(db, table) == before
    assert_exactly(db, table, [])


@pytest.mark.ci_one_server
def test_a_job_that_fails_after_adding_leaves_only_the_empty_column(spark, db):
    table = new_table(db)
    old_rows(db, table, range(100, 103))
    frame = with_extra(events_df(spark, 5, 1))
    fault = Fault("after_rows", "raise", attempt_number=None)
    with injected(fault), pytest.raises(WriteError, match="InjectedFault"):
        write_xa(frame, database_of(db), table, schema_mode="merge")
    assert {"extra", "score"} <= set(columns_of(db, table))
    assert_exactly(db, table, range(100, 103))
    rows = run_sql(db, f"SELECT extra, score FROM {table}", admin=False)
    assert rows == [(None, None)] * 3


@contextlib.contextmanager
def prepared_insert(db: DbServer, table: str, gid: str) -> Any:
    """A prepared transaction that inserted into `table` (it holds a lock on it), rolled
    back at the block's end."""
    conn = db.admin_connect()
    try:
        cursor = conn.cursor()
        if db.kind == "postgres":
            conn.autocommit = True
            cursor.execute("BEGIN")
            cursor.execute(f"INSERT INTO {table} (id) VALUES (-1)")
            cursor.execute(f"PREPARE TRANSACTION '{gid}'")
        else:
            cursor.execute(f"XA START '{gid}'")
            cursor.execute(f"INSERT INTO {table} (id) VALUES (-1)")
            cursor.execute(f"XA END '{gid}'")
            cursor.execute(f"XA PREPARE '{gid}'")
        yield
    finally:
        cursor.execute(f"{'ROLLBACK PREPARED' if db.kind == 'postgres' else 'XA ROLLBACK'} '{gid}'")
        conn.close()


@pytest.mark.mysql_ci
def test_an_add_held_up_by_a_prepared_transaction_gives_up_in_the_lock_wait(spark, db):
    table, gid = new_table(db), "held-by-a-test"
    with prepared_insert(db, table, gid), pytest.raises(PreflightError) as refused:
        write_xa(
            with_extra(events_df(spark, 5, 1)),
            database_of(db),
            table,
            schema_mode="merge",
            commit_properties=CommitProperties(lock_wait_timeout=1.5),  # bound as 1 s
        )
    message = str(refused.value)
    assert "waited lock_wait_timeout (1 s," in message and "Nothing was written" in message
    named = "held by: prepared transaction " if db.kind == "postgres" else "any of which may "
    assert named in message and f"{gid}" in message, message
    assert "extra" not in columns_of(db, table)
    assert_exactly(db, table, [])


def test_a_transaction_adds_columns_in_each_database(spark, postgres, mariadb):
    """A later write of a transaction evolves its table on the coordinator, and a write
    into another database (a participant) evolves its table in that database."""
    first, second, elsewhere = new_table(postgres), new_table(postgres), new_table(mariadb)
    with transaction(database_of(postgres)) as tx:
        tx.write(events_df(spark, 4, 1), first)
        tx.write(with_extra(events_df(spark, 4, 1)), second, schema_mode="merge")
        tx.write(
            with_extra(events_df(spark, 4, 1)),
            elsewhere,
            database=database_of(mariadb),
            schema_mode="merge",
        )
    assert_exactly(postgres, first, range(4))
    for server, table in ((postgres, second), (mariadb, elsewhere)):
        assert_exactly(server, table, range(4))
        rows = run_sql(server, f"SELECT id, extra FROM {table} ORDER BY id", admin=False)
        assert rows == [(i, f"x{i}") for i in range(4)]


@pytest.mark.full_only  # a driver process of its own (~20 s); the in-process case runs in CI
def test_a_killed_jobs_prepared_branches_are_resolved_before_the_add(spark, db):
    """A driver killed with its branches prepared leaves them holding the table: the next
    write's recovery resolves them before its ALTER (which they would hold up for good)."""
    table = new_table(db)
    kill_driver_at(db, table, "before_decision")
    assert xasink_prepared(db)
    commit = CommitProperties(grace=0, lock_wait_timeout=2)
    frame = with_extra(events_df(spark, 5, 1)).withColumn("id", F.col("id") + ROWS)
    write_xa(frame, database_of(db), table, schema_mode="merge", commit_properties=commit)
    assert "extra" in columns_of(db, table)
    assert_exactly(db, table, range(ROWS, ROWS + 5))  # the killed job's rows rolled back
    assert_clean(db)


@pytest.mark.ci_one_server
def test_new_columns_are_added_in_one_statement_or_none_is(spark, db, caplog):
    """All the new columns in one ALTER TABLE: when one of them cannot be added (here a type
    the server has not), none is, and the table stays as it was."""
    table = new_table(db)
    with pytest.raises(PreflightError) as refused:
        write_xa(
            with_extra(events_df(spark, 5, 1)),
            database_of(db),
            table,
            schema_mode="merge",
            create_table_column_types="score NO_SUCH_TYPE",
        )
    assert "Nothing was written" in str(refused.value), refused.value
    assert not {"extra", "score"} & set(columns_of(db, table))
    caplog.set_level(logging.WARNING, logger="xasink")
    write_xa(with_extra(events_df(spark, 5, 1)), database_of(db), table, schema_mode="merge")
    assert "added column(s) 'extra', 'score'" in caplog.text
    assert_exactly(db, table, range(5))


@pytest.mark.ci_one_server
def test_a_table_written_twice_in_a_transaction_is_refused_before_its_alter(spark, db):
    """The second write into a table of one transaction is refused before schema evolution
    alters it (behind the transaction's own prepared branches, that ALTER would wait the
    whole lock wait): the table keeps its columns."""
    table = new_table(db)
    commit = CommitProperties(lock_wait_timeout=3)
    with (
        pytest.raises(ConfigurationError, match="written twice") as refused,
        transaction(database_of(db), commit_properties=commit, per_branch_appends=True) as tx,
    ):
        tx.write(events_df(spark, 4, 1), table)
        tx.write(with_extra(events_df(spark, 4, 1)), table, schema_mode="merge")
    assert "extra" not in columns_of(db, table), refused.value
    assert_exactly(db, table, [])
    assert_clean(db)


def test_a_silent_jobs_prepared_branches_are_resolved_before_the_add(spark, db):
    """The same in one process (cheaper): a job held before its decision, silent past the
    next write's grace, has its prepared branches rolled back before that write's ALTER."""
    table = new_table(db)
    silent = CommitProperties(heartbeat_interval=60.0)
    with injected(Fault("before_decision", "hold", attempt_number=None)) as (fault,):
        first, outcome = in_background(
            lambda: write_xa(
                events_df(spark, 6, 2),
                database_of(db),
                table,
                writer_properties=TASKS,
                commit_properties=silent,
            )
        )
        until(lambda: held(fault) or not first.is_alive(), "the first job held", 120)
        assert xasink_prepared(db), outcome
        commit = CommitProperties(grace=0, lock_wait_timeout=2)
        frame = with_extra(events_df(spark, 5, 1)).withColumn("id", F.col("id") + 100)
        write_xa(frame, database_of(db), table, schema_mode="merge", commit_properties=commit)
        release(fault)
        first.join(240)
    assert outcome and isinstance(outcome[0], Exception), outcome  # it was aborted
    assert "extra" in columns_of(db, table)
    assert_exactly(db, table, range(100, 105))
    assert_clean(db)
