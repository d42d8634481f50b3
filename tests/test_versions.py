"""The smoke of every public path that `make test-versions` runs under each supported PySpark
(tests/versions.py: one virtual environment per release), on PostgreSQL and MariaDB:
write_xa through a task failure, a small frame the driver writes, foreach_batch, a
transaction of two tables, format("xasink") batch and stream (or, on PySpark 3.5, its
refusal), a driver killed after its decision and finished by the `xasink` command, and, in
a process of its own, the same writes from a Spark Connect client. Rows are read with
psycopg/pymysql; nothing may be left prepared.

The rest of the suite runs under the PySpark pip picks; this file only where the target
asks for it (XASINK_TEST_VERSIONS=1), as it repeats what the suite covers.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pyspark
import pytest
from servers import DbServer
from spark_servers import connect_server, connect_session
from support import (
    ROWS,
    assert_exactly,
    database_of,
    events_df,
    failing_once,
    file_stream,
    kill_driver_at,
    new_table,
    start_foreach_stream,
    stream_files,
    xasink_cli,
    xasink_stream,
    xasink_writer,
)

from xasink import WriterProperties, foreach_batch, transaction, write_xa
from xasink.loaders.csv_encoding import NULL_STRING_WRITABLE

pytestmark = pytest.mark.skipif(
    os.environ.get("XASINK_TEST_VERSIONS", "").strip() in ("", "0"),
    reason="the smoke of each PySpark release runs with make test-versions",
)
SPARK_4 = int(pyspark.__version__.split(".")[0]) >= 4
#: Through tasks: one branch per partition, whatever the frame's size.
TASKS = WriterProperties(driver_write_bytes=0)


@pytest.fixture(params=["postgres", "mariadb"])
def smoke_db(request: pytest.FixtureRequest) -> DbServer:
    server: DbServer = request.getfixturevalue(request.param)
    return server


def test_write_xa_through_a_task_failure(spark, smoke_db):
    table = new_table(smoke_db)
    df = failing_once(events_df(spark, 3000, 3), 1500)
    result = write_xa(df, database_of(smoke_db), table, writer_properties=TASKS)
    assert (result.rows, result.writer) == (3000, "tasks")
    assert_exactly(smoke_db, table, range(3000))
    # pyarrow before 26 (Python 3.10's newest) cannot write MySQL's NULL: batched INSERTs.
    mysql_path = "load-data" if NULL_STRING_WRITABLE else "batched"
    assert set(result.load_paths) == {"copy-binary" if smoke_db.kind == "postgres" else mysql_path}


def test_a_small_frame_written_by_the_driver(spark, smoke_db):
    table = new_table(smoke_db)
    result = write_xa(events_df(spark, 200, 2), database_of(smoke_db), table)
    assert (result.rows, result.writer) == (200, "driver")
    assert_exactly(smoke_db, table, range(200))


def _through_foreach_batch(spark: Any, db: DbServer, table: str, work: Path) -> None:
    """The files of `work`/in, a micro-batch each, through foreach_batch into `table`."""
    write = foreach_batch(database_of(db), table, sink_id=f"versions-{table}")
    query = start_foreach_stream(spark, work / "in", work / "cp", write)
    query.awaitTermination(240)
    assert query.exception() is None


def test_foreach_batch(spark, smoke_db, tmp_path):
    table = new_table(smoke_db)
    stream_files(tmp_path / "in", batches=3, per_batch=100)
    _through_foreach_batch(spark, smoke_db, table, tmp_path)
    assert_exactly(smoke_db, table, range(300))


def test_a_transaction_of_two_tables(spark, smoke_db):
    first, second = new_table(smoke_db), new_table(smoke_db)
    with transaction(database_of(smoke_db)) as tx:
        tx.write(events_df(spark, 100, 1), first)
        tx.write(failing_once(events_df(spark, 2000, 2), 1500), second, writer_properties=TASKS)
    assert tx.result.rows == 2100
    assert_exactly(smoke_db, first, range(100))
    assert_exactly(smoke_db, second, range(2000))


@pytest.mark.skipif(not SPARK_4, reason="Python data sources exist from Spark 4.0 on")
def test_format_batch_through_a_task_failure(spark, smoke_db):
    table = new_table(smoke_db)
    xasink_writer(failing_once(events_df(spark, 1000, 2), 800), smoke_db, table).save()
    assert_exactly(smoke_db, table, range(1000))


@pytest.mark.skipif(not SPARK_4, reason="Python data sources exist from Spark 4.0 on")
def test_format_stream(spark, smoke_db, tmp_path):
    table = new_table(smoke_db)
    stream_files(tmp_path / "in", batches=3, per_batch=100)
    stream = file_stream(spark, tmp_path / "in")
    query = xasink_stream(stream, smoke_db, table, tmp_path / "cp").trigger(availableNow=True)
    started = query.start()
    started.awaitTermination(240)
    assert started.exception() is None
    assert_exactly(smoke_db, table, range(300))


@pytest.mark.skipif(SPARK_4, reason="Spark 4 finds format('xasink')")
def test_the_format_is_refused_before_spark_4(spark, postgres):
    """Spark 3.5 looks data sources up among JVM classes only: it says it found none, and
    nothing is written. An import of the format's module says why in xasink's words."""
    table = new_table(postgres)
    with pytest.raises(Exception, match=r"DATA_SOURCE_NOT_FOUND.*xasink"):
        xasink_writer(events_df(spark, 10, 1), postgres, table).save()
    assert_exactly(postgres, table, [])
    with pytest.raises(ImportError, match=r"needs PySpark 4.0 or newer.*write_xa"):
        import pyspark_xasink  # noqa: F401


def test_a_killed_driver_is_finished_by_the_command(smoke_db):
    """The driver dies after its decision, between two branches' commits; `xasink recover`,
    a process of its own, commits the rest."""
    table = new_table(smoke_db)
    kill_driver_at(smoke_db, table, "after_first_commit")
    assert smoke_db.prepared_transactions(), "the killed job left no prepared branch"
    done = xasink_cli(smoke_db, "recover", "--grace", "0", in_process=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "action=commit" in done.stdout, done.stdout
    assert_exactly(smoke_db, table, range(ROWS))


@pytest.fixture(scope="module")
def remote():
    if not SPARK_4:
        pytest.skip("pip's PySpark 3.5 has no Spark Connect server (a separate Maven package)")
    with connect_server() as url:
        session = connect_session(url)
        yield session
        session.stop()


@pytest.mark.connect_client
def test_every_path_from_a_connect_client(remote, smoke_db, tmp_path):
    """write_xa through a task failure, foreach_batch (its function runs in the server's
    Python) and format("xasink") from a Connect client."""
    table = new_table(smoke_db)
    write_xa(failing_once(events_df(remote, 3000, 3), 1500), database_of(smoke_db), table)
    assert_exactly(smoke_db, table, range(3000))
    table = new_table(smoke_db)
    xasink_writer(failing_once(events_df(remote, 1000, 2), 800), smoke_db, table).save()
    assert_exactly(smoke_db, table, range(1000))
    table = new_table(smoke_db)
    stream_files(tmp_path / "in", batches=2, per_batch=100)
    _through_foreach_batch(remote, smoke_db, table, tmp_path)
    assert_exactly(smoke_db, table, range(200))


def test_the_installed_command_runs():
    """The `xasink` console script of this environment (not `python -m xasink`)."""
    done = subprocess.run(["xasink", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "recover" in done.stdout, done.stdout + done.stderr
