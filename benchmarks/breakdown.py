"""Where write_xa's time goes, and whether a worker's memory grows with its partition.

    python -m benchmarks.breakdown stages [--rows 1m] [--databases postgres,mariadb]
    python -m benchmarks.breakdown memory [--databases postgres,mariadb]
    python -m benchmarks.breakdown formats [--rows 1m]
    python -m benchmarks.breakdown fixed [--databases postgres,mariadb] [--calls 15]
        [--count-calls 5] [--label NAME]
    python -m benchmarks.breakdown branches [--rows 1m] [--databases mariadb]
    python -m benchmarks.breakdown format-batch [--databases postgres,mariadb] [--calls 100]
    python -m benchmarks.breakdown order [--rows 200k] [--databases postgres,mariadb]

`stages` times the same cached DataFrame through cumulative stages, each a real Spark job:
Spark→Arrow only, + encoding (binary COPY on PostgreSQL, CSV on MariaDB, as write_xa
does), + one Java crossing per batch, and the full write_xa.
Differences between stages attribute the time; the XA prepare/commit phases come from
WriteResult. `memory` writes one partition of 1M and one of 10M rows, each in a fresh
Python worker (worker reuse off), and compares the writers' peak RSS. `fixed` makes many
small calls (the `small` workloads: 1k and 10k rows, 2 partitions) of write_xa and Spark
JDBC in turn, and splits write_xa's median call into its driver steps (xasink.runtime.timing);
then it makes a few more calls of each writer and counts, from the server's own counters,
the statements, connections, commits that write and prepares of one call
(benchmarks/servercounters.py). `branches` writes into a table without a key and one keyed
on id with 1, 2 and 4 branches (concurrent load streams) next to Spark JDBC and next to the
raw load (LOAD DATA LOCAL / COPY csv of a pre-built CSV, no Spark) with 1, 2 and 4
concurrent streams: how many streams the server absorbs, and what it takes in at all.
`format-batch` runs a `format("xasink")` micro-batch's steps in one process, next to the raw
load of its rows (benchmarks/format_batch.py). `order` times upsert and merge into a table
that stores the order column next to one that does not (benchmarks/order_cost.py).
`--label` writes results/breakdown-<mode>-<label>.{md,json} instead of overwriting
results/breakdown-<mode>.{md,json}; `--output-dir DIR` writes them into DIR instead.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from benchmarks import cpu, format_batch, order_cost, rawload
from benchmarks.contenders import CONTENDERS, Contender, Target, collect_load, raw, write_xa
from benchmarks.databases import Database, start_database
from benchmarks.machine import measured_xasink, xasink_line
from benchmarks.measure import Timing, run_rounds
from benchmarks.workloads import (
    build_dataframe,
    parse_count,
    parse_workload,
    parse_workloads,
    table_ddl,
)
from xasink import WriterProperties

RESULTS = Path(__file__).parent / "results"
REPETITIONS = 3


def _spark(reuse_workers: bool) -> Any:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2,4]")
        .appName("xasink-breakdown")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "6g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", str(reuse_workers).lower())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _drain(mapper: Callable[[pa.RecordBatch], None]) -> Callable[[Iterator[Any]], Iterator[Any]]:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            mapper(batch)
        yield from ()

    return run


def _encoder(kind: str, pg_types: Sequence[str], columns: list[str]) -> Callable[[Any], Any]:
    """The encoder write_xa's bulk loader uses for this database (binary COPY / CSV)."""

    def make(schema: pa.Schema) -> Any:
        from xasink.loaders.csv_encoding import CsvEncoder
        from xasink.loaders.pg_binary import PgBinaryEncoder

        if kind == "postgres":
            binary = PgBinaryEncoder.create(schema, columns, pg_types)
            if binary is not None:
                return binary
            return CsvEncoder(schema, columns, "", False)
        return CsvEncoder(schema, columns, "NULL", True)

    return make


def _encode_only(make: Callable[[Any], Any]) -> Callable[[pa.RecordBatch], None]:
    state: dict[str, Any] = {}

    def encode(batch: pa.RecordBatch) -> None:
        encoder = state.setdefault("e", make(batch.schema))
        encoder.encode(batch)

    return encode


def _encode_and_cross(make: Callable[[Any], Any], jars: list[str]) -> Callable[[Any], None]:
    state: dict[str, Any] = {}

    def cross(batch: pa.RecordBatch) -> None:
        if not state:
            import jpype

            from xasink.runtime.jvm import ensure_jvm

            ensure_jvm(jars)
            state["e"] = make(batch.schema)
            state["sink"] = jpype.JClass("java.io.OutputStream").nullOutputStream()
        data = state["e"].encode(batch)
        state["sink"].write(data, 0, len(data))

    return cross


def _timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def _timed_cpu(action: Callable[[], Any]) -> tuple[float, dict[str, float], Any]:
    """Seconds, and the core-seconds spent meanwhile (benchmarks/cpu.py): the machine's
    busy time, the database servers' and the rest (Spark, its Python workers, xasink)."""
    before = cpu.read()
    seconds, result = _timed(action)
    spent = cpu.spent(before, cpu.read())
    spent["client"] = spent["machine"] - spent["server"]
    return seconds, spent, result


def _pg_types(db: Database, table: str) -> list[str]:
    """The table's type names in column order, as pgjdbc reports them (int8, float8, ...)."""
    with contextlib.closing(db.connect()) as conn, conn.cursor() as cursor:
        cursor.execute(
            "SELECT t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (table,),
        )
        return [row[0] for row in cursor.fetchall()]


#: The stage `stages` times apart from Spark: the raw bulk load of the same rows, built
#: beforehand (the `raw` contender), whose core-seconds with the floor's are what a
#: Spark writer that loads them must spend at least.
RAW_STAGE = "raw load"
RAW_CONTENDER_TEXT = "binary COPY / LOAD DATA of a buffer built beforehand, one process, no Spark"


def stages(databases: Sequence[str], rows: int) -> dict[str, Any]:
    from xasink import write_xa
    from xasink.runtime.jars import find_driver_jar

    spark = _spark(reuse_workers=True)
    workload = parse_workload(f"narrow-{rows}", 4)
    df = build_dataframe(spark, workload).cache()
    df.count()
    columns = list(df.columns)
    jars = [find_driver_jar("postgres"), find_driver_jar("mariadb")]
    report: dict[str, Any] = {
        "rows": rows,
        "partitions": 4,
        "databases": {},
        "xasink": measured_xasink(),
        "load_average_start": os.getloadavg(),
    }
    with contextlib.ExitStack() as stack:
        # The rows as the raw load takes them, built once (never timed).
        csv = rawload.build_csv(df, "stages", in_memory="postgres" in databases)
        stack.callback(csv.discard)
        for kind in databases:
            db: Database = start_database(stack, kind, max_prepared=64)  # type: ignore[arg-type]
            db.execute(table_ddl(kind, workload, "bd"))  # type: ignore[arg-type]
            binary = rawload.postgres_binary(db, "bd", csv) if kind == "postgres" else None
            loaded = Target(db=db, table="bd", df=df, csv=csv, rows=rows, pg_binary=binary)
            pg_types = _pg_types(db, "bd") if kind == "postgres" else []
            make = _encoder(kind, pg_types, columns)
            pipelines = {
                "spark→arrow": _drain(lambda batch: None),
                "+ encode": _drain(_encode_only(make)),
                "+ java crossing": _drain(_encode_and_cross(make, [j for j in jars if j])),
            }
            samples: dict[str, list[float]] = {
                name: [] for name in [*pipelines, "write_xa", RAW_STAGE]
            }
            cores: dict[str, list[dict[str, float]]] = {name: [] for name in samples}
            phases: dict[str, list[float]] = {"prepare": [], "commit": []}
            for round_no in range(REPETITIONS + 1):  # round 0 is the warm-up
                for name, pipeline in pipelines.items():
                    seconds, spent, _ = _timed_cpu(
                        lambda p=pipeline: df.mapInArrow(p, df.schema).count()
                    )
                    if round_no:
                        samples[name].append(seconds)
                        cores[name].append(spent)
                db.truncate("bd")
                sink = db.sink(db.server.jdbc_url)
                seconds, spent, result = _timed_cpu(lambda sink=sink: write_xa(df, sink, "bd"))
                if round_no:
                    samples["write_xa"].append(seconds)
                    cores["write_xa"].append(spent)
                    phases["prepare"].append(result.prepare_seconds)
                    phases["commit"].append(result.commit_seconds)
                db.truncate("bd")
                seconds, spent, _ = _timed_cpu(lambda t=loaded: raw(t))
                if round_no:
                    samples[RAW_STAGE].append(seconds)
                    cores[RAW_STAGE].append(spent)
                print(
                    f"{kind} round {round_no}: "
                    + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in samples.items() if v and round_no)
                )
            medians = {name: statistics.median(v) for name, v in samples.items()}
            report["databases"][kind] = {
                "median_seconds": medians,
                "samples": samples,
                "median_core_seconds": {
                    name: {k: statistics.median(c[k] for c in v) for k in v[0]}
                    for name, v in cores.items()
                },
                "core_seconds": cores,
                "xa_phases_median_seconds": {k: statistics.median(v) for k, v in phases.items()},
            }
    spark.stop()
    report["load_average_end"] = os.getloadavg()
    return report


def memory(databases: Sequence[str], sizes: Sequence[int]) -> dict[str, Any]:
    from xasink import write_xa

    spark = _spark(reuse_workers=False)
    report: dict[str, Any] = {"databases": {}}
    with contextlib.ExitStack() as stack:
        for kind in databases:
            db: Database = start_database(stack, kind, max_prepared=64)  # type: ignore[arg-type]
            peaks: dict[int, int] = {}
            for rows in sizes:
                workload = parse_workload(f"narrow-{rows}", 1)
                table = f"mem_{rows}"
                db.execute(table_ddl(kind, workload, table))  # type: ignore[arg-type]
                df = build_dataframe(spark, workload)
                result = write_xa(df, db.sink(db.server.jdbc_url), table)
                assert db.count(table) == rows
                peaks[rows] = result.worker_peak_rss_kb
                db.drop(table)
                print(
                    f"{kind}: one partition of {rows:,} rows → worker peak RSS "
                    f"{peaks[rows] / 1024:.0f} MiB"
                )
            smallest, largest = min(sizes), max(sizes)
            report["databases"][kind] = {
                "peak_rss_kb": peaks,
                "ratio_largest_to_smallest": peaks[largest] / peaks[smallest],
            }
    spark.stop()
    return report


def formats(rows: int) -> dict[str, Any]:
    """PostgreSQL COPY formats: encoder cost per 1M rows, and the server's load time.

    The Arrow rows are the narrow workload's, built without Spark; each step is timed
    alone (median of REPETITIONS after one warm-up), so the numbers explain the choice of
    binary COPY in xasink.loaders.pg_binary.
    """
    from xasink.loaders.csv_encoding import CsvEncoder
    from xasink.loaders.pg_binary import HEADER, TRAILER, PgBinaryEncoder

    spark = _spark(reuse_workers=True)
    workload = parse_workload(f"narrow-{rows}", 1)
    table = build_dataframe(spark, workload).toArrow()
    spark.stop()
    batches = table.to_batches(max_chunksize=10_000)
    columns = table.schema.names
    report: dict[str, Any] = {"rows": rows, "encode_seconds": {}, "copy_seconds": {}}
    with contextlib.ExitStack() as stack:
        db: Database = start_database(stack, "postgres", max_prepared=8)
        db.execute(table_ddl("postgres", workload, "fmt"))
        encoders = {
            "csv": CsvEncoder(table.schema, columns, "", False),
            "binary": PgBinaryEncoder.create(table.schema, columns, _pg_types(db, "fmt")),
        }
        buffers: dict[str, bytes] = {}
        for name, encoder in encoders.items():
            assert encoder is not None, "the narrow workload must map onto binary COPY"
            samples = []
            for round_no in range(REPETITIONS + 1):
                seconds, parts = _timed(lambda e=encoder: [e.encode(b) for b in batches])
                if round_no:
                    samples.append(seconds)
            body = b"".join(parts)
            buffers[name] = HEADER + body + TRAILER if name == "binary" else body
            report["encode_seconds"][name] = statistics.median(samples)
        names = ", ".join(columns)
        for name, data in buffers.items():
            samples = []
            for round_no in range(REPETITIONS + 1):
                db.truncate("fmt")
                with contextlib.closing(db.connect()) as conn, conn.cursor() as cursor:
                    sql = f"COPY fmt ({names}) FROM STDIN (FORMAT {name})"
                    started = time.perf_counter()
                    with cursor.copy(sql) as copy:
                        for offset in range(0, len(data), 1 << 20):
                            copy.write(data[offset : offset + (1 << 20)])
                    elapsed = time.perf_counter() - started
                assert db.count("fmt") == rows
                if round_no:
                    samples.append(elapsed)
            report["copy_seconds"][name] = statistics.median(samples)
            print(
                f"{name}: encode {report['encode_seconds'][name]:.2f}s, "
                f"COPY {report['copy_seconds'][name]:.2f}s for {rows:,} rows"
            )
    return report


def _recorded_write_xa(target: Target) -> dict[str, Any]:
    """write_xa with its driver steps recorded (seconds per step name)."""
    from xasink.runtime.timing import recording

    with recording() as steps:
        detail = write_xa(target)
    return {**detail, "steps": dict(steps)}


#: What `fixed` measures: Spark JDBC, write_xa, and over the same DataFrame a no-op
#: mapInArrow job (the floor of a write through a Python task), its collect into the driver
#: as Arrow (what write_xa's driver-written small frame pays before writing) and Spark's
#: cheapest job (a count of its internal rows: the least any Spark writer pays per call);
#: and the floor that writes: that collect, then the raw bulk load of its rows.
FIXED_CONTENDERS = (
    "spark_jdbc",
    "write_xa",
    "arrow_floor",
    "arrow_collect",
    "least_job",
    "collect_load",
)


#: What `fixed` counts on the server, per call: the two writers.
COUNTED_CONTENDERS = ("write_xa", "spark_jdbc")
#: Calls per counting block (after the timed calls, so every cache is warm).
COUNT_CALLS = 5


def fixed(
    databases: Sequence[str], calls: int | None = None, count_calls: int = COUNT_CALLS
) -> dict[str, Any]:
    """Spark JDBC and write_xa, many small calls each, in turn; write_xa's steps per call;
    then `count_calls` more calls of each, counted by the server (statements, commits...).

    `calls` overrides the workloads' timed calls per contender (15)."""
    import os

    from benchmarks.run import driver_jars, spark_session
    from benchmarks.servercounters import ServerCounters, count_block

    built_here = {
        "write_xa": Contender("write_xa", "xasink write_xa", _recorded_write_xa),
        # Only here: a default bulk run would collect millions of rows into the driver.
        "collect_load": Contender(
            "collect_load", "collect, then raw bulk load (no xasink)", collect_load
        ),
    }
    contenders = [built_here.get(name) or CONTENDERS[name] for name in FIXED_CONTENDERS]
    jars = driver_jars(databases)
    spark = spark_session("local[2,4]", "2g", list(jars.values()))
    report: dict[str, Any] = {
        "xasink": measured_xasink(),
        "load_average_start": os.getloadavg(),
        "count_calls": count_calls,
        "databases": {},
        "counters": {},
    }
    workloads = parse_workloads(["small"], 2)
    with contextlib.ExitStack() as stack:
        for kind in databases:
            db: Database = start_database(  # type: ignore[arg-type]
                stack, kind, max_prepared=64, statement_stats=bool(count_calls)
            )
            report["databases"][kind] = {}
            counters = ServerCounters(db) if count_calls else None
            baseline: dict[str, Any] | None = None
            if counters is not None:
                stack.callback(counters.close)
                with counters.quiet():
                    baseline = count_block(counters, lambda: None, 0)
            for workload in workloads:
                df = build_dataframe(spark, workload).cache()
                df.count()
                table = "fixed_" + workload.name.replace("-", "_")
                db.drop(table)
                db.execute(table_ddl(db.kind, workload, table))
                timings: list[Timing] = []
                target = Target(db=db, table=table, df=df, csv=None, rows=workload.rows)
                run_rounds(
                    contenders,
                    target,
                    timings,
                    workload=workload.name,
                    warmups=workload.warmups or 0,
                    repetitions=calls or workload.repetitions or REPETITIONS,
                )
                summary = _fixed_summary(timings)
                if counters is not None and baseline is not None:
                    summary["per_call"] = _count_calls(counters, baseline, target, count_calls)
                report["databases"][kind][workload.name] = summary
                db.drop(table)
                df.unpersist(blocking=True)
            if counters is not None:
                report["counters"][kind] = {
                    "baseline": baseline,
                    "settle_seconds": counters.settle_seconds,
                    "notes": counters.notes,
                }
    report["load_average_end"] = os.getloadavg()
    spark.stop()
    return report


def _count_calls(
    counters: Any, baseline: dict[str, Any], target: Target, calls: int
) -> dict[str, Any]:
    """`calls` calls of each counted contender, appended to the (emptied) table in one
    block, counted by the server; per call, the empty block's counts subtracted."""
    from benchmarks.servercounters import count_block, count_text, per_call

    db, result = target.db, {}
    for name in COUNTED_CONTENDERS:
        contender = CONTENDERS[name]
        db.truncate(target.table)
        try:
            with counters.quiet():
                block = count_block(counters, lambda c=contender: c.run(target), calls)
            found = db.count(target.table)
            if found != calls * target.rows:
                raise AssertionError(f"table holds {found} rows, expected {calls * target.rows}")
        except Exception as exc:
            cleanup: Any = None
            if contender.cleanup is not None:
                try:
                    cleanup = contender.cleanup(target)
                except Exception as cleanup_exc:
                    cleanup = {"error": f"{type(cleanup_exc).__name__}: {cleanup_exc}"}
            result[name] = {"error": f"{type(exc).__name__}: {exc}", "cleanup": cleanup}
            print(f"[{db.kind} {target.table}] counting {name} FAILED: {exc}", flush=True)
            continue
        result[name] = per_call(counters, block, baseline, calls)
        if block["counters"].get("pg_stat_statements_dealloc"):
            result[name]["note"] = "pg_stat_statements evicted entries: its calls undercount"
        figures = result[name]["figures"]
        print(
            f"[{db.kind} {target.table}] {name} per call ({calls} calls): "
            + ", ".join(f"{k} {count_text(v)}" for k, v in figures.items()),
            flush=True,
        )
    return result


#: Branch counts `branches` compares (explicit max_branches: xasink's own choice is off),
#: and the raw load's concurrent streams next to them.
STREAM_COUNTS = (1, 2, 4)


def _raw_streams(parts: Any, label: str) -> Contender:
    """The pre-built CSV's `len(parts)` shares loaded at once, one connection each."""

    def run(target: Target) -> dict[str, Any]:
        return rawload.load_concurrently(target.db, target.table, parts)

    return Contender(f"raw_{len(parts)}", label, run)


def branch_counts(databases: Sequence[str], rows: int) -> dict[str, Any]:
    """Spark JDBC, write_xa with 1, 2 and 4 branches (concurrent load streams) and the raw
    load (LOAD DATA LOCAL / COPY csv of a pre-built CSV) with 1, 2 and 4 concurrent streams,
    into a table without a key and one keyed on id, in turn: how many streams the server
    absorbs, and what it takes in at all."""
    import os
    from functools import partial

    from benchmarks.run import driver_jars, spark_session

    spark = spark_session("local[2,4]", "6g", list(driver_jars(databases).values()))
    workload = parse_workload(f"narrow-{rows}", 4)
    df = build_dataframe(spark, workload).cache()
    df.count()
    in_memory = "postgres" in databases
    csv = rawload.build_csv(df, "branches", in_memory=False)
    shares = {n: rawload.split_csv(csv, n, in_memory=in_memory) for n in STREAM_COUNTS}
    report: dict[str, Any] = {
        "rows": rows,
        "xasink": measured_xasink(),
        "csv_bytes": csv.path.stat().st_size,
        "load_average_start": os.getloadavg(),
        "runs": {},
        "samples": {},
        "load_averages": {},
        "cpu": {},
        "cores": os.cpu_count(),
    }
    try:
        with contextlib.ExitStack() as stack:
            for kind in databases:
                db: Database = start_database(stack, kind, max_prepared=64)  # type: ignore[arg-type]
                raw = "LOAD DATA" if kind == "mariadb" else "COPY csv"
                contenders = [
                    CONTENDERS["spark_jdbc"],
                    *(
                        Contender(
                            f"branches_{n}",
                            f"write_xa, {n} branches",
                            partial(write_xa, writer_properties=WriterProperties(max_branches=n)),
                        )
                        for n in STREAM_COUNTS
                    ),
                    *(_raw_streams(shares[n], f"{raw}, {n} streams") for n in STREAM_COUNTS),
                ]
                for keyed in (False, True):
                    table = "streams_keyed" if keyed else "streams_keyless"
                    db.drop(table)
                    ddl = table_ddl(db.kind, workload, table)
                    db.execute(ddl[:-1] + ", PRIMARY KEY (id))" if keyed else ddl)
                    timings: list[Timing] = []
                    target = Target(db=db, table=table, df=df, csv=csv, rows=rows)
                    run_rounds(
                        contenders, target, timings, workload=table, warmups=1, repetitions=3
                    )
                    timed = [t for t in timings if not t.warmup]
                    samples = {
                        c.name: [t.seconds for t in timed if t.contender == c.name and t.seconds]
                        for c in contenders
                    }
                    name = f"{kind} {'keyed' if keyed else 'keyless'}"
                    report["runs"][name] = {
                        c: statistics.median(v) if v else float("nan") for c, v in samples.items()
                    }
                    report["samples"][name] = samples
                    report["cpu"][name] = _cpu_medians(timed, contenders)
                    report["load_averages"][name] = [t.load_average for t in timings]
                    errors = [f"{t.contender}: {t.error}" for t in timings if t.error]
                    if errors:
                        report.setdefault("errors", {})[name] = errors
                    db.drop(table)
    finally:
        for part in [csv, *(p for parts in shares.values() for p in parts)]:
            part.discard()
    report["load_average_end"] = os.getloadavg()
    spark.stop()
    return report


def _branches_markdown(report: dict[str, Any]) -> str:
    start, end = report["load_average_start"], report["load_average_end"]
    rows = report["rows"]
    columns = [("spark_jdbc", "Spark JDBC")]
    plural = {n: "" if n == 1 else "s" for n in STREAM_COUNTS}
    columns += [
        (f"branches_{n}", f"write_xa {n} branch{plural[n] and 'es'}") for n in STREAM_COUNTS
    ]
    columns += [(f"raw_{n}", f"raw {n} stream{plural[n]}") for n in STREAM_COUNTS]
    head = " | ".join(title for _, title in columns)
    kinds = {name.split()[0] for name in report["runs"]}
    raw = " / ".join(
        {"mariadb": "MariaDB LOAD DATA LOCAL INFILE", "postgres": "PostgreSQL COPY csv"}[k]
        for k in sorted(kinds)
    )
    lines = [
        f"{rows:,} narrow rows, 4 partitions; 1 warm-up + median of 3, in turns (a new"
        " order each round)."
        f" 1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end.",
        xasink_line(report),
        f"write_xa with n branches (explicit max_branches); raw: {raw} of the pre-built CSV "
        "(no Spark), n concurrent streams of consecutive rows, one connection each.",
        "",
        "Rows/s (median run):",
        "",
        f"| database, table | {head} |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, medians in report["runs"].items():
        cells = " | ".join(_rate(rows, medians.get(key)) for key, _ in columns)
        lines.append(f"| {name} | {cells} |")
    lines += [
        "",
        "Rows/s ÷ Spark JDBC's rows/s, same run:",
        "",
        f"| database, table | {head} |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, medians in report["runs"].items():
        base = medians.get("spark_jdbc")
        cells = " | ".join(_ratio(base, medians.get(key)) for key, _ in columns)
        lines.append(f"| {name} | {cells} |")
    lines += _cpu_markdown(report, columns)
    for name, errors in report.get("errors", {}).items():
        lines.append(f"\n{name}: {len(errors)} failed run(s): {errors[0][:200]}")
    return "\n".join(lines)


def _cpu_medians(timed: Sequence[Timing], contenders: Sequence[Contender]) -> dict[str, Any]:
    """Per contender, the medians of its timed runs' wall seconds and CPU core-seconds
    (the machine's busy time and the server's own, benchmarks/cpu.py)."""
    medians: dict[str, Any] = {}
    for contender in contenders:
        runs = [t for t in timed if t.contender == contender.name and t.seconds]
        spent = [t.detail.get("cpu_seconds") or {} for t in runs]
        medians[contender.name] = {
            "wall": _known_median([t.seconds for t in runs]),
            "machine": _known_median([c.get("machine") for c in spent]),
            "server": _known_median([c.get("server") for c in spent]),
        }
    return medians


def _known_median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cpu_markdown(report: dict[str, Any], columns: Sequence[tuple[str, str]]) -> list[str]:
    """Whether the machine's cores are the bound: busy core-seconds per run, the server's
    part of them, and the busy share of all cores over the run's wall time."""
    if not report.get("cpu"):
        return []
    cores = report.get("cores") or 1
    head = " | ".join(title for _, title in columns)
    lines = [
        "",
        f"CPU per run (medians): the machine's busy core-seconds / the database servers' own"
        f" / busy share of the {cores} cores over the run (benchmarks/cpu.py):",
        "",
        f"| database, table | {head} |",
        "|---|" + "---:|" * len(columns),
    ]
    for name, per in report["cpu"].items():
        cells = []
        for key, _ in columns:
            cpu = per.get(key) or {}
            machine, server, wall = cpu.get("machine"), cpu.get("server"), cpu.get("wall")
            if machine is None or not wall:
                cells.append("—")
                continue
            own = f"{server:.2f}" if server is not None else "—"
            cells.append(f"{machine:.2f} / {own} / {machine / (cores * wall):.0%}")
        lines.append(f"| {name} | {' | '.join(cells)} |")
    return lines


def _rate(rows: int, seconds: float | None) -> str:
    return f"{rows / seconds:,.0f}" if seconds and seconds == seconds else "—"


def _ratio(base: float | None, seconds: float | None) -> str:
    ok = base and seconds and base == base and seconds == seconds
    return f"{base / seconds:.2f}" if ok else "—"


def _fixed_summary(timings: Sequence[Timing]) -> dict[str, Any]:
    timed = [t for t in timings if not t.warmup]
    errors = [t.error for t in timings if t.error]
    seconds = {
        name: [t.seconds for t in timed if t.contender == name and t.seconds is not None]
        for name in FIXED_CONTENDERS
    }
    medians = {name: statistics.median(v) if v else None for name, v in seconds.items()}
    calls = [t.detail["steps"] for t in timed if t.contender == "write_xa" and not t.error]
    names = list(dict.fromkeys(name for call in calls for name in call))
    steps = {name: statistics.median(call.get(name, 0.0) for call in calls) for name in names}

    def over(name: str, base: str = "spark_jdbc") -> float | None:
        mine, theirs = medians[name], medians[base]
        return mine / theirs if mine and theirs else None

    return {
        "median_seconds": medians,
        "write_xa_over_spark_jdbc_time": over("write_xa"),
        "floor_over_spark_jdbc_time": over("arrow_floor"),
        "collect_over_spark_jdbc_time": over("arrow_collect"),
        "least_job_over_spark_jdbc_time": over("least_job"),
        "collect_load_over_spark_jdbc_time": over("collect_load"),
        "write_xa_over_collect_load_time": over("write_xa", "collect_load"),
        "step_median_seconds": steps,
        "samples": seconds,
        "load_averages": [t.load_average for t in timed],
        "errors": errors,
    }


def _fixed_markdown(report: dict[str, Any]) -> str:
    start, end = report["load_average_start"], report["load_average_end"]
    lines = [
        f"1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end "
        "(2 cores, shared: noisy).",
        xasink_line(report),
        "",
    ]
    for kind, sizes in report["databases"].items():
        names = list(
            dict.fromkeys(n for data in sizes.values() for n in data["step_median_seconds"])
        )
        head = " | ".join(f"{w} ms" for w in sizes)
        lines += [
            f"**{kind}**, median per call:",
            "",
            f"| step | {head} |",
            "|---|" + "---:|" * len(sizes),
        ]
        for name in names:
            cells = " | ".join(
                f"{1000 * data['step_median_seconds'].get(name, 0.0):.1f}"
                for data in sizes.values()
            )
            lines.append(f"| {name} | {cells} |")
        for label, key in (
            ("write_xa call", "write_xa"),
            ("Spark JDBC call", "spark_jdbc"),
            ("no-op mapInArrow job (floor)", "arrow_floor"),
            ("collect as Arrow, no write", "arrow_collect"),
            ("Spark's cheapest job, no write", "least_job"),
            ("collect, then raw bulk load (no xasink)", "collect_load"),
        ):
            cells = " | ".join(_ms(data["median_seconds"].get(key)) for data in sizes.values())
            lines.append(f"| **{label}** | {cells} |")
        for label, key in (
            ("write_xa time / Spark JDBC time", "write_xa_over_spark_jdbc_time"),
            ("floor time / Spark JDBC time", "floor_over_spark_jdbc_time"),
            ("collect time / Spark JDBC time", "collect_over_spark_jdbc_time"),
            ("cheapest job time / Spark JDBC time", "least_job_over_spark_jdbc_time"),
            ("collect + raw load time / Spark JDBC time", "collect_load_over_spark_jdbc_time"),
            ("write_xa time / collect + raw load time", "write_xa_over_collect_load_time"),
        ):
            ratios = " | ".join(
                f"{r:.2f}" if (r := data.get(key)) else "—" for data in sizes.values()
            )
            lines.append(f"| **{label}** | {ratios} |")
        lines.append("")
        lines += _counts_markdown(kind, sizes, report)
        for workload, data in sizes.items():
            if data["errors"]:
                lines.append(
                    f"{workload}: {len(data['errors'])} failed call(s): {data['errors'][0][:200]}"
                )
    return "\n".join(lines)


#: Where each per-call figure comes from, per database (the table's footnote).
COUNT_SOURCES = {
    "postgres": "statements: the server's statement log (log_statement = all; "
    "pg_stat_statements undercounts pgjdbc's cached COMMIT); connections: "
    "pg_stat_database.sessions; write commits: WAL records COMMIT + COMMIT_PREPARED; "
    "prepares: WAL records PREPARE (pg_walinspect)",
    "mariadb": "statements: Questions; connections: Connections; write commits: InnoDB "
    "trx_rw_commits; prepares: Handler_prepare",
}


def _counts_markdown(kind: str, sizes: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """The server's per-call counts of each counted contender, one row per call kind."""
    from benchmarks.servercounters import FIGURES, count_text

    rows = [
        (workload, name, data["per_call"][name])
        for workload, data in sizes.items()
        for name in COUNTED_CONTENDERS
        if name in data.get("per_call", {})
    ]
    if not rows:
        return []
    labels = {"write_xa": "write_xa", "spark_jdbc": "Spark JDBC"}
    lines = [
        f"**{kind}**, per call, counted by the server over {report['count_calls']} calls "
        "(the counters' own cost subtracted; flushes = write commits + prepares, each a "
        "log flush with durable settings):",
        "",
        "| call | " + " | ".join(title for _, title in FIGURES) + " |",
        "|---|" + "---:|" * len(FIGURES),
    ]
    for workload, name, counted in rows:
        if "figures" not in counted:
            lines.append(f"| {labels[name]}, {workload} | failed: {counted['error'][:120]} |")
            continue
        cells = " | ".join(count_text(counted["figures"][key]) for key, _ in FIGURES)
        lines.append(f"| {labels[name]}, {workload} | {cells} |")
    notes = report.get("counters", {}).get(kind, {}).get("notes") or []
    lines += ["", f"Sources: {COUNT_SOURCES[kind]}." + "".join(f" {n}." for n in notes), ""]
    return lines


def _ms(seconds: float | None) -> str:
    return f"**{1000 * seconds:.0f}**" if seconds else "—"


def _markdown(kind: str, data: dict[str, Any], rows: int) -> str:
    medians = data["median_seconds"]
    order = ["spark→arrow", "+ encode", "+ java crossing", "write_xa"]
    lines = [
        f"**{kind}**, {rows:,} narrow rows, 4 partitions, median of {REPETITIONS}:",
        "",
        "| stage (cumulative) | seconds | added by this stage |"
        " client core-s | added | server core-s |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    previous, previous_client = 0.0, 0.0
    for name in order:
        cores = data.get("median_core_seconds", {}).get(name)
        client = cores["client"] if cores else float("nan")
        server = cores["server"] if cores else float("nan")
        lines.append(
            f"| {name} | {medians[name]:.2f} | {medians[name] - previous:+.2f} |"
            f" {client:.2f} | {client - previous_client:+.2f} | {server:.2f} |"
        )
        previous, previous_client = medians[name], client
    phases = data["xa_phases_median_seconds"]
    lines.append(
        f"\nwrite_xa's own split: prepare phase (incl. Spark job) {phases['prepare']:.2f}"
        f" s, commit phase {phases['commit']:.2f} s. write_xa runs at"
        f" {medians['spark→arrow'] / medians['write_xa']:.0%} of the no-op mapInArrow"
        " floor's speed. Core-seconds (benchmarks/cpu.py): the client's are the machine's"
        " busy time less the database servers'."
    )
    lines.append(_raw_sum(data) + "\n")
    return "\n".join(lines)


def _raw_sum(data: dict[str, Any]) -> str:
    """The floor's and the raw load's core-seconds beside write_xa's: what a writer through
    Python tasks that loads the rows spends at least, against what it spent."""
    cores = data.get("median_core_seconds", {})
    if RAW_STAGE not in cores:
        return ""
    floor, loaded, writer = cores["spark→arrow"], cores[RAW_STAGE], cores["write_xa"]
    least = floor["machine"] + loaded["machine"]
    seconds = data["median_seconds"]
    return (
        f"\nThe raw load of the same rows ({RAW_CONTENDER_TEXT}) took"
        f" {seconds[RAW_STAGE]:.2f} s: {loaded['client']:.2f} client and"
        f" {loaded['server']:.2f} server core-seconds. With the floor's, {least:.2f}"
        f" core-seconds; write_xa spent {writer['machine']:.2f} ({writer['machine'] / least:.2f}x)"
        f" in {seconds['write_xa']:.2f} s, {writer['machine'] / seconds['write_xa']:.2f}"
        " cores busy on average."
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "mode",
        choices=("stages", "memory", "formats", "fixed", "branches", "format-batch", "order"),
    )
    parser.add_argument("--databases", default="postgres,mariadb")
    parser.add_argument(
        "--rows", help="rows for `stages`, `branches`, `formats` (default 1m), `order` (200k)"
    )
    parser.add_argument("--sizes", default="1m,10m", help="partition sizes for `memory`")
    parser.add_argument(
        "--calls",
        type=int,
        help="`fixed`: timed calls per contender (default: 15); `format-batch`: batches (100)",
    )
    parser.add_argument(
        "--count-calls",
        type=int,
        default=COUNT_CALLS,
        help=f"`fixed`: calls counted by the server per writer (default {COUNT_CALLS}; 0: none)",
    )
    parser.add_argument(
        "--label", default="", help="results go to breakdown-<mode>-<label>.{md,json}"
    )
    parser.add_argument("--output-dir", type=Path, default=RESULTS, help="default: results/")
    args = parser.parse_args(argv)
    databases = [d for d in args.databases.split(",") if d]
    args.rows = args.rows or ("200k" if args.mode == "order" else "1m")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    if args.mode == "order":
        report = order_cost.order_cost(databases, parse_count(args.rows))
        text = order_cost.markdown(report)
    elif args.mode == "formats":
        rows = parse_count(args.rows)
        report = formats(rows)
        text = "\n".join(
            [
                f"PostgreSQL COPY formats, {rows:,} narrow rows, median of {REPETITIONS} "
                "(one process, one core):",
                "",
                "| format | encode s | server COPY s |",
                "|---|---:|---:|",
            ]
            + [
                f"| {f} | {report['encode_seconds'][f]:.2f} | {report['copy_seconds'][f]:.2f} |"
                for f in ("csv", "binary")
            ]
        )
    elif args.mode == "branches":
        report = branch_counts(databases, parse_count(args.rows))
        text = _branches_markdown(report)
    elif args.mode == "format-batch":
        report = format_batch.format_batch(databases, args.calls or 100, args.count_calls)
        text = format_batch.markdown(report)
    elif args.mode == "fixed":
        report = fixed(databases, args.calls, args.count_calls)
        text = _fixed_markdown(report)
    elif args.mode == "stages":
        rows = parse_count(args.rows)
        report = stages(databases, rows)
        start, end = report["load_average_start"], report["load_average_end"]
        text = "\n".join(
            [
                f"1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end."
                f" {xasink_line(report)}",
                "",
                *(_markdown(k, v, rows) for k, v in report["databases"].items()),
            ]
        )
    else:
        report = memory(databases, [parse_count(s) for s in args.sizes.split(",")])
        text = "\n".join(
            f"- {kind}: peak worker RSS "
            + ", ".join(f"{r:,} rows {kb / 1024:.0f} MiB" for r, kb in v["peak_rss_kb"].items())
            + f"; ratio {v['ratio_largest_to_smallest']:.2f}"
            for kind, v in report["databases"].items()
        )
    print(text)
    name = f"breakdown-{args.mode}" + (f"-{args.label}" if args.label else "")
    (args.output_dir / f"{name}.md").write_text(text + "\n")
    (args.output_dir / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
