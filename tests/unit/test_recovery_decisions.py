"""Recovery's decision table, on an in-memory journal and in-memory prepared branches: what
each job state does to its branches, and in which order jobs are resolved."""

from __future__ import annotations

import json

import pytest

from xasink.protocol import applying
from xasink.protocol.branches import Outcome
from xasink.protocol.recovery import (
    BranchAction,
    RecoveryReport,
    Resolver,
    resolve_in_doubt,
)
from xasink.tables.staging import ApplyPlan, stage_name

JOB = "0123456789abcdef0123456789abcdef"
LOST = (
    "decided for commit, but rolled back without committing (no marker, job not committed): "
    "its rows are NOT in the table"
)


def run(fakes, journal, ops, job=JOB, *, grace=120.0, dry_run=False, ages=None):
    """Resolve one job; the actions as (partition, attempt, action, detail)."""
    report = RecoveryReport(dry_run=dry_run)
    resolver = Resolver(ops, None, journal, grace, dry_run, report)
    if ages is not None:
        resolver._ages = ages
    resolver.resolve(job)
    return [(a.partition, a.attempt, a.action, a.detail) for a in report.actions]


def setup(fakes, state, winners=(), prepared=(), **record):
    journal = fakes.Journal()
    journal.jobs[JOB] = fakes.record(state, frozenset(winners), **record)
    ops = fakes.Ops([fakes.branch(p, a) for p, a in prepared])
    return journal, ops


# -- decided jobs ------------------------------------------------------------------------------
def test_committing_commits_winners_rolls_back_the_rest_then_finishes(fakes):
    journal, ops = setup(fakes, "committing", {(0, 1), (1, 0)}, [(1, 0), (0, 0), (0, 1)])
    assert run(fakes, journal, ops) == [
        (0, 0, "rollback", "not a winner"),
        (0, 1, "commit", "decided"),
        (1, 0, "commit", "decided"),
        (-1, -1, "committed", "every winner committed"),
    ]
    assert ops.calls == [
        ("rollback", f"{JOB}/p0/a0"),
        ("commit", f"{JOB}/p0/a1"),
        ("commit", f"{JOB}/p1/a0"),
    ]
    assert ops.branches == []
    assert journal.calls == [("finish", JOB, frozenset({(0, 1), (1, 0)}))]
    assert journal.jobs[JOB].state == "committed"


def test_a_winner_no_longer_listed_is_settled_by_its_marker(fakes):
    journal, ops = setup(fakes, "committing", {(0, 0), (1, 0)}, [(0, 0)])
    assert run(fakes, journal, ops) == [
        (0, 0, "commit", "decided"),
        (1, 0, "already committed", "marker row or committed job found"),
        (-1, -1, "committed", "every winner committed"),
    ]
    assert ops.calls == [("commit", f"{JOB}/p0/a0"), ("settled", f"{JOB}/p1/a0")]


def test_a_lost_winner_of_a_staged_job_aborts_it_unapplied(fakes):
    journal, ops = setup(fakes, "committing", {(0, 0), (1, 0)}, [(0, 0)], staged=True)
    ops.settled_as[fakes.branch(1, 0)] = Outcome.LOST
    assert run(fakes, journal, ops) == [
        (0, 0, "commit", "decided"),
        (1, 0, "LOST", LOST),
        (
            -1,
            -1,
            "aborted",
            "a decided branch was lost before the apply: the target is unchanged; run the "
            "write again",
        ),
    ]
    assert journal.jobs[JOB].state == "aborted"
    assert ("abandon", JOB) in journal.calls
    assert not [c for c in journal.calls if c[0] == "finish"]


def test_a_lost_winner_of_an_append_job_is_left_for_a_person(fakes):
    journal, ops = setup(fakes, "committing", {(0, 0)}, [(0, 0)])
    ops.outcomes[fakes.branch(0, 0)] = Outcome.LOST
    actions = run(fakes, journal, ops)
    assert actions[0] == (0, 0, "LOST", LOST)
    assert actions[1][:3] == (-1, -1, "LOST")
    assert actions[1][3].startswith("append job with a lost branch: the other branches' rows")
    assert f"`xasink resolve {JOB} --abandon`" in actions[1][3]
    assert journal.jobs[JOB].state == "committing"  # never finished: the rows are missing


@pytest.mark.parametrize("state", ["committed", "abandoned"])
def test_stragglers_of_a_finished_job(fakes, state):
    journal, ops = setup(fakes, state, {(0, 1)}, [(0, 1), (0, 2)])
    assert run(fakes, journal, ops) == [
        (0, 1, "commit", "decided"),
        (0, 2, "rollback", "not a winner"),
    ]
    assert journal.calls == []  # nothing to finish, no marker to read
    assert ("settled", f"{JOB}/p0/a0") not in ops.calls


def test_a_failed_commit_is_reported_redacted_and_the_job_is_not_finished(fakes):
    journal, ops = setup(fakes, "committing", {(0, 0)}, [(0, 0)])
    ops.outcomes[fakes.branch(0, 0)] = RuntimeError(
        f"connection jdbc:postgresql://app:{fakes.SECRET}@db/app reset (password {fakes.SECRET})"
    )
    assert run(fakes, journal, ops) == [
        (
            0,
            0,
            "failed",
            "decided; connection jdbc:postgresql://app:***@db/app reset (password ***)",
        )
    ]
    assert journal.calls == []
    assert journal.jobs[JOB].state == "committing"


@pytest.mark.parametrize(
    ("finish", "staged", "action"),
    [
        ((True, None), True, (-1, -1, "applied", "staging table applied to the target")),
        ((False, None), False, (-1, -1, "finished elsewhere", "another process finished it")),
        (
            (False, RuntimeError("duplicate key value violates unique constraint")),
            True,
            (
                -1,
                -1,
                "aborted",
                "target refused the rows: duplicate key value violates unique constraint",
            ),
        ),
        (
            RuntimeError("server closed the connection"),
            False,
            (-1, -1, "failed", "finishing the job failed: server closed the connection"),
        ),
    ],
)
def test_finishing_outcomes(fakes, finish, staged, action):
    journal, ops = setup(fakes, "committing", {(0, 0)}, [(0, 0)], staged=staged)
    journal.finishes[JOB] = finish
    assert run(fakes, journal, ops) == [(0, 0, "commit", "decided"), action]


def test_a_staged_job_behind_an_older_decision_waits(fakes):
    from xasink.protocol.applying import JobOrderError

    journal, ops = setup(fakes, "committing", {(0, 0)}, [(0, 0)], staged=True)
    plan = ApplyPlan("upsert", _target(), stage_name(JOB, None), ("id",), ("id",))
    journal.finishes[JOB] = JobOrderError("f" * 32, str(plan.target))
    assert run(fakes, journal, ops)[-1] == (
        -1,
        -1,
        "left",
        f"waits: job {'f' * 32}, decided earlier on public.events, is not finished yet; staged "
        "jobs on one table are applied in decision order",
    )


def test_a_dry_run_of_a_decided_job_says_what_it_would_do(fakes):
    journal, ops = setup(fakes, "committing", {(0, 1)}, [(0, 0), (0, 1)], staged=True)
    assert run(fakes, journal, ops, dry_run=True)[:2] == [
        (0, 0, "would rollback", "not a winner"),
        (0, 1, "would commit", "decided"),
    ]
    assert ops.calls == [] and journal.calls == []


def test_a_dry_run_of_a_committed_staged_job_would_apply_it(fakes):
    journal, ops = setup(fakes, "committing", {(0, 1)}, [], staged=True)
    assert run(fakes, journal, ops, dry_run=True) == [
        (0, 1, "already committed", "marker row or committed job found"),
        (-1, -1, "would apply", "staging table to the target"),
    ]
    assert journal.calls == []


def test_a_dry_run_with_winners_to_commit_also_says_it_would_apply(fakes):
    journal, ops = setup(fakes, "committing", {(0, 1)}, [(0, 1)], staged=True)
    assert run(fakes, journal, ops, dry_run=True)[-1] == (
        -1,
        -1,
        "would apply",
        "staging table to the target",
    )


# -- undecided jobs ------------------------------------------------------------------------------
def test_aborted_rolls_everything_back(fakes):
    journal, ops = setup(fakes, "aborted", (), [(0, 0), (3, 1)])
    assert run(fakes, journal, ops) == [
        (0, 0, "rollback", "job aborted"),
        (3, 1, "rollback", "job aborted"),
    ]


@pytest.mark.parametrize(
    ("age", "lease", "grace", "detail"),
    [
        (5.0, 0.0, 120.0, "job running, heartbeat 5s ago < grace 120s"),
        (200.0, 300.0, 120.0, "job running, heartbeat 200s ago < grace 300s"),  # its own lease
    ],
)
def test_a_live_job_is_left_alone(fakes, age, lease, grace, detail):
    journal, ops = setup(fakes, "running", (), [(0, 0)], heartbeat_age=age, lease=lease)
    assert run(fakes, journal, ops, grace=grace) == [(0, 0, "left", detail)]
    assert ops.calls == [] and journal.calls == []


@pytest.mark.parametrize(
    ("age", "lease", "grace"),
    [
        (120.0, 0.0, 120.0),  # exactly the grace: silent
        (301.0, 300.0, 120.0),
        (0.0, 300.0, 0.0),  # grace 0: resolve now, whatever the heartbeat
        (float("inf"), 0.0, 120.0),  # heartbeat unknown: never alive
    ],
)
def test_a_silent_job_is_aborted_by_beat_count_then_rolled_back(fakes, age, lease, grace):
    journal, ops = setup(fakes, "running", (), [(0, 0), (1, 0)], heartbeat_age=age, lease=lease)
    assert run(fakes, journal, ops, grace=grace) == [
        (0, 0, "rollback", "no decision, job silent: aborted it"),
        (1, 0, "rollback", "no decision, job silent: aborted it"),
    ]
    assert journal.calls == [("abort", JOB, 3)]
    assert journal.jobs[JOB].state == "aborted"


def test_a_dry_run_aborts_nothing(fakes):
    journal, ops = setup(fakes, "running", (), [(0, 0)], heartbeat_age=500.0)
    assert run(fakes, journal, ops, dry_run=True) == [
        (0, 0, "would rollback", "no decision, job silent")
    ]
    assert journal.calls == [] and journal.jobs[JOB].state == "running"
    assert ops.branches == [fakes.branch(0, 0)]


def test_a_job_that_keeps_beating_is_left_after_three_looks(fakes):
    journal, ops = setup(fakes, "running", (), [(0, 0)], heartbeat_age=500.0)
    journal.beat_on_read = True  # each conditional abort finds a newer beat count
    assert run(fakes, journal, ops) == [
        (-1, -1, "left", "the job kept changing while recovery looked at it")
    ]
    assert journal.calls == [("abort", JOB, 3), ("abort", JOB, 4), ("abort", JOB, 5)]
    assert ops.calls == []


def test_an_unknown_state_touches_nothing(fakes):
    journal, ops = setup(fakes, "paused", (), [(0, 0)])
    assert run(fakes, journal, ops) == [(0, 0, "left", "unknown job state 'paused'")]
    assert ops.calls == []


# -- branches without a journal row ------------------------------------------------------------
@pytest.mark.parametrize(
    ("grace", "ages", "expected"),
    [
        (
            120.0,
            None,
            (
                "left",
                "no journal row (prepare time unknown); rolled back after the grace period",
            ),
        ),
        (
            120.0,
            {30.0},
            ("left", "no journal row (prepared 30s ago); rolled back after the grace period"),
        ),
        (120.0, {500.0}, ("rollback", "no journal row: presumed abort")),
        (0.0, None, ("rollback", "no journal row: presumed abort")),
    ],
)
def test_presumed_abort_without_a_row(fakes, grace, ages, expected):
    journal = fakes.Journal()
    ops = fakes.Ops([fakes.branch(0, 0)])
    known = None if ages is None else {str(fakes.branch(0, 0).xid): age for age in ages}
    assert run(fakes, journal, ops, grace=grace, ages=known) == [(0, 0, *expected)]


# -- a whole run -----------------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _stages_from_the_fake(monkeypatch):
    """A run lists the finished jobs' staging tables with a query: read the fake's list."""
    monkeypatch.setattr(
        applying, "finished_stages", lambda journal, conn, staged: journal.finished_stages(conn)
    )


def _target():
    from xasink.spec import TableRef

    return TableRef("events", "public")


def test_resolve_in_doubt_orders_undecided_first_then_by_decision(fakes):
    first, second, silent = "1" * 32, "2" * 32, "3" * 32
    journal = fakes.Journal()
    # Decided in the order second, first (jobs_in_state returns decision order).
    journal.jobs[second] = fakes.record("committing", frozenset({(0, 0)}), job_id=second)
    journal.jobs[first] = fakes.record("committing", frozenset({(0, 0)}), job_id=first)
    journal.jobs[silent] = fakes.record("running", job_id=silent, heartbeat_age=999.0)
    ops = fakes.Ops([fakes.branch(0, 0, job) for job in (first, second, silent)])
    report = resolve_in_doubt(ops, None, journal, grace=120.0)
    assert [(a.job_id, a.partition, a.action) for a in report.actions] == [
        (silent, 0, "rollback"),
        (second, 0, "commit"),
        (second, -1, "committed"),
        (first, 0, "commit"),
        (first, -1, "committed"),
    ]
    assert report.journal == "journal in the default schema, tag a1b2c3d4"
    assert report.ok


def test_resolve_in_doubt_scopes_to_a_table_and_refuses_foreign_ids(fakes):
    mine, elsewhere = "1" * 32, "2" * 32
    journal = fakes.Journal()
    journal.jobs[mine] = fakes.record("aborted", job_id=mine, table="public.events")
    journal.jobs[elsewhere] = fakes.record("aborted", job_id=elsewhere, table="public.other")
    journal.jobs["not-a-job"] = fakes.record("running", job_id="not-a-job")
    ops = fakes.Ops([fakes.branch(0, 0, mine), fakes.branch(0, 0, elsewhere)])
    report = resolve_in_doubt(ops, None, journal, table="public.events")
    assert [(a.job_id, a.action, a.detail) for a in report.actions] == [
        ("not-a-job", "failed", "not an xasink job id: row ignored"),
        (mine, "rollback", "job aborted"),
    ]
    assert ops.branches == [fakes.branch(0, 0, elsewhere)]
    assert not report.ok


def test_finished_stages_are_dropped_or_refused(fakes):
    from xasink.errors import JournalError

    journal = fakes.Journal()
    plan = ApplyPlan("overwrite", _target(), stage_name(JOB, None), ("id",))
    journal.stages = [(JOB, plan), ("x" * 80, JournalError("not written by xasink"))]
    report = resolve_in_doubt(fakes.Ops(), None, journal)
    assert [(a.job_id, a.action, a.detail) for a in report.actions] == [
        (JOB, "dropped stage", f"xasink_stage_{JOB}"),
        ("x" * 64, "failed", "not written by xasink"),
    ]
    assert journal.calls == [("release", JOB, f"xasink_stage_{JOB}")]
    dry = resolve_in_doubt(fakes.Ops(), None, journal, dry_run=True)
    assert dry.actions[0] == BranchAction(JOB, -1, -1, "would drop stage", f"xasink_stage_{JOB}")


def test_a_stage_held_by_a_late_attempt_is_dropped_after_resolving_it_again(fakes):
    journal = fakes.Journal()
    journal.jobs[JOB] = fakes.record("committed", frozenset({(0, 0)}), staged=True)
    journal.stages = [(JOB, ApplyPlan("overwrite", _target(), stage_name(JOB, None), ("id",)))]
    ops = fakes.Ops()
    drop = journal.release_stage

    def release_stage(conn, job_id, plan):
        if not ops.calls:  # an attempt prepared after the listing holds the stage
            ops.branches.append(fakes.branch(0, 1))
            raise fakes.LockTimeout("lock timeout")
        drop(conn, job_id, plan)

    journal.release_stage = release_stage
    report = resolve_in_doubt(ops, None, journal)
    assert [(a.partition, a.attempt, a.action, a.detail) for a in report.actions] == [
        (0, 1, "rollback", "not a winner"),
        (-1, -1, "dropped stage", f"xasink_stage_{JOB}"),
    ]
    assert journal.calls == [("release", JOB, f"xasink_stage_{JOB}")]


def test_a_stage_that_cannot_be_dropped_is_reported(fakes):
    journal = fakes.Journal()
    plan = ApplyPlan("overwrite", _target(), stage_name(JOB, None), ("id",))
    journal.stages = [(JOB, plan)]
    journal.release_failures = [RuntimeError(f"permission denied for {fakes.SECRET}")]
    report = resolve_in_doubt(fakes.Ops(), None, journal)
    assert [(a.action, a.detail) for a in report.actions] == [
        ("failed", f"dropping xasink_stage_{JOB}: permission denied for ***")
    ]


# -- the report ------------------------------------------------------------------------------------
def test_report_lines_summary_and_json():
    report = RecoveryReport(
        dry_run=True,
        journal="journal in schema ops, tag a1b2c3d4",
        actions=[
            BranchAction(JOB, 2, 5, "would commit", "decided"),
            BranchAction(JOB, -1, -1, "would apply", "staging table to the target"),
            BranchAction("f" * 32, 0, 0, "already gone"),
        ],
    )
    assert [a.line() for a in report.actions] == [
        f"job={JOB} partition=2 attempt=5 action=would-commit (decided)",
        f"job={JOB} action=would-apply (staging table to the target)",
        f"job={'f' * 32} partition=0 attempt=0 action=already-gone",
    ]
    assert [a.unresolved for a in report.actions] == [True, True, False]
    assert report.summary() == "2 branch(es) of 2 job(s) handled, 2 action(s) left unresolved"
    assert not report.ok
    assert json.loads(report.to_json())["actions"][2] == {
        "job_id": "f" * 32,
        "partition": 0,
        "attempt": 0,
        "action": "already gone",
        "detail": "",
    }


@pytest.mark.parametrize("grace", [0.0, 120.0])
def test_a_participants_silent_job_is_never_aborted_from_its_own_database(fakes, grace):
    """Only the coordinator decides a transaction's participant: however silent, its job is
    left, with who decides and the command that finishes it; nothing is rolled back."""
    from xasink.protocol.links import Link

    journal, ops = setup(fakes, "running", (), [(0, 0), (1, 0)], heartbeat_age=10_000.0)
    journal.coordinators[JOB] = Link(JOB, "c0ffee00", "coordinator", "jdbc:mariadb://h/db", None)
    actions = run(fakes, journal, ops, grace=grace)
    assert [a[:3] for a in actions] == [(-1, -1, "left"), (0, 0, "left"), (1, 0, "left")]
    assert "--url jdbc:mariadb://h/db --participant" in actions[0][3]
    assert ops.calls == [] and journal.calls == []
    assert journal.jobs[JOB].state == "running"
