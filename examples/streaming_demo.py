"""A Structured Streaming query writes micro-batches exactly once, through a driver killed
between the sink's commit and Spark's commit log, and the restart that replays that batch.

    make demo-streaming                              # throwaway PostgreSQL
    XASINK_DEMO_URL=... XASINK_DEMO_USER=... XASINK_DEMO_PASSWORD=... make demo-streaming

It creates and drops a table `xasink_stream_demo` and a temporary folder of input files.
The query runs in a driver process of its own (tests/stream_driver.py), which is SIGKILLed.
"""

from __future__ import annotations

import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from demo import database
from stream_driver import launch
from support import WatchedDriver, stream_files

BATCHES, PER_BATCH, TABLE = 5, 20_000, "xasink_stream_demo"


def show(driver: WatchedDriver, needle: str) -> None:
    for line in driver.output:
        if needle in line:
            print("   driver: " + line.strip())


def main() -> int:
    with database() as (url, user, password, connect), tempfile.TemporaryDirectory() as tmp:
        with connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
            conn.execute(f"CREATE TABLE {TABLE} (id BIGINT NOT NULL, name TEXT, v FLOAT8)")
        source, sink = Path(tmp, "in"), f"demo-{uuid.uuid4().hex[:8]}"
        stream_files(source, BATCHES, PER_BATCH)
        config = {
            "url": url,
            "user": user,
            "source": str(source),
            "checkpoint": str(Path(tmp, "checkpoint")),
            "table": TABLE,
            "sink": sink,
        }
        print(f"run 1: a stream of {BATCHES} micro-batches of {PER_BATCH} rows, in its own driver")
        driver = launch(config, password, stop_after_commit=True)
        if not driver.wait_for("XASINK-FAULT after_sink_commit"):
            print("run 1 ended early:\n" + driver.tail())
            return 1
        driver.kill()
        print(
            "fault: run 1's driver was SIGKILLed after xasink committed batch 0, before Spark's "
            "commit log had it"
        )
        print("run 2: restarted from the checkpoint; Spark replays batch 0")
        driver = launch(config, password)
        consumed = driver.wait_for("CONSUMED", timeout=900)
        code = driver.finish()
        show(driver, "skipped")
        if not consumed or code:
            print(f"run 2 failed (exit {code}):\n" + driver.tail())
            return 1
        with connect() as conn:
            rows, distinct = conn.execute(
                f"SELECT count(*), count(DISTINCT id) FROM {TABLE}"
            ).fetchone()
            mark = conn.execute(
                "SELECT batch_id FROM xasink_sinks WHERE sink_id = %s", (f"{sink}-append",)
            ).fetchone()[0]
            prepared = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0]
            conn.execute(f"DROP TABLE {TABLE}")
    want = BATCHES * PER_BATCH
    ok = (rows, distinct, mark, prepared) == (want, want, BATCHES - 1, 0)
    print(
        f"verified with psycopg: {rows} rows, {distinct} distinct ids (want {want}), sink at "
        f"batch {mark}, {prepared} prepared transactions left -> "
        f"{'EXACTLY ONCE: OK' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
