"""PostgreSQL bulk path: one `COPY ... FROM STDIN (FORMAT csv)` per branch, fed per batch.

pgjdbc's CopyManager runs on the branch's own connection, so the rows are part of the XA
branch. Each Arrow batch is encoded by pyarrow and handed to Java as one byte[]: one
crossing per batch, and the server parses while Python encodes the next batch.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ..jvm import jclass
from .csv_encoding import CsvEncoder


class PostgresCopyLoader:
    def __init__(
        self,
        conn: Any,
        table_sql: str,
        quoted_columns: list[str],
        schema: pa.Schema,
        columns: list[str],
    ) -> None:
        self._encoder = CsvEncoder(schema, columns, null_string="", booleans_as_int=False)
        copy_api = conn.unwrap(jclass("org.postgresql.PGConnection")).getCopyAPI()
        sql = f"COPY {table_sql} ({', '.join(quoted_columns)}) FROM STDIN WITH (FORMAT csv)"
        self._copy = copy_api.copyIn(sql)

    def write(self, batch: pa.RecordBatch) -> None:
        data = self._encoder.encode(batch)
        self._copy.writeToCopy(data, 0, len(data))

    def finish(self) -> None:
        self._copy.endCopy()

    def abort(self) -> None:
        if self._copy.isActive():
            self._copy.cancelCopy()
