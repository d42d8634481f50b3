"""An `order` column the table stores must hold the DataFrame's values exactly.

A change applies only over a stored row whose order is lower, and the comparison runs on
the values as the table's column holds them. A column coarser than the data (a DATETIME or
timestamp(0) for Spark's microseconds, a FLOAT for longs, a decimal of smaller scale) rounds
or truncates two different orders to one, or swaps them, and a newer change was skipped as
"stale". Such a column is refused before anything is written, by name, with the type that
holds the values; a column that holds them keeps working.

Every test reads the rows back with psycopg/pymysql and checks the exact contents, and that
no prepared branch or staging table is left.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from decimal import Decimal

import pytest
from support import (
    connection_args,
    file_stream,
    json_files,
    run_sql,
    stage_tables,
    xasink_prepared,
    xasink_stream,
    xasink_writer,
)

from xasink import SchemaMismatchError, foreach_batch, transaction, write_xa

T = dt.datetime(2024, 1, 1, 10, 0, 0)
SEED = (1, "seed", T - dt.timedelta(hours=1))
#: The review's three changes of key 1, each newer than the one before.
NEWER = [("a", 0.6), ("b", 0.9), ("c", 1.3)]
UPSERT = {"mode": "upsert", "key": "id", "order": "ts"}
MERGE = {"mode": "merge", "key": "id", "op": "op", "order": "ts"}


def _table(db, ts_type: str) -> str:
    name = f"prec_{uuid.uuid4().hex[:10]}"
    run_sql(
        db, f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(20), ts {ts_type})", admin=False
    )
    return name


def _rows(db, table: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in run_sql(db, f"SELECT id, v, ts FROM {table} ORDER BY id")]


def _clean(db) -> None:
    assert xasink_prepared(db) == [] and stage_tables(db) == []


def _refusal(column: str, holds: str) -> str:
    """What the refusal must say: the column, then the type that holds the values."""
    return rf"(?s)column '{column}'.*Make it {re.escape(holds)},"


@pytest.mark.mysql_ci  # MySQL rounds fractional seconds, MariaDB truncates
def test_a_timestamp_order_column_without_microseconds_is_refused_by_every_entry(
    spark, db, tmp_path
):
    """The review's table: a @ .6 s, b @ .9 s, c @ 1.3 s into PostgreSQL timestamp(0) (which
    rounds) or MySQL DATETIME (which rounds; MariaDB's truncates). Before, b (and on
    PostgreSQL c) was skipped as stale. Now every entry refuses the column before it
    writes anything."""
    coarse, holds = (
        ("timestamp(0)", "timestamp(6)") if db.kind == "postgres" else ("DATETIME", "DATETIME(6)")
    )
    table = _table(db, coarse)
    run_sql(
        db, f"INSERT INTO {table} VALUES (1, 'seed', '{SEED[2]:%Y-%m-%d %H:%M:%S}')", admin=False
    )
    seeded = _rows(db, table)
    login = connection_args(db)
    pattern = _refusal("ts", holds)

    def change(v: str, seconds: float, op: str = "u"):
        ts = T + dt.timedelta(seconds=seconds)
        return spark.createDataFrame(
            [(1, v, ts, op)], "id int, v string, ts timestamp_ntz, op string"
        )

    for v, seconds in NEWER:
        with pytest.raises(SchemaMismatchError, match=pattern):
            write_xa(change(v, seconds).drop("op"), table=table, **UPSERT, **login)
        assert _rows(db, table) == seeded
    write = foreach_batch(table=table, sink_id=f"prec-{uuid.uuid4().hex[:6]}", **MERGE, **login)
    with pytest.raises(SchemaMismatchError, match=pattern):
        write(change("b", 0.9, "d"), 0)
    with pytest.raises(SchemaMismatchError, match=pattern), transaction(**login) as tx:
        tx.write(change("b", 0.9).drop("op"), table, **UPSERT)
    with pytest.raises(Exception, match=pattern):
        xasink_writer(
            change("b", 0.9),
            db,
            table,
            **{"xasink.mode": "merge", "key": "id", "op": "op", "order": "ts"},
        ).save()
    json_files(tmp_path / "in", [[{"id": 1, "v": "b", "ts": "2024-01-01T10:00:00.900", "op": "u"}]])
    stream = file_stream(spark, tmp_path / "in", "id int, v string, ts timestamp_ntz, op string")
    query = (
        xasink_stream(stream, db, table, tmp_path / "cp")
        .option("xasink.mode", "merge")
        .option("key", "id")
        .option("op", "op")
        .option("order", "ts")
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception, match=pattern):
        query.awaitTermination(300)
    assert _rows(db, table) == seeded
    _clean(db)


#: kind → (PostgreSQL type, MySQL type, Spark type, the type the refusal names (PostgreSQL,
#: MySQL), the stored row's order and a newer one that the coarse column cannot tell apart).
LOSSY = {
    "float-for-longs": ("real", "FLOAT", "long", ("bigint", "BIGINT"), (2**24, 2**24 + 1)),
    "double-for-longs": (
        "double precision",
        "DOUBLE",
        "long",
        ("bigint", "BIGINT"),
        (2**53, 2**53 + 1),
    ),
    "decimal-scale": (
        "numeric(12,2)",
        "DECIMAL(12,2)",
        "decimal(12,3)",
        ("numeric(13,3)", "DECIMAL(13,3)"),
        (Decimal("1.001"), Decimal("1.004")),
    ),
    "double-in-decimal": (
        "numeric",
        "DECIMAL(30,10)",
        "double",
        ("double precision", "DOUBLE"),
        (0.30000000000000004, 0.3000000000000001),
    ),
}


@pytest.mark.mysql_ci
@pytest.mark.parametrize("kind", LOSSY)
@pytest.mark.ci_one_server  # make test: each type on one of the two servers
def test_an_order_column_that_rounds_the_values_is_refused(spark, db, kind):
    """FLOAT/real for longs (2^24 + 1 is stored as 2^24), a double for longs beyond 2^53
    (2^53 + 1 is stored as 2^53), a decimal of smaller scale (1.001 and 1.004 both become
    1.00), a double in a decimal (DECIMAL(30,10) rounds; PostgreSQL's numeric keeps 15
    digits of a double parameter): a newer change would tie with the stored row. write_xa
    and format("xasink") refuse the column."""
    pg_type, mysql_type, spark_type, holds, (old, new) = LOSSY[kind]
    postgres = db.kind == "postgres"
    table = f"prec_{uuid.uuid4().hex[:10]}"
    column_type = pg_type if postgres else mysql_type
    run_sql(
        db,
        f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20), n {column_type})",
        admin=False,
    )
    run_sql(db, f"INSERT INTO {table} VALUES (1, 'seed', {old})", admin=False)
    seeded = run_sql(db, f"SELECT id, v, n FROM {table}")
    pattern = _refusal("n", holds[0] if postgres else holds[1])
    login = connection_args(db)
    schema = f"id int, v string, n {spark_type}, op string"
    with pytest.raises(SchemaMismatchError, match=pattern):
        rows = [(1, "new", new, "u")]
        write_xa(
            spark.createDataFrame(rows, schema).drop("op"),
            table=table,
            mode="upsert",
            key="id",
            order="n",
            **login,
        )
    with pytest.raises(Exception, match=pattern):
        rows = [(1, "new", new, "d")]
        options = {"xasink.mode": "merge", "key": "id", "op": "op", "order": "n"}
        xasink_writer(spark.createDataFrame(rows, schema), db, table, **options).save()
    assert run_sql(db, f"SELECT id, v, n FROM {table}") == seeded
    _clean(db)


#: kind → (PostgreSQL type, MySQL type, Spark type, orders of key 1 in write order: each
#: newer than the one before by less than a coarser column keeps, then a replay of the second).
EXACT = {
    "timestamp": (
        "timestamp(6)",
        "DATETIME(6)",
        "timestamp_ntz",
        [T + dt.timedelta(seconds=s) for s in (0.6, 0.9, 1.3)],
    ),
    "decimal": (
        "numeric(12,3)",
        "DECIMAL(12,3)",
        "decimal(12,3)",
        [Decimal("1.001"), Decimal("1.004"), Decimal("1.005")],
    ),
}


@pytest.mark.mysql_ci
@pytest.mark.parametrize("kind", EXACT)
@pytest.mark.ci_one_server  # make test: each type on one of the two servers
def test_an_order_column_that_holds_the_values_keeps_every_newer_change(spark, db, kind):
    """timestamp(6) / DATETIME(6) for Spark's microseconds, a decimal of the frame's scale:
    the review's three changes apply, each over the one before (none stale), and a replay
    of the second (older than the third) is skipped and counted."""
    pg_type, mysql_type, spark_type, orders = EXACT[kind]
    table = _table(db, pg_type if db.kind == "postgres" else mysql_type)
    login = connection_args(db)
    steps = [("a", orders[0], 0, "a"), ("b", orders[1], 0, "b"), ("c", orders[2], 0, "c")]
    for v, order, stale, stored in [*steps, ("b", orders[1], 1, "c")]:
        df = spark.createDataFrame([(1, v, order)], f"id int, v string, ts {spark_type}")
        assert write_xa(df, table=table, **UPSERT, **login).stale == stale
        expected = orders[[s[3] for s in steps].index(stored)]
        assert _rows(db, table) == [(1, stored, expected)]
    _clean(db)


#: A string order column compared by code point, trailing spaces too, on each
#: MySQL-protocol server: MySQL's binary NO PAD collation, MariaDB's.
NO_PAD_BIN = {"mysql": "utf8mb4_0900_bin", "mariadb": "utf8mb4_nopad_bin"}


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_string_order_column_whose_collation_equates_strings_is_refused(spark, mysql_family):
    """MySQL and MariaDB compare strings by the column's collation, and the default ones
    ignore case and accents: 'a' and 'A' would be one order, and the newer change skipped
    as a replay. Such a column is refused before anything is written, naming it and a
    binary collation; one with a binary collation is taken."""
    db, login = mysql_family, connection_args(mysql_family)
    for column in ("VARCHAR(20)", "VARCHAR(20) COLLATE utf8mb4_unicode_ci", "CHAR(20)"):
        table = _table(db, column)
        run_sql(db, f"INSERT INTO {table} VALUES (1, 'seed', 'a')", admin=False)
        df = spark.createDataFrame([(1, "new", "A")], "id int, v string, ts string")
        with pytest.raises(SchemaMismatchError, match=r"(?s)column 'ts'.*COLLATE utf8mb4_bin"):
            write_xa(df, table=table, **UPSERT, **login)
        assert _rows(db, table) == [(1, "seed", "a")], column
    for collation in ("utf8mb4_bin", NO_PAD_BIN["mysql" if db.kind == "mysql" else "mariadb"]):
        table = _table(db, f"VARCHAR(20) COLLATE {collation}")  # by code point: taken
        run_sql(db, f"INSERT INTO {table} VALUES (1, 'seed', 'a')", admin=False)
        df = spark.createDataFrame([(1, "new", "A")], "id int, v string, ts string")
        assert write_xa(df, table=table, **UPSERT, **login).stale == 1  # 'A' < 'a'
        df = spark.createDataFrame([(1, "new", "b")], "id int, v string, ts string")
        assert write_xa(df, table=table, **UPSERT, **login).stale == 0
        assert _rows(db, table) == [(1, "new", "b")]
    _clean(db)


def _collation_apart_from_default(db) -> str:
    """A deterministic collation that ranks 'a' and 'B' the other way from the database's
    default (a linguistic one puts 'a' first, code points 'B')."""
    if db.kind == "postgres":
        linguistic_default = run_sql(db, "SELECT 'a' < 'B'")[0][0]
        return 'COLLATE "C"' if linguistic_default else 'COLLATE "und-x-icu"'
    return f"COLLATE {NO_PAD_BIN['mysql' if db.kind == 'mysql' else 'mariadb']}"


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_string_order_ranks_alike_within_a_write_and_across_writes(spark, db):
    """Within a write the newest change of a key is chosen by the same comparison as
    across writes, the order column's own collation: two changes of one key, written
    together or one after the other, leave the same row. PostgreSQL: 'a' and 'B', which
    a linguistic collation and code points rank apart; MySQL and MariaDB: 'a' and 'a ',
    which a binary NO PAD column keeps apart (the staging table's own collation did not:
    the write was refused as two changes of one order)."""
    table = _table(db, f"VARCHAR(20) {_collation_apart_from_default(db)}")
    login = connection_args(db)
    first, second = ("a", "B") if db.kind == "postgres" else ("a", "a ")
    # Which of the two the column itself takes for the newer, asked of the server.
    run_sql(
        db, f"INSERT INTO {table} VALUES (2, 'x', '{first}'), (3, 'y', '{second}')", admin=False
    )
    newest = run_sql(db, f"SELECT id FROM {table} ORDER BY ts DESC")[0][0]
    run_sql(db, f"DELETE FROM {table}", admin=False)
    changes = {"x": (1, "x", first), "y": (1, "y", second)}
    winner = changes["x" if int(newest) == 2 else "y"]
    schema = "id int, v string, ts string"
    both = spark.createDataFrame(list(changes.values()), schema)
    assert write_xa(both, table=table, **UPSERT, **login).stale == 0
    assert _rows(db, table) == [winner]
    (loser,) = set(changes.values()) - {winner}
    assert (
        write_xa(spark.createDataFrame([loser], schema), table=table, **UPSERT, **login).stale == 1
    )
    assert _rows(db, table) == [winner]
    _clean(db)


def test_a_string_order_column_whose_collation_equates_strings_is_refused_on_postgres(
    spark, postgres
):
    """PostgreSQL: a nondeterministic collation (ICU's, case-insensitive here) takes 'a'
    and 'A' for equal, and character(n) ignores trailing spaces: refused, naming the
    column; text with a deterministic collation is taken."""
    db = postgres
    run_sql(
        db,
        "CREATE COLLATION IF NOT EXISTS xasink_test_ci (provider = icu, locale = "
        "'und-u-ks-level2', deterministic = false)",
    )
    login = connection_args(db)
    for column in ("VARCHAR(20) COLLATE xasink_test_ci", "CHARACTER(20)"):
        table = _table(db, column)
        df = spark.createDataFrame([(1, "new", "A")], "id int, v string, ts string")
        with pytest.raises(SchemaMismatchError, match=r"(?s)column 'ts'.*deterministic"):
            write_xa(df, table=table, **UPSERT, **login)
        assert _rows(db, table) == [], column
    _clean(db)
