"""A read-only look at one journal and its prepared branches: what `xasink check` reports.

A health check runs from cron, from monitoring, and in the hour before a database upgrade
or failover (a prepared transaction blocks a major upgrade). So it changes nothing: the
journal is taken as found (never `ensure`d: a missing one is not created), and only read,
with XA RECOVER and the server's own list of prepared transactions. Only this journal's
branches (xasink's formatId, gtrid layout *and* tag) can be problems; another application's
transaction never is, and another journal's xasink branches are only counted.

A problem is what `xasink recover` or `xasink jobs` would act on or point at: a branch
prepared longer than `max_age`, a job whose owner is silent past its lease (running, or
decided and unfinished), a decided job whose winner was rolled back behind xasink's back (at
once: nothing finishes it), a job in a state this release does not know, and a journal that
is damaged (`JournalLayout.check_complete`'s refusals). A database where xasink never wrote
has no journal: that is healthy, and said so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..defaults import GRACE, LOCK_WAIT
from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, query, redacting_java_errors
from ..spec import Database
from .branches import BranchOps
from .connecting import journal_session
from .journal import Journal
from .listing import lost_of_decided
from .records import OPEN_STATES, JobRecord
from .recovery import describe
from .replication import replication_warning
from .states import FINAL_STATES, JobState, TextEnum
from .waiting import awaits_coordinator, lost_detail


class JournalStatus(TextEnum):
    OK = "ok"
    #: No journal where it was looked for: xasink never wrote here (or a wrong schema).
    MISSING = "missing"
    DAMAGED = "damaged"


class ProblemKind(TextEnum):
    JOURNAL_DAMAGED = "journal-damaged"
    PREPARED_TOO_LONG = "prepared-too-long"
    #: Running, and its owner silent past its lease: recovery would abort it.
    SILENT_JOB = "silent-job"
    #: Decided (committing), and its owner silent past its lease: phase 2 stopped.
    UNFINISHED_DECISION = "unfinished-decision"
    #: Decided, and a winning branch was rolled back behind xasink's back: its rows are not
    #: in the table, and only an operator ends the job (`xasink resolve --abandon`).
    LOST_WINNER = "lost-winner"
    #: A transaction over several databases, over here, not yet carried to a participant.
    PARTICIPANT_PENDING = "participant-pending"
    UNKNOWN_STATE = "unknown-state"


#: Where a branch's age comes from: PostgreSQL records when a transaction was prepared;
#: MySQL/MariaDB do not, so there a branch is aged by its job's start (an upper bound).
AGE_FROM_SERVER, AGE_FROM_JOB_START = "prepared", "job start"


@dataclass(frozen=True)
class PreparedBranch:
    job_id: str
    partition: int
    attempt: int
    #: Seconds since PREPARE, or since the job began (see `HealthReport.age_source`); None
    #: when unknown.
    age_seconds: float | None
    #: Its job's state in the journal (None: the job has no row).
    job_state: str | None


@dataclass(frozen=True)
class Problem:
    kind: ProblemKind
    #: The job it is about ("" for the journal itself).
    job_id: str
    detail: str

    def line(self) -> str:
        """One line, in `xasink recover`'s shape: who, what, then why and what to do."""
        who = f"job={self.job_id}" if self.job_id else "journal"
        return f"{who} problem={self.kind} ({self.detail})"


@dataclass(frozen=True)
class HealthReport:
    #: Which journal was read, and its tag (as `xasink recover` prints it first).
    journal: str
    journal_status: JournalStatus
    max_age: float
    grace: float
    age_source: str
    #: This journal's prepared branches, oldest first.
    branches: tuple[PreparedBranch, ...] = ()
    #: Prepared branches in xasink's layout that carry another journal's tag (not checked).
    other_journal_branches: int = 0
    jobs_by_state: Mapping[str, int] = field(default_factory=dict)
    #: The states whose count is the server's estimate (`JournalReader.counts_by_state`).
    estimated_states: tuple[str, ...] = ()
    #: Each streaming sink's last decided batch id.
    sink_batches: Mapping[str, int] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
    #: What is not a problem yet but could become one (`replication`): exit 0 still.
    warnings: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        return not self.problems

    @property
    def oldest_prepared_seconds(self) -> float | None:
        """The oldest known age of this journal's prepared branches (None: none known)."""
        ages = [b.age_seconds for b in self.branches if b.age_seconds is not None]
        return max(ages) if ages else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "problems": [{**asdict(p), "line": p.line()} for p in self.problems],
            "warnings": list(self.warnings),
            "figures": {
                "journal": self.journal,
                "journal_status": str(self.journal_status),
                "max_age_seconds": self.max_age,
                "grace_seconds": self.grace,
                "age_source": self.age_source,
                "in_doubt_branches": len(self.branches),
                "oldest_prepared_seconds": self.oldest_prepared_seconds,
                "other_journal_branches": self.other_journal_branches,
                "jobs_by_state": dict(self.jobs_by_state),
                "estimated_states": list(self.estimated_states),
                "sinks": dict(self.sink_batches),
                "branches": [asdict(b) for b in self.branches],
            },
        }


def assess(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, *, max_age: float, grace: float
) -> HealthReport:
    """The health of `journal` (as located, never created) and of its prepared branches;
    reads only. A damaged or missing journal's rows are not read: nothing in them can be
    trusted, and its branches are counted with the server's ages alone."""
    status, problems = _journal_status(conn, journal)
    first = ops.xasink_branches()
    listed = {str(b.xid) for b in first}
    server_ages = _server_ages(conn, journal)
    age_source = AGE_FROM_SERVER if server_ages is not None else AGE_FROM_JOB_START
    rows: dict[str, tuple[str, float | None]] = {}
    counts: dict[str, int] = {}
    estimated: tuple[str, ...] = ()
    sinks: dict[str, int] = {}
    if status is JournalStatus.OK:
        rows = _jobs_of(conn, journal, {b.job_id for b in first})
        (counts, estimated), sinks = journal.counts_by_state(conn), _sinks(conn, journal)
    # Listed again after the job rows were read: a branch its job committed in between is
    # gone, so a finished job's branch is only reported if it really stayed behind.
    found = [b for b in ops.xasink_branches() if str(b.xid) in listed]
    mine = [b for b in found if journal.tag and b.journal == journal.tag]
    branches = []
    for b in mine:
        state, since_start = rows.get(b.job_id, (None, None))
        age = since_start if server_ages is None else server_ages.get(str(b.xid))
        branches.append(PreparedBranch(b.job_id, b.partition, b.attempt, age, state))
    branches.sort(key=lambda b: (-(b.age_seconds or 0.0), b.job_id, b.partition))
    if status is JournalStatus.OK:
        open_jobs = {r.job_id: r for s in OPEN_STATES for r in journal.jobs_in_state(conn, s)}
        waiting = _awaiting_coordinator(conn, journal, open_jobs.values())
        problems += _branch_problems(branches, open_jobs, max_age, grace, age_source, waiting)
        lost = lost_of_decided(ops, journal, open_jobs.values())  # whatever the heartbeat
        problems += [
            Problem(
                ProblemKind.LOST_WINNER, j, lost_detail(journal, conn, j, p, open_jobs[j].staged)
            )
            for j, p in sorted(lost.items())
        ]
        unlost = [r for r in open_jobs.values() if r.job_id not in lost]
        problems += _job_problems(unlost, counts, grace, waiting)
        problems += _pending_participants(conn, journal, grace)
    return HealthReport(
        describe(journal) if status is not JournalStatus.MISSING else _missing(journal),
        status,
        max_age,
        grace,
        age_source,
        tuple(branches),
        len(found) - len(mine),
        counts,
        estimated,
        sinks,
        tuple(problems),
        tuple(w for w in [replication_warning(conn, journal.dialect_name)] if w),
    )


def _missing(journal: Journal) -> str:
    where = f"schema {journal.schema}" if journal.schema else "the default schema"
    return f"no journal in {where}: xasink has not written here"


def _journal_status(conn: JdbcConnection, journal: Journal) -> tuple[JournalStatus, list[Problem]]:
    """The journal's own checks, as every write and recovery runs them; only "no such
    table" counts as missing, any other failure to read it is raised (an error, exit 2)."""
    if not journal.exists(conn):
        if not journal.tag:
            return JournalStatus.MISSING, []
        detail = (
            f"{journal.jobs} is missing although {journal.meta} holds the journal's tag: "
            "restore it from a backup; xasink touches nothing until then"
        )
        return JournalStatus.DAMAGED, [Problem(ProblemKind.JOURNAL_DAMAGED, "", detail)]
    try:
        journal.check_complete(conn)
    except JournalError as exc:
        return JournalStatus.DAMAGED, [Problem(ProblemKind.JOURNAL_DAMAGED, "", str(exc))]
    return JournalStatus.OK, []


def _server_ages(conn: JdbcConnection, journal: Journal) -> dict[str, float] | None:
    """Seconds since PREPARE by gid, where the server records it (None where not)."""
    sql = journal.dialect.prepared_ages_sql()
    if sql is None:
        return None
    return {str(gid): float(age) for gid, age in query(conn, sql)}


def _jobs_of(
    conn: JdbcConnection, journal: Journal, job_ids: set[str]
) -> dict[str, tuple[str, float | None]]:
    """(state, seconds since the job began) of the jobs that have prepared branches."""
    if not job_ids:
        return {}
    age = journal.dialect.age_sql("created_at") or "NULL"
    marks = ", ".join("?" for _ in job_ids)
    rows = query(
        conn,
        f"SELECT job_id, state, {age} FROM {journal.jobs} WHERE job_id IN ({marks})",
        sorted(job_ids),
    )
    return {str(j): (str(s), None if a is None else float(a)) for j, s, a in rows}


def _sinks(conn: JdbcConnection, journal: Journal) -> dict[str, int]:
    rows = query(conn, f"SELECT sink_id, batch_id FROM {journal.sinks} ORDER BY sink_id")
    return {str(sink): int(batch) for sink, batch in rows}


def _lease(record: JobRecord, grace: float) -> float:
    """How long the job's owner may stay silent: recovery's rule (`Resolver._alive`)."""
    return max(grace, record.lease)


def _silent(record: JobRecord, grace: float) -> bool:
    return grace <= 0 or record.heartbeat_age >= _lease(record, grace)


def _branch_problems(
    branches: list[PreparedBranch],
    open_jobs: Mapping[str, JobRecord],
    max_age: float,
    grace: float,
    age_source: str,
    waiting: Mapping[str, str] = {},
) -> list[Problem]:
    """One line per job whose branches are prepared longer than `max_age` (a branch
    without a job row, whose age the server does not tell, counts: no writer makes one).
    Where the age is only the job's (MySQL, MariaDB), a live job's branches are not
    counted: a long healthy write would otherwise be reported while it runs."""
    old: dict[str, list[PreparedBranch]] = {}
    for b in branches:
        record = open_jobs.get(b.job_id)
        live = record if b.job_state == JobState.RUNNING else None
        if age_source == AGE_FROM_JOB_START and live is not None and not _silent(live, grace):
            continue
        unknown_orphan = b.age_seconds is None and b.job_state is None
        if unknown_orphan or (b.age_seconds is not None and b.age_seconds > max_age):
            old.setdefault(b.job_id, []).append(b)
    problems = []
    for job_id, found in sorted(old.items()):
        ages = [b.age_seconds for b in found if b.age_seconds is not None]
        if not ages:
            age = "prepared for an unknown time"
        elif age_source == AGE_FROM_SERVER:
            age = f"prepared {max(ages):.0f}s ago"
        else:  # the server does not say when: the job's start bounds it
            age = f"in doubt since its job began {max(ages):.0f}s ago"
        partitions = sorted({b.partition for b in found})[:20]
        advice = waiting.get(job_id) or _advice(found[0].job_state, open_jobs.get(job_id), grace)
        detail = (
            f"{len(found)} branch(es) of partition(s) {partitions} {age}, over --max-age "
            f"{max_age:g}s; {advice}"
        )
        problems.append(Problem(ProblemKind.PREPARED_TOO_LONG, job_id, detail))
    return problems


def _advice(state: str | None, record: JobRecord | None, grace: float) -> str:
    """What the branches' job says about them, and what to do."""
    if state is None:
        return "no journal row: `xasink recover` rolls them back (presumed abort)"
    if state == JobState.RUNNING and record is not None and not _silent(record, grace):
        return (
            f"job running, heartbeat {record.heartbeat_age:.0f}s ago: still writing; raise "
            "--max-age above the longest write if that is expected"
        )
    if state == JobState.RUNNING:
        return "job running, owner silent: `xasink recover` rolls them back"
    if state == JobState.COMMITTING:
        return "job decided: `xasink recover` commits the winners and rolls back the rest"
    if state in FINAL_STATES:
        return f"job {state}: stragglers, `xasink recover` rolls them back"
    return f"job in unknown state {state!r}"


def _awaiting_coordinator(
    conn: JdbcConnection, journal: Journal, open_jobs: Iterable[JobRecord]
) -> dict[str, str]:
    """What finishes each running job whose coordinator is another journal (`links`)."""
    found = {}
    for record in open_jobs:
        if record.state == JobState.RUNNING:
            link = journal.coordinator(conn, record.job_id)
            if link is not None:
                found[record.job_id] = awaits_coordinator(link)
    return found


def _pending_participants(conn: JdbcConnection, journal: Journal, grace: float) -> list[Problem]:
    """Transactions this coordinator ended (committed, or aborted) longer than `grace` ago
    whose participant does not know it yet: its branches hold their locks until recovery
    carries it there. A healthy transaction's driver finishes its participants after its
    coordinator's job ended: that window is no problem (review 4, R5)."""
    problems = []
    for link in journal.pending_participants(conn):
        ended = journal.ended(conn, link.job_id)
        if ended is None:
            continue
        state, ago = ended
        if state in FINAL_STATES and ago >= grace:
            detail = (
                f"{state} here {ago:.0f}s ago, not yet in participant {link.where}: `xasink "
                f"recover --participant {link.address}` (with this --url) finishes it there"
            )
            problems.append(Problem(ProblemKind.PARTICIPANT_PENDING, link.job_id, detail))
    return problems


def _job_problems(
    open_jobs: Iterable[JobRecord],
    counts: Mapping[str, int],
    grace: float,
    waiting: Mapping[str, str] = {},
) -> list[Problem]:
    """Open jobs whose owner is silent past its lease, and states this release does not
    know (a newer xasink wrote them: use it)."""
    problems = []
    for record in sorted(open_jobs, key=lambda r: r.job_id):
        if not _silent(record, grace):
            continue
        silent = (
            f"heartbeat {record.heartbeat_age:.0f}s ago, over the {_lease(record, grace):g}s "
            "its lease and --grace allow"
        )
        if record.state == JobState.RUNNING:
            kind, what = ProblemKind.SILENT_JOB, "undecided, owner silent"
            todo = waiting.get(record.job_id) or (
                "`xasink recover` aborts it and rolls its branches back"
            )
        else:
            kind, what = ProblemKind.UNFINISHED_DECISION, "decided but unfinished, owner silent"
            todo = "`xasink recover` finishes it; `xasink jobs` says what blocks it if it stays"
        detail = f"{what}: {silent}; table {record.table}: {todo}"
        problems.append(Problem(kind, record.job_id, detail))
    known = {str(s) for s in JobState}
    for state, n in counts.items():
        if state not in known:
            detail = f"{n} job(s) in state {state!r}, unknown to this xasink release"
            problems.append(Problem(ProblemKind.UNKNOWN_STATE, "", detail))
    return problems


@redacting_java_errors
def check_health(
    database: Database | str,
    *,
    max_age: float = GRACE,
    grace: float = GRACE,
    lock_wait_timeout: float = LOCK_WAIT,
) -> HealthReport:
    """`assess` the journal of `database`."""
    with (
        journal_session(database, lock_wait_timeout) as (spec, conn, journal),
        BranchOps(spec, journal) as ops,
    ):
        return assess(ops, conn, journal, max_age=max_age, grace=grace)


__all__ = [
    "AGE_FROM_JOB_START",
    "AGE_FROM_SERVER",
    "HealthReport",
    "JournalStatus",
    "PreparedBranch",
    "Problem",
    "ProblemKind",
    "assess",
    "check_health",
]
