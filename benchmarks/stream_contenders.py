"""The contenders of a stream workload: where a query writes, and each one's sink.

Every contender is a streaming query over the same pre-written source (`StreamSource`, one
file per micro-batch): Spark's own JDBC writer and xasink's two sinks, and beside them the
floors, sinks that write nothing (what a sink of each kind pays before it writes) or write
with no exactly-once (what it pays to make a batch durable). A `foreachBatch` contender's
function is timed from inside (`Calls`); `streams.py` runs the queries and reads their
progress.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import xasink_calls
from .contenders import by_name, jdbc_properties, recover_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import DataStreamWriter
    from pyspark.sql.types import StructType

    from .databases import Database


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
    sink_id = f"bench-{target.table}-{uuid.uuid4().hex[:12]}"
    write = xasink_calls.foreach_batch(target.db, target.table, sink_id=sink_id)
    return stream.writeStream.foreachBatch(_timed(write, calls))


def format_sink(stream: DataFrame, target: StreamTarget, calls: Calls) -> DataStreamWriter:
    """writeStream.format("xasink") (Python Data Source stream writer); its sink is named
    by the new query's id. No Python function of ours runs per batch."""
    options = xasink_calls.format_options(target.db, target.table)
    return stream.writeStream.format("xasink").options(**options)


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

STREAM_CONTENDERS: dict[str, StreamContender] = by_name(
    StreamContender("spark_jdbc", "Spark JDBC in foreachBatch", spark_jdbc_sink),
    StreamContender("write_xa", "xasink foreach_batch", write_xa_sink, recover_stream),
    StreamContender("write_xa_format", 'writeStream.format("xasink")', format_sink, recover_stream),
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
    StreamContender("spark_noop", "Spark's noop sink (no write)", spark_noop_sink, writes=False),
)
