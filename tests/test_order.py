"""`order` across writes: the order column is data, written like any other column where the
table has it, and a change applies only over an older stored row, so that a late change (a
replayed backfill, a late event of a stream) never replaces or deletes a newer one.

Every test reads the rows back with psycopg/pymysql and checks the exact contents, and that
no prepared branch or staging table is left. Each runs both ways a write commits: in one
local transaction (a small frame, most micro-batches) and in two phases (tasks' branches).
"""

from __future__ import annotations

import uuid

import pytest
from support import (
    connection_args,
    json_files,
    run_sql,
    stage_tables,
    start_foreach_stream,
    xasink_prepared,
)

from xasink import WriterProperties, foreach_batch, write_xa

KEYS = 50
#: The two ways a write commits: one local transaction, or two phases through tasks.
PATHS = {
    "one-phase": {},
    "two-phase": {"writer_properties": WriterProperties(driver_write_bytes=0, max_branches=2)},
}
CHANGES = "id long, v string, updated_at long, op string"
ROWS = "id long, v string, updated_at long"


def _table(db) -> str:
    name = f"ord_{uuid.uuid4().hex[:10]}"
    text = "VARCHAR(32)"
    run_sql(
        db,
        f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, v {text}, updated_at BIGINT)",
        admin=False,
    )
    return name


def _rows(db, table: str) -> dict[int, tuple[str, int | None]]:
    rows = run_sql(db, f"SELECT id, v, updated_at FROM {table}")
    return {int(i): (str(v), None if at is None else int(at)) for i, v, at in rows}


def _clean(db) -> None:
    assert xasink_prepared(db) == [] and stage_tables(db) == []


def _changes(spark, changes: list[tuple[int, str, int, str]]):
    return spark.createDataFrame(changes, CHANGES).repartition(2)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
@pytest.mark.parametrize("path", PATHS)
def test_a_late_change_never_replaces_or_deletes_a_newer_row(spark, db, path):
    table = _table(db)
    login, how = connection_args(db), PATHS[path]
    upsert = {"mode": "upsert", "key": "id", "order": "updated_at"}
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    first = spark.createDataFrame([(k, "new", 10) for k in range(KEYS)], ROWS)
    done = write_xa(first, table=table, **upsert, **how, **login)
    assert done.stale == 0
    # The order column is data: stored, not left NULL.
    assert _rows(db, table) == {k: ("new", 10) for k in range(KEYS)}
    # Older changes (5 < 10): updates of half the keys, deletes of the other half. None
    # applies, and each one is counted.
    late = [(k, "late", 5, "u" if k < KEYS // 2 else "d") for k in range(KEYS)]
    done = write_xa(_changes(spark, late), table=table, **merge, **how, **login)
    assert done.stale == KEYS
    assert _rows(db, table) == {k: ("new", 10) for k in range(KEYS)}
    # A late upsert of one key, and a replay of the stored version (same order): skipped.
    again = spark.createDataFrame([(0, "late", 9), (1, "replay", 10)], ROWS)
    assert write_xa(again, table=table, **upsert, **how, **login).stale == 2
    # Newer changes apply, deletes included, next to older ones in the same write.
    mixed = [(k, "newer", 20, "u") for k in range(10)]
    mixed += [(k, "gone", 20, "d") for k in range(10, 20)]
    mixed += [(k, "late", 1, "u") for k in range(20, 30)] + [(99, "fresh", 20, "c")]
    done = write_xa(_changes(spark, mixed), table=table, **merge, **how, **login)
    assert done.stale == 10
    expected = {k: ("newer", 20) for k in range(10)}
    expected |= {k: ("new", 10) for k in range(20, KEYS)} | {99: ("fresh", 20)}
    assert _rows(db, table) == expected
    # A deleted key keeps no order: an older change of it is inserted (docs/modes.md).
    done = write_xa(_changes(spark, [(10, "back", 15, "u")]), table=table, **merge, **how, **login)
    assert done.stale == 0 and _rows(db, table)[10] == ("back", 15)
    _clean(db)


def test_without_the_column_in_the_table_order_decides_within_a_write_only(spark, db):
    """Today's behaviour where the table keeps no order: the highest order per key wins
    within the write, and a later write replaces what is there, whatever its order."""
    table = f"ord_{uuid.uuid4().hex[:10]}"
    run_sql(db, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32))", admin=False)
    login = connection_args(db)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    rows = [(1, "a", 2, "u"), (1, "b", 3, "u"), (2, "c", 9, "u")]
    write_xa(_changes(spark, rows), table=table, **merge, **login)
    assert run_sql(db, f"SELECT id, v FROM {table} ORDER BY id") == [(1, "b"), (2, "c")]
    done = write_xa(_changes(spark, [(2, "older", 1, "u")]), table=table, **merge, **login)
    assert done.stale == 0
    assert run_sql(db, f"SELECT id, v FROM {table} ORDER BY id") == [(1, "b"), (2, "older")]
    _clean(db)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_a_late_batch_of_a_stream_never_undoes_a_newer_one(spark, db, tmp_path):
    """A foreachBatch stream whose second file carries changes older than its first (a
    late partition of the source): the table keeps the newest of each key."""
    table = _table(db)

    def changes(rows: list[tuple[int, str, int, str]]) -> list[dict[str, object]]:
        return [dict(zip(("id", "v", "updated_at", "op"), r, strict=True)) for r in rows]

    late = [(k, "late", 50 + k, "u" if k % 2 else "d") for k in range(20)] + [(20, "b1", 1, "c")]
    json_files(
        tmp_path / "in",
        [
            changes([(k, "b0", 100 + k, "u") for k in range(20)]),
            changes(late),  # older than batch 0's, for every key
            changes([(k, "b2", 200, "d") for k in range(5)]),
        ],
    )
    write = foreach_batch(
        table=table,
        sink_id=f"late-{uuid.uuid4().hex[:6]}",
        mode="merge",
        key="id",
        op="op",
        order="updated_at",
        **connection_args(db),
    )
    query = start_foreach_stream(spark, tmp_path / "in", tmp_path / "cp", write, schema=CHANGES)
    query.awaitTermination(300)
    expected = {k: ("b0", 100 + k) for k in range(5, 20)} | {20: ("b1", 1)}
    assert _rows(db, table) == expected
    _clean(db)
