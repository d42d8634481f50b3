"""write_xa, foreach_batch and format("xasink") from a Spark Connect client, against a
Connect server running as its own process (never `remote("local")`, which would start a
classic context in this process and hide what a Connect client lacks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from spark_servers import connect_server, connect_session
from support import (
    assert_exactly,
    connection_args,
    contents,
    database_of,
    events_df,
    failing_once,
    file_stream,
    new_table,
    old_contents,
    seeded_table,
    sink_mark,
    stream_files,
    xasink_stream,
    xasink_writer,
)

from xasink import foreach_batch, write_xa
from xasink.runtime.jars import HIDDEN_ENV, SYSTEM_DIRS, find_driver_jar, search_dirs
from xasink.spark.session import is_connect

pytestmark = pytest.mark.connect_client


@pytest.fixture(scope="module")
def remote():
    with connect_server() as url:
        session = connect_session(url)
        yield session
        session.stop()


def test_the_client_is_a_real_connect_client(remote):
    assert is_connect(remote)
    with pytest.raises(Exception, match=r"JVM_ATTRIBUTE_NOT_SUPPORTED|sparkContext"):
        remote.sparkContext  # noqa: B018


@pytest.mark.ci_postgres
def test_write_xa_from_a_connect_client(remote, db):
    """Through a task that fails mid-partition and is retried (also below)."""
    table = new_table(db)
    df = failing_once(events_df(remote, 3000, 3), 1500)
    result = write_xa(df, table=table, **connection_args(db))
    assert (result.rows, result.skipped) == (3000, False)
    assert_exactly(db, table, range(3000))


@pytest.mark.ci_postgres
def test_upsert_from_a_connect_client(remote, db):
    table = seeded_table(db)
    rows = [(i, "a", 1.0, 1) for i in range(50, 150)] + [(i, "b", 2.0, 2) for i in range(50, 70)]
    df = remote.createDataFrame(rows, "id long, name string, v double, seq int")
    write_xa(df, table=table, mode="upsert", key="id", order="seq", **connection_args(db))
    expected = old_contents() | {i: ("a", 1.0) for i in range(50, 150)}
    assert contents(db, table) == expected | {i: ("b", 2.0) for i in range(50, 70)}
    assert db.prepared_transactions() == []


@pytest.mark.ci_postgres
def test_format_from_a_connect_client(remote, db):
    table = new_table(db)
    xasink_writer(failing_once(events_df(remote, 1000, 2), 800), db, table).save()
    assert_exactly(db, table, range(1000))


@pytest.mark.ci_postgres
def test_foreach_batch_from_a_connect_client(remote, db, tmp_path):
    """Under Connect the foreachBatch function runs in the server's Python process."""
    table, sink = new_table(db), f"connect-{tmp_path.name}"[:60]
    stream_files(tmp_path / "in", 3, 100)
    query = (
        failing_once(file_stream(remote, tmp_path / "in"), 150)
        .writeStream.foreachBatch(foreach_batch(database_of(db), table, sink_id=sink))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert_exactly(db, table, range(300))
    assert sink_mark(db, sink)[0] == 2


@pytest.mark.ci_postgres
def test_stream_format_from_a_connect_client(remote, db, tmp_path):
    table = new_table(db)
    stream_files(tmp_path / "in", 2, 100)
    stream = failing_once(file_stream(remote, tmp_path / "in"), 150)
    query = (
        xasink_stream(stream, db, table, tmp_path / "checkpoint").trigger(availableNow=True).start()
    )
    query.awaitTermination()
    assert_exactly(db, table, range(200))


def test_executors_without_the_jar_use_the_copy_shipped_as_an_artifact(postgres, tmp_path):
    """A Connect server whose executors cannot see any JDBC jar (the test-only setting hides
    the system folders and the client's own folder from them): the client's jar reaches them
    as a session artifact."""
    own = tmp_path / "client-jars"
    own.mkdir()
    jar = Path(shutil.copy(find_driver_jar("postgres"), own))
    hidden = [str(own), *map(str, SYSTEM_DIRS), *map(str, search_dirs())]
    with connect_server(env={HIDDEN_ENV: ":".join(hidden)}) as url:
        session = connect_session(url)
        try:
            table = new_table(postgres)
            write_xa(
                events_df(session, 500, 2),
                table=table,
                **connection_args(postgres, jars=[str(jar)]),
            )
            assert_exactly(postgres, table, range(500))
        finally:
            session.stop()
