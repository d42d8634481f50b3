"""Vectorised Arrow → CSV encoding for the bulk loaders (pyarrow's C++ writer, no Python loop).

Strings are always quoted, so an unquoted field is never a string: that is what lets both
PostgreSQL (empty unquoted = NULL) and MySQL (`NULL` unquoted = NULL) tell NULL from ''.
Timestamps are written as naive UTC wall time; the loaders' sessions run in UTC.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from ..errors import ConfigurationError

Prepare = Callable[[pa.Array], pa.Array]


def _writes_null_string() -> bool:
    try:
        pacsv.WriteOptions(null_string="NULL")
    except TypeError:
        return False
    return True


#: pyarrow writes a chosen text for NULL from 26 on (the newest for Python 3.10 is 25); before,
#: a NULL is an empty field, which PostgreSQL's CSV reads as NULL but MySQL's LOAD DATA as ''
#: or 0, so MySQL and MariaDB rows then go through batched INSERTs.
NULL_STRING_WRITABLE = _writes_null_string()


def _naive_utc(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.timestamp(array.type.unit))


def _bool_as_int(array: pa.Array) -> pa.Array:
    return pc.cast(array, pa.int8())


def _float_as_double(array: pa.Array) -> pa.Array:
    """MySQL parses FLOAT input as a double: float32's shortest text of its largest value
    (3.4028235e+38) is out of FLOAT's range, the exact double text is not."""
    return pc.cast(array, pa.float64())


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)
_HEX_PREFIX = pa.scalar(b"\\x", pa.binary())


def _bytea_hex(array: pa.Array) -> pa.Array:
    """PostgreSQL's bytea text form (\\x<hex>) for a whole column: numpy, no per-row Python."""
    data = array.cast(pa.binary())
    offsets = np.frombuffer(data.buffers()[1], np.int32, len(data) + 1, data.offset * 4)
    raw = data.buffers()[2]
    values = np.frombuffer(raw if raw is not None else b"", np.uint8)[offsets[0] : offsets[-1]]
    digits = np.empty(len(values) * 2, np.uint8)
    digits[0::2], digits[1::2] = _HEX_DIGITS[values >> 4], _HEX_DIGITS[values & 15]
    spans = pa.py_buffer(((offsets - offsets[0]) * 2).astype(np.int32))
    hexed = pa.Array.from_buffers(pa.binary(), len(data), [None, spans, pa.py_buffer(digits)])
    text = pc.binary_join_element_wise(_HEX_PREFIX, hexed, pa.scalar(b"", pa.binary()))
    return pc.if_else(data.is_valid(), text, None).cast(pa.string())


class CsvEncoder:
    """Encodes record batches as CSV bytes for one target column order."""

    def __init__(
        self,
        schema: pa.Schema,
        columns: list[str],
        null_string: str,
        booleans_as_int: bool,
        binary_as_hex: bool = False,
        floats_as_double: bool = False,
    ) -> None:
        self._columns = columns
        self._prepare: dict[str, Prepare] = {}
        for name in columns:
            kind = schema.field(name).type
            if pa.types.is_timestamp(kind) and kind.tz is not None:
                self._prepare[name] = _naive_utc
            elif pa.types.is_boolean(kind) and booleans_as_int:
                self._prepare[name] = _bool_as_int
            elif floats_as_double and kind == pa.float32():
                self._prepare[name] = _float_as_double
            elif binary_as_hex and _is_binary(kind):
                self._prepare[name] = _bytea_hex
            elif not encodable(kind):
                raise ConfigurationError(f"Column {name!r} of type {kind} has no CSV encoding.")
        if null_string and not NULL_STRING_WRITABLE:
            raise ConfigurationError(
                f"pyarrow {pa.__version__} cannot write NULL as {null_string!r} (pyarrow 26 "
                "can): upgrade pyarrow, or write with WriterProperties(bulk=False)."
            )
        # pyarrow's own default is "": given only when another, for pyarrow < 26.
        nulls = {"null_string": null_string} if null_string else {}
        self._options = pacsv.WriteOptions(include_header=False, quoting_style="needed", **nulls)

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
        data: bytes = sink.getvalue().to_pybytes()
        return data


def _is_binary(kind: pa.DataType) -> bool:
    binary: bool = pa.types.is_binary(kind) or pa.types.is_large_binary(kind)
    return binary


def encodable(kind: pa.DataType, binary_as_hex: bool = False) -> bool:
    """Types whose CSV text the database parses back exactly (binary: PostgreSQL only)."""
    return (
        (binary_as_hex and _is_binary(kind))
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_decimal(kind)
        or pa.types.is_date32(kind)
        or pa.types.is_timestamp(kind)
    )
