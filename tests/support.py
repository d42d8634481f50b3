"""Spark sessions, test DataFrames and independent checks (psycopg / pymysql only)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from servers import DbServer
from spark_archive import driver_java_options

from xasink import Database

TESTS = Path(__file__).parent
#: The driver-kill tests' job size.
ROWS, PARTITIONS = 3000, 3
#: Small Arrow batches, so "in the middle of a partition" is a real place.
ARROW_BATCH_ROWS = 500

TABLE_DDL = {
    "postgres": "CREATE TABLE {t} (id BIGINT NOT NULL, name TEXT, v DOUBLE PRECISION, n INTEGER, "
    "ts TIMESTAMPTZ)",
    "mysql": "CREATE TABLE {t} (id BIGINT NOT NULL, name TEXT, v DOUBLE, n INT, ts DATETIME(6))",
}


def spark_builder(app: str = "xasink-tests", *, short_lived: bool = True) -> Any:
    """local[2,4]: two cores, and a task may fail 3 times before the job fails. The driver
    JVM loads its classes from this machine's archive (tests/spark_archive.py); a
    `short_lived` one (a test's driver process) also compiles only with the JIT's quick
    tier, which starts it 2-3 s sooner here. The tests' own long session keeps both tiers."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2,4]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ARROW_BATCH_ROWS))
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    options = [os.environ.get("XASINK_TEST_DRIVER_JAVA_OPTIONS") or driver_java_options()]
    if short_lived:
        options.append("-XX:TieredStopAtLevel=1")
    java_options = " ".join(filter(None, options))
    return (
        builder.config("spark.driver.extraJavaOptions", java_options) if java_options else builder
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


def _python_path() -> list[str]:
    return [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]


#: Driver processes print every thread's stack if they crash (an abort at exit included).
DIAGNOSE_CRASHES = {"PYTHONFAULTHANDLER": "1"}


def run_script(code: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """Python `code` run as a driver process of its own (tests/ importable), output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=TESTS,
        env={
            **os.environ,
            **DIAGNOSE_CRASHES,
            "PYTHONPATH": os.pathsep.join([str(TESTS), *_python_path()]),
        },
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def failing_once(df: Any, at_id: int) -> Any:
    """`df`, whose task that meets id `at_id` fails in its first attempt, mid-partition (a
    Python UDF raises), and passes when Spark retries it. Works classic and under Connect."""
    from pyspark.sql import functions as F

    def check(value: int) -> int:
        from pyspark import TaskContext

        if value == at_id and TaskContext.get().attemptNumber() == 0:
            raise RuntimeError(f"planned task failure at id {value}")
        return value

    return df.withColumn("id", F.udf(check, "long")(F.col("id")))


def json_files(directory: Path, batches: list[list[dict[str, Any]]]) -> None:
    """One JSON file per micro-batch, in the given order (see `stream_files`)."""
    directory.mkdir(exist_ok=True)
    for b, rows in enumerate(batches):
        path = directory / f"part-{b:03d}.json"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        os.utime(path, (1_600_000_000 + b, 1_600_000_000 + b))


def stream_files(directory: Path, batches: int, per_batch: int, start: int = 0) -> None:
    """One JSON file per micro-batch (id, name, v), ids start*per_batch onwards, each once.

    File b is modified at second b of an old day: Spark takes new files in modification
    order (ties in any order), so file b is the stream's b-th batch."""
    directory.mkdir(exist_ok=True)
    for b in range(start, start + batches):
        rows = [{"id": b * per_batch + i, "name": f"b{b}", "v": 0.5} for i in range(per_batch)]
        path = directory / f"part-{b:03d}.json"
        path.write_text("\n".join(map(json.dumps, rows)) + "\n")
        os.utime(path, (1_600_000_000 + b, 1_600_000_000 + b))


def file_stream(spark: Any, directory: Path, schema: str = "id long, name string, v double") -> Any:
    """The streaming DataFrame over `stream_files`: one file per micro-batch."""
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))


def xasink_stream(stream: Any, db: DbServer, table: str, checkpoint: object) -> Any:
    """`stream.writeStream.format("xasink")` into `table`, with `db`'s connection options
    and the checkpoint (a path, or any spelling of one)."""
    return (
        stream.writeStream.format("xasink")
        .option("url", db.jdbc_url)
        .option("dbtable", table)
        .option("user", db.user)
        .option("password", db.password)
        .option("checkpointLocation", str(checkpoint))
    )


def xasink_writer(df: Any, db: DbServer, table: str, mode: str = "append", **options: Any) -> Any:
    """`df.write.format("xasink")` into `table` with save mode `mode`, `db`'s connection
    options and every further option in `options`."""
    writer = (
        df.write.format("xasink")
        .mode(mode)
        .option("url", db.jdbc_url)
        .option("dbtable", table)
        .option("user", db.user)
        .option("password", db.password)
    )
    for name, value in options.items():
        writer = writer.option(name, value)
    return writer


def start_foreach_stream(
    spark: Any, source: Path, checkpoint: Path, write: Any, schema: str | None = None
) -> Any:
    """The file stream over `source` through foreachBatch(`write`), until its input is
    consumed (availableNow); the started query."""
    return (
        (file_stream(spark, source, schema) if schema else file_stream(spark, source))
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run `call` on a daemon thread; the list receives its result or its exception."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def released_together(
    calls: list[Callable[[], Any]],
    waiting: Callable[[], int],
    release: Callable[[], Any],
    what: str,
) -> list[Any]:
    """Run `calls` on threads of their own, wait until `waiting()` sees every one held up at
    `what` (a lock the caller holds), then `release()` it: they race from there on. Returns
    each call's result or exception, in order."""
    threads = [in_background(call) for call in calls]
    deadline = time.monotonic() + 120
    while waiting() < len(threads):
        assert time.monotonic() < deadline, f"the writers never all reached {what}"
        assert all(t.is_alive() for t, _ in threads), [o for _, o in threads]
        time.sleep(0.05)
    release()
    for thread, _ in threads:
        thread.join(240)
    return [outcome[0] for _, outcome in threads]


def new_table(server: DbServer, prefix: str = "ev") -> str:
    """A fresh, empty events table with a unique name (no primary key: duplicates show)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        conn.cursor().execute(TABLE_DDL[server.dialect].format(t=name))
    return name


def run_sql(server: DbServer, *statements: str, admin: bool = True) -> list[tuple[Any, ...]]:
    """Run `statements` (as the admin, else the app user), committed; the last one's rows."""
    rows: list[tuple[Any, ...]] = []
    with contextlib.closing(server.admin_connect() if admin else server.connect()) as conn:
        with contextlib.closing(conn.cursor()) as cur:
            for sql in statements:
                cur.execute(sql)
                rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
        if server.kind != "postgres":
            conn.commit()
    return rows


def own_journal_schema(server: DbServer) -> Iterator[str]:
    """A schema (MySQL: a database) of its own for a journal, the app user's, dropped
    afterwards: a test that fills a journal's history or damages it keeps it to itself."""
    name = f"js_{uuid.uuid4().hex[:8]}"
    if server.kind == "postgres":
        run_sql(server, f"CREATE SCHEMA {name} AUTHORIZATION {server.user}")
    else:
        run_sql(server, f"CREATE DATABASE {name}", f"GRANT ALL ON {name}.* TO '{server.user}'@'%'")
    yield name
    drop = f"DROP SCHEMA {name} CASCADE" if server.kind == "postgres" else f"DROP DATABASE {name}"
    with contextlib.suppress(Exception):
        run_sql(server, drop)


def prepared_branch(db: DbServer, schema: str, branch: Any) -> str:
    """A prepared branch (`branch`: an xasink BranchId) holding its uncommitted marker row in
    the journal in `schema`, as a late attempt leaves it; returns the admin statement that
    rolls it back."""
    xid = branch.xid
    marker = (
        f"INSERT INTO {schema}.xasink_markers (job_id, partition_id, attempt, row_count) "
        f"VALUES ('{branch.job_id}', {branch.partition}, {branch.attempt}, 1)"
    )
    if db.kind == "postgres":
        conn = db.connect(autocommit=False)
        with contextlib.closing(conn):
            conn.execute(marker)
            conn.execute(f"PREPARE TRANSACTION '{xid}'")
        return f"ROLLBACK PREPARED '{xid}'"
    named = f"X'{xid.gtrid.hex()}',X'{xid.bqual.hex()}',{xid.format_id}"
    conn = db.connect()
    with contextlib.closing(conn), conn.cursor() as cur:
        for sql in (f"XA START {named}", marker, f"XA END {named}", f"XA PREPARE {named}"):
            cur.execute(sql)
    return f"XA ROLLBACK {named}"


def journaled(server: DbServer, table: str) -> str:
    """How the journal's `target_table` names an unqualified test table: as the server
    resolves it (PostgreSQL: schema public; MySQL family: the test database)."""
    return f"{'public' if server.kind == 'postgres' else server.database}.{table}"


def apply_lock_name(server: DbServer, table: str) -> str:
    """The name xasink's apply lock on an unqualified test table is keyed by."""
    schema = "public" if server.kind == "postgres" else server.database
    return f"apply:{schema}\x00{table}"


def hold_apply_lock(server: DbServer, table: str) -> tuple[Any, str]:
    """Take xasink's apply lock of an unqualified test table on a connection of its own, as
    xasink names it; returns (the connection, the SQL that releases it)."""
    from xasink.dialects.base import advisory_key

    key = advisory_key(apply_lock_name(server, table))
    holder = server.connect()
    if server.kind == "postgres":
        holder.cursor().execute("SELECT pg_advisory_lock(%s)", (key,))
        return holder, f"SELECT pg_advisory_unlock({key})"
    holder.cursor().execute("SELECT GET_LOCK(%s, 10)", (f"xasink-apply-{key:x}",))
    return holder, f"SELECT RELEASE_LOCK('xasink-apply-{key:x}')"


def waiting_on_apply_lock(server: DbServer) -> int:
    """Sessions waiting for xasink's apply lock (an advisory or named lock) now."""
    with server.admin_connect() as conn:
        cursor = conn.cursor()
        if server.kind == "postgres":
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
        else:
            cursor.execute(
                "SELECT count(*) FROM information_schema.processlist WHERE state = 'User lock'"
            )
        return int(cursor.fetchone()[0])


def released_by_apply_lock(
    server: DbServer, table: str, calls: list[Callable[[], Any]]
) -> list[Any]:
    """`released_together(calls)` from behind xasink's apply lock of `table`: held while
    they start, released once every one waits for it. Each call's result or exception."""
    holder, unlock = hold_apply_lock(server, table)
    try:
        return released_together(
            calls,
            lambda: waiting_on_apply_lock(server),
            lambda: holder.cursor().execute(unlock),
            "the apply lock",
        )
    finally:
        holder.close()


def ids_in(server: DbServer, table: str) -> list[int]:
    """Every id in the table, duplicates included, sorted (read with psycopg/pymysql)."""
    quote = '"' if server.kind == "postgres" else "`"
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id FROM {quote}{table}{quote} ORDER BY id")
        return [int(row[0]) for row in cursor.fetchall()]


def rows_in(server: DbServer, table: str) -> list[tuple[Any, ...]]:
    """Every row of `table`, ordered by id (read with psycopg/pymysql, as the app user)."""
    return run_sql(server, f"SELECT * FROM {table} ORDER BY id", admin=False)


def xasink_prepared(server: DbServer) -> list[str]:
    """Prepared transactions that carry xasink's formatId."""
    from xasink import FORMAT_ID

    if server.kind != "postgres":
        return [str(x) for x in server.xa_recover() if x.format_id == FORMAT_ID]
    return [g for g in server.prepared_transactions() if g.startswith(f"{FORMAT_ID}_")]


def assert_exactly(server: DbServer, table: str, expected: range | list[int]) -> None:
    """The exact id set, each id once, and no prepared branch left on the server."""
    ids = ids_in(server, table)
    assert ids == sorted(expected), _id_diff(ids, list(expected))
    assert server.prepared_transactions() == [], "prepared transactions were left behind"


#: The columns of `seeded_table`, as a Spark schema.
KV_SCHEMA = "id long, name string, v double"


def frame(
    spark: Any, rows: list[tuple[Any, ...]], partitions: int = 3, schema: str = KV_SCHEMA
) -> Any:
    """Spread over `partitions`; 0: one cached frame, which Spark can size for the driver."""
    df = spark.createDataFrame(rows, schema)
    if partitions:
        return df.repartition(partitions)
    df.cache().count()
    return df


def assert_clean(server: DbServer) -> None:
    """Nothing left prepared and no staging table left on the server."""
    assert server.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(server) == [], "a staging table was left behind"


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


def connection_args(server: DbServer, **more: Any) -> dict[str, Any]:
    """The `database` keyword of xasink's entry points for a test server (`more`: further
    fields of its Database)."""
    return {"database": database_of(server, **more)}


def format_login(server: DbServer) -> dict[str, str]:
    """format("xasink")'s options that reach a test server, as Spark's JDBC names them."""
    return {"url": server.jdbc_url, "user": server.user, "password": server.password}


def database_of(server: DbServer, **more: Any) -> Database:
    return Database(server.jdbc_url, user=server.user, password=server.password, **more)


def sink_mark(server: DbServer, sink_id: str) -> tuple[int, str | None] | None:
    """A streaming sink's (highest decided batch, its job), read independently."""
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT batch_id, job_id FROM xasink_sinks WHERE sink_id = %s", (sink_id,))
        row = cursor.fetchone()
    return None if row is None else (int(row[0]), None if row[1] is None else str(row[1]))


def spec_for(server: DbServer) -> Any:
    """xasink's ConnectionSpec for a test server, as write_xa would build it."""
    from xasink.protocol.connecting import make_spec

    return make_spec(database_of(server))


@contextlib.contextmanager
def journal_session(server: DbServer) -> Iterator[tuple[Any, Any, Any]]:
    """(spec, session, journal) for driving xasink's internals against `server`."""
    from xasink.protocol.connecting import open_journal as _open_journal
    from xasink.tables.applier import STAGED_APPLY

    spec = spec_for(server)
    session, journal = _open_journal(spec, None, staged=STAGED_APPLY)
    with session:
        yield spec, session, journal


def xasink_cli(
    db, command: str, *args: str, in_process: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run an `xasink` subcommand as a user would, with the password in an environment
    variable and no terminal (so nothing can wait for an answer).

    In this process by default (`xasink.cli.main`, its report and errors captured): starting
    a Python and a JVM for every call proves nothing the command's own code does not. With
    `in_process=False`, as a process of its own (exit codes, output of a real process)."""
    argv = [
        command,
        "--url",
        db.jdbc_url,
        "--user",
        db.user,
        "--password-env",
        "XASINK_TEST_PASSWORD",
        *args,
    ]
    if not in_process:
        return subprocess.run(
            [sys.executable, "-m", "xasink", *argv],
            env={**os.environ, "XASINK_TEST_PASSWORD": db.password},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
    import io

    from xasink.cli import main

    os.environ["XASINK_TEST_PASSWORD"] = db.password
    out, err = io.StringIO(), io.StringIO()
    try:
        code = main(argv, out=out, err=err)
    except SystemExit as exc:  # argparse refused the arguments
        code = int(exc.code or 0)
    return subprocess.CompletedProcess(["xasink", *argv], code, out.getvalue(), err.getvalue())


def cli(db, *args: str) -> subprocess.CompletedProcess[str]:
    """`xasink recover` with `args`."""
    return xasink_cli(db, "recover", *args)


def process_state(pid: int) -> str:
    """A process's state letter from /proc (T: stopped; "gone" once reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


class WatchedDriver:
    """A driver script in its own process group, its output collected line by line, that a
    test can wait on and SIGKILL (the whole group: Spark's JVM and Python workers too)."""

    def __init__(
        self,
        script: str,
        args: list[str],
        password: str | None,
        env: dict[str, str],
        stdin: int | None = None,
    ):
        self.output: list[str] = []
        self._password = password
        self._cond = threading.Condition()
        self._ended = False  # the output is closed: the driver (group leader) has ended
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / script), *args],
            cwd=TESTS,
            env={**os.environ, **DIAGNOSE_CRASHES, "XASINK_TEST_PASSWORD": password or "", **env},
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.output.append(line)
                self._cond.notify_all()
        with self._cond:
            self._ended = True
            self._cond.notify_all()

    def wait_for(self, prefix: str | tuple[str, ...], timeout: float = 240) -> bool:
        """True once a line starts with `prefix`; False if the driver ended or `timeout`
        passed without one."""
        return self.line_from(0, lambda line: line.startswith(prefix), timeout) is not None

    def line_from(self, start: int, match: Callable[[str], bool], timeout: float) -> str | None:
        """The first output line from index `start` on that `match`es; None if the driver
        ended or `timeout` passed without one."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next((line for line in self.output[start:] if match(line)), None)
                left = deadline - time.monotonic()
                if found is not None or self._ended or left <= 0:
                    return found
                self._cond.wait(min(left, 0.5))

    def tail(self, lines: int = 30) -> str:
        return "".join(self.output[-lines:])

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)
        self.assert_no_secret()

    def finish(self, timeout: float = 240) -> int:
        """Let the driver end; its exit code. One that does not is failed with what it was
        doing: its state, and every Python thread's stack (faulthandler, on SIGABRT)."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            state = process_state(self.proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGABRT)
            with self._cond:
                self._cond.wait_for(lambda: self._ended, timeout=20)
            self.kill()
            raise AssertionError(
                f"the driver did not end in {timeout:.0f} s (process state {state}); its "
                "output, with its threads' stacks:\n" + self.tail(120)
            ) from None
        with self._cond:
            self._cond.wait_for(lambda: self._ended, timeout=10)  # the watcher drains the pipe
        self.assert_no_secret()
        return code

    def assert_no_secret(self) -> None:
        if self._password:
            assert self._password not in "".join(self.output), "the password was printed"


class DriverProcess(WatchedDriver):
    """A write_xa driver (driver_process.py) that stops at a fault point: killed there
    (`hang`), or stalled until `resume()` (`pause`)."""

    def __init__(
        self,
        db,
        table: str,
        point: str,
        mode: str | None = None,
        action: str = "hang",
        sink: str | None = None,
        writer: str = "tasks",
        options: dict[str, Any] | None = None,
        rows: int = ROWS,
        partitions: int = PARTITIONS,
    ):
        self.point, self.action = point, action
        args = [db.jdbc_url, db.user, table, str(rows), str(partitions), point]
        env = {"XASINK_TEST_FAULT_ACTION": action, "XASINK_TEST_WRITER": writer}
        env.update(getattr(db, "process_env", {}))  # another driver's jar and class (Derby)
        if options:
            env["XASINK_TEST_OPTIONS"] = json.dumps(options)
        if sink:
            env["XASINK_TEST_SINK"] = sink
        super().__init__("driver_process.py", args + ([mode] if mode else []), db.password, env)

    def wait_for_point(self) -> None:
        """The driver reached the point; a paused one has also stopped (it prints the
        line, then stops itself: a resume sent in between would be lost)."""
        reached = self.wait_for(f"XASINK-FAULT {self.point}")
        assert reached, f"driver never reached {self.point}: " + self.tail()
        if self.action == "pause":
            deadline = time.monotonic() + 60
            while process_state(self.proc.pid) != "T" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert process_state(self.proc.pid) == "T", "the driver did not stop: " + self.tail()

    def resume(self, timeout: float = 240) -> str:
        """Continue a paused driver; its last line (`RESULT ...` or `ERROR ...`)."""
        os.kill(self.proc.pid, signal.SIGCONT)
        self.finish(timeout)
        finals = [ln for ln in self.output if ln.startswith(("RESULT ", "ERROR "))]
        assert finals, "driver ended without a result: " + self.tail()
        return finals[-1].strip()

    def job_id(self, db) -> str:
        """The job this driver started (the newest job on the shared server)."""
        with db.connect() as conn:
            cursor = conn.cursor()
            cursor.execute("SELECT job_id FROM xasink_jobs ORDER BY created_at DESC LIMIT 1")
            return str(cursor.fetchone()[0])


def kill_driver_at(
    db,
    table: str,
    point: str,
    mode: str | None = None,
    sink: str | None = None,
    writer: str = "tasks",
    options: dict[str, Any] | None = None,
    rows: int = ROWS,
    partitions: int = PARTITIONS,
) -> None:
    """Start a driver that stops at `point`, then SIGKILL its whole process group.

    It writes `rows` events in `partitions`, or with `mode`, `mode_case(mode)`'s input
    (`options`: more write_xa keywords); with `sink` ("<sink id>:<batch id>"), as that batch
    of a stream; with writer="driver", in the one branch the driver writes itself."""
    driver = DriverProcess(
        db,
        table,
        point,
        mode,
        sink=sink,
        writer=writer,
        options=options,
        rows=rows,
        partitions=partitions,
    )
    try:
        driver.wait_for_point()
    finally:
        driver.kill()


# -- write modes: one seeded keyed table, and per mode an input and its exact outcome ------
#: Rows (id, name, v) with ids 0..OLD_ROWS-1 that every mode test starts from.
OLD_ROWS = 100
KEYED_DDL = {
    "postgres": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(64), v DOUBLE PRECISION)",
    "mysql": "CREATE TABLE {t} (id BIGINT PRIMARY KEY, name VARCHAR(64), v DOUBLE)",
}
Contents = dict[int, tuple[Any, Any]]


def old_contents() -> Contents:
    return {i: ("old", float(i)) for i in range(OLD_ROWS)}


def seeded_table(server: DbServer, prefix: str = "kv", order: str | None = None) -> str:
    """A keyed table holding `old_contents()`; with `order`, also that column (BIGINT,
    NULL in the old rows), which a merge ordered by it then stores."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(KEYED_DDL[server.dialect].format(t=name))
        if order:
            cursor.execute(f"ALTER TABLE {name} ADD COLUMN {order} BIGINT")
        placeholder = "%s, %s, %s"
        cursor.executemany(
            f"INSERT INTO {name} (id, name, v) VALUES ({placeholder})",
            [(i, n, v) for i, (n, v) in old_contents().items()],
        )
        if server.kind != "postgres":
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


def stage_tables(server: DbServer, schema: str | None = None) -> list[str]:
    """xasink staging tables left in the database (PostgreSQL: any schema), or in `schema`
    (MySQL: that database)."""
    with server.connect() as conn:
        cursor = conn.cursor()
        if server.kind == "postgres":
            sql = "SELECT tablename FROM pg_tables WHERE tablename LIKE 'xasink_stage_%'"
            cursor.execute(sql + (f" AND schemaname = '{schema}'" if schema else ""))
        else:
            where = f" FROM {schema}" if schema else ""
            cursor.execute(f"SHOW TABLES{where} LIKE 'xasink\\_stage\\_%'")
        return [str(row[0]) for row in cursor.fetchall()]


def until(condition: Callable[[], bool], what: str, timeout: float, interval: float = 0.05) -> None:
    """Wait for `condition`, polling; fail saying `what` did not happen within `timeout`."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout:.0f}s"
        time.sleep(interval)


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
