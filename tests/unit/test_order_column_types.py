"""The `order` column a table stores against the DataFrame's order type: which columns lose
order values (and the type named instead), which hold every one. PostgreSQL columns are
described as JDBC names them (type_name) and as format_type spells them (sql_type), MySQL's
by COLUMN_TYPE, as the servers do (checked on each)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from xasink.dialects import get_dialect
from xasink.spec import TableRef
from xasink.tables.columns import TableColumn, spelled_type
from xasink.tables.order_precision import coarser, order_refusal
from xasink.tables.types import column_ddl_type

PG = "postgres"
MY = "mysql"
NTZ, TZ = TimestampNTZType(), TimestampType()


def _column(type_name: str, sql_type: str) -> TableColumn:
    return TableColumn("ts", type_name, sql_type, True, False)


@pytest.mark.parametrize(
    ("dialect", "spark", "type_name", "sql_type", "holds"),
    [
        # Timestamps: Spark's have microseconds.
        (PG, NTZ, "timestamp", "timestamp(0) without time zone", "timestamp(6)"),
        (PG, TZ, "timestamptz", "timestamp(3) with time zone", "timestamptz(6)"),
        (MY, NTZ, "datetime", "datetime", "DATETIME(6)"),
        (MY, TZ, "datetime", "datetime(3)", "DATETIME(6)"),
        (MY, TZ, "timestamp", "timestamp", "TIMESTAMP(6)"),
        # Integers in binary floats: 24 and 53 bits of significand.
        (PG, LongType(), "float4", "real", "bigint"),
        (PG, IntegerType(), "float4", "real", "integer"),
        (PG, LongType(), "float8", "double precision", "bigint"),
        (MY, LongType(), "float", "float", "BIGINT"),
        (MY, IntegerType(), "float", "float(10,2)", "INT"),
        (MY, LongType(), "double", "double", "BIGINT"),
        # Floating-point values in a smaller float, or rounded to decimal places.
        (PG, DoubleType(), "float4", "real", "double precision"),
        (MY, DoubleType(), "float", "float", "DOUBLE"),
        (MY, DoubleType(), "double", "double(10,2)", "DOUBLE"),
        (MY, FloatType(), "float", "float(10,2)", "FLOAT"),
        (PG, DoubleType(), "numeric", "numeric", "double precision"),
        (PG, FloatType(), "numeric", "numeric(20,10)", "real"),
        (MY, DoubleType(), "decimal", "decimal(30,10)", "DOUBLE"),
        # Decimals: a smaller scale rounds; the integer digits of the wider are kept.
        (PG, DecimalType(12, 3), "numeric", "numeric(12,2)", "numeric(13,3)"),
        (PG, DecimalType(12, 3), "numeric", "numeric(30,0)", "numeric(33,3)"),
        (MY, DecimalType(12, 3), "decimal", "decimal(12,2) unsigned", "DECIMAL(13,3)"),
        (MY, DecimalType(38, 30), "decimal", "decimal(65,20)", "DECIMAL(65,30)"),
        (PG, DecimalType(16, 2), "float8", "double precision", "numeric(16,2)"),
        (PG, DecimalType(7, 2), "float4", "real", "numeric(7,2)"),
        (MY, DecimalType(12, 3), "double", "double(20,2)", "DECIMAL(12,3)"),
    ],
)
def test_a_column_that_loses_order_values_names_the_type_that_keeps_them(
    dialect: str, spark: DataType, type_name: str, sql_type: str, holds: str
) -> None:
    found = coarser(dialect, spark, _column(type_name, sql_type))
    assert found is not None and found[1] == holds
    message = order_refusal(dialect, "app.t", spark, _column(type_name, sql_type))
    assert message is not None
    assert f"order column 'ts' of table app.t has type {sql_type}, which {found[0]}" in message
    assert f"Make it {holds}," in message and message.endswith("Nothing was written.")


@pytest.mark.parametrize(
    ("dialect", "spark", "type_name", "sql_type"),
    [
        (PG, NTZ, "timestamp", "timestamp without time zone"),
        (PG, NTZ, "timestamptz", "timestamp(6) with time zone"),
        (PG, TZ, "timestamptz", "timestamp with time zone"),
        (MY, TZ, "datetime", "datetime(6)"),
        (MY, NTZ, "timestamp", "timestamp(6)"),
        # A date is a whole day: any timestamp column holds it.
        (PG, DateType(), "timestamp", "timestamp(0) without time zone"),
        (MY, DateType(), "datetime", "datetime"),
        # Integers: a wider or decimal column holds them, or the write fails (out of range).
        (PG, LongType(), "int4", "integer"),
        (PG, LongType(), "numeric", "numeric(10,2)"),
        (MY, LongType(), "bigint", "bigint(20)"),
        (PG, ShortType(), "float4", "real"),
        (MY, ByteType(), "float", "float(5,2)"),
        (PG, IntegerType(), "float8", "double precision"),
        (MY, IntegerType(), "double", "double"),
        (PG, BooleanType(), "int2", "smallint"),
        (MY, BooleanType(), "float", "float(5,2)"),
        # Floats in a float at least as wide.
        (PG, FloatType(), "float4", "real"),
        (PG, FloatType(), "float8", "double precision"),
        (MY, FloatType(), "double", "double"),
        # Decimals: scale at least the frame's (fewer integer digits fail the write), an
        # unconstrained numeric, an integer for scale 0, a float of enough digits.
        (PG, DecimalType(12, 3), "numeric", "numeric(20,5)"),
        (PG, DecimalType(12, 3), "numeric", "numeric(10,3)"),
        (PG, DecimalType(12, 3), "numeric", "numeric"),
        (MY, DecimalType(10, 0), "bigint", "bigint"),
        (PG, DecimalType(15, 2), "float8", "double precision"),
        (PG, DecimalType(6, 2), "float4", "real"),
        (MY, DecimalType(12, 3), "double", "double(20,3)"),
        # Strings compare as stored; a value too long fails the write.
        (PG, StringType(), "varchar", "character varying(3)"),
        (MY, StringType(), "varchar", "varchar(3) character set utf8mb4 collate utf8mb4_bin"),
    ],
)
def test_a_column_that_holds_every_order_value_is_taken(
    dialect: str, spark: DataType, type_name: str, sql_type: str
) -> None:
    assert coarser(dialect, spark, _column(type_name, sql_type)) is None
    assert order_refusal(dialect, "t", spark, _column(type_name, sql_type)) is None


#: What a table xasink creates reads back as: (JDBC type name, format_type) on PostgreSQL.
_PG_CREATED = {
    "smallint": ("int2", "smallint"),
    "integer": ("int4", "integer"),
    "bigint": ("int8", "bigint"),
    "real": ("float4", "real"),
    "double precision": ("float8", "double precision"),
    "timestamp": ("timestamp", "timestamp without time zone"),
    "timestamptz": ("timestamptz", "timestamp with time zone"),
    "date": ("date", "date"),
    "text": ("text", "text"),
    "numeric(38,10)": ("numeric", "numeric(38,10)"),
    "boolean": ("bool", "boolean"),
}


@pytest.mark.parametrize(
    "spark",
    [
        ByteType(),
        ShortType(),
        IntegerType(),
        LongType(),
        FloatType(),
        DoubleType(),
        DecimalType(38, 10),
        DateType(),
        TZ,
        NTZ,
        StringType(),
        BooleanType(),
    ],
)
def test_the_column_xasink_creates_for_an_order_holds_it(spark: DataType) -> None:
    ddl = column_ddl_type(PG, "ts", spark, key=False)
    assert coarser(PG, spark, _column(*_PG_CREATED[ddl])) is None
    ddl = column_ddl_type(MY, "ts", spark, key=False).lower()
    assert coarser(MY, spark, _column(ddl.split("(")[0].split()[0], ddl)) is None


def test_a_dialect_that_cannot_tell_refuses_nothing() -> None:
    assert order_refusal("generic", "t", NTZ, _column("timestamp", "timestamp(0)")) is None


@pytest.mark.parametrize(
    ("dialect", "spark", "type_name", "sql_type", "cast"),
    [
        # A decimal column of smaller scale holds a cast to itself, where the values fit.
        (MY, DecimalType(38, 18), "decimal", "decimal(20,0)", "decimal(20,0)"),
        (PG, DecimalType(12, 3), "numeric", "numeric(12,2)", "decimal(12,2)"),
        (PG, DoubleType(), "numeric", "numeric(20,10)", "decimal(20,10)"),
        (MY, DoubleType(), "decimal", "decimal(30,10)", "decimal(30,10)"),
        # No Spark decimal holds it, or no cast would do: the column must change.
        (MY, DecimalType(38, 30), "decimal", "decimal(65,20)", None),
        (PG, DoubleType(), "numeric", "numeric", None),
        (MY, LongType(), "double", "double", None),
        (PG, LongType(), "float4", "real", None),
        (MY, NTZ, "datetime", "datetime", None),
    ],
)
def test_a_refusal_names_the_cast_of_the_frame_that_the_column_holds(
    dialect: str, spark: DataType, type_name: str, sql_type: str, cast: str | None
) -> None:
    message = order_refusal(dialect, "t", spark, _column(type_name, sql_type))
    assert message is not None and message.endswith("Nothing was written.")
    if cast is None:
        assert "cast" not in message, message
    else:
        assert f'Or cast the DataFrame\'s order column to {cast} (`.cast("{cast}")`)' in message


@pytest.mark.parametrize(
    ("sql_type", "equates"),
    [
        ("varchar(20) character set utf8mb4 collate utf8mb4_general_ci", True),
        ("longtext character set utf8mb4 collate utf8mb4_uca1400_ai_ci", True),
        ("varchar(20) character set utf8mb4 collate utf8mb4_0900_as_cs", True),
        ("varchar(20) character set utf8mb4 collate utf8mb4_bin", False),
        ("longtext character set utf8mb4 collate utf8mb4_nopad_bin", False),
        ("varchar(20) character set latin1 collate latin1_bin", False),
        ("varbinary(20)", False),
    ],
)
def test_mysql_takes_a_string_order_column_by_a_binary_collation_only(
    sql_type: str, equates: bool
) -> None:
    """Only a binary collation compares by code point; a PAD SPACE one (utf8mb4_bin, which
    xasink's own tables have) is taken, its trailing spaces said in docs/modes.md."""
    found = get_dialect(MY).collation_problem(None, TableRef("t"), "ts", sql_type)  # type: ignore[arg-type]
    assert (found is not None) == equates, found


def test_a_described_type_keeps_its_collations_case() -> None:
    assert spelled_type('TEXT COLLATE pg_catalog."C"') == 'text collate pg_catalog."C"'
    assert spelled_type("VARCHAR(3) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin") == (
        "varchar(3) character set utf8mb4 collate utf8mb4_bin"
    )
    assert spelled_type("Integer") == "integer"
