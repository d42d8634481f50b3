"""MySQL/MariaDB bulk path: `LOAD DATA LOCAL INFILE` from an in-memory stream, per chunk.

With LOCAL, the server turns data errors into warnings and goes on, which would silently
change rows. So every statement's row count and warnings are checked, and any mismatch
fails the branch (which the writer then rolls back).

Each chunk's statement runs on one background thread while the worker encodes the next
chunk (JPype releases the GIL inside Java), so encoding overlaps the server's load; at most
two chunks are in memory.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jpype
import pyarrow as pa

from ..errors import WriteError
from ..runtime.jdbc import JdbcConnection
from ..runtime.jvm import jclass
from .base import LoadTarget
from .csv_encoding import CsvEncoder, encodable

CHUNK_BYTES = 4 << 20
_STATEMENT_CLASSES = ("org.mariadb.jdbc.MariaDbStatement", "org.mariadb.jdbc.Statement")


def _mariadb_statement(conn: JdbcConnection) -> Any:
    statement = conn.createStatement()
    for name in _STATEMENT_CLASSES:
        try:
            cls = jclass(name)
        except (TypeError, ImportError, jpype.JException):
            continue
        if statement.isWrapperFor(cls):
            return statement.unwrap(cls)
    statement.close()
    raise WriteError("LOAD DATA LOCAL needs MariaDB Connector/J (setLocalInfileInputStream).")


class MySQLLoadDataLoader:
    path = "load-data"

    @staticmethod
    def supports(schema: pa.Schema, target: LoadTarget) -> bool:
        return all(encodable(schema.field(c).type) for c in target.columns)

    def __init__(
        self, target: LoadTarget, schema: pa.Schema, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self._encoder = CsvEncoder(
            schema,
            list(target.columns),
            null_string="NULL",
            booleans_as_int=True,
            floats_as_double=True,
        )
        self._statement = _mariadb_statement(target.conn)
        self._stream = jpype.JClass("java.io.ByteArrayInputStream")
        self._sql = (
            f"LOAD DATA LOCAL INFILE 'xasink-stream' INTO TABLE {target.table_sql} "
            "CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' "
            f"ESCAPED BY '' LINES TERMINATED BY '\\n' ({', '.join(target.quoted_columns)})"
        )
        self._chunk_bytes = chunk_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._rows = 0
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xasink-load")
        self._pending: Future[None] | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        data = self._encoder.encode(batch)
        self._parts.append(data)
        self._size += len(data)
        self._rows += batch.num_rows
        if self._size >= self._chunk_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        data, expected = b"".join(self._parts), self._rows
        self._parts, self._size, self._rows = [], 0, 0
        self._wait()  # one statement at a time on the connection
        self._pending = self._executor.submit(self._load, data, expected)

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def _load(self, data: bytes, expected: int) -> None:
        self._statement.setLocalInfileInputStream(self._stream(data))
        self._statement.execute(self._sql)
        loaded = int(self._statement.getUpdateCount())
        warnings = self._statement.getWarnings()
        if loaded != expected or warnings is not None:
            detail = str(warnings.getMessage()) if warnings is not None else "no warning"
            raise WriteError(
                f"LOAD DATA stored {loaded} of {expected} rows with warnings ({detail}); "
                "the server would have changed data, so the branch is rolled back."
            )

    def finish(self) -> None:
        try:
            self._flush()
            self._wait()
        finally:
            self._close()

    def abort(self) -> None:
        self._close()

    def _close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._statement.close()
