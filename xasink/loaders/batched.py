"""The generic loader: a parameterised INSERT, sent in JDBC batches of `batch_size` rows.

Works with any JDBC driver. Each Arrow batch becomes one Java array per column (numpy
buffers copy in bulk), and xasink's ColumnBinder binds the rows inside Java: one crossing
per batch. Where the helper cannot be compiled (a JRE without javac), the same column values
are bound one by one from Python.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jpype
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ConfigurationError
from ..runtime.javahelpers import helper_class
from .base import LoadTarget


@dataclass(frozen=True)
class ColumnKind:
    """How one Arrow type travels to JDBC (codes match ColumnBinder's constants)."""

    code: int
    sql_type: str  # a java.sql.Types constant, for setNull
    values: Callable[[pa.Array], Any]  # Arrow → numpy array or list, nulls filled
    java_array: Callable[[Any], Any]  # values → one Java array
    setter: str  # the PreparedStatement method for one value (fallback path)
    #: For setObject: the java.sql.Types constant passed with the value (fallback path).
    bind_as: str | None = None


def _numbers(dtype: str) -> Callable[[pa.Array], np.ndarray]:
    return lambda a: np.ascontiguousarray(a.fill_null(0).to_numpy(zero_copy_only=False), dtype)


def _micros(array: pa.Array) -> np.ndarray:
    unit = pa.timestamp("us", array.type.tz)
    return _numbers("int64")(pc.cast(pc.cast(array, unit), pa.int64()))


#: PostgreSQL column types that take a VARCHAR parameter as it is. A string bound for any
#: other column (jsonb, integer[], enum, uuid: what xasink.spark.wire.to_wire produces) is sent
#: untyped (Types.OTHER), so the server parses it as the column's own type.
_PG_TEXT_TYPES = frozenset({"", "text", "varchar", "bpchar", "name"})


def _untyped_strings(target: LoadTarget, column_type: str) -> bool:
    return target.dialect == "postgres" and column_type not in _PG_TEXT_TYPES


def _kind(
    arrow_type: pa.DataType, name: str, untyped: bool = False, legacy_times: bool = False
) -> ColumnKind:
    long_array = lambda v: jpype.JArray(jpype.JLong)(v)  # noqa: E731
    strings = lambda v: jpype.JArray(jpype.JString)(v)  # noqa: E731
    if pa.types.is_boolean(arrow_type):
        return ColumnKind(
            2,
            "BOOLEAN",
            lambda a: np.ascontiguousarray(a.fill_null(False), dtype=bool),
            lambda v: jpype.JArray(jpype.JBoolean)(v),
            "setBoolean",
        )
    if pa.types.is_integer(arrow_type):
        return ColumnKind(0, "BIGINT", _numbers("int64"), long_array, "setLong")
    if pa.types.is_floating(arrow_type):
        return ColumnKind(
            1, "DOUBLE", _numbers("float64"), lambda v: jpype.JArray(jpype.JDouble)(v), "setDouble"
        )
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        if untyped:
            return ColumnKind(8, "OTHER", lambda a: a.to_pylist(), strings, "setObject", "OTHER")
        return ColumnKind(3, "VARCHAR", lambda a: a.to_pylist(), strings, "setString")
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return ColumnKind(
            4,
            "VARBINARY",
            lambda a: a.to_pylist(),
            lambda v: jpype.JArray(jpype.JArray(jpype.JByte))(v),
            "setBytes",
        )
    if pa.types.is_decimal(arrow_type):
        return ColumnKind(
            5, "DECIMAL", lambda a: pc.cast(a, pa.string()).to_pylist(), strings, "setBigDecimal"
        )
    if pa.types.is_date32(arrow_type):
        days = lambda a: _numbers("int64")(pc.cast(a, pa.int32()))  # noqa: E731
        if legacy_times:
            return ColumnKind(9, "DATE", days, long_array, "setDate")
        return ColumnKind(6, "DATE", days, long_array, "setObject")
    if pa.types.is_timestamp(arrow_type):
        if legacy_times:
            return ColumnKind(10, "TIMESTAMP", _micros, long_array, "setTimestamp")
        return ColumnKind(7, "TIMESTAMP", _micros, long_array, "setObject")
    raise ConfigurationError(
        f"Column {name!r} has type {arrow_type}, which the batched writer cannot store yet."
    )


class BatchedInsertLoader:
    path = "batched"

    def __init__(self, target: LoadTarget, schema: pa.Schema, batch_size: int) -> None:
        marks = ", ".join("?" for _ in target.columns)
        self._statement = target.conn.prepareStatement(
            f"INSERT INTO {target.table_sql} ({', '.join(target.quoted_columns)}) VALUES ({marks})"
        )
        self._names = list(target.columns)
        # java.time is JDBC 4.2's (PostgreSQL's and MariaDB's drivers take it, and keep dates
        # before 1582 proleptic); any other driver gets JDBC 4.0's java.sql.Date/Timestamp
        # (Apache Derby 10.14 refuses java.time).
        legacy_times = target.dialect == "generic"
        self._kinds = [
            _kind(schema.field(c).type, c, _untyped_strings(target, t), legacy_times)
            for c, t in zip(self._names, target.column_types, strict=True)
        ]
        types = jpype.JClass("java.sql.Types")
        self._sql_types = [int(getattr(types, k.sql_type)) for k in self._kinds]
        if legacy_times:  # any other driver: a NULL of the parameter's own type (a BLOB's)
            self._sql_types = _parameter_types(self._statement, self._sql_types)
        self._bind_as = [
            None if k.bind_as is None else int(getattr(types, k.bind_as)) for k in self._kinds
        ]
        self._binder = helper_class("ColumnBinder")
        self._batch_size = batch_size
        self._pending = 0

    def write(self, batch: pa.RecordBatch) -> None:
        arrays = [batch.column(name) for name in self._names]
        values = [kind.values(array) for kind, array in zip(self._kinds, arrays, strict=True)]
        nulls = [np.asarray(array.is_null()) if array.null_count else None for array in arrays]
        if self._binder is not None:
            self._pending = int(
                self._binder.addRows(
                    self._statement,
                    jpype.JArray(jpype.JObject)(
                        [k.java_array(v) for k, v in zip(self._kinds, values, strict=True)]
                    ),
                    jpype.JArray(jpype.JInt)([k.code for k in self._kinds]),
                    jpype.JArray(jpype.JInt)(self._sql_types),
                    jpype.JArray(jpype.JArray(jpype.JBoolean))(
                        [None if n is None else jpype.JArray(jpype.JBoolean)(n) for n in nulls]
                    ),
                    batch.num_rows,
                    self._batch_size,
                    self._pending,
                )
            )
            return
        self._write_value_by_value(batch.num_rows, values, nulls)

    def _write_value_by_value(self, rows: int, values: list[Any], nulls: list[Any]) -> None:
        java = _JavaValues()
        statement = self._statement
        plain = [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
        for row in range(rows):
            for index, kind in enumerate(self._kinds):
                if nulls[index] is not None and nulls[index][row]:
                    statement.setNull(index + 1, self._sql_types[index])
                else:
                    value = java.convert(kind.code, plain[index][row])
                    extra = () if self._bind_as[index] is None else (self._bind_as[index],)
                    getattr(statement, kind.setter)(index + 1, value, *extra)
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


def _parameter_types(statement: Any, guessed: list[int]) -> list[int]:
    """The java.sql.Types of each parameter as the driver describes it (ParameterMetaData),
    for setNull: Derby refuses a NULL typed VARBINARY for a BLOB column, or VARCHAR for a
    CLOB. `guessed` (the Arrow type's) where the driver cannot tell."""
    try:
        meta = statement.getParameterMetaData()
        return [int(meta.getParameterType(i + 1)) for i in range(len(guessed))]
    except Exception:  # an optional part of JDBC: keep the guess
        return guessed


class _JavaValues:
    """Per-value conversions for the fallback path (what ColumnBinder does in Java)."""

    def __init__(self) -> None:
        self._big_decimal = jpype.JClass("java.math.BigDecimal")
        self._local_date = jpype.JClass("java.time.LocalDate")
        self._local_date_time = jpype.JClass("java.time.LocalDateTime")
        self._utc = jpype.JClass("java.time.ZoneOffset").UTC
        self._bytes = jpype.JArray(jpype.JByte)
        self._sql_date = jpype.JClass("java.sql.Date")
        self._sql_timestamp = jpype.JClass("java.sql.Timestamp")

    def convert(self, code: int, value: Any) -> Any:
        if code == 4:
            return self._bytes(value)
        if code == 5:
            return self._big_decimal(value)
        if code == 6:
            return self._local_date.ofEpochDay(value)
        if code in (9, 10):
            sql_value = self.convert(code - 3, value)
            return (self._sql_date if code == 9 else self._sql_timestamp).valueOf(sql_value)
        if code == 7:
            # java.time is proleptic Gregorian like Spark and Arrow; java.sql.Timestamp is
            # not, and would shift dates before 1582 by days.
            seconds, micros = divmod(value, 1_000_000)
            return self._local_date_time.ofEpochSecond(seconds, micros * 1000, self._utc)
        return value
