"""Least privilege: an administrator creates the journal (`xasink init`), and writers run
with only the GRANTs it prints for them, and those their table's mode needs.

The writer is a login of its own, made here, that owns nothing: whatever it does beyond
its GRANTs fails. An append needs only DML on the journal and the table; a staged write
through tasks needs to create its staging table, and without that it is refused before
anything is written, naming the GRANTs, which then let the same write through. Rows are
read with psycopg/pymysql; nothing may be left prepared or staged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
import uuid
from collections.abc import Iterator

import pytest
import servers
from pyspark.sql import functions as F
from support import (
    assert_clean,
    assert_exactly,
    contents,
    events_df,
    mode_case,
    new_table,
    old_contents,
    own_journal_schema,
    run_sql,
    seeded_table,
    stage_tables,
    xasink_cli,
)

from xasink import Database, PreflightError, WriterProperties, write_xa

#: MySQL 9.7 proves its own grant (XA_RECOVER_ADMIN) in make test too.
pytestmark = pytest.mark.mysql_ci
#: Every row through the executors' branches, so a staged write stages in a real table.
TASKS = WriterProperties(driver_write_bytes=0, max_branches=2)
EVERY_WRITE = "every write"
STAGED_WRITES = "upsert, overwrite and merge (their staging tables)"


@dataclasses.dataclass(frozen=True)
class Writer:
    """A login that holds nothing but what the test grants it, and the journal it uses."""

    login: str
    database: Database
    grants: dict[str, list[str]]
    account: str


@contextlib.contextmanager
def _login(db: servers.DbServer) -> Iterator[tuple[str, str, str]]:
    """A new login with no privileges: (name, password, its account as GRANT names it)."""
    name, password = f"w_{uuid.uuid4().hex[:8]}", secrets.token_hex(12)
    if db.kind == "postgres":
        run_sql(db, f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        account, drop = name, f"DROP OWNED BY {name}; DROP ROLE {name}"
    else:
        run_sql(db, f"CREATE USER '{name}'@'%' IDENTIFIED BY '{password}'")
        account = f"'{name}'@'%'"
        drop = f"DROP USER {account}"
    try:
        yield name, password, account
    finally:
        with contextlib.suppress(Exception):
            run_sql(db, *drop.split("; "))


@pytest.fixture
def writer(db) -> Iterator[Writer]:
    """The administrator's `xasink init --writer` on a journal of its own, then the GRANTs
    every write needs (as printed), and nothing else."""
    journal = contextlib.contextmanager(own_journal_schema)(db)
    with journal as schema, _login(db) as (name, password, account):
        admin = dataclasses.replace(db, user=db.admin_user, password=db.admin_password)
        init = xasink_cli(admin, "init", "--journal-schema", schema, "--writer", name, "--json")
        assert init.returncode == 0, init.stderr
        done = json.loads(init.stdout)
        assert done["created"] is True and done["schema"] == schema, done
        run_sql(db, *done["grants"][EVERY_WRITE])
        database = Database(db.jdbc_url, user=name, password=password, journal_schema=schema)
        yield Writer(name, database, done["grants"], account)


def _grant_table(db, writer: Writer, table: str, privileges: str) -> None:
    run_sql(db, f"GRANT {privileges} ON {table} TO {writer.account}")


def test_init_makes_the_journal_once_and_says_what_a_writer_needs(db, writer):
    schema = writer.database.journal_schema
    admin = dataclasses.replace(db, user=db.admin_user, password=db.admin_password)
    again = xasink_cli(admin, "init", "--journal-schema", schema, "--writer", writer.login)
    assert again.returncode == 0, again.stderr
    assert f"-- xasink journal in {schema}: exists (layout 4)" in again.stdout, again.stdout
    for group, grants in writer.grants.items():
        assert f"-- {group}:" in again.stdout
        assert all(f"{grant};" in again.stdout for grant in grants), again.stdout
    every = " ".join(writer.grants[EVERY_WRITE])
    assert "xasink_jobs" in every and "CREATE" not in every, every
    assert ("XA_RECOVER_ADMIN" in every) == (db.kind == "mysql"), every


def test_a_writer_with_only_the_journals_dml_appends_exactly_once(spark, db, writer):
    table = new_table(db)
    _grant_table(db, writer, table, "SELECT, INSERT")
    write_xa(events_df(spark, 1000, 3), writer.database, table, writer_properties=TASKS)
    write_xa(events_df(spark, 1050, 1).where("id >= 1000"), writer.database, table)
    assert_exactly(db, table, range(1050))
    assert set(job_states_in(db, writer).values()) == {"committed"}
    assert_clean(db)


#: What each staged mode needs on its table (catalog's own list, as its refusals name it).
TABLE_GRANTS = {
    "upsert": "SELECT, INSERT, UPDATE",
    "overwrite": "SELECT, INSERT, DELETE",
    "merge": "SELECT, INSERT, UPDATE, DELETE",
}


def test_staged_writes_without_create_are_refused_naming_the_grants_then_run(spark, db, writer):
    """Upsert, overwrite and merge through tasks stage in a table of their own: refused
    without the staged GRANTs, before anything is written; each exact once they are run."""
    cases = {mode: (seeded_table(db), *mode_case(spark, mode, 2)) for mode in TABLE_GRANTS}
    for mode, (table, *_) in cases.items():
        _grant_table(db, writer, table, TABLE_GRANTS[mode])
    table, frame, options, _ = cases["upsert"]
    with pytest.raises(PreflightError) as refused:
        write_xa(frame, writer.database, table, **options, writer_properties=TASKS)
    message = str(refused.value)
    assert "Nothing was written" in message, message
    assert all(grant in message for grant in writer.grants[STAGED_WRITES]), message
    assert contents(db, table) == old_contents()
    assert_clean(db)

    run_sql(db, *writer.grants[STAGED_WRITES])
    for mode, (table, frame, options, expected) in cases.items():
        write_xa(frame, writer.database, table, **options, writer_properties=TASKS)
        assert contents(db, table) == expected, mode
    assert_clean(db)
    assert stage_tables(db, writer.database.journal_schema) == []


@pytest.mark.ci_one_server
def test_schema_evolution_without_alter_is_refused_naming_the_grant_then_runs(spark, db, writer):
    """Adding a column needs ALTER on the table (on PostgreSQL, its owner's role): without
    it the write is refused before anything is written, naming the GRANT that lets it."""
    table = new_table(db)
    _grant_table(db, writer, table, "SELECT, INSERT")
    frame = events_df(spark, 5, 1).withColumn("extra", F.lit("x"))
    with pytest.raises(PreflightError) as refused:
        write_xa(frame, writer.database, table, schema_mode="merge")
    message = str(refused.value)
    assert "this login may not alter the table" in message, message
    assert "Nothing was written" in message and writer.database.password not in message
    grant = re.search(r"GRANT .+? TO [^\s;]+", message)
    assert grant is not None, message
    assert_exactly(db, table, [])
    run_sql(db, grant.group(0))
    write_xa(frame, writer.database, table, schema_mode="merge")
    assert_exactly(db, table, range(5))
    assert_clean(db)


def job_states_in(db, writer: Writer) -> dict[str, str]:
    """The jobs of the writer's own journal."""
    schema = writer.database.journal_schema
    return {
        str(job): str(state)
        for job, state in run_sql(db, f"SELECT job_id, state FROM {schema}.xasink_jobs")
    }


def test_a_writer_without_the_journals_grants_is_refused_naming_them(spark, db, writer):
    table = new_table(db)
    _grant_table(db, writer, table, "SELECT, INSERT")
    every = [g for g in writer.grants[EVERY_WRITE] if "XA_RECOVER" not in g]
    run_sql(db, *(g.replace("GRANT ", "REVOKE ", 1).replace(" TO ", " FROM ") for g in every))
    with pytest.raises(PreflightError) as refused:
        write_xa(events_df(spark, 10, 1), writer.database, table)
    message = str(refused.value)
    assert "may not use xasink's journal" in message and "Nothing was written" in message
    assert all(grant in message for grant in every), message
    assert_exactly(db, table, [])
    assert_clean(db)


@pytest.mark.ci_postgres
def test_a_superusers_table_is_never_given_by_granting_its_owner(spark, db, writer):
    """On PostgreSQL the refusal suggests the owning role: when that role is a superuser
    (or may create roles), a member could make itself one, so the refusal suggests moving
    the table to an owning role of its own instead, which then lets the write run."""
    if db.kind != "postgres":
        pytest.skip("only PostgreSQL gives ALTER through the owning role")
    table = f"ev_{uuid.uuid4().hex[:10]}"
    run_sql(db, f"CREATE TABLE {table} (id BIGINT NOT NULL, name TEXT)")  # the superuser's
    _grant_table(db, writer, table, "SELECT, INSERT")
    frame = events_df(spark, 5, 1).select("id", "name", F.lit("x").alias("extra"))
    with pytest.raises(PreflightError) as refused:
        write_xa(frame, writer.database, table, schema_mode="merge")
    message = str(refused.value)
    assert f'GRANT "{db.admin_user}"' not in message and f"GRANT {db.admin_user} " not in message
    given = re.search(r"CREATE ROLE .+?; GRANT [^\s;]+ TO [^\s;]+", message)
    assert given is not None and "OWNER TO" in given.group(0), message
    run_sql(db, *given.group(0).split("; "))
    write_xa(frame, writer.database, table, schema_mode="merge")
    rows = run_sql(db, f"SELECT id, extra FROM {table} ORDER BY id")  # the admin reads it
    assert rows == [(i, "x") for i in range(5)]
    assert_clean(db)
