"""The ways out for a person: `xasink jobs`, `xasink resolve --abandon`, `xasink prune`.

Decided jobs that can never finish are made for real: a winner rolled back by
an administrator, a column dropped between the decision and the apply.
"""

from __future__ import annotations

import json

import pytest
from support import (
    PARTITIONS,
    ROWS,
    assert_exactly,
    cli,
    job_states,
    kill_driver_at,
    new_table,
    old_contents,
    seeded_table,
    stage_tables,
    xasink_cli,
    xasink_prepared,
)
from test_recovery import parsed_branches


def job_row(db, job_id: str) -> dict[str, object]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT state, resolved_by, resolution FROM xasink_jobs WHERE job_id = %s", (job_id,)
        )
        state, who, what = cursor.fetchone()
    return {"state": state, "resolved_by": who, "resolution": what}


def test_an_append_job_with_a_lost_winner_is_listed_and_abandoned(db):
    table = new_table(db)
    kill_driver_at(db, table, "after_first_commit")
    branches = parsed_branches(db)
    job_id, lost = branches[0].job_id, branches[0]
    # An administrator rolls back one decided winner: its rows can never arrive.
    if db.kind == "postgres":
        with db.admin_connect() as conn:
            conn.execute(f"ROLLBACK PREPARED '{lost.xid}'")
    else:
        with db.admin_connect() as conn:
            xid = f"X'{lost.xid.gtrid.hex()}',X'{lost.xid.bqual.hex()}',{lost.xid.format_id}"
            conn.cursor().execute(f"XA ROLLBACK {xid}")
    stuck = cli(db, "--grace", "0")
    assert stuck.returncode == 1 and "action=LOST" in stuck.stdout, stuck.stdout
    assert "rows are NOT in the table" in stuck.stdout
    assert job_states(db)[job_id] == "committing"

    listed = xasink_cli(db, "jobs", "--json")
    assert listed.returncode == 1, listed.stderr
    mine = next(j for j in json.loads(listed.stdout) if j["job_id"] == job_id)
    assert mine["state"] == "committing" and mine["rows"] == ROWS
    assert f"partition(s) [{lost.partition}]" in mine["blocker"]
    assert f"xasink resolve {job_id} --abandon" in mine["blocker"]

    # A process of its own without a terminal, and no --yes: nothing may wait for an answer.
    refused = xasink_cli(db, "resolve", job_id, "--abandon", in_process=False)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = xasink_cli(
        db, "resolve", job_id, "--abandon", "--yes", "--reason", "partition rewritten"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "state=abandoned" in done.stdout
    row = job_row(db, job_id)
    assert row["state"] == "abandoned"
    assert f"as {db.user}" in str(row["resolved_by"])
    assert "partition rewritten" in str(row["resolution"])
    assert db.password not in done.stdout + done.stderr
    per_partition = ROWS // PARTITIONS
    missing = range(lost.partition * per_partition, (lost.partition + 1) * per_partition)
    assert_exactly(db, table, [i for i in range(ROWS) if i not in missing])
    assert cli(db, "--grace", "0").returncode == 0


@pytest.mark.ci_one_server
def test_a_staged_job_broken_by_schema_drift_is_abandoned_with_the_table_unchanged(db):
    table = seeded_table(db)
    kill_driver_at(db, table, "before_finish", mode="upsert")
    # The apply writes column `v`; an administrator drops it after the decision.
    with db.admin_connect() as conn:
        conn.cursor().execute(f"ALTER TABLE {table} DROP COLUMN v")
        if db.kind != "postgres":
            conn.commit()
    stuck = cli(db, "--grace", "0")
    assert stuck.returncode == 1 and "action=failed" in stuck.stdout, stuck.stdout
    job_id = next(j for j, s in job_states(db).items() if s == "committing")
    blocker = json.loads(xasink_cli(db, "jobs", "--json", "--state", "committing").stdout)
    assert [j["job_id"] for j in blocker] == [job_id]
    done = xasink_cli(db, "resolve", job_id, "--abandon", "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert job_row(db, job_id)["state"] == "aborted"
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT id, name FROM {table}")
        assert {i: n for i, n in cursor.fetchall()} == {
            i: n for i, (n, _) in old_contents().items()
        }
    assert stage_tables(db) == [] and xasink_prepared(db) == []


def _marked_jobs(db) -> set[str]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT job_id FROM xasink_sinks WHERE job_id IS NOT NULL")
        return {str(row[0]) for row in cursor.fetchall()}


def _kept_jobs(db) -> set[str]:
    """Jobs prune keeps whatever their age, besides the marked ones: a participant's
    fence, a coordinator's job with a pending participant, a plan still to drop, a job with
    a branch still prepared (other tests of this session leave them in the shared
    journal)."""
    busy = {b.job_id for b in parsed_branches(db)}
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT job_id FROM xasink_jobs WHERE (state = 'aborted' AND resolved_by = "
            "'xasink recover') OR apply_plan IS NOT NULL OR job_id IN (SELECT job_id FROM "
            "xasink_links WHERE role = 'participant' AND state = 'pending')"
        )
        return {str(row[0]) for row in cursor.fetchall()} | busy


@pytest.mark.ci_one_server
def test_prune_deletes_only_long_finished_jobs(db):
    """Prune deletes the rows of jobs that ended longer ago than asked, and never a running
    job, a job that ended within the grace, or the job a sink's mark names."""
    from test_protocol import admin_sql

    table = new_table(db)
    kill_driver_at(db, table, "before_decision")  # leaves a running job with branches
    running = next(j for j, s in job_states(db).items() if s == "running")
    shift = "INTERVAL '10 days'" if db.kind == "postgres" else "INTERVAL 10 DAY"
    admin_sql(  # as ten days older: a job that ended then began before it
        db,
        f"UPDATE xasink_jobs SET created_at = created_at - {shift}, finished_at = finished_at "
        f"- {shift}",
    )
    finished = [j for j, s in job_states(db).items() if s in ("committed", "aborted", "abandoned")]
    prunable = set(finished) - _marked_jobs(db) - _kept_jobs(db)
    dry = xasink_cli(db, "prune", "--older-than", "1", "--dry-run", "--json")
    expected = {"dry_run": True, "jobs": len(prunable), "tombstones": 0, "skipped": []}
    assert json.loads(dry.stdout) == expected, dry.stdout
    assert xasink_cli(db, "prune", "--older-than", "3650").stdout.startswith(
        "deleted the journal rows of 0 job(s)"
    )
    assert xasink_cli(db, "prune", "--older-than", "1").returncode == 0
    left = job_states(db)
    assert running in left and not prunable & set(left)
    assert _marked_jobs(db) <= set(left)
    assert cli(db, "--grace", "0").returncode == 0
    assert_exactly(db, table, [])
