"""Spark SQL types against database column types: what to create, what fits, what to send.

Three questions, answered from the mapping tables below (see docs/types.md):

- `column_ddl_type`: the column type CREATE TABLE uses for a Spark type;
- `compatibility_problem`: whether an existing column can hold a Spark type, checked before
  any branch opens so that a mismatch names its column and nothing is written;
- `to_wire`: array/map/struct columns turned into the text their column parses (JSON, or a
  PostgreSQL array literal), inside Spark's JVM, so the loaders only ever see flat columns.

Design: an array of primitives becomes a PostgreSQL array (`integer[]`, `text[]`, ...); an
array of arrays/maps/structs (possibly ragged), a map and a struct become `jsonb`. MySQL and
MariaDB store all three as JSON. Types without storage (void, intervals, variant, time,
geometry, ...) raise UnsupportedTypeError naming the column.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CharType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from ..errors import UnsupportedTypeError
from .columns import TableColumn

DATABASES = {"postgres": "PostgreSQL", "mysql": "MySQL/MariaDB", "generic": "the generic dialect"}

#: Column type for CREATE TABLE, per dialect and Spark type. MySQL text is utf8mb4 whatever
#: the table's default charset, with a binary collation so distinct strings stay distinct.
_UTF8 = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
PRIMITIVE_DDL: dict[str, dict[type[DataType], str]] = {
    "postgres": {
        ByteType: "smallint",
        ShortType: "smallint",
        IntegerType: "integer",
        LongType: "bigint",
        FloatType: "real",
        DoubleType: "double precision",
        StringType: "text",
        BinaryType: "bytea",
        BooleanType: "boolean",
        DateType: "date",
        TimestampType: "timestamptz",
        TimestampNTZType: "timestamp",
    },
    "mysql": {
        ByteType: "TINYINT",
        ShortType: "SMALLINT",
        IntegerType: "INT",
        LongType: "BIGINT",
        FloatType: "FLOAT",
        DoubleType: "DOUBLE",
        StringType: "LONGTEXT" + _UTF8,
        BinaryType: "LONGBLOB",
        BooleanType: "BOOLEAN",
        DateType: "DATE",
        TimestampType: "DATETIME(6)",
        TimestampNTZType: "DATETIME(6)",
    },
    "generic": {
        ByteType: "SMALLINT",
        ShortType: "SMALLINT",
        IntegerType: "INTEGER",
        LongType: "BIGINT",
        FloatType: "REAL",
        DoubleType: "DOUBLE PRECISION",
        StringType: "CLOB",
        BinaryType: "BLOB",
        BooleanType: "BOOLEAN",
        DateType: "DATE",
        TimestampType: "TIMESTAMP",
        TimestampNTZType: "TIMESTAMP",
    },
}
#: Key columns: MySQL cannot index TEXT/BLOB without a prefix length, so keys get 255.
KEY_DDL: dict[str, dict[type[DataType], str]] = {
    "mysql": {StringType: "VARCHAR(255)" + _UTF8, BinaryType: "VARBINARY(255)"},
    "generic": {StringType: "VARCHAR(255)", BinaryType: "VARBINARY(255)"},
}
SIZED_TEXT_DDL: dict[str, dict[type[DataType], str]] = {
    "postgres": {CharType: "char({n})", VarcharType: "varchar({n})"},
    "mysql": {CharType: "CHAR({n})" + _UTF8, VarcharType: "VARCHAR({n})" + _UTF8},
    "generic": {CharType: "CHAR({n})", VarcharType: "VARCHAR({n})"},
}
DECIMAL_DDL = {
    "postgres": "numeric({p},{s})",
    "mysql": "DECIMAL({p},{s})",
    "generic": "DECIMAL({p},{s})",
}
#: Where maps, structs and nested arrays go (generic: JSON text in a CLOB).
DOCUMENT_DDL = {"postgres": "jsonb", "mysql": "JSON", "generic": "CLOB"}
#: Significant digits a double holds exactly. MySQL's JSON type parses every number with a
#: fraction into a double, so a wider decimal nested in a document would silently lose digits
#: there (MariaDB's JSON is text and keeps them): such documents go to text instead.
DOUBLE_DIGITS = 15
MAX_DECIMAL_SCALE = {"mysql": 30}

#: Database type name (JDBC's for PostgreSQL, COLUMN_TYPE's first word for MySQL) → family.
PG_FAMILIES = {
    **dict.fromkeys(("int2", "int4", "int8", "smallserial", "serial", "bigserial"), "integer"),
    "numeric": "decimal",
    **dict.fromkeys(("float4", "float8"), "float"),
    "bool": "boolean",
    **dict.fromkeys(("text", "varchar", "bpchar", "char", "name", "citext"), "text"),
    **dict.fromkeys(("json", "jsonb"), "json"),
    "bytea": "binary",
    "date": "date",
    **dict.fromkeys(("timestamp", "timestamptz"), "timestamp"),
    "uuid": "uuid",
}
_MYSQL_FAMILIES = {
    **dict.fromkeys(
        ("tinyint", "smallint", "mediumint", "int", "integer", "bigint", "bool", "boolean"),
        "integer",
    ),
    **dict.fromkeys(("decimal", "numeric", "dec", "fixed"), "decimal"),
    **dict.fromkeys(("float", "double", "real"), "float"),
    **dict.fromkeys(
        ("char", "varchar", "tinytext", "text", "mediumtext", "longtext", "clob"), "text"
    ),
    "json": "json",
    **dict.fromkeys(("enum", "set"), "enum"),
    **dict.fromkeys(
        ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"), "binary"
    ),
    "date": "date",
    **dict.fromkeys(("datetime", "timestamp"), "timestamp"),
}
_FAMILIES = {"postgres": PG_FAMILIES, "mysql": _MYSQL_FAMILIES}

#: Spark category → the column families that take its values (the database converts).
ACCEPTS = {
    "integral": {"integer", "decimal", "float"},
    "boolean": {"boolean", "integer"},
    "decimal": {"decimal", "float"},  # and integer columns when the scale is 0
    "float": {"float", "decimal"},
    "string": {"text", "json", "uuid", "enum", "array", "unknown"},  # the server parses it
    "binary": {"binary"},
    "date": {"date", "timestamp"},
    "timestamp": {"timestamp"},
    "array": {"text", "json"},  # and PostgreSQL arrays of a compatible element type
    "document": {"text", "json"},
}
_CATEGORIES: dict[type[DataType], str] = {
    ByteType: "integral",
    ShortType: "integral",
    IntegerType: "integral",
    LongType: "integral",
    BooleanType: "boolean",
    DecimalType: "decimal",
    FloatType: "float",
    DoubleType: "float",
    StringType: "string",
    CharType: "string",
    VarcharType: "string",
    BinaryType: "binary",
    DateType: "date",
    TimestampType: "timestamp",
    TimestampNTZType: "timestamp",
    ArrayType: "array",
    MapType: "document",
    StructType: "document",
}

#: How Spark writes JSON: instants in UTC with microseconds and offset, nulls kept.
JSON_OPTIONS = {
    "timeZone": "UTC",
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "dateFormat": "yyyy-MM-dd",
    "ignoreNullFields": "false",
}


# -- CREATE TABLE ------------------------------------------------------------------------
def column_ddl_type(dialect_name: str, column: str, data_type: DataType, *, key: bool) -> str:
    """SQL type for CREATE TABLE of `column` in dialect "postgres" | "mysql" | "generic".

    `key=True` when the column becomes part of the primary key (MySQL cannot index TEXT/BLOB
    without a length: string and binary keys become VARCHAR(255)/VARBINARY(255) there).
    Raises UnsupportedTypeError naming the column and the type."""
    kind = type(data_type)
    if key and kind in KEY_DDL.get(dialect_name, {}):
        return KEY_DDL[dialect_name][kind]
    if kind in PRIMITIVE_DDL[dialect_name]:
        return PRIMITIVE_DDL[dialect_name][kind]
    if isinstance(data_type, (CharType, VarcharType)):
        return SIZED_TEXT_DDL[dialect_name][kind].format(n=data_type.length)
    if isinstance(data_type, DecimalType):
        return _decimal_ddl(dialect_name, column, data_type)
    if isinstance(data_type, ArrayType) and dialect_name == "postgres":
        element = PRIMITIVE_DDL["postgres"].get(type(data_type.elementType))
        if element is not None or isinstance(data_type.elementType, DecimalType):
            return f"{column_ddl_type(dialect_name, column, data_type.elementType, key=False)}[]"
    if isinstance(data_type, (ArrayType, MapType, StructType)):
        if key and dialect_name != "postgres":
            raise _unsupported(
                dialect_name, column, data_type, "it becomes JSON, which cannot be a key"
            )
        _check_storable(dialect_name, column, data_type)
        if dialect_name == "mysql" and wide_decimal_inside(data_type):
            return PRIMITIVE_DDL["mysql"][StringType]
        return DOCUMENT_DDL[dialect_name]
    raise _unsupported(dialect_name, column, data_type, _no_storage_hint(data_type))


def _decimal_ddl(dialect_name: str, column: str, data_type: DecimalType) -> str:
    limit = MAX_DECIMAL_SCALE.get(dialect_name)
    if limit is not None and data_type.scale > limit:
        raise _unsupported(
            dialect_name,
            column,
            data_type,
            f"its DECIMAL allows a scale of at most {limit}; round it first, e.g. "
            f"col.cast('decimal({min(data_type.precision, 65)},{limit})')",
        )
    return DECIMAL_DDL[dialect_name].format(p=data_type.precision, s=data_type.scale)


def _check_storable(dialect_name: str, column: str, data_type: DataType) -> None:
    if not _storable(data_type):
        raise _unsupported(
            dialect_name, column, data_type, "a type nested inside it has no storage"
        )


def _storable(data_type: DataType) -> bool:
    """Every type nested inside an array/map/struct must itself have a JSON form."""
    return all(type(t) in _CATEGORIES and _storable(t) for t in children(data_type))


def wide_decimal_inside(data_type: DataType) -> bool:
    """Whether a decimal wider than a double's digits is nested anywhere in `data_type`."""
    return any(
        (isinstance(t, DecimalType) and t.precision > DOUBLE_DIGITS) or wide_decimal_inside(t)
        for t in children(data_type)
    )


def children(data_type: DataType) -> list[DataType]:
    if isinstance(data_type, ArrayType):
        return [data_type.elementType]
    if isinstance(data_type, MapType):
        return [data_type.keyType, data_type.valueType]
    if isinstance(data_type, StructType):
        return [f.dataType for f in data_type.fields]
    return []


def _no_storage_hint(data_type: DataType) -> str:
    name = type(data_type).__name__
    if name == "NullType":
        return "a column of only NULLs has no type; cast it, e.g. F.lit(None).cast('string')"
    if name == "VariantType":
        return "store it as JSON text with F.to_json(col)"
    if "Interval" in name:
        return "cast it to a string, or to a number of seconds/months"
    return "cast it to a supported type (see docs/types.md) or drop the column"


def _unsupported(
    dialect_name: str, column: str, data_type: DataType, reason: str
) -> UnsupportedTypeError:
    return UnsupportedTypeError(
        f"Column {column!r} has Spark type {data_type.simpleString()}, which xasink cannot "
        f"store in {DATABASES[dialect_name]}: {reason}. Nothing was written."
    )


# -- existing tables ---------------------------------------------------------------------
def compatibility_problem(
    dialect_name: str, data_type: DataType, column: TableColumn
) -> str | None:
    """None when Spark values of `data_type` can be stored in the existing `column`, else a
    short reason ("a string cannot be stored in column 'n' of type integer").

    Permissive within a family (the database converts, and range errors fail the branch);
    an unknown database type takes only strings."""
    family, element = family_of(dialect_name, column)
    shown = column.sql_type or column.type_name or "unknown"
    if dialect_name == "mysql" and family == "json" and wide_decimal_inside(data_type):
        return (
            f"{_article(data_type)} cannot be stored in column {column.name!r} of type {shown} "
            f"without losing digits: MySQL keeps JSON numbers as doubles ({DOUBLE_DIGITS} "
            "digits); make the column LONGTEXT, or cast the decimals to strings"
        )
    if _accepts(dialect_name, data_type, family, element):
        return None
    reason = f"{_article(data_type)} cannot be stored in column {column.name!r} of type {shown}"
    if family == "array":
        reason += " (arrays of arrays, maps or structs need a json/jsonb column)"
    return reason


def family_of(dialect_name: str, column: TableColumn) -> tuple[str, str | None]:
    """(family, PostgreSQL array element type name or None)."""
    name = column.type_name
    if dialect_name == "postgres" and name.startswith("_"):
        return "array", name[1:]
    if dialect_name == "mysql":
        name = column.sql_type or name
    base = name.split("(")[0].split()[0] if name.strip() else ""
    families = _FAMILIES.get(dialect_name) or {**_MYSQL_FAMILIES, **PG_FAMILIES}
    return families.get(base, "unknown"), None


def _accepts(dialect_name: str, data_type: DataType, family: str, element: str | None) -> bool:
    category = _CATEGORIES.get(type(data_type))
    if category is None:
        return False
    if category in ("array", "document") and not _storable(data_type):
        return False
    if family in ACCEPTS[category]:
        return True
    if isinstance(data_type, DecimalType) and family == "integer":
        return data_type.scale == 0
    if isinstance(data_type, ArrayType) and family == "array" and element is not None:
        inner = data_type.elementType
        if _CATEGORIES.get(type(inner)) in (None, "array", "document"):
            return False
        probe = TableColumn("", element, element, True, False)
        return _accepts(dialect_name, inner, *family_of(dialect_name, probe))
    return False


def _article(data_type: DataType) -> str:
    text = data_type.simpleString()
    return f"{'an' if text[0] in 'aeiou' else 'a'} {text}"


# -- values on the wire ------------------------------------------------------------------


def needs_spark_conversion(data_type: DataType, dialect_name: str, column: TableColumn) -> bool:
    """Whether the column must be converted by Spark expressions (xasink.spark.wire) before a
    loader can send it: only those can reshape arrays, maps, structs and booleans."""
    if isinstance(data_type, (ArrayType, MapType, StructType)):
        return True
    return isinstance(data_type, BooleanType) and family_of(dialect_name, column)[0] in (
        "integer",
        "decimal",
        "float",
    )
