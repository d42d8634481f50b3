"""`xasink.transaction`: several tables of one database under one decision.

Parent and child tables with a foreign key, written in one transaction on both write paths
(small frames written by the driver, large ones by tasks): every table changes, or none;
the apply runs parents first whatever the order of the writes; a child row without its
parent fails the whole transaction; an exception in the block, or a failed write the block
swallowed, leaves nothing; a driver killed before the decision leaves nothing once
recovered, and one killed after it is finished whole by `xasink recover`; a reader polling
both tables never sees one changed without the other. Rows are read with psycopg/pymysql;
nothing may be left prepared or staged.
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Iterator

import pytest
from support import (
    KV_SCHEMA,
    WatchedDriver,
    assert_clean,
    assert_exactly,
    cli,
    connection_args,
    contents,
    events_df,
    ids_in,
    job_states,
    journaled,
    kill_driver_at,
    mode_case,
    new_table,
    old_contents,
    run_sql,
    seeded_table,
    sink_mark,
    xasink_cli,
)

import xasink
from xasink import (
    CommitProperties,
    InputDataError,
    Transaction,
    WriterProperties,
    transaction,
    write_xa,
)
from xasink._testing.faults import Fault, injected
from xasink._testing.statements import recorded

#: The protocol's own code, the same on both servers: make test runs each case on one of
#: them by turns (the servers' own behaviour has tests of its own), make test-full on both.
pytestmark = pytest.mark.ci_one_server

#: write_xa's keywords that make the driver write a small frame, or tasks write every one.
PATHS = {
    "driver": {},
    "tasks": {"writer_properties": WriterProperties(driver_write_bytes=0, max_branches=2)},
}
#: A failed job's row: small writes held for one local transaction leave none at all.
ENDED = {"driver": None, "tasks": "aborted"}
CUSTOMERS = 40
ORDERS = 3  # per customer


@contextlib.contextmanager
def failing_transaction(point: str, db) -> Iterator[Transaction]:
    """A `transaction()` into `db` whose driver fails at the fault point `point`; the
    block's error is expected, and the test then checks what the failure left."""
    with (
        pytest.raises(Exception),  # noqa: B017
        injected(Fault(point, "raise")),
        transaction(**connection_args(db)) as tx,
    ):
        yield tx


@contextlib.contextmanager
def refused_transaction(db, match: str, **options: object) -> Iterator[Transaction]:
    """A `transaction()` into `db` (with `options`) that must end in a ConfigurationError
    matching `match`."""
    with (
        pytest.raises(xasink.ConfigurationError, match=match),
        transaction(**connection_args(db), **options) as tx,
    ):
        yield tx


def _tables(db) -> tuple[str, str]:
    """A parent table and a child table whose rows must reference a parent row."""
    suffix = uuid.uuid4().hex[:10]
    parent, child = f"cu_{suffix}", f"od_{suffix}"
    run_sql(
        db,
        f"CREATE TABLE {parent} (id BIGINT PRIMARY KEY, name VARCHAR(64))",
        f"CREATE TABLE {child} (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        f"amount DOUBLE PRECISION, FOREIGN KEY (customer_id) REFERENCES {parent} (id))",
        admin=False,
    )
    return parent, child


def _frames(spark, first: int = 0, customers: int = CUSTOMERS):
    ids = range(first, first + customers)
    parents = spark.createDataFrame([(i, f"c{i}") for i in ids], "id long, name string")
    children = spark.createDataFrame(
        [(i * ORDERS + k, i, float(k)) for i in ids for k in range(ORDERS)],
        "id long, customer_id long, amount double",
    )
    for df in (parents, children):
        df.cache().count()  # Spark knows the size: a small frame goes through the driver
    return parents, children


def _expected(first: int = 0, customers: int = CUSTOMERS) -> tuple[list[int], list[int]]:
    ids = list(range(first, first + customers))
    return ids, sorted(i * ORDERS + k for i in ids for k in range(ORDERS))


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
@pytest.mark.parametrize("path", list(PATHS))
def test_a_parent_and_child_table_commit_together(spark, db, path):
    """The child is written first: the catalog's foreign key, not the order of the
    writes, puts the parent's rows in before the child's. One job, committed."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    with transaction(**connection_args(db)) as tx:
        tx.write(children, child, **PATHS[path])
        tx.write(parents, parent, mode="upsert", key="id", **PATHS[path])
    result = tx.result
    assert result is not None and result.outcome == "committed"
    assert [w.rows for w in result.writes] == [CUSTOMERS * ORDERS, CUSTOMERS]
    assert result.rows == CUSTOMERS * (ORDERS + 1)
    want_parents, want_children = _expected()
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert job_states(db)[result.job_id] == "committed"
    assert_clean(db)


@pytest.mark.parametrize("path", list(PATHS))
def test_an_exception_in_the_block_leaves_nothing(spark, db, path):
    parent, child = _tables(db)
    parents, children = _frames(spark)
    with (
        pytest.raises(ValueError, match="changed my mind"),
        transaction(**connection_args(db)) as tx,
    ):
        tx.write(parents, parent, **PATHS[path])
        tx.write(children, child, **PATHS[path])
        raise ValueError("changed my mind")
    assert ids_in(db, parent) == [] and ids_in(db, child) == []
    assert job_states(db).get(tx.job_id) == ENDED[path]
    assert_clean(db)


@pytest.mark.parametrize("path", list(PATHS))
def test_a_child_row_without_its_parent_fails_the_whole_transaction(spark, db, path):
    """Customer 7 is missing from the parents: the child's apply is refused by the foreign
    key, and the parents' rows, applied first in the same transaction, go with it."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    parents = parents.where("id <> 7")
    with (
        pytest.raises(InputDataError, match="refused the rows") as caught,
        transaction(**connection_args(db)) as tx,
    ):
        tx.write(parents, parent, **PATHS[path])
        tx.write(children, child, **PATHS[path])
    assert caught.value.job_id == tx.job_id
    if path == "driver":  # small appends: loaded straight into their tables, never staged
        assert "staging table" not in str(caught.value)
    assert ids_in(db, parent) == [] and ids_in(db, child) == []
    assert job_states(db).get(tx.job_id) == ENDED[path]
    assert_clean(db)


def test_a_failed_write_swallowed_by_the_block_still_commits_nothing(spark, db):
    parent, child = _tables(db)
    parents, _ = _frames(spark)
    bad = spark.createDataFrame([(1, "x")], "id long, nonsense string")
    with refused_transaction(db, "committed nothing") as tx:
        tx.write(parents, parent)
        with pytest.raises(xasink.XasinkError):
            tx.write(bad, child)
    assert ids_in(db, parent) == [] and ids_in(db, child) == []
    assert_clean(db)


def test_one_table_written_twice_is_refused(spark, db):
    parent, _ = _tables(db)
    parents, _ = _frames(spark)
    with refused_transaction(db, "written twice") as tx:
        tx.write(parents.where("id < 10"), parent)
        tx.write(parents.where("id >= 10"), parent)
    assert ids_in(db, parent) == []
    assert_clean(db)


@pytest.mark.parametrize("point", ["before_decision", "before_finish"])
def test_a_driver_failing_around_the_decision_leaves_all_or_nothing(spark, db, point):
    """A failure before the decision aborts everything; one after it (the finish never
    ran) leaves a decided job that `xasink recover` applies whole."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    with failing_transaction(point, db) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(children, child, **PATHS["tasks"])
    decided = point == "before_finish"
    assert ids_in(db, parent) == [] and ids_in(db, child) == []
    assert job_states(db)[tx.job_id] == ("committing" if decided else "aborted")
    # Scoped to the transaction's second table, which its job row does not name.
    done = cli(db, "--grace", "0", "--table", child)
    assert done.returncode == 0, done.stdout + done.stderr
    want_parents, want_children = _expected() if decided else ([], [])
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert job_states(db)[tx.job_id] == ("committed" if decided else "aborted")
    assert_clean(db)


@pytest.mark.mariadb11_ci
def test_a_reader_never_sees_one_table_changed_without_the_other(spark, db):
    """Transactions add 10 customers with their orders, one after another, while a reader
    counts both tables in one statement: every count it sees is a whole number of
    transactions in both tables, and the same number in each."""
    parent, child = _tables(db)
    seen: list[tuple[int, int]] = []
    stop = threading.Event()

    def read() -> None:
        with db.connect() as conn:
            cursor = conn.cursor()
            if db.kind != "postgres":
                cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                conn.autocommit(True)
            else:
                conn.autocommit = True
            while not stop.is_set():
                cursor.execute(
                    f"SELECT (SELECT COUNT(*) FROM {parent}), (SELECT COUNT(*) FROM {child})"
                )
                seen.append(tuple(int(v) for v in cursor.fetchone()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for batch in range(6):
            parents, children = _frames(spark, first=batch * 10, customers=10)
            path = PATHS["tasks" if batch % 2 else "driver"]
            with transaction(**connection_args(db)) as tx:
                tx.write(parents, parent, **path)
                tx.write(children, child, **path)
    finally:
        stop.set()
        reader.join(30)
    torn = [(p, c) for p, c in seen if c != p * ORDERS or p % 10]
    assert torn == [], f"the reader saw tables changed apart: {torn[:5]}"
    assert len({p for p, _ in seen}) > 2, "the reader did not read during the commits"
    assert ids_in(db, parent) == list(range(60))
    assert_clean(db)


def test_per_branch_appends_take_appends_only(spark, db):
    parent, _ = _tables(db)
    parents, _ = _frames(spark)
    with refused_transaction(db, "appends only", per_branch_appends=True) as tx:
        tx.write(parents, parent, mode="upsert", key="id")
    with transaction(**connection_args(db), per_branch_appends=True) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
    assert ids_in(db, parent) == list(range(CUSTOMERS))
    assert_clean(db)


def test_a_lone_write_xa_is_unchanged_beside_transactions(spark, db):
    """A transaction's staged plans beside write_xa's own: both apply, in decision order."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    write_xa(parents, table=parent, **connection_args(db), mode="upsert", key="id")
    with transaction(**connection_args(db)) as tx:
        tx.write(children, child, mode="upsert", key="id")
    assert ids_in(db, child) == _expected()[1]
    assert_clean(db)


#: Where a driver is killed: before anything is decided (the small writes' one local
#: transaction, or the tasks' branches prepared), or after the decision.
KILLS = [
    pytest.param("driver", "before_local_commit", marks=pytest.mark.ci_postgres),
    pytest.param("tasks", "after_first_commit", marks=pytest.mark.full_only),
    pytest.param("tasks", "before_finish", marks=pytest.mark.ci_postgres),
]


def _killed_at(
    db,
    parent: str,
    child: str,
    path: str,
    point: str,
    sink: str = "",
    env: dict[str, str] | None = None,
) -> None:
    """transaction_driver.py into `parent` and `child` of `db` on `path` (with `sink`, as
    "<sink id>:<batch id>" of a stream; `env`: more of its environment), SIGKILLed with its
    whole process group once it reaches `point`."""
    args = [db.jdbc_url, db.user, parent, child, point, path, *([sink] if sink else [])]
    driver = WatchedDriver("transaction_driver.py", args, db.password, env or {})
    try:
        assert driver.wait_for(f"XASINK-FAULT {point}"), driver.tail()
    finally:
        driver.kill()


@pytest.mark.parametrize(("path", "point"), KILLS)
def test_a_driver_killed_then_recovered_leaves_all_or_nothing(db, path, point):
    """SIGKILL of the driver's whole process group, then `xasink recover`: both tables
    whole once the decision was recorded, else both untouched."""
    parent, child = _tables(db)
    _killed_at(db, parent, child, path, point)
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    decided = point in ("after_first_commit", "before_finish")
    want_parents, want_children = _expected() if decided else ([], [])
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert_clean(db)


def _assert_replay_skipped(
    db, parent: str, child: str, sink: str, env: dict[str, str] | None = None
) -> None:
    """Batch 0 of `sink` replayed by a new transaction_driver.py (tasks path, `env`: more of
    its environment) ends well and reports the batch skipped whole."""
    replay = WatchedDriver(
        "transaction_driver.py",
        [db.jdbc_url, db.user, parent, child, "none", "tasks", f"{sink}:0"],
        db.password,
        env or {},
    )
    assert replay.finish() == 0, replay.tail()
    final = [ln for ln in replay.output if ln.startswith("RESULT ")]
    assert final and json.loads(final[-1][7:])["skipped"], replay.tail()


@pytest.mark.ci_postgres
@pytest.mark.full_only  # make test runs test_participants' fan-out to two tables and a database
def test_a_stream_batch_fanned_out_to_two_tables_is_written_once(db):
    """A foreachBatch fan-out: the batch's driver is killed after its decision, and the
    batch replayed by a new driver is skipped whole, the first run's rows finished by the
    replay's own recovery."""
    parent, child = _tables(db)
    sink = f"fanout-{uuid.uuid4().hex[:8]}"
    _killed_at(db, parent, child, "tasks", "before_finish", f"{sink}:0")
    _assert_replay_skipped(db, parent, child, sink)
    want_parents, want_children = _expected()
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert sink_mark(db, sink)[0] == 0
    assert_clean(db)


@pytest.mark.parametrize("fail", [False, True])
def test_a_large_write_after_small_ones_takes_them_into_its_two_phases(spark, db, fail):
    """Two small writes are held for one local transaction; a large third one registers
    the job, and the held two become its driver-written branches. All three commit as one,
    or, when the block fails after them, none."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    extra = f"ex_{uuid.uuid4().hex[:10]}"
    run_sql(db, f"CREATE TABLE {extra} (id BIGINT PRIMARY KEY, name VARCHAR(64))", admin=False)
    with pytest.raises(ValueError) if fail else contextlib.nullcontext():  # noqa: SIM117
        with transaction(**connection_args(db)) as tx:
            tx.write(parents, parent)
            tx.write(children, child, mode="upsert", key="id")
            tx.write(parents, extra, **PATHS["tasks"])
            if fail:
                raise ValueError("after the large write")
    want_parents, want_children = _expected() if not fail else ([], [])
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert ids_in(db, extra) == want_parents
    assert job_states(db)[tx.job_id] == ("aborted" if fail else "committed")
    assert_clean(db)


def test_jobs_lists_an_unfinished_transaction_under_each_of_its_tables(spark, db):
    """Decided, not finished: `xasink jobs --table` finds it under either table, with
    both tables and modes. Once finished (its plan forgotten with its staging tables) it
    is listed under its first table."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    with failing_transaction("before_finish", db) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(children, child, mode="upsert", key="id", **PATHS["tasks"])
    both = ", ".join(journaled(db, t) for t in (parent, child))
    for table in (parent, child):
        listed = xasink_cli(db, "jobs", "--table", table, "--json")
        assert listed.returncode == 1, listed.stderr  # a job needs attention
        (job,) = json.loads(listed.stdout)
        assert (job["job_id"], job["state"]) == (tx.job_id, "committing")
        assert (job["mode"], job["table"]) == ("append,upsert", both)
    assert cli(db, "--grace", "0").returncode == 0
    (job,) = json.loads(xasink_cli(db, "jobs", "--table", parent, "--json").stdout)
    assert (job["job_id"], job["state"]) == (tx.job_id, "committed")
    assert_clean(db)


def test_a_held_merge_counts_the_rows_it_writes_not_the_change_rows_it_skips(spark, db):
    """A small merge of Delta's change feed, held for one local transaction: its
    update_preimage rows never reach the staging table, and its write's rows in the result
    leave them out too, as the job's own count does (and a large write's)."""
    table = seeded_table(db)
    changes = [(i, "u", 7.0, "update_postimage", 3) for i in range(10, 20)]
    changes += [(i, "old", 0.0, "update_preimage", 3) for i in range(10, 20)]
    changes += [(i, "c", 1.0, "insert", 3) for i in range(300, 305)]
    df = spark.createDataFrame(changes, "id long, name string, v double, op string, seq int")
    df.cache().count()  # Spark knows the size: held for the one local transaction
    with transaction(**connection_args(db)) as tx:
        tx.write(df, table, mode="merge", key="id", op="op", order="seq")
    expected = old_contents() | {i: ("u", 7.0) for i in range(10, 20)}
    assert contents(db, table) == expected | {i: ("c", 1.0) for i in range(300, 305)}
    assert tx.ended is not None and tx.ended.end.writer == "driver"
    assert tx.ended.end.rows == 15
    assert tx.result is not None
    assert (tx.result.rows, [w.rows for w in tx.result.writes]) == (15, [15])
    assert_clean(db)


@pytest.mark.mysql_ci
@pytest.mark.mariadb11_ci
def test_small_appends_load_their_tables_directly_parents_first(spark, db):
    """A transaction of small appends only loads each table itself, in one local
    transaction: no temporary staging table, no apply. The child is written first: the
    catalog's foreign key puts the parent's rows in first."""
    parent, child = _tables(db)
    parents, children = _frames(spark)
    with recorded() as sent, transaction(**connection_args(db)) as tx:
        tx.write(children, child)
        tx.write(parents, parent)
    assert tx.result is not None and tx.result.outcome == "committed"
    assert [w.rows for w in tx.result.writes] == [CUSTOMERS * ORDERS, CUSTOMERS]
    assert [s for s, _ in sent if "TEMPORARY TABLE" in s.upper()] == []
    want_parents, want_children = _expected()
    assert ids_in(db, parent) == want_parents
    assert ids_in(db, child) == want_children
    assert job_states(db)[tx.result.job_id] == "committed"
    assert_clean(db)


def test_its_direct_appends_come_after_an_older_decided_overwrite(spark, db):
    """Small appends load straight into their tables, yet in decision order with staged
    jobs: an overwrite decided earlier on the table but not applied (its driver died after
    the decision) is applied first. Appended before it, the rows would be deleted by its
    apply when a recovery run finishes it."""
    table, other = seeded_table(db), new_table(db)
    logs = events_df(spark, 50, 1).cache()
    logs.count()  # Spark knows the size: held for the one local transaction
    kill_driver_at(db, table, "after_decision", mode="overwrite")
    ((older,),) = run_sql(
        db,
        "SELECT job_id FROM xasink_jobs WHERE state = 'committing' AND target_table = "
        f"'{journaled(db, table)}'",
    )
    appended = spark.createDataFrame([(i, "appended", 1.0) for i in range(400, 420)], KV_SCHEMA)
    appended.cache().count()
    with (
        recorded() as sent,
        transaction(
            **connection_args(db), commit_properties=CommitProperties(recover_first=False)
        ) as tx,
    ):
        tx.write(appended, table)
        tx.write(logs, other)
    assert [s for s, _ in sent if "TEMPORARY TABLE" in s.upper()] == []  # loaded directly
    assert cli(db).returncode == 0  # what a recovery run finishes now changes nothing
    states = job_states(db)
    assert (states[older], states[tx.job_id]) == ("committed", "committed")
    _, _, expected = mode_case(spark, "overwrite")
    expected.update({i: ("appended", 1.0) for i in range(400, 420)})
    assert contents(db, table) == expected
    assert_exactly(db, other, range(50))
    assert_clean(db)
