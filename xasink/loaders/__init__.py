"""Row loaders: turn Arrow record batches into rows of the target table, inside a branch.

Every loader has the same calls, so the writer does not care which one runs: `write(batch)`
for each Arrow batch (one crossing into Java per batch; only the batched loader's fallback,
without a JDK, binds value by value), `finish()` once at the end of the partition, and
`abort()` when the branch fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import pyarrow as pa

from ..dialects import Dialect
from ..runtime.jdbc import JdbcConnection
from ..spec import TableRef
from .base import LoadTarget
from .batched import BatchedInsertLoader
from .mysql_load_data import MySQLLoadDataLoader
from .pg_copy import PostgresCopyLoader


class Loader(Protocol):
    #: Which path this is ("copy-binary", "copy-csv", "load-data", "batched"), for reports.
    path: str

    def write(self, batch: pa.RecordBatch) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


#: Each dialect's bulk loader (same calls as BatchedInsertLoader).
BULK_LOADERS: dict[str, type[PostgresCopyLoader] | type[MySQLLoadDataLoader]] = {
    "postgres": PostgresCopyLoader,
    "mysql": MySQLLoadDataLoader,
}


def open_loader(
    dialect: Dialect,
    conn: JdbcConnection,
    table: TableRef,
    columns: Sequence[str],
    schema: pa.Schema,
    batch_size: int,
    bulk: bool,
    column_types: Sequence[str] = (),
) -> Loader:
    """The dialect's bulk loader when allowed and able, else batched INSERTs."""
    target = LoadTarget(
        conn=conn,
        table_sql=dialect.qualified(table),
        quoted_columns=[dialect.quote(c) for c in columns],
        columns=list(columns),
        column_types=list(column_types) or [""] * len(columns),
        dialect=dialect.name,
    )
    bulk_class = BULK_LOADERS.get(dialect.name) if bulk else None
    if bulk_class is not None and bulk_class.supports(schema, target):
        return bulk_class(target, schema)
    return BatchedInsertLoader(target, schema, batch_size)
