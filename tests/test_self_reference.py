"""A table whose foreign key references itself (an org chart: `boss` → `id`), written by
every staged apply: overwrite, upsert, a merge deleting a subtree, and a transaction's
append.

InnoDB checks a foreign key row by row, so on MySQL and MariaDB the apply must insert
parents before their children and delete children before their parents; PostgreSQL checks
at the end of each statement. The rows are given children first and the old chart's
parents have the lowest ids, the order a naive apply trips over. A child whose boss is in
neither the rows nor the table is still refused, with nothing written. Rows are read with
psycopg/pymysql; nothing may be left prepared or staged.
"""

from __future__ import annotations

import uuid

import pytest
from support import connection_args, run_sql, stage_tables

from xasink import InputDataError, PreflightError, WriterProperties, transaction, write_xa

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server

#: write_xa's keywords that make the driver write a small frame, or tasks write every one.
PATHS = {
    "driver": {},
    "tasks": {"writer_properties": WriterProperties(driver_write_bytes=0, max_branches=2)},
}
SCHEMA = "id long, boss long, name string"


def _chart(first: int, size: int, fanout: int = 3) -> list[tuple[int, int | None, str]]:
    """A tree of `size` people from id `first` (its root), children listed first."""
    rows = [
        (first + i, None if i == 0 else first + (i - 1) // fanout, f"p{first + i}")
        for i in range(size)
    ]
    return rows[::-1]


def _table(db, rows: list[tuple[int, int | None, str]]) -> str:
    name = f"org_{uuid.uuid4().hex[:10]}"
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, boss BIGINT, name VARCHAR(32), "
            f"FOREIGN KEY (boss) REFERENCES {name} (id))"
        )
        mark = "%s"
        for row in sorted(rows, key=lambda r: r[0]):  # parents (lower ids) first
            cursor.execute(f"INSERT INTO {name} VALUES ({mark}, {mark}, {mark})", row)
        conn.commit()
    return name


def _contents(db, table: str) -> list[tuple[int, int | None, str]]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id, boss, name FROM {table} ORDER BY id")
        return [(int(i), None if b is None else int(b), str(n)) for i, b, n in cursor.fetchall()]


def _clean(db) -> None:
    assert db.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(db) == [], "a staging table was left behind"


def _frame(spark, rows):
    df = spark.createDataFrame(rows, SCHEMA)
    df.cache().count()  # Spark knows the size: a small frame goes through the driver
    return df


def _write(spark, db, table, rows, path="driver", **options):
    return write_xa(
        _frame(spark, rows), table=table, **connection_args(db), **PATHS[path], **options
    )


@pytest.mark.mysql_ci
@pytest.mark.parametrize("path", list(PATHS))
def test_an_org_chart_is_overwritten_by_another(spark, db, path):
    table = _table(db, _chart(0, 40))
    new = _chart(100, 60)
    assert _write(spark, db, table, new, path, mode="overwrite").rows == len(new)
    assert _contents(db, table) == sorted(new)
    _clean(db)


@pytest.mark.parametrize("path", list(PATHS))
def test_an_upsert_adds_a_subtree_and_moves_people(spark, db, path):
    old = _chart(0, 40)
    table = _table(db, old)
    # New people under person 5, given children first; person 39 moves under a new one.
    added = [*_chart(1000, 30)[:-1], (1000, 5, "p1000")]
    moved = [(39, 1029, "p39")]
    assert _write(spark, db, table, moved + added, path, mode="upsert", key="id").rows == 31
    want = {r[0]: r for r in old} | {r[0]: r for r in added + moved}
    assert _contents(db, table) == sorted(want.values())
    _clean(db)


@pytest.mark.mysql_ci
@pytest.mark.parametrize("path", list(PATHS))
def test_a_merge_deletes_a_subtree(spark, db, path):
    old = _chart(0, 40)
    table = _table(db, old)
    subtree = {1}  # person 1 and everyone under them
    while more := {i for i in range(1, 40) if (i - 1) // 3 in subtree} - subtree:
        subtree |= more
    rows = [(i, None, "", "D") for i in sorted(subtree)] + [(500, 0, "p500", "I")]
    df = spark.createDataFrame(rows, SCHEMA + ", op string")
    df.cache().count()
    write_xa(df, table=table, mode="merge", key="id", op="op", **connection_args(db), **PATHS[path])
    want = [r for r in old if r[0] not in subtree] + [(500, 0, "p500")]
    assert _contents(db, table) == sorted(want)
    _clean(db)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_transaction_appends_a_chart_children_first(spark, db, path):
    table = _table(db, [])
    new = _chart(0, 50)
    with transaction(**connection_args(db)) as tx:
        tx.write(_frame(spark, new), table, **PATHS[path])
    assert tx.result is not None and tx.result.outcome == "committed"
    assert _contents(db, table) == sorted(new)
    _clean(db)


@pytest.mark.parametrize("mode", ["overwrite", "upsert"])
def test_a_child_without_its_boss_is_refused_and_nothing_written(spark, db, mode):
    old = _chart(0, 20)
    table = _table(db, old)
    rows = [*_chart(100, 20), (200, 999, "orphan")]
    with pytest.raises(InputDataError):
        _write(spark, db, table, rows, "tasks", mode=mode, key="id")
    assert _contents(db, table) == sorted(old)
    _clean(db)


def test_a_participant_overwrites_its_org_chart_in_the_coordinators_transaction(
    spark, postgres, mariadb
):
    """The same apply in a participant (where a refusal after the decision would leave the
    job decided and unappliable): MariaDB's chart is overwritten with the coordinator's
    table, in one transaction."""
    chart = _table(mariadb, _chart(0, 40))
    mine = _table(postgres, [])
    new = _chart(100, 60)
    other = connection_args(mariadb)
    with transaction(**connection_args(postgres)) as tx:
        tx.write(_frame(spark, new), mine, **PATHS["tasks"])
        tx.write(_frame(spark, new), chart, mode="overwrite", **other, **PATHS["tasks"])
    assert tx.result is not None and tx.result.outcome == "committed"
    assert _contents(mariadb, chart) == sorted(new) == _contents(postgres, mine)
    _clean(mariadb)
    _clean(postgres)


@pytest.mark.mysql_ci
def test_an_overwrite_without_the_boss_column_still_replaces_the_chart(spark, db):
    """The frame does not name `boss`: the new rows have none, and the old chart, whose
    rows reference each other, is still deleted (unlinked first)."""
    table = _table(db, _chart(0, 40))
    df = spark.createDataFrame([(i, f"n{i}") for i in range(100, 130)], "id long, name string")
    write_xa(df, table=table, mode="overwrite", **connection_args(db), **PATHS["tasks"])
    assert _contents(db, table) == [(i, None, f"n{i}") for i in range(100, 130)]
    _clean(db)


@pytest.mark.mysql_ci
@pytest.mark.parametrize("path", list(PATHS))
def test_an_ordered_upsert_orders_by_the_newest_version_of_each_row(spark, db, path):
    """Person 1's older version reports to 2, its newer one to nobody, and 2 reports to 1:
    only the newest versions are written, so 1 goes in first."""
    table = _table(db, [])
    rows = [(2, 1, "b", 1), (1, 2, "a-old", 1), (1, None, "a", 2)]
    df = spark.createDataFrame(rows, SCHEMA + ", v long")
    df.cache().count()
    options = {"mode": "upsert", "key": "id", "order": "v"}
    write_xa(df, table=table, **options, **connection_args(db), **PATHS[path])
    assert _contents(db, table) == [(1, None, "a"), (2, 1, "b")]
    _clean(db)


@pytest.mark.mysql_ci
def test_a_transactions_second_small_write_overwrites_a_chart(spark, db):
    """Small writes are held for one local transaction; on MySQL the chart's cannot stage
    in a temporary table, so the transaction goes on in two phases from that write."""
    first = f"people_{uuid.uuid4().hex[:10]}"  # no foreign key: its write is held
    with db.connect() as conn:
        conn.cursor().execute(
            f"CREATE TABLE {first} (id BIGINT PRIMARY KEY, boss BIGINT, name VARCHAR(32))"
        )
        conn.commit()
    chart = _table(db, _chart(0, 40))
    new = _chart(100, 60)
    with transaction(**connection_args(db)) as tx:
        tx.write(_frame(spark, new), first)
        tx.write(_frame(spark, new), chart, mode="overwrite")
    assert tx.result is not None and tx.result.outcome == "committed"
    assert _contents(db, chart) == sorted(new) == _contents(db, first)
    _clean(db)


#: A chart whose `boss` is NOT NULL: the root is its own boss, and 3 reports to 2, 2 to 1.
NOT_NULL_CHART = [(1, 1, "p1"), (2, 1, "p2"), (3, 2, "p3")]
#: What each deleting mode writes into it: a new chart children first, or the deletion of
#: 2 and 3 (a parent and its child) with a new person under the root.
DELETING = {
    "overwrite": ([(13, 12, "p13"), (12, 11, "p12"), (11, 11, "p11")], SCHEMA, {}),
    "merge": (
        [(3, 2, "", "D"), (2, 1, "", "D"), (4, 1, "p4", "I")],
        SCHEMA + ", op string",
        {"key": "id", "op": "op"},
    ),
}


def _not_null_table(server) -> str:
    name = f"nn_{uuid.uuid4().hex[:10]}"
    run_sql(
        server,
        f"CREATE TABLE {name} (id BIGINT PRIMARY KEY, boss BIGINT NOT NULL, name VARCHAR(32), "
        f"FOREIGN KEY (boss) REFERENCES {name} (id))",
        *(f"INSERT INTO {name} VALUES ({i}, {b}, '{n}')" for i, b, n in NOT_NULL_CHART),
        admin=False,
    )
    return name


def _deleting_frame(spark, mode: str):
    rows, schema, _ = DELETING[mode]
    df = spark.createDataFrame(rows, schema)
    df.cache().count()
    return df


def _decided(server) -> dict[str, tuple[str, bool]]:
    """Every job of the journal: job id -> (state, whether it was ever decided)."""
    here = "current_schema()" if server.dialect == "postgres" else "DATABASE()"
    journal = "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = 'xasink_jobs' "
    if not run_sql(server, f"{journal} AND table_schema = {here}", admin=False)[0][0]:
        return {}
    rows = run_sql(server, "SELECT job_id, state, decided_at FROM xasink_jobs", admin=False)
    return {str(j): (str(s), d is not None) for j, s, d in rows}


def _refused_before_anything(server, table: str, before: dict, error: BaseException) -> None:
    """No job was decided (none begun, for a write alone), the table is as seeded, and
    nothing is prepared or staged; the refusal names the column and the ways out."""
    decided = {j: s for j, s in _decided(server).items() if j not in before and s[1]}
    assert decided == {}, f"decided, then failed: {type(error).__name__}: {error}"
    assert isinstance(error, PreflightError), f"{type(error).__name__}: {error}"
    assert "boss" in str(error) and "NULL" in str(error) and "PostgreSQL" in str(error)
    assert _contents(server, table) == NOT_NULL_CHART
    _clean(server)


@pytest.mark.parametrize(
    "path",  # MySQL 9.7 and MariaDB 11.8 run the driver's path in CI: the check is in preflight
    [
        pytest.param(p, marks=[pytest.mark.mysql_ci, pytest.mark.mariadb11_ci] * (p == "driver"))
        for p in PATHS
    ],
)
@pytest.mark.parametrize("mode", list(DELETING))
def test_a_not_null_self_reference_is_refused_before_anything_where_rows_are_checked_one_by_one(
    spark, mysql_family, mode, path
):
    """InnoDB cannot delete a parent before its child, nor unlink a NOT NULL reference:
    overwrite and merge (which may delete) are refused before any job exists, instead of
    failing after the decision."""
    db = mysql_family
    table = _not_null_table(db)
    before = _decided(db)
    options = {"mode": mode, **DELETING[mode][2]}
    with pytest.raises(Exception) as caught:
        write_xa(
            _deleting_frame(spark, mode),
            table=table,
            **options,
            **connection_args(db),
            **PATHS[path],
        )
    _refused_before_anything(db, table, before, caught.value)
    assert _decided(db).keys() == before.keys(), "a job was begun"


@pytest.mark.mysql_ci
def test_a_participants_not_null_self_reference_is_refused_before_the_decision(
    spark, postgres, mysql_family
):
    """The participant's overwrite is refused at its write, inside the transaction: the
    transaction ends before its decision in both databases, nothing written anywhere."""
    chart = _not_null_table(mysql_family)
    mine = _table(postgres, [])
    new = _chart(100, 20)
    coordinator, participant = _decided(postgres), _decided(mysql_family)
    with pytest.raises(Exception) as caught, transaction(**connection_args(postgres)) as tx:
        tx.write(_frame(spark, new), mine, **PATHS["tasks"])
        tx.write(
            _deleting_frame(spark, "overwrite"),
            chart,
            mode="overwrite",
            **connection_args(mysql_family),
            **PATHS["tasks"],
        )
    _refused_before_anything(mysql_family, chart, participant, caught.value)
    ended = {j: s for j, s in _decided(postgres).items() if j not in coordinator}
    assert list(ended.values()) == [("aborted", False)]  # the coordinator's, undecided
    assert _contents(postgres, mine) == []
    _clean(postgres)


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("mode", list(DELETING))
def test_postgresql_writes_a_not_null_self_reference(spark, postgres, mode, path):
    """PostgreSQL checks the key at each statement's end: the same writes commit there."""
    table = _not_null_table(postgres)
    options = {"mode": mode, **DELETING[mode][2]}
    write_xa(
        _deleting_frame(spark, mode),
        table=table,
        **options,
        **connection_args(postgres),
        **PATHS[path],
    )
    want = sorted(DELETING["overwrite"][0]) if mode == "overwrite" else [(1, 1, "p1"), (4, 1, "p4")]
    assert _contents(postgres, table) == want
    _clean(postgres)


@pytest.mark.parametrize("path", list(PATHS))
def test_replace_where_replaces_one_chart_and_leaves_the_other(spark, db, path):
    """Two charts in one table; replace_where selects the second, which another of a
    different shape replaces: only its rows are unlinked and deleted (InnoDB checks the
    key row by row), and the first chart keeps every row and every link."""
    first = _chart(0, 40)
    table = _table(db, first + _chart(100, 20))
    new = _chart(100, 30, fanout=2)
    _write(spark, db, table, new, path, mode="overwrite", replace_where="id >= 100")
    assert _contents(db, table) == sorted(first + new)
    _clean(db)


def test_replace_where_on_the_self_reference_is_refused_where_rows_are_checked_one_by_one(
    spark, mariadb
):
    """The apply unlinks the slice's rows (boss = NULL) before its DELETE: a condition on
    the self-reference itself would no longer select them, and the old slice would stay.
    Refused before any job on MariaDB, whatever the column's spelling."""
    table = _table(mariadb, _chart(0, 40) + _chart(100, 20))
    with pytest.raises(PreflightError, match=r"replace_where .*boss.*Nothing was written"):
        _write(
            spark,
            mariadb,
            table,
            _chart(100, 30, fanout=2),
            mode="overwrite",
            replace_where="`Boss` >= 100 OR id = 100",
        )
    assert _contents(mariadb, table) == sorted(_chart(0, 40) + _chart(100, 20))
    _clean(mariadb)
