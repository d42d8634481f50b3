"""What one `format("xasink")` micro-batch costs xasink, without Spark around it.

    python -m benchmarks.breakdown format-batch [--databases postgres,mariadb] [--calls 100]

Spark runs a format batch's steps in three Python processes: the planner worker pickles the
stream writer (which mints the job: preflight, the job's row), a task ships its partition's
rows in its message (a partition under `xasink.driverWriteBytes`, as this batch's is), and
the commit worker writes them with the job's bookkeeping in one local transaction (the sink
mark, the job's row moved to committed, the job's end). Here one process runs the same
steps, batch after batch, on sessions it keeps, as Spark's reused workers do: the writer
pickled (`mint`) and unpickled, the task's shipment (`shipping.ship`, as the data source's
task calls it), its message pickled and unpickled, and the commit of a writer made anew. In
the same rounds it loads the same rows raw (CSV in one autocommit COPY / LOAD DATA LOCAL on
a held connection: what the `python_load` floor's task does). What the steps take beyond
that raw load is xasink's protocol and its own way of loading; the stream workload's batch
time against its no-op floor says how much of a batch they may take. Then the server
counts the statements of a few more batches of each (benchmarks/servercounters.py).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import statistics
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from benchmarks import rawload, xasink_calls
from benchmarks.databases import Database, start_database
from benchmarks.machine import cpu_model, measured_xasink, xasink_line
from benchmarks.workloads import build_dataframe, parse_workload, table_ddl

#: The stream workload's batch: 1,000 narrow rows.
BATCH_ROWS = 1_000
STEPS = ("mint", "unpickle writer", "task", "pickle message", "commit")
WARMUPS = 5
SINK = "breakdown-format-batch"


class FormatBatches:
    """One table's format batches, each step timed, next to the raw load of its rows."""

    def __init__(self, db: Database, table: str, df: Any) -> None:
        from xasink.spark.options import parse

        self.db, self.table, self.schema = db, table, df.schema
        self.rows = df.toArrow().to_batches()
        options = {**xasink_calls.format_options(db, table), "xasink.sinkId": SINK}
        self.fmt = parse(options, self.schema.names, overwrite=False, streaming=True)
        self.batch_id = 0
        self.columns = tuple(self.schema.names)

    def batch(self) -> dict[str, float]:
        """One batch through the three steps, as Spark's processes run them; ms per step."""
        from xasink.spark.datasource import BranchMessage, XasinkStreamWriter, _rows
        from xasink.spark.shipping import ship

        marks = [time.perf_counter()]
        writer = XasinkStreamWriter(self.fmt, self.schema)
        shipped = pickle.dumps(writer)  # __getstate__ mints the batch's job
        marks.append(time.perf_counter())
        task_writer = pickle.loads(shipped)
        marks.append(time.perf_counter())
        minted = task_writer.minted
        batch_id, self.batch_id = self.batch_id, self.batch_id + 1
        shipment = ship(list(_rows(minted, iter(self.rows))), 0, batch_id)
        marks.append(time.perf_counter())
        message = BranchMessage(shipment, minted.plan, str(batch_id), None, minted.trace.clock)
        message = pickle.loads(pickle.dumps(message))
        marks.append(time.perf_counter())
        XasinkStreamWriter(self.fmt, self.schema).commit([message], batch_id)
        marks.append(time.perf_counter())
        return {s: (b - a) * 1000 for s, (a, b) in zip(STEPS, pairwise(marks), strict=True)}

    def raw_load(self) -> float:
        """The same rows loaded raw (the `python_load` floor's task); ms."""
        start = time.perf_counter()
        rawload.load_batches(self.db, self.table, self.rows, self.columns)
        return (time.perf_counter() - start) * 1000


def measure(db: Database, batches: FormatBatches, calls: int, count_calls: int) -> dict[str, Any]:
    """`calls` rounds of one format batch and one raw load each, after warm-ups; then
    `count_calls` of each counted by the server."""
    from benchmarks.servercounters import ServerCounters, count_block, per_call

    for _ in range(WARMUPS):
        batches.batch(), batches.raw_load()
    steps: dict[str, list[float]] = {s: [] for s in STEPS}
    totals, raw = [], []
    for _ in range(calls):
        timed = batches.batch()
        for step, ms in timed.items():
            steps[step].append(ms)
        totals.append(sum(timed.values()))
        raw.append(batches.raw_load())
    expected = (WARMUPS + calls) * 2 * BATCH_ROWS
    _check_rows(db, batches.table, expected)
    result: dict[str, Any] = {
        "calls": calls,
        "median_ms": {s: statistics.median(v) for s, v in steps.items()},
        "median_total_ms": statistics.median(totals),
        "median_raw_load_ms": statistics.median(raw),
        "median_over_raw_ms": statistics.median(t - r for t, r in zip(totals, raw, strict=True)),
    }
    if count_calls:
        expected += count_calls * 2 * BATCH_ROWS
        counters = ServerCounters(db)
        try:
            with counters.quiet():
                baseline = count_block(counters, lambda: None, 0)
            counted: dict[str, Callable[[], Any]] = {
                "format batch": batches.batch,
                "raw load": batches.raw_load,
            }
            result["per_batch"] = {}
            for name, call in counted.items():
                with counters.quiet():
                    block = count_block(counters, call, count_calls)
                result["per_batch"][name] = per_call(counters, block, baseline, count_calls)
        finally:
            counters.close()
        _check_rows(db, batches.table, expected)
    return result


def _check_rows(db: Database, table: str, expected: int) -> None:
    """Every batch and raw load wrote its rows once: none skipped, none twice."""
    found = db.count(table)
    if found != expected:
        raise AssertionError(f"{table} holds {found} rows, expected {expected}")


def format_batch(databases: list[str], calls: int, count_calls: int) -> dict[str, Any]:
    """Every database's format batches (see the module's docstring)."""
    from benchmarks.run import driver_jars, spark_session

    spark = spark_session("local[2]", "2g", list(driver_jars(databases).values()))
    workload = parse_workload(f"narrow-{BATCH_ROWS // 1000}k", 1)
    report: dict[str, Any] = {
        "xasink": measured_xasink(),
        "load_average_start": os.getloadavg(),
        "cpu": cpu_model(),
        "rows_per_batch": BATCH_ROWS,
        "databases": {},
    }
    with contextlib.ExitStack() as stack:
        for kind in databases:
            db = start_database(stack, kind, max_prepared=64, statement_stats=bool(count_calls))
            table = "format_batch"
            db.drop(table)
            db.execute(table_ddl(db.kind, workload, table))
            batches = FormatBatches(db, table, build_dataframe(spark, workload))
            report["databases"][kind] = measure(db, batches, calls, count_calls)
            print(f"[{kind}] {_line(report['databases'][kind])}", flush=True)
            db.drop(table)
    report["load_average_end"] = os.getloadavg()
    spark.stop()
    return report


def _line(result: dict[str, Any]) -> str:
    steps = ", ".join(f"{s} {ms:.2f}" for s, ms in result["median_ms"].items())
    return (
        f"median ms per batch: {steps}; all {result['median_total_ms']:.2f}; raw load "
        f"{result['median_raw_load_ms']:.2f}; beyond the raw load "
        f"{result['median_over_raw_ms']:.2f}"
    )


def markdown(report: dict[str, Any]) -> str:
    """The run's figures as the README's section quotes them."""
    from benchmarks.servercounters import count_text

    start, end = report["load_average_start"][0], report["load_average_end"][0]
    lines = [
        f'One `format("xasink")` batch of {report["rows_per_batch"]:,} rows, its steps in one '
        f"process, median ms over {next(iter(report['databases'].values()))['calls']} batches; "
        f"1-minute load average {start:.2f} at the start, {end:.2f} at the end, on "
        f"{report.get('cpu') or 'an unknown CPU'}. "
        f"{xasink_line(report)}",
        "",
        "| database | " + " | ".join(STEPS) + " | all | raw load | beyond the raw load |",
        "|---|" + "---:|" * (len(STEPS) + 3),
    ]
    for kind, result in report["databases"].items():
        cells = [f"{result['median_ms'][s]:.2f}" for s in STEPS]
        cells += [
            f"{result[k]:.2f}"
            for k in ("median_total_ms", "median_raw_load_ms", "median_over_raw_ms")
        ]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    counted = {k: v["per_batch"] for k, v in report["databases"].items() if "per_batch" in v}
    if counted:
        lines += ["", "Per batch, counted by the server:", ""]
        names = list(next(iter(counted.values()))["format batch"]["figures"])
        lines += ["| database | writer | " + " | ".join(names) + " |"]
        lines += ["|---|---|" + "---:|" * len(names)]
        for kind, writers in counted.items():
            for writer, figures in writers.items():
                cells = [count_text(figures["figures"].get(n)) for n in names]
                lines.append(f"| {kind} | {writer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
