"""`mode="overwrite", replace_where=...`: only the rows the condition selects are replaced,
in the staged apply's one transaction, on every server; a row of the DataFrame outside the
condition is refused before anything is written; a killed driver's slice is finished by
`xasink recover`. Rows are read with psycopg/pymysql."""

from __future__ import annotations

import json
import uuid

import pytest
from support import (
    assert_clean,
    cli,
    connection_args,
    contents,
    frame,
    in_background,
    job_states,
    kill_driver_at,
    latest_job_state,
    mode_rows,
    old_contents,
    run_sql,
    seeded_table,
    until,
)
from test_exactly_once import failed_tasks

from xasink import WriterProperties, write_xa
from xasink._testing.faults import Fault, held, injected, release
from xasink.errors import ConfigurationError, InputDataError, PreflightError

TASKS = WriterProperties(driver_write_bytes=0)  # tasks write it: two-phase, a real stage
DRIVER = WriterProperties(driver_write_bytes=1 << 30)  # the driver: one local transaction


@pytest.mark.mysql_ci
def test_replace_where_replaces_its_slice_and_leaves_the_rest(spark, db):
    """Tasks write the first slice (two phases, a staging table), the driver the second
    (one local transaction, a temporary one): each replaces the rows its condition selects,
    rows of the slice missing from the DataFrame go, and every other row stays."""
    table = seeded_table(db)
    rows = [(i, "new", i * 2.0) for i in range(60, 150)]
    first = write_xa(
        frame(spark, rows),
        table=table,
        mode="overwrite",
        replace_where="id >= 50",
        writer_properties=TASKS,
        **connection_args(db),
    )
    expected = {i: v for i, v in old_contents().items() if i < 50}
    expected.update({i: (n, v) for i, n, v in rows})
    assert (first.writer, contents(db, table)) == ("tasks", expected)

    small = [(i, "newer", 1.0) for i in (140, 141, 200)]
    second = write_xa(
        frame(spark, small, 0),
        table=table,
        mode="overwrite",
        replace_where="id BETWEEN 140 AND 200 AND name IS NOT NULL",
        writer_properties=DRIVER,
        **connection_args(db),
    )
    expected = {i: v for i, v in expected.items() if not 140 <= i <= 200}
    expected.update({i: (n, v) for i, n, v in small})
    assert (second.writer, contents(db, table)) == ("driver", expected)
    assert {job_states(db)[r.job_id] for r in (first, second)} == {"committed"}
    assert_clean(db)


@pytest.mark.ci_one_server
@pytest.mark.parametrize("writer", ["tasks", "driver"])
def test_a_row_outside_replace_where_is_refused_and_nothing_changes(spark, db, writer):
    """The condition is the server's: a row for which it is false, or NULL (v IS NULL, so
    v > 0 is unknown), is outside, refused in its branch before PREPARE (or before the
    one-phase COMMIT), naming it; no task is retried, the table is as it was."""
    table = seeded_table(db)
    rows = [(i, "new", 1.0) for i in range(50, 90)] + [(95, "null v", None), (7, "low", 1.0)]
    group = f"xasink-test-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "replace_where refusal")
    properties = TASKS if writer == "tasks" else DRIVER
    with pytest.raises(InputDataError, match=r"outside replace_where") as refused:
        write_xa(
            frame(spark, rows, 3 if writer == "tasks" else 0),
            table=table,
            mode="overwrite",
            replace_where="id >= 50 AND v > 0",
            writer_properties=properties,
            **connection_args(db),
        )
    assert "id=7" in str(refused.value) and "id=95" in str(refused.value)
    assert (contents(db, table), failed_tasks(spark, group)) == (old_contents(), 0)
    if writer == "tasks":  # a one-phase job leaves no row at all
        assert latest_job_state(db) == "aborted"
    assert_clean(db)


@pytest.mark.ci_one_server
def test_the_slice_is_checked_again_in_the_apply_after_pre_sql(spark, db):
    """Every branch's rows lie in the slice when it prepares; the write's own pre_sql then
    narrows what the condition selects (the DELETE would leave the old rows of the slice
    and the staged rows outside it would land beside them): the apply checks the whole
    staging table again after its pre_sql, and aborts the job, the table unchanged."""
    table, bounds = seeded_table(db), f"lo_{uuid.uuid4().hex[:10]}"
    run_sql(
        db, f"CREATE TABLE {bounds} (lo BIGINT)", f"INSERT INTO {bounds} VALUES (100)", admin=False
    )
    rows = [(i, "new", 1.0) for i in range(100, 150)]
    with pytest.raises(InputDataError, match=r"outside replace_where.*id=1[0-2][0-9],") as refused:
        write_xa(
            frame(spark, rows),
            table=table,
            mode="overwrite",
            replace_where=f"id >= (SELECT lo FROM {bounds})",
            pre_sql=f"UPDATE {bounds} SET lo = 125",
            writer_properties=TASKS,
            **connection_args(db),
        )
    assert "Nothing was changed" in str(refused.value)
    assert contents(db, table) == old_contents()
    assert run_sql(db, f"SELECT lo FROM {bounds}", admin=False) == [(100,)]
    assert latest_job_state(db) == "aborted"
    assert_clean(db)


@pytest.mark.ci_one_server
def test_a_reader_sees_the_old_slice_or_the_new_never_half(spark, db):
    """The apply is held open after its DELETE and INSERT, before its COMMIT: a reader on
    another connection sees the old slice whole; once it commits, the new one whole."""
    table = seeded_table(db)
    rows = [(i, "new", 0.5) for i in range(80, 120)]
    with injected(Fault("before_local_commit", "hold")) as (hold,):
        thread, outcome = in_background(
            lambda: write_xa(
                frame(spark, rows, 0),
                table=table,
                mode="overwrite",
                replace_where="id >= 80",
                writer_properties=DRIVER,
                **connection_args(db),
            )
        )
        try:
            until(lambda: held(hold), "the apply reaching its commit", 120)
            assert contents(db, table) == old_contents()
        finally:
            release(hold)
            thread.join(120)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    expected = {i: v for i, v in old_contents().items() if i < 80}
    expected.update({i: (n, v) for i, n, v in rows})
    assert contents(db, table) == expected
    assert_clean(db)


def test_a_reader_never_sees_a_two_phase_slice_half_applied(spark, postgres):
    """Tasks' job applies after phase 2; another session's uncommitted row holds a key of
    the new slice, so the apply waits in its INSERT, its DELETE done: a reader sees the
    old slice whole. Once that session rolls back, the new slice commits whole."""
    db, blocked = postgres, 110
    table = seeded_table(db)
    rows = [(i, "new", 0.5) for i in range(80, 120)]
    blocker = db.connect()
    blocker.autocommit = False  # the row stays uncommitted, its key locked
    try:
        blocker.cursor().execute(f"INSERT INTO {table} VALUES ({blocked}, 'blocker', 0)")
        thread, outcome = in_background(
            lambda: write_xa(
                frame(spark, rows),
                table=table,
                mode="overwrite",
                replace_where="id >= 80",
                writer_properties=TASKS,
                **connection_args(db),
            )
        )
        waiting = (
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            f"AND query LIKE 'INSERT INTO %{table}%'"
        )
        until(lambda: run_sql(db, waiting)[0][0] == 1, "the apply waiting in its INSERT", 120)
        assert contents(db, table) == old_contents()
    finally:
        blocker.rollback()
        blocker.close()
    thread.join(120)
    assert outcome and not isinstance(outcome[0], Exception), outcome
    expected = {i: v for i, v in old_contents().items() if i < 80}
    expected.update({i: (n, v) for i, n, v in rows})
    assert contents(db, table) == expected
    assert_clean(db)


@pytest.mark.ci_one_server
def test_recover_finishes_a_killed_drivers_slice_and_actions(db):
    """The driver dies after its decision, before the apply: readers see the old table.
    `xasink recover` leaves the job decided, as its stored plan runs SQL statements; with
    --run-statements it applies the slice and runs the write's pre_sql and post_sql from
    the stored plan, in the apply's one transaction, as the driver would have."""
    table, log = seeded_table(db), f"log_{uuid.uuid4().hex[:10]}"
    run_sql(db, f"CREATE TABLE {log} (what VARCHAR(16), n BIGINT)", admin=False)
    counted = f"(SELECT COUNT(*) FROM {table})"
    options = {
        "replace_where": "id >= 50",
        "pre_sql": f"INSERT INTO {log} VALUES ('pre', {counted})",
        "post_sql": [f"INSERT INTO {log} VALUES ('post', {counted})"],
    }
    kill_driver_at(db, table, "after_decision", "overwrite", options=options)
    assert contents(db, table) == old_contents()
    assert run_sql(db, f"SELECT what FROM {log}", admin=False) == []
    left = cli(db, "--grace", "0", "--json")  # the plan's SQL runs only when asked for
    held = [a for a in json.loads(left.stdout)["actions"] if a["action"] == "left"]
    assert left.returncode == 1 and "--run-statements" in held[0]["detail"], left.stdout
    assert contents(db, table) == old_contents()
    assert latest_job_state(db) == "committing"
    done = cli(db, "--grace", "0", "--json", "--run-statements")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "applied" in {a["action"] for a in json.loads(done.stdout)["actions"]}
    expected = {i: v for i, v in old_contents().items() if i < 50}
    expected.update(mode_rows("overwrite")[3])
    assert contents(db, table) == expected
    logged = run_sql(db, f"SELECT what, n FROM {log} ORDER BY n", admin=False)
    assert [(w, int(n)) for w, n in logged] == [("pre", 100), ("post", len(expected))]
    assert latest_job_state(db) == "committed"
    assert_clean(db)


@pytest.mark.ci_one_server
def test_replace_where_is_refused_before_any_job_exists(spark, db):
    """A typo, or a column the write does not have, is the server's error at preflight;
    a condition on another mode, or a second statement, is refused before connecting."""
    table = seeded_table(db)
    df = frame(spark, [(60, "new", 1.0)], 1)
    before = job_states(db)
    with pytest.raises(PreflightError, match=r"replace_where 'idd >= 50'.*idd"):
        write_xa(
            df, table=table, mode="overwrite", replace_where="idd >= 50", **connection_args(db)
        )
    with pytest.raises(ConfigurationError, match="mode='overwrite' only"):
        write_xa(
            df, table=table, mode="upsert", key="id", replace_where="id > 1", **connection_args(db)
        )
    with pytest.raises(ConfigurationError, match="';'"):
        write_xa(
            df,
            table=table,
            mode="overwrite",
            replace_where="id > 1; DELETE FROM x",
            **connection_args(db),
        )
    assert job_states(db) == before
    assert contents(db, table) == old_contents()
