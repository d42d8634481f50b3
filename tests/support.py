"""Spark sessions, test DataFrames and independent checks (psycopg / pymysql only)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servers import DbServer

TESTS = Path(__file__).parent
#: The driver-kill tests' job size.
ROWS, PARTITIONS = 3000, 3
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


def latest_job_state(server: DbServer) -> str:
    """The state of the job written last (the server is shared by many tests)."""
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT state FROM xasink_jobs ORDER BY created_at DESC LIMIT 1")
        return str(cursor.fetchone()[0])


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


def xasink_cli(db, command: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run an `xasink` subcommand as a user would, with the password in an environment
    variable and no terminal (so nothing can wait for an answer)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "xasink",
            command,
            "--url",
            db.jdbc_url,
            "--user",
            db.user,
            "--password-env",
            "XASINK_TEST_PASSWORD",
            *args,
        ],
        env={**os.environ, "XASINK_TEST_PASSWORD": db.password},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )


def cli(db, *args: str) -> subprocess.CompletedProcess[str]:
    """`xasink recover` with `args`."""
    return xasink_cli(db, "recover", *args)


class DriverProcess:
    """A write_xa driver in its own process group that stops at a fault point: killed
    there (`hang`), or stalled until `resume()` (`pause`)."""

    def __init__(self, db, table: str, point: str, mode: str | None = None, action: str = "hang"):
        self.point = point
        self.output: list[str] = []
        self._reached = threading.Event()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(TESTS / "driver_process.py"),
                db.jdbc_url,
                db.user,
                table,
                str(ROWS),
                str(PARTITIONS),
                point,
                *([mode] if mode else []),
            ],
            cwd=TESTS,
            env={
                **os.environ,
                "XASINK_TEST_PASSWORD": db.password,
                "XASINK_TEST_FAULT_ACTION": action,
            },
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._watch, daemon=True).start()
        self._password = db.password

    def _watch(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line)
            if line.startswith(f"XASINK-FAULT {self.point}"):
                self._reached.set()

    def wait_for_point(self) -> None:
        deadline = time.monotonic() + 240
        while not self._reached.wait(timeout=1) and self.proc.poll() is None:
            assert time.monotonic() < deadline, "driver hung before " + self.point
        self._reached.wait(timeout=5)  # the watcher may still be reading the last lines
        assert self._reached.is_set(), f"driver never reached {self.point}: " + "".join(
            self.output[-30:]
        )

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        assert self._password not in "".join(self.output)

    def resume(self, timeout: float = 240) -> str:
        """Continue a paused driver; its last line (`RESULT ...` or `ERROR ...`)."""
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.wait(timeout=timeout)
        time.sleep(0.2)  # the watcher drains the pipe
        text = "".join(self.output)
        assert self._password not in text
        finals = [ln for ln in self.output if ln.startswith(("RESULT ", "ERROR "))]
        assert finals, "driver ended without a result: " + "".join(self.output[-30:])
        return finals[-1].strip()

    def job_id(self, db) -> str:
        """The job this driver started (the newest job on the shared server)."""
        with db.connect() as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT job_id FROM xasink_jobs ORDER BY created_at DESC LIMIT 1")
            return str(cursor.fetchone()[0])


def kill_driver_at(db, table: str, point: str, mode: str | None = None) -> None:
    """Start a driver that stops at `point`, then SIGKILL its whole process group.

    It writes `ROWS` events, or with `mode`, `mode_case(mode)`'s input."""
    driver = DriverProcess(db, table, point, mode)
    try:
        driver.wait_for_point()
    finally:
        driver.kill()


# -- write modes: one seeded keyed table, and per mode an input and its exact outcome ------
#: Rows (id, name, v) with ids 0..OLD_ROWS-1 that every mode test starts from.
OLD_ROWS = 100
KEYED_DDL = {
    "postgres": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(64), v DOUBLE PRECISION)",
    "mariadb": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(64), v DOUBLE)",
}
Contents = dict[int, tuple[Any, Any]]


def old_contents() -> Contents:
    return {i: ("old", float(i)) for i in range(OLD_ROWS)}


def seeded_table(server: DbServer, prefix: str = "kv") -> str:
    """A keyed table holding `old_contents()`."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(KEYED_DDL[server.kind].format(t=name))
        placeholder = "%s, %s, %s"
        cursor.executemany(
            f"INSERT INTO {name} (id, name, v) VALUES ({placeholder})",
            [(i, n, v) for i, (n, v) in old_contents().items()],
        )
        if server.kind == "mariadb":
            conn.commit()
    return name


def contents(server: DbServer, table: str) -> Contents:
    """Every row as id -> (name, v), read with psycopg/pymysql; a repeated id fails."""
    quote = '"' if server.kind == "postgres" else "`"
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id, name, v FROM {quote}{table}{quote}")
        rows = cursor.fetchall()
    found = {int(i): (n, None if v is None else float(v)) for i, n, v in rows}
    assert len(found) == len(rows), "an id appears twice"
    return found


def stage_tables(server: DbServer) -> list[str]:
    """xasink staging tables left in the database."""
    with server.connect() as conn:
        cursor = conn.cursor()
        if server.kind == "postgres":
            cursor.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'xasink_stage_%'")
        else:
            cursor.execute("SHOW TABLES LIKE 'xasink\\_stage\\_%'")
        return [str(row[0]) for row in cursor.fetchall()]


def mode_case(spark: Any, mode: str, partitions: int = 3) -> tuple[Any, dict[str, Any], Contents]:
    """(input DataFrame, write_xa keyword arguments, exact expected contents) for `mode`."""
    rows, schema, options, expected = mode_rows(mode)
    return spark.createDataFrame(rows, schema).repartition(partitions), options, expected


def mode_rows(mode: str) -> tuple[list[tuple[Any, ...]], str, dict[str, Any], Contents]:
    """(input rows, their schema, write_xa keyword arguments, exact expected contents) for
    `mode`, applied to `old_contents()`. Keys overlap the old rows on purpose: a branch that
    locked old keys (overwrite's DELETE, an upsert's UPDATE) would block another's INSERT."""
    expected = old_contents()
    plain = "id long, name string, v double"
    if mode == "append":
        rows = [(i, "new", i * 2.0) for i in range(OLD_ROWS, 400)]
        expected.update({i: (n, v) for i, n, v in rows})
        return rows, plain, {}, expected
    if mode == "overwrite":
        rows = [(i, "new", i * 2.0) for i in range(50, 350)]
        return rows, plain, {"mode": "overwrite"}, {i: (n, v) for i, n, v in rows}
    if mode == "upsert":
        rows = [(i, "new", i * 2.0, 2) for i in range(50, 350)]
        rows += [(i, "stale", -1.0, 1) for i in range(60, 70)]  # older versions lose
        expected.update({i: (n, v) for i, n, v, _ in rows if n == "new"})
        options = {"mode": "upsert", "key": ["id"], "order": "seq"}
        return rows, plain + ", seq int", options, expected
    assert mode == "merge"
    changes = [(i, None, None, "d", 5) for i in range(0, 30)]  # deletes of old rows
    changes += [(i, "mid", 1.0, "u", 1) for i in range(30, 60)]
    changes += [(i, "new", i * 2.0, "u", 2) for i in range(30, 60)]  # the last update wins
    changes += [(i, "new", i * 2.0, "c", 1) for i in range(100, 200)]  # inserts
    changes += [(i, None, None, "d", 2) for i in range(150, 160)]  # inserted, then deleted
    changes += [(i, None, None, "d", 1) for i in range(500, 505)]  # deletes of nothing
    for i in range(0, 30):
        del expected[i]
    expected.update({i: ("new", i * 2.0) for i in range(30, 60)})
    expected.update({i: ("new", i * 2.0) for i in range(100, 200) if not 150 <= i < 160})
    options = {
        "mode": "merge",
        "key": "id",
        "op": "op",
        "order": "seq",
        "op_values": {"insert": "c", "update": "u", "delete": "d"},
    }
    return changes, plain + ", op string, seq int", options, expected
