"""No option is ignored. format("xasink") takes `mode` unprefixed like `key`; a misspelt
option, an option of Spark JDBC that means nothing here, and a connection property the JDBC
driver does not declare are refused before anything is written; write_xa refuses a `key`
its mode does not use. Spark JDBC's sessionInitStatement (`Database(session_init=...)`)
runs on every connection of a write, and createTableOptions / createTableColumnTypes shape
a table xasink creates. Rows and catalogs are read with psycopg/pymysql."""

from __future__ import annotations

import uuid

import pytest
from support import (
    KEYED_DDL,
    assert_clean,
    assert_exactly,
    connection_args,
    contents,
    database_of,
    events_df,
    new_table,
    old_contents,
    run_sql,
    seeded_table,
    xasink_writer,
)
from test_format import latest_jobs

from xasink import PreflightError, SchemaMismatchError, WriterProperties, write_xa
from xasink.errors import ConfigurationError

#: Every partition prepares a branch on an executor (none is written by the driver).
TASKS = WriterProperties(driver_write_bytes=0)


def jobs_on(db, table: str) -> list[str]:
    """The states of the journal's jobs that wrote `table` (none: no journal yet)."""
    return latest_jobs(db, table) if table_exists(db, "xasink_jobs") else []


def table_exists(db, table: str) -> bool:
    schema = "current_schema()" if db.kind == "postgres" else "DATABASE()"
    found = run_sql(
        db,
        "SELECT COUNT(*) FROM information_schema.tables "
        f"WHERE table_schema = {schema} AND table_name = '{table}'",
        admin=False,
    )
    return int(found[0][0]) == 1


# -- format("xasink"): `mode` unprefixed, and every other option known or refused ----------
@pytest.mark.ci_one_server
def test_the_format_takes_mode_unprefixed_like_key(spark, db):
    """`.option("mode", "upsert")` upserts (it was a JDBC property the driver ignored, and
    the write appended: duplicates, or a duplicate-key failure on a keyed table)."""
    table = seeded_table(db)
    rows = [(i, "new", i * 2.0) for i in range(50, 150)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(2)
    xasink_writer(df, db, table).option("mode", "upsert").option("key", "id").save()
    expected = old_contents() | {i: ("new", i * 2.0) for i in range(50, 150)}
    assert contents(db, table) == expected
    assert jobs_on(db, table) == ["committed"]
    assert_clean(db)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("mdoe", "upsert", r"has no option 'mdoe'.*did you mean 'mode'"),
        ("kye", "id", r"has no option 'kye'.*did you mean 'key'"),
        ("queryTimeout", "5", r"does not take option 'queryTimeout'.*xasink.networkTimeout"),
        ("pushDownPredicate", "false", r"does not take option 'pushDownPredicate'.*reads"),
        ("cascadeTruncate", "true", r"does not take option 'cascadeTruncate'.*never truncate"),
    ],
)
@pytest.mark.ci_one_server
def test_an_option_that_would_change_nothing_is_refused_before_anything_is_written(
    spark, db, name, value, message
):
    table = new_table(db)
    with pytest.raises(Exception, match=message) as refused:
        xasink_writer(events_df(spark, 30, 2), db, table).option(name, value).save()
    assert db.password not in str(refused.value)
    assert_exactly(db, table, [])
    assert jobs_on(db, table) == []
    assert_clean(db)


def test_a_driver_property_reaches_the_driver_in_its_own_spelling(spark, postgres):
    """Spark lower-cases option names; pgjdbc reads `ApplicationName` only so spelled. The
    rows' default shows the sessions' application name: the property's value, where it was
    xasink's own (the lower-cased property was ignored)."""
    db = postgres
    table = f"app_{uuid.uuid4().hex[:10]}"
    run_sql(
        db,
        f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION, "
        "app TEXT DEFAULT current_setting('application_name'))",
        admin=False,
    )
    df = spark.createDataFrame([(i, "n", 1.0) for i in range(20)], "id long, name string, v double")
    writer = xasink_writer(df.repartition(2), db, table, **{"xasink.driverWriteBytes": "0"})
    writer.option("ApplicationName", "probe-app").save()
    assert run_sql(db, f"SELECT DISTINCT app FROM {table}", admin=False) == [("probe-app",)]
    assert_clean(db)


# -- write_xa: a key the mode does not use --------------------------------------------------
@pytest.mark.ci_one_server
def test_a_key_that_an_append_does_not_use_is_refused(spark, db):
    """`key="id"` without `mode="upsert"` appended duplicates into a table without that key;
    now it is refused, by write_xa and by the format, with nothing written. On a table whose
    primary key it is (one the same call created), an append with it still runs."""
    table = new_table(db)
    df = events_df(spark, 50, 2)
    with pytest.raises(SchemaMismatchError, match=r"did you mean mode='upsert'"):
        write_xa(df, table=table, key="id", **connection_args(db))
    with pytest.raises(Exception, match=r"did you mean mode='upsert'"):
        xasink_writer(df, db, table).option("key", "id").save()
    assert_exactly(db, table, [])
    made = f"made_{uuid.uuid4().hex[:10]}"
    assert write_xa(df, table=made, key="id", **connection_args(db)).created
    write_xa(events_df(spark, 80, 2).where("id >= 50"), table=made, key="id", **connection_args(db))
    assert_exactly(db, made, range(80))
    assert_clean(db)


# -- sessionInitStatement: every connection a write opens -------------------------------------
#: A session setting each row's `tag` shows (a column default on PostgreSQL, a trigger on
#: MySQL and MariaDB), so every session that inserted rows must have run the statement.
INIT = {"postgres": "SET xasink_test.tag = 'probe'", "mysql": "SET @xasink_tag = 'probe'"}


def tagged_table(db) -> str:
    name = f"tag_{uuid.uuid4().hex[:10]}"
    if db.kind == "postgres":
        run_sql(
            db,
            f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, name TEXT, v DOUBLE PRECISION, "
            "tag TEXT DEFAULT current_setting('xasink_test.tag', true))",
            admin=False,
        )
    else:
        run_sql(db, KEYED_DDL["mysql"].format(t=name), admin=False)
        run_sql(db, f"ALTER TABLE {name} ADD COLUMN tag VARCHAR(64)", admin=False)
        run_sql(
            db,
            f"CREATE TRIGGER {name}_tag BEFORE INSERT ON {name} FOR EACH ROW "
            "SET NEW.tag = @xasink_tag",
        )
    return name


def test_session_init_runs_on_every_connection_of_a_write(spark, db):
    """Executors' branches (append), the driver's small write (one local transaction), a
    staged upsert applied on the driver's connection, and the format's branches and shipped
    rows: every row is tagged by the statement."""
    table = tagged_table(db)
    database = database_of(db, session_init=INIT[db.dialect])

    def frame(ids: range, partitions: int = 2):
        rows = [(i, "n", 1.0) for i in ids]
        return spark.createDataFrame(rows, "id long, name string, v double").repartition(partitions)

    small = frame(range(40, 50), 1).cache()  # Spark knows its size: the driver writes it
    small.count()
    assert write_xa(frame(range(0, 40)), database, table, writer_properties=TASKS).writer == "tasks"
    assert write_xa(small, database, table).writer == "driver"
    upsert = {"mode": "upsert", "key": "id", "writer_properties": TASKS}
    write_xa(frame(range(50, 90)), database, table, **upsert)
    init = {"sessionInitStatement": INIT[db.dialect]}
    xasink_writer(
        frame(range(90, 120)), db, table, **init, **{"xasink.driverWriteBytes": "0"}
    ).save()
    xasink_writer(frame(range(120, 130), 1), db, table, **init).save()
    rows = run_sql(db, f"SELECT id, tag FROM {table} ORDER BY id", admin=False)
    assert rows == [(i, "probe") for i in range(130)]
    assert_clean(db)


@pytest.mark.ci_one_server
def test_a_failing_session_init_refuses_the_write_with_nothing_written(spark, db):
    table = new_table(db)
    df = events_df(spark, 30, 2)
    bad = "SELECT no_such_function_xasink()"
    with pytest.raises(Exception, match=r"sessionInitStatement.*no_such_function_xasink"):
        xasink_writer(df, db, table, sessionInitStatement=bad).save()
    with pytest.raises(PreflightError, match=r"session_init.*no_such_function_xasink") as refused:
        write_xa(df, database_of(db, session_init=bad), table, writer_properties=TASKS)
    assert db.password not in str(refused.value)
    assert_exactly(db, table, [])
    assert jobs_on(db, table) == []
    assert_clean(db)


# -- createTableOptions / createTableColumnTypes ---------------------------------------------
#: Per dialect: the table options, and what the catalog then shows for them.
TABLE_OPTIONS = {
    "postgres": ("WITH (fillfactor=70)", "fillfactor=70"),
    "mysql": ("COMMENT='made by xasink' ROW_FORMAT=DYNAMIC", "made by xasink"),
}


def created_shape(db, table: str) -> tuple[str, dict[str, str]]:
    """(the table's options as the catalog shows them, column -> type)."""
    if db.kind == "postgres":
        options = run_sql(
            db,
            "SELECT array_to_string(reloptions, ',') FROM pg_class "
            f"WHERE oid = '{table}'::regclass",
            admin=False,
        )[0][0]
        columns = run_sql(
            db,
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            f"WHERE attrelid = '{table}'::regclass AND attnum > 0 AND NOT attisdropped",
            admin=False,
        )
    else:
        options = run_sql(
            db,
            "SELECT table_comment FROM information_schema.tables "
            f"WHERE table_schema = DATABASE() AND table_name = '{table}'",
            admin=False,
        )[0][0]
        columns = run_sql(
            db,
            "SELECT column_name, column_type FROM information_schema.columns "
            f"WHERE table_schema = DATABASE() AND table_name = '{table}'",
            admin=False,
        )
    return str(options or ""), {str(c).lower(): str(t).lower() for c, t in columns}


@pytest.mark.parametrize("path", ["write_xa", "format"])
def test_create_table_options_and_column_types_shape_a_created_table(spark, db, path):
    table = f"shaped_{uuid.uuid4().hex[:10]}"
    options, shown = TABLE_OPTIONS[db.dialect]
    rows = [(i, f"n{i}", i * 0.25) for i in range(40)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(2)
    if path == "write_xa":
        types = {"name": "VARCHAR(64)", "v": "DECIMAL(12, 2)"}
        made = write_xa(
            df,
            table=table,
            mode="upsert",
            key="id",
            create_table_options=options,
            create_table_column_types=types,
            **connection_args(db),
        )
        assert made.created
    else:
        writer = xasink_writer(df, db, table, createTableOptions=options)
        writer.option("createTableColumnTypes", "name VARCHAR(64), v DECIMAL(12, 2)").save()
    table_options, columns = created_shape(db, table)
    assert shown in table_options
    decimal = "numeric(12,2)" if db.kind == "postgres" else "decimal(12,2)"
    varchar = "character varying(64)" if db.kind == "postgres" else "varchar(64)"
    assert (columns["name"], columns["v"]) == (varchar, decimal)
    got = run_sql(db, f"SELECT id, name, v FROM {table} ORDER BY id", admin=False)
    assert [(int(i), n, float(v)) for i, n, v in got] == rows
    assert_clean(db)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"create_table_options": "WITH (fillfactor=70); DROP TABLE x"},
            r"create_table_options.*';'",
        ),
        ({"create_table_options": "WITH (fillfactor=70) -- x"}, r"create_table_options.*'--'"),
        ({"create_table_column_types": {"nmae": "TEXT"}}, r"no column 'nmae'.*did you mean 'name'"),
        (
            {"create_table_column_types": {"name": "TEXT DEFAULT 'x'"}},
            r"create_table_column_types\['name'\]",
        ),
        (
            {"create_table_options": "WITH (fillfactor=70)", "create": "never"},
            r"create='never'",
        ),
    ],
)
@pytest.mark.ci_one_server
def test_unsafe_or_pointless_create_options_are_refused_before_any_ddl(spark, db, given, message):
    table = f"never_{uuid.uuid4().hex[:10]}"
    df = spark.createDataFrame([(1, "a", 1.0)], "id long, name string, v double")
    with pytest.raises(ConfigurationError, match=message):
        write_xa(df, table=table, **given, **connection_args(db))
    assert not table_exists(db, table)


#: Per dialect: a connection property misspelt, and the driver's own spelling.
MISSPELT = {
    "postgres": ("ApplicationNam", "ApplicationName"),
    "mysql": ("sessionVariable", "sessionVariables"),
}


def test_a_connection_property_the_driver_does_not_declare_is_refused(spark, db):
    """Drivers ignore a property they do not know: a misspelt one changed nothing, silently."""
    table = new_table(db)
    wrong, right = MISSPELT[db.dialect]
    database = database_of(db, properties={wrong: "x"})
    with pytest.raises(ConfigurationError, match=rf"holds '{wrong}'.*did you mean '{right}'"):
        write_xa(events_df(spark, 30, 2), database, table)
    assert_exactly(db, table, [])
    assert_clean(db)
