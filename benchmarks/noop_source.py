"""A Python data source whose stream writer writes nothing: the least a
`writeStream.format(...)` sink in Python pays per micro-batch (Spark's planner, one Python
task per partition reading its Arrow batches, and a commit on the driver's Python worker),
against which `format("xasink")` is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

NAME = "xasink_bench_noop"


@dataclass
class Rows(WriterCommitMessage):
    rows: int


class NoopStreamWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> Rows:
        return Rows(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> NoopStreamWriter:
        return NoopStreamWriter()
