"""Which column type changes a staged apply lets through: only those that keep every value."""

from __future__ import annotations

import pytest

from xasink.tables.retyping import keeps_values

KEEPS = [
    ("postgres", "integer", "bigint"),
    ("postgres", "smallint", "integer"),
    ("postgres", "real", "double precision"),
    ("postgres", "character varying(10)", "character varying(20)"),
    ("postgres", "character varying(10)", "text"),
    ("postgres", "numeric(10,2)", "numeric(12,2)"),
    ("postgres", "numeric(10,2)", "numeric"),
    ("mysql", "int(11)", "bigint(20)"),
    ("mysql", "int", "int(11)"),
    ("mysql", "int(10) unsigned", "bigint(20)"),
    ("mysql", "float", "double"),
    ("mysql", "decimal(10,2)", "decimal(11,3)"),
    (
        "mysql",
        "varchar(10) character set utf8mb4 collate x",
        "varchar(20) character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "varchar(10) character set utf8mb4 collate x",
        "text character set utf8mb4 collate x",
    ),
    ("mysql", "float(7,3)", "double"),
    (
        "mysql",
        "tinytext character set utf8mb4 collate x",
        "varchar(255) character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "varchar(63) character set utf8mb4 collate x",
        "tinytext character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "varchar(255) character set latin1 collate y",
        "tinytext character set latin1 collate y",
    ),
    (
        "mysql",
        "varchar(16383) character set utf8mb4 collate x",
        "text character set utf8mb4 collate x",
    ),
    ("mysql", "tinytext character set utf8mb4 collate x", "text character set utf8mb4 collate x"),
]
CHANGES = [
    ("postgres", "double precision", "bigint"),
    ("postgres", "timestamp with time zone", "date"),
    ("postgres", "timestamp with time zone", "timestamp without time zone"),
    ("postgres", "bigint", "integer"),
    ("postgres", "character varying(20)", "character varying(10)"),
    ("postgres", "numeric(10,2)", "numeric(10,3)"),
    ("postgres", "text", "character varying(10)"),
    ("mysql", "double", "bigint(20)"),
    ("mysql", "datetime", "date"),
    ("mysql", "datetime(6)", "datetime"),
    ("mysql", "int unsigned", "int"),
    ("mysql", "int", "int unsigned"),
    (
        "mysql",
        "varchar(100) character set utf8mb4 collate x",
        "tinytext character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "varchar(10) character set utf8mb4 collate x",
        "varchar(20) character set latin1 collate y",
    ),
    ("mysql", "enum('a','b')", "enum('a')"),
    # A VARCHAR's length counts characters, a TEXT's bytes: 255 ASCII characters of a
    # tinytext do not fit in 64, nor 65535 of a latin1 text in 16384.
    (
        "mysql",
        "tinytext character set utf8mb4 collate x",
        "varchar(64) character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "text character set latin1 collate y",
        "varchar(16384) character set latin1 collate y",
    ),
    (
        "mysql",
        "tinytext character set utf8mb4 collate x",
        "varchar(254) character set utf8mb4 collate x",
    ),
    # 64 four-byte characters are 256 bytes, one more than a tinytext holds.
    (
        "mysql",
        "varchar(64) character set utf8mb4 collate x",
        "tinytext character set utf8mb4 collate x",
    ),
    (
        "mysql",
        "varchar(256) character set latin1 collate y",
        "tinytext character set latin1 collate y",
    ),
    ("mysql", "varchar(10) character set weird collate z", "text character set weird collate z"),
    ("mysql", "float", "double(5,1)"),
]


@pytest.mark.parametrize(("dialect", "old", "new"), KEEPS)
def test_a_widening_keeps_every_value(dialect, old, new):
    assert keeps_values(dialect, old, new)


@pytest.mark.parametrize(("dialect", "old", "new"), CHANGES)
def test_a_change_that_can_alter_a_value_is_refused(dialect, old, new):
    assert not keeps_values(dialect, old, new)
