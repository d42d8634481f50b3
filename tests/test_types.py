"""Every Spark SQL type round-trips through write_xa on PostgreSQL and MariaDB.

One wide table per database holds a column of every type in docs/types.md; rows carry the
extremes, NULLs, NULL elements, empty arrays and nested values. Tables are created by
write_xa(create="if_missing") or, independently, from xasink.tables.types.column_ddl_type, and read
back with psycopg / pymysql only. Unsupported and
incompatible types must fail before anything is written.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import uuid
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import types as T
from support import assert_exactly, connection_args, new_table, spec_for, xasink_prepared

from xasink import WriterProperties, write_xa
from xasink.errors import SchemaMismatchError, UnsupportedTypeError
from xasink.loaders.base import LoadTarget
from xasink.loaders.batched import BatchedInsertLoader
from xasink.protocol.sessions import open_session
from xasink.tables.columns import TableColumn
from xasink.tables.types import column_ddl_type, compatibility_problem

UTC = dt.timezone.utc
DIALECT = {"postgres": "postgres", "mariadb": "mysql", "mariadb11": "mysql", "mysql": "mysql"}
NASTY = 'q"uote b\\ack, {x,y} \\N NULL\t\n 😀𝄞'
BIG = Decimal("9999999999999999999999999999.9999999999")
#: Not -BIG: unary minus rounds to the context's 28 digits.
NEG_BIG = Decimal("-9999999999999999999999999999.9999999999")
INNER = (
    "struct<x:int,y:string,ts:timestamp,b:binary,d:decimal(38,10),f:double,"
    "m:map<string,array<int>>>"
)
#: name → Spark type. A PostgreSQL array for arrays of primitives, jsonb/JSON for the rest.
SCHEMA = {
    "id": "long",
    "i8": "byte",
    "i16": "short",
    "i32": "int",
    "i64": "long",
    "f32": "float",
    "f64": "double",
    "dec": "decimal(38,10)",
    "dec0": "decimal(38,0)",
    "s": "string",
    "b": "binary",
    "flag": "boolean",
    "day": "date",
    "ts": "timestamp",
    "ntz": "timestamp_ntz",
    "a_i8": "array<byte>",
    "a_int": "array<int>",
    "a_i64": "array<long>",
    "a_f32": "array<float>",
    "a_f64": "array<double>",
    "a_dec": "array<decimal(38,10)>",
    "a_str": "array<string>",
    "a_bin": "array<binary>",
    "a_bool": "array<boolean>",
    "a_day": "array<date>",
    "a_ts": "array<timestamp>",
    "a_ntz": "array<timestamp_ntz>",
    "a_nested": "array<array<int>>",
    "a_struct": "array<struct<k:string,v:long>>",
    "m": "map<string,int>",
    "m_day": "map<date,string>",
    "st": INNER,
}


def rows(kind: str) -> list[tuple]:
    """Row 0 low extremes, row 1 high extremes, row 2 all NULL, row 3 special values."""
    pg = kind == "postgres"
    low_day = dt.date(1, 1, 1) if pg else dt.date(1000, 1, 1)
    low_ts = dt.datetime(low_day.year, 1, 1, 0, 0, 0, 1)
    high_ts = dt.datetime(9999, 12, 31, 23, 59, 59, 999999)
    nan = math.nan if pg else 0.5  # MySQL cannot store NaN in a column (inside JSON it can)
    struct = (1, NASTY, low_ts.replace(tzinfo=UTC), b"\x00\xff", BIG, math.nan, {"k": [1, None]})
    low = (
        0, -128, -32768, -(2**31), -(2**63), -3.4028234663852886e38, -1.7976931348623157e308,
        NEG_BIG, Decimal(-(10**38) + 1), NASTY, bytes(range(256)), False, low_day,
        low_ts.replace(tzinfo=UTC), low_ts, [-128, None], [-(2**31), None, 0], [-(2**63)],
        [1.1, None, -3.4028234663852886e38],
        [math.nan, math.inf, -math.inf, None, 5e-324], [NEG_BIG, None, Decimal("1E-10")],
        [NASTY, None, "NULL", "", '"', "\\"], [b"\x00\\\xff", None, b""], [True, None, False],
        [low_day, None], [low_ts.replace(tzinfo=UTC), None], [low_ts, None],
        [[1], [2, 3], [], None], [("k", -(2**63)), None], {"a": 1, NASTY: None},
        {low_day: "d"}, struct,
    )  # fmt: skip
    high = (
        1, 127, 32767, 2**31 - 1, 2**63 - 1, 3.4028234663852886e38, 5e-324, BIG,
        Decimal(10**38 - 1), "x" * 70_000, b"", True, dt.date(9999, 12, 31),
        high_ts.replace(tzinfo=UTC), high_ts,
        [127], [2**31 - 1], [2**63 - 1], [0.0], [1.7976931348623157e308], [BIG], ["😀"],
        [bytes(range(256))], [True], [dt.date(9999, 12, 31)], [high_ts.replace(tzinfo=UTC)],
        [high_ts], [[]], [], {}, {}, (None, None, None, None, None, None, None),
    )  # fmt: skip
    empty = [[]] * 12  # every array-of-primitives column empty
    special = (
        3, 0, 0, 0, 0, nan, nan, Decimal("0.0000000001"), Decimal(0), "", b"\x00", True,
        dt.date(2024, 2, 29), dt.datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=UTC),
        dt.datetime(2024, 2, 29, 12, 0, 0, 123456), *empty, [None, []], [], {}, {}, None,
    )  # fmt: skip
    return [low, high, (2, *[None] * (len(SCHEMA) - 1)), special]


def ddl_types(kind: str) -> dict[str, str]:
    schema = T._parse_datatype_string(", ".join(f"`{n}` {t}" for n, t in SCHEMA.items()))
    return {f.name: column_ddl_type(DIALECT[kind], f.name, f.dataType, key=False) for f in schema}


def create_table(db, columns: dict[str, str]) -> str:
    name = f"ty_{uuid.uuid4().hex[:10]}"
    q = '"' if db.kind == "postgres" else "`"
    body = ", ".join(f"{q}{n}{q} {t}" for n, t in columns.items())
    with db.connect() as conn:
        conn.cursor().execute(f"CREATE TABLE {name} ({body})")
    return name


def write(spark, db, table: str, data: list[tuple], schema: dict[str, str], **kw: Any) -> Any:
    df = spark.createDataFrame(data, ", ".join(f"{n} {t}" for n, t in schema.items()))
    return write_xa(df.repartition(2), table=table, **connection_args(db), **kw)


def read(db, table: str, columns: dict[str, str]) -> list[tuple]:
    """Rows by id; JSON columns as text, MySQL FLOAT widened (its text protocol rounds)."""
    q = '"' if db.kind == "postgres" else "`"
    exprs = []
    for name, ddl in columns.items():
        col = f"{q}{name}{q}"
        if ddl == "jsonb":
            col += "::text"
        elif ddl == "FLOAT":
            col = f"CAST({col} AS DOUBLE)"
        exprs.append(col)
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT {', '.join(exprs)} FROM {table} ORDER BY {q}id{q}")
        return [tuple(r) for r in cursor.fetchall()]


# -- what the database gives back ------------------------------------------------------
def json_value(value: Any, spark_type: T.DataType) -> Any:
    """What Spark's JSON writer makes of `value` (see docs/types.md)."""
    if value is None:
        return None
    if isinstance(spark_type, T.ArrayType):
        return [json_value(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        return {
            json_key(k, spark_type.keyType): json_value(v, spark_type.valueType)
            for k, v in value.items()
        }
    if isinstance(spark_type, T.StructType):
        return {f.name: json_value(v, f.dataType) for f, v in zip(spark_type, value, strict=True)}
    if isinstance(spark_type, (T.FloatType, T.DoubleType)) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(spark_type, T.FloatType):
        return np.float32(value)
    if isinstance(spark_type, T.BinaryType):
        return base64.b64encode(value).decode()
    if isinstance(spark_type, T.DateType):
        return value.isoformat()
    if isinstance(spark_type, T.TimestampNTZType):
        return value.isoformat(timespec="microseconds")
    if isinstance(spark_type, T.TimestampType):
        return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
    return value


def json_key(key: Any, key_type: T.DataType) -> str:
    return key if isinstance(key, str) else str(json_value(key, key_type))


def is_document(ddl: str, spark_type: T.DataType) -> bool:
    """A column holding JSON: jsonb/JSON, or MySQL text for documents holding wide decimals."""
    nested = isinstance(spark_type, (T.ArrayType, T.MapType, T.StructType))
    return ddl in ("jsonb", "JSON") or (nested and ddl.startswith("LONGTEXT"))


def expected(kind: str, value: Any, spark_type: T.DataType, ddl: str) -> Any:
    if value is None:
        return None
    if is_document(ddl, spark_type):
        return json_value(value, spark_type)
    if isinstance(spark_type, T.ArrayType):  # a PostgreSQL array
        return [expected(kind, v, spark_type.elementType, "") for v in value]
    if isinstance(spark_type, T.FloatType):
        return np.float32(value)
    if kind != "postgres" and isinstance(spark_type, T.TimestampType):
        return value.replace(tzinfo=None)  # DATETIME holds the UTC wall time
    if kind != "postgres" and isinstance(spark_type, T.BooleanType):
        return int(value)
    return value


def same(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and got.keys() == want.keys()
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    if isinstance(want, np.float32):
        return got is not None and np.float32(float(got)).tobytes() == want.tobytes()
    if isinstance(want, float):
        got = float(got) if isinstance(got, Decimal) else got
        return isinstance(got, float) and (got == want or (math.isnan(got) and math.isnan(want)))
    return got == want


def check(db, table: str, data: list[tuple], schema: dict[str, str], ddl: dict[str, str]) -> None:
    types = T._parse_datatype_string(", ".join(f"`{n}` {t}" for n, t in schema.items()))
    got = read(db, table, {n: ddl[n] for n in schema})
    assert len(got) == len(data)
    for want_row, got_row in zip(sorted(data), got, strict=True):
        for field, want, have in zip(types, want_row, got_row, strict=True):
            if is_document(ddl[field.name], field.dataType) and have is not None:
                have = json.loads(have, parse_float=Decimal)
            want = expected(db.kind, want, field.dataType, ddl[field.name])
            assert same(have, want), f"row {want_row[0]} column {field.name}: {have!r} != {want!r}"
    assert db.prepared_transactions() == []


# -- round trips ------------------------------------------------------------------------
@pytest.mark.mysql_ci
@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "batched"])
def test_every_type_round_trips(spark, db, bulk):
    ddl = ddl_types(db.kind)
    schema = dict(SCHEMA)
    data = rows(db.kind)
    if db.kind != "postgres" and bulk:
        # A binary column sends MySQL down the batched path; without it LOAD DATA runs.
        index = list(SCHEMA).index("b")
        del schema["b"]
        data = [r[:index] + r[index + 1 :] for r in data]
    # Bulk: write_xa creates the table (create="if_missing"); batched: the same column
    # types, created independently of write_xa.
    table = f"ty_{uuid.uuid4().hex[:10]}" if bulk else create_table(db, {n: ddl[n] for n in schema})
    result = write(spark, db, table, data, schema, writer_properties=WriterProperties(bulk=bulk))
    path = {"postgres": "copy-csv", "mysql": "load-data"}[db.dialect] if bulk else "batched"
    assert (result.load_paths, result.created) == ((path,), bulk)
    check(db, table, data, schema, ddl)


def test_postgres_arrays_and_json_take_the_binary_copy_path(spark, postgres):
    """jsonb, json, byte and timestamp_ntz all map exactly: binary COPY, no CSV fallback."""
    schema = {"id": "long", "i8": "byte", "ntz": "timestamp_ntz", "doc": INNER, "m": "map<int,int>"}
    ddl = {**ddl_types("postgres"), "i8": "smallint", "doc": "jsonb", "m": "json"}
    ddl["ntz"] = "timestamp"
    table = create_table(postgres, {n: ddl[n] for n in schema})
    struct = (7, NASTY, dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=UTC), b"\x01", BIG, 1.5, {})
    when = dt.datetime(1, 1, 1, 0, 0, 0, 1)
    data = [(1, -128, when, struct, {1: 2, 3: None}), (2, None, None, None, None)]
    result = write(spark, postgres, table, data, schema)
    assert result.load_paths == ("copy-binary",)
    got = read(postgres, table, {n: ddl[n] for n in schema if n != "m"})
    assert got[0][:3] == (1, -128, when) and got[1] == (2, None, None, None)
    types = T._parse_datatype_string(f"d {INNER}")
    assert same(json.loads(got[0][3], parse_float=Decimal), json_value(struct, types["d"].dataType))
    with postgres.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT m::text FROM {table} ORDER BY id")
        assert [r[0] for r in cursor.fetchall()] == ['{"1":2,"3":null}', None]


@pytest.mark.parametrize("use_binder", [True, False], ids=["column-binder", "value-by-value"])
def test_batched_binds_strings_for_postgres_typed_columns_untyped(postgres, use_binder):
    """A string bound for jsonb / integer[] / uuid goes as Types.OTHER (server parses it)."""
    table = create_table(postgres, {"id": "bigint", "j": "jsonb", "a": "integer[]", "u": "uuid"})
    batch = pa.record_batch(
        {
            "id": pa.array([1, 2], pa.int64()),
            "j": ['{"a": [1, null]}', None],
            "a": ["{1,NULL,-2147483648}", None],
            "u": ["00000000-0000-0000-0000-000000000001", None],
        }
    )
    with open_session(spec_for(postgres)) as session:
        names = batch.schema.names
        target = LoadTarget(
            session.connection, table, [f'"{c}"' for c in names], names,
            ["int8", "jsonb", "_int4", "uuid"], dialect="postgres",
        )  # fmt: skip
        loader = BatchedInsertLoader(target, batch.schema, batch_size=1)
        if not use_binder:
            loader._binder = None
        loader.write(batch)
        loader.finish()
    with postgres.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id, j, a, u::text FROM {table} ORDER BY id")
        got = [tuple(r) for r in cursor.fetchall()]
    assert got == [
        (1, {"a": [1, None]}, [1, None, -(2**31)], "00000000-0000-0000-0000-000000000001"),
        (2, None, None, None),
    ]


# -- failures before anything is written --------------------------------------------------
UNSUPPORTED = [
    T.NullType(),
    T.DayTimeIntervalType(),
    T.YearMonthIntervalType(),
    T.CalendarIntervalType(),
    T.VariantType(),
    T.ArrayType(T.DayTimeIntervalType()),
    T.StructType([T.StructField("v", T.NullType())]),
]


@pytest.mark.parametrize("dialect", ["postgres", "mysql", "generic"])
@pytest.mark.parametrize("spark_type", UNSUPPORTED, ids=lambda t: t.simpleString())
def test_types_without_storage_name_the_column(dialect, spark_type):
    with pytest.raises(UnsupportedTypeError, match=r"Column 'weird' has Spark type"):
        column_ddl_type(dialect, "weird", spark_type, key=False)


def test_mysql_limits_are_reported_up_front():
    with pytest.raises(UnsupportedTypeError, match="scale of at most 30"):
        column_ddl_type("mysql", "amount", T.DecimalType(38, 31), key=False)
    assert column_ddl_type("mysql", "amount", T.DecimalType(38, 30), key=False) == "DECIMAL(38,30)"
    assert column_ddl_type("mysql", "k", T.StringType(), key=True).startswith("VARCHAR(255)")
    assert column_ddl_type("mysql", "k", T.BinaryType(), key=True) == "VARBINARY(255)"
    with pytest.raises(UnsupportedTypeError, match="cannot be a key"):
        column_ddl_type("mysql", "k", T.MapType(T.StringType(), T.IntegerType()), key=True)
    # A document holding decimals wider than a double goes to text, which keeps every digit.
    wide = T.ArrayType(T.DecimalType(38, 10))
    assert column_ddl_type("mysql", "a", wide, key=False).startswith("LONGTEXT")
    assert column_ddl_type("mysql", "a", T.ArrayType(T.DecimalType(15, 2)), key=False) == "JSON"


@pytest.mark.parametrize(
    ("dialect", "spark_type", "type_name", "sql_type", "fits"),
    [
        ("postgres", "string", "int4", "integer", False),
        ("postgres", "long", "int2", "smallint", True),
        ("postgres", "boolean", "int4", "integer", True),
        ("postgres", "int", "numeric", "numeric(10,2)", True),
        ("postgres", "decimal(20,0)", "int8", "bigint", True),
        ("postgres", "decimal(20,2)", "int8", "bigint", False),
        ("postgres", "double", "int8", "bigint", False),
        ("postgres", "string", "mood", "mood", True),
        ("postgres", "int", "mood", "mood", False),
        ("postgres", "map<string,int>", "jsonb", "jsonb", True),
        ("postgres", "struct<a:int>", "text", "text", True),
        ("postgres", "array<int>", "_int8", "bigint[]", True),
        ("postgres", "array<string>", "_int4", "integer[]", False),
        ("postgres", "array<array<int>>", "_int4", "integer[]", False),
        ("postgres", "array<string>", "_mood", "mood[]", True),
        ("postgres", "timestamp_ntz", "timestamptz", "timestamp with time zone", True),
        ("postgres", "date", "timestamp", "timestamp without time zone", True),
        ("postgres", "timestamp", "date", "date", False),
        ("postgres", "binary", "text", "text", False),
        ("mysql", "boolean", "tinyint", "tinyint(1)", True),
        ("mysql", "long", "integer unsigned", "int(10) unsigned", True),
        ("mysql", "array<int>", "longtext", "longtext", True),
        ("mysql", "string", "char", "enum('x','y')", True),
        ("mysql", "binary", "longblob", "longblob", True),
        ("mysql", "string", "blob", "blob", False),
        ("mysql", "int", "year", "year(4)", False),
        ("mysql", "string", "year", "year(4)", True),
        ("mysql", "timestamp", "datetime", "datetime(6)", True),
        ("mysql", "void", "longtext", "longtext", False),
        # MySQL's JSON keeps numbers as doubles: wider decimals would lose digits there.
        ("mysql", "array<decimal(38,10)>", "json", "json", False),
        ("mysql", "map<string,decimal(15,2)>", "json", "json", True),
        ("mysql", "array<decimal(38,10)>", "longtext", "longtext", True),
        ("postgres", "array<decimal(38,10)>", "jsonb", "jsonb", True),
    ],
)
def test_compatibility_rules(dialect, spark_type, type_name, sql_type, fits):
    data_type = T._parse_datatype_string(spark_type)
    problem = compatibility_problem(
        dialect, data_type, TableColumn("c", type_name, sql_type, True, False)
    )
    assert (problem is None) == fits, problem
    if problem:
        assert "column 'c'" in problem and sql_type in problem


@pytest.mark.parametrize("bulk", [True, False], ids=["bulk", "batched"])
def test_incompatible_type_fails_before_writing(spark, db, bulk):
    table = new_table(db)  # id, name, v, n (integer), ts
    df = spark.createDataFrame(
        [(1, "a", 1.0, "not a number", None)],
        "id long, name string, v double, n string, ts timestamp",
    )
    with pytest.raises(SchemaMismatchError, match=r"column 'n'") as caught:
        write_xa(
            df, table=table, **connection_args(db), writer_properties=WriterProperties(bulk=bulk)
        )
    assert "string" in str(caught.value)
    assert_exactly(db, table, [])
    assert xasink_prepared(db) == []


def test_unsupported_type_fails_before_the_table_exists(spark, db):
    table = f"ty_{uuid.uuid4().hex[:10]}"
    df = spark.sql("SELECT 1L AS id, INTERVAL '1' DAY AS gap")
    with pytest.raises(UnsupportedTypeError, match=r"'gap'.*interval day"):
        write_xa(df, table=table, create="if_missing", **connection_args(db))
    with db.connect() as conn:
        cursor = conn.cursor()
        if db.kind == "postgres":
            cursor.execute("SELECT to_regclass(%s)", (table,))
            assert cursor.fetchone()[0] is None
        else:
            cursor.execute("SHOW TABLES LIKE %s", (table,))
            assert cursor.fetchall() == ()
    assert xasink_prepared(db) == []
