"""Transactions: one write into each of two tables of one database per call, by one
`xasink.transaction` or by one `write_xa` call per table.

A small write (Spark estimates its frame at most `driver_write_bytes`) is held by the driver,
and a transaction of small writes commits all of them with every table's apply in one local
transaction; separate calls pay one such transaction each, plus each call's own fixed cost.
A large write makes the transaction two-phase: branches prepared by Spark tasks, one
decision, then one local transaction applying every staging table, where separate calls
append directly. `per_branch_appends=True` drops the staging: branches write the tables,
and what is left is the price of atomic visibility. The contenders run the same cached
frames, alternating within each round (`measure.run_rounds`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import xasink_calls
from .contenders import Contender, Target, by_name, recover_table, write_xa
from .measure import Timing, by_key, rounds_on_each, summarise
from .workloads import TX_TABLES, Workload, build_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .databases import Database


@dataclass(frozen=True)
class TxTarget:
    """Where and what one transaction measurement writes: `rows_per_write` rows into each
    table, from its own cached frame."""

    db: Database
    writes: tuple[tuple[str, DataFrame], ...]
    rows_per_write: int
    #: The writes' `driver_write_bytes`, for write_xa and the transaction alike (None: the
    #: default); 0 sends every write through Spark tasks, whatever its size.
    driver_write_bytes: int | None

    @property
    def rows(self) -> int:
        return self.rows_per_write * len(self.writes)

    @property
    def tables(self) -> dict[str, int]:
        return {table: self.rows_per_write for table, _ in self.writes}

    @property
    def options(self) -> dict[str, Any]:
        """The keywords every write gets, beside the defaults."""
        if self.driver_write_bytes is None:
            return {}
        return {"writer": {"driver_write_bytes": self.driver_write_bytes}}


def separate_calls(target: TxTarget) -> dict[str, Any]:
    """One `write_xa` call per table, one after the other: a job, a decision and a commit
    each, and no atomicity across the tables."""
    db, rows = target.db, target.rows_per_write
    writes = [
        {"table": table, **write_xa(Target(db, table, df, None, rows), **target.options)}
        for table, df in target.writes
    ]
    return {"writes": writes}


def one_transaction(target: TxTarget, *, per_branch_appends: bool = False) -> dict[str, Any]:
    """Every write in one `xasink.transaction` block: appends staged unless
    `per_branch_appends`, or, when every write is small, loaded directly in its one
    local transaction."""
    with xasink_calls.transaction(target.db, per_branch_appends=per_branch_appends) as tx:
        for table, df in target.writes:
            tx.write(df, table, **xasink_calls.grouped(target.options.get("writer"), None))
    result = tx.result
    if result is None or result.skipped:
        raise AssertionError(f"the transaction did not commit: {result}")
    rows = [w.rows for w in result.writes]
    if rows != [target.rows_per_write] * len(target.writes):
        raise AssertionError(f"the transaction reported {rows} rows per write")
    return {
        "job_id": result.job_id,
        "writes": [dataclasses.asdict(w) for w in result.writes],
        "phases": dataclasses.asdict(result.seconds),
    }


def recover_tables(target: TxTarget) -> dict[str, Any]:
    """After a failed run: what it left in doubt on any of its tables, resolved."""
    return {table: recover_table(target.db, table) for table in target.tables}


TX_CONTENDERS: dict[str, Contender[TxTarget]] = by_name(
    Contender("write_xa", "write_xa, one call per table", separate_calls, recover_tables),
    Contender("transaction", "transaction (the default)", one_transaction, recover_tables),
    Contender(
        "transaction_per_branch",
        "transaction, per_branch_appends=True",
        functools.partial(one_transaction, per_branch_appends=True),
        recover_tables,
    ),
)

#: Ratios of median seconds per call (below 1: the first costs less), each with its target
#: on small and on large writes (None: no target, only a figure).
TX_RATIOS: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("transaction", "write_xa", "< 1", None),
    ("transaction_per_branch", "write_xa", None, "≤ 1.1"),
    # What atomic visibility costs: the staging and the one apply (large writes); on small
    # ones, a single local transaction either way.
    ("transaction", "transaction_per_branch", None, None),
)
TX_NAMES = {
    "write_xa": "write_xa per table",
    "transaction": "transaction",
    "transaction_per_branch": "transaction per_branch_appends",
}


def check_frames(workload: Workload, frames: Sequence[DataFrame]) -> None:
    """Each cached frame as built, and a `tx-small` frame one Spark estimates small: else
    its writes would take the large path, which its name does not say."""
    from xasink import defaults
    from xasink.spark.session import estimated_bytes

    for number, df in enumerate(frames, 1):
        if df.count() != workload.rows or df.rdd.getNumPartitions() != workload.partitions:
            raise RuntimeError(f"{workload.name}: frame {number} is not as built")
    estimate = estimated_bytes(frames[0])
    held = estimate is not None and estimate <= defaults.DRIVER_WRITE_BYTES
    if workload.transaction == "small" and not held:
        raise ValueError(
            f"{workload.name}: Spark estimates each frame at {estimate} bytes, above "
            f"driver_write_bytes ({defaults.DRIVER_WRITE_BYTES}): not small writes"
        )
    path = (
        "held by the driver, one local transaction"
        if workload.transaction == "small"
        else "Spark tasks (driver_write_bytes=0), two phases"
    )
    print(
        f"[{workload.name}] {len(frames)} frames of {workload.rows:,} rows in "
        f"{workload.partitions} partitions cached; Spark estimates each at "
        f"{(estimate or 0) / 1024:,.0f} KiB: {path}",
        flush=True,
    )


def run_workload(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    contenders: Sequence[str],
    base: str,
    timings: list[Timing],
    *,
    warmups: int,
    repetitions: int,
) -> None:
    """Cache one frame per table once (ids running on from one to the next), then on each
    database every chosen contender once per round."""
    chosen = [TX_CONTENDERS[name] for name in contenders if name in TX_CONTENDERS]
    if not chosen:
        print(f"[{workload.name}] no transaction contender chosen: skipped", flush=True)
        return
    tables = [f"{base}_{number}" for number in range(1, workload.tables + 1)]
    frames = [
        build_dataframe(spark, workload, first_id=number * workload.rows).cache()
        for number in range(workload.tables)
    ]
    try:
        check_frames(workload, frames)
        writes = tuple(zip(tables, frames, strict=True))
        size = 0 if workload.transaction == "large" else None
        rounds_on_each(
            databases,
            workload,
            tables,
            lambda db: TxTarget(db, writes, workload.rows, size),
            chosen,
            timings,
            warmups=warmups,
            repetitions=repetitions,
        )
    finally:
        for df in frames:
            df.unpersist(blocking=True)


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:,.0f}" if seconds else "failed"


def _branches(timings: Sequence[Timing]) -> dict[tuple[str, str, str], str]:
    """Each contender's branches per write, as its last successful run wrote them."""
    return {
        (t.database, t.workload, t.contender): "+".join(
            str(w["branches"]) for w in t.detail["writes"]
        )
        for t in timings
        if not t.error and "writes" in t.detail
    }


def markdown_lines(timings: Sequence[Timing], workloads: dict[str, dict[str, Any]]) -> list[str]:
    """Median ms per call of each contender, every timed call, and the ratios with their
    targets."""
    summaries = summarise(timings)
    branches = _branches(timings)
    lines = ["## Transactions: two tables of one database", ""]
    for name in dict.fromkeys(s.workload for s in summaries):
        w = workloads[name]
        path = (
            "small writes, held by the driver and written in one local transaction"
            if w["transaction"] == "small"
            else "large writes (`driver_write_bytes=0`), through Spark tasks in two phases"
        )
        lines.append(
            f"{name}: {w['rows']:,} rows into each of {TX_TABLES} tables per call, "
            f"{w['partitions']} partitions each; {path}."
        )
    lines += [
        "",
        "| database | workload | contender | branches | median ms per call | timed calls (ms)"
        " | failures |",
        "|---|---|---|---|---:|---|---:|",
    ]
    for s in summaries:
        runs = ", ".join(_ms(x) for x in s.seconds) or "—"
        label = TX_CONTENDERS[s.contender].label
        written = branches.get((s.database, s.workload, s.contender), "—")
        lines.append(
            f"| {s.database} | {s.workload} | {label} | {written} | {_ms(s.median_seconds)} |"
            f" {runs} | {s.failures} |"
        )
    lines += [
        "",
        "| database | workload | ratio of median seconds per call | value | target |",
        "|---|---|---|---:|---|",
    ]
    for (database, workload), row in by_key(summaries).items():
        large = workloads[workload]["transaction"] == "large"
        for a, b, small_target, large_target in TX_RATIOS:
            if a not in row or b not in row:
                continue
            one, other = row[a].median_seconds, row[b].median_seconds
            value = f"{one / other:.3g}" if one and other else "—"
            target = (large_target if large else small_target) or ""
            pair = f"{TX_NAMES[a]} / {TX_NAMES[b]}"
            lines.append(f"| {database} | {workload} | {pair} | {value} | {target} |")
    lines += [
        "",
        "A call is both writes: two `write_xa` calls one after the other, or one"
        " `xasink.transaction` block with one `tx.write` per table. Ratios below 1 mean the"
        " first costs less. `transaction / transaction per_branch_appends` is what atomic"
        " visibility costs (on large writes, staged appends and their one apply; small"
        " appends load their tables directly in one local transaction either way). Branches:"
        " each write's, in"
        " the order of the writes. Each call starts from truncated tables; both tables' row"
        " counts are checked after it.",
    ]
    return lines
