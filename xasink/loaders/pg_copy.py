"""PostgreSQL bulk path: one `COPY ... FROM STDIN` per branch, fed per batch.

Binary format when every column maps exactly onto its table type (see pg_binary), CSV
otherwise. pgjdbc's CopyManager runs on the branch's own connection, so the rows are part
of the XA branch. Each Arrow batch is encoded in Python by vectorised code and handed to
Java as one byte[]: one crossing per batch, and the server parses while Python encodes the
next batch.

Binary COPY carries no types: the server checks only each value's length, so bytes encoded
for a bigint load into a double precision column as a different number, silently. The
column types the encoder was built for come from a description read before the job (and
maybe cached), which a migration can change at any time. So the branch takes a lock on the
table, held until the branch ends, which no ALTER of a column's type can pass, and reads the
types again; if they changed, the rows go as CSV instead, which the server types.
"""

from __future__ import annotations

import logging

import pyarrow as pa

from ..runtime.jdbc import execute, query
from ..runtime.jvm import jclass
from .base import LoadTarget
from .csv_encoding import CsvEncoder, encodable
from .pg_binary import HEADER, TRAILER, PgBinaryEncoder

log = logging.getLogger("xasink")


class PostgresCopyLoader:
    @staticmethod
    def supports(schema: pa.Schema, target: LoadTarget) -> bool:
        return PgBinaryEncoder.create(schema, target.columns, target.column_types) is not None or (
            all(encodable(schema.field(c).type, binary_as_hex=True) for c in target.columns)
        )

    def __init__(self, target: LoadTarget, schema: pa.Schema) -> None:
        binary = PgBinaryEncoder.create(schema, target.columns, target.column_types)
        if binary is not None and _changed_types(target):
            binary = None
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


def _changed_types(target: LoadTarget) -> list[str]:
    """The load columns whose type is no longer the one the encoder was built for, read in
    the branch after taking the ACCESS SHARE lock that COPY would take anyway (held until
    the branch ends: no ALTER TABLE passes it). The lock is its own statement, which takes
    no snapshot, so the read sees every change committed before it was granted, under any
    isolation level."""
    execute(target.conn, f"LOCK TABLE {target.table_sql} IN ACCESS SHARE MODE")
    rows = query(
        target.conn,
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped",
        (target.table_sql,),
    )
    now = {str(name): str(type_name) for name, type_name in rows}
    changed = [
        f"{column} ({planned} -> {now.get(column, 'dropped')})"
        for column, planned in zip(target.columns, target.column_types, strict=True)
        if now.get(column) != planned
    ]
    if changed:
        log.warning(
            "xasink: %s changed since the job described it: %s; loading as CSV, which the "
            "server types",
            target.table_sql,
            ", ".join(changed),
        )
    return changed
