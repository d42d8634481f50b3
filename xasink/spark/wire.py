"""The shape each column takes on the wire: Spark expressions that turn arrays, maps,
structs and booleans into what the table's column accepts (JSON text, PostgreSQL array
literals, integers), before any loader sees the rows. Which columns need it is decided in
xasink.tables.types."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    CharType,
    DataType,
    MapType,
    StringType,
    StructType,
    VarcharType,
)

from ..tables.columns import TableColumn
from ..tables.types import JSON_OPTIONS, PG_FAMILIES, children, family_of, needs_spark_conversion


def to_wire(
    sources: Sequence[Column],
    data_types: Sequence[DataType],
    dialect_name: str,
    columns: Sequence[TableColumn],
) -> list[Column]:
    """Each source column (of type `data_types[i]`) as the value its target column
    `columns[i]` takes: array/map/struct columns become, inside Spark (JVM expressions, no
    Python UDF), the text that column parses: a PostgreSQL array literal for a PostgreSQL
    array column, JSON text otherwise. A boolean bound for a numeric column becomes 0/1.
    Other columns, and sources beyond `len(columns)` (steering columns), pass unchanged.
    JSON keeps timestamps' microseconds (instants in UTC with offset), writes binary as
    base64 and NaN/±Infinity as strings; map keys become JSON object keys, i.e. strings (a
    non-string key as its JSON text)."""
    if len(columns) > len(sources):
        raise ValueError(f"to_wire: {len(columns)} target columns for {len(sources)} columns")
    converted = [
        _wire_column(source, data_type, dialect_name, column)
        for source, data_type, column in zip(sources, data_types, columns, strict=False)
    ]
    return [*converted, *sources[len(columns) :]]


def _wire_column(
    col: Column, data_type: DataType, dialect_name: str, column: TableColumn
) -> Column:
    if not needs_spark_conversion(data_type, dialect_name, column):
        return col
    if isinstance(data_type, BooleanType):
        return col.cast("int")
    family, element = family_of(dialect_name, column)
    if family == "array" and isinstance(data_type, ArrayType):
        return _pg_array_literal(col, data_type.elementType, element or "")
    return _json_text(col, data_type)


def _json_text(col: Column, data_type: DataType) -> Column:
    return F.to_json(_string_keys(col, data_type), JSON_OPTIONS)


def _string_keys(col: Column, data_type: DataType) -> Column:
    """Rewrite maps with non-string keys (at any depth) to string keys, so that to_json
    writes a key's text rather than Spark's internal form (a date's day number)."""
    if not _has_odd_keys(data_type):
        return col
    if isinstance(data_type, ArrayType):
        return F.transform(col, lambda x: _string_keys(x, data_type.elementType))
    if isinstance(data_type, StructType):
        rebuilt = F.struct(
            *[_string_keys(col[f.name], f.dataType).alias(f.name) for f in data_type.fields]
        )
        return F.when(col.isNull(), F.lit(None)).otherwise(rebuilt)
    assert isinstance(data_type, MapType)
    values = F.transform_values(col, lambda _, v: _string_keys(v, data_type.valueType))
    if isinstance(data_type.keyType, (StringType, CharType, VarcharType)):
        return values
    return F.transform_keys(values, lambda k, _: _key_text(k))


def _key_text(key: Column) -> Column:
    """A key's JSON text, unquoted when it is a JSON string ("2024-01-01", base64)."""
    text = F.regexp_extract(F.to_json(F.array(key), JSON_OPTIONS), r"(?s)^\[(.*)\]$", 1)
    unquoted = F.regexp_extract(text, r'(?s)^"(.*)"$', 1)
    return F.when(text.startswith('"'), unquoted).otherwise(text)


def _has_odd_keys(data_type: DataType) -> bool:
    if isinstance(data_type, MapType) and not isinstance(
        data_type.keyType, (StringType, CharType, VarcharType)
    ):
        return True
    return any(_has_odd_keys(t) for t in children(data_type))


def _pg_array_literal(col: Column, element: DataType, pg_element: str) -> Column:
    """'{1,2,NULL}': strings double-quoted with \\ and " escaped, bytea as "\\\\x<hex>",
    everything else through Spark's JSON writer (which already quotes dates, instants in
    UTC with offset, and NaN/Infinity), its brackets swapped for braces."""
    if isinstance(element, (StringType, CharType, VarcharType)):
        quoted = F.transform(
            col,
            lambda x: F.concat(
                F.lit('"'),
                F.replace(F.replace(x, F.lit("\\"), F.lit("\\\\")), F.lit('"'), F.lit('\\"')),
                F.lit('"'),
            ),
        )
        return _braced(F.array_join(quoted, ",", "NULL"))
    if isinstance(element, BinaryType):
        hexed = F.transform(col, lambda x: F.concat(F.lit('"\\\\x'), F.hex(x), F.lit('"')))
        return _braced(F.array_join(hexed, ",", "NULL"))
    if isinstance(element, BooleanType) and PG_FAMILIES.get(pg_element) != "boolean":
        col = col.cast("array<int>")
    return _braced(F.regexp_extract(F.to_json(col, JSON_OPTIONS), r"(?s)^\[(.*)\]$", 1))


def _braced(body: Column) -> Column:
    """'{' body '}'; NULL stays NULL (concat propagates it)."""
    return F.concat(F.lit("{"), body, F.lit("}"))
