"""PostgreSQL bulk path: one `COPY ... FROM STDIN` per branch, fed per batch.

Binary format when every column maps exactly onto its table type (see pg_binary), CSV
otherwise. pgjdbc's CopyManager runs on the branch's own connection, so the rows are part
of the XA branch. Each Arrow batch is encoded in Python by vectorised code and handed to
Java as one byte[]: one crossing per batch, and the server parses while Python encodes the
next batch.
"""

from __future__ import annotations

import pyarrow as pa

from ..jvm import jclass
from .csv_encoding import CsvEncoder, encodable
from .pg_binary import HEADER, TRAILER, PgBinaryEncoder
from .target import LoadTarget


class PostgresCopyLoader:
    @staticmethod
    def supports(schema: pa.Schema, target: LoadTarget) -> bool:
        return PgBinaryEncoder.create(schema, target.columns, target.column_types) is not None or (
            all(encodable(schema.field(c).type, binary_as_hex=True) for c in target.columns)
        )

    def __init__(self, target: LoadTarget, schema: pa.Schema) -> None:
        binary = PgBinaryEncoder.create(schema, target.columns, target.column_types)
        self._encoder: PgBinaryEncoder | CsvEncoder = binary or CsvEncoder(
            schema, list(target.columns), null_string="", booleans_as_int=False, binary_as_hex=True
        )
        self.path = "copy-binary" if binary else "copy-csv"
        copy_api = target.conn.unwrap(jclass("org.postgresql.PGConnection")).getCopyAPI()
        fmt = "binary" if binary else "csv"
        columns = ", ".join(target.quoted_columns)
        sql = f"COPY {target.table_sql} ({columns}) FROM STDIN WITH (FORMAT {fmt})"
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
