"""Measurement: warm-ups, then repetitions in turns; medians over the timed runs only.

The machine is small and noisy, so contenders take turns within each repetition, which
spreads slow spells over all of them instead of one. Each round takes them in a new order
(`round_order`): what one contender leaves behind (a server's background work after many
inserts, a JVM's garbage) must not always land on the same next one.
"""

from __future__ import annotations

import os
import random
import statistics
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import cpu
from .contenders import Contender
from .workloads import Workload, table_ddl

if TYPE_CHECKING:
    from .databases import Database


@dataclass
class Timing:
    """One measurement; `error` set means it produced no speed."""

    database: str
    workload: str
    contender: str
    round: int
    warmup: bool
    rows: int
    seconds: float | None
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    load_average: float | None = None

    @property
    def rows_per_second(self) -> float | None:
        return self.rows / self.seconds if self.seconds else None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "rows_per_second": self.rows_per_second}


@dataclass(frozen=True)
class Summary:
    """The timed (non-warm-up, successful) runs of one contender on one workload."""

    database: str
    workload: str
    contender: str
    rows: int
    seconds: list[float]
    failures: int

    @property
    def median_seconds(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    @property
    def rows_per_second(self) -> float | None:
        median = self.median_seconds
        return self.rows / median if median else None

    @property
    def rate_range(self) -> tuple[float, float] | None:
        """Slowest and fastest run, as rows/s (for error bars)."""
        if not self.seconds:
            return None
        return self.rows / max(self.seconds), self.rows / min(self.seconds)


T = TypeVar("T")
C = TypeVar("C")


def round_order(items: Sequence[T], round_no: int) -> list[T]:
    """The order of round `round_no` (from 1): the first as given, each later one shuffled
    with the round's number as seed, so a run can be repeated in the same order. With a
    fixed rotation each contender always followed the same one, and carried its traces."""
    if round_no <= 1:
        return list(items)
    return random.Random(round_no).sample(list(items), k=len(items))


class SetupFailed(Exception):
    """The table could not be reset: later runs of this block would measure nothing."""


def start_timing(
    database: str, workload: str, contender: str, round_no: int, warmup: bool, rows: int
) -> Timing:
    """A Timing with no result yet, stamped with the time and the machine's load."""
    return Timing(
        database=database,
        workload=workload,
        contender=contender,
        round=round_no,
        warmup=warmup,
        rows=rows,
        seconds=None,
        started_at=time.time(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )


def truncate(db: Database, table: str, timing: Timing) -> None:
    """Empty the table before a run; raises SetupFailed (with `timing`) if it cannot."""
    try:
        db.truncate(table)
    except Exception as exc:
        timing.error = f"setup: TRUNCATE failed: {type(exc).__name__}: {exc}"
        raise SetupFailed(timing) from exc


class Written(Protocol):
    """What `measure_once` needs of a target: its server, the rows a run writes in all, and
    each table it writes with the rows that table must hold afterwards."""

    @property
    def db(self) -> Database: ...

    @property
    def rows(self) -> int: ...

    @property
    def tables(self) -> dict[str, int]: ...


W = TypeVar("W", bound=Written)


def measure_once(
    contender: Contender[W], target: W, *, round_no: int, warmup: bool, workload: str
) -> Timing:
    """Truncate, time one write, then check the row counts independently (untimed).

    Raises SetupFailed (with the failed Timing) when a table cannot even be truncated.
    """
    db = target.db
    timing = start_timing(db.kind, workload, contender.name, round_no, warmup, target.rows)
    for table in target.tables:
        truncate(db, table, timing)

    def run() -> float:
        before, started = cpu.read(), time.perf_counter()
        timing.detail = contender.run(target)
        elapsed = time.perf_counter() - started
        timing.detail["cpu_seconds"] = cpu.spent(before, cpu.read())
        return elapsed

    expected = target.tables if contender.writes else {}
    return run_checked(timing, db, run, expected, cleanup_of(contender, target))


def run_checked(
    timing: Timing,
    db: Database,
    run: Callable[[], float],
    expected: Mapping[str, int],
    cleanup: Callable[[], dict[str, Any]] | None,
    what: str = "run",
) -> Timing:
    """`run` (the measured work; it returns the seconds to record), then each table's row
    count checked against `expected` (untimed, with psycopg / pymysql). `timing` gets the
    seconds, or the failure and what `cleanup` did after it."""
    try:
        seconds = run()
        for table, rows in expected.items():
            found = db.count(table)
            if found != rows:
                raise AssertionError(
                    f"{table} holds {found} rows after the {what}, expected {rows}"
                )
        timing.seconds = seconds
    except Exception as exc:
        record_failure(timing, exc, cleanup)
    return timing


def cleanup_of(contender: Any, target: Any) -> Callable[[], dict[str, Any]] | None:
    """The contender's cleanup after a failed run on `target`, if it has one."""
    cleanup = contender.cleanup
    return (lambda: cleanup(target)) if cleanup is not None else None


def record_failure(
    timing: Timing, exc: Exception, cleanup: Callable[[], dict[str, Any]] | None
) -> None:
    """Mark `timing` failed (no speed), then run the contender's cleanup, keeping its result.

    Call it from the `except` block: the traceback is the one being handled.
    """
    timing.error = f"{type(exc).__name__}: {exc}"
    timing.detail["traceback"] = traceback.format_exc(limit=8)
    if cleanup is not None:
        try:
            timing.detail["cleanup"] = cleanup()
        except Exception as cleanup_exc:
            timing.detail["cleanup"] = {"error": f"{type(cleanup_exc).__name__}: {cleanup_exc}"}


def progress_line(timing: Timing, warmups: int, repetitions: int) -> str:
    if timing.warmup:
        which = f"warm-up {timing.round}/{warmups}"
    else:
        which = f"run {timing.round - warmups}/{repetitions}"
    head = f"[{timing.database} {timing.workload}] {which:<11}"
    if timing.error:
        return f"{head} {timing.contender:<10} FAILED: {timing.error.splitlines()[0][:300]}"
    if "batches_per_second" in timing.detail:
        detail = timing.detail
        return (
            f"{head} {timing.contender:<15} {detail['timed_batches']} batches in "
            f"{timing.seconds:6.2f}s = {detail['batches_per_second']:5.2f} batches/s; median "
            f"batch {detail['median_batch_ms']:.0f} ms, write {detail['median_write_ms']:.0f} ms"
        )
    if "writes" in timing.detail:  # a transaction workload: several tables per call
        writes = timing.detail["writes"]
        branches = "+".join(str(w["branches"]) for w in writes)
        return (
            f"{head} {timing.contender:<22} {len(writes)} writes, {timing.rows:,} rows in"
            f" {timing.seconds * 1000:7.0f} ms ({branches} branches)"
        )
    extra = ""
    if "prepare_seconds" in timing.detail:
        detail = timing.detail
        extra = (
            f"  ({detail['branches']} branches; prepare+decide {detail['prepare_seconds']:.2f}s,"
            f" commit {detail['commit_seconds']:.2f}s)"
        )
    return (
        f"{head} {timing.contender:<10} {timing.rows:>11,} rows in {timing.seconds:7.2f}s"
        f" = {timing.rows_per_second:>11,.0f} rows/s{extra}"
    )


def run_rounds(
    contenders: Sequence[C],
    target: Any,
    timings: list[Timing],
    *,
    workload: str,
    warmups: int,
    repetitions: int,
    measure: Callable[..., Timing] = measure_once,
) -> None:
    """`warmups` + `repetitions` rounds; in each, every contender runs once, in turn.

    Timings are appended to `timings` as they happen, so a crash keeps what was measured.
    `measure` times one run (`measure_once`'s signature); streams bring their own.
    """
    total = warmups + repetitions
    for round_no in range(1, total + 1):
        for contender in round_order(contenders, round_no):
            try:
                timing = measure(
                    contender,
                    target,
                    round_no=round_no,
                    warmup=round_no <= warmups,
                    workload=workload,
                )
            except SetupFailed as failed:
                timings.append(failed.args[0])
                print(progress_line(failed.args[0], warmups, repetitions), flush=True)
                print(f"[{target.db.kind} {workload}] skipping the rest of this block", flush=True)
                return
            timings.append(timing)
            print(progress_line(timing, warmups, repetitions), flush=True)


def rounds_on_each(
    databases: Sequence[Database],
    workload: Workload,
    tables: Sequence[str],
    target_of: Callable[[Database], Any],
    contenders: Sequence[C],
    timings: list[Timing],
    *,
    warmups: int,
    repetitions: int,
    measure: Callable[..., Timing] = measure_once,
) -> None:
    """On each database: `tables` created anew for the workload, then `run_rounds` of the
    contenders on `target_of(db)` (made once the tables exist), then the tables dropped."""
    for db in databases:
        ddl = {table: table_ddl(db.kind, workload, table) for table in tables}
        with db.fresh_tables(ddl, workload.name):
            run_rounds(
                contenders,
                target_of(db),
                timings,
                workload=workload.name,
                warmups=warmups,
                repetitions=repetitions,
                measure=measure,
            )


class Keyed(Protocol):
    """A summary of one contender on one workload and database (`Summary` or a stream's)."""

    @property
    def database(self) -> str: ...

    @property
    def workload(self) -> str: ...

    @property
    def contender(self) -> str: ...


K = TypeVar("K", bound=Keyed)


def by_key(summaries: Sequence[K]) -> dict[tuple[str, str], dict[str, K]]:
    """The summaries by (database, workload), then by contender, in first-seen order."""
    grouped: dict[tuple[str, str], dict[str, K]] = {}
    for s in summaries:
        grouped.setdefault((s.database, s.workload), {})[s.contender] = s
    return grouped


def summarise(timings: Sequence[Timing]) -> list[Summary]:
    """One Summary per (database, workload, contender), in first-seen order."""
    keys: dict[tuple[str, str, str], list[Timing]] = {}
    for timing in timings:
        keys.setdefault((timing.database, timing.workload, timing.contender), []).append(timing)
    summaries = []
    for (database, workload, contender), group in keys.items():
        timed = [t for t in group if not t.warmup]
        summaries.append(
            Summary(
                database=database,
                workload=workload,
                contender=contender,
                rows=group[0].rows,
                seconds=[t.seconds for t in timed if t.seconds is not None and not t.error],
                failures=sum(1 for t in group if t.error),
            )
        )
    return summaries
