"""Row loaders: turn Arrow record batches into rows of the target table, inside a branch.

Every loader has the same two calls, so the writer does not care which one runs:
`write(batch)` for each Arrow batch (one crossing into Java per batch, never per row, for
the bulk loaders) and `finish()` once at the end of the partition.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ..target import TableRef
from .batched import BatchedInsertLoader

if TYPE_CHECKING:
    from ..dialects import Dialect


class Loader(Protocol):
    #: Which path this is ("copy-binary", "copy-csv", "load-data", "batched"), for reports.
    path: str

    def write(self, batch: pa.RecordBatch) -> None: ...

    def finish(self) -> None: ...

    def abort(self) -> None: ...


def open_loader(
    dialect: Dialect,
    conn: Any,
    table: TableRef,
    columns: Sequence[str],
    schema: pa.Schema,
    batch_size: int,
    bulk: bool,
    column_types: Sequence[str] = (),
) -> Loader:
    """The dialect's bulk loader when allowed and every column encodes, else batched INSERT."""
    table_sql = dialect.qualified(table)
    quoted = [dialect.quote(c) for c in columns]
    bulk_class = dialect.bulk_loader() if bulk else None
    if bulk_class is not None and bulk_class.supports(schema, columns, column_types):
        return bulk_class(conn, table_sql, quoted, schema, list(columns), column_types)
    sql = f"INSERT INTO {table_sql} ({', '.join(quoted)}) VALUES ({', '.join('?' for _ in quoted)})"
    return BatchedInsertLoader(conn, sql, schema, columns, batch_size)
