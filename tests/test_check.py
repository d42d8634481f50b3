"""`xasink check` against real servers: what it reports, and that it changes nothing.

Each test has a journal of its own in a fresh schema (a database on MariaDB), so what the
shared server holds from other tests (their jobs, their journals' branches) can only show
as another journal's branches, never as a problem here. Stuck states are made by hand, as a
writer makes them (a job row, a prepared branch with its marker, then no heartbeat), which
takes a moment instead of a killed Spark driver's many seconds.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support import connection_args, events_df, new_table, spec_for, xasink_cli
from test_protocol import admin_sql, open_branch, q
from test_recovery import _foreign_mariadb, _foreign_postgres

from xasink import write_xa
from xasink.cli import main
from xasink.protocol.connecting import open_journal
from xasink.xid import BranchId

JOURNAL_TABLES = (
    *("xasink_meta", "xasink_jobs", "xasink_winners", "xasink_markers", "xasink_sinks"),
    *("xasink_links", "xasink_job_tables"),
)
#: A sink id with every character the exposition format escapes that a sink id may hold.
SINK = 'orders "eu" \\ v2'


@pytest.fixture
def schema(db) -> Iterator[str]:
    """A fresh, empty schema for this test's journal; afterwards whatever the test left
    prepared in it is resolved (`xasink recover --grace 0`) and the schema dropped."""
    name = f"chk_{uuid.uuid4().hex[:10]}"
    if db.kind == "postgres":
        admin_sql(db, f"CREATE SCHEMA {name} AUTHORIZATION {db.user}")
    else:
        admin_sql(db, f"CREATE DATABASE {name}", f"GRANT ALL ON {name}.* TO '{db.user}'@'%'")
    try:
        yield name
    finally:
        done = xasink_cli(db, "recover", "--grace", "0", "--journal-schema", name)
        assert done.returncode == 0, done.stdout + done.stderr  # else a branch stays prepared
        drop = f"DROP SCHEMA {name} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {name}"
        admin_sql(db, drop)


#: What check says of a server with a binary log to a login that cannot see replicas' sessions:
#: MySQL keeps its binary log on in the tests, as users' servers do (tests/test_replication_check).
CANNOT_TELL = "warning: replication: cannot tell whether replicas read"


def check(db, schema: str, *args: str) -> Any:
    """`xasink check` of the journal in `schema`: its text without the one warning MySQL's
    app login always gets (and asserts that only MySQL's gets it)."""
    done = xasink_cli(db, "check", "--journal-schema", schema, *args)
    lines = done.stdout.splitlines(keepends=True)
    warned = any(line.startswith(CANNOT_TELL) for line in lines)
    assert warned == (db.kind == "mysql" and not {"--json", "--prometheus"} & set(args)), lines
    kept = "".join(line for line in lines if not line.startswith(CANNOT_TELL))
    return _with_stdout(done, kept)


def _with_stdout(done: Any, stdout: str) -> Any:
    return subprocess.CompletedProcess(done.args, done.returncode, stdout, done.stderr)


@contextlib.contextmanager
def journal_in(db, schema: str | None) -> Iterator[tuple[Any, Any]]:
    """(connection, journal) for the journal in `schema`, created if missing."""
    spec = spec_for(db)
    session, journal = open_journal(spec, schema)
    with session:
        yield session.connection, journal.ensure(session.connection, spec)


def snapshot(db, schema: str) -> tuple[list[str], dict[str, list[tuple[Any, ...]]]]:
    """Every prepared transaction on the server, and every row of the journal's tables."""
    rows = {}
    with db.connect() as conn:
        cursor = conn.cursor()
        for table in JOURNAL_TABLES:
            with contextlib.suppress(Exception):  # a table the test removed
                cursor.execute(f"SELECT * FROM {schema}.{table} ORDER BY 1")
                rows[table] = sorted(map(tuple, cursor.fetchall()), key=repr)
    return sorted(db.prepared_transactions()), rows


_SAMPLE = re.compile(r'^(xasink_[a-z_]+)(?:\{([a-z_]+)="((?:[^"\\\n]|\\[\\"n])*)"\})? (\S+)$')


def parse_prometheus(text: str) -> dict[tuple[str, str | None], float]:
    """The samples of a text exposition, strictly: every family has its HELP and TYPE
    first, every sample is `name{label="escaped"} value`; label values come back unescaped."""
    assert text.endswith("\n"), "the exposition must end with a line feed"
    samples: dict[tuple[str, str | None], float] = {}
    described: dict[str, set[str]] = {}
    for line in text.splitlines():
        if line.startswith("# "):
            word, name = line.split(" ")[1:3]
            described.setdefault(name, set()).add(word)
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, _, value, number = match.groups()
        assert described.get(name) == {"HELP", "TYPE"}, f"{name} has no HELP and TYPE"
        label = None
        if value is not None:
            label = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)
        samples[(name, label)] = float(number)
    return samples


# -- healthy -------------------------------------------------------------------------------
def test_no_journal_is_healthy_and_says_so(db, schema):
    done = check(db, schema)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"healthy; no journal in schema {schema}: xasink has not")
    assert "0 job(s)" in done.stdout
    assert snapshot(db, schema)[1] == {}, "check created a journal table"


def test_a_normal_write_is_healthy(spark, db, schema):
    table = new_table(db)
    args = connection_args(db, journal_schema=schema)
    write_xa(events_df(spark, 20, 2), table=table, sink_id=SINK, batch_id=7, **args)
    done = check(db, schema)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"healthy; journal in schema {schema}, tag ")
    assert "1 job(s) (committed 1); 0 in-doubt branch(es)" in done.stdout
    report = json.loads(check(db, schema, "--json").stdout)
    assert report["healthy"] is True and report["problems"] == []
    assert report["figures"]["jobs_by_state"] == {"committed": 1}
    assert report["figures"]["sinks"] == {SINK: 7}
    metrics = check(db, schema, "--prometheus")
    assert metrics.returncode == 0
    samples = parse_prometheus(metrics.stdout)
    assert samples[("xasink_check_healthy", None)] == 1
    assert samples[("xasink_in_doubt_branches", None)] == 0
    assert samples[("xasink_jobs", "committed")] == 1
    assert samples[("xasink_jobs", "running")] == 0
    assert samples[("xasink_sink_last_batch_id", SINK)] == 7


def test_check_loads_neither_spark_nor_pandas_nor_arrow(db, schema):
    """cron and Prometheus run `xasink check` every minute: it starts the JVM and reads
    the journal, and imports none of the frame libraries a write needs (they took seconds
    to import, for nothing)."""
    with journal_in(db, schema):
        pass
    probe = (
        "import json, sys\nfrom xasink.cli import main\nstatus = main(sys.argv[1:])\n"
        "print(json.dumps([status, sorted({m.split('.')[0] for m in sys.modules} & "
        "{'jpype', 'pyspark', 'pandas', 'pyarrow'})]))"
    )
    login = ["--url", db.jdbc_url, "--user", db.user, "--password-env", "XASINK_TEST_PASSWORD"]
    done = subprocess.run(
        [sys.executable, "-c", probe, "check", *login, "--journal-schema", schema],
        env={**os.environ, "XASINK_TEST_PASSWORD": db.password},
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    *printed, last = done.stdout.splitlines()
    assert printed[-1].startswith(f"healthy; journal in schema {schema}, tag "), done.stdout
    assert json.loads(last) == [0, ["jpype"]]


# -- in doubt and stuck ----------------------------------------------------------------------
def _prepare_running_job(db, schema: str) -> tuple[str, str]:
    """A running job of the journal in `schema` with one prepared branch, as a writer leaves
    them when it dies after PREPARE: (job id, table). The branch's marker goes into the
    default journal (the one `open_branch` writes to); it is rolled back with the branch."""
    with journal_in(db, None):
        pass  # the default journal's marker table, for open_branch
    table = new_table(db)
    job_id = uuid.uuid4().hex
    with journal_in(db, schema) as (conn, journal):
        journal.begin_job(conn, job_id, table, None, lease=1)
        branch = BranchId(journal.tag, job_id, 0, 5)
    with open_branch(db, branch, [f"INSERT INTO {q(db, table)} (id) VALUES (1)"], 1) as b:
        b.prepare()
    return job_id, table


def _age_heartbeat(db, schema: str, job_id: str) -> None:
    """The job's owner stopped beating an hour ago."""
    hour = "INTERVAL '1 hour'" if db.kind == "postgres" else "INTERVAL 1 HOUR"
    admin_sql(
        db,
        f"UPDATE {schema}.xasink_jobs SET heartbeat_at = heartbeat_at - {hour} "
        f"WHERE job_id = '{job_id}'",
    )


def test_an_old_branch_and_a_silent_job_are_problems_and_nothing_changes(db, schema):
    job_id, _ = _prepare_running_job(db, schema)
    prepared_at = time.monotonic()
    foreign = (_foreign_postgres if db.kind == "postgres" else _foreign_mariadb)(db)
    try:
        # Young branch, owner alive: healthy with a large --max-age.
        young = check(db, schema, "--max-age", "86400")
        assert young.returncode == 0, young.stdout + young.stderr
        assert "1 in-doubt branch(es)" in young.stdout
        assert "of other journals" in young.stdout  # the foreign one in xasink's layout
        time.sleep(max(0.0, prepared_at + 1.2 - time.monotonic()))
        old = check(db, schema, "--max-age", "1")
        if db.kind == "postgres":  # the server says when it was prepared
            assert old.returncode == 1, old.stdout + old.stderr
            lines = old.stdout.splitlines()
            assert len(lines) == 2 and lines[1].startswith("UNHEALTHY: 1 problem(s)")
            assert lines[0].startswith(f"job={job_id} problem=prepared-too-long (1 branch(es)")
            assert "still writing" in lines[0]
        else:  # aged by its job's start only: a live job's branch is not a problem
            assert old.returncode == 0, old.stdout + old.stderr

        _age_heartbeat(db, schema, job_id)
        before = snapshot(db, schema)
        stuck = check(db, schema, "--max-age", "86400")
        assert stuck.returncode == 1, stuck.stdout + stuck.stderr
        lines = stuck.stdout.splitlines()
        assert lines[0].startswith(f"job={job_id} problem=silent-job (undecided, owner silent")
        assert "`xasink recover` aborts it" in lines[0] and len(lines) == 2
        both = json.loads(check(db, schema, "--max-age", "0", "--json").stdout)
        assert both["healthy"] is False
        assert [(p["kind"], p["job_id"]) for p in both["problems"]] == [
            ("prepared-too-long", job_id),
            ("silent-job", job_id),
        ]
        figures = both["figures"]
        assert figures["in_doubt_branches"] == 1 and figures["jobs_by_state"] == {"running": 1}
        assert figures["age_source"] == ("prepared" if db.kind == "postgres" else "job start")
        samples = parse_prometheus(check(db, schema, "--max-age", "0", "--prometheus").stdout)
        assert samples[("xasink_check_healthy", None)] == 0
        assert samples[("xasink_in_doubt_branches", None)] == 1
        assert samples[("xasink_oldest_prepared_age_seconds", None)] >= 1
        assert samples[("xasink_jobs", "running")] == 1
        assert samples[("xasink_check_problems", "silent-job")] == 1
        # Read-only: every prepared transaction and every journal row as before.
        assert snapshot(db, schema) == before
    finally:
        _roll_back_foreign(db, foreign)
    done = xasink_cli(db, "recover", "--grace", "0", "--journal-schema", schema)
    assert done.returncode == 0 and "action=rollback" in done.stdout, done.stdout
    after = check(db, schema)
    assert after.returncode == 0 and "(aborted 1)" in after.stdout, after.stdout


def _roll_back_foreign(db, made: list[str]) -> None:
    if db.kind == "postgres":
        for gid in made:
            db.rollback_prepared(gid)
    else:
        for prefix in ("foreign-app", "other-app", "not-our", "xasink1:deadbeef"):
            db.rollback_prepared(prefix)


# -- damaged journal ---------------------------------------------------------------------------
def test_a_damaged_journal_is_a_problem_and_stays_as_it_is(db, schema):
    with journal_in(db, schema):
        pass
    admin_sql(db, f"UPDATE {schema}.xasink_meta SET version = 99")
    other = check(db, schema)
    assert other.returncode == 1, other.stdout + other.stderr
    assert other.stdout.startswith("journal problem=journal-damaged (The journal in ")
    assert "schema version 99" in other.stdout
    admin_sql(db, f"UPDATE {schema}.xasink_meta SET version = 1")
    admin_sql(db, f"DROP TABLE {schema}.xasink_winners")
    before = snapshot(db, schema)
    lost = check(db, schema, "--json")
    assert lost.returncode == 1
    problems = json.loads(lost.stdout)["problems"]
    assert [p["kind"] for p in problems] == ["journal-damaged"]
    assert "xasink_winners" in problems[0]["detail"] and "missing" in problems[0]["detail"]
    assert snapshot(db, schema) == before  # nothing recreated
    admin_sql(db, f"DROP TABLE {schema}.xasink_jobs")
    gone = check(db, schema)
    assert gone.returncode == 1 and "xasink_jobs" in gone.stdout, gone.stdout


# -- errors ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(argv: list[str], password: str) -> tuple[int, str]:
    os.environ["XASINK_CHECK_PASSWORD"] = password
    out, err = io.StringIO(), io.StringIO()
    code = main([*argv, "--password-env", "XASINK_CHECK_PASSWORD"], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_an_unreachable_server_or_a_wrong_password_is_an_error_without_the_password(db):
    secret = f"Wr0ng-{uuid.uuid4().hex[:8]}"
    scheme = db.jdbc_url.split("//")[0]
    closed = f"{scheme}//127.0.0.1:{_free_port()}/{db.database}"
    code, text = _run(["check", "--url", closed, "--user", db.user], secret)
    assert code == 2 and "Cannot reach the database" in text, text
    assert secret not in text
    code, text = _run(["check", "--url", db.jdbc_url, "--user", db.user], secret)
    assert code == 2 and text.startswith("xasink: "), text
    assert secret not in text
    in_url = f"{scheme}//{db.user}:{secret}@{db.host}:{db.port}/{db.database}"
    code, text = _run(["check", "--url", in_url], secret)
    assert code == 2 and secret not in text, text


# -- a user that may only read the journal ------------------------------------------------------
@contextlib.contextmanager
def reader(db, schema: str) -> Iterator[tuple[str, str]]:
    """A login with SELECT on the journal's tables and nothing else: (user, password)."""
    user, password = f"ro_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    tables = ", ".join(f"{schema}.{t}" for t in JOURNAL_TABLES)
    if db.kind == "postgres":
        admin_sql(
            db,
            f"CREATE ROLE {user} LOGIN PASSWORD '{password}'",
            f"GRANT USAGE ON SCHEMA {schema} TO {user}",
            f"GRANT SELECT ON {tables} TO {user}",
        )
        drop = [f"DROP OWNED BY {user}", f"DROP ROLE {user}"]
    else:
        grants = [f"GRANT SELECT ON {schema}.{t} TO '{user}'@'%'" for t in JOURNAL_TABLES]
        if db.kind == "mysql":  # MySQL 8 lists XA RECOVER to this privilege only
            grants.append(f"GRANT XA_RECOVER_ADMIN ON *.* TO '{user}'@'%'")
        admin_sql(db, f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'", *grants)
        drop = [f"DROP USER '{user}'@'%'"]
    try:
        yield user, password
    finally:
        admin_sql(db, *drop)


@pytest.mark.mysql_ci
def test_a_select_only_user_can_check(db, schema):
    job_id, _ = _prepare_running_job(db, schema)
    _age_heartbeat(db, schema, job_id)
    # MySQL/MariaDB: the URL's database must be one the login may use.
    url = db.jdbc_url if db.kind == "postgres" else db.jdbc_url.replace(db.database, schema)
    with reader(db, schema) as (user, password):
        argv = ["check", "--url", url, "--user", user, "--journal-schema", schema]
        code, text = _run([*argv, "--max-age", "86400"], password)
    assert code == 1, text
    assert text.startswith(f"job={job_id} problem=silent-job"), text
    assert "1 in-doubt branch(es)" in text
