"""What operators watch: every job logs exactly one `job end` line on `xasink.jobs`, whatever
its outcome, with the figures WriteResult carries and the rows the table really holds
(counted with psycopg/pymysql), and never the password."""

from __future__ import annotations

import logging
import shlex
import uuid
from typing import Any

import pytest
from support import (
    assert_exactly,
    connection_args,
    events_df,
    format_login,
    job_states,
    new_table,
    start_foreach_stream,
    stream_files,
)

from xasink import Database, WriterProperties, foreach_batch, write_xa
from xasink._testing.faults import Fault, injected
from xasink.errors import PreflightError, WriteError

JOBS = "xasink.jobs"


def fields_of(record: logging.LogRecord) -> dict[str, str]:
    """The line's key=value pairs, read back as a shell would split them."""
    message = record.getMessage()
    assert message.startswith("job end ") and "\n" not in message
    return dict(pair.split("=", 1) for pair in shlex.split(message[len("job end ") :]))


def lines_for(caplog: pytest.LogCaptureFixture, table: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == JOBS and fields_of(r)["table"] == table]


def count_rows(db: Any, table: str) -> int:
    quote = '"' if db.kind == "postgres" else "`"
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {quote}{table}{quote}")
        return int(cursor.fetchone()[0])


@pytest.fixture
def jobs_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, JOBS)
    return caplog


def test_a_committed_write_logs_its_result(spark, db, jobs_log):
    table = new_table(db)
    result = write_xa(
        events_df(spark, 600, 2),
        table=table,
        **connection_args(db),
        writer_properties=WriterProperties(max_branches=2, driver_write_bytes=0),
    )
    (record,) = lines_for(jobs_log, table)
    line = fields_of(record)
    assert record.levelno == logging.INFO
    assert record.xasink["job"] == result.job_id  # type: ignore[attr-defined]
    assert line == {k: logfmt_value(v) for k, v in record.xasink.items()}  # type: ignore[attr-defined]
    assert count_rows(db, table) == result.rows == int(line["rows"]) == 600
    assert (line["job"], line["outcome"], line["mode"]) == (result.job_id, "committed", "append")
    assert int(line["branches"]) == result.branches == 2
    assert line["writer"] == result.writer == "tasks"
    assert line["load"].split(",") == list(result.load_paths) != []
    seconds = result.seconds
    for phase in ("preflight", "write", "decide", "commit", "total"):
        assert float(line[f"{phase}_s"]) == pytest.approx(getattr(seconds, phase), abs=5e-4)
    assert result.total_seconds == seconds.total >= result.prepare_seconds + result.commit_seconds
    assert "sink" not in line and "error" not in line
    assert db.password not in jobs_log.text


def logfmt_value(value: object) -> str:
    """How the line spells one of the dict's values, once unquoted."""
    if value is None or value == []:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def test_a_failed_write_logs_one_failure_line(spark, db, jobs_log):
    table = new_table(db)
    with (
        pytest.raises(WriteError, match="InjectedFault"),
        injected(Fault("before_local_commit", "raise")),
    ):
        write_xa(events_df(spark, 50, 1), table=table, **connection_args(db))
    (record,) = lines_for(jobs_log, table)
    line = fields_of(record)
    assert (line["outcome"], line["error"], line["writer"]) == ("aborted", "WriteError", "driver")
    assert record.levelno == logging.WARNING
    assert line["job"] not in job_states(db)  # one local transaction: rolled back, row and all
    assert_exactly(db, table, [])

    missing = f"missing_{uuid.uuid4().hex[:8]}"
    with pytest.raises(PreflightError):
        write_xa(events_df(spark, 5, 1), table=missing, create="never", **connection_args(db))
    (refused,) = lines_for(jobs_log, missing)
    line = fields_of(refused)
    assert (line["job"], line["outcome"], line["rows"]) == ("-", "failed", "0")
    assert line["error"].endswith("Error")
    assert db.password not in jobs_log.text


def test_an_interrupt_after_a_local_commit_is_logged_as_committed(spark, db, jobs_log, monkeypatch):
    """Ctrl-C that lands once a small frame's one local COMMIT has returned (while its
    session is being put back) reaches the caller, but the job is committed and its line
    must say so, not `aborted`."""
    from xasink.executor import branch

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    table = new_table(db)
    monkeypatch.setattr(branch.sessions, "park", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_xa(events_df(spark, 50, 1), table=table, **connection_args(db))
    (record,) = lines_for(jobs_log, table)
    line = fields_of(record)
    assert (line["outcome"], line["rows"], line["writer"]) == ("committed", "50", "driver")
    assert line["error"] == "KeyboardInterrupt"
    assert job_states(db)[line["job"]] == "committed"
    assert_exactly(db, table, range(50))


def test_a_stream_logs_each_batch_and_a_replay_as_skipped(spark, db, jobs_log, tmp_path):
    table, sink = new_table(db), f"log-sink-{uuid.uuid4().hex[:8]}"
    stream_files(tmp_path / "in", batches=3, per_batch=20)
    write = foreach_batch(
        Database(db.jdbc_url, user=db.user, password=db.password), table, sink_id=sink
    )
    query = start_foreach_stream(spark, tmp_path / "in", tmp_path / "checkpoint", write)
    query.awaitTermination(120)
    assert query.exception() is None

    batches = [fields_of(r) for r in lines_for(jobs_log, table)]
    assert [(b["sink"], b["batch"], b["outcome"], b["rows"]) for b in batches] == [
        (sink, str(n), "committed", "20") for n in range(3)
    ]
    assert all(float(b["lag_s"]) == float(b["total_s"]) > 0 for b in batches)
    assert count_rows(db, table) == 60

    jobs_log.clear()
    replay = spark.read.schema("id long, name string, v double").json(str(tmp_path / "in"))
    write(replay.where("name = 'b2'"), 2)  # Spark running batch 2 again
    (skipped,) = [fields_of(r) for r in lines_for(jobs_log, table)]
    assert (skipped["outcome"], skipped["batch"], skipped["rows"]) == ("skipped", "2", "0")
    assert skipped["decided_by"] == batches[2]["job"]
    assert count_rows(db, table) == 60
    assert db.password not in jobs_log.text


WORKER_LOGGING = "spark.sql.pyspark.worker.logging.enabled"


def test_a_format_write_logs_one_line_from_sparks_worker(spark, db):
    """format("xasink") ends its job in a Python worker Spark runs on the driver: the line
    is read back from Spark's own log of its workers (caplog cannot see that process)."""
    table = new_table(db)
    spark.conf.set(WORKER_LOGGING, "true")
    try:
        options = {"dbtable": table, **format_login(db)}
        events_df(spark, 300, 2).write.format("xasink").mode("append").options(**options).save()
        logged = spark.tvf.python_worker_logs().where(f"logger = '{JOBS}'").collect()
    finally:
        spark.conf.unset(WORKER_LOGGING)
    lines = [m for m in (r.msg for r in logged) if f" table={table} " in m]
    assert len(lines) == 1, lines
    line = dict(pair.split("=", 1) for pair in shlex.split(lines[0][len("job end ") :]))
    # Two small partitions shipped their rows: commit() wrote them in one transaction.
    assert (line["outcome"], line["rows"], line["branches"]) == ("committed", "300", "1")
    assert line["writer"] == "driver"
    assert float(line["total_s"]) >= float(line["write_s"]) > 0
    assert count_rows(db, table) == 300
    assert db.password not in " ".join(r.msg for r in logged)
