"""`xasink.transaction` over two databases: PostgreSQL coordinates, MariaDB (or MySQL) takes
part. Customers and their orders (a foreign key) go into PostgreSQL, an audit table into the
other database, under one decision: every table of both databases changes, or none, through
exceptions, failures around the decision, driver kills and unreachable participants; the
participant's own recovery never rolls back what its coordinator decided. Rows are read with
psycopg/pymysql; nothing may be left prepared or staged in either database.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from servers import restart_server, start_mariadb
from support import (
    connection_args,
    ids_in,
    job_states,
    journal_session,
    run_sql,
    sink_mark,
    stage_tables,
    xasink_cli,
)
from test_exactly_once import failed_tasks
from test_protocol import admin_sql
from test_transaction import (
    PATHS,
    _assert_replay_skipped,
    _expected,
    _frames,
    _killed_at,
    _tables,
    failing_transaction,
    refused_transaction,
)

from xasink import CommitError, CommitProperties, JobAbortedError, transaction
from xasink._testing.faults import Fault, InjectedFault, injected

AUDIT_ROWS = 25
CUSTOMERS_LATER = 1000


@pytest.fixture(params=["mariadb", "mysql"])
def other(request: pytest.FixtureRequest):
    """The participant's server (MySQL's case runs once, for its own XA behaviour)."""
    return request.getfixturevalue(request.param)


def _audit(server) -> str:
    table = f"au_{uuid.uuid4().hex[:10]}"
    run_sql(server, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, note VARCHAR(32))", admin=False)
    return table


def _tables_in_both(spark, coordinator, participant) -> tuple[str, str, str, Any, Any]:
    """A parent and a child table in the coordinator's database, an audit table in the
    participant's, and the frames of parents and children: (parent, child, audit, parents,
    children)."""
    parent, child = _tables(coordinator)
    audit = _audit(participant)
    parents, children = _frames(spark)
    return parent, child, audit, parents, children


def _audit_frame(spark, first: int = 0):
    df = spark.createDataFrame(
        [(i, f"n{i}") for i in range(first, first + AUDIT_ROWS)], "id long, note string"
    )
    df.cache().count()
    return df


def _links(server) -> dict[str, str]:
    """Each link row's job and state in this database's journal ({} without the table)."""
    with server.connect() as conn:
        cursor = conn.cursor()
        try:
            cursor.execute("SELECT job_id, role, state FROM xasink_links")
        except Exception:
            return {}
        return {f"{row[0]}:{row[1]}": str(row[2]) for row in cursor.fetchall()}


def _clean(*servers) -> None:
    for server in servers:
        assert server.prepared_transactions() == [], f"{server.kind}: prepared left behind"
        assert stage_tables(server) == [], f"{server.kind}: a staging table left behind"


def _in(server, **extra) -> dict[str, object]:
    return {**connection_args(server), **extra}


@pytest.mark.parametrize("path", list(PATHS))
def test_two_databases_commit_together(spark, postgres, other, path):
    """PostgreSQL's two tables (child written first) and the other database's table: one
    job id in both journals, committed in both, the participant's link done."""
    if other.kind == "mysql" and path == "driver":
        pytest.skip("MySQL's case runs once, on the tasks path")
    parent, child, audit, parents, children = _tables_in_both(spark, postgres, other)
    with transaction(**connection_args(postgres)) as tx:
        tx.write(children, child, **PATHS[path])
        tx.write(_audit_frame(spark), audit, **_in(other, **PATHS[path]))
        tx.write(parents, parent, mode="upsert", key="id", **PATHS[path])
    result = tx.result
    assert result is not None and result.outcome == "committed"
    assert [w.database != "" for w in result.writes] == [False, True, False]
    want_parents, want_children = _expected()
    assert ids_in(postgres, parent) == want_parents
    assert ids_in(postgres, child) == want_children
    assert ids_in(other, audit) == list(range(AUDIT_ROWS))
    assert job_states(postgres)[result.job_id] == "committed"
    assert job_states(other)[result.job_id] == "committed"
    assert _links(postgres)[f"{result.job_id}:participant"] == "done"
    assert f"{result.job_id}:coordinator" in _links(other)
    _clean(postgres, other)


def test_mariadb_coordinates_and_postgresql_takes_part(spark, postgres, mariadb):
    """The roles the other way round: MariaDB's journal decides, PostgreSQL's follows, and
    a decision that never reached PostgreSQL is carried there by recovery from MariaDB."""
    parent, child, audit, parents, children = _tables_in_both(spark, mariadb, postgres)
    with failing_transaction("before_participants", mariadb) as tx:
        tx.write(children, child, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(postgres, **PATHS["tasks"]))
        tx.write(parents, parent, mode="upsert", key="id", **PATHS["tasks"])
    assert ids_in(postgres, audit) == [] and job_states(postgres)[tx.job_id] == "running"
    done = _recover(mariadb, participants=[postgres])
    assert done.returncode == 0, done.stdout + done.stderr
    want_parents, want_children = _expected()
    assert ids_in(mariadb, parent) == want_parents
    assert ids_in(mariadb, child) == want_children
    assert ids_in(postgres, audit) == list(range(AUDIT_ROWS))
    assert (job_states(mariadb)[tx.job_id], job_states(postgres)[tx.job_id]) == ("committed",) * 2
    _clean(postgres, mariadb)


@pytest.mark.parametrize("path", list(PATHS))
def test_an_exception_in_the_block_leaves_nothing_in_either_database(
    spark, postgres, mariadb, path
):
    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    with (
        pytest.raises(RuntimeError, match="changed my mind"),
        transaction(**connection_args(postgres)) as tx,
    ):
        tx.write(parents, parent, **PATHS[path])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS[path]))
        raise RuntimeError("changed my mind")
    assert ids_in(postgres, parent) == [] and ids_in(mariadb, audit) == []
    assert job_states(postgres)[tx.job_id] == "aborted"
    assert job_states(mariadb)[tx.job_id] == "aborted"
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    _clean(postgres, mariadb)


def test_a_task_dying_after_prepare_in_the_participant_keeps_exactly_once(spark, postgres, mariadb):
    """A participant's task attempt dies after its PREPARE (before its message reached the
    driver): Spark retries it, the prepared duplicate is rolled back, each row is in once."""
    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    group = f"xasink-test-{uuid.uuid4().hex[:8]}"
    spark.sparkContext.setJobGroup(group, "xasink test")
    # The coordinator's write has partitions 0 and 1; the participant's, 2 and 3.
    dies = Fault("after_prepare", "exit", partition=3)
    with injected(dies), transaction(**connection_args(postgres)) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    assert failed_tasks(spark, group) == 1, "the injected fault did not fail a task"
    assert ids_in(postgres, parent) == _expected()[0]
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    assert job_states(mariadb)[tx.job_id] == "committed"
    _clean(postgres, mariadb)


def test_the_first_write_goes_to_the_coordinator(spark, postgres, mariadb):
    audit = _audit(mariadb)
    first = (
        "The first write of a transaction goes into its own database (the one "
        "xasink.transaction was given), which records the decision: write there first, then "
        "into the others with tx.write(df, table, database=...)."
    )
    with refused_transaction(postgres, re.escape(first)) as tx:
        tx.write(_audit_frame(spark), audit, **_in(mariadb))
    assert ids_in(mariadb, audit) == []
    _clean(postgres, mariadb)


def _recover(server, *args: str, participants=()):
    """`xasink recover` with grace 0; each participant's password from its own variable."""
    extra: list[str] = []
    for p in participants:
        extra += ["--participant", p.jdbc_url, "--participant-password-env", _password_env(p)]
    return xasink_cli(server, "recover", "--grace", "0", *extra, *args)


def _password_env(server) -> str:
    name = f"XASINK_TEST_{server.kind.upper()}_PASSWORD"
    os.environ[name] = server.password
    return name


@pytest.mark.parametrize("point", ["before_decision", "before_participants", "before_finish"])
def test_a_failure_around_the_decision_is_finished_from_the_coordinator(
    spark, postgres, mariadb, point
):
    """Before the decision: nothing, both jobs aborted by the driver itself. Decided but
    not yet copied to the participant: the participant's own recovery leaves its branches
    prepared (it names the coordinator and the command), recovery from the coordinator
    without the participant says it is missing, and with it finishes everything. Copied
    (the coordinator's finish failed): the participant's own recovery finishes its part."""
    parent, child, audit, parents, children = _tables_in_both(spark, postgres, mariadb)
    with failing_transaction(point, postgres) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
        tx.write(children, child, **PATHS["tasks"])
    decided, copied = point != "before_decision", point == "before_finish"
    assert ids_in(postgres, parent) == [] and ids_in(mariadb, audit) == []
    assert job_states(postgres)[tx.job_id] == ("committing" if decided else "aborted")
    alone = _recover(mariadb)
    if decided and not copied:
        assert alone.returncode == 1, alone.stdout + alone.stderr
        assert f"--url {postgres.jdbc_url.split('?')[0]} --participant" in alone.stdout
        assert len(mariadb.prepared_transactions()) == 2, "a decided branch was touched"
        assert job_states(mariadb)[tx.job_id] == "running"
        ended = xasink_cli(mariadb, "resolve", tx.job_id, "--abandon", "--yes")
        assert ended.returncode == 2 and "from its coordinator" in ended.stderr, ended.stderr
        assert len(mariadb.prepared_transactions()) == 2, "abandoned in the participant alone"
        health = xasink_cli(mariadb, "check", "--grace", "0", "--max-age", "0")
        assert health.returncode == 1 and "silent-job" in health.stdout, health.stdout
        assert "--participant" in health.stdout and "aborts it" not in health.stdout
        # --linked ends only a job whose branch was lost: the coordinator's are prepared.
        linked = xasink_cli(postgres, "resolve", tx.job_id, "--abandon", "--linked", "--yes")
        assert linked.returncode == 2 and "was lost here" in linked.stderr, linked.stderr
        assert job_states(postgres)[tx.job_id] == "committing"
        missing = _recover(postgres)
        assert missing.returncode == 1 and "not given: pass --participant" in missing.stdout
        assert ids_in(mariadb, audit) == []
        pending = xasink_cli(postgres, "check", "--grace", "0")  # ended: past a grace of 0
        assert pending.returncode == 1 and "participant-pending" in pending.stdout
        listed = xasink_cli(postgres, "jobs", "--json")
        blocker = next(j["blocker"] for j in json.loads(listed.stdout) if j["job_id"] == tx.job_id)
        assert "--participant" in blocker, blocker
    else:
        assert alone.returncode == 0, alone.stdout + alone.stderr
    everything = _recover(postgres, participants=[mariadb])
    assert everything.returncode == 0, everything.stdout + everything.stderr
    want_parents, want_children = _expected() if decided else ([], [])
    assert ids_in(postgres, parent) == want_parents
    assert ids_in(postgres, child) == want_children
    assert ids_in(mariadb, audit) == (list(range(AUDIT_ROWS)) if decided else [])
    final = "committed" if decided else "aborted"
    assert job_states(postgres)[tx.job_id] == final
    assert job_states(mariadb)[tx.job_id] == final
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    _clean(postgres, mariadb)


#: Where a driver is killed: before the decision, decided but not yet copied to the
#: participant, or after the coordinator's first commit (copied).
KILLS = [
    pytest.param("before_decision", marks=pytest.mark.full_only),
    "before_participants",
    pytest.param("after_first_commit", marks=pytest.mark.full_only),
]


@pytest.mark.parametrize("point", KILLS)
def test_a_driver_killed_then_recovered_from_the_coordinator(postgres, mariadb, point):
    """SIGKILL of the driver's whole process group, then `xasink recover --participant`:
    the three tables of both databases whole once decided, all untouched otherwise."""
    parent, child = _tables(postgres)
    audit = _audit(mariadb)
    env = {"XASINK_TEST_PARTICIPANT": f"{mariadb.jdbc_url} {audit}"}
    _killed_at(postgres, parent, child, "tasks", point, env=env)
    done = _recover(postgres, participants=[mariadb])
    assert done.returncode == 0, done.stdout + done.stderr
    decided = point != "before_decision"
    want_parents, want_children = _expected() if decided else ([], [])
    assert ids_in(postgres, parent) == want_parents
    assert ids_in(postgres, child) == want_children
    assert ids_in(mariadb, audit) == (list(range(AUDIT_ROWS)) if decided else [])
    job_id = _job_on(mariadb, audit)
    final = "committed" if decided else "aborted"
    assert (job_states(postgres)[job_id], job_states(mariadb)[job_id]) == (final, final)
    assert _links(postgres)[f"{job_id}:participant"] == "done"
    _clean(postgres, mariadb)


def _job_on(server, table: str) -> str:
    """The one job that wrote `table` (its row, read in that database's journal)."""
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT job_id FROM xasink_jobs WHERE target_table LIKE %s", (f"%{table}",))
        rows = cursor.fetchall()
    assert len(rows) == 1, rows
    return str(rows[0][0])


def test_a_participant_unreachable_during_recovery_is_finished_once_reachable(
    spark, postgres, mariadb
):
    """Decided, not yet copied: recovery from the coordinator finishes everything it can
    reach (PostgreSQL's tables), says which participant it could not reach and exits 1;
    the participant's branches stay prepared. Once reachable, it is finished too."""
    tx, parent, audit = _decided_not_delivered(spark, postgres, mariadb)
    closed = mariadb.jdbc_url.replace(f":{mariadb.port}/", f":{_closed_port()}/")
    pw = _password_env(mariadb)
    cut = xasink_cli(
        postgres,
        "recover",
        "--grace",
        "0",
        "--participant",
        closed,
        "--participant-password-env",
        pw,
    )
    assert cut.returncode == 1, cut.stdout + cut.stderr
    assert "action=failed" in cut.stdout and "cannot reach it" in cut.stdout
    assert mariadb.password not in cut.stdout + cut.stderr
    assert ids_in(postgres, parent) == _expected()[0], "the reachable database is finished"
    assert ids_in(mariadb, audit) == [] and len(mariadb.prepared_transactions()) == 2
    assert job_states(postgres)[tx.job_id] == "committed"
    # Ended long ago, but its participant still reads its decision: prune keeps it.
    admin_sql(
        postgres,
        "UPDATE xasink_jobs SET created_at = created_at - INTERVAL '10 days', finished_at = "
        f"finished_at - INTERVAL '10 days' WHERE job_id = '{tx.job_id}'",
    )
    assert xasink_cli(postgres, "prune", "--older-than", "1").returncode == 0
    assert tx.job_id in job_states(postgres), "pruned a job its participant still needs"
    everything = _recover(postgres, participants=[mariadb])
    assert everything.returncode == 0, everything.stdout + everything.stderr
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    assert job_states(mariadb)[tx.job_id] == "committed"
    assert xasink_cli(postgres, "prune", "--older-than", "1").returncode == 0
    assert tx.job_id not in job_states(postgres), "once finished everywhere, it is pruned"
    _clean(postgres, mariadb)


def _decided_not_delivered(spark, postgres, mariadb):
    """A transaction into both databases whose driver failed once the decision was
    recorded, before it reached the participant: (its handle, PostgreSQL's table, the
    participant's table)."""
    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    with failing_transaction("before_participants", postgres) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    return tx, parent, audit


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def restarted_mariadb() -> Iterator[Any]:
    """A throwaway MariaDB of its own (never the shared one): the test crashes it."""
    with start_mariadb() as server:
        if server.source != "local":
            pytest.skip("restarts need a server started from local binaries")
        yield server


def test_a_participant_restarted_between_prepare_and_the_decision(
    spark, postgres, restarted_mariadb
):
    """The participant's server is SIGKILLed and started again after its branches
    prepared: they survive, and the transaction commits in both databases."""
    other = restarted_mariadb
    parent, child, audit, parents, children = _tables_in_both(spark, postgres, other)
    with transaction(**connection_args(postgres)) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(other, **PATHS["tasks"]))
        restart_server(other)
        tx.write(children, child, **PATHS["tasks"])
    assert tx.result is not None and tx.result.outcome == "committed"
    want_parents, want_children = _expected()
    assert ids_in(postgres, parent) == want_parents
    assert ids_in(postgres, child) == want_children
    assert ids_in(other, audit) == list(range(AUDIT_ROWS))
    assert job_states(other)[tx.job_id] == "committed"
    _clean(postgres, other)


def test_the_next_transaction_finishes_what_an_earlier_one_left_in_its_participant(
    spark, postgres, mariadb
):
    """Decided, never copied to the participant: the next transaction into the same two
    databases carries that decision there before it writes, and says so in its result."""
    first, parent, audit = _decided_not_delivered(spark, postgres, mariadb)
    assert ids_in(mariadb, audit) == []
    later, _ = _frames(spark, first=CUSTOMERS_LATER)
    with transaction(**connection_args(postgres)) as tx:
        tx.write(later, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark, first=AUDIT_ROWS), audit, **_in(mariadb))
    assert ids_in(mariadb, audit) == list(range(2 * AUDIT_ROWS))
    assert ids_in(postgres, parent) == _expected()[0] + _expected(CUSTOMERS_LATER)[0]
    assert job_states(mariadb)[first.job_id] == "committed"
    assert _links(postgres)[f"{first.job_id}:participant"] == "done"
    assert tx.result is not None
    assert any(a.job_id == first.job_id and a.action == "committed" for a in tx.result.recovered)
    _clean(postgres, mariadb)


def test_a_stream_batch_fanned_out_to_two_databases_is_written_once(postgres, mariadb):
    """A foreachBatch fan-out into both databases: the driver is killed once the decision
    is recorded but before it reached the participant; the batch replayed by a new driver
    is skipped whole, and that replay carries the first run's decision to the participant."""
    parent, child = _tables(postgres)
    audit = _audit(mariadb)
    sink = f"fanout-{uuid.uuid4().hex[:8]}"
    env = {"XASINK_TEST_PARTICIPANT": f"{mariadb.jdbc_url} {audit}"}
    _killed_at(postgres, parent, child, "tasks", "before_participants", f"{sink}:0", env)
    _assert_replay_skipped(postgres, parent, child, sink, env)
    want_parents, want_children = _expected()
    assert ids_in(postgres, parent) == want_parents
    assert ids_in(postgres, child) == want_children
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    job_id = _job_on(mariadb, audit)
    assert (job_states(postgres)[job_id], job_states(mariadb)[job_id]) == ("committed",) * 2
    assert sink_mark(postgres, sink) == (0, job_id)
    _clean(postgres, mariadb)


def test_a_participant_registered_after_its_coordinator_aborted_is_fenced(
    spark, postgres, mariadb, monkeypatch
):
    """Recovery from the coordinator (grace 0) aborts the job between the coordinator's
    link and the participant's job row: it leaves an aborted row there (a fence), so the
    driver's registration fails, nothing prepares, and the error says to run it again."""
    from xasink.driver import participants

    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    original = participants.links.add_coordinator
    races, registered = [], []

    def recovery_first(*args, **kwargs):
        races.append(_recover(postgres, participants=[mariadb]))
        return original(*args, **kwargs)

    monkeypatch.setattr(participants.links, "add_coordinator", recovery_first)
    with (
        pytest.raises(JobAbortedError, match="aborted by a recovery run"),
        transaction(**connection_args(postgres)) as tx,
    ):
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
        registered.append(True)  # not reached: the registration itself fails
    assert races and "fence" in races[0].stdout, races
    assert registered == []
    assert ids_in(postgres, parent) == [] and ids_in(mariadb, audit) == []
    assert job_states(postgres)[tx.job_id] == "aborted"
    assert job_states(mariadb)[tx.job_id] == "aborted"
    _clean(postgres, mariadb)


@pytest.mark.parametrize("after_row", [False, True], ids=["scan", "row"])
def test_a_participants_failed_first_write_leaves_nothing_waiting(
    spark, postgres, mariadb, monkeypatch, after_row
):
    """Review 4, R5: the participant's Job.begin raises once both links exist (its recovery
    scan, or after its job row): the participant is withdrawn (its row aborted, the link
    done) before the coordinator's job is aborted, so neither `check` nor `recover` on the
    coordinator finds anything waiting; before, the link stayed pending for ever."""
    from xasink.driver import job as job_module
    from xasink.errors import PreflightError

    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    real_scan, real_begin = job_module.recover_table, job_module.Journal.begin_job

    def scan(ops, conn, journal, table, *args, **kwargs):
        if audit in table and not after_row:
            raise PreflightError("an earlier job on the audit table needs attention (test)")
        return real_scan(ops, conn, journal, table, *args, **kwargs)

    def begin_job(journal, conn, job_id, table, *args, **kwargs):
        real_begin(journal, conn, job_id, table, *args, **kwargs)
        if audit in table and after_row:
            raise PreflightError("the participant failed after its job row (test)")

    monkeypatch.setattr(job_module, "recover_table", scan)
    monkeypatch.setattr(job_module.Journal, "begin_job", begin_job)
    with pytest.raises(PreflightError, match="test"), transaction(**_in(postgres)) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    assert job_states(postgres)[tx.job_id] == "aborted"
    assert job_states(mariadb)[tx.job_id] == "aborted"
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    health = xasink_cli(postgres, "check", "--grace", "0")
    assert health.returncode == 0, health.stdout + health.stderr
    recovered = _recover(postgres)
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert ids_in(postgres, parent) == [] and ids_in(mariadb, audit) == []
    _clean(postgres, mariadb)


def _kv(server) -> str:
    """A participant table of one key, which an upsert sets to its transaction's value."""
    table = f"kv_{uuid.uuid4().hex[:10]}"
    run_sql(server, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(16))", admin=False)
    run_sql(server, f"INSERT INTO {table} (id, v) VALUES (1, 'orig')", admin=False)
    return table


def _value(server, table: str) -> str:
    with server.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT v FROM {table} WHERE id = 1")
        return str(cursor.fetchall()[0][0])


def _sets(tx, spark, coordinator, participant, table: str, value: str) -> None:
    """One transaction's writes: a row into the coordinator, then key 1 of the participant's
    table set to `value` (staged upsert, tasks' branches)."""
    rows = spark.createDataFrame([(1, value)], "id long, v string")
    tx.write(rows, _kv(coordinator), mode="upsert", key="id", **PATHS["tasks"])
    tx.write(rows, table, mode="upsert", key="id", **_in(participant, **PATHS["tasks"]))


@pytest.fixture
def job_ids(monkeypatch):
    """The job ids the next transactions take, in order (uuid4's hex otherwise)."""
    from xasink.driver import job as job_module

    given: list[str] = []
    real = job_module.uuid.uuid4

    class Ids:
        @staticmethod
        def uuid4():
            return uuid.UUID(given.pop(0)) if given else real()

    monkeypatch.setattr(job_module, "uuid", Ids)
    return given


def _decided_in_reverse(spark, postgres, mariadb, table: str, job_ids, tag: str):
    """T1 and T2 set `table`'s key, both decided, neither copied to the participant: T2
    begins first and its id (ending in `tag`) sorts first, T1 is decided first."""
    job_ids += ["0" * 31 + tag, tag * 32]
    with failing_transaction("before_participants", postgres) as second:
        _sets(second, spark, postgres, mariadb, table, "T2")
        with failing_transaction("before_participants", postgres) as first:
            _sets(first, spark, postgres, mariadb, table, "T1")
    return first, second


def test_recovery_carries_decisions_to_a_participant_in_decision_order(
    spark, postgres, mariadb, job_ids
):
    """Review 4, R1: two transactions decided in the coordinator, neither copied to the
    participant; the one decided last has the smaller job id. Recovery from the coordinator
    carries them in decision order, so the participant's key holds the last decision's value
    (it took them in job-id order before: the older value won, with no error)."""
    table = _kv(mariadb)
    first, second = _decided_in_reverse(spark, postgres, mariadb, table, job_ids, "1")
    assert [job_states(postgres)[t.job_id] for t in (first, second)] == ["committing"] * 2
    assert second.job_id < first.job_id
    assert _value(mariadb, table) == "orig"
    done = _recover(postgres, participants=[mariadb])
    assert done.returncode == 0, done.stdout + done.stderr
    assert _value(mariadb, table) == "T2"
    assert set(job_states(mariadb).values()) >= {"committed"}
    _clean(postgres, mariadb)


def test_the_next_transaction_carries_earlier_decisions_in_decision_order(
    spark, postgres, mariadb, job_ids
):
    """Two transactions decided in the coordinator, neither copied to the participant, the
    one decided last with the smaller job id; a third one's first write there finishes both
    (`settle_left`) before its own: both end committed there, the key with the last
    decision's value (with the earlier one only copied, the later one's apply waited for it
    and was left, unreported, until a recovery)."""
    table = _kv(mariadb)
    first, second = _decided_in_reverse(spark, postgres, mariadb, table, job_ids, "2")
    with transaction(**_in(postgres)) as third:
        third.write(_audit_frame(spark), _audit(postgres), **PATHS["tasks"])
        third.write(_audit_frame(spark), _audit(mariadb), **_in(mariadb, **PATHS["tasks"]))
    assert _value(mariadb, table) == "T2"
    for tx in (first, second, third):
        assert job_states(mariadb)[tx.job_id] == "committed", tx.job_id
        assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    done = _recover(postgres, participants=[mariadb])
    assert done.returncode == 0, done.stdout + done.stderr
    _clean(postgres, mariadb)


def test_a_driver_carries_an_earlier_decision_before_its_own(spark, postgres, mariadb):
    """T2 enlists the participant, then T1 (begun later) decides first and fails to copy its
    decision there; T2 decides next. Its driver carries T1's decision into the participant
    before its own, so the participant ends with T2's value, as the coordinator's order has
    it (before, T2 applied first and a later recovery applied T1 over it)."""
    table = _kv(mariadb)
    with transaction(**_in(postgres)) as second:
        _sets(second, spark, postgres, mariadb, table, "T2")
        with failing_transaction("before_participants", postgres) as first:
            _sets(first, spark, postgres, mariadb, table, "T1")
        assert job_states(postgres)[first.job_id] == "committing"
    assert job_states(mariadb)[first.job_id] == "committed", "not carried before T2's"
    assert _value(mariadb, table) == "T2"
    done = _recover(postgres, participants=[mariadb])
    assert done.returncode == 0, done.stdout + done.stderr
    assert _value(mariadb, table) == "T2"
    _clean(postgres, mariadb)


@pytest.mark.parametrize("driver", ["alive", "killed"])
def test_an_earlier_decision_waiting_on_a_later_jobs_branches_does_not_stall_it(
    spark, postgres, mariadb, driver
):
    """Review 4, R1's settling: T2 (per_branch_appends) prepares rows in a participant
    table; T1, begun later, upserts ten of those keys there, decides first and fails to copy
    its decision. Carrying T1 first, before T2, applies T1 while T2's prepared rows hold the
    keys it upserts, which only T2's commit releases (before: T2's driver raised CommitError
    after a lock wait timeout, and recovery waited the same way for good, T2 behind T1).
    T1's decision is now copied first (the participant keeps the coordinator's order) and
    applied once T2's branches let go: by T2's driver, or, when that died too, by one run
    of recovery. As in one database, a per-branch append's rows are in the table from its
    prepare, and an upsert decided before them but applied after changes them."""
    table = _audit(mariadb)
    renamed = spark.createDataFrame([(i, "T1") for i in range(10)], "id long, note string")
    waits = CommitProperties(lock_wait_timeout=3)
    options = _in(postgres, per_branch_appends=True, commit_properties=waits)
    with contextlib.ExitStack() as stack:
        if driver == "killed":
            stack.enter_context(pytest.raises(InjectedFault))
            stack.enter_context(injected(Fault("before_participants", "raise")))
        second = stack.enter_context(transaction(**options))
        second.write(_audit_frame(spark), _audit(postgres), **PATHS["tasks"])
        second.write(_audit_frame(spark), table, **_in(mariadb, **PATHS["tasks"]))
        with failing_transaction("before_participants", postgres) as first:
            first.write(_audit_frame(spark), _audit(postgres), **PATHS["tasks"])
            first.write(renamed, table, mode="upsert", key="id", **_in(mariadb))
    done = _recover(postgres, "--lock-wait", "3", participants=[mariadb])
    assert done.returncode == 0, done.stdout + done.stderr
    assert ids_in(mariadb, table) == list(range(AUDIT_ROWS))
    with mariadb.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id FROM {table} WHERE note = 'T1' ORDER BY id")
        assert [row[0] for row in cursor.fetchall()] == list(range(10))
    for server in (postgres, mariadb):
        assert {job_states(server)[t.job_id] for t in (first, second)} == {"committed"}
    assert {_links(postgres)[f"{t.job_id}:participant"] for t in (first, second)} == {"done"}
    _clean(postgres, mariadb)


def test_a_winner_lost_in_a_participant_is_ended_there_and_the_transaction_closed(
    spark, postgres, mariadb
):
    """Review 4, R3: a decided winner of the participant is rolled back behind xasink's back
    (MariaDB with the binlog can lose one in a crash). Recovery says what each database
    holds and the command that ends it; `resolve --abandon --linked` ends it there (before:
    refused, and nothing else could), and recovery from the coordinator then closes the
    transaction, saying that the databases disagree. Nothing is left pending or prepared."""
    from xasink.protocol.branches import BranchOps

    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    with failing_transaction("before_participants", postgres) as tx:
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    with journal_session(mariadb) as (spec, _, journal), BranchOps(spec, journal) as ops:
        lost = next(b for b, _ in ops.prepared() if b.job_id == tx.job_id)
    xid = f"X'{lost.xid.gtrid.hex()}',X'{lost.xid.bqual.hex()}',{lost.xid.format_id}"
    admin_sql(mariadb, f"XA ROLLBACK {xid}")
    stuck = _recover(postgres, participants=[mariadb])
    assert stuck.returncode == 1 and "action=LOST" in stuck.stdout, stuck.stdout
    assert "nothing of it was applied here" in stuck.stdout
    assert f"xasink resolve {tx.job_id} --abandon --linked" in stuck.stdout
    assert ids_in(postgres, parent) == _expected()[0]  # the coordinator's part is in
    refused = xasink_cli(mariadb, "resolve", tx.job_id, "--abandon", "--yes")
    assert refused.returncode == 2 and "--linked" in refused.stderr, refused.stderr
    ended = xasink_cli(mariadb, "resolve", tx.job_id, "--abandon", "--linked", "--yes")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert job_states(mariadb)[tx.job_id] == "abandoned"
    closed = _recover(postgres, participants=[mariadb])
    assert closed.returncode == 0, closed.stdout + closed.stderr
    assert "the databases disagree" in closed.stdout and "--linked" in closed.stdout
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    for server in (postgres, mariadb):
        health = xasink_cli(server, "check", "--grace", "0")
        assert health.returncode == 0, f"{server.kind}: {health.stdout}"
    assert ids_in(mariadb, audit) == []
    _clean(postgres, mariadb)


def test_a_winner_lost_in_the_coordinator_leaves_the_decision_standing(spark, postgres, mariadb):
    """A stream's batch: the decision reached the participant, which committed its part,
    then the coordinator's winner was rolled back behind xasink's back. `resolve --abandon
    --linked` against the coordinator ends its part there and must not turn the decision
    over (before: the job was aborted there and the sink's mark put back, so the replayed
    batch wrote the participant's committed rows again). The decision stands: the batch
    stays written, its replay is skipped, the participant keeps its rows once."""
    from xasink.protocol.branches import BranchOps

    parent, _, audit, parents, _ = _tables_in_both(spark, postgres, mariadb)
    sink = f"lost-{uuid.uuid4().hex[:8]}"
    stream = {"sink_id": sink, "batch_id": 0}
    with (
        pytest.raises(Exception),  # noqa: B017
        injected(Fault("after_first_commit", "raise")),
        transaction(**connection_args(postgres), **stream) as tx,
    ):
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    assert _recover(mariadb).returncode == 0  # the participant finishes its copied part
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    with journal_session(postgres) as (spec, _, journal), BranchOps(spec, journal) as ops:
        lost = next(b for b, _ in ops.prepared() if b.job_id == tx.job_id)
    admin_sql(postgres, f"ROLLBACK PREPARED '{lost.xid}'")
    stuck = _recover(postgres, participants=[mariadb])
    assert stuck.returncode == 1 and "action=LOST" in stuck.stdout, stuck.stdout
    ended = xasink_cli(postgres, "resolve", tx.job_id, "--abandon", "--linked", "--yes")
    assert ended.returncode == 0, ended.stdout + ended.stderr
    assert "The decision stands" in ended.stdout, ended.stdout
    assert job_states(postgres)[tx.job_id] == "abandoned"
    assert sink_mark(postgres, sink) == (0, tx.job_id), "the decided batch was put back"
    with transaction(**connection_args(postgres), **stream) as replay:
        replay.write(parents, parent, **PATHS["tasks"])
        replay.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    assert replay.result is not None and replay.result.skipped
    closed = _recover(postgres, participants=[mariadb])
    assert closed.returncode == 0, closed.stdout + closed.stderr
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    assert ids_in(postgres, parent) == []  # staged: the apply never ran
    assert job_states(mariadb)[tx.job_id] == "committed"
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    for server in (postgres, mariadb):
        health = xasink_cli(server, "check", "--grace", "0")
        assert health.returncode == 0, f"{server.kind}: {health.stdout}"
    _clean(postgres, mariadb)


def test_a_participants_refused_apply_after_the_decision_waits_decided_for_a_person(
    spark, postgres, mariadb
):
    """The coordinator's tables are committed when the participant's table refuses its
    rows (a CHECK constraint): the participant's job is not aborted (that would leave the
    databases disagreeing) but stays decided, the error says so and names the command;
    once the constraint is mended, recovery applies it there too."""
    parent, _ = _tables(postgres)
    audit = f"au_{uuid.uuid4().hex[:10]}"
    run_sql(
        mariadb,
        f"CREATE TABLE {audit} (id BIGINT PRIMARY KEY, note VARCHAR(32), "
        f"CONSTRAINT {audit}_small CHECK (id < 10))",
        admin=False,
    )
    parents, _ = _frames(spark)
    with (
        pytest.raises(CommitError, match="--participant") as error,
        transaction(**connection_args(postgres)) as tx,
    ):
        tx.write(parents, parent, **PATHS["tasks"])
        tx.write(_audit_frame(spark), audit, **_in(mariadb, **PATHS["tasks"]))
    assert "do not run the write again" in str(error.value).lower()
    assert ids_in(postgres, parent) == _expected()[0]
    assert ids_in(mariadb, audit) == []
    assert job_states(mariadb)[tx.job_id] == "committing"
    run_sql(mariadb, f"ALTER TABLE {audit} DROP CONSTRAINT {audit}_small", admin=False)
    done = _recover(mariadb)
    assert done.returncode == 0, done.stdout + done.stderr
    assert ids_in(mariadb, audit) == list(range(AUDIT_ROWS))
    assert job_states(mariadb)[tx.job_id] == "committed"
    # The coordinator learns it with the participant's URL, and lets the link go.
    assert _links(postgres)[f"{tx.job_id}:participant"] == "pending"
    settled = _recover(postgres, participants=[mariadb])
    assert settled.returncode == 0, settled.stdout + settled.stderr
    assert _links(postgres)[f"{tx.job_id}:participant"] == "done"
    _clean(postgres, mariadb)
