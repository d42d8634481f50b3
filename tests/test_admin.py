"""The ways out for a person: `xasink jobs`, `xasink resolve --abandon`, `xasink prune`.

Decided jobs that can never finish are made for real: a winner rolled back by
an administrator, a column dropped between the decision and the apply.
"""

from __future__ import annotations

import itertools
import json

import pytest
from support import (
    PARTITIONS,
    ROWS,
    assert_exactly,
    cli,
    contents,
    database_of,
    job_states,
    kill_driver_at,
    mode_case,
    new_table,
    old_contents,
    seeded_table,
    stage_tables,
    xasink_cli,
    xasink_prepared,
)
from test_recovery import parsed_branches

from xasink import WriterProperties, transaction, write_xa


def job_row(db, job_id: str) -> dict[str, object]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT state, resolved_by, resolution FROM xasink_jobs WHERE job_id = %s", (job_id,)
        )
        state, who, what = cursor.fetchone()
    return {"state": state, "resolved_by": who, "resolution": what}


def _roll_back_behind_xasink(db, branch) -> None:
    """An administrator rolls back one prepared branch: its rows can never arrive."""
    if db.kind == "postgres":
        with db.admin_connect() as conn:
            conn.execute(f"ROLLBACK PREPARED '{branch.xid}'")
    else:
        with db.admin_connect() as conn:
            xid = f"X'{branch.xid.gtrid.hex()}',X'{branch.xid.bqual.hex()}',{branch.xid.format_id}"
            conn.cursor().execute(f"XA ROLLBACK {xid}")


def _listed(db, job_id: str, *args: str) -> tuple[dict[str, object], list[str]]:
    """The job as `xasink jobs --json` lists it, and its lines in the printed table."""
    found = json.loads(xasink_cli(db, "jobs", "--json", *args).stdout)
    text = xasink_cli(db, "jobs", *args).stdout.splitlines()
    at = next(i for i, line in enumerate(text) if line.startswith(job_id))
    mine = text[at : at + 1] + [
        line for line in itertools.takewhile(lambda x: x.startswith(" "), text[at + 1 :])
    ]
    return next(j for j in found if j["job_id"] == job_id), mine


def _checked(db, job_id: str, *args: str) -> tuple[int, list[str]]:
    """`xasink check`'s exit status, and its lines about `job_id` (other tests' jobs share
    the journal)."""
    done = xasink_cli(db, "check", *args)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, [line for line in done.stdout.splitlines() if job_id in line]


def test_an_append_job_with_a_lost_winner_is_shown_as_it_is_and_abandoned(db):
    """A decided winner rolled back behind xasink's back: `check` names it at
    once, with the command that ends the job (never "`xasink recover` finishes it": it
    cannot); `recover` reports its LOST line once; `jobs` shows the rows the table holds
    beside those decided, before and after `resolve --abandon`."""
    table = new_table(db)
    kill_driver_at(db, table, "after_first_commit")
    branches = parsed_branches(db)
    job_id, lost = branches[0].job_id, branches[0]
    _roll_back_behind_xasink(db, lost)
    per_partition = ROWS // PARTITIONS
    kept = ROWS - per_partition
    ending = f"`xasink resolve {job_id} --abandon`"

    for grace in ("120", "0"):  # the driver's heartbeat is fresh; then taken as silent
        status, lines = _checked(db, job_id, "--grace", grace)
        assert status == 1 and len(lines) == 1, lines
        assert lines[0].startswith(f"job={job_id} problem=lost-winner ("), lines
        assert f"partition(s) [{lost.partition}]" in lines[0] and ending in lines[0]
        assert "NOT in the table" in lines[0] and "finishes it" not in lines[0]

    # A process of its own: its report on stdout, and no log line repeating it on stderr.
    stuck = xasink_cli(db, "recover", "--grace", "0", "--job", job_id, in_process=False)
    assert stuck.returncode == 1, stuck.stdout + stuck.stderr
    said = f"job={job_id} partition={lost.partition} attempt={lost.attempt} action=LOST"
    assert (stuck.stdout + stuck.stderr).count(said) == 1, stuck.stdout + stuck.stderr
    assert "action=LOST" not in stuck.stderr and "rows are NOT in the table" in stuck.stdout
    assert job_states(db)[job_id] == "committing"

    mine, text = _listed(db, job_id)
    assert (mine["state"], mine["mode"]) == ("committing", "append")
    assert (mine["rows"], mine["rows_decided"], mine["lost_partitions"]) == (
        kept,
        ROWS,
        [lost.partition],
    )
    assert f"partition(s) [{lost.partition}]" in mine["blocker"] and ending in mine["blocker"]
    assert text[0].split()[:4] == [job_id, "committing", "append", str(kept)], text
    assert any(f"{kept} of {ROWS} decided rows are in the table" in line for line in text)
    status, lines = _checked(db, job_id, "--grace", "0")
    assert status == 1 and [line.split(" (")[0] for line in lines] == [
        f"job={job_id} problem=lost-winner"
    ], lines

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
    mine, text = _listed(db, job_id, "--state", "abandoned")
    assert (mine["mode"], mine["rows"], mine["rows_decided"], mine["lost_partitions"]) == (
        "append",
        kept,
        ROWS,
        [lost.partition],
    )
    assert text[0].split()[:4] == [job_id, "abandoned", "append", str(kept)], text
    assert _checked(db, job_id)[1] == []
    missing = range(lost.partition * per_partition, (lost.partition + 1) * per_partition)
    assert_exactly(db, table, [i for i in range(ROWS) if i not in missing])
    assert cli(db, "--grace", "0").returncode == 0
    assert not any(b.job_id == job_id for b in parsed_branches(db))


@pytest.mark.parametrize("writer", ["driver", "tasks"])
@pytest.mark.ci_one_server
def test_jobs_lists_the_mode_of_every_finished_job(spark, db, writer):
    """The runbook's "do not run an append again" reads the mode column: a finished staged
    job's plan is dropped with its staging table, and a small write's job never stores one,
    yet each is listed with its mode. Each mode, and a transaction of two, written by the
    driver (one local transaction) or by tasks."""
    properties = WriterProperties(driver_write_bytes=0 if writer == "tasks" else 1 << 30)
    database = database_of(db)
    written: dict[str, tuple[str, str]] = {}
    for mode in ("append", "overwrite", "upsert", "merge"):
        table = seeded_table(db)
        df, options, expected = mode_case(spark, mode)
        result = write_xa(df, database, table, writer_properties=properties, **options)
        assert contents(db, table) == expected
        written[result.job_id] = (mode, table)
    upserted, appended = seeded_table(db), seeded_table(db)
    (up, up_options, up_expected), (ap, _, ap_expected) = (
        mode_case(spark, "upsert"),
        mode_case(spark, "append"),
    )
    with transaction(database) as tx:
        tx.write(up, upserted, writer_properties=properties, **up_options)
        tx.write(ap, appended, writer_properties=properties)
    assert (contents(db, upserted), contents(db, appended)) == (up_expected, ap_expected)
    assert tx.result is not None
    written[tx.result.job_id] = ("upsert,append", appended)
    listed = {
        job_id: _listed(db, job_id, "--table", table) for job_id, (_, table) in written.items()
    }
    assert {job_id: (j["state"], j["mode"]) for job_id, (j, _) in listed.items()} == {
        job_id: ("committed", mode) for job_id, (mode, _) in written.items()
    }
    for job_id, (mine, text) in listed.items():
        assert text[0].split()[1:3] == ["committed", written[job_id][0]], text
        assert mine["rows"] == mine["rows_decided"] and mine["lost_partitions"] == []
    assert stage_tables(db) == [] and xasink_prepared(db) == []


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
