"""`pre_sql` / `post_sql`: a write's own statements run in the transaction that applies its
rows, so they commit with them or roll back with them (a failing one after the decision
aborts the job, its target unchanged); statements that would end that transaction are
refused before any job exists. Rows are read with psycopg/pymysql."""

from __future__ import annotations

import uuid

import pytest
from support import (
    assert_clean,
    connection_args,
    contents,
    database_of,
    frame,
    job_states,
    kill_driver_at,
    latest_job_state,
    old_contents,
    run_sql,
    seeded_table,
    xasink_writer,
)

from xasink import CommitProperties, WriterProperties, transaction, write_xa
from xasink.errors import ConfigurationError, InputDataError
from xasink.tables.retyping import ChangedTypesError

TASKS = WriterProperties(driver_write_bytes=0)  # tasks write it: two phases, a real stage
DRIVER = WriterProperties(driver_write_bytes=1 << 30)  # the driver: one local transaction
LOG_DDL = {
    "postgres": "CREATE TABLE {t} (seq SERIAL PRIMARY KEY, what VARCHAR(32), n BIGINT)",
    "mysql": "CREATE TABLE {t} (seq INT AUTO_INCREMENT PRIMARY KEY, what VARCHAR(32), n BIGINT)",
}


def log_table(db) -> str:
    name = f"log_{uuid.uuid4().hex[:10]}"
    run_sql(db, LOG_DDL[db.dialect].format(t=name), admin=False)
    return name


def logged(db, log) -> list[tuple[str, int | None]]:
    rows = run_sql(db, f"SELECT what, n FROM {log} ORDER BY seq", admin=False)
    return [(str(w), None if n is None else int(n)) for w, n in rows]


def note(log: str, what: str, table: str | None = None) -> str:
    """A statement logging `what`, with the row count of `table` as the transaction sees it."""
    count = f"(SELECT COUNT(*) FROM {table})" if table else "NULL"
    return f"INSERT INTO {log} (what, n) VALUES ('{what}', {count})"


@pytest.mark.mysql_ci
def test_actions_commit_with_the_rows(spark, db):
    """An overwrite by tasks (two phases) and a small append by the driver (one local
    transaction, staged for it): each runs its pre_sql before its rows are applied and its
    post_sql after, and both commit with the rows."""
    table, log = seeded_table(db), log_table(db)
    rows = [(i, "new", 1.0) for i in range(200, 260)]
    overwrite = write_xa(
        frame(spark, rows),
        table=table,
        mode="overwrite",
        pre_sql=note(log, "pre", table),
        post_sql=[note(log, "post", table), f"UPDATE {table} SET v = 2.0 WHERE id = 200;"],
        writer_properties=TASKS,
        **connection_args(db),
    )
    appended = write_xa(
        frame(spark, [(300, "more", 3.0)], 0),
        table=table,
        post_sql=note(log, "appended", table),
        writer_properties=DRIVER,
        **connection_args(db),
    )
    expected = {i: ("new", 2.0 if i == 200 else 1.0) for i in range(200, 260)}
    expected[300] = ("more", 3.0)
    assert contents(db, table) == expected
    assert logged(db, log) == [("pre", 100), ("post", 60), ("appended", 61)]
    assert (overwrite.writer, appended.writer) == ("tasks", "driver")
    assert {job_states(db)[r.job_id] for r in (overwrite, appended)} == {"committed"}
    assert_clean(db)


@pytest.mark.ci_one_server
@pytest.mark.parametrize("writer", ["tasks", "driver"])
def test_a_failing_post_sql_rolls_back_the_rows_and_aborts_the_job(spark, db, writer):
    """The post_sql fails in the apply (after the decision, for tasks): the apply's
    transaction rolls back, its pre_sql and rows with it; the job is aborted, the error
    names the statement and says the table is unchanged; nothing is left prepared."""
    table, log = seeded_table(db), log_table(db)
    rows = [(i, "new", 1.0) for i in range(50, 150)]
    with pytest.raises(InputDataError, match=r"post_sql statement 2 of 2 .*failed") as failed:
        write_xa(
            frame(spark, rows, 3 if writer == "tasks" else 0),
            table=table,
            mode="upsert",
            key="id",
            pre_sql=note(log, "pre"),
            post_sql=[note(log, "post"), "INSERT INTO no_such_table_xyz VALUES (1)"],
            writer_properties=TASKS if writer == "tasks" else DRIVER,
            **connection_args(db),
        )
    assert "nothing was changed" in str(failed.value) and "no_such_table_xyz" in str(failed.value)
    assert db.password not in str(failed.value)
    assert (contents(db, table), logged(db, log)) == (old_contents(), [])
    if writer == "tasks":
        assert latest_job_state(db) == "aborted"
    assert_clean(db)


@pytest.mark.ci_one_server
def test_actions_that_would_end_the_transaction_are_refused_before_any_job(spark, db):
    table = seeded_table(db)
    df = frame(spark, [(1, "x", 1.0)], 1)
    before = job_states(db)
    with pytest.raises(ConfigurationError, match="pre_sql statement 'COMMIT' is refused"):
        write_xa(df, table=table, pre_sql="COMMIT", **connection_args(db))
    with pytest.raises(ConfigurationError, match="';'"):
        write_xa(df, table=table, post_sql="DELETE FROM a; DELETE FROM b", **connection_args(db))
    if db.kind != "postgres":  # DDL commits implicitly there: refused at preflight
        with pytest.raises(ConfigurationError, match="MySQL and MariaDB commit"):
            write_xa(
                df, table=table, post_sql=f"ALTER TABLE {table} ADD c INT", **connection_args(db)
            )
    refused = pytest.raises(ConfigurationError, match="per_branch_appends")
    with refused, transaction(database_of(db), per_branch_appends=True) as tx:
        tx.write(df, table, post_sql="SELECT 1")
    assert (job_states(db), contents(db, table)) == (before, old_contents())


@pytest.mark.ci_one_server
def test_a_transactions_actions_run_in_its_one_apply_in_write_order(spark, db):
    """Two writes of one transaction: both pre_sql, then both applies, then both post_sql,
    in tx.write order, in one transaction (each post_sql sees both tables new)."""
    first, second, log = seeded_table(db), seeded_table(db), log_table(db)
    with transaction(database_of(db)) as tx:
        tx.write(
            frame(spark, [(i, "a", 1.0) for i in range(10)]),
            first,
            mode="overwrite",
            pre_sql=note(log, "pre 1", second),
            post_sql=note(log, "post 1", second),
            writer_properties=TASKS,
        )
        tx.write(
            frame(spark, [(i, "b", 1.0) for i in range(100, 105)]),
            second,
            pre_sql=note(log, "pre 2", first),
            post_sql=note(log, "post 2", first),
            writer_properties=TASKS,
        )
    assert logged(db, log) == [("pre 1", 100), ("pre 2", 100), ("post 1", 105), ("post 2", 10)]
    assert len(contents(db, first)) == 10 and len(contents(db, second)) == 105
    assert job_states(db)[tx.result.job_id] == "committed"
    assert_clean(db)


def test_format_options_replace_a_slice_with_actions(spark, postgres):
    db = postgres
    table, log = seeded_table(db), log_table(db)
    rows = [(i, "new", 1.0) for i in range(90, 95)]
    xasink_writer(
        frame(spark, rows, 1),
        db,
        table,
        "overwrite",
        **{
            "xasink.replaceWhere": "id >= 90",
            "xasink.preSql": f'["{note(log, "pre", table)}"]',
            "xasink.postSql": note(log, "post", table),
        },
    ).save()
    expected = {i: v for i, v in old_contents().items() if i < 90}
    expected.update({i: (n, v) for i, n, v in rows})
    assert contents(db, table) == expected
    assert logged(db, log) == [("pre", 100), ("post", 95)]
    assert_clean(db)


def test_a_question_mark_in_an_action_is_the_servers_operator(spark, postgres):
    """PostgreSQL's jsonb `?` operator in a pre_sql: the statement runs as text, never
    prepared with `?` taken for a parameter marker (which failed it at the apply)."""
    table, log = seeded_table(postgres), log_table(postgres)
    write_xa(
        frame(spark, [(300, "more", 3.0)], 0),
        table=table,
        pre_sql=f"INSERT INTO {log} (what, n) SELECT 'has a', 1 WHERE '{{\"a\": 1}}'::jsonb ? 'a'",
        writer_properties=DRIVER,
        **connection_args(postgres),
    )
    assert logged(postgres, log) == [("has a", 1)]
    assert contents(postgres, table) == {**old_contents(), 300: ("more", 3.0)}
    assert_clean(postgres)


@pytest.mark.full_only
def test_a_pre_sql_that_retypes_the_table_is_seen_by_the_type_check(spark, postgres):
    """The apply checks the target's column types after the pre_sql, not before: a pre_sql
    that makes `v` an integer would otherwise have the staged 1.5 rounded into it."""
    table = seeded_table(postgres)
    with pytest.raises(ChangedTypesError, match=r"'v' double precision -> integer.*unchanged"):
        write_xa(
            frame(spark, [(300, "more", 1.5)]),
            table=table,
            pre_sql=f"ALTER TABLE {table} ALTER COLUMN v TYPE INTEGER",
            writer_properties=TASKS,
            **connection_args(postgres),
        )
    assert contents(postgres, table) == old_contents()
    assert run_sql(
        postgres,
        f"SELECT data_type FROM information_schema.columns WHERE "
        f"table_name = '{table}' AND column_name = 'v'",
    ) == [("double precision",)]
    assert_clean(postgres)


@pytest.mark.full_only
@pytest.mark.parametrize("writer", ["tasks", "driver"])
def test_a_session_that_ran_actions_is_not_kept_for_the_next_job(spark, postgres, writer):
    """A pre_sql may change its session beyond the transaction (set_config(..., false) is
    no SET statement): the next job's apply never gets that session back, whether the
    driver's journal session applied it (two phases) or its one local transaction did."""
    table, log = seeded_table(postgres), log_table(postgres)
    tasks = writer == "tasks"
    for what, sql in (("set", "SELECT set_config('xasink.probe', 'left', false)"), ("read", None)):
        result = write_xa(
            frame(spark, [(300, what, 1.0)], 3 if tasks else 0),  # 0: cached, sized: small
            table=table,
            mode="upsert",
            key="id",
            pre_sql=sql or f"INSERT INTO {log} (what) SELECT current_setting('xasink.probe', true)",
            writer_properties=TASKS if tasks else DRIVER,
            **connection_args(postgres),
        )
        assert result.writer == writer
    assert [w for w, _ in logged(postgres, log)] in (["None"], [""])  # NULL or empty
    assert_clean(postgres)


#: A statement that changes its session beyond its transaction, and one that logs it.
PROBES = {
    "postgres": (
        "SELECT set_config('xasink.probe', 'left', false)",
        "INSERT INTO {log} (what) SELECT current_setting('xasink.probe', true)",
    ),
    "mysql": ("SET @xasink_probe = 'left'", "INSERT INTO {log} (what) SELECT @xasink_probe"),
}


@pytest.mark.full_only
@pytest.mark.parametrize("finished_by", ["recovery", "retry"])
def test_a_session_that_applied_an_older_jobs_actions_is_not_kept(spark, db, finished_by):
    """The same when the statements are an older job's: an upsert decided but not applied
    (its driver died after the decision), whose pre_sql changes its session, is applied on
    a later write's journal session, by that write's recovery or by its one local
    transaction's retry after meeting it; that session is not the next job's either."""
    table, log = seeded_table(db), log_table(db)
    change, read = PROBES[db.dialect]
    kill_driver_at(db, table, "after_decision", mode="upsert", options={"pre_sql": change})
    (older,) = [j for j, s in job_states(db).items() if s == "committing"]
    later = (
        {"writer_properties": DRIVER, "commit_properties": CommitProperties(recover_first=False)}
        if finished_by == "retry"
        else {"writer_properties": TASKS}
    )
    rows = frame(spark, [(300, "later", 1.0)], 0 if finished_by == "retry" else 3)
    write_xa(rows, table=table, mode="upsert", key="id", **later, **connection_args(db))
    assert job_states(db)[older] == "committed"  # applied on that write's session
    write_xa(
        frame(spark, [(301, "read", 1.0)]),
        table=table,
        mode="upsert",
        key="id",
        pre_sql=read.format(log=log),
        writer_properties=TASKS,
        **connection_args(db),
    )
    assert [w for w, _ in logged(db, log)] in (["None"], [""])  # NULL or empty
    assert_clean(db)
