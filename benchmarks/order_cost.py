"""What comparing `order` costs upsert and merge, beside the same writes without it.

    python -m benchmarks.breakdown order [--rows 200k] [--databases postgres,mariadb]

Where the target table stores the `order` column, a staged upsert or merge changes a row
only when the staged change is newer (`ON CONFLICT ... DO UPDATE ... WHERE`, `ON DUPLICATE
KEY UPDATE c = IF(...)`, a `DELETE ... WHERE EXISTS` comparing the orders), and one
`SELECT COUNT(*)` counts the changes skipped first. Per database and mode, three writes of N
rows take turns in every round (in a new order each round, `measure.round_order`):

- `today`: a table without the order column (id, name, v): no comparison, as before;
- `ordered`: the same table plus `seq BIGINT`, every change newer (seq 2 over 1): every row
  changes, after a comparison;
- `stale`: the ordered table, every change older (seq 0): nothing changes, and
  `WriteResult.stale` must be N.

Each write is two-phase (`driver_write_bytes=0`: Spark tasks load the staging table, the
driver applies it), so the apply, in `WriteResult.commit_seconds`, is the part that differs.
A first untimed write per database warms Spark's Python workers (`prime`). Before each
write its table is reset untimed to the same N old rows (ids 0..N-1, name 'old', seq 1),
and analyzed; after it, its contents are checked untimed with psycopg / pymysql (row
count, no old row left or all of them, seq), so a broken write cannot look fast. Merge
frames delete every tenth id and update the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks import xasink_calls
from benchmarks.databases import Database, start_database
from benchmarks.machine import cpu_model, measured_xasink, shown_command, xasink_line
from benchmarks.measure import SetupFailed, Timing, record_failure, run_rounds, start_timing
from benchmarks.workloads import SQL_TYPES

MODES = ("upsert", "merge")
#: The writes of each mode: name → what the table and its changes are.
CONTENDERS = {
    "today": "today: no order column",
    "ordered": "ordered: seq stored, every change newer",
    "stale": "ordered, every change older (stale)",
}
WARMUPS, ROUNDS = 1, 5
PARTITIONS = 4
#: Merge frames delete the ids divisible by this (10 %), and update the others.
DELETE_EVERY = 10
#: The stored rows' order, and the changes' (newer; older for `stale`).
STORED_SEQ, NEWER_SEQ, OLDER_SEQ = 1, 2, 0
OLD_NAME = "old"
#: xasink's driver step (xasink.runtime.timing) that holds a staged write's apply: its one
#: transaction (the stale count, the DELETE and the INSERT ... ON CONFLICT / ON DUPLICATE
#: KEY, the job's finish), without phase 2's commits of the branches.
APPLY_STEP = "finish"
#: What is reported per write, each as a median and its ratio to `today`'s.
PHASES = ("total", "commit", "apply")


@dataclass(frozen=True)
class OrderWrite:
    """One contender: a write of `df` into `table` (which has `seq` when `ordered`)."""

    name: str
    mode: str
    table: str
    ordered: bool
    df: Any
    older: bool

    def expected(self, rows: int) -> dict[str, Any]:
        """What the table holds after the write, and the stale changes it reports."""
        deletes = 0 if self.mode == "upsert" else (rows + DELETE_EVERY - 1) // DELETE_EVERY
        return {
            "rows": rows if self.older else rows - deletes,
            "old_rows": rows if self.older else 0,
            "seq": (STORED_SEQ if self.older else NEWER_SEQ) if self.ordered else None,
            "stale": rows if self.older else 0,
        }


@dataclass(frozen=True)
class Block:
    """One database and mode: what `run_rounds` passes to each measurement."""

    db: Database
    rows: int


def table_ddl(kind: str, table: str, ordered: bool) -> str:
    types = SQL_TYPES[kind]  # type: ignore[index]
    seq = ", seq BIGINT" if ordered else ""
    return (
        f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name {types['string']},"
        f" v {types['double']}{seq})"
    )


def reset_sql(kind: str, table: str, ordered: bool, rows: int) -> list[str]:
    """The table emptied, then N old rows (ids 0..N-1) from the server's own generator,
    then analyzed, so every write finds the same rows and the same statistics."""
    columns = "id, name, v" + (", seq" if ordered else "")
    if kind == "postgres":
        values = f"g, '{OLD_NAME}', -1" + (f", {STORED_SEQ}" if ordered else "")
        source = f"generate_series(0, {rows - 1}) g"
        analyze = f"ANALYZE {table}"
    else:  # MariaDB's Sequence engine: seq_0_to_<n> is a table of 0..n
        values = f"seq, '{OLD_NAME}', -1" + (f", {STORED_SEQ}" if ordered else "")
        source = f"seq_0_to_{rows - 1}"
        analyze = f"ANALYZE TABLE {table}"
    return [
        f"TRUNCATE TABLE {table}",
        f"INSERT INTO {table} ({columns}) SELECT {values} FROM {source}",
        analyze,
    ]


def table_state(db: Database, table: str, ordered: bool) -> dict[str, Any]:
    """Rows, rows still old, and the one seq every row holds (None: not one), read with
    psycopg / pymysql."""
    seq = ", MIN(seq), MAX(seq)" if ordered else ""
    sql = f"SELECT COUNT(*), SUM(CASE WHEN name = '{OLD_NAME}' THEN 1 ELSE 0 END){seq} FROM {table}"
    with contextlib.closing(db.connect()) as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    state = {"rows": int(row[0]), "old_rows": int(row[1] or 0), "seq": None}
    if ordered:
        low, high = row[2], row[3]
        state["seq"] = int(low) if low is not None and low == high else ("mixed", low, high)
    return state


def frame(spark: Any, rows: int, seq: int, merge: bool) -> Any:
    """N changes of ids 0..N-1 (new name and v, order `seq`), cached; merge adds `op`."""
    from pyspark.sql import functions as F

    df = spark.range(0, rows, 1, PARTITIONS).select(
        F.col("id"),
        F.concat(F.lit("name-"), F.col("id").cast("string")).alias("name"),
        (F.col("id") * 0.5).alias("v"),
        F.lit(seq).cast("long").alias("seq"),
    )
    if merge:
        df = df.withColumn("op", F.when(F.col("id") % DELETE_EVERY == 0, "d").otherwise("u"))
    df = df.cache()
    df.count()
    return df


def write(contender: OrderWrite, block: Block) -> dict[str, Any]:
    """The timed call: write_xa, two-phase, keyed on id and ordered by seq; its driver
    steps recorded (the "finish" step holds the apply's transaction)."""
    from xasink.runtime.timing import recording

    with recording() as steps:
        result = xasink_calls.write_xa(
            block.db,
            contender.df,
            contender.table,
            mode=contender.mode,
            key="id",
            order="seq",
            op="op" if contender.mode == "merge" else None,
            writer={"driver_write_bytes": 0},
        )
    return {
        "steps": dict(steps),
        "prepare_seconds": result.prepare_seconds,
        "commit_seconds": result.commit_seconds,
        "xasink_total_seconds": result.total_seconds,
        "phases": dataclasses.asdict(result.seconds),
        "branches": result.partitions,
        "writer": result.writer,
        "reported_rows": result.rows,
        "stale": result.stale,
    }


def measure(
    contender: OrderWrite, block: Block, *, round_no: int, warmup: bool, workload: str
) -> Timing:
    """Reset the table, time one write, then check what it did (untimed)."""
    from benchmarks.contenders import recover_table

    db = block.db
    timing = start_timing(db.kind, workload, contender.name, round_no, warmup, block.rows)
    try:
        for sql in reset_sql(db.kind, contender.table, contender.ordered, block.rows):
            db.execute(sql)
    except Exception as exc:
        timing.error = f"setup: reset failed: {type(exc).__name__}: {exc}"
        raise SetupFailed(timing) from exc
    try:
        started = time.perf_counter()
        timing.detail = write(contender, block)
        elapsed = time.perf_counter() - started
        expected = contender.expected(block.rows)
        found = table_state(db, contender.table, contender.ordered)
        found["stale"] = timing.detail["stale"]
        if found != expected:
            raise AssertionError(f"{contender.table}: found {found}, expected {expected}")
        if timing.detail["writer"] != "tasks":
            raise AssertionError(f"written by the {timing.detail['writer']}, not in two phases")
        if timing.detail["reported_rows"] != block.rows:
            raise AssertionError(f"write_xa reported {timing.detail['reported_rows']} rows")
        timing.seconds = elapsed
    except Exception as exc:
        record_failure(timing, exc, lambda: recover_table(db, contender.table))
    return timing


def prime(db: Database, df: Any, rows: int) -> float:
    """One untimed write into a scratch table before a database's rounds: the first write
    of a run (or to a new server) starts Python workers, loads the JDBC driver into them
    and warms their JVMs, more than one warm-up round absorbs. Its seconds."""
    table = "order_prime"
    with db.fresh_tables({table: table_ddl(db.kind, table, False)}, "order prime"):
        started = time.perf_counter()
        write(OrderWrite("prime", "upsert", table, False, df, False), Block(db, rows))
        seconds = time.perf_counter() - started
        if db.count(table) != rows:
            raise AssertionError(f"the priming write left {db.count(table)} rows, not {rows}")
    print(f"[{db.kind}] priming write (untimed): {seconds:.2f}s", flush=True)
    return seconds


def order_cost(databases: Sequence[str], rows: int) -> dict[str, Any]:
    """Every database's and mode's rounds (see the module's docstring)."""
    from benchmarks.run import driver_jars, spark_session

    if rows < DELETE_EVERY:
        raise SystemExit(f"--rows must be at least {DELETE_EVERY}")
    spark = spark_session("local[2,4]", "2g", list(driver_jars(databases).values()))
    report: dict[str, Any] = {
        "rows": rows,
        "partitions": PARTITIONS,
        "warmups": WARMUPS,
        "rounds": ROUNDS,
        "command": shown_command(["python", "-m", "benchmarks.breakdown", *sys.argv[1:]]),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "xasink": measured_xasink(),
        "load_average_start": os.getloadavg(),
        "servers": {},
        "databases": {},
        "timings": [],
    }
    frames = {
        (mode, seq): frame(spark, rows, seq, mode == "merge")
        for mode in MODES
        for seq in (NEWER_SEQ, OLDER_SEQ)
    }
    with contextlib.ExitStack() as stack:
        for kind in databases:
            db = start_database(stack, kind, max_prepared=64)  # type: ignore[arg-type]
            report["servers"][kind] = {"version": db.version(), "settings": db.describe_settings()}
            report["databases"][kind] = {}
            report["servers"][kind]["prime_seconds"] = prime(db, frames["upsert", NEWER_SEQ], rows)
            for mode in MODES:
                tables = {f"order_{mode}_today": False, f"order_{mode}_seq": True}
                ddl = {t: table_ddl(kind, t, ordered) for t, ordered in tables.items()}
                today, ordered = tables
                contenders = [
                    OrderWrite("today", mode, today, False, frames[mode, NEWER_SEQ], False),
                    OrderWrite("ordered", mode, ordered, True, frames[mode, NEWER_SEQ], False),
                    OrderWrite("stale", mode, ordered, True, frames[mode, OLDER_SEQ], True),
                ]
                timings: list[Timing] = []
                with db.fresh_tables(ddl, f"order {mode}"):
                    run_rounds(
                        contenders,
                        Block(db, rows),
                        timings,
                        workload=f"order-{mode}",
                        warmups=WARMUPS,
                        repetitions=ROUNDS,
                        measure=measure,
                    )
                report["databases"][kind][mode] = summarise(timings)
                report["timings"] += [t.as_json() for t in timings]
    for df in frames.values():
        df.unpersist()
    spark.stop()
    report["load_average_end"] = os.getloadavg()
    return report


def _spread(values: Sequence[float]) -> dict[str, Any]:
    """Median and quartiles (the middle half of the runs), and the runs themselves."""
    if not values:
        return {"median": None, "q1": None, "q3": None, "samples": []}
    q1, q3 = (
        statistics.quantiles(values, n=4, method="inclusive")[::2]
        if len(values) > 1
        else (values[0], values[0])
    )
    return {"median": statistics.median(values), "q1": q1, "q3": q3, "samples": list(values)}


def summarise(timings: Sequence[Timing]) -> dict[str, Any]:
    """Per contender: total and commit-phase seconds of its timed runs, failures; and the
    ratios of each median to `today`'s."""
    summary: dict[str, Any] = {}
    for name in CONTENDERS:
        runs = [t for t in timings if t.contender == name and not t.warmup]
        good = [t for t in runs if t.seconds is not None and not t.error]
        summary[name] = {
            "total": _spread([t.seconds for t in good if t.seconds is not None]),
            "commit": _spread([t.detail["commit_seconds"] for t in good]),
            "apply": _spread([t.detail["steps"].get(APPLY_STEP, 0.0) for t in good]),
            "stale": good[-1].detail["stale"] if good else None,
            "branches": good[-1].detail["branches"] if good else None,
            "failures": sum(1 for t in timings if t.contender == name and t.error),
            "errors": [t.error for t in timings if t.contender == name and t.error],
        }
    for data in summary.values():
        data["over_today"] = {
            phase: _ratio(data[phase]["median"], summary["today"][phase]["median"])
            for phase in PHASES
        }
    return summary


def _ratio(mine: float | None, base: float | None) -> float | None:
    return mine / base if mine is not None and base else None


def _cell(spread: dict[str, Any]) -> str:
    if spread["median"] is None:
        return "failed"
    return f"{spread['median']:.2f} ({spread['q1']:.2f}-{spread['q3']:.2f})"


def markdown(report: dict[str, Any]) -> str:
    """The run's table: per database, mode and contender, the medians, their middle half
    and the ratios to `today`."""
    start, end = report["load_average_start"][0], report["load_average_end"][0]
    lines = [
        f"The order comparison's cost: upsert and merge of {report['rows']:,} rows over as "
        f"many stored ones, two-phase ({report['partitions']} partitions); "
        "one untimed priming write per database, then "
        f"{report['warmups']} warm-up + {report['rounds']} timed rounds, the three writes in "
        "a new order each round. Seconds: median (middle half of the runs); commit = "
        "`WriteResult.commit_seconds` (phase 2 and the apply); apply = xasink's "
        f"`{APPLY_STEP}` step (the apply's one transaction, its stale count included). "
        f"1-minute load average {start:.2f} at the start, {end:.2f} at the end; "
        f"{report.get('cpu_count') or '?'} CPUs ({report.get('cpu') or 'unknown'}). "
        f"Command: `{' '.join(report['command'])}`. {xasink_line(report)}",
        "",
        "| database | mode | write | total s | commit s | apply s | total ÷ today"
        " | commit ÷ today | apply ÷ today | stale |",
        "|---|---|---|" + "---:|" * 7,
    ]
    errors = []
    for kind, modes in report["databases"].items():
        for mode, summary in modes.items():
            for name, label in CONTENDERS.items():
                data = summary.get(name)
                if data is None:
                    continue
                ratios = [data["over_today"][p] for p in PHASES]
                cells = [_cell(data[p]) for p in PHASES]
                cells += ["—" if r is None else f"{r:.2f}" for r in ratios]
                cells.append("—" if data["stale"] is None else f"{data['stale']:,}")
                lines.append(f"| {kind} | {mode} | {label} | " + " | ".join(cells) + " |")
                if data["failures"]:
                    errors.append(
                        f"{kind} {mode} {name}: {data['failures']} failed run(s): "
                        f"{data['errors'][0][:200]}"
                    )
    return "\n".join([*lines, "", *errors] if errors else lines)
