"""The generic dialect end to end on a server that is neither PostgreSQL nor MySQL: Apache
Derby's network server, through Derby's ClientXADataSource named by class and jar.

Append through tasks (a task failing once, retried by Spark) and through the driver's one
transaction, a driver SIGKILLed after its decision (a process of its own) finished by
`xasink recover` while another application's prepared transaction is left alone, `xasink check`,
and the modes the generic dialect refuses. Rows and prepared transactions are read with
Derby's own JDBC client and XAResource (tests/derby_server.py), never through xasink.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import uuid

import pytest
from derby_server import CLIENT_JAR, XA_DATASOURCE, DerbyServer
from support import events_df, failing_once, kill_driver_at

from xasink import (
    FORMAT_ID,
    ConfigurationError,
    Database,
    PreflightError,
    WriterProperties,
    write_xa,
)


def new_table() -> str:
    return f"ev_{uuid.uuid4().hex[:10]}"


def _cli_args(derby: DerbyServer) -> list[str]:
    argv = ["--url", derby.jdbc_url, "--user", derby.user, "--password-env", "DERBY_PW"]
    return [*argv, "--xa-datasource", XA_DATASOURCE, "--jars", str(CLIENT_JAR)]


def xasink_here(derby: DerbyServer, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`xasink COMMAND` against Derby as a user runs it (password in a variable), in this
    process (`xasink.cli.main`), sparing a Python and a JVM."""
    from xasink.cli import main

    os.environ["DERBY_PW"] = derby.password
    out, err = io.StringIO(), io.StringIO()
    code = main([command, *_cli_args(derby), *args], out=out, err=err)
    done = subprocess.CompletedProcess([command], code, out.getvalue(), err.getvalue())
    assert derby.password not in done.stdout + done.stderr, "the password was printed"
    return done


def test_append_exactly_once_through_a_failed_task_and_the_drivers_transaction(spark, derby):
    table = new_table()
    db = Database(**derby.database_args())
    # Two branches written by tasks; the task meeting id 300 fails once, and Spark retries it.
    tasks = write_xa(
        failing_once(events_df(spark, 400, 2), at_id=300),
        db,
        table,
        writer_properties=WriterProperties(driver_write_bytes=0),
    )
    assert (tasks.rows, tasks.partitions, tasks.writer, tasks.created) == (400, 2, "tasks", True)
    assert tasks.load_paths == ("batched",)
    # A small frame: one local transaction on the driver (rows, job row, no PREPARE).
    small = events_df(spark, 50, 1).selectExpr("id + 400 AS id", "name", "v", "n", "ts")
    driver = write_xa(small, db, table)
    assert (driver.rows, driver.writer) == (50, "driver")

    assert derby.ids_in(table) == list(range(450))
    assert derby.prepared() == []
    row = derby.query(
        f'SELECT CAST("name" AS VARCHAR(20)), "n", CAST("ts" AS VARCHAR(30)) FROM "{table}" '
        'WHERE "id" = 7'  # a Spark string is a CLOB: unbounded, as ANSI has it
    )
    assert row == [("name-7", 7, "2023-11-14 22:13:27.0")]  # 1_700_000_007 s, in UTC
    states = derby.query(
        f"SELECT state FROM \"xasink_jobs\" WHERE job_id IN ('{tasks.job_id}', '{driver.job_id}')"
    )
    assert states == [("committed",), ("committed",)]


@pytest.mark.full_only  # ~10 s: a Python-row frame; make test keeps append, failure, kill
def test_every_generic_column_type_is_created_and_written(spark, derby):
    """A new table of every type the generic dialect creates (types.md), a row of values and
    a row of NULLs, through the driver's one transaction."""
    import datetime as dt
    from decimal import Decimal

    from pyspark.sql import types as T

    schema = T.StructType(
        [T.StructField("id", T.LongType())]
        + [
            T.StructField(name, kind)
            for name, kind in [
                ("b8", T.ByteType()),
                ("i16", T.ShortType()),
                ("i32", T.IntegerType()),
                ("f32", T.FloatType()),
                ("f64", T.DoubleType()),
                ("dec", T.DecimalType(10, 2)),
                ("txt", T.StringType()),
                ("bin", T.BinaryType()),
                ("flag", T.BooleanType()),
                ("day", T.DateType()),
                ("at", T.TimestampType()),
                ("wall", T.TimestampNTZType()),
                ("doc", T.ArrayType(T.IntegerType())),
            ]
        ]
    )
    at = dt.datetime(2024, 2, 29, 12, 34, 56, 123456, tzinfo=dt.timezone.utc)
    values = (1, -8, 300, 70000, 1.5, 0.25, Decimal("12.34"), "héllo", b"\x00\x01", True)
    values += (dt.date(2024, 2, 29), at, at.replace(tzinfo=None), [1, 2])
    table = new_table()
    df = spark.createDataFrame([values, (2, *[None] * 13)], schema).cache()
    df.count()  # cached: it has a size estimate, so the driver writes it
    small = WriterProperties(driver_write_bytes=1 << 30)  # the driver's one transaction
    result = write_xa(df, Database(**derby.database_args()), table, writer_properties=small)
    assert (result.rows, result.writer, result.created) == (2, "driver", True)
    columns = ", ".join(
        f'CAST("{c}" AS VARCHAR(40))' if c in ("txt", "doc") else f'"{c}"'
        for c in schema.names
        if c != "bin"
    )
    got = derby.query(f'SELECT {columns}, LENGTH("bin") FROM "{table}" ORDER BY "id"')
    stamp = "2024-02-29 12:34:56.123456"
    first = (1, -8, 300, 70000, "1.5", "0.25", "12.34", "héllo", "true", "2024-02-29")
    assert got == [(*first, stamp, stamp, "[1,2]", 2), (2, *[None] * 13)]


#: The killed driver's frame: one wave of tasks on local[2] (a branch per partition).
KILLED_ROWS, KILLED_PARTITIONS = 400, 2


def test_driver_killed_after_its_decision_is_finished_by_recover(derby):
    table = new_table()
    kill_driver_at(  # tasks: one branch per partition
        derby, table, "after_decision", rows=KILLED_ROWS, partitions=KILLED_PARTITIONS
    )
    ours = [x for x in derby.prepared() if x.startswith(f"{FORMAT_ID}:")]
    assert len(ours) == KILLED_PARTITIONS
    foreign = _foreign_prepared(derby)  # another application's, on the same server

    done = xasink_here(derby, "recover", "--grace", "0", "--json")  # the killed job's state
    assert done.returncode == 0, done.stdout + done.stderr  # is in no process but the journal
    actions = [a["action"] for a in json.loads(done.stdout)["actions"]]
    assert actions.count("commit") == KILLED_PARTITIONS, done.stdout

    assert derby.ids_in(table) == list(range(KILLED_ROWS))
    assert derby.prepared() == [foreign]  # recovery touches xasink's own branches only
    _rollback_foreign(derby)
    assert derby.prepared() == []
    state = derby.query(f"SELECT state FROM \"xasink_jobs\" WHERE target_table = '{table}'")
    assert state == [("committed",)]

    check = xasink_here(derby, "check")
    assert check.returncode == 0, check.stdout + check.stderr


def test_two_first_writers_create_one_journal_and_an_upgrade_skips_what_exists(derby):
    """No creation lock on the generic dialect: the later of two racing first writers meets
    the other's tables (Derby's X0Y32) and waits for its journal. A layout upgrade over a
    whole journal (CREATE without IF NOT EXISTS) is a no-op."""
    import threading

    from xasink.protocol.schema import JournalLayout

    tags, errors = [], []

    def first_writer() -> None:
        try:
            with derby.connect() as conn:
                tags.append(JournalLayout("generic", "race", "", 20.0).ensure(conn).tag)
        except Exception as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=first_writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(tags) == 2 and len(set(tags)) == 1
    with derby.connect() as conn:
        JournalLayout("generic", "race", tags[0], 20.0)._upgrade_steps(conn)
    assert derby.query('SELECT COUNT(*) FROM "race"."xasink_meta"') == [(1,)]


@pytest.mark.parametrize(
    ("mode", "options"),
    [("upsert", {"key": "id"}), ("merge", {"key": "id", "op": "op"}), ("overwrite", {})],
)
def test_staged_modes_are_refused_before_anything_is_written(spark, derby, mode, options):
    table = new_table()
    df = events_df(spark, 10, 1)
    if mode == "merge":
        df = df.selectExpr("*", "'upsert' AS op")
    with pytest.raises(ConfigurationError, match="generic dialect") as refused:
        write_xa(df, Database(**derby.database_args()), table, mode=mode, **options)
    assert "append" in str(refused.value)
    assert derby.query(f"SELECT COUNT(*) FROM SYS.SYSTABLES WHERE TABLENAME = '{table}'") == [(0,)]


# -- another application's prepared transaction ------------------------------------------
_FOREIGN_FORMAT = 4242


def _foreign_prepared(derby: DerbyServer) -> str:
    """Prepare a transaction of another format id through Derby's own XAResource."""
    from xasink.runtime.jvm import jclass

    with derby.connect() as conn:  # its table first: a prepared DDL would lock the catalog
        conn.createStatement().execute("CREATE TABLE foreign_app (i INT)")
    xa = _xa_connection(derby)
    resource = xa.getXAResource()
    xid = _xid(jclass)
    resource.start(xid, 0)
    xa.getConnection().createStatement().execute("INSERT INTO foreign_app VALUES (1)")
    resource.end(xid, 0x04000000)
    resource.prepare(xid)
    xa.close()
    return f"{_FOREIGN_FORMAT}:other-app:b1"


def _rollback_foreign(derby: DerbyServer) -> None:
    from xasink.runtime.jvm import jclass

    xa = _xa_connection(derby)
    xa.getXAResource().rollback(_xid(jclass))
    xa.close()


def _xa_connection(derby: DerbyServer):
    from xasink.runtime.jvm import jclass

    derby.prepared()  # the client jar loaded
    source = jclass(XA_DATASOURCE)()
    source.setServerName(derby.host)
    source.setPortNumber(derby.port)
    source.setDatabaseName(derby.database)
    return source.getXAConnection(derby.user, derby.password)


def _xid(jclass):
    """A foreign XID: xasink's own Java Xid class would do, but its layout is xasink's."""
    import jpype

    @jpype.JImplements("javax.transaction.xa.Xid")
    class _Foreign:
        @jpype.JOverride
        def getFormatId(self):
            return _FOREIGN_FORMAT

        @jpype.JOverride
        def getGlobalTransactionId(self):
            return jpype.JArray(jpype.JByte)(b"other-app")

        @jpype.JOverride
        def getBranchQualifier(self):
            return jpype.JArray(jpype.JByte)(b"b1")

    return _Foreign()


def test_a_refused_login_names_neither_password(spark, derby):
    """Derby checks the password (built-in authentication is on): a wrong one is refused
    before anything is written, and the message masks it."""
    wrong = "Wr0ng-pa55-s3cret"
    args = {**derby.database_args(), "password": wrong}
    with pytest.raises(PreflightError, match="Cannot connect to") as refused:
        write_xa(events_df(spark, 5, 1), Database(**args), new_table())
    assert wrong not in str(refused.value) and derby.password not in str(refused.value)
