"""PostgreSQL binary COPY encoding, checked byte by byte against the documented format
(https://www.postgresql.org/docs/current/sql-copy.html, "Binary Format"): per tuple an
int16 field count, then per field an int32 length (-1 for NULL) and the value in network
byte order; dates count days and timestamps microseconds from 2000-01-01."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from xasink.loaders.pg_binary import HEADER, TRAILER, PgBinaryEncoder

NULL = bytes.fromhex("ffffffff")


def encode(columns: dict[str, pa.Array], pg_types: list[str]) -> bytes:
    batch = pa.record_batch(columns)
    encoder = PgBinaryEncoder.create(batch.schema, list(columns), pg_types)
    assert encoder is not None
    return encoder.encode(batch)


def field(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def test_header_and_trailer():
    assert b"PGCOPY\n\xff\r\n\x00" + bytes(4) + bytes(4) == HEADER
    assert len(HEADER) == 19
    assert TRAILER == b"\xff\xff"  # a field count of -1


def test_integers_text_and_nulls():
    data = encode(
        {"i": pa.array([1, None, -2], pa.int32()), "t": pa.array(["a", None, "é"])},
        ["int4", "text"],
    )
    assert data == (
        b"\x00\x02" + field(b"\x00\x00\x00\x01") + field(b"a")
        + b"\x00\x02" + NULL + NULL
        + b"\x00\x02" + field(b"\xff\xff\xff\xfe") + field(b"\xc3\xa9")
    )  # fmt: skip


@pytest.mark.parametrize(
    ("arrow", "pg_type", "value", "payload"),
    [
        (pa.int16(), "int2", -32768, b"\x80\x00"),
        (pa.int16(), "int2", 32767, b"\x7f\xff"),
        (pa.int64(), "int2", 258, b"\x01\x02"),
        (pa.int64(), "int4", -1, b"\xff\xff\xff\xff"),
        (pa.int32(), "int8", 2**31 - 1, b"\x00\x00\x00\x00\x7f\xff\xff\xff"),
        (pa.int64(), "int8", -2, b"\xff" * 7 + b"\xfe"),
        (pa.float64(), "float8", 1.5, b"\x3f\xf8" + bytes(6)),
        (pa.float64(), "float8", -2.0, b"\xc0\x00" + bytes(6)),
        (pa.float32(), "float8", 1.5, b"\x3f\xf8" + bytes(6)),
        (pa.float32(), "float4", 1.5, b"\x3f\xc0\x00\x00"),
        (pa.bool_(), "bool", True, b"\x01"),
        (pa.bool_(), "bool", False, b"\x00"),
        (pa.date32(), "date", dt.date(2000, 1, 2), b"\x00\x00\x00\x01"),
        (pa.date32(), "date", dt.date(1999, 12, 31), b"\xff\xff\xff\xff"),
        (pa.date32(), "date", dt.date(1970, 1, 1), (-10957).to_bytes(4, "big", signed=True)),
        (
            pa.timestamp("us", "UTC"),
            "timestamptz",
            dt.datetime(2000, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc),
            (1_000_000).to_bytes(8, "big"),
        ),
        (
            pa.timestamp("us", "UTC"),
            "timestamptz",
            dt.datetime(2000, 1, 1, 1, 0, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            (-3_600_000_000 + 1).to_bytes(8, "big", signed=True),
        ),
        (
            pa.timestamp("us"),
            "timestamp",
            dt.datetime(1999, 12, 31, 23, 59, 59, 999999),
            (-1).to_bytes(8, "big", signed=True),
        ),
        (
            pa.timestamp("s"),
            "timestamp",
            dt.datetime(2000, 1, 1, 0, 1),
            (60_000_000).to_bytes(8, "big"),
        ),
        (pa.string(), "varchar", "ab", b"ab"),
        (pa.large_string(), "text", "x", b"x"),
        (pa.string(), "json", '{"a":1}', b'{"a":1}'),
        (pa.string(), "jsonb", "{}", b"\x01{}"),  # jsonb's binary form: version 1, then text
        (pa.binary(), "bytea", b"\x00\xff", b"\x00\xff"),
        (pa.binary(), "bytea", b"", b""),
        (pa.string(), "text", "", b""),
    ],
)
def test_one_value(arrow, pg_type, value, payload):
    data = encode({"c": pa.array([value], arrow)}, [pg_type])
    assert data == b"\x00\x01" + field(payload)


@pytest.mark.parametrize(
    ("arrow", "pg_type"),
    [
        (pa.int32(), "int4"),
        (pa.float64(), "float8"),
        (pa.bool_(), "bool"),
        (pa.date32(), "date"),
        (pa.timestamp("us", "UTC"), "timestamptz"),
        (pa.string(), "jsonb"),
        (pa.binary(), "bytea"),
    ],
)
def test_null_is_length_minus_one_without_payload(arrow, pg_type):
    assert encode({"c": pa.array([None], arrow)}, [pg_type]) == b"\x00\x01" + NULL


def test_a_sliced_batch_encodes_only_its_rows():
    batch = pa.record_batch(
        {
            "i": pa.array([1, None, -2], pa.int64()),
            "t": pa.array(["a", None, "é"], pa.large_string()),
            "y": pa.array([b"\x00\x01", b"", None]),
        }
    )
    encoder = PgBinaryEncoder.create(batch.schema, ["t", "i", "y"], ["varchar", "int8", "bytea"])
    assert encoder.encode(batch.slice(1)) == (
        b"\x00\x03" + NULL + NULL + field(b"")
        + b"\x00\x03" + field(b"\xc3\xa9") + field(b"\xff" * 7 + b"\xfe") + NULL
    )  # fmt: skip
    assert encoder.encode(batch.slice(0, 0)) == b""


def test_integer_overflow_raises_instead_of_wrapping():
    with pytest.raises(pa.ArrowInvalid, match="3000000000 not in range"):
        encode({"c": pa.array([3_000_000_000], pa.int64())}, ["int4"])


@pytest.mark.parametrize(
    ("arrow", "pg_types"),
    [
        (pa.int64(), ["numeric"]),  # no exact binary form here: the CSV path takes it
        (pa.float64(), ["float4"]),  # would round
        (pa.string(), ["bpchar"]),
        (pa.int32(), ["text"]),
        (pa.string(), ["int4"]),
        (pa.int64(), ["int8", "int8"]),  # one type per column
    ],
)
def test_no_binary_encoder_without_an_exact_mapping(arrow, pg_types):
    schema = pa.schema([("c", arrow)])
    assert PgBinaryEncoder.create(schema, ["c"], pg_types) is None
