"""PostgreSQL bulk path: one `COPY ... FROM STDIN` per branch, fed per batch.

Binary format when every column maps exactly onto its table type (see pg_binary), CSV
otherwise. pgjdbc's CopyManager runs on the branch's own connection, so the rows are part
of the XA branch. Each Arrow batch is encoded in Python by vectorised code and handed to
Java as one byte[]: one crossing per batch, and the server parses while Python encodes the
next batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..jvm import jclass
from .csv_encoding import CsvEncoder, encodable
from .pg_binary import HEADER, TRAILER, PgBinaryEncoder


class PostgresCopyLoader:
    @staticmethod
    def supports(schema: pa.Schema, columns: Sequence[str], column_types: Sequence[str]) -> bool:
        return PgBinaryEncoder.create(schema, columns, column_types) is not None or all(
            encodable(schema.field(c).type) for c in columns
        )

    def __init__(
        self,
        conn: Any,
        table_sql: str,
        quoted_columns: list[str],
        schema: pa.Schema,
        columns: list[str],
        column_types: Sequence[str],
    ) -> None:
        binary = PgBinaryEncoder.create(schema, columns, column_types)
        self._encoder: PgBinaryEncoder | CsvEncoder = binary or CsvEncoder(
            schema, columns, null_string="", booleans_as_int=False
        )
        self.path = "copy-binary" if binary else "copy-csv"
        copy_api = conn.unwrap(jclass("org.postgresql.PGConnection")).getCopyAPI()
        fmt = "binary" if binary else "csv"
        sql = f"COPY {table_sql} ({', '.join(quoted_columns)}) FROM STDIN WITH (FORMAT {fmt})"
        self._copy = copy_api.copyIn(sql)
        if binary:
            self._send(HEADER)

    def _send(self, data: bytes) -> None:
        self._copy.writeToCopy(data, 0, len(data))

    def write(self, batch: pa.RecordBatch) -> None:
        self._send(self._encoder.encode(batch))

    def finish(self) -> None:
        if self.path == "copy-binary":
            self._send(TRAILER)
        self._copy.endCopy()

    def abort(self) -> None:
        if self._copy.isActive():
            self._copy.cancelCopy()
