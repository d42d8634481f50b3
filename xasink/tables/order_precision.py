"""Whether the table's `order` column holds the DataFrame's order values exactly.

Where the table stores the `order` column, a change applies only over a stored row whose
order is lower, and both sides of that comparison are values as the column holds them (the
staging table has the target's types). A column coarser than the data makes two different
orders one: the newer change then looks like a replay and is skipped as stale, silently.
So such a column is refused before anything is written, with the type that would hold the
values. What the servers do, tried on each: PostgreSQL rounds timestamp(p) and numeric(p,s),
MySQL rounds DATETIME(p)/TIMESTAMP(p), MariaDB truncates them, and all of them round a
FLOAT/real or DOUBLE to its significand and a decimal to its scale. A value out of a column's
range (a long in an INT, too many integer digits, a string too long) fails the write there
instead (strict mode, the default; LOAD DATA's warnings fail the branch), so it is left to
the column check.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ByteType,
    CharType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
)

from ..dialects import Dialect
from ..runtime.jdbc import JdbcConnection
from ..spec import TableRef
from .columns import TableColumn
from .retyping import normal_type, type_parts
from .types import DECIMAL_DDL, column_ddl_type, family_of

#: Digits of a second in a Spark timestamp (microseconds).
SPARK_FRACTION = 6
#: A timestamp column's digits of a second when its type gives none.
_DEFAULT_FRACTION = {"postgres": 6, "mysql": 0}
#: Bits of a binary float's significand: it holds every integer up to 2**bits.
#: (PostgreSQL by its JDBC name, MySQL by COLUMN_TYPE, which spells REAL and FLOAT(25..53)
#: as double.)
_SIGNIFICAND = {"float4": 24, "float": 24, "float8": 53, "double": 53}
#: Significant decimal digits every value of which a float keeps apart (FLT_DIG, DBL_DIG).
_DECIMAL_DIGITS = {24: 6, 53: 15}
_INTEGER_BITS: dict[type[DataType], int] = {
    ByteType: 8,
    ShortType: 16,
    IntegerType: 32,
    LongType: 64,
}
_FLOAT_BITS: dict[type[DataType], int] = {FloatType: 24, DoubleType: 53}
_FLOATS = (FloatType, DoubleType)
#: The most digits of a Spark decimal.
_SPARK_DIGITS = 38
#: String types that take different values for one, by the JDBC name of their type.
_PADDED = {
    ("postgres", "bpchar"): "pads its values with spaces and ignores trailing ones when it "
    "compares (character(n))",
    ("postgres", "citext"): "compares strings without their case (citext)",
}
#: The string columns that keep every order apart.
_STRING_HOLDS = {
    "postgres": "text or varchar, with a deterministic collation (the database's default, "
    '"C", or an ICU one not declared nondeterministic)',
    "mysql": "VARCHAR (or a TEXT type) with a binary collation: COLLATE utf8mb4_bin, or to "
    "also keep apart values that differ only in trailing spaces, utf8mb4_0900_bin on MySQL "
    "or utf8mb4_nopad_bin on MariaDB",
}
#: The most digits a decimal column may have.
_MAX_DIGITS = {"postgres": 1000, "mysql": 65}


def order_refusal(
    dialect_name: str, table: str, data_type: DataType, column: TableColumn
) -> str | None:
    """None when `column` holds every value of `data_type` exactly (or the dialect cannot
    tell), else the SchemaMismatchError message: the column, why, the type to use, and
    where one exists, the cast of the DataFrame's column that the column holds."""
    if dialect_name not in _DEFAULT_FRACTION:
        return None
    found = coarser(dialect_name, data_type, column)
    if found is None:
        return None
    why, holds = found
    return _refusal(table, column, why, holds, frame_cast(dialect_name, data_type, column))


def string_refusal(
    conn: JdbcConnection,
    dialect: Dialect,
    table: TableRef,
    data_type: DataType,
    column: TableColumn,
) -> str | None:
    """None when `column`, a string order column, never takes two different strings for
    one order, else the SchemaMismatchError message. Within a write and across writes the
    orders compare as the column does (`ApplyPlan.rank_column`): by its collation, which
    may take different strings for equal (case, accents: MySQL's and MariaDB's defaults,
    a nondeterministic PostgreSQL collation), and character(n) ignores trailing spaces."""
    if not isinstance(data_type, (StringType, VarcharType, CharType)):
        return None
    if family_of(dialect.name, column)[0] != "text" or dialect.name not in _STRING_HOLDS:
        return None
    why = _PADDED.get((dialect.name, column.type_name)) or dialect.collation_problem(
        conn, table, column.name, column.sql_type
    )
    return None if why is None else _refusal(str(table), column, why, _STRING_HOLDS[dialect.name])


def _refusal(table: str, column: TableColumn, why: str, holds: str, cast: str | None = None) -> str:
    casting = (
        f' Or cast the DataFrame\'s order column to {cast} (`.cast("{cast}")`), if its '
        "values have no more decimal places than that."
        if cast
        else ""
    )
    return (
        f"The order column {column.name!r} of table {table} has type "
        f"{column.sql_type or column.type_name}, which {why}. A change applies only over a "
        "stored row of lower order, so a newer change whose order this column holds as equal "
        "to the stored row's would be taken for a replay and skipped as stale. Make it "
        f"{holds}, or "
        f"order by a column that holds the values exactly.{casting} Nothing was written."
    )


def frame_cast(dialect_name: str, data_type: DataType, column: TableColumn) -> str | None:
    """The Spark type a decimal column of a smaller scale holds (itself), for a DataFrame
    of decimals or floating-point values: cast to it, values of no more decimal places
    pass unchanged. None where no cast would do (an integer in a float: the column must
    change) or Spark has no such type."""
    family, _ = family_of(dialect_name, column)
    _, args, _ = type_parts(normal_type(dialect_name, column.sql_type or column.type_name))
    if family != "decimal" or not args or not isinstance(data_type, (DecimalType, *_FLOATS)):
        return None
    precision, scale = [*args, 0][:2]
    return f"decimal({precision},{scale})" if precision <= _SPARK_DIGITS else None


def coarser(dialect_name: str, data_type: DataType, column: TableColumn) -> tuple[str, str] | None:
    """(why `column` loses order values of `data_type`, the type that keeps them), or None
    when it keeps every one (a value out of range fails the write instead)."""
    family, _ = family_of(dialect_name, column)
    base, args, rest = type_parts(normal_type(dialect_name, column.sql_type or column.type_name))
    if dialect_name == "postgres":
        base = column.type_name  # float4, numeric, timestamptz: format_type spells them long
    if isinstance(data_type, (TimestampType, TimestampNTZType)) and family == "timestamp":
        return _timestamp(dialect_name, base, args, rest)
    kind = type(data_type)
    if family == "float":
        bits, decimals = _SIGNIFICAND.get(base, 24), args[1:2]
        return _in_float(dialect_name, data_type, bits, decimals)
    if family == "decimal" and kind in _FLOAT_BITS:
        scale = f"{[*args, 0][1]} decimal places" if args else "a fixed number of digits"
        return f"rounds a floating-point value to {scale}", _ddl(dialect_name, data_type)
    if family == "decimal" and isinstance(data_type, DecimalType) and args:
        return _in_decimal(dialect_name, data_type, args)
    return None


def _timestamp(dialect_name: str, base: str, args: list[int], rest: str) -> tuple[str, str] | None:
    digits = args[0] if args else _DEFAULT_FRACTION[dialect_name]
    if digits >= SPARK_FRACTION:
        return None
    kept = "whole seconds" if digits == 0 else f"{digits} digits of a second"
    why = f"keeps {kept}, and Spark's timestamps have microseconds"
    if dialect_name == "postgres":
        zoned = base == "timestamptz" or rest.startswith("with time zone")
        return why, f"{'timestamptz' if zoned else 'timestamp'}({SPARK_FRACTION})"
    return why, f"{base.upper()}({SPARK_FRACTION})"


def _in_float(
    dialect_name: str, data_type: DataType, bits: int, decimals: list[int]
) -> tuple[str, str] | None:
    """A binary float holds integers up to 2**bits, FLT_DIG/DBL_DIG decimal digits, and a
    float of as many bits; MySQL's FLOAT(M,D)/DOUBLE(M,D) also rounds to D decimal places."""
    kind = type(data_type)
    if kind in _INTEGER_BITS:
        if _INTEGER_BITS[kind] - 1 <= bits:
            return None
        why = f"holds integers exactly only up to 2^{bits}"
        return why, _ddl(dialect_name, data_type)
    scale = data_type.scale if isinstance(data_type, DecimalType) else None
    if decimals and (kind in _FLOAT_BITS or (scale is not None and decimals[0] < scale)):
        return f"rounds to {decimals[0]} decimal places", _ddl(dialect_name, data_type)
    if kind in _FLOAT_BITS and _FLOAT_BITS[kind] > bits:
        return "rounds a double to a 4-byte float", _ddl(dialect_name, data_type)
    if isinstance(data_type, DecimalType) and data_type.precision > _DECIMAL_DIGITS[bits]:
        why = f"keeps {_DECIMAL_DIGITS[bits]} significant digits of a decimal"
        return why, _ddl(dialect_name, data_type)
    return None


def _in_decimal(
    dialect_name: str, data_type: DecimalType, args: list[int]
) -> tuple[str, str] | None:
    """A decimal column rounds to its scale; a value with more integer digits than it
    has fails the write instead."""
    precision, scale = [*args, 0][:2]
    if scale >= data_type.scale:
        return None
    digits = max(precision - scale, data_type.precision - data_type.scale) + data_type.scale
    digits = min(digits, _MAX_DIGITS[dialect_name])
    why = f"keeps {scale} decimal places, and the DataFrame's {data_type.simpleString()} has "
    why += str(data_type.scale)
    return why, DECIMAL_DDL[dialect_name].format(p=digits, s=data_type.scale)


def _ddl(dialect_name: str, data_type: DataType) -> str:
    return column_ddl_type(dialect_name, "", data_type, key=False)
