"""Streams of micro-batches: the cost of each small batch a streaming sink commits.

Bulk speed says little about a stream of 1k-row micro-batches: there the fixed cost per
batch decides. Every contender's query reads the same pre-written files, one per micro-batch
(`maxFilesPerTrigger=1`, `trigger(availableNow=True)`), so each batch has exactly the
workload's rows, the source costs the same for all, and the query ends by itself. One query
per contender and round; its first batches are warm-ups, excluded from every figure.

Per batch, Spark's own progress report gives the end-to-end duration (`triggerExecution`:
offsets, planning, the sink, the checkpoint's commit) and the sink's part (`addBatch`); a
`foreachBatch` contender's function is also timed from inside. Batches per second span the
timed batches, from the first one's trigger to the end of the last.
"""

from __future__ import annotations

import datetime
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .measure import Timing, cleanup_of, rounds_on_each, run_checked, start_timing, truncate
from .stream_contenders import STREAM_CONTENDERS, Calls, StreamContender, StreamSource, StreamTarget
from .workloads import Workload, build_dataframe

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .databases import Database

#: A query that has not finished by then is stopped and recorded as failed.
QUERY_TIMEOUT_SECONDS = 900
#: Source file b is modified at this second + b: the file source takes the oldest first.
SOURCE_EPOCH = 1_600_000_000
#: Spark keeps the last 100 progress reports of a query (numRecentProgressUpdates default).
MAX_BATCHES = 100


def scratch_root() -> Path | None:
    """tmpfs when there is one: the source and the checkpoints cost no disk I/O (None: $TMP)."""
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else None


def write_source(spark: SparkSession, workload: Workload, directory: Path) -> StreamSource:
    """`workload.total_batches` parquet files of `workload.rows` rows (ids run on from file to
    file), written once before any timing.

    Parquet keeps the narrow shape's types (JSON would make the source parse timestamps),
    and each file's modification time follows its ids, so every query takes them in order.
    """
    total = workload.total_batches
    if not 0 < total <= MAX_BATCHES:
        raise ValueError(f"{workload.name}: {total} micro-batches; at most {MAX_BATCHES}")
    every_batch = Workload(workload.name, workload.shape, workload.rows * total, total)
    df = build_dataframe(spark, every_batch)
    df.write.parquet(str(directory))
    files = sorted(directory.glob("part-*.parquet"))
    if len(files) != total:
        raise RuntimeError(f"{workload.name}: wrote {len(files)} source files, expected {total}")
    for index, path in enumerate(files):
        os.utime(path, (SOURCE_EPOCH + index, SOURCE_EPOCH + index))
    return StreamSource(directory, df.schema, total)


@dataclass(frozen=True)
class Batch:
    """One micro-batch, from Spark's progress report (and the foreachBatch timer)."""

    batch_id: int
    rows: int
    #: When its trigger started (epoch seconds, millisecond precision).
    started: float
    trigger_ms: float
    add_batch_ms: float
    #: Seconds inside the foreachBatch function, as ms; None without one.
    call_ms: float | None

    @property
    def write_ms(self) -> float:
        """The sink's time: the foreachBatch call if timed, else Spark's addBatch."""
        return self.call_ms if self.call_ms is not None else self.add_batch_ms


def _epoch(timestamp: str) -> float:
    """Spark's progress timestamp ('2024-01-01T12:00:00.123Z') in epoch seconds."""
    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def batches_from_progress(progress: Sequence[Any], calls: Calls) -> list[Batch]:
    """The batches that read rows, in batch-id order (a no-data trigger is not a batch)."""
    batches = [
        Batch(
            batch_id=int(p["batchId"]),
            rows=int(p["numInputRows"]),
            started=_epoch(p["timestamp"]),
            trigger_ms=float(p["durationMs"]["triggerExecution"]),
            add_batch_ms=float(p["durationMs"].get("addBatch", 0)),
            call_ms=calls[int(p["batchId"])] * 1000 if int(p["batchId"]) in calls else None,
        )
        for p in progress
        if int(p["numInputRows"]) > 0
    ]
    return sorted(batches, key=lambda b: b.batch_id)


def stream_detail(
    batches: Sequence[Batch], *, expected: int, warmups: int, rows_per_batch: int
) -> tuple[float, dict[str, Any]]:
    """Check that the query ran `expected` batches of `rows_per_batch` rows; return the timed
    batches' wall seconds and the run's detail (every batch, warm-ups flagged)."""
    ids = [b.batch_id for b in batches]
    if ids != list(range(expected)):
        raise AssertionError(f"progress reports batches {ids}, expected 0..{expected - 1}")
    wrong = [(b.batch_id, b.rows) for b in batches if b.rows != rows_per_batch]
    if wrong:
        raise AssertionError(f"batches of other than {rows_per_batch} rows: {wrong}")
    timed = list(batches[warmups:])
    if not timed:
        raise ValueError("no timed batches")
    last = timed[-1]
    seconds = last.started + last.trigger_ms / 1000 - timed[0].started
    detail = {
        "timed_batches": len(timed),
        "warmup_batches": warmups,
        "rows_per_batch": rows_per_batch,
        "batches_per_second": len(timed) / seconds,
        "median_batch_ms": statistics.median(b.trigger_ms for b in timed),
        "median_write_ms": statistics.median(b.write_ms for b in timed),
        "write_measure": "addBatch" if last.call_ms is None else "foreachBatch call",
        "batches": [{**b.__dict__, "warmup": index < warmups} for index, b in enumerate(batches)],
    }
    return seconds, detail


def run_query(contender: StreamContender, target: StreamTarget) -> list[Batch]:
    """One query from a new checkpoint to the end of the source; its batches."""
    calls: Calls = {}
    checkpoint = Path(tempfile.mkdtemp(prefix="checkpoint-", dir=target.scratch))
    try:
        writer = contender.sink(target.source.read(target.spark), target, calls)
        query = (
            writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        try:
            if not query.awaitTermination(QUERY_TIMEOUT_SECONDS):
                raise TimeoutError(f"the query ran longer than {QUERY_TIMEOUT_SECONDS}s")
        finally:
            query.stop()  # a no-op once it has ended
        return batches_from_progress(query.recentProgress, calls)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def measure_stream_once(
    contender: StreamContender,
    target: StreamTarget,
    *,
    round_no: int,
    warmup: bool,
    workload: str,
) -> Timing:
    """Truncate, run one query, then check every batch's rows and the table's count.

    The Timing's rows and seconds cover the timed batches only; the count covers them all.
    """
    db = target.db
    timed_rows = target.timed_batches * target.rows_per_batch
    timing = start_timing(db.kind, workload, contender.name, round_no, warmup, timed_rows)
    truncate(db, target.table, timing)

    def run() -> float:
        seconds, timing.detail = stream_detail(
            run_query(contender, target),
            expected=target.source.files,
            warmups=target.warmup_batches,
            rows_per_batch=target.rows_per_batch,
        )
        return seconds

    rows = target.source.files * target.rows_per_batch if contender.writes else 0
    cleanup = cleanup_of(contender, target)
    return run_checked(timing, db, run, {target.table: rows}, cleanup, "query")


def run_workload(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    contenders: Sequence[str],
    table: str,
    timings: list[Timing],
    *,
    warmups: int,
    repetitions: int,
) -> None:
    """Write the source once, then on each database one query per contender and round
    (`warmups` untimed rounds first: none for a stream, whose queries run their own warm-up
    batches)."""
    chosen = [STREAM_CONTENDERS[name] for name in contenders if name in STREAM_CONTENDERS]
    if not chosen:
        print(f"[{workload.name}] no stream contender chosen: skipped", flush=True)
        return
    scratch = Path(tempfile.mkdtemp(prefix="xasink-bench-stream-", dir=scratch_root()))
    try:
        started = time.monotonic()
        source = write_source(spark, workload, scratch / "source")
        print(
            f"[{workload.name}] {source.files} source files of {workload.rows:,} rows (one per "
            f"micro-batch, {workload.warmup_batches} warm-up) written in "
            f"{time.monotonic() - started:.1f}s",
            flush=True,
        )
        rounds_on_each(
            databases,
            workload,
            [table],
            lambda db: StreamTarget(
                db=db,
                table=table,
                spark=spark,
                source=source,
                rows_per_batch=workload.rows,
                warmup_batches=workload.warmup_batches,
                scratch=scratch,
            ),
            chosen,
            timings,
            warmups=warmups,
            repetitions=repetitions,
            measure=measure_stream_once,
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class StreamSummary:
    """The timed runs (queries) of one contender on one stream workload."""

    database: str
    workload: str
    contender: str
    rows_per_batch: int
    #: Timed batches per query, and each successful timed query's wall seconds for them.
    timed_batches: int
    seconds: list[float]
    #: Every timed batch of those queries, pooled.
    batch_ms: list[float]
    write_ms: list[float]
    write_measure: str
    failures: int

    @property
    def batches_per_second(self) -> float | None:
        """Timed batches ÷ the median query's wall seconds (as rows/s for bulk workloads)."""
        return self.timed_batches / statistics.median(self.seconds) if self.seconds else None

    @property
    def run_rates(self) -> list[float]:
        return [self.timed_batches / s for s in self.seconds]

    @property
    def median_batch_ms(self) -> float | None:
        return statistics.median(self.batch_ms) if self.batch_ms else None

    @property
    def p90_batch_ms(self) -> float | None:
        return _p90(self.batch_ms)

    @property
    def median_write_ms(self) -> float | None:
        return statistics.median(self.write_ms) if self.write_ms else None

    def as_json(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "workload": self.workload,
            "contender": self.contender,
            "rows_per_batch": self.rows_per_batch,
            "timed_batches_per_query": self.timed_batches,
            "timed_queries": len(self.seconds),
            "batches_per_second": self.batches_per_second,
            "batches_per_second_per_query": self.run_rates,
            "median_batch_ms": self.median_batch_ms,
            "p90_batch_ms": self.p90_batch_ms,
            "median_write_ms": self.median_write_ms,
            "write_measure": self.write_measure,
            "failures": self.failures,
        }


def _p90(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return values[0] if values else None
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def summarise_streams(timings: Sequence[Timing], workloads: Collection[str]) -> list[StreamSummary]:
    """One StreamSummary per (database, workload, contender) of the stream `workloads`, in
    first-seen order."""
    groups: dict[tuple[str, str, str], list[Timing]] = {}
    for timing in timings:
        if timing.workload in workloads:
            groups.setdefault((timing.database, timing.workload, timing.contender), []).append(
                timing
            )
    summaries = []
    for (database, workload, contender), group in groups.items():
        good = [t for t in group if not t.warmup and not t.error and t.seconds is not None]
        timed = [b for t in good for b in t.detail["batches"] if not b["warmup"]]
        shape = next((t.detail for t in good), {})
        summaries.append(
            StreamSummary(
                database=database,
                workload=workload,
                contender=contender,
                rows_per_batch=shape.get("rows_per_batch", 0),
                timed_batches=shape.get("timed_batches", 0),
                seconds=[t.seconds for t in good if t.seconds is not None],
                batch_ms=[b["trigger_ms"] for b in timed],
                write_ms=[_write_ms(b) for b in timed],
                write_measure=shape.get("write_measure", ""),
                failures=sum(1 for t in group if t.error),
            )
        )
    return summaries


def _write_ms(batch: dict[str, Any]) -> float:
    """`Batch.write_ms` of a batch as the JSON detail holds it."""
    return batch["call_ms"] if batch["call_ms"] is not None else batch["add_batch_ms"]
