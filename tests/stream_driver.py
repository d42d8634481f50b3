"""A Structured Streaming driver that the stream kill tests and the streaming demo SIGKILL
and restart from its checkpoint.

Usage: python stream_driver.py '<json>' with url, user, source, checkpoint, table, sink and
optionally merge_table and stop_after_commit. The password comes from XASINK_TEST_PASSWORD.

It streams `support.stream_files` (one file per micro-batch) through foreachBatch: each batch
is appended to `table` (sink `<sink>-append`) and, with merge_table, merged into it as the
change feed of `merge_changes` (sink `<sink>-merge`). It prints `BATCH <id>` when a batch
starts, `COMMITTED <id>` when its writes returned, and `CONSUMED` when the input is done.
With stop_after_commit, it prints `XASINK-FAULT after_sink_commit` after the first batch's
writes and waits to be killed: the sink has committed, Spark's commit log has not.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

from support import WatchedDriver, file_stream, spark_builder

from xasink import CommitProperties, Database, WriterProperties, foreach_batch

#: Keys of the merge feed: ids fold onto them, so most batches update or delete old keys.
MERGE_KEYS = 150


def launch(config: dict[str, Any], password: str | None, **extra: Any) -> WatchedDriver:
    """This script as a driver process of its own, with `config` and `extra` as its JSON."""
    return WatchedDriver("stream_driver.py", [json.dumps({**config, **extra})], password, {})


#: Every LATE_EVERY-th event (from LATE_FROM on) is late: its order is that of an event
#: LATE_BY before it, older than the key's changes two or three batches back.
LATE_EVERY, LATE_FROM, LATE_BY = 5, 3, 250


def seq_of(event: int) -> int:
    """An event's order (`seq`, stored by the merge table)."""
    return event - LATE_BY if event % LATE_EVERY == LATE_FROM else event


def merge_changes(events: Any) -> Any:
    """The change feed derived from events (id, name, v): key id % MERGE_KEYS, a delete for
    every 7th id, else an update to (name, id); `seq` orders them (`seq_of`: some late)."""
    from pyspark.sql import functions as F

    late = F.col("id") % LATE_EVERY == LATE_FROM
    return events.select(
        (F.col("id") % MERGE_KEYS).alias("id"),
        F.col("name"),
        F.col("id").cast("double").alias("v"),
        F.when(F.col("id") % 7 == 0, F.lit("delete")).otherwise(F.lit("update")).alias("op"),
        F.when(late, F.col("id") - LATE_BY).otherwise(F.col("id")).alias("seq"),
    )


def expected_merge(start: dict[int, tuple[Any, Any]], batches: list[range], per_batch: int) -> dict:
    """The merged table after the events of each batch in turn, each once: within a batch
    the highest `seq` per key; across batches a change applies only over a stored row of
    lower (or no) `seq`. A deleted key keeps the order of its delete, so a late change of it
    stays out (a stored row speaks for its key, a deletion only for a key the table lacks)."""
    state = {key: (*row, None) for key, row in start.items()}
    deleted: dict[int, int] = {}  # key -> the highest seq of its deletes since it was gone
    for ids in batches:
        latest: dict[int, int] = {}
        for i in ids:
            key = i % MERGE_KEYS
            if key not in latest or seq_of(i) > seq_of(latest[key]):
                latest[key] = i
        for key, i in latest.items():
            stored, seq = state.get(key), seq_of(i)
            if stored is not None and stored[2] is not None and stored[2] >= seq:
                continue  # stale: the stored row is newer
            if stored is None and key in deleted and deleted[key] >= seq:
                continue  # stale: the key was deleted later
            if i % 7 == 0:
                state.pop(key, None)
                deleted[key] = max(seq, deleted.get(key, seq))
            else:
                state[key] = (f"b{i // per_batch}", float(i), seq_of(i))
                deleted.pop(key, None)
    return {key: (name, v) for key, (name, v, _) in state.items()}


def main() -> None:
    config = json.loads(sys.argv[1])
    logging.basicConfig(level=logging.WARNING, format="%(message)s", stream=sys.stdout)
    logging.getLogger("xasink").setLevel(logging.INFO)  # batches committed or skipped
    spark = spark_builder("xasink-stream-driver").getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    common = {"commit_properties": CommitProperties(heartbeat_interval=1.0)}
    password = os.environ.get("XASINK_TEST_PASSWORD") or None
    url = Database(config["url"], user=config["user"], password=password)
    sink = config["sink"]
    # The append sink's small batches are written by the driver itself (as most
    # micro-batches are); the merge sink's by two tasks.
    append = foreach_batch(url, config["table"], sink_id=f"{sink}-append", **common)
    merge = None
    if config.get("merge_table"):
        merge = foreach_batch(
            url,
            config["merge_table"],
            sink_id=f"{sink}-merge",
            mode="merge",
            key="id",
            op="op",
            order="seq",
            writer_properties=WriterProperties(max_branches=2),
            **common,
        )

    def write(df: Any, batch_id: int) -> None:
        print(f"BATCH {batch_id}", flush=True)
        df.persist()
        append(df, batch_id)
        if merge:
            merge(merge_changes(df), batch_id)
        df.unpersist()
        print(f"COMMITTED {batch_id}", flush=True)
        if config.get("stop_after_commit"):
            print("XASINK-FAULT after_sink_commit", flush=True)
            while True:
                time.sleep(60)

    query = (
        file_stream(spark, config["source"])
        .writeStream.foreachBatch(write)
        .option("checkpointLocation", config["checkpoint"])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    print("CONSUMED", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
