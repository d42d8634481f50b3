"""Write a DataFrame exactly once through injected task failures, then verify it.

    make demo                                        # throwaway PostgreSQL
    XASINK_DEMO_URL=jdbc:postgresql://h:5432/db XASINK_DEMO_USER=u XASINK_DEMO_PASSWORD=pw make demo

The server must allow prepared transactions (max_prepared_transactions > 0). The demo
creates and drops a table `xasink_demo`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from servers import DbServer, start_postgres
from support import events_df, spark_builder

from xasink import Database, WriterProperties, write_xa
from xasink._testing.faults import Fault, injected

ROWS, PARTITIONS, TABLE = 200_000, 4, "xasink_demo"
#: What each fault action leaves in its failed task's error.
SIGNS = {"raise": "InjectedFault: injected fault at", "exit": "Python worker exited unexpectedly"}


class TaskFailures:
    """A Spark listener (called back over py4j) for failed task attempts: one line for an
    injected fault (its partition's task, its attempt, its action's sign in the error), the
    whole error with its stack traces for anything else."""

    class Java:
        implements = ("org.apache.spark.scheduler.SparkListenerInterface",)

    def __init__(self, faults: dict[Fault, str]) -> None:
        self.faults = faults

    def onTaskEnd(self, event: Any) -> None:
        task = event.taskInfo()
        if not task.failed():
            return
        error, where = event.reason().toErrorString(), (task.index(), task.attemptNumber())
        for fault, what in self.faults.items():
            if (fault.partition, fault.attempt_number) == where and SIGNS[fault.action] in error:
                print(f"fault: {what}", flush=True)
                return
        print(
            f"task {task.index()} attempt {task.attemptNumber()} failed: {error.rstrip()}",
            flush=True,
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on"):  # Spark's other events: nothing to show
            return lambda event: None
        raise AttributeError(name)


def show_task_failures(spark: Any, faults: dict[Fault, str]) -> None:
    """Failed tasks through `TaskFailures`, not through the executor's log (its ERROR is each
    failed task's stack trace, dozens of lines for a fault the demo injected on purpose)."""
    from pyspark.java_gateway import ensure_callback_server_started

    sc = spark.sparkContext
    ensure_callback_server_started(sc._gateway)
    sc._jsc.sc().addSparkListener(TaskFailures(faults))
    log4j = sc._jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel("org.apache.spark.executor.Executor", log4j.Level.OFF)


@contextlib.contextmanager
def database() -> Iterator[tuple[str, str | None, str | None, object]]:
    """(jdbc url, user, password, psycopg connect function)."""
    url = os.environ.get("XASINK_DEMO_URL")
    if url:
        import psycopg

        user, password = os.environ.get("XASINK_DEMO_USER"), os.environ.get("XASINK_DEMO_PASSWORD")
        host_db = url.removeprefix("jdbc:postgresql://")
        yield (
            url,
            user,
            password,
            lambda: psycopg.connect(
                f"postgresql://{host_db}", user=user, password=password, autocommit=True
            ),
        )
        return
    print("starting a throwaway PostgreSQL (max_prepared_transactions=100) ...")
    with start_postgres() as server:
        server: DbServer
        yield server.jdbc_url, server.user, server.password, server.connect


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    with database() as (url, user, password, connect):
        with connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
            conn.execute(
                f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name TEXT, v DOUBLE PRECISION, "
                "n INTEGER, ts TIMESTAMPTZ)"
            )
        spark = spark_builder("xasink-demo").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        faults = {
            Fault("after_rows", "raise", partition=1): "task 1 failed after writing its rows; "
            "its branch was rolled back and Spark retries the task",
            Fault("after_prepare", "exit", partition=2): "task 2's Python worker died after "
            "PREPARE; Spark retries the task, and the commit rolls back the branch it left",
        }
        show_task_failures(spark, faults)
        print(f"writing {ROWS} rows in {PARTITIONS} partitions; two first attempts will fail")
        with injected(*faults):
            result = write_xa(
                events_df(spark, ROWS, PARTITIONS),
                Database(url, user=user, password=password),
                TABLE,
                # one task per partition, so that the faults meet them
                writer_properties=WriterProperties(max_branches=PARTITIONS),
            )
        spark.stop()
        print(
            f"write_xa: job {result.job_id}, {result.rows} rows, {result.partitions} branches "
            f"committed, {result.rolled_back_attempts} duplicate prepared attempt(s) rolled "
            f"back; prepare {result.prepare_seconds:.1f}s, commit {result.commit_seconds:.2f}s"
        )
        with connect() as conn:
            rows, distinct, low, high = conn.execute(
                f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {TABLE}"
            ).fetchone()
            prepared = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]
            conn.execute(f"DROP TABLE {TABLE}")
    ok = (rows, distinct, low, high, prepared) == (ROWS, ROWS, 0, ROWS - 1, 0)
    print(
        f"verified with psycopg: {rows} rows, {distinct} distinct ids in [{low}, {high}], "
        f"{prepared} prepared transactions left -> {'EXACTLY ONCE: OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
