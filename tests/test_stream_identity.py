"""A streaming sink is written by one query, batch after batch, and never loses a batch
silently: a reset checkpoint, a checkpoint spelled another way, a second query on the same
sink id, a batch below the sink's mark, sink ids that differ only in case, a replay after
its job's journal row was pruned. Checked on real servers with psycopg/pymysql.
"""

from __future__ import annotations

import shutil
import uuid

import pytest
from support import (
    assert_exactly,
    cli,
    connection_args,
    database_of,
    events_df,
    journaled,
    new_table,
    sink_mark,
    start_foreach_stream,
    stream_files,
    xasink_cli,
)
from test_format import format_stream, latest_jobs, sink_of
from test_streaming import assert_clean, new_sink

from xasink import WriterProperties, foreach_batch, write_xa
from xasink.errors import ConfigurationError, SinkConflictError

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server


def _forget_last_commit(checkpoint) -> int:
    """Remove Spark's record of the last committed batch, as if the driver died after the
    sink committed it and before Spark wrote its commit log; returns that batch id."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def _committed_batches(checkpoint) -> list[int]:
    """The batch ids in Spark's commit log: what Spark holds as done."""
    return sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


# -- without a query id: the batch ids alone ------------------------------------------------
def test_a_batch_below_the_mark_is_refused_not_skipped(spark, db):
    """Outside a streaming query (no query id) a batch id below the sink's mark is a reset
    or a second writer, never a replay: an error that says what to do, nothing written."""
    table, sink = new_table(db), new_sink()
    write_xa(events_df(spark, 100, 1), table=table, sink_id=sink, batch_id=7, **connection_args(db))
    with pytest.raises(SinkConflictError, match="below the sink's last committed batch 7") as e:
        write_xa(
            events_df(spark, 200, 1).where("id >= 100"),
            table=table,
            sink_id=sink,
            batch_id=3,
            **connection_args(db),
        )
    assert "xasink reset-sink" in str(e.value)
    assert_exactly(db, table, range(100))
    assert sink_mark(db, sink)[0] == 7


def test_sink_ids_compare_byte_for_byte(spark, db):
    """'Orders' and 'orders' are two sinks on every database (MariaDB's default collation
    would make them one, and refuse or skip the second). A trailing space, which MySQL's
    binary collations would ignore, is refused."""
    table, base = new_table(db), uuid.uuid4().hex[:8]
    names = [f"Orders-{base}", f"orders-{base}"]
    for n, (sink, batch) in enumerate(zip(names, (5, 0), strict=True)):
        frame = events_df(spark, 50 * (n + 1), 1).where(f"id >= {50 * n}")
        write_xa(frame, table=table, sink_id=sink, batch_id=batch, **connection_args(db))
    assert_exactly(db, table, range(100))
    assert [sink_mark(db, s)[0] for s in names] == [5, 0]
    with pytest.raises(ConfigurationError, match="not starting or ending with a space"):
        write_xa(
            events_df(spark, 1, 1),
            table=table,
            sink_id=f"{names[1]} ",
            batch_id=1,
            **connection_args(db),
        )


# -- foreach_batch: the query id is stored with the mark -------------------------------------
def _foreach_stream(spark, db, table, source, checkpoint, sink) -> object:
    one = WriterProperties(max_branches=1)
    write = foreach_batch(database_of(db), table, sink_id=sink, writer_properties=one)
    return start_foreach_stream(spark, source, checkpoint, write)


def test_a_second_query_on_a_sink_is_refused_until_the_sink_is_reset(spark, db, tmp_path):
    """Query one writes two batches into sink S. Its checkpoint is deleted and the query
    restarted with new files: Spark gives it a new id and starts again at batch 0. Its
    first batch is refused with an error naming both queries (its rows are not lost: the
    batch stays uncommitted in the checkpoint). After `xasink reset-sink S` the restarted
    query writes every new batch."""
    from pyspark.errors import StreamingQueryException

    table, sink = new_table(db), new_sink()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, 2, 100)
    first = _foreach_stream(spark, db, table, source, checkpoint, sink)
    first.awaitTermination()
    assert sink_mark(db, sink)[0] == 1
    shutil.rmtree(checkpoint)
    shutil.rmtree(source)
    stream_files(source, 2, 100, start=2)
    second = _foreach_stream(spark, db, table, source, checkpoint, sink)
    with pytest.raises(StreamingQueryException, match="by streaming query") as refused:
        second.awaitTermination()
    assert str(first.id) in str(refused.value) and str(second.id) in str(refused.value)
    assert_exactly(db, table, range(200))
    reset = xasink_cli(db, "reset-sink", sink, "--yes")
    assert reset.returncode == 0, reset.stdout + reset.stderr
    assert "was at batch 1" in reset.stdout
    again = _foreach_stream(spark, db, table, source, checkpoint, sink)
    again.awaitTermination()
    assert_exactly(db, table, range(400))
    assert sink_mark(db, sink)[0] == 1
    assert_clean(db)


def sink_mark_job(db, sink: str) -> str | None:
    mark = sink_mark(db, sink)
    return None if mark is None else mark[1]


@pytest.mark.ci_one_server
def test_reset_sink_is_refused_while_a_batch_is_deciding(spark, db):
    """A sink whose batch is decided but unfinished cannot be reset: the replay must find
    the mark to finish that batch instead of writing it twice."""
    from support import kill_driver_at

    table, sink = new_table(db), new_sink()
    kill_driver_at(db, table, "after_first_commit", sink=f"{sink}:0")
    refused = xasink_cli(db, "reset-sink", sink, "--yes")
    assert refused.returncode == 2 and "still running or deciding" in refused.stderr
    assert sink_mark(db, sink)[0] == 0
    assert cli(db, "--grace", "0").returncode == 0


# -- format("xasink"): the sink is named by the query id ------------------------------------
def test_a_reset_checkpoint_writes_its_new_batches(spark, db, tmp_path):
    """A format('xasink') query writes two batches; its checkpoint is deleted and the query
    restarted at the same path with new files (the standard reset). The new batches 0 and
    1 are a new query's: they are written, not taken for replays of the old ones."""
    table, source, checkpoint = new_table(db), tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, 2, 100)
    format_stream(spark, db, table, source, str(checkpoint))
    old_sink = sink_of(db, table)
    shutil.rmtree(checkpoint)
    shutil.rmtree(source)
    stream_files(source, 2, 100, start=2)
    format_stream(spark, db, table, source, str(checkpoint))
    assert_exactly(db, table, range(400))
    assert sink_mark(db, old_sink)[0] == 1
    assert_clean(db)


@pytest.mark.parametrize("spelling", ["file URI", "trailing slash"])
def test_a_checkpoint_spelled_another_way_is_the_same_stream(spark, db, tmp_path, spelling):
    """The driver dies after the sink committed batch 2 and before Spark's commit log has
    it; the query restarts with its checkpoint spelled another way. Spark replays batch 2
    (same checkpoint, same query id), and the sink recognises it: no row twice."""
    table, source, checkpoint = new_table(db), tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, 3, 100)
    format_stream(spark, db, table, source, str(checkpoint))
    assert _forget_last_commit(checkpoint) == 2
    stream_files(source, 1, 100, start=3)
    respelled = checkpoint.as_uri() if spelling == "file URI" else f"{checkpoint}/"
    format_stream(spark, db, table, source, respelled)
    assert_exactly(db, table, range(400))
    sink = sink_of(db, table)
    assert sink.startswith("query-") and sink_mark(db, sink)[0] == 3
    assert_clean(db)


# -- a replay whose job row was pruned ------------------------------------------------------
def _age_jobs(db, table: str, days: int) -> None:
    """Make the table's jobs look as if they ended `days` ago (admin SQL)."""
    from test_protocol import admin_sql

    shift = f"INTERVAL '{days} days'" if db.kind == "postgres" else f"INTERVAL {days} DAY"
    named = journaled(db, table)
    admin_sql(  # a job that ended then began before it
        db,
        f"UPDATE xasink_jobs SET created_at = created_at - {shift}, finished_at = finished_at "
        f"- {shift} WHERE target_table = '{named}'",
    )


def test_prune_keeps_what_a_replay_needs(spark, db, tmp_path):
    """Batch 1 is committed, but Spark's commit log lost it. `xasink prune --older-than 0
    --force` keeps every job that ended within the grace (a stalled driver may still settle its
    branches by the job's state); once they are ten days old, `--older-than 1` deletes batch
    0's job but keeps batch 1's, which the sink's mark names. The restarted query's replay
    of batch 1 is recognised: skipped, neither an error nor written twice."""
    table, sink = new_table(db), new_sink()
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, 2, 100)
    _foreach_stream(spark, db, table, source, checkpoint, sink).awaitTermination()
    assert _forget_last_commit(checkpoint) == 1
    fresh = xasink_cli(db, "prune", "--older-than", "0", "--force")
    assert fresh.returncode == 0, fresh.stderr
    assert latest_jobs(db, table) == ["committed", "committed"], "a fresh job row was pruned"
    _age_jobs(db, table, 10)
    old = xasink_cli(db, "prune", "--older-than", "1")
    assert old.returncode == 0, old.stderr
    marked = sink_mark_job(db, sink)
    assert latest_jobs(db, table) == ["committed"], "the mark's job must stay, the other go"
    _foreach_stream(spark, db, table, source, checkpoint, sink).awaitTermination()
    assert_exactly(db, table, range(200))
    assert sink_mark(db, sink) == (1, marked)
    assert _committed_batches(checkpoint) == [0, 1]
