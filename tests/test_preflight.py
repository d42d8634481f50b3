"""Every preflight failure: a clear message, nothing written, no branch left, no secret."""

from __future__ import annotations

import logging
import re
import socket
import time

import pytest
from support import assert_exactly, connection_args, events_df, new_table

import xasink.runtime.jars
from xasink import (
    ConfigurationError,
    Database,
    DriverNotFoundError,
    PreflightError,
    WriterProperties,
    write_xa,
)
from xasink.dialects.mysql import version_problem
from xasink.spark.session import check_spark_conf

SECRET = "Pr3flight-S3cret"


@pytest.fixture
def logs(caplog):
    caplog.set_level(logging.DEBUG)
    return caplog


def no_secret(exc: BaseException, logs, password: str) -> None:
    assert password not in str(exc)
    assert password not in logs.text


def test_unreachable_database_fails_within_seconds(spark, logs):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    started = time.monotonic()
    with pytest.raises(PreflightError) as error:
        write_xa(
            events_df(spark, 10, 1),
            Database(f"jdbc:postgresql://127.0.0.1:{port}/app", user="app", password=SECRET),
            "t",
        )
    assert time.monotonic() - started < 15
    assert f"127.0.0.1:{port}" in str(error.value)
    no_secret(error.value, logs, SECRET)


def test_missing_driver_jar_says_where_it_looked(spark, postgres, tmp_path, monkeypatch, logs):
    monkeypatch.setattr(xasink.runtime.jars, "SYSTEM_DIRS", (tmp_path / "system",))
    monkeypatch.setattr(xasink.runtime.jars, "_PROJECT_JARS", tmp_path / "project-jars")
    monkeypatch.delenv(xasink.runtime.jars.JARS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    table = new_table(postgres)
    with pytest.raises(DriverNotFoundError) as error:
        write_xa(events_df(spark, 10, 1), table=table, **connection_args(postgres))
    message = str(error.value)
    for place in ("system", "project-jars", "XASINK_JARS", "jars=["):
        assert place in message
    assert "libpostgresql-jdbc-java" in message
    no_secret(error.value, logs, postgres.password)
    assert_exactly(postgres, table, [])


def test_named_jar_that_does_not_exist(spark, postgres, logs):
    with pytest.raises(DriverNotFoundError, match=re.escape("/no/such/driver.jar")):
        write_xa(
            events_df(spark, 10, 1),
            table="t",
            **connection_args(postgres, jars=["/no/such/driver.jar"]),
        )


def test_postgres_without_prepared_transactions(spark, pg_no_xa, logs):
    table = new_table(pg_no_xa)
    with pytest.raises(PreflightError) as error:
        write_xa(events_df(spark, 10, 2), table=table, **connection_args(pg_no_xa))
    message = str(error.value)
    assert "max_prepared_transactions = 0" in message and "restart" in message
    no_secret(error.value, logs, pg_no_xa.password)
    assert_exactly(pg_no_xa, table, [])


def test_more_partitions_than_prepared_transactions(spark, postgres, logs):
    table = new_table(postgres)
    with postgres.connect() as conn:
        limit = int(conn.execute("SHOW max_prepared_transactions").fetchone()[0])
    with pytest.raises(PreflightError) as error:
        write_xa(
            events_df(spark, limit + 50, limit + 50),
            table=table,
            **connection_args(postgres),
            writer_properties=WriterProperties(max_branches=None),
        )
    assert f"max_prepared_transactions = {limit}" in str(error.value)
    assert "max_branches" in str(error.value)
    no_secret(error.value, logs, postgres.password)
    assert_exactly(postgres, table, [])


def test_missing_table(spark, db, logs):
    with pytest.raises(PreflightError, match="no_such_table_here") as error:
        write_xa(
            events_df(spark, 10, 1),
            table="no_such_table_here",
            create="never",
            **connection_args(db),
        )
    assert "Create it first" in str(error.value)
    no_secret(error.value, logs, db.password)
    assert db.prepared_transactions() == []


@pytest.mark.parametrize(
    "shape", ["{t}; DROP TABLE {t}", '{t}"; DROP TABLE "{t}', "{t}`; DROP TABLE `{t}"]
)
@pytest.mark.parametrize("create", ["never", "if_missing"])
def test_hostile_table_name_executes_nothing(spark, db, shape, create, logs):
    """Quoted, the name is just a name: refused when missing, or created as exactly it."""
    victim = new_table(db)
    frame = events_df(spark, 10, 1)
    if create == "never":
        with pytest.raises(PreflightError):
            write_xa(frame, table=shape.format(t=victim), create=create, **connection_args(db))
    else:
        result = write_xa(frame, table=shape.format(t=victim), **connection_args(db))
        assert (result.created, result.rows) == (True, 10)
    assert_exactly(db, victim, [])  # still there, still empty


def test_dataframe_columns_the_table_lacks(spark, db, logs):
    from pyspark.sql import functions as F

    table = new_table(db)
    df = events_df(spark, 10, 1).withColumn("extra_one", F.lit(1)).withColumn("extra_two", F.lit(2))
    with pytest.raises(PreflightError) as error:
        write_xa(df, table=table, **connection_args(db))
    assert "'extra_one'" in str(error.value) and "'extra_two'" in str(error.value)
    no_secret(error.value, logs, db.password)
    assert_exactly(db, table, [])


def test_column_names_match_case_insensitively_when_unambiguous(spark, db):
    table = new_table(db)
    df = events_df(spark, 20, 1).withColumnRenamed("name", "NAME")
    assert write_xa(df, table=table, **connection_args(db)).rows == 20
    assert_exactly(db, table, range(20))


def test_unknown_url_scheme(spark):
    with pytest.raises(ConfigurationError, match="xa_datasource"):
        write_xa(events_df(spark, 1, 1), "jdbc:oracle:thin:@h:1521/x", "t")


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("10.4.31-MariaDB", False),
        ("10.5.0-MariaDB-log", True),
        ("10.11.19-MariaDB-0+deb12u1", True),
        ("5.7.6-log", False),
        ("5.7.7", True),
        ("8.0.36", True),
    ],
)
def test_mysql_versions_that_lose_prepared_branches(version, ok):
    problem = version_problem(version)
    assert (problem is None) is ok
    if problem:
        assert "Upgrade" in problem


def test_pyspark_memory_too_small_for_a_jvm():
    with pytest.raises(PreflightError, match=re.escape("spark.executor.pyspark.memory")):
        check_spark_conf({"spark.executor.pyspark.memory": "1g"})
    check_spark_conf({"spark.executor.pyspark.memory": "4g"})
    check_spark_conf({})
