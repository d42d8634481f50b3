"""Vectorised Arrow → CSV encoding for the bulk loaders (pyarrow's C++ writer, no Python loop).

Strings are always quoted, so an unquoted field is never a string: that is what lets both
PostgreSQL (empty unquoted = NULL) and MySQL (`NULL` unquoted = NULL) tell NULL from ''.
Timestamps are written as naive UTC wall time; the loaders' sessions run in UTC.
"""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..errors import ConfigurationError

Prepare = Callable[[pa.Array], pa.Array]


def _naive_utc(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.timestamp(array.type.unit))


def _bool_as_int(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.int8())


class CsvEncoder:
    """Encodes record batches as CSV bytes for one target column order."""

    def __init__(
        self, schema: pa.Schema, columns: list[str], null_string: str, booleans_as_int: bool
    ) -> None:
        self._columns = columns
        self._prepare: dict[str, Prepare] = {}
        for name in columns:
            kind = schema.field(name).type
            if pa.types.is_timestamp(kind) and kind.tz is not None:
                self._prepare[name] = _naive_utc
            elif pa.types.is_boolean(kind) and booleans_as_int:
                self._prepare[name] = _bool_as_int
            elif not encodable(kind):
                raise ConfigurationError(f"Column {name!r} of type {kind} has no CSV encoding.")
        self._options = pacsv.WriteOptions(
            include_header=False, quoting_style="needed", null_string=null_string
        )

    def encode(self, batch: pa.RecordBatch) -> bytes:
        arrays = []
        for name in self._columns:
            array = batch.column(name)
            prepare = self._prepare.get(name)
            arrays.append(prepare(array) if prepare else array)
        sink = pa.BufferOutputStream()
        pacsv.write_csv(
            pa.RecordBatch.from_arrays(arrays, names=self._columns), sink, self._options
        )
        return sink.getvalue().to_pybytes()


def encodable(kind: pa.DataType) -> bool:
    """Types whose pyarrow CSV text both databases parse back exactly."""
    return (
        pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_timestamp(kind)
    )
