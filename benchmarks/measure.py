"""Measurement: warm-ups, then round-robin repetitions; medians over the timed runs only.

The machine is small and noisy, so contenders take turns within each repetition (and the
first turn rotates), which spreads slow spells over all of them instead of one.
"""

from __future__ import annotations

import os
import statistics
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .contenders import Contender, Target


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


def rotated(items: Sequence[Contender], by: int) -> list[Contender]:
    shift = by % len(items)
    return [*items[shift:], *items[:shift]]


class SetupFailed(Exception):
    """The table could not be reset: later runs of this block would measure nothing."""


def measure_once(
    contender: Contender, target: Target, *, round_no: int, warmup: bool, workload: str
) -> Timing:
    """Truncate, time one write, then check the row count independently (untimed).

    Raises SetupFailed (with the failed Timing) when the table cannot even be truncated.
    """
    db = target.db
    timing = Timing(
        database=db.kind,
        workload=workload,
        contender=contender.name,
        round=round_no,
        warmup=warmup,
        rows=target.rows,
        seconds=None,
        started_at=time.time(),
        load_average=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )
    try:
        db.truncate(target.table)
    except Exception as exc:
        timing.error = f"setup: TRUNCATE failed: {type(exc).__name__}: {exc}"
        raise SetupFailed(timing) from exc
    try:
        started = time.perf_counter()
        timing.detail = contender.run(target)
        elapsed = time.perf_counter() - started
        found = db.count(target.table) if contender.writes else target.rows
        if found != target.rows:
            raise AssertionError(f"table holds {found} rows after the run, expected {target.rows}")
        timing.seconds = elapsed
    except Exception as exc:
        timing.error = f"{type(exc).__name__}: {exc}"
        timing.detail["traceback"] = traceback.format_exc(limit=8)
        if contender.cleanup is not None:
            try:
                timing.detail["cleanup"] = contender.cleanup(target)
            except Exception as cleanup_exc:
                timing.detail["cleanup"] = {"error": f"{type(cleanup_exc).__name__}: {cleanup_exc}"}
    return timing


def progress_line(timing: Timing, warmups: int, repetitions: int) -> str:
    if timing.warmup:
        which = f"warm-up {timing.round}/{warmups}"
    else:
        which = f"run {timing.round - warmups}/{repetitions}"
    head = f"[{timing.database} {timing.workload}] {which:<11}"
    if timing.error:
        return f"{head} {timing.contender:<10} FAILED: {timing.error.splitlines()[0][:300]}"
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
    contenders: Sequence[Contender],
    target: Target,
    timings: list[Timing],
    *,
    workload: str,
    warmups: int,
    repetitions: int,
) -> None:
    """`warmups` + `repetitions` rounds; in each, every contender runs once, in turn.

    Timings are appended to `timings` as they happen, so a crash keeps what was measured.
    """
    total = warmups + repetitions
    for round_no in range(1, total + 1):
        for contender in rotated(contenders, round_no - 1):
            try:
                timing = measure_once(
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
