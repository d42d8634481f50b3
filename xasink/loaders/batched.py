"""The generic loader: a parameterised INSERT, sent in JDBC batches.

Works with any JDBC driver, at the cost of one Java call per value. The dialects' bulk
loaders are preferred where they exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jpype
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError

Setter = Callable[[Any, int, Any], None]
Column = tuple[Callable[[pa.Array], list[Any]], Setter, int]


def _java() -> dict[str, Any]:
    return {
        "Types": jpype.JClass("java.sql.Types"),
        "LocalDateTime": jpype.JClass("java.time.LocalDateTime"),
        "UTC": jpype.JClass("java.time.ZoneOffset").UTC,
        "LocalDate": jpype.JClass("java.time.LocalDate"),
        "BigDecimal": jpype.JClass("java.math.BigDecimal"),
    }


def _timestamp_setter(local_date_time: Any, utc: Any) -> Setter:
    # java.time is proleptic Gregorian like Spark and Arrow; java.sql.Timestamp is not, and
    # would shift dates before 1582 by days.
    def set_timestamp(statement: Any, index: int, micros: int) -> None:
        seconds, micro = divmod(micros, 1_000_000)
        statement.setObject(index, local_date_time.ofEpochSecond(seconds, micro * 1000, utc))

    return set_timestamp


def column_binding(arrow_type: pa.DataType, name: str) -> Column:
    """How to turn one Arrow column into JDBC parameter values (values, setter, null type)."""
    java = _java()
    types = java["Types"]
    as_list: Callable[[pa.Array], list[Any]] = lambda array: array.to_pylist()  # noqa: E731
    if pa.types.is_boolean(arrow_type):
        return as_list, lambda s, i, v: s.setBoolean(i, v), types.BOOLEAN
    if pa.types.is_integer(arrow_type):
        return as_list, lambda s, i, v: s.setLong(i, v), types.BIGINT
    if pa.types.is_floating(arrow_type):
        return as_list, lambda s, i, v: s.setDouble(i, v), types.DOUBLE
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return as_list, lambda s, i, v: s.setString(i, v), types.VARCHAR
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        byte_array = jpype.JArray(jpype.JByte)
        return as_list, lambda s, i, v: s.setBytes(i, byte_array(v)), types.VARBINARY
    if pa.types.is_decimal(arrow_type):
        big_decimal = java["BigDecimal"]
        return as_list, lambda s, i, v: s.setBigDecimal(i, big_decimal(str(v))), types.DECIMAL
    if pa.types.is_date32(arrow_type):
        local_date = java["LocalDate"]
        days = lambda array: array.cast(pa.int32()).to_pylist()  # noqa: E731
        return days, lambda s, i, v: s.setObject(i, local_date.ofEpochDay(v)), types.DATE
    if pa.types.is_timestamp(arrow_type):

        def micros(array: pa.Array) -> list[Any]:
            return pc.cast(array, pa.timestamp("us", arrow_type.tz)).cast(pa.int64()).to_pylist()

        return micros, _timestamp_setter(java["LocalDateTime"], java["UTC"]), types.TIMESTAMP
    raise ConfigurationError(
        f"Column {name!r} has type {arrow_type}, which the batched writer cannot store yet."
    )


class BatchedInsertLoader:
    """Parameterised INSERT, sent in JDBC batches of `batch_size` rows."""

    path = "batched"

    def __init__(
        self, conn: Any, insert_sql: str, schema: pa.Schema, columns: Sequence[str], batch_size: int
    ) -> None:
        self._statement = conn.prepareStatement(insert_sql)
        self._columns = [column_binding(schema.field(c).type, c) for c in columns]
        self._names = list(columns)
        self._batch_size = batch_size
        self._pending = 0

    def write(self, batch: pa.RecordBatch) -> None:
        statement = self._statement
        values = [
            prepare(batch.column(name))
            for name, (prepare, _, _) in zip(self._names, self._columns, strict=True)
        ]
        setters = [
            (index, setter, null_type, values[index - 1])
            for index, (_, setter, null_type) in enumerate(self._columns, start=1)
        ]
        for row in range(batch.num_rows):
            for index, setter, null_type, column in setters:
                value = column[row]
                if value is None:
                    statement.setNull(index, null_type)
                else:
                    setter(statement, index, value)
            statement.addBatch()
            self._pending += 1
            if self._pending >= self._batch_size:
                statement.executeBatch()
                self._pending = 0

    def finish(self) -> None:
        try:
            if self._pending:
                self._statement.executeBatch()
                self._pending = 0
        finally:
            self._statement.close()

    def abort(self) -> None:
        self._statement.close()
