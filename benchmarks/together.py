"""Several streams through one driver and one journal: does a batch's sink cost grow more
than the floor's when the streams run together?

    python -m benchmarks.breakdown together [--databases postgres,mariadb] [--streams 4]
        [--rounds 2]

Per database and round, each contender runs `streams` queries over the same pre-written
source (stream-1k's: one 1,000-row file per micro-batch), first one query alone, then
`streams` queries at once in the same Spark session, each into its own table. A query's
share of a batch is its foreachBatch call (`Batch.call_ms`): for `write_xa`, xasink's
`foreach_batch` (collect, one local transaction, the journal); for `stream_collect`, the
collect alone (the floor, which writes nothing). Growth = the median call of the queries
run together / the median call of the query alone. xasink's growth beyond the floor's is
what its own shared parts add (the GIL, the Java bridge, the journal's rows and locks).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.machine import measured_xasink, xasink_line
from benchmarks.stream_contenders import STREAM_CONTENDERS, Calls, StreamTarget
from benchmarks.streams import (
    QUERY_TIMEOUT_SECONDS,
    batches_from_progress,
    scratch_root,
    write_source,
)
from benchmarks.workloads import parse_workloads, table_ddl

#: The sink under test and the floor it is held to.
CONTENDERS = ("write_xa", "stream_collect")


def _queries(targets: Sequence[StreamTarget], contender: str) -> list[list[float]]:
    """`targets` queries started at once, awaited together; each one's timed calls (ms)."""
    sink = STREAM_CONTENDERS[contender].sink
    running: list[tuple[Any, Calls, Path]] = []
    try:
        for target in targets:
            calls: Calls = {}
            checkpoint = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=target.scratch))
            writer = sink(target.source.read(target.spark), target, calls)
            query = writer.option("checkpointLocation", str(checkpoint))
            running.append((query.trigger(availableNow=True).start(), calls, checkpoint))
        for query, _, _ in running:
            if not query.awaitTermination(QUERY_TIMEOUT_SECONDS):
                raise TimeoutError(f"a query ran longer than {QUERY_TIMEOUT_SECONDS}s")
        result = []
        for (query, calls, _), target in zip(running, targets, strict=True):
            batches = batches_from_progress(query.recentProgress, calls)
            if len(batches) != target.source.files:
                raise AssertionError(f"{len(batches)} batches, expected {target.source.files}")
            timed = batches[target.warmup_batches :]
            result.append([b.call_ms for b in timed if b.call_ms is not None])
        return result
    finally:
        for query, _, checkpoint in running:
            with contextlib.suppress(Exception):
                query.stop()
            shutil.rmtree(checkpoint, ignore_errors=True)


def together(databases: Sequence[str], streams: int = 4, rounds: int = 2) -> dict[str, Any]:
    from benchmarks.databases import start_database
    from benchmarks.run import driver_jars, spark_session

    (workload,) = parse_workloads(["stream-1k"], 1)
    spark = spark_session("local[2,4]", "2g", list(driver_jars(databases).values()))
    report: dict[str, Any] = {
        "xasink": measured_xasink(),
        "load_average_start": os.getloadavg(),
        "streams": streams,
        "rounds": rounds,
        "databases": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="xasink-bench-together-", dir=scratch_root()))
    try:
        source = write_source(spark, workload, scratch / "source")
        with contextlib.ExitStack() as stack:
            for kind in databases:
                db = start_database(stack, kind, max_prepared=64)
                tables = [f"together_{i}" for i in range(streams)]
                for table in tables:
                    db.drop(table)
                    db.execute(table_ddl(db.kind, workload, table))
                targets = [
                    StreamTarget(
                        db, t, spark, source, workload.rows, workload.warmup_batches, scratch
                    )
                    for t in tables
                ]
                calls: dict[str, dict[str, list[float]]] = {
                    c: {"apart": [], "together": []} for c in CONTENDERS
                }
                for round_no in range(1, rounds + 1):
                    order = CONTENDERS if round_no % 2 else CONTENDERS[::-1]
                    for contender in order:
                        for table in tables:
                            db.truncate(table)
                        (alone,) = _queries(targets[:1], contender)
                        calls[contender]["apart"] += alone
                        for table in tables:
                            db.truncate(table)
                        for query in _queries(targets, contender):
                            calls[contender]["together"] += query
                        print(f"[{kind}] round {round_no}: {contender} done", flush=True)
                report["databases"][kind] = _growth(calls)
                for table in tables:
                    db.drop(table)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        spark.stop()
    report["load_average_end"] = os.getloadavg()
    return report


def _growth(calls: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for contender, runs in calls.items():
        apart, joint = (statistics.median(runs[k]) if runs[k] else None for k in runs)
        result[contender] = {
            "median_call_ms_apart": apart,
            "median_call_ms_together": joint,
            "growth": joint / apart if apart and joint else None,
            "calls": {k: len(v) for k, v in runs.items()},
        }
    return result


def markdown(report: dict[str, Any]) -> str:
    start, end = report["load_average_start"], report["load_average_end"]
    lines = [
        f"{report['streams']} streams of 1,000-row micro-batches at once against one alone, "
        f"{report['rounds']} round(s); 1-minute load average {start[0]:.2f} at the start, "
        f"{end[0]:.2f} at the end.",
        xasink_line(report),
        "",
        "| database | sink | median call ms, alone | median call ms, together | growth |",
        "|---|---|---:|---:|---:|",
    ]
    for kind, data in report["databases"].items():
        for contender, figures in data.items():
            cells = [
                f"{figures[k]:.1f}" if figures[k] else "—"
                for k in ("median_call_ms_apart", "median_call_ms_together")
            ]
            growth = f"{figures['growth']:.2f}" if figures["growth"] else "—"
            lines.append(f"| {kind} | {contender} | {cells[0]} | {cells[1]} | {growth} |")
    return "\n".join(lines) + "\n"
