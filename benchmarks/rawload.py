"""The raw limit: one process bulk-loading a CSV that was fully built beforehand.

PostgreSQL gets ``COPY ... FROM STDIN`` (psycopg) from an in-memory buffer. MariaDB gets
``LOAD DATA LOCAL INFILE`` (pymysql), which can only read a named file, so the buffer lives
in a file on a tmpfs (``/dev/shm`` when present): in memory, like the PostgreSQL buffer.
Building the CSV is never timed; only the load is.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .databases import Database

#: Bytes handed to psycopg per ``copy.write`` call.
COPY_CHUNK = 1 << 20


@dataclass
class CsvBuffer:
    """The whole DataFrame as one headerless CSV: a file, and its bytes for COPY."""

    path: Path
    data: bytes
    rows: int
    columns: tuple[str, ...]

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)
        self.data = b""


def scratch_dir() -> str:
    """A memory-backed directory if the machine has one, else the temp directory."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def csv_bytes(batch: pa.RecordBatch) -> bytes:
    """One Arrow batch as CSV both servers accept (timestamps as naive UTC wall time)."""
    import pyarrow.csv as pacsv

    columns = [
        column.cast(pa.timestamp("us")) if pa.types.is_timestamp(column.type) else column
        for column in batch.columns
    ]
    table = pa.Table.from_arrays(columns, names=batch.schema.names)
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False))
    return sink.getvalue().to_pybytes()


def _write_part(folder: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: this partition's rows into ``part-<n>.csv`` (atomically)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    assert context is not None
    part = Path(folder) / f"part-{context.partitionId():06d}.csv"
    tmp = part.with_suffix(f".{context.taskAttemptId()}.tmp")
    rows = 0
    with open(tmp, "wb") as out:
        for batch in batches:
            out.write(csv_bytes(batch))
            rows += batch.num_rows
    os.replace(tmp, part)
    yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=pa.schema([("rows", pa.int64())]))


def build_csv(df: DataFrame, label: str, *, in_memory: bool) -> CsvBuffer:
    """Render the (cached) DataFrame to one CSV file in partition order.

    `in_memory` also reads it into a bytes buffer (for COPY); LOAD DATA reads the file.
    """
    folder = Path(tempfile.mkdtemp(prefix="xasink-bench-", dir=scratch_dir()))
    try:
        counts = df.mapInArrow(functools.partial(_write_part, str(folder)), "rows long").collect()
        target = Path(scratch_dir()) / f"xasink-bench-{label}-{os.getpid()}.csv"
        with open(target, "wb") as out:
            for part in sorted(folder.glob("part-*.csv")):
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 16 << 20)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return CsvBuffer(
        path=target,
        data=target.read_bytes() if in_memory else b"",
        rows=sum(int(row.rows) for row in counts),
        columns=tuple(df.columns),
    )


def postgres_binary(db: Database, table: str, csv: CsvBuffer) -> bytes:
    """The same rows in binary COPY format, produced by the server itself (not timed).

    Binary is the fastest format PostgreSQL loads, so it is the honest "limit"; building it
    with COPY TO keeps the baseline independent of xasink's own encoder.
    """
    copy_postgres(db, table, csv)
    columns = ", ".join(csv.columns)
    parts: list[bytes] = []
    with db.connect() as conn, conn.cursor() as cur:
        with cur.copy(f"COPY {table} ({columns}) TO STDOUT (FORMAT binary)") as copy:
            parts.extend(bytes(chunk) for chunk in copy)
        cur.execute(f"TRUNCATE {table}")
    return b"".join(parts)


def _connection(db: Database, conn: Any) -> contextlib.AbstractContextManager[Any]:
    """`conn` as it is (the caller keeps it), or a new connection closed afterwards."""
    return contextlib.nullcontext(conn) if conn is not None else contextlib.closing(db.connect())


def copy_postgres(
    db: Database, table: str, csv: CsvBuffer, binary: bytes | None = None, conn: Any = None
) -> dict[str, Any]:
    """COPY FROM STDIN of the in-memory buffer (binary if given, else CSV), one autocommit
    statement, on `conn` if given."""
    data = binary if binary is not None else csv.data
    view = memoryview(data)
    columns = ", ".join(csv.columns)
    fmt = "binary" if binary is not None else "csv"
    with _connection(db, conn) as connection, connection.cursor() as cur:
        with cur.copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT {fmt})") as copy:
            for start in range(0, len(view), COPY_CHUNK):
                copy.write(view[start : start + COPY_CHUNK])
        loaded = cur.rowcount
    return {"bytes": len(data), "format": fmt, "loaded": loaded}


def load_data_mariadb(db: Database, table: str, csv: CsvBuffer, conn: Any = None) -> dict[str, Any]:
    """LOAD DATA LOCAL INFILE of the tmpfs file, one autocommit statement, on `conn` if given."""
    columns = ", ".join(csv.columns)
    sql = (
        f"LOAD DATA LOCAL INFILE %s INTO TABLE {table} CHARACTER SET utf8mb4 "
        "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\n' "
        f"({columns})"
    )
    with _connection(db, conn) as connection, connection.cursor() as cur:
        loaded = cur.execute(sql, (str(csv.path),))
    return {"bytes": csv.path.stat().st_size, "loaded": loaded}


#: The held connection per server (kind, port): a sink keeps its connection from batch
#: to batch (xasink's sessions are kept too), in the driver and in each Spark worker.
_HELD: dict[tuple[str, int], Any] = {}


def held_connection(db: Database) -> Any:
    """This process's autocommit connection to `db`'s server, opened once."""
    key = (db.kind, db.server.port)
    if key not in _HELD:
        _HELD[key] = db.connect()
    return _HELD[key]


def load_batches(
    db: Database, table: str, batches: list[pa.RecordBatch], columns: tuple[str, ...]
) -> int:
    """Rows of `batches` loaded raw into `table` in one autocommit statement (COPY csv, or
    LOAD DATA LOCAL of a tmpfs file) on this process's held connection; how many rows."""
    data = b"".join(csv_bytes(b) for b in batches)
    rows = sum(b.num_rows for b in batches)
    conn = held_connection(db)
    if db.kind == "postgres":  # COPY reads the bytes; only LOAD DATA needs a file
        copy_postgres(db, table, CsvBuffer(Path(), data, rows, columns), conn=conn)
        return rows
    with tempfile.NamedTemporaryFile(dir=scratch_dir(), suffix=".csv") as file:
        file.write(data)
        file.flush()
        load_data_mariadb(db, table, CsvBuffer(Path(file.name), b"", rows, columns), conn=conn)
    return rows


def split_csv(csv: CsvBuffer, parts: int, *, in_memory: bool) -> list[CsvBuffer]:
    """The CSV cut into `parts` files of consecutive whole rows, as even as rows allow
    (the rows have no embedded newlines). `in_memory` also keeps each part's bytes."""
    data = csv.path.read_bytes()
    per_part, extra = divmod(csv.rows, parts)
    result: list[CsvBuffer] = []
    start = 0
    for index in range(parts):
        rows = per_part + (1 if index < extra else 0)
        end = start
        for _ in range(rows):
            end = data.index(b"\n", end) + 1
        path = csv.path.with_suffix(f".part{index}of{parts}.csv")
        path.write_bytes(data[start:end])
        result.append(CsvBuffer(path, data[start:end] if in_memory else b"", rows, csv.columns))
        start = end
    if start != len(data):
        raise AssertionError(f"split left {len(data) - start} bytes over")
    return result


def load_concurrently(db: Database, table: str, parts: list[CsvBuffer]) -> dict[str, Any]:
    """Each part on its own connection, in its own thread, all at once: LOAD DATA LOCAL
    (MariaDB) or COPY ... (FORMAT csv) (PostgreSQL), one autocommit statement each.

    Threads suffice: the client only streams a file or a buffer (pymysql sends 16 KiB
    packets, psycopg 1 MiB writes), and both release the GIL while they wait on the socket.
    """
    from concurrent.futures import ThreadPoolExecutor

    def load(part: CsvBuffer) -> dict[str, Any]:
        if db.kind == "postgres":
            return copy_postgres(db, table, part)
        return load_data_mariadb(db, table, part)

    with ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="rawload") as pool:
        done = list(pool.map(load, parts))
    loaded = sum(int(d["loaded"]) for d in done)
    if loaded != sum(p.rows for p in parts):
        raise AssertionError(
            f"the streams loaded {loaded} rows, expected {sum(p.rows for p in parts)}"
        )
    return {"streams": len(parts), "loaded": loaded, "bytes": sum(int(d["bytes"]) for d in done)}
