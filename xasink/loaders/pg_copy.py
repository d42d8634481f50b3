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

from .._testing import statements
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
    isolation level. Both go in one round trip (`_types_under_lock`)."""
    now = _types_under_lock(target)
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


#: The lock, then the read: two statements in one string, which pgjdbc sends as one round
#: trip (each statement parsed, bound and run in turn before one Sync, so the backend
#: plans the read only once the lock is granted). A failed lock skips the read and raises.
_LOCK_THEN_TYPES = (
    "LOCK TABLE {table} IN ACCESS SHARE MODE; "
    "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "WHERE a.attrelid = to_regclass(?) AND a.attnum > 0 AND NOT a.attisdropped"
)


def _types_under_lock(target: LoadTarget) -> dict[str, str]:
    """The type name of each of the table's columns, read under its ACCESS SHARE lock in
    one round trip: this runs for every branch and every small write, whose own time two
    round trips were a measurable share of."""
    sql = _LOCK_THEN_TYPES.format(table=target.table_sql)
    statements.seen(sql, (target.table_sql,))
    statement = target.conn.prepareStatement(sql)
    try:
        statement.setString(1, target.table_sql)
        found = bool(statement.execute())  # False: the LOCK's own result comes first
        while not found and int(statement.getUpdateCount()) != -1:
            found = bool(statement.getMoreResults())
        if not found:  # not pgjdbc's way: no result is no proof of unchanged types
            raise RuntimeError(f"reading the column types of {target.table_sql} gave no rows")
        results = statement.getResultSet()
        types: dict[str, str] = {}
        while results.next():
            types[str(results.getString(1))] = str(results.getString(2))
        return types
    finally:
        statement.close()
