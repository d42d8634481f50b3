"""Python data sources as stream floors for `writeStream.format("xasink")`: one whose writer
writes nothing (the least a sink in Python pays per micro-batch: Spark's planner, one Python
task per partition reading its Arrow batches, a commit on the driver's Python worker), and
one whose tasks bulk-load their rows raw (the least such a sink pays to make a batch
durable: no XA, no journal, no exactly-once)."""

from __future__ import annotations

import base64
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xasink.spark.versions import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from .databases import Database

NOOP = "xasink_bench_noop"
LOAD = "xasink_bench_load"


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
        return NOOP

    def streamWriter(self, schema: StructType, overwrite: bool) -> NoopStreamWriter:
        return NoopStreamWriter()


class LoadStreamWriter(NoopStreamWriter):
    """Each task loads its partition's rows in one autocommit statement on its worker's
    held connection (benchmarks.rawload.load_batches)."""

    def __init__(self, database: str, table: str, columns: tuple[str, ...]) -> None:
        #: `database_option`'s text: unpickled in the task, once tests/ is on its path.
        self.database, self.table, self.columns = database, table, columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Rows:
        from .databases import servers_module
        from .rawload import load_batches

        batches = [batch for batch in iterator if batch.num_rows]
        if not batches:
            return Rows(0)
        servers_module()  # the Database's server class is tests/servers.py's
        database = pickle.loads(base64.b64decode(self.database))
        return Rows(load_batches(database, self.table, batches, self.columns))


class LoadDataSource(DataSource):
    """Options: `database` (`database_option`) and `dbtable`."""

    @classmethod
    def name(cls) -> str:
        return LOAD

    def streamWriter(self, schema: StructType, overwrite: bool) -> LoadStreamWriter:
        options = self.options
        return LoadStreamWriter(options["database"], options["dbtable"], tuple(schema.names))


def database_option(database: Database) -> str:
    """`database` as LoadDataSource's option (a throwaway benchmark server's login)."""
    return base64.b64encode(pickle.dumps(database)).decode("ascii")
