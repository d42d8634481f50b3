"""The journal bounds itself: writers delete the rows of jobs that ended longer ago than its
retention, keeping every row that something still reads; `xasink prune` does it at once.

The old history is made by the servers' own row generators (`benchmarks/history.py`); the
rows that must stay are written as xasink writes them (a participant's fence, a
coordinator's pending participant, a sink's mark, a staging table still to drop), each
aged with the history, so that only the rule that keeps it can save it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import uuid
from pathlib import Path
from typing import Any

from support import (
    assert_clean,
    connection_args,
    prepared_branch,
    run_sql,
    spec_for,
    start_foreach_stream,
    stream_files,
    xasink_cli,
)

from xasink import foreach_batch, write_xa
from xasink.protocol import retention
from xasink.xid import BranchId

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import history

#: Finished jobs that ended 30 to 60 days ago, past the default retention (7 days).
OLD = 3_000


def _old_history(db, schema: str, table: str, sink: str, jobs: int = OLD) -> None:
    with contextlib.closing(db.admin_connect()) as conn:
        if db.kind != "postgres":
            conn.autocommit(True)
        kind = "postgres" if db.kind == "postgres" else "mysql"
        history.fill(kind, conn, schema, jobs=jobs, table=table, sink=sink, days=30,
                     newest_days_ago=30)  # fmt: skip


def _jobs(db, schema: str) -> dict[str, str]:
    rows = run_sql(db, f"SELECT job_id, state FROM {schema}.xasink_jobs")
    return {str(job): str(state) for job, state in rows}


def _table(db, schema: str) -> str:
    name = f"{schema}.r_{uuid.uuid4().hex[:8]}"
    ddl = f"CREATE TABLE {name} (id BIGINT NOT NULL, name TEXT, v DOUBLE PRECISION)"
    run_sql(db, ddl, admin=False)
    return name


def test_a_streams_own_batches_keep_its_journal_within_its_retention(
    spark, db, journal_schema, tmp_path, monkeypatch
):
    """A foreachBatch stream, and no command run by hand: each batch's end sweeps a round
    of the journal's old history, and the stream's own recent jobs stay."""
    schema, sink = journal_schema, f"retained-{uuid.uuid4().hex[:6]}"
    table = _table(db, schema)
    login = connection_args(db, journal_schema=schema)
    first = write_xa(_row(spark, -1), table=table, **login).job_id
    _old_history(db, schema, table, sink)
    old = set(_jobs(db, schema)) - {first}
    assert len(old) == OLD
    # Rounds as often as the stream calls (a backlog waits a few seconds between rounds),
    # and small enough that this history takes several.
    monkeypatch.setattr(retention, "BACKLOG_INTERVAL", 0.0)
    monkeypatch.setattr(retention, "ROUND", 1_000)
    retention._due.clear()
    stream_files(tmp_path / "in", batches=5, per_batch=10)
    query = start_foreach_stream(
        spark, tmp_path / "in", tmp_path / "cp", foreach_batch(table=table, sink_id=sink, **login)
    )
    query.awaitTermination(300)
    after = _jobs(db, schema)
    assert old & set(after) == set()
    assert first in after and len(after) == 1 + 5  # the first write's, one job per batch
    assert set(after.values()) == {"committed"}
    assert sorted(int(r[0]) for r in run_sql(db, f"SELECT id FROM {table}")) == [-1, *range(50)]


def _row(spark, key: int):
    return spark.createDataFrame([(key, "x", 0.5)], "id long, name string, v double")


def test_prune_keeps_every_row_something_still_reads(spark, db, journal_schema):
    """Each kept row is as old as the history: a participant's fence (review 4, R6), a
    coordinator's job whose participant is not finished, the job a sink's mark names, a
    finished staged job whose staging table is still to drop. Everything else goes."""
    schema = journal_schema
    table = _table(db, schema)
    login = connection_args(db, journal_schema=schema)
    first = write_xa(_row(spark, 1), table=table, **login).job_id
    _old_history(db, schema, table, "history-sink", jobs=50)
    old = sorted(set(_jobs(db, schema)) - {first})[:5]  # each to be kept for its reason
    fence, coordinated, marked, staged, straggling = old
    j = f"{schema}.xasink"
    run_sql(
        db,
        f"UPDATE {j}_jobs SET state = 'aborted', resolved_by = 'xasink recover', "
        f"target_table = '' WHERE job_id = '{fence}'",
        f"INSERT INTO {j}_links (job_id, peer, role, address, state) VALUES ('{coordinated}', "
        "'abcd1234', 'participant', 'jdbc:postgresql://elsewhere/db', 'pending')",
        f"INSERT INTO {j}_sinks (sink_id, batch_id, job_id, updated_at) VALUES ('kept-sink', 7, "
        f"'{marked}', {'now()' if db.kind == 'postgres' else 'UTC_TIMESTAMP(6)'})",
        f"UPDATE {j}_jobs SET apply_plan = '{{}}' WHERE job_id = '{staged}'",
    )
    # A late losing attempt of a long finished job, still prepared (recovery rolls it
    # back): its job stays, and the sweep never waits on its marker row's lock.
    tag = run_sql(db, f"SELECT tag FROM {j}_meta")[0][0]
    rollback = prepared_branch(db, schema, BranchId(str(tag), straggling, 0, 9))
    dry = xasink_cli(db, "prune", "--journal-schema", schema, "--dry-run", "--json")
    expected = {"dry_run": True, "jobs": 45, "tombstones": 0, "skipped": []}
    assert json.loads(dry.stdout) == expected, dry.stdout
    done = xasink_cli(db, "prune", "--journal-schema", schema)
    assert done.stdout.startswith("deleted the journal rows of 45 job(s) finished over 7 days ago")
    left = _jobs(db, schema)
    assert set(old) <= set(left) and len(left) == 5 + 1
    run_sql(db, rollback)
    assert (
        "deleted the journal rows of 1 job(s)"
        in xasink_cli(db, "prune", "--journal-schema", schema).stdout
    )
    assert straggling not in _jobs(db, schema) and set(old) - {straggling} <= set(_jobs(db, schema))
    assert run_sql(db, f"SELECT COUNT(*) FROM {j}_winners WHERE job_id NOT IN "
                   f"(SELECT job_id FROM {j}_jobs)") == [(0,)]  # fmt: skip


def test_the_retention_is_the_journals_own_setting(spark, db, journal_schema):
    """Set once for every writer; 0 keeps everything, and then prune needs a number."""
    schema = journal_schema
    table = _table(db, schema)
    login = connection_args(db, journal_schema=schema)
    write_xa(_row(spark, 1), table=table, **login)
    _old_history(db, schema, table, "history-sink", jobs=20)
    short = xasink_cli(db, "prune", "--journal-schema", schema, "--set-retention", "0.5")
    assert short.returncode == 2 and "0 (keep everything) or 1 or more" in short.stderr
    keep = xasink_cli(db, "prune", "--journal-schema", schema, "--set-retention", "0")
    assert keep.stdout.startswith("the journal's retention is now 0 days (was 7)"), keep.stdout
    assert run_sql(db, f"SELECT retention_days FROM {schema}.xasink_meta") == [(0,)]
    retention._due.clear()
    write_xa(_row(spark, 2), table=table, **login)
    assert len(_jobs(db, schema)) == 20 + 2  # a writer's round keeps everything
    said = xasink_cli(db, "prune", "--journal-schema", schema)
    assert said.stdout.startswith("the journal's retention is 0 (keep everything)")
    xasink_cli(db, "prune", "--journal-schema", schema, "--set-retention", "46")
    retention._due.clear()
    write_xa(_row(spark, 3), table=table, **login)
    assert len(_jobs(db, schema)) == 10 + 3  # ended 31.5 to 60 days ago: over 46, ten went


def _tombstones(db, schema: str, table: str) -> tuple[str, dict[int, int]]:
    """(the table keeping the order of `table`'s deleted keys, id -> order in it)."""
    named = run_sql(
        db,
        f"SELECT tomb_table FROM {schema}.xasink_tombstones WHERE target_name = '{table}'",
        admin=False,
    )
    tomb = f"{schema}.{named[0][0]}"
    return tomb, {int(i): int(o) for i, o in run_sql(db, f"SELECT id, xasink_order FROM {tomb}")}


def _holding_apply_lock(db, schema: str, table: str):
    """A connection holding xasink's apply lock of `schema.table` (closing releases it)."""
    from xasink.dialects.base import advisory_key

    key = advisory_key(f"apply:{schema}\x00{table}")
    holder = db.connect()
    if db.kind == "postgres":
        holder.cursor().execute("SELECT pg_advisory_lock(%s)", (key,))
    else:
        holder.cursor().execute("SELECT GET_LOCK(%s, 10)", (f"xasink-apply-{key:x}",))
    return holder


#: The changes a merge with `order` writes in these tests.
CHANGES = "id long, v string, updated_at long, op string"


def _merged_table(
    db, journal: str, schema: str | None = None, prefix: str = "d"
) -> tuple[str, str, dict[str, Any]]:
    """A table that stores its order column, in `schema` (default: the journal's): (its
    name, `schema.name`, the keywords of a merge with `order` into it through the journal
    in `journal`)."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    table = f"{schema or journal}.{name}"
    ddl = f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, v VARCHAR(32), updated_at BIGINT)"
    run_sql(db, ddl, admin=False)
    login = connection_args(db, journal_schema=journal)
    return name, table, {"mode": "merge", "key": "id", "op": "op", "order": "updated_at", **login}


def test_the_retention_sweeps_the_order_of_deleted_keys(spark, db, journal_schema):
    """A deleted key keeps its order for the journal's retention: a writer's round and
    `xasink prune` delete the older ones, after which an older change of that key inserts
    it again; the newer ones keep theirs."""
    schema = journal_schema
    name, table, merge = _merged_table(db, schema)

    def changes(rows: list[tuple[int, str, int, str]]) -> int:
        return write_xa(spark.createDataFrame(rows, CHANGES), table=table, **merge).stale

    assert changes([(k, "", 20, "d") for k in range(4)]) == 0
    tomb, kept = _tombstones(db, schema, name)
    assert kept == {k: 20 for k in range(4)}
    ago = (
        "xasink_deleted_at - INTERVAL '30 days'"
        if db.kind == "postgres"
        else "xasink_deleted_at - INTERVAL 30 DAY"
    )
    run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = {ago} WHERE id = 0")
    retention._due.clear()  # the next write's end sweeps a round
    assert changes([(9, "x", 1, "c")]) == 0
    assert _tombstones(db, schema, name)[1] == {k: 20 for k in range(1, 4)}
    run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = {ago} WHERE id = 1")
    dry = xasink_cli(db, "prune", "--journal-schema", schema, "--dry-run", "--json")
    assert json.loads(dry.stdout) == {"dry_run": True, "jobs": 0, "tombstones": 1, "skipped": []}, (
        dry.stdout
    )
    # While an apply into the table holds its lock, its tombstones are left for later: the
    # apply counts its stale changes before its statements, and must find them unchanged.
    with contextlib.closing(_holding_apply_lock(db, schema, name)):
        done = xasink_cli(db, "prune", "--journal-schema", schema, "--json")
        assert json.loads(done.stdout) == {
            "dry_run": False,
            "jobs": 0,
            "tombstones": 0,
            "skipped": [],
        }
    done = xasink_cli(db, "prune", "--journal-schema", schema)
    assert "and the order of 1 deleted key(s)" in done.stdout, done.stdout + done.stderr
    assert _tombstones(db, schema, name)[1] == {2: 20, 3: 20}
    # Past the retention, an older change of a swept key inserts it again (docs/modes.md).
    assert changes([(k, "late", 15, "u") for k in range(4)]) == 2
    rows = run_sql(db, f"SELECT id, v, updated_at FROM {table} ORDER BY id")
    assert [tuple(r) for r in rows] == [(0, "late", 15), (1, "late", 15), (9, "x", 1)]
    assert_clean(db)


def test_prune_below_a_day_keeps_the_row_that_tells_a_lost_commit_apart(spark, db, journal_schema):
    """A small write's job commits in one local transaction, and its row is all that tells
    it committed: had the COMMIT's reply been lost, `xasink resolve JOB --abandon --table
    T` settles it by that row. An hour later, `prune --older-than 0` is refused with the
    reason (the retention's own floor of a day), so the resolve reports it committed and
    changes nothing, where before it fenced the job and said nothing of it was in T (a
    rerun would have written its rows twice). `--force` goes below the floor."""
    schema = journal_schema
    table = _table(db, schema)
    small = _row(spark, 1)
    small.cache().count()  # Spark knows its size: the driver writes it, in one transaction
    job = write_xa(small, table=table, **connection_args(db, journal_schema=schema)).job_id
    hour = "INTERVAL '1 hour'" if db.kind == "postgres" else "INTERVAL 1 HOUR"
    run_sql(
        db,  # ended an hour ago: past the grace and its lease (none: one phase), within a day
        f"UPDATE {schema}.xasink_jobs SET created_at = created_at - {hour}, finished_at = "
        f"finished_at - {hour} WHERE job_id = '{job}'",
    )
    assert run_sql(db, f"SELECT lease_seconds FROM {schema}.xasink_jobs") == [(0,)]
    pruned = xasink_cli(db, "prune", "--journal-schema", schema, "--older-than", "0")
    settle = ("resolve", job, "--journal-schema", schema, "--abandon", "--table", table, "--yes")
    settled = xasink_cli(db, *settle)
    assert f"job={job} state=committed" in settled.stdout, (
        f"prune said: {pruned.stdout}{pruned.stderr}; resolve said: {settled.stdout}"
    )
    assert _jobs(db, schema) == {job: "committed"}
    assert run_sql(db, f"SELECT id FROM {table}") == [(1,)]
    assert pruned.returncode == 2 and "--force" in pruned.stderr, pruned.stdout + pruned.stderr
    assert "resolve" in pruned.stderr and "DecisionUnknownError" in pruned.stderr
    dry = xasink_cli(db, "prune", "--journal-schema", schema, "--older-than", "0.5", "--dry-run")
    assert dry.returncode == 2 and "--force" in dry.stderr, dry.stdout + dry.stderr
    forced = xasink_cli(db, "prune", "--journal-schema", schema, "--older-than", "0", "--force")
    assert forced.stdout.startswith("deleted the journal rows of 1 job(s)"), forced.stderr
    assert _jobs(db, schema) == {}


def test_prune_never_deletes_a_tombstone_younger_than_the_retention(spark, db, journal_schema):
    """Tombstones follow the journal's retention only: `prune --older-than` below it (down
    to the grace with --force) deletes the jobs that old, and no tombstone younger than the
    retention; with a retention of 0 (keep everything), none at all."""
    schema = journal_schema
    name, table, merge = _merged_table(db, schema)
    deletes = spark.createDataFrame([(k, "", 20, "d") for k in range(3)], CHANGES)
    write_xa(deletes, table=table, **merge)
    tomb, _ = _tombstones(db, schema, name)
    days = "INTERVAL '{} days'" if db.kind == "postgres" else "INTERVAL {} DAY"
    for key, age in ((0, 3), (1, 10)):  # the retention is 7 days
        at = f"xasink_deleted_at - {days.format(age)}"
        run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = {at} WHERE id = {key}")

    def pruned(*args: str) -> int:
        done = xasink_cli(db, "prune", "--journal-schema", schema, "--json", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        return int(json.loads(done.stdout)["tombstones"])

    assert pruned("--older-than", "2") == 1
    assert _tombstones(db, schema, name)[1] == {0: 20, 2: 20}
    assert pruned("--older-than", "0", "--force") == 0
    xasink_cli(db, "prune", "--journal-schema", schema, "--set-retention", "0")
    run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = xasink_deleted_at - {days.format(30)}")
    assert pruned("--older-than", "1") == 0
    assert _tombstones(db, schema, name)[1] == {0: 20, 2: 20}


def _other_schema(db) -> str:
    """A schema (MySQL: a database) the admin makes, where this login may create tables."""
    other = f"os_{uuid.uuid4().hex[:8]}"
    if db.kind == "postgres":
        run_sql(db, f"CREATE SCHEMA {other}", f"GRANT USAGE, CREATE ON SCHEMA {other} TO {db.user}")
    else:
        run_sql(db, f"CREATE DATABASE {other}", f"GRANT ALL ON {other}.* TO '{db.user}'@'%'")
    return other


def test_a_table_of_tombstones_this_login_may_not_sweep_is_skipped(
    spark, db, journal_schema, caplog
):
    """One journal lists two tables of tombstones, and this login may no longer delete from
    the first (its privileges changed). A writer's round sweeps the other and says once
    which it skipped; `xasink prune` does the same and reports it (text and JSON)."""
    schema, other = journal_schema, _other_schema(db)
    try:
        _, first, merge = _merged_table(db, schema, other, "a")  # the same merge, into either
        tables = [first, _merged_table(db, schema, None, "b")[1]]
        for table in tables:
            deletes = spark.createDataFrame([(k, "", 20, "d") for k in range(3)], CHANGES)
            write_xa(deletes, table=table, **merge)
        listed = f"SELECT tomb_table, target_schema FROM {schema}.xasink_tombstones ORDER BY 1"
        locked, swept = (f"{s}.{t}" for t, s in run_sql(db, listed))
        assert locked.startswith(f"{other}.") and swept.startswith(f"{schema}.")
        ago = "INTERVAL '30 days'" if db.kind == "postgres" else "INTERVAL 30 DAY"
        for tomb in (locked, swept):
            run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = xasink_deleted_at - {ago}")
        revoke = (
            f"REVOKE DELETE ON {locked} FROM {db.user}"
            if db.kind == "postgres"
            else f"REVOKE DELETE ON {other}.* FROM '{db.user}'@'%'"
        )
        run_sql(db, revoke)
        caplog.set_level(logging.WARNING, logger="xasink")
        retention._due.clear()  # the next write's end sweeps a round
        rows = [(9, "x", 1, "c"), (5, "", 20, "d")]
        write_xa(spark.createDataFrame(rows, CHANGES), table=tables[1], **merge)
        assert run_sql(db, f"SELECT id FROM {swept}") == [(5,)]
        assert run_sql(db, f"SELECT COUNT(*) FROM {locked}") == [(3,)]
        said = [r.getMessage() for r in caplog.records if locked in r.getMessage()]
        assert len(said) == 1 and "skipped" in said[0], said
        run_sql(db, f"UPDATE {swept} SET xasink_deleted_at = xasink_deleted_at - {ago}")
        json_said = xasink_cli(db, "prune", "--journal-schema", schema, "--json")
        assert json.loads(json_said.stdout) == {
            "dry_run": False,
            "jobs": 0,
            "tombstones": 1,
            "skipped": [locked],
        }, json_said.stdout + json_said.stderr
        text = xasink_cli(db, "prune", "--journal-schema", schema)
        assert text.returncode == 0 and f"skipped {locked}" in text.stdout, text.stdout
        assert run_sql(db, f"SELECT COUNT(*) FROM {locked}") == [(3,)]
        assert run_sql(db, f"SELECT COUNT(*) FROM {swept}") == [(0,)]
        assert_clean(db)
    finally:
        drop = f"DROP SCHEMA {other} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {other}"
        run_sql(db, drop)


def test_a_busy_table_without_old_tombstones_asks_for_no_early_round(spark, db, journal_schema):
    """A round that finds a table being applied to (its apply lock held) comes back soon (a
    backlog's pace) only where old tombstones wait there: a busy table whose tombstones
    are all younger than the retention leaves the rounds at their pace."""
    from xasink.protocol.connecting import open_journal
    from xasink.tables.applier import STAGED_APPLY

    schema = journal_schema
    name, table, merge = _merged_table(db, schema)
    write_xa(
        spark.createDataFrame([(1, "", 20, "d"), (2, "", 20, "d")], CHANGES), table=table, **merge
    )
    tomb, _ = _tombstones(db, schema, name)
    spec = spec_for(db)

    def round_while_applied_to() -> retention.Swept | None:
        with contextlib.closing(_holding_apply_lock(db, schema, name)):
            session, journal = open_journal(spec, schema, staged=STAGED_APPLY)
            with session:
                retention._due.clear()
                return retention.tend(journal, session, spec)

    swept = round_while_applied_to()
    assert swept is not None and (swept.tombstones, swept.more) == (0, False), swept
    ago = "INTERVAL '30 days'" if db.kind == "postgres" else "INTERVAL 30 DAY"
    run_sql(db, f"UPDATE {tomb} SET xasink_deleted_at = xasink_deleted_at - {ago} WHERE id = 1")
    swept = round_while_applied_to()
    assert swept is not None and (swept.tombstones, swept.more) == (0, True), swept
    assert _tombstones(db, schema, name)[1] == {1: 20, 2: 20}
