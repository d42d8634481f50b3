"""`xasink check` without a database: which states are problems, how the report prints (text,
JSON, Prometheus exposition with escaped labels), and the exit codes of the command."""

from __future__ import annotations

import io
import json
import re
from types import SimpleNamespace

import pytest

from xasink import Database
from xasink.cli import health as check_command
from xasink.cli import main
from xasink.errors import JournalError, PreflightError
from xasink.protocol import health
from xasink.protocol.branches import Outcome
from xasink.protocol.health import (
    AGE_FROM_JOB_START,
    AGE_FROM_SERVER,
    HealthReport,
    JournalStatus,
    PreparedBranch,
    Problem,
    ProblemKind,
)
from xasink.rendering import check_json, check_prometheus, check_text, label_value

JOB = "0123456789abcdef0123456789abcdef"
OTHER = "f" * 32
URL = "jdbc:postgresql://db/app"
SECRET = "s3cr3t-Pa55word!"
JOURNAL = "journal in the default schema, tag a1b2c3d4"


def report(**fields) -> HealthReport:
    values = {
        "journal": JOURNAL,
        "journal_status": JournalStatus.OK,
        "max_age": 120.0,
        "grace": 120.0,
        "age_source": AGE_FROM_SERVER,
    }
    return HealthReport(**{**values, **fields})


def branch(age: float | None, state: str | None = "running", job: str = JOB, p: int = 0):
    return PreparedBranch(job, p, 10 + p, age, state)


# -- which states are problems ---------------------------------------------------------------
def kinds(problems: list[Problem]) -> list[tuple[str, str]]:
    return [(str(p.kind), p.job_id) for p in problems]


def branch_problems(branches, jobs=(), max_age=120.0, grace=120.0, source=AGE_FROM_SERVER):
    open_jobs = {r.job_id: r for r in jobs}
    return health._branch_problems(branches, open_jobs, max_age, grace, source)


def test_a_branch_is_a_problem_only_once_older_than_max_age(fakes):
    alive = fakes.record("running", heartbeat_age=5.0)
    assert branch_problems([branch(119.0)], [alive]) == []
    [problem] = branch_problems([branch(121.0), branch(300.0, p=1)], [alive])
    assert kinds([problem]) == [("prepared-too-long", JOB)]
    assert problem.detail.startswith(
        "2 branch(es) of partition(s) [0, 1] prepared 300s ago, over --max-age 120s; "
        "job running, heartbeat 5s ago: still writing"
    )
    assert problem.line() == f"job={JOB} problem=prepared-too-long ({problem.detail})"


@pytest.mark.parametrize(
    ("state", "record", "advice"),
    [
        ("running", {"heartbeat_age": 500.0}, "owner silent: `xasink recover` rolls them back"),
        ("committing", {}, "job decided: `xasink recover` commits the winners"),
        ("aborted", None, "job aborted: stragglers, `xasink recover` rolls them back"),
        (None, None, "no journal row: `xasink recover` rolls them back"),
        ("paused", None, "job in unknown state 'paused'"),
    ],
)
def test_an_old_branch_says_what_its_job_needs(fakes, state, record, advice):
    jobs = [] if record is None else [fakes.record(state, **record)]
    [problem] = branch_problems([branch(600.0, state)], jobs)
    assert advice in problem.detail


def test_an_age_from_the_job_start_says_so():
    [problem] = branch_problems([branch(700.0)], source=AGE_FROM_JOB_START)
    assert "in doubt since its job began 700s ago, over --max-age 120s" in problem.detail


def test_an_unknown_age_is_a_problem_only_without_a_job_row():
    assert branch_problems([branch(None, "running")]) == []
    [problem] = branch_problems([branch(None, None)])
    assert "prepared for an unknown time" in problem.detail


def job_problems(records, counts=None, grace=120.0):
    return health._job_problems(records, counts or {}, grace)


def test_an_open_job_is_a_problem_once_silent_past_its_lease_and_the_grace(fakes):
    quiet = [
        fakes.record("running", heartbeat_age=100.0),
        fakes.record("running", job_id=OTHER, heartbeat_age=200.0, lease=300.0),
        fakes.record("committing", job_id="e" * 32, heartbeat_age=119.0),
    ]
    assert job_problems(quiet) == []
    loud = [
        fakes.record("running", heartbeat_age=120.0),
        fakes.record("committing", job_id=OTHER, heartbeat_age=float("inf")),
    ]
    problems = job_problems(loud)
    assert kinds(problems) == [("silent-job", JOB), ("unfinished-decision", OTHER)]
    assert "heartbeat 120s ago, over the 120s its lease and --grace allow" in problems[0].detail
    assert "`xasink recover` aborts it" in problems[0].detail
    assert "`xasink recover` finishes it" in problems[1].detail


def test_a_grace_of_0_takes_every_open_job_for_silent_as_recover_does(fakes):
    assert kinds(job_problems([fakes.record("running", heartbeat_age=0.0)], grace=0)) == [
        ("silent-job", JOB)
    ]


def test_a_state_this_release_does_not_know_is_a_problem():
    problems = job_problems([], {"committed": 4, "paused": 2})
    assert kinds(problems) == [("unknown-state", "")]
    assert problems[0].line() == (
        "journal problem=unknown-state (2 job(s) in state 'paused', unknown to this xasink release)"
    )


# -- text and JSON ----------------------------------------------------------------------------
UNHEALTHY = report(
    branches=(branch(640.4), branch(3.0, "committing", OTHER)),
    other_journal_branches=2,
    jobs_by_state={"committed": 12, "running": 1},
    sink_batches={"orders": 41},
    problems=(Problem(ProblemKind.PREPARED_TOO_LONG, JOB, "1 branch(es) ..."),),
)


def test_text_is_one_line_per_problem_and_a_summary():
    assert check_text(UNHEALTHY).splitlines() == [
        f"job={JOB} problem=prepared-too-long (1 branch(es) ...)",
        f"UNHEALTHY: 1 problem(s); {JOURNAL}; 13 job(s) (committed 12, running 1); 2 in-doubt "
        "branch(es), oldest prepared 640s; 2 prepared xasink branch(es) of other journals, "
        "not checked",
    ]


def test_text_of_a_healthy_database_and_of_one_without_a_journal():
    assert check_text(report(jobs_by_state={"committed": 3})) == (
        f"healthy; {JOURNAL}; 3 job(s) (committed 3); 0 in-doubt branch(es)"
    )
    long = report(
        jobs_by_state={"aborted": 2, "committed": 9_999_000}, estimated_states=("committed",)
    )
    assert check_text(long) == (
        f"healthy; {JOURNAL}; ~9999002 job(s) (aborted 2, committed ~9999000); 0 in-doubt "
        "branch(es)"
    )
    missing = report(
        journal="no journal in the default schema: xasink has not written here",
        journal_status=JournalStatus.MISSING,
    )
    assert check_text(missing) == (
        "healthy; no journal in the default schema: xasink has not written here; 0 job(s); "
        "0 in-doubt branch(es)"
    )


def test_text_says_where_an_age_comes_from_and_that_a_damaged_journal_is_not_read():
    aged = report(branches=(branch(90.0),), age_source=AGE_FROM_JOB_START)
    assert "1 in-doubt branch(es), oldest prepared 90s since its job began" in check_text(aged)
    damaged = report(
        journal_status=JournalStatus.DAMAGED,
        problems=(Problem(ProblemKind.JOURNAL_DAMAGED, "", "The journal is incomplete"),),
    )
    assert check_text(damaged).splitlines() == [
        "journal problem=journal-damaged (The journal is incomplete)",
        f"UNHEALTHY: 1 problem(s); {JOURNAL}; jobs not read; 0 in-doubt branch(es)",
    ]


def test_a_warning_is_a_line_of_its_own_and_a_gauge_and_leaves_the_check_healthy():
    warned = report(warnings=("replication: 1 standby(s) replicate asynchronously (...)",))
    assert warned.healthy
    assert check_text(warned).splitlines() == [
        "warning: replication: 1 standby(s) replicate asynchronously (...)",
        f"healthy; {JOURNAL}; 0 job(s); 0 in-doubt branch(es)",
    ]
    assert json.loads(check_json(warned))["warnings"] == list(warned.warnings)
    assert "\nxasink_check_warnings 1\n" in check_prometheus(warned)
    assert "\nxasink_check_warnings 0\n" in check_prometheus(report())


def test_json_is_one_object_with_the_verdict_the_problems_and_the_figures():
    data = json.loads(check_json(UNHEALTHY))
    assert set(data) == {"healthy", "problems", "warnings", "figures"}
    assert data["healthy"] is False
    assert data["problems"] == [
        {
            "kind": "prepared-too-long",
            "job_id": JOB,
            "detail": "1 branch(es) ...",
            "line": f"job={JOB} problem=prepared-too-long (1 branch(es) ...)",
        }
    ]
    figures = data["figures"]
    assert figures["in_doubt_branches"] == 2 and figures["oldest_prepared_seconds"] == 640.4
    assert figures["jobs_by_state"] == {"committed": 12, "running": 1}
    assert figures["sinks"] == {"orders": 41}
    assert figures["journal_status"] == "ok" and figures["age_source"] == "prepared"
    assert figures["branches"][0] == {
        "job_id": JOB,
        "partition": 0,
        "attempt": 10,
        "age_seconds": 640.4,
        "job_state": "running",
    }


# -- Prometheus ------------------------------------------------------------------------------
_SAMPLE = re.compile(r'^(xasink_[a-z_]+)(\{[a-z_]+="(?:[^"\\\n]|\\[\\"n])*"\})? (\S+)$')


def test_label_values_are_escaped_as_the_exposition_format_asks():
    assert label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'
    assert label_value("plain-id_1") == "plain-id_1"


def test_prometheus_has_help_and_type_for_every_family_and_only_xasink_names():
    sinks = {'say "hi"': 3, "back\\slash": -1, "line\nfeed": 12345678901}
    text = check_prometheus(report(sink_batches=sinks, jobs_by_state={"paused": 1}))
    families: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            word, name, rest = line[2:].split(" ", 2)
            assert word in ("HELP", "TYPE") and rest, line
            assert word == "HELP" or rest == "gauge", line
            families.setdefault(name, []).append(word)
        else:
            match = _SAMPLE.match(line)
            assert match, f"not a sample: {line!r}"
            assert families.get(match.group(1)) == ["HELP", "TYPE"], line
    assert all(name.startswith("xasink_") for name in families)
    assert set(families) >= {
        "xasink_check_healthy",
        "xasink_in_doubt_branches",
        "xasink_oldest_prepared_age_seconds",
        "xasink_jobs",
        "xasink_sink_last_batch_id",
    }
    assert 'xasink_sink_last_batch_id{sink="say \\"hi\\""} 3' in text.splitlines()
    assert 'xasink_sink_last_batch_id{sink="back\\\\slash"} -1' in text.splitlines()
    assert 'xasink_sink_last_batch_id{sink="line\\nfeed"} 12345678901' in text.splitlines()
    assert 'xasink_jobs{state="paused"} 1' in text.splitlines()


def test_prometheus_values_of_an_unhealthy_report():
    lines = check_prometheus(UNHEALTHY).splitlines()
    for sample in (
        "xasink_check_healthy 0",
        'xasink_check_problems{kind="prepared-too-long"} 1',
        'xasink_check_problems{kind="silent-job"} 0',
        "xasink_journal_present 1",
        "xasink_in_doubt_branches 2",
        "xasink_oldest_prepared_age_seconds 640.4",
        'xasink_jobs{state="running"} 1',
        'xasink_jobs{state="committing"} 0',
        'xasink_jobs{state="committed"} 12',
        'xasink_sink_last_batch_id{sink="orders"} 41',
    ):
        assert sample in lines
    healthy = check_prometheus(report(journal_status=JournalStatus.MISSING)).splitlines()
    assert "xasink_check_healthy 1" in healthy and "xasink_journal_present 0" in healthy
    assert "xasink_oldest_prepared_age_seconds 0.0" in healthy


# -- the command -------------------------------------------------------------------------------
@pytest.fixture
def checked(monkeypatch):
    """Replace the database call: records its arguments, returns `checked.result`."""
    calls: list[tuple[str, dict]] = []

    def fake(url, **kwargs):
        calls.append((url, kwargs))
        if isinstance(fake.result, BaseException):
            raise fake.result
        return fake.result

    fake.result = report()
    fake.calls = calls
    monkeypatch.setattr(check_command, "check_health", fake)
    return fake


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    status = main(argv, out=out, err=err)
    return status, out.getvalue(), err.getvalue()


def test_exit_0_when_healthy_and_1_with_a_problem(checked):
    status, out, err = run(["check", "--url", URL])
    assert (status, err) == (0, "") and out.startswith("healthy; ")
    checked.result = UNHEALTHY
    for flag in ([], ["--json"], ["--prometheus"]):
        assert run(["check", "--url", URL, *flag])[0] == 1


def test_the_options_reach_the_check(monkeypatch, checked):
    monkeypatch.setenv("XASINK_UNIT_PW", SECRET)
    login = ["--user", "app", "--password-env", "XASINK_UNIT_PW"]
    run(
        [
            "check",
            "--url",
            URL,
            *login,
            "--max-age",
            "3600",
            "--grace",
            "30",
            "--journal-schema",
            "ops",
        ]
    )
    [(database, kwargs)] = checked.calls
    assert database == Database(URL, user="app", password=SECRET, journal_schema="ops")
    assert (kwargs["max_age"], kwargs["grace"], kwargs["lock_wait_timeout"]) == (3600.0, 30.0, 60.0)
    run(["check", "--url", URL])
    assert checked.calls[-1][1]["max_age"] == checked.calls[-1][1]["grace"] == 120.0


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--json", "--prometheus"], "argument --prometheus: not allowed with argument --json"),
        (["--max-age", "-1"], "argument --max-age: must be 0 or more seconds, not '-1'"),
        (["--grace", "soon"], "argument --grace: must be 0 or more seconds, not 'soon'"),
    ],
)
def test_bad_arguments_exit_2_before_connecting(capsys, checked, argv, error):
    with pytest.raises(SystemExit) as caught:
        main(["check", "--url", URL, *argv])
    assert caught.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and error in captured.err
    assert checked.calls == []


def test_an_error_exits_2_and_never_shows_the_password(monkeypatch, checked):
    monkeypatch.setenv("XASINK_UNIT_PW", SECRET)
    checked.result = PreflightError("Cannot reach the database at db:5432 (refused).")
    status, out, err = run(["check", "--url", URL, "--password-env", "XASINK_UNIT_PW"])
    assert (status, out) == (2, "")
    assert err == "xasink: Cannot reach the database at db:5432 (refused).\n"
    checked.result = RuntimeError(f"login with {SECRET} failed at jdbc:mysql://u:{SECRET}@db/a")
    status, out, err = run(["check", "--url", URL, "--password-env", "XASINK_UNIT_PW"])
    assert (status, out) == (2, "") and SECRET not in err
    assert err == "xasink: unexpected error: RuntimeError: login with *** failed at " + (
        "jdbc:mysql://u:***@db/a\n"
    )


# -- the whole assessment, over a fake journal ----------------------------------------------------
class Journal:
    """The reads `assess` makes of a journal, answered from memory."""

    def __init__(self, tag="a1b2c3d4", exists=True, damage=None, records=(), server_ages=True):
        self.tag, self.schema, self._exists, self._damage = tag, None, exists, damage
        self.dialect_name = "fake"  # no replication probe
        self.records = list(records)
        self.coordinators: dict = {}
        self.pending: list = []
        self.jobs, self.sinks, self.meta = "jobs", "sinks", "meta"
        ages = "SELECT gid, age FROM pg_prepared_xacts" if server_ages else None
        self.dialect = SimpleNamespace(prepared_ages_sql=lambda: ages, age_sql=lambda c: c)

    def exists(self, conn):
        return self._exists

    def check_complete(self, conn):
        if self._damage:
            raise JournalError(self._damage)

    def jobs_in_state(self, conn, state):
        return [r for r in self.records if r.state == state]

    def counts_by_state(self, conn):
        states = [r.state for r in self.records]
        return {s: states.count(s) for s in sorted(set(states))}, ()

    def coordinator(self, conn, job_id):
        return self.coordinators.get(job_id)

    def pending_participants(self, conn):
        return self.pending

    def state(self, conn, job_id):
        return next((r.state for r in self.records if r.job_id == job_id), None)

    def linked(self, conn, job_id):
        return None

    def ended(self, conn, job_id):  # a record's heartbeat age stands for when it ended
        found = [r for r in self.records if r.job_id == job_id]
        return (found[0].state, found[0].heartbeat_age) if found else None


class Ops:
    def __init__(self, branches, lost=()):
        self.branches, self.lost = branches, set(lost)

    def xasink_branches(self):
        return list(self.branches)

    def prepared(self):
        return [(b, b.xid) for b in self.branches]

    def settled(self, branch):  # a winner gone from the listing: lost, or committed
        return Outcome.LOST if branch in self.lost else Outcome.ALREADY_COMMITTED


def answers(monkeypatch, journal, ages):
    """`health.query` answered from the fake journal's records and the server's ages."""

    def query(conn, sql, params=()):
        if sql.startswith("SELECT gid"):
            return [(str(b.xid), age) for b, age in ages.items()]
        if "FROM sinks" in sql:
            return [("orders", 41)]
        rows = [(r.job_id, r.state, 1000.0) for r in journal.records if r.job_id in params]
        return rows

    monkeypatch.setattr(health, "query", query)


def test_only_this_journals_branches_count_and_a_foreign_one_never_is_a_problem(monkeypatch, fakes):
    mine = fakes.branch(0, 7)
    foreign = fakes.branch(0, 1, job_id=OTHER, tag="deadbeef")
    journal = Journal(records=[fakes.record("running", heartbeat_age=1.0)])
    answers(monkeypatch, journal, {mine: 500.0, foreign: 9999.0})
    result = health.assess(Ops([mine, foreign]), None, journal, max_age=120.0, grace=120.0)
    assert [b.job_id for b in result.branches] == [JOB]
    assert result.other_journal_branches == 1
    assert kinds(result.problems) == [("prepared-too-long", JOB)]
    assert result.jobs_by_state == {"running": 1} and result.sink_batches == {"orders": 41}
    assert result.branches[0].age_seconds == 500.0 and result.age_source == AGE_FROM_SERVER


def test_without_server_ages_a_branch_is_aged_by_its_job(monkeypatch, fakes):
    journal = Journal(records=[fakes.record("committing", heartbeat_age=1.0)], server_ages=False)
    answers(monkeypatch, journal, {})
    result = health.assess(Ops([fakes.branch(0, 7)]), None, journal, max_age=120.0, grace=120.0)
    assert result.age_source == AGE_FROM_JOB_START
    assert result.branches == (PreparedBranch(JOB, 0, 7, 1000.0, "committing"),)
    assert kinds(result.problems) == [("prepared-too-long", JOB)]


def test_a_lost_winner_is_a_problem_at_once_naming_what_ends_the_job(monkeypatch, fakes):
    """A decided winner rolled back behind xasink's back is a problem at once, whatever its
    job's heartbeat, and names what ends the job: never "`xasink recover` finishes it",
    which it cannot."""
    kept, lost = fakes.branch(0, 3), fakes.branch(1, 4)
    winners = frozenset({(0, 3), (1, 4), (2, 5)})  # 2 committed, 0 still prepared, 1 lost
    for beat in (1.0, 1e6):
        record = fakes.record("committing", winners, heartbeat_age=beat)
        journal = Journal(records=[record])
        answers(monkeypatch, journal, {kept: 5.0})
        result = health.assess(Ops([kept], lost=[lost]), None, journal, max_age=120, grace=120)
        assert kinds(result.problems) == [("lost-winner", JOB)], result.problems
        detail = result.problems[0].detail
        assert detail.startswith(
            "winning branch(es) of partition(s) [1] were rolled back outside xasink: their "
            "rows are NOT in the table (the other branches' rows are in); `xasink resolve "
            f"{JOB} --abandon` ends the job"
        ), detail
    staged = fakes.record("committing", winners, heartbeat_age=1e6, staged=True)
    journal = Journal(records=[staged])
    answers(monkeypatch, journal, {kept: 5.0})
    result = health.assess(Ops([kept], lost=[lost]), None, journal, max_age=120, grace=120)
    assert "(the table is unchanged)" in result.problems[0].detail
    nothing_lost = health.assess(Ops([kept]), None, journal, max_age=120, grace=120)
    assert kinds(nothing_lost.problems) == [("unfinished-decision", JOB)]


def test_no_journal_is_healthy_and_a_damaged_one_is_not_read(monkeypatch, fakes):
    answers(monkeypatch, Journal(), {})
    missing = health.assess(Ops([]), None, Journal(tag="", exists=False), max_age=1, grace=1)
    assert missing.healthy and missing.journal_status == JournalStatus.MISSING
    assert missing.journal == "no journal in the default schema: xasink has not written here"
    half = health.assess(Ops([]), None, Journal(exists=False), max_age=1, grace=1)
    assert kinds(half.problems) == [("journal-damaged", "")]
    assert "jobs is missing although meta holds the journal's tag" in half.problems[0].detail
    running = [fakes.record("running", heartbeat_age=1e6)]
    damaged = Journal(damage="The journal is incomplete", records=running)
    result = health.assess(Ops([fakes.branch(0, 7)]), None, damaged, max_age=1, grace=1)
    assert kinds(result.problems) == [("journal-damaged", "")]
    assert result.jobs_by_state == {} and len(result.branches) == 1


def test_a_participants_silent_job_names_its_coordinator_and_the_command(monkeypatch, fakes):
    """A transaction's participant: never "recover aborts it" (only its coordinator
    decides), but who decides and the command that finishes it."""
    from xasink.protocol.links import Link

    mine = fakes.branch(0, 7)
    journal = Journal(records=[fakes.record("running", heartbeat_age=900.0)])
    journal.coordinators[JOB] = Link(JOB, "c0ffee00", "coordinator", "jdbc:postgresql://h/db", None)
    answers(monkeypatch, journal, {mine: 500.0})
    result = health.assess(Ops([mine]), None, journal, max_age=120.0, grace=120.0)
    assert kinds(result.problems) == [("prepared-too-long", JOB), ("silent-job", JOB)]
    for problem in result.problems:
        assert "aborts it" not in problem.detail and "rolls them back" not in problem.detail
        assert "--url jdbc:postgresql://h/db --participant" in problem.detail
        assert "journal tag c0ffee00" in problem.detail


def test_a_coordinators_ended_job_with_a_pending_participant_is_a_problem(monkeypatch, fakes):
    """Once it ended longer than the grace ago: before that, its driver is still finishing
    its participants (a healthy transaction; review 4, R5)."""
    from xasink.protocol.links import Link

    journal = Journal(records=[fakes.record("committed", heartbeat_age=5.0)])
    journal.pending = [Link(JOB, "c0ffee00", "participant", "jdbc:mariadb://h/dw", None)]
    answers(monkeypatch, journal, {})
    result = health.assess(Ops([]), None, journal, max_age=120.0, grace=120.0)
    assert result.problems == ()
    journal.records = [fakes.record("committed", heartbeat_age=500.0)]
    result = health.assess(Ops([]), None, journal, max_age=120.0, grace=120.0)
    assert kinds(result.problems) == [("participant-pending", JOB)]
    assert "--participant jdbc:mariadb://h/dw" in result.problems[0].detail
