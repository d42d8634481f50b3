"""Where a write through Python tasks spends its time, stage by stage, and whether a
worker's memory grows with its partition.

    python -m benchmarks.breakdown stages [--rows 1m] [--databases postgres,mariadb]
    python -m benchmarks.breakdown memory [--databases postgres,mariadb] [--sizes 1m,10m]

`stages` times the same cached DataFrame through cumulative stages, each a real Spark job:
Spark→Arrow only, + encoding (binary COPY on PostgreSQL, CSV on MariaDB, as write_xa
does), + one Java crossing per batch, and the full write_xa; and apart from Spark the raw
load of the same rows (the `raw` contender). Differences between stages attribute the
time; the XA prepare/commit phases come from WriteResult; each stage records the
core-seconds it cost (benchmarks/cpu.py). `memory` writes one partition of 1M and one of
10M rows, each in a fresh Python worker (worker reuse off), and compares the writers' peak
RSS.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from benchmarks import cpu, rawload, xasink_calls
from benchmarks.contenders import Target, raw
from benchmarks.databases import Database, start_database
from benchmarks.machine import measured_xasink, xasink_line
from benchmarks.workloads import build_dataframe, parse_workload, table_ddl

#: Timed rounds of each stage, after one warm-up round.
REPETITIONS = 3


def local_spark(reuse_workers: bool) -> Any:
    """The breakdowns' own session (`local[2,4]`); `reuse_workers` off gives every task a
    fresh Python worker."""
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
    """Every database's rounds of the stages and the raw load (see the module's docstring)."""
    spark = local_spark(reuse_workers=True)
    workload = parse_workload(f"narrow-{rows}", 4)
    df = build_dataframe(spark, workload).cache()
    df.count()
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
            report["databases"][kind] = _stage_rounds(loaded)
    spark.stop()
    report["load_average_end"] = os.getloadavg()
    return report


def _pipelines(target: Target) -> dict[str, Callable[[Iterator[Any]], Iterator[Any]]]:
    """The stages that run in Spark's Python workers, each a mapInArrow function."""
    from xasink.runtime.jars import find_driver_jar

    kind, columns = target.db.kind, list(target.df.columns)
    jars = [find_driver_jar("postgres"), find_driver_jar("mariadb")]
    pg_types = _pg_types(target.db, target.table) if kind == "postgres" else []
    make = _encoder(kind, pg_types, columns)
    return {
        "spark→arrow": _drain(lambda batch: None),
        "+ encode": _drain(_encode_only(make)),
        "+ java crossing": _drain(_encode_and_cross(make, [j for j in jars if j])),
    }


def _stage_rounds(target: Target) -> dict[str, Any]:
    """One warm-up round and REPETITIONS timed ones of every stage, the full write_xa and
    the raw load on one database; their medians and every sample."""
    db, df = target.db, target.df
    pipelines = _pipelines(target)
    samples: dict[str, list[float]] = {name: [] for name in [*pipelines, "write_xa", RAW_STAGE]}
    cores: dict[str, list[dict[str, float]]] = {name: [] for name in samples}
    phases: dict[str, list[float]] = {"prepare": [], "commit": []}
    url = db.server.jdbc_url  # the server's own URL (jdbc:mariadb: on MariaDB)

    def timed(name: str, action: Callable[[], Any], keep: bool) -> Any:
        seconds, spent, result = _timed_cpu(action)
        if keep:
            samples[name].append(seconds)
            cores[name].append(spent)
        return result

    for round_no in range(REPETITIONS + 1):  # round 0 is the warm-up
        keep = round_no > 0
        for name, pipeline in pipelines.items():
            timed(name, lambda p=pipeline: df.mapInArrow(p, df.schema).count(), keep)
        db.truncate(target.table)
        result = timed(
            "write_xa", lambda: xasink_calls.write_xa(db, df, target.table, url=url), keep
        )
        if keep:
            phases["prepare"].append(result.prepare_seconds)
            phases["commit"].append(result.commit_seconds)
        db.truncate(target.table)
        timed(RAW_STAGE, lambda: raw(target), keep)
        print(
            f"{db.kind} round {round_no}: "
            + ", ".join(f"{k} {v[-1]:.2f}s" for k, v in samples.items() if v and round_no)
        )
    return {
        "median_seconds": {name: statistics.median(v) for name, v in samples.items()},
        "samples": samples,
        "median_core_seconds": {
            name: {k: statistics.median(c[k] for c in v) for k in v[0]} for name, v in cores.items()
        },
        "core_seconds": cores,
        "xa_phases_median_seconds": {k: statistics.median(v) for k, v in phases.items()},
    }


def memory(databases: Sequence[str], sizes: Sequence[int]) -> dict[str, Any]:
    """Each size's one partition written by write_xa in a fresh Python worker, on every
    database: the worker's peak RSS, and the largest size's over the smallest's."""
    spark = local_spark(reuse_workers=False)
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
                result = xasink_calls.write_xa(db, df, table, url=db.server.jdbc_url)
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


def markdown(report: dict[str, Any]) -> str:
    """The run's load and the xasink measured, then each database's stages."""
    start, end = report["load_average_start"], report["load_average_end"]
    return "\n".join(
        [
            f"1-minute load average {start[0]:.2f} at the start, {end[0]:.2f} at the end."
            f" {xasink_line(report)}",
            "",
            *(_markdown(k, v, report["rows"]) for k, v in report["databases"].items()),
        ]
    )


def memory_markdown(report: dict[str, Any]) -> str:
    """Each database's peak worker RSS per partition size, and their ratio."""
    return "\n".join(
        f"- {kind}: peak worker RSS "
        + ", ".join(f"{r:,} rows {kb / 1024:.0f} MiB" for r, kb in v["peak_rss_kb"].items())
        + f"; ratio {v['ratio_largest_to_smallest']:.2f}"
        for kind, v in report["databases"].items()
    )


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
