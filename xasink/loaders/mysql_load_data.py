"""MySQL/MariaDB bulk path: one `LOAD DATA LOCAL INFILE` per branch, streamed.

The statement starts at the first encoded chunk and reads the rest as the worker encodes
it: Connector/J pulls the file from a `SequenceInputStream` whose chunks a Python
`Enumeration` takes from a small queue. So the server parses from the first chunk on while
the worker encodes the next (JPype releases the GIL inside Java), with no gap between
statements, and at most `QUEUED_CHUNKS` chunks wait in memory. A branch that fits in one
chunk sends it in one statement on the worker's own thread.

With LOCAL, the server turns data errors into warnings and goes on, which would silently
change rows. So the statement's row count and warnings are checked, and any mismatch fails
the branch (which the writer then rolls back).
"""

from __future__ import annotations

import queue
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jpype
import pyarrow as pa

from ..errors import RowsRefusedError, WriteError
from ..runtime.jdbc import JdbcConnection
from ..runtime.jvm import java_override, jclass
from .base import LoadTarget
from .csv_encoding import NULL_STRING_WRITABLE, CsvEncoder, encodable

CHUNK_BYTES = 1 << 20
#: Encoded chunks waiting for the server: bounds a worker's memory when the server is slower.
QUEUED_CHUNKS = 4
#: How often a worker waiting for room in the queue checks that the statement still runs, s.
_POLL = 0.5
_STATEMENT_CLASSES = ("org.mariadb.jdbc.MariaDbStatement", "org.mariadb.jdbc.Statement")
_END = b""  # no chunk is empty: the end of the stream
#: The server waits for the next packet of a streamed file while the worker computes and
#: encodes it, which a slow upstream stage can stretch past `net_read_timeout` (30 s by
#: default). Given as much patience as an idle session (`wait_timeout`): what it had when
#: it waited between statements instead.
_PATIENT_READS = "SET SESSION net_read_timeout = @@SESSION.wait_timeout"


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


@jpype.JImplements("java.util.Enumeration", deferred=True)
class _Chunks:
    """The statement's file, chunk by chunk as the worker queues them (called from Java, on
    the statement's thread); an empty chunk ends it."""

    def __init__(self, chunks: queue.Queue[bytes], stream: Any) -> None:
        self._chunks, self._stream = chunks, stream
        self._next: bytes | None = None

    def _peek(self) -> bytes:
        if self._next is None:
            self._next = self._chunks.get()
        return self._next

    @java_override
    def hasMoreElements(self) -> bool:
        return self._peek() != _END

    @java_override
    def nextElement(self) -> Any:
        data, self._next = self._peek(), None
        return self._stream(data)


class MySQLLoadDataLoader:
    path = "load-data"

    @staticmethod
    def supports(schema: pa.Schema, target: LoadTarget) -> bool:
        """Every column has a CSV encoding, and pyarrow can write NULL as `NULL`."""
        return NULL_STRING_WRITABLE and all(encodable(schema.field(c).type) for c in target.columns)

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
        self._sequence = jpype.JClass("java.io.SequenceInputStream")
        self._sql = (
            f"LOAD DATA LOCAL INFILE 'xasink-stream' INTO TABLE {target.table_sql} "
            "CHARACTER SET utf8mb4 FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' "
            f"ESCAPED BY '' LINES TERMINATED BY '\\n' ({', '.join(target.quoted_columns)})"
        )
        self._chunk_bytes = chunk_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._rows = 0  # encoded, sent or queued
        self._chunks: queue.Queue[bytes] = queue.Queue(maxsize=QUEUED_CHUNKS)
        self._executor: ThreadPoolExecutor | None = None
        self._loading: Future[tuple[int, Any]] | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        data = self._encoder.encode(batch)
        if not data:
            return
        self._parts.append(data)
        self._size += len(data)
        self._rows += batch.num_rows
        if self._size >= self._chunk_bytes:
            self._send(self._take())

    def _take(self) -> bytes:
        data = b"".join(self._parts) if len(self._parts) != 1 else self._parts[0]
        self._parts, self._size = [], 0
        return data

    def _send(self, chunk: bytes) -> None:
        """Queue `chunk` for the running statement (started by the first chunk), waiting
        while the queue is full; a statement that has ended cannot take more, so its
        failure is raised here rather than waited for."""
        if self._loading is None:
            self._statement.execute(_PATIENT_READS)
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xasink-load")
            self._loading = self._executor.submit(self._load_stream)
        while True:
            try:
                self._chunks.put(chunk, timeout=_POLL)
                return
            except queue.Full:
                if self._loading.done():
                    self._loading.result()  # its error
                    raise WriteError(
                        "LOAD DATA ended before the branch's last rows were sent."
                    ) from None

    def _load_stream(self) -> tuple[int, Any]:
        chunks = self._sequence(_Chunks(self._chunks, self._stream))
        return self._load(chunks)

    def _load(self, stream: Any) -> tuple[int, Any]:
        self._statement.setLocalInfileInputStream(stream)
        self._statement.execute(self._sql)
        return int(self._statement.getUpdateCount()), self._statement.getWarnings()

    def finish(self) -> None:
        try:
            if self._loading is None:  # the whole branch is one chunk (or none)
                if self._rows:
                    self._check(*self._load(self._stream(self._take())))
                return
            if self._parts:
                self._send(self._take())
            self._send(_END)
            self._check(*self._loading.result())
        finally:
            self._close()

    def _check(self, loaded: int, warnings: Any) -> None:
        if loaded != self._rows or warnings is not None:
            detail = str(warnings.getMessage()) if warnings is not None else "no warning"
            raise RowsRefusedError(
                f"LOAD DATA stored {loaded} of {self._rows} rows with warnings ({detail}); "
                "the server would have changed data, so the branch is rolled back."
            )

    def abort(self) -> None:
        """End the stream where it is (the writer rolls the branch back) and wait for the
        statement, so nothing runs on the connection after this returns."""
        self._close()

    def _close(self) -> None:
        if self._loading is not None and not self._loading.done():
            self._end_stream()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._statement.close()

    def _end_stream(self) -> None:
        """Cut the file short: what is queued is dropped and the end put in its place (only
        the worker's thread puts, so there is room), and the statement ends with fewer rows,
        never checked: the branch is being given up."""
        while True:
            try:
                self._chunks.get_nowait()
            except queue.Empty:
                break
        self._chunks.put_nowait(_END)
