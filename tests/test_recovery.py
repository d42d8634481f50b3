"""Driver crashes, recovery, XAER_NOTA and foreign transactions, on both databases.

The driver runs in its own process group, stops at a protocol step, and is SIGKILLed there
together with its Spark JVM and Python workers. `xasink recover` (the real CLI) then has to
leave all or nothing, and never touch another application's prepared transactions.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
import time
import uuid

import pytest
from support import (
    PARTITIONS,
    ROWS,
    assert_exactly,
    cli,
    ids_in,
    job_states,
    journal_session,
    kill_driver_at,
    new_table,
    xasink_cli,
    xasink_prepared,
)

from xasink import FORMAT_ID, BranchId
from xasink.protocol.branches import BranchOps, Outcome
from xasink.protocol.xa import FailureKind, XaFailure


def parsed_branches(db) -> list[BranchId]:
    """Our branches as parsed back from what the driver's recover() returns."""
    with journal_session(db) as (spec, _, journal), BranchOps(spec, journal) as ops:
        return sorted((b for b, _ in ops.prepared()), key=lambda b: b.partition)


@pytest.mark.ci_one_server
def test_driver_killed_before_decision_rolls_back(db):
    table = new_table(db)
    kill_driver_at(db, table, "before_decision")
    branches = parsed_branches(db)
    assert [b.partition for b in branches] == list(range(PARTITIONS))
    assert len({b.job_id for b in branches}) == 1
    assert ids_in(db, table) == []  # prepared, not visible

    # The job's heartbeat is fresh: with a long grace nothing is touched (exit 1).
    alive = cli(db, "--grace", "3600", "--json")
    report = json.loads(alive.stdout)
    assert alive.returncode == 1, alive.stderr
    assert {a["action"] for a in report["actions"]} == {"left"}
    # A dry run says what it would do and changes nothing.
    dry = cli(db, "--grace", "0", "--dry-run")
    assert dry.returncode == 1 and dry.stdout.count("action=would-rollback") == PARTITIONS
    assert len(xasink_prepared(db)) == PARTITIONS

    done = xasink_cli(db, "recover", "--grace", "0", "-v", in_process=False)  # logs too
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("action=rollback") == PARTITIONS
    assert db.password not in done.stdout + done.stderr
    assert_exactly(db, table, [])
    assert job_states(db)[branches[0].job_id] == "aborted"


@pytest.mark.ci_one_server
def test_driver_killed_during_phase_two_rolls_forward(db):
    table = new_table(db)
    kill_driver_at(db, table, "after_first_commit")
    # The documented limit: until recovery, readers see some partitions and not others.
    visible = ids_in(db, table)
    assert 0 < len(visible) < ROWS
    branches = parsed_branches(db)
    assert len(branches) == PARTITIONS - 1
    job_id = branches[0].job_id
    assert job_states(db)[job_id] == "committing"

    committed = sorted(set(range(PARTITIONS)) - {b.partition for b in branches})
    assert len(committed) == 1
    with journal_session(db) as (spec, session, journal), BranchOps(spec, journal) as ops:
        winners = journal.job(session.connection, job_id).winners
        attempt = dict(winners)[committed[0]]
        # Repeating the commit of a committed branch: XAER_NOTA, proven by its marker.
        repeat = BranchId(journal.tag, job_id, committed[0], attempt)
        assert ops.commit(repeat) is Outcome.ALREADY_COMMITTED
        # The same answer without a marker must never count as written.
        never = BranchId(journal.tag, job_id, committed[0], attempt + 1000)
        assert ops.commit(never) is Outcome.LOST

    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("action=commit ") == PARTITIONS - 1
    assert "action=already-committed" in done.stdout
    assert_exactly(db, table, range(ROWS))
    assert job_states(db)[job_id] == "committed"


@pytest.mark.ci_one_server
@pytest.mark.parametrize("point", ["after_rows", "before_local_commit"])
def test_a_driver_killed_in_its_own_write_leaves_nothing_to_recover(db, point):
    """The driver writes a small frame in one local transaction and is SIGKILLed with its
    rows sent, or just before its COMMIT: the server rolls it all back, so nothing is
    prepared, no job row exists, and `xasink recover` finds nothing to do."""
    table = new_table(db)
    before = job_states(db)
    kill_driver_at(db, table, point, writer="driver")
    assert parsed_branches(db) == []
    assert job_states(db) == before
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_exactly(db, table, [])
    assert job_states(db) == before


def _foreign_postgres(db) -> list[str]:
    b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    gids = [
        "foreign-app-1",  # not pgjdbc-shaped at all
        f"1_{b64(b'other-app-gtrid')}_{b64(b'b1')}",  # pgjdbc-shaped, another formatId
        f"{FORMAT_ID}_{b64(b'not-our-layout')}_{b64(b'b1')}",  # our formatId, foreign layout
        f"{FORMAT_ID}_{b64(b'xasink1:deadbeef:' + b'0' * 32)}_{b64(b'p0:a0')}",  # other journal
    ]
    for gid in gids:
        with db.connect(autocommit=False) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS foreign_t (x int)")
            conn.commit()
            conn.execute("INSERT INTO foreign_t VALUES (1)")
            conn.execute(f"PREPARE TRANSACTION '{gid}'")
    return gids


def _foreign_mariadb(db) -> list[str]:
    xids = [
        "'foreign-app-1'",
        "'other-app-gtrid','b1',1",
        f"'not-our-layout','b1',{FORMAT_ID}",
        f"'xasink1:deadbeef:{'0' * 32}','p0:a0',{FORMAT_ID}",
    ]
    with db.connect() as conn:
        conn.cursor().execute("CREATE TABLE IF NOT EXISTS foreign_t (x int)")
    for xid in xids:
        conn = db.connect()
        cursor = conn.cursor()
        for sql in (
            f"XA START {xid}",
            "INSERT INTO foreign_t VALUES (1)",
            f"XA END {xid}",
            f"XA PREPARE {xid}",
        ):
            cursor.execute(sql)
        conn.close()  # detach, so the branch outlives its session
    return xids


@pytest.mark.mariadb11_ci
@pytest.mark.mysql_ci
def test_foreign_prepared_transactions_are_never_touched(db):
    """With this database's journal in place (its tag is what xasink's own branches carry),
    recovery leaves every other prepared transaction alone and says nothing of them."""
    with journal_session(db) as (spec, session, journal):
        journal.ensure(session.connection, spec)  # as any earlier write would have made it
    before = sorted(db.prepared_transactions())
    make = _foreign_postgres if db.kind == "postgres" else _foreign_mariadb
    make(db)
    foreign = sorted(db.prepared_transactions())
    assert len(foreign) == len(before) + 4
    try:
        result = cli(db, "--grace", "0")
        assert result.returncode == 0, result.stdout + result.stderr
        assert "action=" not in result.stdout
        assert sorted(db.prepared_transactions()) == foreign
    finally:
        if db.kind == "postgres":
            for prefix in ("foreign-app", "1_", f"{FORMAT_ID}_"):
                db.rollback_prepared(prefix)
        else:
            for prefix in ("foreign-app", "other-app", "not-our", "xasink1:deadbeef"):
                db.rollback_prepared(prefix)
    assert db.prepared_transactions() == before


@pytest.mark.mariadb11_ci
@pytest.mark.mysql_ci
@pytest.mark.parametrize("operation", ["commit", "rollback"])
def test_a_branch_whose_preparing_session_is_still_open_is_finished(mysql_family, operation):
    """MariaDB answers XAER_NOTA while the preparing session is still connected; that must
    neither count as lost (commit) nor as already gone (rollback). MySQL (8.0.30+:
    xa_detach_on_prepare=ON) detaches the branch at PREPARE: a second connection finishes it
    at once, while the first is still open."""
    db = mysql_family
    table = new_table(db)
    with journal_session(db) as (spec, session, journal):
        journal = journal.ensure(session.connection, spec)
    branch = BranchId(journal.tag, uuid.uuid4().hex, 0, 1)
    xid = f"X'{branch.xid.gtrid.hex()}',X'{branch.xid.bqual.hex()}',{FORMAT_ID}"
    writer = db.connect()
    cursor = writer.cursor()
    for sql in (
        f"XA START {xid}",
        f"INSERT INTO {table} (id) VALUES (7)",
        f"INSERT INTO xasink_markers VALUES ('{branch.job_id}', 0, 1, 1)",
        f"XA END {xid}",
        f"XA PREPARE {xid}",
    ):
        cursor.execute(sql)
    # The worker's disconnect, processed late; MySQL must not need it at all.
    closer = threading.Timer(60 if db.kind == "mysql" else 1.5, writer.close)
    closer.start()
    with BranchOps(spec, journal) as ops:
        outcome = ops.commit(branch) if operation == "commit" else ops.rollback(branch)
    finished_while_open = writer.open
    closer.cancel()
    closer.join()
    if writer.open:
        writer.close()
    expected = {"commit": (Outcome.COMMITTED, [7]), "rollback": (Outcome.ROLLED_BACK, [])}
    assert (outcome, ids_in(db, table)) == expected[operation]
    assert finished_while_open == (db.kind == "mysql")
    assert db.prepared_transactions() == []


def test_a_branch_attached_elsewhere_is_given_up_after_the_retries_patience(mariadb):
    """A MariaDB branch whose preparing session stays connected (a hung executor) answers
    XAER_NOTA while listed. Commit retries it for as long as its `retries` backoffs take
    (here 0.5 + 1 s), not until the lock-wait deadline (here 30 s), since recovery and the
    loser sweep settle branches one after another; then it names the branch and says what
    to do, and the branch stays prepared for a later recovery."""
    db = mariadb
    table = new_table(db)
    with journal_session(db) as (spec, session, journal):
        journal = journal.ensure(session.connection, spec)
    journal = dataclasses.replace(journal, lock_wait=30.0)
    branch = BranchId(journal.tag, uuid.uuid4().hex, 0, 1)
    xid = f"X'{branch.xid.gtrid.hex()}',X'{branch.xid.bqual.hex()}',{FORMAT_ID}"
    writer = db.connect()
    try:
        cursor = writer.cursor()
        for sql in (f"XA START {xid}", f"INSERT INTO {table} (id) VALUES (7)"):
            cursor.execute(sql)
        cursor.execute(f"XA END {xid}")
        cursor.execute(f"XA PREPARE {xid}")
        started = time.monotonic()
        ops = BranchOps(spec, journal, retries=2, backoff=0.5)
        with ops, pytest.raises(XaFailure) as failure:
            ops.commit(branch)
        took = time.monotonic() - started
        assert failure.value.kind is FailureKind.TRANSIENT
        assert "still attached" in str(failure.value) and "xasink recover" in str(failure.value)
        assert 1.5 <= took < 10, f"gave up after {took:.1f}s"
        assert len(xasink_prepared(db)) == 1
        cursor.execute(f"XA ROLLBACK {xid}")
    finally:
        writer.close()
    assert ids_in(db, table) == []
    assert db.prepared_transactions() == []


def test_startup_probe_is_quiet_only_when_nothing_is_in_doubt(db):
    """write_xa skips its full recovery scan only on proof: no running or deciding job on
    the table and no prepared transaction in xasink's format (whatever its tag); other
    applications' prepared transactions neither count nor get touched."""
    from xasink.driver.preflight import nothing_in_doubt

    table = new_table(db)
    before = sorted(db.prepared_transactions())
    with journal_session(db) as (spec, session, journal):
        conn = session.connection
        journal = journal.ensure(conn, spec)
        assert nothing_in_doubt(conn, journal, table) == (before == [])
        job_id = uuid.uuid4().hex
        journal.begin_job(conn, job_id, table, None, 30.0)
        assert not nothing_in_doubt(conn, journal, table)
        assert journal.abort(conn, job_id)
        make = _foreign_postgres if db.kind == "postgres" else _foreign_mariadb
        make(db)
        try:
            assert not nothing_in_doubt(conn, journal, table)  # ours in format, not in tag
            ours = (f"{FORMAT_ID}_",) if db.kind == "postgres" else ("not-our", "xasink1")
            for prefix in ours:
                db.rollback_prepared(prefix)
            assert nothing_in_doubt(conn, journal, table) == (before == [])
        finally:
            for prefix in ("foreign-app", "1_", "other-app", f"{FORMAT_ID}_", "not-our", "xasink1"):
                db.rollback_prepared(prefix)
    assert sorted(db.prepared_transactions()) == before
