"""Command line: start the servers and Spark once, then measure every workload on every database.

``python -m benchmarks --help`` lists the flags; ``--quick`` is the CI smoke run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import history_runs, rawload, report, stream_contenders, streams, transactions
from .contenders import CONTENDERS, DEFAULT_CONTENDERS, JDBC_BATCH_SIZE, Contender, Target
from .databases import KINDS, Database, Kind, start_database
from .machine import describe, load_average, shown_command, source_digest
from .measure import Timing, rounds_on_each, summarise
from .workloads import SMALL_ROWS, Workload, build_dataframe, parse_workloads

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPO = Path(__file__).resolve().parent.parent
DEFAULT_WORKLOADS = (
    "narrow-1m",
    "narrow-10m",
    "wide-1m",
    "wide-10m",
    "tiny",
    "small",
    "stream-1k",
    "tx",
)
#: The most rows a bulk workload collects into the driver (`collect_load`): the small ones.
COLLECTED_ROWS = max(SMALL_ROWS)
#: The transaction workloads at a smoke run's size, one round each (`_smoke`).
QUICK_WORKLOADS = ("narrow-100k", "tiny", "tx-small-1k", "tx-large-10k")
#: Every contender runs on the workloads it applies to: the format sink and the stream
#: floors only on streams, raw and one-branch-per-partition only on bulk writes, the
#: transactions only on transaction workloads.
ALL_CONTENDERS = list(
    dict.fromkeys([*CONTENDERS, *stream_contenders.STREAM_CONTENDERS, *transactions.TX_CONTENDERS])
)
DEFAULT = [
    *DEFAULT_CONTENDERS,
    "write_xa_format",
    *stream_contenders.STREAM_FLOORS,
    stream_contenders.DURABLE_FLOOR,
    stream_contenders.PYTHON_DURABLE_FLOOR,
    "transaction",
    "transaction_per_branch",
]


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Spark JDBC vs xasink write_xa vs raw COPY / LOAD DATA, same data, same run.",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="CI smoke: narrow-100k (1 warm-up + 1 run), tiny, tx-small-1k and tx-large-10k "
        "(1 run each), both databases",
    )
    parser.add_argument(
        "--databases", type=_csv, default=list(KINDS), help="comma list of postgres,mariadb"
    )
    parser.add_argument(
        "--workloads",
        type=_csv,
        default=None,
        help=f"comma list; tiny, small (1k and 10k rows per call, many calls), small-<n>, "
        f"stream-<n> (a stream of n-row micro-batches), tx (tx-small-1k and tx-large-500k: "
        f"one write into each of two tables per call), tx-small-<n>, tx-large-<n>, "
        f"history-<n> (a journal of n finished jobs beside a fresh one), or "
        f"narrow-<n>/wide-<n> (n like 100k, 1m). "
        f"Default: {','.join(DEFAULT_WORKLOADS)}",
    )
    parser.add_argument(
        "--contenders",
        type=_csv,
        default=DEFAULT,
        help=f"comma list of {','.join(ALL_CONTENDERS)}; each workload runs those that apply "
        f"(default: {','.join(DEFAULT)})",
    )
    parser.add_argument("--repetitions", type=int, default=None, help="timed runs (default 3)")
    parser.add_argument("--warmups", type=int, default=None, help="warm-up rounds (default 1)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of the narrow/wide DataFrames (tiny always has 200); default 4",
    )
    parser.add_argument("--master", default="local[2,4]", help="Spark master (default local[2,4])")
    parser.add_argument("--driver-memory", default="6g", help="spark.driver.memory (default 6g)")
    parser.add_argument(
        "--output-dir", type=Path, default=REPO / "benchmarks" / "results", help="where latest.* go"
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: redraw latest.md and latest.png from latest.json",
    )
    args = parser.parse_args(argv)
    args.workloads = args.workloads or list(QUICK_WORKLOADS if args.quick else DEFAULT_WORKLOADS)
    args.repetitions = (
        args.repetitions if args.repetitions is not None else (1 if args.quick else 3)
    )
    args.warmups = args.warmups if args.warmups is not None else 1
    for name in args.databases:
        if name not in KINDS:
            parser.error(f"unknown database {name!r}; choose from {', '.join(KINDS)}")
    for name in args.contenders:
        if name not in ALL_CONTENDERS:
            parser.error(f"unknown contender {name!r}; choose from {', '.join(ALL_CONTENDERS)}")
    if args.repetitions < 1 or args.warmups < 0 or args.partitions < 1:
        parser.error("need --repetitions >= 1, --warmups >= 0 and --partitions >= 1")
    try:
        args.workload_specs = parse_workloads(args.workloads, args.partitions)
    except ValueError as exc:
        parser.error(str(exc))
    if args.quick:
        args.workload_specs = [_smoke(w) for w in args.workload_specs]
    return args


def _smoke(workload: Workload) -> Workload:
    """A smoke run's version of a workload: the first bulk one keeps its warm-up (it warms
    Spark's workers); the tiny one and the transaction workloads run once without one."""
    if workload.transaction:
        return dataclasses.replace(workload, repetitions=1, warmups=0)
    if workload.name == "tiny":
        return dataclasses.replace(workload, warmups=0)
    return workload


def driver_jars(databases: Sequence[str]) -> dict[str, str]:
    """The JDBC jar of each database, as xasink itself would find it."""
    from xasink.runtime.jars import find_driver_jar

    jars = {}
    for kind in databases:
        jar = find_driver_jar(kind)
        if jar is None:
            raise SystemExit(f"no {kind} JDBC driver jar found (see jars/README.md)")
        jars[kind] = jar
    return jars


def spark_session(master: str, driver_memory: str, jars: Sequence[str]) -> SparkSession:
    """One session for the whole run; Python workers import the same xasink as this process."""
    import xasink

    xasink_root = str(Path(xasink.__file__).resolve().parent.parent)
    paths = [xasink_root, str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("xasink-benchmarks")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _table_name(workload: Workload) -> str:
    return "bench_" + re.sub(r"[^a-z0-9]+", "_", workload.name.lower())


def run_workload(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    args: argparse.Namespace,
    timings: list[Timing],
) -> None:
    """Measure one workload on each database, in rounds.

    A stream workload writes its source files (`streams.run_workload`); a transaction
    workload caches a frame per table (`transactions.run_workload`); a history workload
    measures two journals side by side (`history_runs.run_workload`); a bulk workload caches
    its DataFrame and builds its CSV once (`run_bulk`).
    """
    if workload.history is not None:
        return history_runs.run_workload(spark, workload, databases, timings)
    rounds = {
        "warmups": workload.warmups if workload.warmups is not None else args.warmups,
        "repetitions": workload.repetitions or args.repetitions,
    }
    if workload.transaction or workload.is_stream:
        own = transactions if workload.transaction else streams
        table = _table_name(workload)
        own.run_workload(spark, workload, databases, args.contenders, table, timings, **rounds)
        return
    contenders = [
        CONTENDERS[name]
        for name in args.contenders
        if name in CONTENDERS
        # Only where it differs from write_xa: when "auto" would coalesce the partitions.
        if name != "write_xa_per_partition"
        or workload.partitions > 2 * spark.sparkContext.defaultParallelism
        # The floor that collects every row into the driver: small workloads only.
        if name != "collect_load" or workload.rows <= COLLECTED_ROWS
    ]
    if not contenders:
        print(f"[{workload.name}] no bulk contender chosen: skipped", flush=True)
        return
    run_bulk(
        spark, workload, databases, contenders, timings, with_csv="raw" in args.contenders, **rounds
    )


def run_bulk(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    contenders: Sequence[Contender[Target]],
    timings: list[Timing],
    *,
    with_csv: bool,
    warmups: int,
    repetitions: int,
) -> None:
    """Cache the DataFrame once, build the CSV once (`with_csv`: for the raw load), then
    every contender once per round on each database."""
    started = time.monotonic()
    df = build_dataframe(spark, workload).cache()
    counted = df.count()
    if counted != workload.rows or df.rdd.getNumPartitions() != workload.partitions:
        raise RuntimeError(
            f"{workload.name}: DataFrame has {counted} rows, expected {workload.rows}"
        )
    csv: rawload.CsvBuffer | None = None
    if with_csv:
        wants_bytes = any(db.kind == "postgres" for db in databases)
        csv = rawload.build_csv(df, _table_name(workload), in_memory=wants_bytes)
        if csv.rows != workload.rows:
            raise RuntimeError(f"{workload.name}: CSV has {csv.rows} rows")
    print(
        f"[{workload.name}] {workload.rows:,} rows, {len(df.columns)} columns, in "
        f"{workload.partitions} partitions cached (and CSV built) in "
        f"{time.monotonic() - started:.1f}s",
        flush=True,
    )
    table = _table_name(workload)

    def target_of(db: Database) -> Target:
        binary = None
        if csv is not None and db.kind == "postgres":
            binary = rawload.postgres_binary(db, table, csv)
        return Target(db=db, table=table, df=df, csv=csv, rows=workload.rows, pg_binary=binary)

    try:
        rounds_on_each(
            databases,
            workload,
            [table],
            target_of,
            contenders,
            timings,
            warmups=warmups,
            repetitions=repetitions,
        )
    finally:
        if csv is not None:
            csv.discard()
        df.unpersist(blocking=True)


def _note_source_change(info: dict[str, Any]) -> None:
    """Record, and warn, if xasink's sources changed while the run went on."""
    import xasink

    info["source_sha256_at_end"] = source_digest(Path(xasink.__file__).parent)
    if info["source_sha256_at_end"] != info["source_sha256"]:
        print(
            "WARNING: xasink's sources changed during the run; Python workers started later "
            "may have run different code. Re-run for clean numbers.",
            file=sys.stderr,
        )


def _ensure_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SystemExit("matplotlib is needed for the chart: pip install matplotlib") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    _ensure_matplotlib()
    if args.render_only:
        return render_only(args.output_dir)
    jars = driver_jars(KINDS)
    workloads: list[Workload] = args.workload_specs
    max_prepared = max(100, 2 * max(w.partitions * w.tables for w in workloads))
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    timings: list[Timing] = []
    with contextlib.ExitStack() as stack:
        kinds: list[Kind] = list(args.databases)
        databases = [start_database(stack, kind, max_prepared) for kind in kinds]
        spark = spark_session(args.master, args.driver_memory, list(jars.values()))
        stack.callback(spark.stop)
        meta: dict[str, Any] = {
            "created": created,
            "command": ["python", "-m", "benchmarks", *shown_command(argv or sys.argv[1:])],
            "config": {
                "databases": args.databases,
                "workloads": [w.__dict__ for w in workloads],
                "contenders": args.contenders,
                "warmups": args.warmups,
                "repetitions": args.repetitions,
                "master": args.master,
                "driver_memory": args.driver_memory,
                "jdbc_batch_size": JDBC_BATCH_SIZE,
            },
            "machine": describe(spark, databases, jars),
        }
        print(f"machine: {meta['machine']['cpu_count']} CPUs, {meta['machine']['cpu_model']}")
        for db in databases:
            print(f"{db.kind}: {meta['machine']['databases'][db.kind]['version']}", flush=True)
        args.output_dir.mkdir(parents=True, exist_ok=True)
        try:
            for workload in workloads:
                run_workload(spark, workload, databases, args, timings)
        finally:  # even on a crash or Ctrl-C: keep every measurement made so far
            meta["machine"]["load_average_at_end"] = load_average()
            _note_source_change(meta["machine"]["xasink"])
            report.write_json(
                args.output_dir / "latest.json",
                meta,
                timings,
                summarise(timings),
                streams.summarise_streams(timings, _stream_workloads(meta)),
            )
    return _render(args.output_dir, meta, timings)


def render_only(out: Path) -> int:
    """Redraw the table and chart from a saved run (e.g. after changing the chart)."""
    meta, timings = report.read_json(out / "latest.json")
    return _render(out, meta, timings)


def _stream_workloads(meta: dict[str, Any]) -> set[str]:
    return {w["name"] for w in meta["config"]["workloads"] if w.get("batches")}


def _render(out: Path, meta: dict[str, Any], timings: list[Timing]) -> int:
    stream_names = _stream_workloads(meta)
    config = meta["config"]
    tx_names = {w["name"] for w in config["workloads"] if w.get("transaction")}
    history_names = {w["name"] for w in config["workloads"] if w.get("history")}
    own = stream_names | tx_names | history_names
    summaries = [s for s in summarise(timings) if s.workload not in own]
    tx_timings = [t for t in timings if t.workload in tx_names]
    history = [t for t in timings if t.workload in history_names]
    stream_summaries = streams.summarise_streams(timings, stream_names)
    partitions = {w["name"]: w["partitions"] for w in config["workloads"]}
    contenders = [c for c in config["contenders"] if c in CONTENDERS]
    table = report.markdown(
        summaries, contenders, partitions, meta, stream_summaries, tx_timings, history
    )
    (out / "latest.md").write_text(table)
    written = [out / "latest.md", out / "latest.json"]
    if summaries:  # the chart shows bulk rows/s; streams are in the table only
        title = (
            f"xasink benchmark {meta['created']} · {meta['machine']['cpu_count']} CPUs · "
            f"{config['warmups']} warm-up + median of {config['repetitions']}"
        )
        report.chart(out / "latest.png", summaries, contenders, partitions, title)
        written.append(out / "latest.png")
    else:
        (out / "latest.png").unlink(missing_ok=True)  # an older run's chart would mislead
    print()
    print(table)
    print(f"wrote {', '.join(map(str, written))}")
    failures = [t for t in timings if t.error]
    if failures:
        print(f"{len(failures)} measurement(s) failed; see latest.json", file=sys.stderr)
    return 1 if failures else 0
