"""Spark types against database columns: the DDL xasink creates, what an existing column
takes, and the types it refuses (pyspark's type classes need no session)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
    CharType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VarcharType,
    VariantType,
)

from xasink.dialects import get_dialect
from xasink.errors import SchemaMismatchError, UnsupportedTypeError
from xasink.spec import TableRef
from xasink.tables.catalog import create_table_sql
from xasink.tables.columns import TableColumn
from xasink.tables.types import column_ddl_type, compatibility_problem

UTF8 = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
STRUCT = StructType([StructField("a", IntegerType())])


@pytest.mark.parametrize(
    ("spark", "postgres", "mysql", "generic"),
    [
        (ByteType(), "smallint", "TINYINT", "SMALLINT"),
        (IntegerType(), "integer", "INT", "INTEGER"),
        (LongType(), "bigint", "BIGINT", "BIGINT"),
        (FloatType(), "real", "FLOAT", "REAL"),
        (DoubleType(), "double precision", "DOUBLE", "DOUBLE PRECISION"),
        (BooleanType(), "boolean", "BOOLEAN", "BOOLEAN"),
        (StringType(), "text", "LONGTEXT" + UTF8, "CLOB"),
        (VarcharType(20), "varchar(20)", "VARCHAR(20)" + UTF8, "VARCHAR(20)"),
        (CharType(3), "char(3)", "CHAR(3)" + UTF8, "CHAR(3)"),
        (BinaryType(), "bytea", "LONGBLOB", "BLOB"),
        (DecimalType(38, 10), "numeric(38,10)", "DECIMAL(38,10)", "DECIMAL(38,10)"),
        (DateType(), "date", "DATE", "DATE"),
        (TimestampType(), "timestamptz", "DATETIME(6)", "TIMESTAMP"),
        (TimestampNTZType(), "timestamp", "DATETIME(6)", "TIMESTAMP"),
        (ArrayType(IntegerType()), "integer[]", "JSON", "CLOB"),
        (ArrayType(StringType()), "text[]", "JSON", "CLOB"),
        (ArrayType(DecimalType(10, 2)), "numeric(10,2)[]", "JSON", "CLOB"),
        (ArrayType(TimestampType()), "timestamptz[]", "JSON", "CLOB"),
        (ArrayType(ArrayType(IntegerType())), "jsonb", "JSON", "CLOB"),
        (MapType(StringType(), IntegerType()), "jsonb", "JSON", "CLOB"),
        (STRUCT, "jsonb", "JSON", "CLOB"),
    ],
    ids=lambda value: getattr(value, "simpleString", lambda: None)(),
)
def test_column_ddl_per_dialect(spark, postgres, mysql, generic):
    ddl = {d: column_ddl_type(d, "c", spark, key=False) for d in ("postgres", "mysql", "generic")}
    assert ddl == {"postgres": postgres, "mysql": mysql, "generic": generic}


@pytest.mark.parametrize(
    ("dialect", "spark", "ddl"),
    [
        ("mysql", StringType(), "VARCHAR(255)" + UTF8),
        ("mysql", BinaryType(), "VARBINARY(255)"),
        ("generic", StringType(), "VARCHAR(255)"),
        ("postgres", StringType(), "text"),
        ("postgres", ArrayType(IntegerType()), "integer[]"),
        ("mysql", VarcharType(40), "VARCHAR(40)" + UTF8),
    ],
)
def test_key_columns_get_indexable_types(dialect, spark, ddl):
    assert column_ddl_type(dialect, "k", spark, key=True) == ddl


def _unsupported(dialect, spark, key=False):
    with pytest.raises(UnsupportedTypeError) as caught:
        column_ddl_type(dialect, "col", spark, key=key)
    assert isinstance(caught.value, SchemaMismatchError)
    return str(caught.value)


@pytest.mark.parametrize(
    ("dialect", "spark", "key", "message"),
    [
        (
            "postgres",
            NullType(),
            False,
            "Column 'col' has Spark type void, which xasink cannot store in PostgreSQL: a column "
            "of only NULLs has no type; cast it, e.g. F.lit(None).cast('string'). Nothing was "
            "written.",
        ),
        (
            "mysql",
            DayTimeIntervalType(),
            False,
            "Column 'col' has Spark type interval day to second, which xasink cannot store in "
            "MySQL/MariaDB: cast it to a string, or to a number of seconds/months. Nothing was "
            "written.",
        ),
        (
            "postgres",
            VariantType(),
            False,
            "Column 'col' has Spark type variant, which xasink cannot store in PostgreSQL: store "
            "it as JSON text with F.to_json(col). Nothing was written.",
        ),
        (
            "postgres",
            MapType(StringType(), CalendarIntervalType()),
            False,
            "Column 'col' has Spark type map<string,interval>, which xasink cannot store in "
            "PostgreSQL: a type nested inside it has no storage. Nothing was written.",
        ),
        (
            "mysql",
            ArrayType(IntegerType()),
            True,
            "Column 'col' has Spark type array<int>, which xasink cannot store in MySQL/MariaDB: "
            "it becomes JSON, which cannot be a key. Nothing was written.",
        ),
        (
            "mysql",
            DecimalType(65, 31),
            False,
            "Column 'col' has Spark type decimal(65,31), which xasink cannot store in "
            "MySQL/MariaDB: its DECIMAL allows a scale of at most 30; round it first, e.g. "
            "col.cast('decimal(65,30)'). Nothing was written.",
        ),
        (
            "generic",
            ArrayType(NullType()),
            False,
            "Column 'col' has Spark type array<void>, which xasink cannot store in the generic "
            "dialect: a type nested inside it has no storage. Nothing was written.",
        ),
    ],
)
def test_unsupported_types_name_the_column_and_the_fix(dialect, spark, key, message):
    assert _unsupported(dialect, spark, key) == message


def _column(type_name, sql_type=None):
    return TableColumn("n", type_name, sql_type or type_name, True, False)


@pytest.mark.parametrize(
    ("dialect", "spark", "column"),
    [
        ("postgres", LongType(), _column("int4", "integer")),
        ("postgres", IntegerType(), _column("numeric", "numeric(10,0)")),
        ("postgres", DecimalType(10, 0), _column("int8", "bigint")),
        ("postgres", DoubleType(), _column("numeric", "numeric(10,2)")),
        ("postgres", BooleanType(), _column("int2", "smallint")),
        ("postgres", StringType(), _column("uuid")),
        ("postgres", StringType(), _column("jsonb")),
        ("postgres", StringType(), _column("geometry")),  # unknown: the server parses text
        ("postgres", DateType(), _column("timestamptz")),
        ("postgres", ArrayType(IntegerType()), _column("_int8", "bigint[]")),
        ("postgres", ArrayType(IntegerType()), _column("jsonb")),
        ("postgres", MapType(StringType(), IntegerType()), _column("json")),
        ("postgres", STRUCT, _column("text")),
        ("mysql", BooleanType(), _column("bit", "tinyint(1)")),
        ("mysql", LongType(), _column("int", "int(11) unsigned")),
        ("mysql", DoubleType(), _column("decimal", "decimal(10,2)")),
        ("mysql", StringType(), _column("enum", "enum('a','b')")),
        ("mysql", ArrayType(IntegerType()), _column("json")),
        ("mysql", TimestampType(), _column("timestamp", "timestamp(6)")),
        ("generic", LongType(), _column("int4")),
        ("generic", StringType(), _column("varchar2")),
    ],
)
def test_what_fits_an_existing_column(dialect, spark, column):
    assert compatibility_problem(dialect, spark, column) is None


@pytest.mark.parametrize(
    ("dialect", "spark", "column", "problem"),
    [
        (
            "postgres",
            StringType(),
            _column("int4", "integer"),
            "a string cannot be stored in column 'n' of type integer",
        ),
        (
            "postgres",
            DecimalType(10, 2),
            _column("int8", "bigint"),
            "a decimal(10,2) cannot be stored in column 'n' of type bigint",
        ),
        (
            "postgres",
            TimestampType(),
            _column("date"),
            "a timestamp cannot be stored in column 'n' of type date",
        ),
        (
            "postgres",
            BinaryType(),
            _column("text"),
            "a binary cannot be stored in column 'n' of type text",
        ),
        (
            "postgres",
            LongType(),
            _column("geometry"),
            "a bigint cannot be stored in column 'n' of type geometry",
        ),
        (
            "postgres",
            ArrayType(ArrayType(IntegerType())),
            _column("_int4", "integer[]"),
            "an array<array<int>> cannot be stored in column 'n' of type integer[] (arrays of "
            "arrays, maps or structs need a json/jsonb column)",
        ),
        (
            "postgres",
            NullType(),
            _column("text"),
            "a void cannot be stored in column 'n' of type text",
        ),
        (
            "mysql",
            BooleanType(),
            _column("double"),
            "a boolean cannot be stored in column 'n' of type double",
        ),
        (
            "mysql",
            ArrayType(IntegerType()),
            _column("blob"),
            "an array<int> cannot be stored in column 'n' of type blob",
        ),
    ],
)
def test_what_does_not_fit_names_column_and_type(dialect, spark, column, problem):
    assert compatibility_problem(dialect, spark, column) == problem


def test_create_table_sql_makes_keys_not_null_and_primary():
    schema = StructType(
        [
            StructField("id", StringType(), True),
            StructField("n", LongType(), False),
            StructField("tags", ArrayType(StringType()), True),
        ]
    )
    pg, my = get_dialect("postgres"), get_dialect("mysql")
    assert create_table_sql(pg, TableRef("t", "s"), schema, ["id"]) == (
        'CREATE TABLE "s"."t" ("id" text NOT NULL, "n" bigint NOT NULL, "tags" text[], '
        'PRIMARY KEY ("id"))'
    )
    assert create_table_sql(my, TableRef("t"), schema, []) == (
        f"CREATE TABLE `t` (`id` LONGTEXT{UTF8}, `n` BIGINT NOT NULL, `tags` JSON)"
    )
