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
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .contenders import jdbc_properties, recover_table
from .measure import Timing, record_failure, run_rounds, start_timing, truncate
from .workloads import Workload, build_dataframe, table_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter
    from pyspark.sql.types import StructType

    from .databases import Database

#: A query that has not finished by then is stopped and recorded as failed.
QUERY_TIMEOUT_SECONDS = 900
#: Source file b is modified at this second + b: the file source takes the oldest first.
SOURCE_EPOCH = 1_600_000_000
#: Spark keeps the last 100 progress reports of a query (numRecentProgressUpdates default).
MAX_BATCHES = 100


@dataclass(frozen=True)
class StreamSource:
    """Pre-written parquet files, one per micro-batch."""

    directory: Path
    schema: StructType
    files: int

    def read(self, spark: SparkSession) -> DataFrame:
        """A new streaming DataFrame over the files, one file per micro-batch."""
        return (
            spark.readStream.schema(self.schema)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.directory))
        )


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
class StreamTarget:
    """Where and what one stream measurement writes."""

    db: Database
    table: str
    spark: SparkSession
    source: StreamSource
    rows_per_batch: int
    warmup_batches: int
    #: Checkpoint directories go here (one per query, removed after it).
    scratch: Path

    @property
    def timed_batches(self) -> int:
        return self.source.files - self.warmup_batches


#: Records a foreachBatch function's seconds by batch id (the driver runs the function).
Calls = dict[int, float]


def _timed(
    write: Callable[[DataFrame, int], None], calls: Calls
) -> Callable[[DataFrame, int], None]:
    def call(batch: DataFrame, batch_id: int) -> None:
        started = time.perf_counter()
        write(batch, batch_id)
        calls[int(batch_id)] = time.perf_counter() - started

    return call


def spark_jdbc_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """foreachBatch with Spark's own writer, as the batch `spark_jdbc` contender calls it."""
    db, table = target.db, target.table
    properties = jdbc_properties(db)

    def write(batch: DataFrame, _batch_id: int) -> None:
        batch.write.jdbc(db.jdbc_url, table, mode="append", properties=properties)

    return stream.writeStream.foreachBatch(_timed(write, calls))


def write_xa_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """foreachBatch(xasink.foreach_batch(...)) with every default, as the README shows it.

    Each query gets a new sink_id: its checkpoint is new, so its batch ids start at 0 again,
    which an old sink's mark would skip.
    """
    from xasink import foreach_batch

    db = target.db
    write = foreach_batch(
        db.sink(),
        target.table,
        sink_id=f"bench-{target.table}-{uuid.uuid4().hex[:12]}",
    )
    return stream.writeStream.foreachBatch(_timed(write, calls))


def format_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """writeStream.format("xasink") (Python Data Source stream writer); its sink is named
    by the new query's id. No Python function of ours runs per batch."""
    db = target.db
    return (
        stream.writeStream.format("xasink")
        .option("url", db.jdbc_url)
        .option("dbtable", target.table)
        .option("user", db.server.user)
        .option("password", db.server.password)
    )


def collect_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """No write: foreachBatch collecting each batch into the driver as Arrow, as
    `foreach_batch`'s driver-written batch does before its one transaction."""

    def collect(batch: DataFrame, _batch_id: int) -> None:
        batch._collect_as_arrow()

    return stream.writeStream.foreachBatch(_timed(collect, calls))


def collect_load_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """Durable floor: foreachBatch collecting each batch as Arrow (as `collect_sink`), then
    the raw bulk load of its rows in one autocommit statement (COPY csv / LOAD DATA LOCAL of
    a tmpfs file, benchmarks/rawload.py) on a held connection: no xasink, no XA, no journal;
    the least any sink pays that writes a batch durably from the driver."""
    from .rawload import load_batches

    db, table = target.db, target.table

    def collect_load(batch: DataFrame, _batch_id: int) -> None:
        load_batches(db, table, batch._collect_as_arrow(), tuple(batch.columns))

    return stream.writeStream.foreachBatch(_timed(collect_load, calls))


def spark_noop_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """No write: Spark's own `noop` sink (JVM), what any micro-batch costs before a sink."""
    return stream.writeStream.format("noop")


def python_noop_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """No write: a Python data source whose stream writer drops the rows
    (benchmarks/python_sources.py), what `format("xasink")` pays before writing."""
    from .python_sources import NOOP, NoopDataSource

    target.spark.dataSource.register(NoopDataSource)
    return stream.writeStream.format(NOOP)


def python_load_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """Durable floor of its kind: a Python data source whose tasks bulk-load their rows raw
    (COPY csv / LOAD DATA LOCAL, autocommit, a connection held per worker): the least a
    `writeStream.format(...)` sink in Python pays to write a batch, with no XA, no journal
    and no exactly-once."""
    from .python_sources import LOAD, LoadDataSource, database_option

    target.spark.dataSource.register(LoadDataSource)
    return (
        stream.writeStream.format(LOAD)
        .option("database", database_option(target.db))
        .option("dbtable", target.table)
    )


def recover_stream(target: StreamTarget) -> dict[str, Any]:
    """After a failed xasink query: resolve what it left in doubt on the table."""
    return recover_table(target.db, target.table)


@dataclass(frozen=True)
class StreamContender:
    name: str
    label: str
    #: The query's sink over the streaming DataFrame; records into `calls` if it has a
    #: foreachBatch function.
    sink: Callable[[DataFrame, StreamTarget, Calls], DataStreamWriter]
    #: Runs after a failed measurement, before the next one; its result goes in the detail.
    cleanup: Callable[[StreamTarget], dict[str, Any]] | None = None
    #: False for a floor that writes nothing: the table must hold no row after its query.
    writes: bool = True


#: The stream contenders that write nothing: what a sink of each kind pays before writing.
STREAM_FLOORS = ("stream_collect", "python_noop", "spark_noop")
#: The floors that write: collect as `stream_collect`, then the raw durable load of the rows;
#: and a Python data source whose tasks load their rows raw.
DURABLE_FLOOR = "collect_load"
PYTHON_DURABLE_FLOOR = "python_load"

STREAM_CONTENDERS: dict[str, StreamContender] = {
    c.name: c
    for c in (
        StreamContender("spark_jdbc", "Spark JDBC in foreachBatch", spark_jdbc_sink),
        StreamContender("write_xa", "xasink foreach_batch", write_xa_sink, recover_stream),
        StreamContender(
            "write_xa_format", 'writeStream.format("xasink")', format_sink, recover_stream
        ),
        StreamContender(
            "stream_collect",
            "collect as Arrow in foreachBatch (no write)",
            collect_sink,
            writes=False,
        ),
        StreamContender(
            "collect_load",
            "collect, then raw bulk load (no xasink)",
            collect_load_sink,
        ),
        StreamContender(
            "python_noop", "no-op Python data source (no write)", python_noop_sink, writes=False
        ),
        StreamContender(
            "python_load", "Python data source, raw bulk load (no xasink)", python_load_sink
        ),
        StreamContender(
            "spark_noop", "Spark's noop sink (no write)", spark_noop_sink, writes=False
        ),
    )
}


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
    try:
        batches = run_query(contender, target)
        seconds, timing.detail = stream_detail(
            batches,
            expected=target.source.files,
            warmups=target.warmup_batches,
            rows_per_batch=target.rows_per_batch,
        )
        expected = target.source.files * target.rows_per_batch if contender.writes else 0
        found = db.count(target.table)
        if found != expected:
            raise AssertionError(f"table holds {found} rows after the query, expected {expected}")
        timing.seconds = seconds
    except Exception as exc:
        cleanup = contender.cleanup
        record_failure(timing, exc, (lambda: cleanup(target)) if cleanup else None)
    return timing


def run_workload(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    contenders: Sequence[str],
    table: str,
    timings: list[Timing],
    *,
    repetitions: int,
) -> None:
    """Write the source once, then on each database one query per contender and round."""
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
        for db in databases:
            target = StreamTarget(
                db=db,
                table=table,
                spark=spark,
                source=source,
                rows_per_batch=workload.rows,
                warmup_batches=workload.warmup_batches,
                scratch=scratch,
            )
            with db.fresh_tables({table: table_ddl(db.kind, workload, table)}, workload.name):
                run_rounds(
                    chosen,
                    target,
                    timings,
                    workload=workload.name,
                    warmups=workload.warmups or 0,
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
