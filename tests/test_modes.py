"""Write modes (append, overwrite, upsert, merge) stay exactly-once, on both databases.

Every test starts from the same seeded keyed table and checks its exact contents with
psycopg/pymysql, that no prepared branch is left, and that no staging table is left.
Keys overlap the old rows, so branches that locked target rows would wait on each other.
"""

from __future__ import annotations

import json
import uuid

import pytest
from support import (
    KEYED_DDL,
    cli,
    connection_args,
    contents,
    job_states,
    journal_session,
    kill_driver_at,
    latest_job_state,
    mode_case,
    mode_rows,
    old_contents,
    run_sql,
    seeded_table,
    stage_tables,
)
from test_exactly_once import failed_tasks

from xasink import WriterProperties, write_xa
from xasink._testing.faults import Fault, injected
from xasink.errors import InputDataError, PreflightError, SchemaMismatchError
from xasink.protocol.branches import BranchOps

MODES = ["append", "overwrite", "upsert", "merge"]
STAGED = MODES[1:]


def write(spark, db, table, df, faults=(), **options):
    group = f"xasink-test-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "xasink mode test")
    with injected(*faults):
        result = write_xa(df, table=table, **options, **connection_args(db))
    return result, failed_tasks(spark, group)


def assert_clean(db) -> None:
    assert db.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(db) == [], "a staging table was left behind"


@pytest.mark.mysql_ci
@pytest.mark.parametrize("mode", MODES)
def test_mode_writes_exact_contents(spark, db, mode):
    table = seeded_table(db)
    df, options, expected = mode_case(spark, mode)
    result, failures = write(spark, db, table, df, **options)
    assert contents(db, table) == expected
    assert (result.mode, result.created, failures) == (mode, False, 0)
    # Staged or not, the rows go through the bulk path.
    bulk_path = {"postgres": "copy-binary", "mysql": "load-data"}[db.dialect]
    assert result.load_paths == (bulk_path,)
    assert job_states(db)[result.job_id] == "committed"
    assert_clean(db)


@pytest.mark.ci_one_server
@pytest.mark.parametrize("mode", MODES)
def test_mode_survives_first_attempt_failures(spark, db, mode):
    """Every partition's first attempt raises after writing its rows; the retries win."""
    table = seeded_table(db)
    df, options, expected = mode_case(spark, mode)
    fault = Fault("after_rows", "raise", partition=None, attempt_number=0)
    tasks = {
        "writer_properties": WriterProperties(driver_write_bytes=0),
        **options,
    }  # a small frame: make tasks write it
    result, failures = write(spark, db, table, df, faults=[fault], **tasks)
    assert failures >= 1, "the injected fault did not fail a task"
    assert contents(db, table) == expected
    assert job_states(db)[result.job_id] == "committed"
    assert_clean(db)


@pytest.mark.ci_one_server
@pytest.mark.parametrize(
    ("mode", "point"),
    [
        ("append", "before_decision"),
        ("overwrite", "after_first_commit"),
        ("upsert", "before_decision"),
        ("upsert", "before_finish"),
        ("merge", "after_first_commit"),
    ],
)
def test_mode_driver_kill_then_recover_is_old_or_new(db, mode, point):
    """SIGKILL the driver at `point`: readers see the old contents (a staged mode touches
    the table only in its final transaction); `xasink recover` then leaves the old contents
    (no decision) or applies the new (decided), never a mix."""
    table = seeded_table(db)
    kill_driver_at(db, table, point, mode)
    assert contents(db, table) == old_contents()
    assert db.prepared_transactions() != [] or point == "before_finish"

    done = cli(db, "--grace", "0", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    actions = {a["action"] for a in json.loads(done.stdout)["actions"]}
    new = mode_rows(mode)[3]
    if point == "before_decision":
        assert contents(db, table) == old_contents()
        assert latest_job_state(db) == "aborted"
    else:
        assert contents(db, table) == new
        assert latest_job_state(db) == "committed"
        assert "applied" in actions
    assert_clean(db)


def test_duplicate_keys_without_order_are_named(spark, db):
    table = seeded_table(db)
    rows = [(i, "new", 1.0) for i in range(200)] + [(7, "again", 2.0), (150, "again", 2.0)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    with pytest.raises(InputDataError, match=r"duplicate key.*id=7.*id=150|id=150.*id=7"):
        write(spark, db, table, df, mode="upsert", key=["id"])
    assert contents(db, table) == old_contents()
    assert latest_job_state(db) == "aborted"
    assert_clean(db)


def test_unknown_op_values_are_named(spark, db):
    table = seeded_table(db)
    rows = [(1, "x", 1.0, "insert"), (2, "y", 1.0, "upsert")]
    df = spark.createDataFrame(rows, "id long, name string, v double, op string")
    with pytest.raises(InputDataError, match=r"unknown op value.*'upsert'"):
        write(spark, db, table, df, mode="merge", key="id", op="op")
    assert contents(db, table) == old_contents()
    assert_clean(db)


def test_upsert_needs_a_unique_key(spark, db):
    table = f"nokey_{uuid.uuid4().hex[:8]}"
    with db.connect() as conn:
        conn.cursor().execute(KEYED_DDL[db.dialect].format(t=table).replace(" PRIMARY KEY", ""))
    df = spark.createDataFrame([(1, "x", 1.0)], "id long, name string, v double")
    with pytest.raises(
        SchemaMismatchError, match=r"on \(id\), but .* no primary key or unique index"
    ):
        write(spark, db, table, df, mode="upsert", key=["id"])
    assert_clean(db)


def test_refused_apply_aborts_and_leaves_the_table_unchanged(spark, db):
    """A CHECK the staging table does not have refuses a row at apply time: the job ends
    aborted, the target unchanged, instead of decided-but-stuck."""
    table = seeded_table(db)
    with db.connect() as conn:
        conn.cursor().execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pos CHECK (v >= 0)")
    rows = [(i, "new", 1.0) for i in range(50)] + [(77, "bad", -5.0)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(3)
    with pytest.raises(InputDataError, match="refused the rows"):
        write(spark, db, table, df, mode="upsert", key="id")
    assert contents(db, table) == old_contents()
    assert latest_job_state(db) == "aborted"
    assert_clean(db)


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_create_if_missing_makes_the_key_the_primary_key(spark, db, mode):
    table = f"made_{uuid.uuid4().hex[:8]}"
    df, options, _ = mode_case(spark, "upsert")
    if mode == "append":
        df, options = df.drop("seq").where("name = 'new'"), {"key": ["id"]}
    result, _ = write(spark, db, table, df, **options)
    assert result.created
    assert contents(db, table) == {i: ("new", i * 2.0) for i in range(50, 350)}
    with db.connect() as conn, pytest.raises(Exception, match=r"(?i)duplicate"):
        conn.cursor().execute(f"INSERT INTO {table} (id, name, v) VALUES (50, 'dup', 0)")
    assert_clean(db)


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_columns_named_with_a_backtick_or_a_dot_are_written(spark, db, mode):
    """PySpark's mapInArrow misreads a name holding a backtick or a dot: such frames cross it
    by position, and the upsert's key partitioning quotes the key as Spark does (two branches)."""
    table = f"tick_{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 40, numPartitions=2).selectExpr("id AS `k``ey`", "id * 2 AS `v.al`")
    options = {"key": ["k`ey"]} if mode == "upsert" else {}
    tasks = WriterProperties(driver_write_bytes=0)
    write_xa(df, table=table, mode=mode, writer_properties=tasks, **connection_args(db), **options)
    quoted = '"k`ey"' if db.kind == "postgres" else "`k``ey`"
    rows = run_sql(db, f"SELECT {quoted} FROM {table} ORDER BY 1")
    assert [r[0] for r in rows] == list(range(40))
    assert_clean(db)


def test_create_never_refuses_a_missing_table(spark, db):
    df = spark.createDataFrame([(1, "x", 1.0)], "id long, name string, v double")
    with pytest.raises(PreflightError, match="does not exist"):
        write(spark, db, f"absent_{uuid.uuid4().hex[:8]}", df, create="never")


def test_failure_after_create_leaves_an_empty_table(spark, db):
    table = f"made_{uuid.uuid4().hex[:8]}"
    df = spark.range(0, 1000, numPartitions=2).selectExpr("id", "'n' AS name", "0.5 AS v")
    fault = Fault("after_rows", "raise", partition=0, attempt_number=None)
    with pytest.raises(Exception, match="injected fault"):
        write(spark, db, table, df, faults=[fault], mode="overwrite")
    assert contents(db, table) == {}
    assert_clean(db)


@pytest.mark.parametrize(
    ("ddl_change", "frame", "pattern"),
    [
        (
            ["ADD COLUMN must INT NOT NULL DEFAULT 0", "ALTER COLUMN must DROP DEFAULT"],
            "id long, name string, v double",
            "'must' is NOT NULL",
        ),
        (None, "id long, name string, v double, extra int", "no column.*'extra'"),
        (None, "id long, name int, v double", "'name'"),
        (["ADD COLUMN fine INT"], "id long, name string, v double", None),
    ],
    ids=["not-null-unwritten", "missing-column", "incompatible-type", "extra-nullable-ok"],
)
def test_schema_mismatch_names_the_column(spark, db, ddl_change, frame, pattern):
    table = seeded_table(db)
    with db.connect() as conn:
        for change in ddl_change or []:
            conn.cursor().execute(f"ALTER TABLE {table} {change}")
    value = "x" if "name string" in frame else 9
    row = (500, value, 1.0) + ((3,) if "extra" in frame else ())
    df = spark.createDataFrame([row], frame)
    if pattern is None:
        write(spark, db, table, df)
        assert contents(db, table)[500] == ("x", 1.0)
    else:
        with pytest.raises(SchemaMismatchError, match=pattern):
            write(spark, db, table, df)
        assert contents(db, table) == old_contents()
    assert_clean(db)


@pytest.mark.mariadb11_ci
def test_staging_keeps_the_target_columns_character_set(spark, any_mariadb):
    """A latin1-default database with a utf8mb4 column: the staging column must be utf8mb4
    too, or 4-byte characters would be refused on the way through."""
    mariadb = any_mariadb
    db_name = mariadb.database
    table = f"cs_{uuid.uuid4().hex[:8]}"
    with mariadb.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"ALTER DATABASE `{db_name}` CHARACTER SET latin1")
        try:
            cursor.execute(
                f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, "
                "name VARCHAR(64) CHARACTER SET utf8mb4, v DOUBLE)"
            )
            df = spark.createDataFrame([(1, "😀 𝄞", 1.0)], "id long, name string, v double")
            write(spark, mariadb, table, df, mode="upsert", key="id")
        finally:
            cursor.execute(f"ALTER DATABASE `{db_name}` CHARACTER SET utf8mb4")
    assert contents(mariadb, table) == {1: ("😀 𝄞", 1.0)}
    assert_clean(mariadb)


@pytest.mark.ci_one_server
def test_lost_branch_of_a_staged_job_leaves_the_table_unchanged(db):
    """After the decision, an administrator rolls back a prepared winner. The staged rows
    are incomplete, so recovery must not apply them: it aborts the job and says so."""
    table = seeded_table(db)
    kill_driver_at(db, table, "after_first_commit", "upsert")
    with journal_session(db) as (spec, _, journal), BranchOps(spec, journal) as ops:
        victim = next(branch for branch, _ in ops.prepared())
        ops.rollback(victim)  # the administrator's hand

    first = cli(db, "--grace", "0", "--json")
    assert first.returncode == 1, first.stdout + first.stderr  # a loss needs a person's eye
    actions = {(a["partition"], a["action"]) for a in json.loads(first.stdout)["actions"]}
    assert (victim.partition, "LOST") in actions and (-1, "aborted") in actions
    assert contents(db, table) == old_contents()
    assert latest_job_state(db) == "aborted"
    assert cli(db, "--grace", "0").returncode == 0  # nothing left in doubt
    assert_clean(db)


def test_silent_staged_job_without_branches_is_aborted_and_its_stage_dropped(db):
    """A driver that died after creating its staging table, before any branch prepared,
    leaves no XA trace: recovery finds it through the journal alone."""
    from xasink.spec import TableRef
    from xasink.tables.staging import ApplyPlan, create_stage_sql, stage_name

    table = seeded_table(db)
    job_id = uuid.uuid4().hex
    with journal_session(db) as (spec, session, journal):
        conn = session.connection
        journal = journal.ensure(conn, spec)
        plan = ApplyPlan("overwrite", TableRef(table), stage_name(job_id, None), ("id",))
        journal.begin_job(conn, job_id, table, plan, lease=3)
        conn.createStatement().execute(create_stage_sql(journal.dialect, plan, ["BIGINT"]))
    assert len(stage_tables(db)) == 1

    done = cli(db, "--grace", "0", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert {a["action"] for a in json.loads(done.stdout)["actions"]} == {"dropped stage"}
    assert job_states(db)[job_id] == "aborted"
    assert contents(db, table) == old_contents()
    assert_clean(db)
