"""A journal with a long history: every statement a call sends is served by an index, the
commands read what they show, and the journal bounds itself (its retention).

The history is made by the server's own row generators (`benchmarks/history.py`): finished
jobs, half of them on the table and sink written here, as a stream's past batches leave
them. The calls are the kinds a stream and a batch job make (one-phase and two-phase,
append and staged, a stream's batch, a transaction of two tables); each statement they
send to the journal is recorded (`xasink._testing.statements`) and then asked of the server
(EXPLAIN with the same parameters): a full scan of a journal table fails the test, and so
does, on MySQL and MariaDB, an index read the server expects to cover the history.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from support import (
    connection_args,
    database_of,
    events_df,
    prepared_branch,
    run_sql,
    spec_for,
    xasink_cli,
    xasink_prepared,
)

from xasink import WriterProperties, transaction, write_xa
from xasink._testing.statements import Statement, recorded
from xasink.driver.check_cache import CHECKS
from xasink.protocol import retention
from xasink.protocol.connecting import open_journal
from xasink.protocol.health import check_health
from xasink.protocol.journal_tables import SCHEMA_VERSION
from xasink.protocol.states import JobState
from xasink.xid import BranchId

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import history

#: Finished jobs put into the journal before the calls.
HISTORY = 60_000
#: An index read on MySQL/MariaDB expected to examine more rows than this covers history.
FEW_ROWS = 500
_JOURNAL = re.compile(r"xasink_(jobs|winners|markers|sinks|links|job_tables|meta)\b")
#: The journal tables that grow with history (`xasink_sinks` holds a row per sink, and
#: `xasink_meta` one row: reading them whole costs the same on day 90 as on day 1).
_HISTORY = ("xasink_jobs", "xasink_winners", "xasink_markers", "xasink_links", "xasink_job_tables")


def _new_table(db, schema: str, keyed: bool = True) -> str:
    name = f"{schema}.h_{uuid.uuid4().hex[:8]}"
    key = "id BIGINT NOT NULL" + (" PRIMARY KEY" if keyed else "")
    rest = (
        "name TEXT, v DOUBLE PRECISION, n INTEGER, ts TIMESTAMPTZ"
        if db.kind == "postgres"
        else "name TEXT, v DOUBLE, n INT, ts DATETIME(6)"
    )
    run_sql(db, f"CREATE TABLE {name} ({key}, {rest})", admin=False)
    return name


def _explained(db, statements: list[Statement]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(statement, every table read of the server's plan) for each distinct statement
    that reads or changes a journal table, planned with its recorded parameters."""
    seen: dict[str, tuple[Any, ...]] = {}
    for sql, params in statements:
        if _JOURNAL.search(sql) and re.match(r"\s*(SELECT|UPDATE|DELETE|INSERT|WITH)", sql, re.I):
            seen.setdefault(sql, params)
    plans = []
    with contextlib.closing(db.admin_connect()) as conn, contextlib.closing(conn.cursor()) as cur:
        if db.kind == "postgres":
            cur.execute("SET enable_seqscan = off")  # a full scan only where nothing else can
        for sql, params in seen.items():
            text = sql.replace("%", "%%").replace("?", "%s")
            values = [str(p) if isinstance(p, str) else p for p in params]
            if db.kind == "postgres":
                cur.execute("EXPLAIN (FORMAT JSON) " + text, values)
                plans.append((sql, _scans(cur.fetchone()[0])))
            else:  # the tabular form: MariaDB's JSON form does not escape quotes
                cur.execute("EXPLAIN " + text, values)
                names = [d[0].lower() for d in cur.description]
                rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
                aliases = _aliases(sql)
                plans.append((sql, [_mysql_scan(r, aliases) for r in rows if r.get("table")]))
    return plans


#: A journal table and the alias a statement gives it (`xasink_jobs j`, `xasink_jobs AS o`).
_ALIASED = re.compile(
    r"(xasink_(?:jobs|winners|markers|sinks|links|job_tables|meta))`?\s+(?:AS\s+)?(\w+)", re.I
)
_NOT_ALIASES = {"where", "set", "join", "left", "on", "order", "group", "limit", "values", "for"}


def _aliases(sql: str) -> dict[str, str]:
    """Alias -> journal table: MySQL's EXPLAIN names a table by its alias."""
    return {
        alias: table for table, alias in _ALIASED.findall(sql) if alias.lower() not in _NOT_ALIASES
    }


def _mysql_scan(row: dict[str, Any], aliases: dict[str, str]) -> dict[str, Any]:
    """One row of MySQL's tabular EXPLAIN in the shape `_problems` reads."""
    table = aliases.get(str(row["table"]), row["table"])
    return {"table_name": table, "access_type": row["type"], "rows": row["rows"]}


def _scans(plan: Any) -> list[dict[str, Any]]:
    """Every node of a PostgreSQL JSON plan that reads a table."""
    found = []
    if isinstance(plan, dict):
        if "Relation Name" in plan:
            found.append(plan)
        for value in plan.values():
            found += _scans(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _scans(value)
    return found


def _problems(db, plans: list[tuple[str, list[dict[str, Any]]]], bounded: bool) -> list[str]:
    """The plans that read a history table in full, or (`bounded`) that expect to read
    more rows of one than a call may. PostgreSQL plans with sequential scans off, so a
    full scan shows only where no index can serve, and an index read without a condition
    on its key walks all of it; MySQL's and MariaDB's optimizers read a table that holds a
    handful of rows whole whatever its indexes (markers, links: rows only while a job
    runs), so there a full scan counts once it reads more than a few."""
    problems = []
    for sql, scans in plans:
        for scan in scans:
            table = str(scan.get("Relation Name") or scan.get("table_name"))
            if table not in _HISTORY:
                continue
            rows = int(scan.get("rows") or 0)
            walk = scan.get("Node Type") in ("Index Scan", "Index Only Scan")
            if scan.get("Node Type") == "Seq Scan" or (
                scan.get("access_type") == "ALL" and rows > FEW_ROWS
            ):
                problems.append(f"full scan of {table}: {sql}")
            elif walk and "Index Cond" not in scan:  # the whole index, in its order
                problems.append(f"every entry of an index of {table}: {sql}")
            elif bounded and db.kind != "postgres" and rows > FEW_ROWS:
                problems.append(f"{rows} rows of {table} expected: {sql}")
    return problems


@pytest.mark.mysql_ci
def test_every_statement_of_a_call_is_served_by_an_index_on_a_long_history(
    spark, db, journal_schema
):
    schema = journal_schema
    table, other, log = (
        _new_table(db, schema),
        _new_table(db, schema),
        _new_table(db, schema, False),
    )
    login = connection_args(db, journal_schema=schema)
    sink = f"history-{uuid.uuid4().hex[:6]}"
    write_xa(events_df(spark, 10, 1), table=table, **login)  # makes the journal
    run_sql(db, f"UPDATE {schema}.xasink_meta SET retention_days = 0")  # keep everything
    with contextlib.closing(db.admin_connect()) as conn:
        if db.kind != "postgres":
            conn.autocommit(True)
        history.fill(
            "postgres" if db.kind == "postgres" else "mysql",
            conn,
            schema,
            jobs=HISTORY,
            table=_recorded_as(db, table),
            sink=sink,
        )
    frame = events_df(spark, 100, 2)
    with recorded() as calls:
        write_xa(frame, table=table, mode="upsert", key="id", **login)  # one phase, staged
        write_xa(
            frame,
            table=table,
            mode="upsert",
            key="id",
            **login,
            writer_properties=WriterProperties(driver_write_bytes=0),
        )
        write_xa(events_df(spark, 5, 1), table=log, **login)  # one phase, append
        write_xa(
            events_df(spark, 5, 1),
            table=log,
            **login,
            writer_properties=WriterProperties(driver_write_bytes=0),
        )
        for batch in (1, 2):  # a stream's batches (foreach_batch's call)
            write_xa(
                frame, table=table, mode="upsert", key="id", sink_id=sink, batch_id=batch, **login
            )
        with transaction(**login) as tx:  # two tables, staged, two phases
            tx.write(
                frame,
                table,
                mode="overwrite",
                writer_properties=WriterProperties(driver_write_bytes=0),
            )
            tx.write(
                frame,
                other,
                mode="upsert",
                key="id",
                writer_properties=WriterProperties(driver_write_bytes=0),
            )
        with transaction(**login) as tx:  # two tables, one local transaction
            tx.write(frame, table, mode="upsert", key="id")
            tx.write(frame, other, mode="upsert", key="id")
    for name, ids in ((table, range(100)), (other, range(100)), (log, [*range(5)] * 2)):
        found = [int(r[0]) for r in run_sql(db, f"SELECT id FROM {name} ORDER BY id")]
        assert found == sorted(ids), name
    assert xasink_prepared(db) == []
    per_call = _explained(db, calls)
    assert len(per_call) > 10, [sql for sql, _ in per_call]
    assert _problems(db, per_call, bounded=True) == []

    # The retention's own round reads its candidates by index too (what it deletes).
    run_sql(db, f"UPDATE {schema}.xasink_meta SET retention_days = 30")
    with recorded() as rounds, _journal_session(db, schema) as (session, journal, spec):
        retention._due.clear()
        swept = retention.tend(journal, session, spec)
    assert swept is not None and swept.jobs == retention.ROUND and swept.more
    assert _problems(db, _explained(db, rounds), bounded=False) == []
    for command in (["jobs", "--limit", "20"], ["check"]):
        done = xasink_cli(db, command[0], "--journal-schema", schema, *command[1:])
        assert done.returncode == 0, done.stdout + done.stderr

    # `check` reads what it reports through indexes too (its list of the states a journal
    # holds walked MariaDB's whole state index before: 3.6 s at 10M jobs).
    with recorded() as checked:
        health = check_health(database_of(db, journal_schema=schema))
    assert health.healthy, health
    # Below `records.ESTIMATED_FROM` jobs (60k here) the committed ones are counted on purpose.
    listed = [(sql, p) for sql, p in checked if list(p) != [JobState.COMMITTED]]
    assert _problems(db, _explained(db, listed), bounded=True) == []


def _recorded_as(db, table: str) -> str:
    """A `schema.name` table as the journal records it (PostgreSQL resolves the spelling;
    MySQL's schema is the database)."""
    return table


@contextlib.contextmanager
def _journal_session(db, schema: str):
    spec = spec_for(db)
    session, journal = open_journal(spec, schema)
    with session:
        yield session, journal, spec


#: The indexes of the jobs table this layout adds (`journal_tables`).
NEW_INDEXES = ("state_created", "table_created", "created", "staged")


def _indexes(db, schema: str, table: str) -> set[str]:
    if db.kind == "postgres":
        sql = (
            f"SELECT indexname FROM pg_indexes WHERE schemaname = '{schema}' AND tablename = "
            f"'{table}'"
        )
    else:
        sql = (
            "SELECT DISTINCT INDEX_NAME FROM information_schema.STATISTICS WHERE "
            f"TABLE_SCHEMA = '{schema}' AND TABLE_NAME = '{table}'"
        )
    return {str(r[0]) for r in run_sql(db, sql)}


def test_a_journal_of_the_earlier_layout_is_upgraded_in_place(spark, db, journal_schema):
    """A journal of layout 2 (its indexes, no list of a job's tables, no retention, no
    job modes) is upgraded by the next write: the new table, columns and indexes, the
    replaced indexes gone, and each open transaction's tables listed from its plan, so
    that writes into its second table still find it."""
    schema = journal_schema
    first, second = _new_table(db, schema), _new_table(db, schema)
    third = _new_table(db, schema, keyed=False)
    login = connection_args(db, journal_schema=schema)
    write_xa(events_df(spark, 5, 1), table=third, **login)
    j, pg = f"{schema}.xasink", db.kind == "postgres"
    drop = [f"DROP INDEX {schema}.{{}}" if pg else f"DROP INDEX {{}} ON {j}_jobs"][0]
    run_sql(
        db,
        f"DROP TABLE {j}_job_tables",
        *(
            drop.format(f"xasink_jobs_{n}_idx")
            for n in ("state_created", "table_created", "created", "staged")
        ),
        f"CREATE INDEX xasink_jobs_state_idx ON {j}_jobs (state)",
        f"CREATE INDEX xasink_jobs_target_table_state_idx ON {j}_jobs (target_table, state)",
        f"ALTER TABLE {j}_meta DROP COLUMN retention_days",
        f"ALTER TABLE {j}_jobs DROP COLUMN write_mode",
        f"UPDATE {j}_meta SET version = 2",
    )
    job = uuid.uuid4().hex
    refs = [dict(zip(("schema", "name"), t.split("."), strict=True)) for t in (first, second)]
    plan = json.dumps({"writes": [{"target": r, "mode": "upsert"} for r in refs]})
    now = "now()" if pg else "UTC_TIMESTAMP(6)"
    run_sql(  # an earlier release's transaction, alive and writing
        db,
        f"INSERT INTO {j}_jobs (job_id, target_table, state, beats, lease_seconds, created_at, "
        f"heartbeat_at, apply_plan) VALUES ('{job}', '{first}', 'running', 1, 3600, {now}, "
        f"{now}, '{plan}')",
    )
    # A branch left in doubt (its locks would stall the DDL): the write goes on with the
    # earlier layout, and leaves the upgrade for later.
    tag = run_sql(db, f"SELECT tag FROM {j}_meta")[0][0]
    rollback = prepared_branch(db, schema, BranchId(str(tag), uuid.uuid4().hex, 0, 1))
    CHECKS.clear()  # a process of this release meets the older journal for the first time
    write_xa(events_df(spark, 5, 1), table=third, **login)
    assert run_sql(db, f"SELECT version FROM {j}_meta") == [(2,)]
    run_sql(db, rollback)  # as `xasink recover` would
    CHECKS.clear()
    write_xa(events_df(spark, 5, 1), table=third, **login)  # the upgrade, then its write
    assert run_sql(db, f"SELECT version FROM {j}_meta") == [(SCHEMA_VERSION,)]
    listed = run_sql(db, f"SELECT target_table FROM {j}_job_tables WHERE job_id = '{job}'")
    assert sorted(listed) == sorted([(first,), (second,)])
    assert {"xasink_jobs_state_created_idx", "xasink_jobs_staged_idx"} <= _indexes(
        db, schema, "xasink_jobs"
    )
    assert not {"xasink_jobs_state_idx", "xasink_jobs_target_table_state_idx"} & _indexes(
        db, schema, "xasink_jobs"
    )
    assert len(run_sql(db, f"SELECT id FROM {third}")) == 5 * 3
    listed = xasink_cli(db, "jobs", "--journal-schema", schema, "--table", second, "--json")
    assert [j["job_id"] for j in json.loads(listed.stdout)] == [job], listed.stdout
    run_sql(db, f"UPDATE {j}_jobs SET state = 'aborted', apply_plan = NULL WHERE job_id = '{job}'")


def test_a_journal_of_layout_3_is_read_as_it_is_then_keeps_its_jobs_modes(
    spark, db, journal_schema
):
    """Layout 4 adds the job row's `write_mode`. A journal of layout 3 is written as it is
    while a prepared branch defers its upgrade (its rows without a mode, listed `?` once
    no plan says it), and upgraded by the next write: from then on each job keeps its
    mode, after its plan is gone too."""
    schema, j = journal_schema, f"{journal_schema}.xasink"
    table = _new_table(db, schema)
    login = connection_args(db, journal_schema=schema)
    before = write_xa(events_df(spark, 5, 1), table=table, **login)
    run_sql(db, f"ALTER TABLE {j}_jobs DROP COLUMN write_mode", f"UPDATE {j}_meta SET version = 3")
    tag = run_sql(db, f"SELECT tag FROM {j}_meta")[0][0]
    rollback = prepared_branch(db, schema, BranchId(str(tag), uuid.uuid4().hex, 0, 1))
    CHECKS.clear()  # a process of this release meets the older journal for the first time
    upsert = {"mode": "upsert", "key": "id"}
    deferred = write_xa(events_df(spark, 5, 1), table=table, **upsert, **login)
    assert run_sql(db, f"SELECT version FROM {j}_meta") == [(3,)]
    run_sql(db, rollback)  # as `xasink recover` would
    CHECKS.clear()
    after = write_xa(events_df(spark, 7, 1), table=table, **upsert, **login)
    assert run_sql(db, f"SELECT version FROM {j}_meta") == [(SCHEMA_VERSION,)]
    listed = xasink_cli(db, "jobs", "--journal-schema", schema, "--json")
    modes = {x["job_id"]: x["mode"] for x in json.loads(listed.stdout)}
    assert modes == {before.job_id: "?", deferred.job_id: "?", after.job_id: "upsert"}
    assert len(run_sql(db, f"SELECT id FROM {table}")) == 7
    assert xasink_prepared(db) == []
