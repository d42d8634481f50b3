"""`order` across writes: the order column is data, written like any other column where the
table has it, and a change applies only over an older stored row, so that a late change (a
replayed backfill, a late event of a stream) never replaces or deletes a newer one.

Every test reads the rows back with psycopg/pymysql and checks the exact contents, and that
no prepared branch or staging table is left. Each runs both ways a write commits: in one
local transaction (a small frame, most micro-batches) and in two phases (tasks' branches).
"""

from __future__ import annotations

import logging
import re
import uuid

import pytest
from support import (
    connection_args,
    job_states,
    json_files,
    own_journal_schema,
    run_sql,
    stage_tables,
    start_foreach_stream,
    xasink_prepared,
)

from xasink import CommitProperties, PreflightError, WriterProperties, foreach_batch, write_xa
from xasink.spec import TableRef

KEYS = 50
#: The two ways a write commits: one local transaction, or two phases through tasks.
PATHS = {
    "one-phase": {},
    "two-phase": {"writer_properties": WriterProperties(driver_write_bytes=0, max_branches=2)},
}
# MySQL 9.7 and MariaDB 11.8 run the two-phase path in CI: both paths apply with the same SQL
# (make test-mysql and make test-mariadb11 run both).
CI_PATHS = [
    pytest.param(
        path, marks=[pytest.mark.mysql_ci, pytest.mark.mariadb11_ci] * (path == "two-phase")
    )
    for path in PATHS
]
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


def _frame(spark, rows: list[tuple[object, ...]], schema: str, path: str):
    """`rows` as `path` writes them: cached, so that Spark knows its size and the driver
    writes it in one local transaction; or in two partitions, written by tasks."""
    df = spark.createDataFrame(rows, schema)
    if path != "one-phase":
        return df.repartition(2)
    df = df.cache()
    df.count()
    return df


#: Who writes each path's frames (`WriteResult.writer`).
WRITERS = {"one-phase": "driver", "two-phase": "tasks"}


@pytest.mark.parametrize("path", CI_PATHS)
@pytest.mark.ci_one_server  # make test: each path on one of the two servers
def test_a_late_change_never_replaces_or_deletes_a_newer_row(spark, db, path):
    table = _table(db)
    login, how = connection_args(db), PATHS[path]
    upsert = {"mode": "upsert", "key": "id", "order": "updated_at", **how, **login}
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **how, **login}

    def stale(rows: list[tuple[object, ...]], **mode: object) -> int:
        schema = CHANGES if mode["mode"] == "merge" else ROWS
        done = write_xa(_frame(spark, rows, schema, path), table=table, **mode)
        assert done.writer == WRITERS[path]
        return done.stale

    assert stale([(k, "new", 10) for k in range(KEYS)], **upsert) == 0
    # The order column is data: stored, not left NULL.
    assert _rows(db, table) == {k: ("new", 10) for k in range(KEYS)}
    # Older changes (5 < 10): updates of half the keys, deletes of the other half. None
    # applies, and each one is counted.
    late = [(k, "late", 5, "u" if k < KEYS // 2 else "d") for k in range(KEYS)]
    assert stale(late, **merge) == KEYS
    assert _rows(db, table) == {k: ("new", 10) for k in range(KEYS)}
    # A late upsert of one key, and a replay of the stored version (same order): skipped.
    assert stale([(0, "late", 9), (1, "replay", 10)], **upsert) == 2
    # Newer changes apply, deletes included, next to older ones in the same write.
    mixed = [(k, "newer", 20, "u") for k in range(10)]
    mixed += [(k, "gone", 20, "d") for k in range(10, 20)]
    mixed += [(k, "late", 1, "u") for k in range(20, 30)] + [(99, "fresh", 20, "c")]
    assert stale(mixed, **merge) == 10
    expected = {k: ("newer", 20) for k in range(10)}
    expected |= {k: ("new", 10) for k in range(20, KEYS)} | {99: ("fresh", 20)}
    assert _rows(db, table) == expected
    # A deleted key keeps its order: an older change of it stays deleted, a newer one
    # inserts it again.
    assert stale([(10, "back", 15, "u"), (11, "back", 21, "u")], **merge) == 1
    assert _rows(db, table) == expected | {11: ("back", 21)}
    _clean(db)


def _tombstones_table(db, table: str) -> str | None:
    """The table keeping the order of `table`'s deleted keys, as the journal's list names
    it (None: not listed, or no list)."""
    listed = (
        "SELECT to_regclass('xasink_tombstones') IS NOT NULL"
        if db.kind == "postgres"
        else "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        "AND TABLE_NAME = 'xasink_tombstones'"
    )
    if not run_sql(db, listed, admin=False)[0][0]:
        return None
    sql = f"SELECT tomb_table FROM xasink_tombstones WHERE target_name = '{table}'"
    named = run_sql(db, sql, admin=False)
    return str(named[0][0]) if named else None


def _tombstones(db, table: str) -> dict[int, int]:
    """The deleted keys of `table` whose order xasink keeps: id -> order ({}: none)."""
    tombs = _tombstones_table(db, table)
    rows = run_sql(db, f"SELECT id, xasink_order FROM {tombs}", admin=False) if tombs else []
    return {int(i): int(o) for i, o in rows}


@pytest.mark.parametrize("path", CI_PATHS)
@pytest.mark.ci_one_server  # make test: each path on one of the two servers
def test_a_late_change_never_brings_a_newer_delete_back(spark, db, path):
    """Rows at order 10, deleted at 20, then late changes of the same keys at 15 (inserts
    and updates, as a stream delivering late or a replayed backfill sends them): the rows
    stay deleted and each change counts as stale. Changes at 25 bring them back."""
    table = _table(db)
    login, how = connection_args(db), PATHS[path]
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **how, **login}

    def changes(rows: list[tuple[int, str, int, str]]) -> int:
        done = write_xa(_frame(spark, rows, CHANGES, path), table=table, **merge)
        assert done.writer == WRITERS[path]
        return done.stale

    assert changes([(k, "new", 10, "c") for k in range(KEYS)]) == 0
    assert _rows(db, table) == {k: ("new", 10) for k in range(KEYS)}
    assert changes([(k, "", 20, "d") for k in range(KEYS)]) == 0 and _rows(db, table) == {}
    assert changes([(k, "late", 15, "u" if k % 2 else "c") for k in range(KEYS)]) == KEYS
    assert _rows(db, table) == {}
    # A replay of the deletes (the same order) and older deletes: stale, the order stays.
    assert changes([(k, "", 20 if k % 2 else 12, "d") for k in range(KEYS)]) == KEYS
    assert _tombstones(db, table) == {k: 20 for k in range(KEYS)}
    assert changes([(k, "back", 25, "u") for k in range(KEYS)]) == 0
    assert _rows(db, table) == {k: ("back", 25) for k in range(KEYS)}
    assert _tombstones(db, table) == {}
    _clean(db)


def test_a_delete_of_an_absent_key_keeps_its_order(spark, db):
    """A delete of a key the table does not hold is still the newest change of that key: an
    older insert stays out; a newer delete raises the kept order, an older one never lowers
    it. The table is one xasink creates, as a first write finds none."""
    table = f"ord_{uuid.uuid4().hex[:10]}"
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    merge |= connection_args(db)
    done = write_xa(_changes(spark, [(7, "", 30, "d"), (8, "x", 5, "c")]), table=table, **merge)
    assert done.created
    assert done.stale == 0 and _rows(db, table) == {8: ("x", 5)}
    done = write_xa(_changes(spark, [(7, "", 25, "d"), (8, "", 30, "d")]), table=table, **merge)
    assert done.stale == 1 and _rows(db, table) == {}
    assert _tombstones(db, table) == {7: 30, 8: 30}
    done = write_xa(_changes(spark, [(7, "", 40, "d")]), table=table, **merge)
    assert done.stale == 0 and _tombstones(db, table) == {7: 40, 8: 30}
    old = [(7, "old", 39, "c"), (8, "old", 30, "u"), (9, "new", 1, "c")]
    done = write_xa(_changes(spark, old), table=table, **merge)
    assert done.stale == 2 and _rows(db, table) == {9: ("new", 1)}
    done = write_xa(_changes(spark, [(7, "new", 41, "c")]), table=table, **merge)
    assert done.stale == 0 and _rows(db, table) == {7: ("new", 41), 9: ("new", 1)}
    assert _tombstones(db, table) == {8: 30}
    _clean(db)


def test_an_upsert_with_order_never_brings_a_newer_delete_back(spark, db):
    """An upsert with `order` after a merge's deletes: the deletes' order decides, in two
    phases (tasks' branches) as in one transaction."""
    table = _table(db)
    login = connection_args(db)
    upsert = {"mode": "upsert", "key": "id", "order": "updated_at", **login}
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **login}
    write_xa(_changes(spark, [(k, "", 20, "d") for k in range(10)]), table=table, **merge)
    rows = spark.createDataFrame([(k, "late", 15) for k in range(20)], ROWS).repartition(2)
    done = write_xa(rows, table=table, **upsert, **PATHS["two-phase"])
    assert done.stale == 10 and _rows(db, table) == {k: ("late", 15) for k in range(10, 20)}
    rows = spark.createDataFrame([(k, "newer", 25) for k in range(5)], ROWS)
    done = write_xa(rows, table=table, **upsert)
    expected = {k: ("newer", 25) for k in range(5)} | {k: ("late", 15) for k in range(10, 20)}
    assert done.stale == 0 and _rows(db, table) == expected
    # An upsert reads the tombstones and changes none: a stored row speaks for its key.
    assert _tombstones(db, table) == {k: 20 for k in range(10)}
    _clean(db)


def test_two_journals_writing_one_table_keep_one_order_of_its_deletes(spark, db, journal_schema):
    """Two writers of one table, each with its own journal (`journal_schema`): a delete
    made through one keeps its order for the other's changes, both ways. Its tombstones
    live beside the table, one table of them, which each journal lists."""
    table = _table(db)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    a = {**merge, **connection_args(db)}
    b = {**merge, **connection_args(db, journal_schema=journal_schema)}
    write_xa(_changes(spark, [(1, "new", 10, "c"), (2, "new", 10, "c")]), table=table, **a)
    write_xa(_changes(spark, [(1, "", 20, "d")]), table=table, **a)
    write_xa(_changes(spark, [(2, "", 20, "d")]), table=table, **b)
    late = [(1, "late", 15, "u"), (2, "late", 15, "c")]
    assert write_xa(_changes(spark, late), table=table, **b).stale == 2
    assert write_xa(_changes(spark, late), table=table, **a).stale == 2
    assert _rows(db, table) == {}
    # One table of tombstones, beside the target (its own schema), listed by both journals.
    tombs = _tombstones_table(db, table)
    listed = f"SELECT tomb_table FROM {journal_schema}.xasink_tombstones"
    assert run_sql(db, listed, admin=False) == [(tombs,)]
    assert _tombstones(db, table) == {1: 20, 2: 20}
    assert write_xa(_changes(spark, [(1, "back", 25, "u")]), table=table, **b).stale == 0
    assert _rows(db, table) == {1: ("back", 25)} and _tombstones(db, table) == {2: 20}
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
            # older than batch 2's deletes (stays deleted), but for key 4, newer
            changes([(k, "b3", 150, "u") for k in range(4)] + [(4, "b3", 201, "u")]),
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
    expected = {k: ("b0", 100 + k) for k in range(5, 20)} | {20: ("b1", 1), 4: ("b3", 201)}
    assert _rows(db, table) == expected
    _clean(db)


def test_a_login_that_cannot_keep_the_order_of_deletes_is_refused_before_writing(spark, postgres):
    """The table keeping deleted keys' order is made beside the table before anything is
    written. A login that may not create it, or may not write the one another login made,
    is refused with what to grant; nothing is written."""
    db, schemas = postgres, own_journal_schema(postgres)
    schema, name = next(schemas), f"p_{uuid.uuid4().hex[:8]}"
    try:
        table = f"{schema}.{name}"
        ddl = f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32), updated_at BIGINT)"
        run_sql(db, ddl, admin=False)
        login = connection_args(db, journal_schema=schema)
        merge = {"mode": "merge", "key": "id", "op": "op", **login}
        write_xa(_changes(spark, [(1, "a", 10, "c")]), table=table, **merge)  # no order
        jobs = run_sql(db, f"SELECT COUNT(*) FROM {schema}.xasink_jobs")
        # One local transaction: its staging table is temporary, the journal's schema
        # need not take it.
        deletes = _frame(spark, [(1, "", 20, "d")], CHANGES, "one-phase")
        run_sql(db, f"REVOKE CREATE ON SCHEMA {schema} FROM {db.user}")
        with pytest.raises(
            PreflightError, match=f'GRANT CREATE ON SCHEMA "{schema}" TO "{db.user}"'
        ):
            write_xa(deletes, table=table, **merge, order="updated_at")
        run_sql(db, f"GRANT CREATE ON SCHEMA {schema} TO {db.user}")
        from xasink.tables.tombstones import tomb_table  # its name, to make it as another login

        tomb = f"{schema}.{tomb_table(TableRef(name, schema)).name}"
        run_sql(  # made by another login, which grants this one nothing
            db,
            f"CREATE TABLE {tomb} (id BIGINT NOT NULL PRIMARY KEY, xasink_order BIGINT NOT "
            "NULL, xasink_deleted_at TIMESTAMPTZ NOT NULL)",
        )
        with pytest.raises(PreflightError, match="GRANT SELECT, INSERT, UPDATE, DELETE ON"):
            write_xa(deletes, table=table, **merge, order="updated_at")
        assert _rows(db, table) == {1: ("a", 10)}
        assert run_sql(db, f"SELECT COUNT(*) FROM {schema}.xasink_jobs") == jobs
        # An upsert with order only reads the tombstones: SELECT is all it needs.
        run_sql(
            db,
            f"GRANT SELECT ON {tomb} TO {db.user}",
            f"INSERT INTO {tomb} VALUES (2, 30, now())",
        )
        upsert = {"mode": "upsert", "key": "id", "order": "updated_at", **login}
        rows = _frame(spark, [(2, "late", 25), (3, "new", 5)], ROWS, "one-phase")
        assert write_xa(rows, table=table, **upsert).stale == 1
        assert _rows(db, table) == {1: ("a", 10), 3: ("new", 5)}
        run_sql(db, f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tomb} TO {db.user}")
        assert write_xa(deletes, table=table, **merge, order="updated_at").stale == 0
        assert _rows(db, table) == {3: ("new", 5)}
        assert run_sql(db, f"SELECT id, xasink_order FROM {tomb} ORDER BY id") == [(1, 20), (2, 30)]
        _clean(db)
    finally:
        next(schemas, None)


def test_a_table_of_tombstones_dropped_by_hand_never_strands_a_decided_job(spark, db, caplog):
    """Dropped while writers remember it (their preflight checks are kept a while): the
    next apply goes ahead without it, and says so; its deletes then keep no order."""
    table = _table(db)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    merge |= connection_args(db)
    first = write_xa(_changes(spark, [(1, "", 20, "d")]), table=table, **merge)
    run_sql(db, f"DROP TABLE {_tombstones_table(db, table)}", admin=False)
    caplog.set_level(logging.WARNING, logger="xasink")
    done = write_xa(_changes(spark, [(1, "late", 15, "c")]), table=table, **merge)
    assert (done.outcome, done.stale) == ("committed", 0)
    assert _rows(db, table) == {1: ("late", 15)}
    states = job_states(db)  # the journal is shared: this test's own jobs
    assert (states[first.job_id], states[done.job_id]) == ("committed", "committed")
    warned = [r.getMessage() for r in caplog.records if "keeps the order" in r.getMessage()]
    assert len(warned) == 1 and "is gone" in warned[0], warned
    _clean(db)


@pytest.mark.mysql_ci  # its collations
def test_a_key_whose_type_changed_is_checked_against_its_tombstones_again(spark, db, caplog):
    """The check that the table of tombstones holds the key and order is remembered a while
    (preflight's cache), keyed by their types too: once the key widens (INT to BIGINT, with
    a column added, which makes the table described afresh), the next merge checks again
    and is refused before anything is written, naming the table of tombstones. Behind a
    remembered check, a table of tombstones narrowed by hand makes a decided job go on
    without it, saying so, never fail on a value it cannot hold."""
    table = f"ord_{uuid.uuid4().hex[:10]}"
    ddl = f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(32), updated_at BIGINT)"
    run_sql(db, ddl, admin=False)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    merge |= connection_args(db)
    write_xa(_changes(spark, [(1, "", 20, "d")]), table=table, **merge)
    tombs, jobs = _tombstones_table(db, table), len(job_states(db))
    widen = (
        f"ALTER TABLE {table} ALTER COLUMN id TYPE BIGINT, ADD COLUMN note VARCHAR(8)"
        if db.kind == "postgres"
        else f"ALTER TABLE {table} MODIFY id BIGINT NOT NULL, ADD COLUMN note VARCHAR(8)"
    )
    run_sql(db, widen)
    big = 3_000_000_000
    noted = spark.createDataFrame([(big, "", 20, "d", "n")], f"{CHANGES}, note string")
    with pytest.raises(PreflightError, match=tombs):
        write_xa(noted, table=table, **merge)
    assert len(job_states(db)) == jobs and _tombstones(db, table) == {1: 20}
    run_sql(db, f"DROP TABLE {tombs}")  # as the refusal says: made afresh, the next write
    write_xa(noted, table=table, **merge)
    assert _tombstones(db, table) == {big: 20}
    narrow = (
        f"ALTER TABLE {tombs} ALTER COLUMN id TYPE INT"
        if db.kind == "postgres"
        else f"ALTER TABLE {tombs} MODIFY id INT NOT NULL"
    )
    run_sql(db, f"DELETE FROM {tombs}", narrow)
    caplog.set_level(logging.WARNING, logger="xasink")
    done = write_xa(noted, table=table, **merge)  # the check is remembered: no preflight
    assert (done.outcome, done.stale) == ("committed", 0)
    assert _rows(db, table) == {} and _tombstones(db, table) == {}
    warned = [r.getMessage() for r in caplog.records if tombs in r.getMessage()]
    assert len(warned) == 1 and "cannot hold" in warned[0], warned
    _clean(db)


@pytest.mark.mysql_ci
def test_a_key_on_a_prefix_of_a_text_column_upserts_with_order_and_refuses_a_merge(
    spark, mysql_family
):
    """A key MySQL can only index by a prefix (`UNIQUE (id(50))` on TEXT): an upsert with
    `order` writes no tombstone, so it only reads a table of them where one exists, and
    makes none; a merge, whose deletes would leave tombstones keyed like the table, is
    refused before anything is written, with the reason and the remedy."""
    db, table = mysql_family, f"ord_{uuid.uuid4().hex[:10]}"
    ddl = f"CREATE TABLE {table} (id TEXT NOT NULL, v VARCHAR(32), updated_at BIGINT, "
    run_sql(db, ddl + "UNIQUE KEY (id(50)))", admin=False)
    login = connection_args(db)
    upsert = {"mode": "upsert", "key": "id", "order": "updated_at", **login}
    schema = "id string, v string, updated_at long"
    done = write_xa(spark.createDataFrame([("a", "x", 10)], schema), table=table, **upsert)
    assert done.stale == 0
    older = spark.createDataFrame([("a", "old", 5), ("b", "y", 1)], schema)
    assert write_xa(older, table=table, **upsert).stale == 1
    rows = run_sql(db, f"SELECT id, v, updated_at FROM {table} ORDER BY id")
    assert rows == [("a", "x", 10), ("b", "y", 1)]
    assert _tombstones_table(db, table) is None
    jobs = len(job_states(db))
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **login}
    deletes = spark.createDataFrame(
        [("a", "", 20, "d")], "id string, v string, updated_at long, op string"
    )
    with pytest.raises(PreflightError, match=r"prefix.*VARCHAR") as refused:
        write_xa(deletes, table=table, **merge)
    assert "'id'" in str(refused.value) and "GRANT" not in str(refused.value)
    assert len(job_states(db)) == jobs and _tombstones_table(db, table) is None
    assert run_sql(db, f"SELECT id, v, updated_at FROM {table} ORDER BY id") == rows
    _clean(db)


def _index_of(db, tombs: str) -> list[str]:
    """The secondary indexes of a table of tombstones (by when its deletes applied)."""
    if db.kind == "postgres":
        sql = (
            f"SELECT indexname FROM pg_indexes WHERE tablename = '{tombs}' "
            "AND indexdef NOT LIKE '%UNIQUE%'"
        )
    else:
        sql = (
            "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = "
            f"DATABASE() AND TABLE_NAME = '{tombs}' AND INDEX_NAME <> 'PRIMARY'"
        )
    return [str(r[0]) for r in run_sql(db, sql)]


def test_a_missing_index_of_the_tombstones_is_made_again(spark, db):
    """The retention finds old tombstones by when they were deleted, through an index made
    with the table: one missing (a crash between PostgreSQL's CREATE TABLE and CREATE
    INDEX, a DROP by hand) is made again by the next write's check."""
    from xasink.driver.check_cache import CHECKS

    table = _table(db)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    merge |= connection_args(db)
    write_xa(_changes(spark, [(1, "", 20, "d")]), table=table, **merge)
    tombs = _tombstones_table(db, table)
    (index,) = _index_of(db, tombs)
    run_sql(
        db, f"DROP INDEX {index}" if db.kind == "postgres" else f"DROP INDEX {index} ON {tombs}"
    )
    CHECKS.clear()  # as a process that meets the table for the first time
    write_xa(_changes(spark, [(2, "", 20, "d")]), table=table, **merge)
    assert _index_of(db, tombs) == [index] and _tombstones(db, table) == {1: 20, 2: 20}
    _clean(db)


@pytest.mark.mariadb11_ci  # its snapshot isolation
def test_a_lock_held_on_the_tombstones_is_not_taken_for_a_missing_grant(spark, db):
    """A writer's check of the tombstones waits behind another session's lock on them (an
    ALTER or DROP queued there, a LOCK TABLE): it is refused as a wait, with what to do,
    never as a privilege this login lacks; nothing is written."""
    from xasink.driver.check_cache import CHECKS

    table = _table(db)
    merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at"}
    merge |= connection_args(db)
    write_xa(_changes(spark, [(1, "", 20, "d")]), table=table, **merge)
    tombs, jobs = _tombstones_table(db, table), len(job_states(db))
    holder = db.admin_connect()
    try:
        if db.kind == "postgres":
            holder.autocommit = False
            holder.execute(f"LOCK TABLE {tombs} IN ACCESS EXCLUSIVE MODE")
        else:
            holder.cursor().execute(f"LOCK TABLES {tombs} WRITE")
        CHECKS.clear()
        waits = CommitProperties(lock_wait_timeout=2)
        with pytest.raises(PreflightError) as refused:
            write_xa(
                _changes(spark, [(2, "", 20, "d")]), table=table, **merge, commit_properties=waits
            )
    finally:
        holder.close()
    said = str(refused.value)
    assert "lock" in said and "GRANT" not in said and "may not" not in said, said
    assert len(job_states(db)) == jobs and _tombstones(db, table) == {1: 20}
    _clean(db)


@pytest.mark.mysql_ci
def test_a_refusal_names_the_mysql_account_as_the_server_knows_it(spark, mysql_family):
    """A GRANT names an account, user and host: the refusal names the one this login is
    (`CURRENT_USER()`), so that its GRANT can be run as it is."""
    db, schemas = mysql_family, own_journal_schema(mysql_family)
    schema = next(schemas)
    try:
        table = f"{schema}.m_{uuid.uuid4().hex[:8]}"
        ddl = f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32), updated_at BIGINT)"
        run_sql(db, ddl, admin=False)
        login = connection_args(db, journal_schema=schema)
        merge = {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **login}
        deletes = _frame(spark, [(1, "", 20, "d")], CHANGES, "one-phase")
        write_xa(deletes, table=table, **{**merge, "order": None})  # the journal, made
        run_sql(db, f"REVOKE CREATE ON {schema}.* FROM '{db.user}'@'%'")
        grant = f"GRANT CREATE ON `{schema}`.* TO '{db.user}'@'%'"
        with pytest.raises(PreflightError, match=re.escape(grant)):
            write_xa(deletes, table=table, **merge)
        _clean(db)
    finally:
        next(schemas, None)
