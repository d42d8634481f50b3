"""The fixed cost of a small call: write_xa's driver steps, next to Spark JDBC and the floors
of a call that writes nothing and of one that writes without exactly-once; then what one
call of each writer costs the server, counted by the server.

    python -m benchmarks.breakdown fixed [--databases postgres,mariadb] [--calls 15]
        [--count-calls 5] [--label NAME]

It makes many small calls (the `small` workloads: 1k and 10k rows, 2 partitions) of each
contender in turn and splits write_xa's median call into its driver steps
(xasink.runtime.timing); then it makes a few more calls of each writer and counts, from the
server's own counters, the statements, connections, commits that write and prepares of one
call (benchmarks/servercounters.py).
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.contenders import CONTENDERS, Contender, Target, write_xa
from benchmarks.databases import Database, start_database
from benchmarks.machine import measured_xasink, xasink_line
from benchmarks.measure import Timing, run_rounds
from benchmarks.servercounters import (
    FIGURES,
    ServerCounters,
    count_block,
    count_text,
    per_call,
)
from benchmarks.workloads import build_dataframe, parse_workloads, table_ddl

#: Timed calls per contender where the workload sets none.
REPETITIONS = 3


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
    from benchmarks.run import driver_jars, spark_session

    built_here = {"write_xa": Contender("write_xa", "xasink write_xa", _recorded_write_xa)}
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


def markdown(report: dict[str, Any]) -> str:
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
