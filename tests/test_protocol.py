"""The commit protocol under races, each reproduced on real servers.

Every test builds the interleaving that once broke a guarantee (a recovery racing a deciding
or stalled driver, a journal reached under another name, a decision whose commit fails, a
lock held by a prepared transaction, ...) and checks the outcome with psycopg/pymysql: the
exact contents, no prepared branch and no staging table left, and the truth of what the
driver and recovery report.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid

import pytest
from support import (
    PARTITIONS,
    ROWS,
    DriverProcess,
    assert_clean,
    assert_exactly,
    cli,
    connection_args,
    contents,
    in_background,
    job_states,
    journal_session,
    journaled,
    kill_driver_at,
    mode_rows,
    new_table,
    old_contents,
    seeded_table,
    stage_tables,
    xasink_cli,
    xasink_prepared,
)
from test_exactly_once import failed_tasks

from xasink import CommitProperties, WriterProperties, write_xa
from xasink.errors import CommitError, InputDataError, JobAbortedError
from xasink.protocol.branches import BranchOps
from xasink.protocol.deciding import decide_commit
from xasink.protocol.recovery import resolve_in_doubt
from xasink.spec import TableRef
from xasink.tables.staging import ApplyPlan, create_stage_sql, stage_name
from xasink.xid import BranchId


def q(db, name: str) -> str:
    return f'"{name}"' if db.kind == "postgres" else f"`{name}`"


def admin_sql(db, *statements: str) -> None:
    with db.admin_connect() as conn:
        cursor = conn.cursor()
        for sql in statements:
            cursor.execute(sql)
        if db.kind != "postgres":
            conn.commit()


# -- branches made by hand, as a writer would make them -----------------------------------
@contextlib.contextmanager
def open_branch(db, branch: BranchId, inserts: list[str], rows: int):
    """An XA branch with `inserts` and the branch's marker row, left ACTIVE; `prepare()` on
    the yielded object prepares it (and, on MariaDB, detaches it by disconnecting)."""
    xid = branch.xid
    conn = db.connect(autocommit=False) if db.kind == "postgres" else db.connect()
    cursor = conn.cursor()
    mysql_xid = f"X'{xid.gtrid.hex()}',X'{xid.bqual.hex()}',{xid.format_id}"
    if db.kind != "postgres":
        cursor.execute(f"XA START {mysql_xid}")
    marker = (
        f"INSERT INTO xasink_markers (job_id, partition_id, attempt, row_count) "
        f"VALUES ('{branch.job_id}', {branch.partition}, {branch.attempt}, {rows})"
    )
    for sql in [*inserts, marker]:
        cursor.execute(sql)

    class Handle:
        def prepare(self) -> None:
            if db.kind == "postgres":
                cursor.execute(f"PREPARE TRANSACTION '{xid}'")
            else:
                cursor.execute(f"XA END {mysql_xid}")
                cursor.execute(f"XA PREPARE {mysql_xid}")
            conn.close()

    try:
        yield Handle()
    finally:
        with contextlib.suppress(Exception):
            conn.close()


class Interleaved(BranchOps):
    """BranchOps that runs `between` once, right after its first XA RECOVER listing: the
    moment a racing driver acts while recovery looks."""

    def __init__(self, *args, between=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._between = between

    def prepared(self):
        found = super().prepared()
        if self._between is not None:
            between, self._between = self._between, None
            between()
        return found


STAGE_TYPES = {
    "postgres": ["BIGINT", "VARCHAR(64)", "DOUBLE PRECISION"],
    "mysql": ["BIGINT", "VARCHAR(64)", "DOUBLE"],
}


# -- A ----------------------------------------------------------------------------------
def test_recovery_reads_the_decision_before_listing_branches(db):
    """A recovery that listed the branches before the driver decided must not call the
    late-prepared winner LOST and abort the decided job."""
    table = seeded_table(db)
    job_id = uuid.uuid4().hex
    with journal_session(db) as (spec, session, journal):
        conn = session.connection
        journal = journal.ensure(conn, spec)
        plan = ApplyPlan(
            "upsert", TableRef(table), stage_name(job_id, None), ("id", "name", "v"), key=("id",)
        )
        journal.begin_job(conn, job_id, table, plan, lease=1)
        conn.createStatement().execute(
            create_stage_sql(journal.dialect, plan, STAGE_TYPES[db.dialect])
        )
        stage = q(db, plan.stage.name)
        p0, p1 = (BranchId(journal.tag, job_id, p, 10 + p) for p in (0, 1))
        rows0 = [f"INSERT INTO {stage} VALUES ({i}, 'new', {i * 2.0})" for i in range(0, 5)]
        rows1 = [f"INSERT INTO {stage} VALUES ({i}, 'new', {i * 2.0})" for i in range(200, 205)]
        with open_branch(db, p0, rows0, 5) as first, open_branch(db, p1, rows1, 5) as late:
            first.prepare()

            def driver_decides() -> None:  # p1 prepares, then the driver records the decision
                late.prepare()
                assert decide_commit(journal, conn, job_id, [(0, 10, 5), (1, 11, 5)])

            with Interleaved(spec, journal, between=driver_decides) as ops:
                report = resolve_in_doubt(ops, conn, journal, grace=0)
    actions = [a.action for a in report.actions]
    assert "LOST" not in actions and "aborted" not in actions, actions
    assert "applied" in actions
    expected = old_contents()
    expected.update({i: ("new", i * 2.0) for i in [*range(0, 5), *range(200, 205)]})
    assert contents(db, table) == expected
    assert job_states(db)[job_id] == "committed"
    assert_clean(db)


@pytest.mark.ci_one_server
def test_a_driver_never_reports_success_for_a_job_another_process_ended(db):
    """A staged driver stalls before finishing; meanwhile another process ends the decided
    job. When it resumes, its finish changes nothing: it must fail, not report success."""
    table = seeded_table(db)
    driver = DriverProcess(db, table, "before_finish", mode="upsert", action="pause")
    driver.wait_for_point()
    job_id = driver.job_id(db)
    admin_sql(
        db,
        f"UPDATE xasink_jobs SET state = 'aborted' WHERE job_id = '{job_id}' "
        "AND state = 'committing'",
    )
    final = driver.resume()
    assert final.startswith("ERROR CommitError"), final
    assert "unchanged" in final
    assert contents(db, table) == old_contents()
    assert cli(db, "--grace", "0").returncode == 0
    assert_clean(db)


@pytest.mark.ci_one_server
def test_a_driver_whose_append_job_was_abandoned_after_its_commits_says_its_rows_are_in(db):
    """An append driver stalls after committing every winner; an operator abandons the job
    meanwhile. When it resumes it must fail saying the rows ARE in (a re-run would duplicate
    them), never that the table is unchanged."""
    table = new_table(db)
    driver = DriverProcess(db, table, "before_finish", action="pause")
    driver.wait_for_point()
    job_id = driver.job_id(db)
    done = xasink_cli(db, "resolve", job_id, "--abandon", "--yes")
    assert done.returncode == 0 and "state=abandoned" in done.stdout, done.stdout + done.stderr
    final = driver.resume()
    assert final.startswith("ERROR CommitError"), final
    assert "unchanged" not in final, final
    assert (
        f"rows ARE in {journaled(db, table)}" in final and "Do not run the write again" in final
    ), final
    assert job_states(db)[job_id] == "abandoned"
    assert_exactly(db, table, range(ROWS))


# -- B ----------------------------------------------------------------------------------
@pytest.mark.ci_one_server
def test_a_committed_job_without_markers_is_not_lost(db):
    """The driver stalls in phase 2; recovery finishes the job (deleting the markers); the
    driver resumes and must report success, not LostBranchError (rows are all there)."""
    table = new_table(db)
    driver = DriverProcess(db, table, "after_first_commit", action="pause")
    driver.wait_for_point()
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LOST" not in done.stdout
    final = driver.resume()
    assert final.startswith("RESULT "), final
    assert json.loads(final[len("RESULT ") :])["rows"] == ROWS
    assert_exactly(db, table, range(ROWS))


# -- C ----------------------------------------------------------------------------------
def test_an_unreadable_journal_is_an_error_not_a_missing_one(db):
    """Decided job, driver dead mid phase 2, and the winners table unreadable: recovery
    must fail loudly and roll back nothing (presuming abort would half-write the job)."""
    table = new_table(db)
    kill_driver_at(db, table, "after_first_commit")
    prepared = sorted(xasink_prepared(db))
    assert len(prepared) == PARTITIONS - 1
    moved = q(db, "xasink_winners_moved")
    rename = (
        "ALTER TABLE xasink_winners RENAME TO xasink_winners_moved"
        if db.kind == "postgres"
        else "RENAME TABLE xasink_winners TO xasink_winners_moved"
    )
    back = (
        f"ALTER TABLE {moved} RENAME TO xasink_winners"
        if db.kind == "postgres"
        else f"RENAME TABLE {moved} TO xasink_winners"
    )
    admin_sql(db, rename)
    try:
        broken = cli(db, "--grace", "0")
    finally:
        admin_sql(db, back)
    assert broken.returncode == 2, broken.stdout + broken.stderr
    assert "xasink_winners" in broken.stderr
    assert sorted(xasink_prepared(db)) == prepared  # nothing was touched
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert_exactly(db, table, range(ROWS))


def test_without_a_journal_nothing_is_touched_unless_asked(db):
    """No journal in the schema recovery was pointed at: its branches stay, reported; an
    explicit --presume-abort TAG rolls them back, and still respects the grace period."""
    schema = f"nojournal_{uuid.uuid4().hex[:8]}"
    if db.kind == "postgres":
        admin_sql(db, f"CREATE SCHEMA {schema} AUTHORIZATION {db.user}")
    else:
        admin_sql(db, f"CREATE DATABASE {schema}", f"GRANT ALL ON {schema}.* TO '{db.user}'@'%'")
    with journal_session(db) as (spec, session, journal):
        journal = journal.ensure(session.connection, spec)  # markers for the branch below
    table = new_table(db)
    tag = "0badc0de"
    branch = BranchId(tag, uuid.uuid4().hex, 0, 1)
    with open_branch(db, branch, [f"INSERT INTO {q(db, table)} (id) VALUES (1)"], 1) as b:
        b.prepare()
    try:
        left = cli(db, "--grace", "0", "--journal-schema", schema, "--json")
        assert left.returncode == 1, left.stdout + left.stderr
        report = json.loads(left.stdout)
        assert [a["action"] for a in report["actions"]] == ["left"]
        assert "no journal" in report["journal"]
        assert len(xasink_prepared(db)) == 1
        if db.kind == "postgres":  # the server knows when it was prepared: grace holds
            young = cli(db, "--journal-schema", schema, "--presume-abort", tag, "--grace", "3600")
            assert young.returncode == 1 and "action=left" in young.stdout, young.stdout
            assert len(xasink_prepared(db)) == 1
        done = cli(db, "--journal-schema", schema, "--presume-abort", tag, "--grace", "0")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "action=rollback" in done.stdout
        assert_exactly(db, table, [])
    finally:
        db.rollback_prepared("")
        drop = (
            f"DROP SCHEMA {schema} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {schema}"
        )
        admin_sql(db, drop)


# -- D ----------------------------------------------------------------------------------
def test_one_journal_has_one_tag_however_it_is_addressed(db):
    """Writers used the default journal schema; recovery names the schema explicitly. It
    must find the same branches, not call every winner LOST and abort the decided job."""
    table = seeded_table(db)
    kill_driver_at(db, table, "after_first_commit", mode="upsert")
    schema = "public" if db.kind == "postgres" else db.database
    done = cli(db, "--grace", "0", "--journal-schema", schema)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "LOST" not in done.stdout and "action=applied" in done.stdout
    assert contents(db, table) == mode_rows("upsert")[3]
    assert_clean(db)


# -- E ----------------------------------------------------------------------------------
@pytest.mark.ci_one_server
def test_an_older_decided_staged_job_is_never_applied_after_a_newer_one(spark, db):
    """Overwrite J1 dies after its decision; J2 overwrites the same table right away. J1
    must be applied first (by J2's own recovery), so the table ends with J2's rows."""
    table = seeded_table(db)
    kill_driver_at(db, table, "after_first_commit", mode="overwrite")
    newer = [(i, "t2", float(i)) for i in range(1000, 1010)]
    df = spark.createDataFrame(newer, "id long, name string, v double").repartition(2)
    write_xa(df, table=table, mode="overwrite", **connection_args(db))
    assert cli(db, "--grace", "0").returncode == 0
    assert contents(db, table) == {i: (n, v) for i, n, v in newer}
    assert_clean(db)


# -- F ----------------------------------------------------------------------------------
def test_a_failed_decision_is_settled_by_a_fence(db):
    """The decision's transaction dies (its connection is killed while it waits for a
    lock). The driver must settle the outcome with a fence: the job is aborted, every
    branch rolled back, and the error is xasink's, redacted, saying nothing was written."""
    table = new_table(db)
    driver = DriverProcess(db, table, "before_decision", action="pause")
    driver.wait_for_point()
    job_id = driver.job_id(db)
    locker = db.admin_connect(autocommit=False) if db.kind == "postgres" else db.admin_connect()
    cursor = locker.cursor()
    if db.kind != "postgres":
        cursor.execute("BEGIN")
    cursor.execute(f"SELECT state FROM xasink_jobs WHERE job_id = '{job_id}' FOR UPDATE")
    try:
        os_kill = threading.Thread(target=driver.resume, daemon=True)
        os_kill.start()
        victim = _wait_for_decision_statement(db)
        with db.admin_connect() as killer:
            if db.kind == "postgres":
                killer.execute("SELECT pg_terminate_backend(%s)", (victim,))
            else:
                killer.cursor().execute(f"KILL {int(victim)}")
    finally:
        locker.rollback()
        locker.close()
    os_kill.join(timeout=240)
    final = [ln for ln in driver.output if ln.startswith(("RESULT", "ERROR"))][-1]
    assert final.startswith("ERROR JobAbortedError"), final
    assert "is unchanged" in final
    assert job_states(db)[job_id] == "aborted"
    assert_exactly(db, table, [])


def _wait_for_decision_statement(db) -> int:
    """The server-side id of the session running the decision's UPDATE (waiting on a lock)."""
    sql = (
        "SELECT pid FROM pg_stat_activity WHERE query LIKE '%decided_at%' "
        "AND query NOT LIKE '%pg_stat_activity%'"
        if db.kind == "postgres"
        else "SELECT id FROM information_schema.processlist WHERE info LIKE '%decided_at%' "
        "AND info NOT LIKE '%processlist%'"
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with db.admin_connect() as conn:
            cursor = conn.cursor()
            cursor.execute(sql)
            row = cursor.fetchone()
        if row:
            return int(row[0])
        time.sleep(0.2)
    raise AssertionError("the driver never sent its decision")


# -- G ----------------------------------------------------------------------------------
def test_an_apply_blocked_by_a_prepared_transaction_gives_up_and_names_it(spark, db):
    """A foreign prepared insert of key 7 blocks the upsert's apply. The driver must give up
    after its lock wait bound with an error that names the blocker, not hang; once the
    blocker is gone, recovery applies the job."""
    table = seeded_table(db)
    foreign = BranchId("feedf00d", uuid.uuid4().hex, 0, 0)  # an xasink layout, other journal
    insert = [f"INSERT INTO {q(db, table)} (id, name, v) VALUES (500, 'foreign', 0)"]
    with journal_session(db) as (spec, session, journal):
        journal.ensure(session.connection, spec)
    with open_branch(db, foreign, insert, 1) as b:
        b.prepare()
    rows = [(i, "new", float(i)) for i in range(495, 505)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(2)
    thread, outcome = in_background(
        lambda: write_xa(
            df,
            table=table,
            mode="upsert",
            key="id",
            **connection_args(db),
            commit_properties=CommitProperties(lock_wait_timeout=3),
        )
    )
    thread.join(timeout=180)
    assert not thread.is_alive(), "the apply waited forever behind a prepared transaction"
    assert isinstance(outcome[0], CommitError), outcome
    message = str(outcome[0])
    assert "prepared transaction(s) of other applications" in message, message
    assert db.password not in message
    db.rollback_prepared(foreign.xid.gtrid.decode() if db.kind != "postgres" else "")
    done = cli(db, "--grace", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    expected = old_contents()
    expected.update({i: (n, v) for i, n, v in rows})
    assert contents(db, table) == expected
    assert_clean(db)


# -- H ----------------------------------------------------------------------------------
def test_a_trigger_refusing_the_apply_aborts_the_job(spark, db):
    """A trigger rejects a row at apply time (P0001 / 45000, not SQLSTATE class 22/23):
    the job must end aborted with the table unchanged, not stay decided and stuck."""
    table = seeded_table(db)
    if db.kind == "postgres":
        admin_sql(
            db,
            "CREATE OR REPLACE FUNCTION no_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            "IF NEW.name = 'bad' THEN RAISE EXCEPTION 'bad row'; END IF; RETURN NEW; END $$",
            f"CREATE TRIGGER no_bad BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW "
            "EXECUTE FUNCTION no_bad()",
        )
    else:
        admin_sql(
            db,
            f"CREATE TRIGGER no_bad_{table} BEFORE INSERT ON {table} FOR EACH ROW "
            "BEGIN IF NEW.name = 'bad' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = "
            "'bad row'; END IF; END",
        )
    rows = [(i, "new", 1.0) for i in range(150, 160)] + [(177, "bad", 1.0)]
    df = spark.createDataFrame(rows, "id long, name string, v double").repartition(2)
    with pytest.raises(InputDataError, match="refused the rows"):
        write_xa(df, table=table, mode="upsert", key="id", **connection_args(db))
    assert contents(db, table) == old_contents()
    assert cli(db, "--grace", "0").returncode == 0
    assert_clean(db)


# -- I ----------------------------------------------------------------------------------
def test_keys_equal_only_under_the_collation_are_duplicates(spark, db):
    """'Bob' and 'bob' are one key under the column's collation, but Spark routes them to
    different branches: the apply transaction must catch them, not pick one at random."""
    from pyspark.sql import functions as F

    table = f"ci_{uuid.uuid4().hex[:10]}"
    if db.kind == "postgres":
        admin_sql(
            db,
            "CREATE COLLATION IF NOT EXISTS ci_test (provider = icu, "
            "locale = 'und-u-ks-level2', deterministic = false)",
        )
        ddl = f"CREATE TABLE {table} (k VARCHAR(32) COLLATE ci_test PRIMARY KEY, v INTEGER)"
    else:
        ddl = (
            f"CREATE TABLE {table} (k VARCHAR(32) CHARACTER SET utf8mb4 COLLATE "
            "utf8mb4_general_ci PRIMARY KEY, v INT)"
        )
    with db.connect() as conn:
        conn.cursor().execute(ddl)
    # A pair that Spark's key routing (hash into 2 branches) sends to different branches.
    names = spark.createDataFrame([(f"Name{i}",) for i in range(50)], "k string")
    routed = names.select(
        "k",
        F.expr("pmod(hash(k), 2)").alias("a"),
        F.expr("pmod(hash(lower(k)), 2)").alias("b"),
    )
    pair = routed.where("a <> b").first()["k"]
    rows = [(pair, 1), (pair.lower(), 2), ("other", 3)]
    df = spark.createDataFrame(rows, "k string, v int")
    with pytest.raises(InputDataError):
        write_xa(
            df,
            table=table,
            mode="upsert",
            key="k",
            **connection_args(db),
            writer_properties=WriterProperties(max_branches=2),
        )
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        assert cursor.fetchone()[0] == 0
    assert_clean(db)


# -- J ----------------------------------------------------------------------------------
def test_recovery_refuses_journal_rows_naming_other_tables(db):
    """A journal row forged by anyone who can write the journal names a victim table as
    its stage (and another row has no valid job id): recovery acts on neither."""
    victim = seeded_table(db, prefix="victim")
    with journal_session(db) as (spec, session, journal):
        journal = journal.ensure(session.connection, spec)
    job_id = uuid.uuid4().hex
    plan = ApplyPlan("overwrite", TableRef(victim), TableRef(victim), ("id",))
    forged = json.dumps(json.loads(plan.to_json())).replace("'", "''")
    now = "clock_timestamp()" if db.kind == "postgres" else "UTC_TIMESTAMP(6)"
    with db.connect() as conn:
        cursor = conn.cursor()
        for job, state in ((job_id, "aborted"), ("not-a-job-id", "committing")):
            cursor.execute(
                "INSERT INTO xasink_jobs (job_id, target_table, state, beats, created_at, "
                f"heartbeat_at, apply_plan) VALUES ('{job}', '{victim}', '{state}', 0, {now}, "
                f"{now}, '{forged}')"
            )
        if db.kind != "postgres":
            conn.commit()
    try:
        done = cli(db, "--grace", "0")
        assert done.returncode == 1, done.stdout + done.stderr
        assert "refusing to act on it" in done.stdout
        assert "not an xasink job id" in done.stdout
        assert "Traceback" not in done.stderr
        assert contents(db, victim) == old_contents()
    finally:
        with db.connect() as conn:
            conn.cursor().execute(
                f"DELETE FROM xasink_jobs WHERE job_id IN ('{job_id}', 'not-a-job-id')"
            )
            if db.kind != "postgres":
                conn.commit()


# -- a live job aborted by a recovery run ---------------------------------------------------
def test_a_live_job_aborted_by_recovery_fails_once_with_a_clear_error(spark, db, tmp_path):
    """`xasink recover --grace 0` from another process aborts a staged job while its tasks
    are still reading their input (and drops its staging table). The job must fail with
    JobAbortedError, once, without Spark retrying every task."""
    table, recovered = seeded_table(db), tmp_path / "recovered"

    def slow(batches):  # the input comes once the recovery run is over
        import time as t

        deadline = t.monotonic() + 120
        while not recovered.exists() and t.monotonic() < deadline:
            t.sleep(0.05)
        yield from batches

    df = spark.range(0, 300, numPartitions=2).selectExpr(
        "id", "'new' AS name", "CAST(id AS DOUBLE) AS v"
    )
    df = df.mapInArrow(slow, df.schema)
    group = f"xasink-test-{uuid.uuid4().hex[:8]}"
    outcome: list[object] = []

    def run() -> None:
        spark.sparkContext.setJobGroup(group, "aborted live job")
        try:
            outcome.append(
                write_xa(
                    df,
                    table=table,
                    mode="overwrite",
                    **connection_args(db),
                    writer_properties=WriterProperties(driver_write_bytes=0),
                )
            )
        except Exception as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not stage_tables(db) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert stage_tables(db), "the job never created its staging table"
    done = cli(db, "--grace", "0")
    recovered.touch()
    assert done.returncode == 0, done.stdout + done.stderr
    thread.join(timeout=240)
    assert isinstance(outcome[0], JobAbortedError), outcome
    assert "aborted by a recovery run" in str(outcome[0])
    assert failed_tasks(spark, group) == 0
    assert contents(db, table) == old_contents()
    assert_clean(db)
