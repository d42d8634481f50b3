"""Spark sessions, test DataFrames and independent checks (psycopg / pymysql only)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

from servers import DbServer

#: Small Arrow batches, so "in the middle of a partition" is a real place.
ARROW_BATCH_ROWS = 500

TABLE_DDL = {
    "postgres": "CREATE TABLE {t} (id BIGINT NOT NULL, name TEXT, v DOUBLE PRECISION, n INTEGER, "
    "ts TIMESTAMPTZ)",
    "mariadb": "CREATE TABLE {t} (id BIGINT NOT NULL, name TEXT, v DOUBLE, n INT, ts DATETIME(6))",
}


def spark_builder(app: str = "xasink-tests") -> Any:
    """local[2,4]: two cores, and a task may fail 3 times before the job fails."""
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master("local[2,4]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
    )


def events_df(spark: Any, rows: int, partitions: int) -> Any:
    """Rows (id, name, v, n, ts) with ids 0..rows-1; no id repeats."""
    from pyspark.sql import functions as F

    return spark.range(0, rows, numPartitions=partitions).select(
        F.col("id"),
        F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
        (F.col("id") * 0.5).alias("v"),
        (F.col("id") % 1000).cast("int").alias("n"),
        F.timestamp_seconds(F.col("id") + F.lit(1_700_000_000)).alias("ts"),
    )


def new_table(server: DbServer, prefix: str = "ev") -> str:
    """A fresh, empty events table with a unique name (no primary key: duplicates show)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        conn.cursor().execute(TABLE_DDL[server.kind].format(t=name))
    return name


def ids_in(server: DbServer, table: str) -> list[int]:
    """Every id in the table, duplicates included, sorted (read with psycopg/pymysql)."""
    quote = '"' if server.kind == "postgres" else "`"
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id FROM {quote}{table}{quote} ORDER BY id")
        return [int(row[0]) for row in cursor.fetchall()]


def xasink_prepared(server: DbServer) -> list[str]:
    """Prepared transactions that carry xasink's formatId."""
    from xasink import FORMAT_ID

    if server.kind == "mariadb":
        return [str(x) for x in server.xa_recover() if x.format_id == FORMAT_ID]
    return [g for g in server.prepared_transactions() if g.startswith(f"{FORMAT_ID}_")]


def assert_exactly(server: DbServer, table: str, expected: range | list[int]) -> None:
    """The exact id set, each id once, and no prepared branch left on the server."""
    ids = ids_in(server, table)
    assert ids == sorted(expected), _id_diff(ids, list(expected))
    assert server.prepared_transactions() == [], "prepared transactions were left behind"


def _id_diff(got: list[int], want: list[int]) -> str:
    extra = len(got) - len(set(got))
    missing = sorted(set(want) - set(got))
    unexpected = sorted(set(got) - set(want))
    return (
        f"{len(got)} rows, want {len(want)}: {extra} duplicates, missing {missing[:10]}, "
        f"unexpected {unexpected[:10]}"
    )


def job_states(server: DbServer) -> dict[str, str]:
    """xasink's journal, read independently: job id -> state."""
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT job_id, state FROM xasink_jobs")
        return {str(job): str(state) for job, state in cursor.fetchall()}


def connection_args(server: DbServer) -> dict[str, Any]:
    return {"url": server.jdbc_url, "user": server.user, "password": server.password}


def spec_for(server: DbServer) -> Any:
    """xasink's ConnectionSpec for a test server, as write_xa would build it."""
    from xasink.api import make_spec

    return make_spec(
        server.jdbc_url,
        user=server.user,
        password=server.password,
        properties=None,
        dialect=None,
        xa_datasource=None,
        jars=None,
        connect_timeout=10,
    )


@contextlib.contextmanager
def journal_session(server: DbServer) -> Iterator[tuple[Any, Any, Any]]:
    """(spec, session, journal) for driving xasink's internals against `server`."""
    from xasink.api import _open_journal

    spec = spec_for(server)
    session, journal = _open_journal(spec, None)
    with session:
        yield spec, session, journal
