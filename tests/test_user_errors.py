"""What a new user gets wrong, and what xasink then says: the real cause, and what to do.
Each case leaves nothing written, prepared or staged."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from support import TESTS, assert_clean, database_of, ids_in, new_table, run_sql

from xasink import PreflightError, SchemaMismatchError, write_xa

REPO = TESTS.parent

NO_XASINK_DRIVER = """
import sys
sys.path[:0] = sys.argv[1:3]  # the tests' helpers and this checkout, for the driver alone
from support import events_df, spark_builder
from xasink import Database, WriterProperties, WriteError, write_xa
url, user, password, table = sys.argv[3:7]
spark = spark_builder("xasink-workers-without-xasink").getOrCreate()
spark.sparkContext.setLogLevel("OFF")
try:
    write_xa(
        events_df(spark, 1000, 2),
        Database(url, user=user, password=password),
        table,
        writer_properties=WriterProperties(driver_write_bytes=0),  # tasks write, not the driver
    )
except WriteError as exc:
    print("WRITE ERROR", exc, flush=True)
"""


def _python_without_xasink(root: Path) -> str:
    """A virtual environment's Python that sees this Python's packages (pyspark, pyarrow,
    pandas) but not xasink, as when the workers run another interpreter than the one
    xasink was installed into: the site folder is a plain path entry, so its .pth files (an
    editable install's among them) are not read."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = str(root / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run(
        [python, "-c", "import pyspark, pyarrow, pandas\nimport xasink"],
        capture_output=True,
        text=True,
        cwd=root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert "No module named 'xasink'" in probe.stderr, probe.stderr  # the case under test
    return python


def test_workers_without_xasink_say_so(postgres, tmp_path):
    """Spark's Python workers run `PYSPARK_PYTHON` (else `python3` from PATH): when that
    interpreter lacks xasink, the write fails with the worker's own last line and the
    remedy, not with PythonException's first line; nothing is written."""
    python = _python_without_xasink(tmp_path / "venv")
    table = new_table(postgres)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    login = [postgres.jdbc_url, postgres.user, postgres.password, table]
    done = subprocess.run(
        [sys.executable, "-c", NO_XASINK_DRIVER, str(TESTS), str(REPO), *login],
        env={**env, "PYSPARK_PYTHON": python},
        cwd=tmp_path,  # the workers' working directory: no checkout to import from
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRITE ERROR")), "")
    assert "ModuleNotFoundError: No module named 'xasink'" in line, done.stdout[-3000:]
    assert "PYSPARK_PYTHON" in line and "spark.pyspark.python" in line, line
    assert postgres.password not in done.stdout + done.stderr
    assert ids_in(postgres, table) == []
    assert_clean(postgres)


@contextlib.contextmanager
def unreadable_table(db) -> Iterator[str]:
    """A table another login made, in a schema where this login may create tables but may
    not read this one (MySQL and MariaDB: a database where it holds CREATE and INSERT, not
    SELECT; PostgreSQL: the admin's table, its rights revoked from everyone)."""
    schema, name = f"us_{uuid.uuid4().hex[:8]}", f"t_{uuid.uuid4().hex[:8]}"
    if db.kind == "postgres":
        run_sql(
            db,
            f"CREATE SCHEMA {schema} AUTHORIZATION {db.user}",
            f"CREATE TABLE {schema}.{name} (id BIGINT PRIMARY KEY, v TEXT)",
            f"REVOKE ALL ON {schema}.{name} FROM PUBLIC",
        )
    else:
        run_sql(
            db,
            f"CREATE DATABASE {schema}",
            f"CREATE TABLE {schema}.{name} (id BIGINT PRIMARY KEY, v TEXT)",
            f"GRANT CREATE, INSERT ON {schema}.* TO '{db.user}'@'%'",
        )
    try:
        yield f"{schema}.{name}"
    finally:
        drop = "SCHEMA {} CASCADE" if db.kind == "postgres" else "DATABASE {}"
        run_sql(db, "DROP " + drop.format(schema))


@pytest.mark.mysql_ci
def test_an_existing_table_this_login_may_not_read_is_not_created_again(spark, db):
    """CREATE TABLE then says the table exists: the refusal says that this login may not
    read it and names the GRANT the write needs, not "create it yourself"; nothing is
    written. Once that GRANT is run as given, the write goes through."""
    frame = spark.createDataFrame([(1, "a")], "id BIGINT, v STRING")
    with unreadable_table(db) as table:
        with pytest.raises(PreflightError) as error:
            write_xa(frame, database_of(db), table, mode="upsert", key="id")
        message = str(error.value)
        schema, name = table.split(".")
        quoted = '"{}"."{}"' if db.kind == "postgres" else "`{}`.`{}`"
        # MySQL and MariaDB: the account as the server knows it (CURRENT_USER()).
        grantee = f'"{db.user}"' if db.kind == "postgres" else f"'{db.user}'@'%'"
        assert message.startswith(f"Table {table} exists, but this login may not read it ("), (
            message
        )
        assert (
            f"grant what mode='upsert' needs: GRANT SELECT, INSERT, UPDATE ON "
            f"{quoted.format(schema, name)} TO {grantee}; or write into another table." in message
        ), message
        assert "Create it yourself" not in message and "already exists" not in message
        assert run_sql(db, f"SELECT COUNT(*) FROM {table}") == [(0,)]
        assert_clean(db)
        run_sql(db, message.split("needs: ")[1].split("; or write")[0])  # the GRANT, as given
        write_xa(frame, database_of(db), table, mode="upsert", key="id")
        assert run_sql(db, f"SELECT id, v FROM {table}") == [(1, "a")]
    assert_clean(db)


def _not_null(db, table: str) -> dict[str, bool]:
    """Each column of `table`: whether it is NOT NULL (read from the server's catalog)."""
    schema = "current_schema()" if db.kind == "postgres" else "DATABASE()"
    rows = run_sql(
        db,
        "SELECT column_name, is_nullable FROM information_schema.columns WHERE "
        f"table_schema = {schema} AND table_name = '{table}'",
        admin=False,
    )
    return {str(name): nullable == "NO" for name, nullable in rows}


def test_a_created_table_keeps_the_frames_non_nullable_columns_not_null(spark, db):
    """As Spark's JDBC writer does (JdbcUtils.schemaString), a created table's column is NOT
    NULL where the frame's field is not nullable (current_timestamp(), spark.range's id, a
    literal). A later frame without it is refused before anything is written, with the
    ALTER that lets rows leave it out; once that has run as given, the frame goes in."""
    table = f"nn_{uuid.uuid4().hex[:10]}"
    first = spark.range(3).select(
        "id",
        F.when(F.col("id") < 100, F.col("id").cast("string")).alias("name"),  # nullable
        F.current_timestamp().alias("seen"),
    )
    assert [f.nullable for f in first.schema] == [False, True, False]
    write_xa(first, database_of(db), table)
    assert _not_null(db, table) == {"id": True, "name": False, "seen": True}
    later = spark.createDataFrame([(3, "c")], "id BIGINT, name STRING")
    with pytest.raises(SchemaMismatchError) as error:
        write_xa(later, database_of(db), table)
    message = str(error.value)
    alter = (
        f'ALTER TABLE "{table}" ALTER COLUMN "seen" DROP NOT NULL'
        if db.kind == "postgres"
        else f"ALTER TABLE `{table}` MODIFY `seen` datetime(6) NULL"
    )
    assert (
        "column 'seen' is NOT NULL without a default, and the DataFrame does not write it "
        f"(to let rows leave it out: {alter})" in message
    ), message
    assert ids_in(db, table) == [0, 1, 2]
    assert_clean(db)
    run_sql(db, alter, admin=False)
    write_xa(later, database_of(db), table)
    assert ids_in(db, table) == [0, 1, 2, 3]
    assert run_sql(db, f"SELECT COUNT(*) FROM {table} WHERE seen IS NULL") == [(1,)]
    assert_clean(db)
