"""CSV for the bulk loaders: strings always quoted, so an unquoted field is never a string
and both PostgreSQL (empty unquoted = NULL) and MySQL (`NULL` unquoted = NULL, ESCAPED BY
'') read NULL and '' apart; quotes doubled, backslashes literal, instants as UTC."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest

from xasink.errors import ConfigurationError
from xasink.loaders.csv_encoding import NULL_STRING_WRITABLE, CsvEncoder, encodable

POSTGRES = {"null_string": "", "booleans_as_int": False, "binary_as_hex": True}
MYSQL = {"null_string": "NULL", "booleans_as_int": True, "floats_as_double": True}

#: MySQL's encoding writes NULL as `NULL`, which pyarrow can from 26 on.
needs_null_string = pytest.mark.skipif(
    not NULL_STRING_WRITABLE, reason=f"pyarrow {pa.__version__} writes NULL only as ''"
)

STRINGS = pa.array(["plain", 'a"b', "", None, "NULL", "x,y", "line\nbreak", "back\\slash"])
NUMBERS = pa.array([1, None, 3, 4, 5, 6, 7, -8])


def encode(columns: dict[str, pa.Array], **options: object) -> str:
    batch = pa.record_batch(columns)
    return CsvEncoder(batch.schema, list(columns), **options).encode(batch).decode()


def test_strings_for_postgres():
    assert encode({"s": STRINGS, "i": NUMBERS}, **POSTGRES) == (
        '"plain",1\n'
        '"a""b",\n'  # NULL number: an empty unquoted field
        '"",3\n'  # the empty string: quoted
        ",4\n"  # NULL string
        '"NULL",5\n'
        '"x,y",6\n'
        '"line\nbreak",7\n'
        '"back\\slash",-8\n'
    )


@needs_null_string
def test_strings_for_mysql():
    assert encode({"s": STRINGS, "i": NUMBERS}, **MYSQL) == (
        '"plain",1\n'
        '"a""b",NULL\n'
        '"",3\n'
        "NULL,4\n"
        '"NULL",5\n'  # the word NULL, quoted: a string
        '"x,y",6\n'
        '"line\nbreak",7\n'
        '"back\\slash",-8\n'
    )


def test_dates_timestamps_booleans_decimals_for_postgres():
    columns = {
        "instant": pa.array(
            [dt.datetime(2024, 1, 2, 4, 4, 5, 6, tzinfo=dt.timezone(dt.timedelta(hours=1)))],
            pa.timestamp("us", "Europe/Paris"),
        ),
        "wall": pa.array([dt.datetime(2024, 1, 2, 3, 4, 5)], pa.timestamp("us")),
        "day": pa.array([dt.date(2024, 2, 29)]),
        "flag": pa.array([True]),
        "amount": pa.array([decimal.Decimal("-1.50")], pa.decimal128(5, 2)),
    }
    # The instant is written as its naive UTC wall time (the loaders' sessions run in UTC).
    assert encode(columns, **POSTGRES) == (
        "2024-01-02 03:04:05.000006,2024-01-02 03:04:05.000000,2024-02-29,true,-1.50\n"
    )


@needs_null_string
def test_mysql_gets_booleans_as_numbers_and_float32_as_its_exact_double():
    columns = {
        "flag": pa.array([True, False, None]),
        "f": pa.array([3.4028235e38, 0.5, None], pa.float32()),
    }
    assert encode(columns, **MYSQL) == "1,3.4028234663852886e+38\n0,0.5\nNULL,NULL\n"
    # Without the widening, float32's shortest text is beyond MySQL FLOAT's range.
    assert encode(columns, null_string="NULL", booleans_as_int=True) == (
        "1,3.4028235e+38\n0,0.5\nNULL,NULL\n"
    )


def test_bytea_as_postgres_hex_text():
    data = pa.array([b"ab", None, b"", b"\x00\xff\x10"])
    assert encode({"y": data}, **POSTGRES) == '"\\x6162"\n\n"\\x"\n"\\x00ff10"\n'
    batch = pa.record_batch({"y": data})
    sliced = CsvEncoder(batch.schema, ["y"], **POSTGRES).encode(batch.slice(1, 2))
    assert sliced.decode() == '\n"\\x"\n'


def test_binary_without_hex_has_no_csv_form():
    with pytest.raises(ConfigurationError) as caught:
        encode({"y": pa.array([b"x"])}, **MYSQL)
    assert str(caught.value) == "Column 'y' of type binary has no CSV encoding."


def test_column_order_is_the_targets():
    batch = pa.record_batch({"a": pa.array([1]), "b": pa.array(["x"])})
    encoder = CsvEncoder(batch.schema, ["b", "a"], **POSTGRES)
    assert encoder.encode(batch) == b'"x",1\n'


@pytest.mark.parametrize(
    ("kind", "plain", "with_hex"),
    [
        (pa.int8(), True, True),
        (pa.uint64(), True, True),
        (pa.float16(), True, True),
        (pa.bool_(), True, True),
        (pa.string(), True, True),
        (pa.large_string(), True, True),
        (pa.decimal128(10, 2), True, True),
        (pa.date32(), True, True),
        (pa.timestamp("us", "UTC"), True, True),
        (pa.binary(), False, True),
        (pa.large_binary(), False, True),
        (pa.date64(), False, False),
        (pa.time64("us"), False, False),
        (pa.list_(pa.int32()), False, False),
        (pa.struct([("a", pa.int32())]), False, False),
    ],
)
def test_encodable(kind, plain, with_hex):
    assert (encodable(kind), encodable(kind, binary_as_hex=True)) == (plain, with_hex)


def test_without_a_null_string_mysql_rows_go_through_inserts(monkeypatch):
    """pyarrow before 26 writes NULL only as an empty field, which MySQL's LOAD DATA reads as
    '' or 0: the LOAD DATA loader declines, and an encoder asked for `NULL` refuses."""
    from xasink.loaders import csv_encoding, mysql_load_data
    from xasink.loaders.base import LoadTarget

    target = LoadTarget(None, "t", ["`s`"], ["s"], [""], "mysql")  # type: ignore[arg-type]
    schema = pa.schema([("s", pa.string())])
    assert mysql_load_data.MySQLLoadDataLoader.supports(schema, target) == NULL_STRING_WRITABLE
    monkeypatch.setattr(mysql_load_data, "NULL_STRING_WRITABLE", False)
    monkeypatch.setattr(csv_encoding, "NULL_STRING_WRITABLE", False)
    assert not mysql_load_data.MySQLLoadDataLoader.supports(schema, target)
    with pytest.raises(ConfigurationError, match="cannot write NULL"):
        encode({"s": STRINGS}, **MYSQL)
    assert encode({"s": STRINGS}, **POSTGRES).splitlines()[3] == ""  # PostgreSQL's NULL
