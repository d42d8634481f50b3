"""How many load streams a server absorbs: write_xa with 1, 2 and 4 branches beside Spark
JDBC and beside the raw load with 1, 2 and 4 concurrent streams.

    python -m benchmarks.breakdown branches [--rows 1m] [--databases mariadb] [--label NAME]

Into a table without a key and one keyed on id, in turn (a new order each round): Spark
JDBC, write_xa with an explicit max_branches of 1, 2 and 4 (concurrent load streams;
xasink's own choice is off), and the raw load (LOAD DATA LOCAL / COPY csv of a CSV built
beforehand, no Spark) cut into 1, 2 and 4 shares loaded at once: how many streams the
server absorbs, and what it takes in at all. Each run records the CPU it cost
(benchmarks/cpu.py), so the report says whether the cores or the server bound it.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from benchmarks import rawload
from benchmarks.contenders import CONTENDERS, Contender, Target, write_xa
from benchmarks.databases import Database, start_database
from benchmarks.machine import measured_xasink, xasink_line
from benchmarks.measure import Timing, run_rounds
from benchmarks.workloads import build_dataframe, parse_workload, table_ddl

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
                            partial(write_xa, writer={"max_branches": n}),
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


def markdown(report: dict[str, Any]) -> str:
    """Rows/s of every contender per database and table, their ratios to Spark JDBC's, and
    the CPU each run cost."""
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
    ]
    tables: dict[str, Callable[[dict[str, float], str], str]] = {
        "Rows/s (median run):": lambda medians, key: _rate(rows, medians.get(key)),
        "Rows/s ÷ Spark JDBC's rows/s, same run:": lambda medians, key: _ratio(
            medians.get("spark_jdbc"), medians.get(key)
        ),
    }
    for title, cell in tables.items():
        lines += ["", title, "", f"| database, table | {head} |", "|---|" + "---:|" * len(columns)]
        for name, medians in report["runs"].items():
            cells = " | ".join(cell(medians, key) for key, _ in columns)
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
