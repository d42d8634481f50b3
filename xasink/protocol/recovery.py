"""Resolve in-doubt xasink branches: roll forward what is decided, roll back the rest.

Only branches whose XID carries xasink's formatId, gtrid layout *and* this journal's tag
(stored in the journal) are ever touched. A job's fate comes from its journal row, read
*before* a fresh XA RECOVER listing of the job's branches: every winner was prepared before
the decision, so a winner that a listing taken after reading the decision lacks has been
committed or rolled back, and its marker (or the job's `committed` state) tells which.

* `committing` / `committed`: commit its winners, roll back every other attempt (at once,
  whatever the heartbeat: finishing a decided job twice is safe);
* `aborted`: roll everything back;
* `running`: alive while its heartbeat is younger than the grace (and the job's own lease),
  and then left alone; otherwise first marked `aborted` (conditionally, so a late decision
  cannot also win), then rolled back; except a participant's job in a transaction over
  several databases, which only its coordinator decides (`links`): it is left, whatever
  its heartbeat, with the command that finishes it;
* no row in an existing journal: rolled back once prepared longer than the grace (when the
  server says when; otherwise only with a grace of 0);
* no journal at all: nothing is touched, unless the operator names the tag to presume abort.

Undecided jobs are resolved first (their branches may hold locks a decided job's apply
waits for), then decided ones in decision order. A staged job (overwrite, upsert, merge) is
finished once all its winners are committed: its staging table is applied to the target in
the transaction that marks it `committed`. The staging tables of finished jobs are dropped.
Job-level actions carry partition -1.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..defaults import GRACE as DEFAULT_GRACE
from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, query
from ..xid import BranchId, valid_job_id
from . import links
from .actions import BranchAction, RecoveryAction, RecoveryReport, log_action
from .applying import JobOrderError, StagedPlan, runs_statements, stored_plan
from .branches import BranchOps, Outcome
from .journal import Journal
from .records import JobRecord
from .states import DECIDED_STATES, JobState
from .waiting import LOST_DETAIL, awaits_coordinator, blocked_detail

log = logging.getLogger("xasink")


#: How often one job is looked at again when it changes state while recovery acts on it.
_LOOKS = 3


@dataclass
class Resolver:
    ops: BranchOps
    conn: JdbcConnection
    journal: Journal
    grace: float
    dry_run: bool
    report: RecoveryReport
    #: Run a stored plan's own statements (pre_sql, post_sql); else such a job is left
    #: decided (`xasink recover --run-statements`).
    run_statements: bool = True
    _ages: dict[str, float] | None = None

    # -- reporting -------------------------------------------------------------------
    def _add(self, branch: BranchId, action: RecoveryAction, detail: str) -> None:
        self._log(BranchAction(branch.job_id, branch.partition, branch.attempt, action, detail))

    def job_action(self, job_id: str, action: RecoveryAction, detail: str) -> None:
        self._log(BranchAction(job_id, -1, -1, action, detail))

    def _log(self, action: BranchAction) -> None:
        self.report.actions.append(action)
        log_action(action)

    def _redact(self, exc: BaseException) -> str:
        return self.ops.spec.redact(exc)

    # -- acting on branches ------------------------------------------------------------
    def act(self, branch: BranchId, commit: bool, why: str) -> None:
        if self.dry_run:
            self._add(
                branch,
                RecoveryAction.WOULD_COMMIT if commit else RecoveryAction.WOULD_ROLLBACK,
                why,
            )
            return
        try:
            outcome = self.ops.commit(branch) if commit else self.ops.rollback(branch)
        except Exception as exc:
            self._add(branch, RecoveryAction.FAILED, f"{why}; {self._redact(exc)}")
            return
        if outcome is Outcome.LOST:
            self._add(branch, RecoveryAction.LOST, LOST_DETAIL)
        else:
            self._add(branch, RecoveryAction.of(outcome), why)

    def roll_back(self, branches: list[BranchId], why: str) -> None:
        for branch in branches:
            self.act(branch, commit=False, why=why)

    # -- one job ---------------------------------------------------------------------
    def resolve(self, job_id: str) -> None:
        """Read the job's row, then list its branches, then act; again if it moved on."""
        aborted_here = False
        for _ in range(_LOOKS):
            record = self.journal.job(self.conn, job_id)
            branches = self.ops.prepared_of(job_id)
            if record is None:
                self.without_row(job_id, branches)
                return
            if record.state == JobState.ABORTED:
                why = "no decision, job silent: aborted it" if aborted_here else "job aborted"
                self.roll_back(branches, why)
                return
            if record.state in DECIDED_STATES:
                self._roll_forward(record, branches)
                return
            if record.state != JobState.RUNNING:
                for branch in branches:
                    self._add(branch, RecoveryAction.LEFT, f"unknown job state {record.state!r}")
                return
            if self._alive(record):
                for branch in branches:
                    self._add(branch, RecoveryAction.LEFT, self._alive_detail(record))
                return
            coordinator = self.journal.coordinator(self.conn, job_id)
            if coordinator is not None:  # only its coordinator decides it
                self.job_action(job_id, RecoveryAction.LEFT, awaits_coordinator(coordinator))
                for branch in branches:
                    self._add(branch, RecoveryAction.LEFT, "awaits its coordinator's decision")
                return
            if self.dry_run:
                self.roll_back(branches, "no decision, job silent")
                return
            # Conditional: a decision (or a beat) since we read the row makes this fail,
            # and then the row is read again, with a fresh listing.
            aborted_here = self.journal.abort(self.conn, job_id, beats=record.beats)
        self.job_action(
            job_id, RecoveryAction.LEFT, "the job kept changing while recovery looked at it"
        )

    def without_row(self, job_id: str, branches: list[BranchId]) -> None:
        """Presumed abort for branches whose job row is gone, once prepared long enough."""
        for branch in branches:
            age = self._prepared_age(branch)
            if self.grace > 0 and (age is None or age < self.grace):
                known = f"prepared {age:.0f}s ago" if age is not None else "prepare time unknown"
                self._add(
                    branch,
                    RecoveryAction.LEFT,
                    f"no journal row ({known}); rolled back after the grace period",
                )
            else:
                self.act(branch, commit=False, why="no journal row: presumed abort")

    def _prepared_age(self, branch: BranchId) -> float | None:
        if self._ages is None:
            sql = self.journal.dialect.prepared_ages_sql()
            rows = query(self.conn, sql) if sql else []
            self._ages = {str(gid): float(age) for gid, age in rows}
        return self._ages.get(str(branch.xid))

    def _roll_forward(self, record: JobRecord, branches: list[BranchId]) -> None:
        for branch in branches:
            winner = (branch.partition, branch.attempt) in record.winners
            self.act(branch, commit=winner, why="decided" if winner else "not a winner")
        if record.state != JobState.COMMITTING:
            return  # finished (or closed by an operator): these were stragglers
        listed = {(b.partition, b.attempt) for b in branches}
        for partition, attempt in sorted(record.winners - listed):
            branch = BranchId(self.journal.tag, record.job_id, partition, attempt)
            outcome = self.ops.settled(branch)
            if outcome is Outcome.LOST:
                self._add(branch, RecoveryAction.LOST, LOST_DETAIL)
            else:
                self._add(branch, RecoveryAction.of(outcome), "marker row or committed job found")
        mine = [a for a in self.report.actions if a.job_id == record.job_id]
        if any(a.action == RecoveryAction.LOST for a in mine) and not self.dry_run:
            self._abandon_if_staged(record)
        if any(a.unresolved and not a.action.dry_run for a in mine):
            return  # a dry run's own plan (would commit) does not hide what follows it
        if not self.dry_run:
            if self._holds_statements(record):
                return
            self._finish(record)
        elif record.staged:
            self.job_action(
                record.job_id, RecoveryAction.WOULD_APPLY, "staging table to the target"
            )

    def _abandon_if_staged(self, record: JobRecord) -> None:
        """A staged job missing a winner was never applied: abort it, target unchanged
        (an append job's other rows are in the table already; it stays for a person)."""
        if self.journal.abandon(self.conn, record.job_id):
            self.job_action(
                record.job_id,
                RecoveryAction.ABORTED,
                "a decided branch was lost before the apply: the target is unchanged; "
                "run the write again",
            )
        elif (link := self.journal.linked(self.conn, record.job_id)) is not None:
            detail = links.lost_here(link, record.staged)
            self.job_action(record.job_id, RecoveryAction.LOST, f"a decided branch was {detail}")
        elif not record.staged:
            self.job_action(
                record.job_id,
                RecoveryAction.LOST,
                "append job with a lost branch: the other branches' rows are in the table. "
                f"Close it with `xasink resolve {record.job_id} --abandon` once you have "
                "dealt with the missing rows",
            )

    def _holds_statements(self, record: JobRecord) -> bool:
        """Leave (and report) a staged job whose plan runs SQL statements, unless told to
        run them: anyone who can write the journal can write such a plan."""
        if self.run_statements or not record.staged:
            return False
        if not runs_statements(self.journal, self.conn, record.job_id):
            return False
        self.job_action(
            record.job_id,
            RecoveryAction.LEFT,
            "decided, not applied: its stored plan runs the write's pre_sql/post_sql "
            "statements, which recovery runs only with --run-statements (whoever can write "
            "the journal can write them, and they would run as this login). Check them "
            f"(`xasink jobs`), then run `xasink recover --job {record.job_id} "
            "--run-statements`, or let the next write to the table finish it",
        )
        return True

    def _finish(self, record: JobRecord) -> None:
        """Mark committed (and apply a staged job); a refused apply aborts it instead."""
        try:
            finished, refusal = self.journal.finish_or_refuse(
                self.conn, record.job_id, record.winners
            )
        except JobOrderError as exc:
            self.job_action(record.job_id, RecoveryAction.LEFT, f"waits: {exc}")
            return
        except Exception as exc:
            detail = self._redact(exc)
            if self.journal.dialect.is_lock_timeout(exc):
                detail = blocked_detail(self.ops, self.conn, self.journal, record.job_id, detail)
            self.job_action(
                record.job_id, RecoveryAction.FAILED, f"finishing the job failed: {detail}"
            )
            return
        if refusal is not None:
            detail = self._redact(refusal)
            # A write's own statement (pre_sql, post_sql) names itself; else the rows.
            own = getattr(refusal, "names_statement", False)
            log.error("xasink recover: job %s refused by its target: %s", record.job_id, detail)
            self.job_action(
                record.job_id,
                RecoveryAction.ABORTED,
                f"{'' if own else 'target refused the rows: '}{detail}",
            )
        elif not finished:
            self.job_action(
                record.job_id, RecoveryAction.FINISHED_ELSEWHERE, "another process finished it"
            )
        elif record.staged:
            self.job_action(
                record.job_id, RecoveryAction.APPLIED, "staging table applied to the target"
            )
        else:
            self.job_action(record.job_id, RecoveryAction.COMMITTED, "every winner committed")

    # -- liveness --------------------------------------------------------------------
    def _alive(self, record: JobRecord) -> bool:
        return self.grace > 0 and record.heartbeat_age < max(self.grace, record.lease)

    def _alive_detail(self, record: JobRecord) -> str:
        return (
            f"job {record.state}, heartbeat {record.heartbeat_age:.0f}s ago < grace "
            f"{max(self.grace, record.lease):.0f}s"
        )

    # -- staging tables --------------------------------------------------------------
    def drop_finished_stages(self, table: str | None, job: str | None) -> None:
        for job_id, plan in self.journal.finished_stages(self.conn):
            if job is not None and job_id != job:
                continue
            if isinstance(plan, JournalError):
                self.job_action(job_id[:64], RecoveryAction.FAILED, str(plan))
                continue
            if table is not None and table not in map(str, plan.targets):
                continue
            stages = ", ".join(map(str, plan.stages))
            if self.dry_run:
                self.job_action(job_id, RecoveryAction.WOULD_DROP_STAGE, stages)
                continue
            try:
                self._release(job_id, plan)
                self.job_action(job_id, RecoveryAction.DROPPED_STAGE, stages)
            except Exception as exc:
                self.job_action(
                    job_id, RecoveryAction.FAILED, f"dropping {stages}: {self._redact(exc)}"
                )

    def _release(self, job_id: str, plan: StagedPlan) -> None:
        """Drop a finished job's stage. A late attempt that prepared after this run listed
        the job holds it: resolve the job once more (rolling such stragglers back), retry."""
        try:
            self.journal.release_stage(self.conn, job_id, plan)
        except Exception as exc:
            if not self.journal.dialect.is_lock_timeout(exc):
                raise
            self.resolve(job_id)
            self.journal.release_stage(self.conn, job_id, plan)


def resolve_in_doubt(
    ops: BranchOps,
    conn: JdbcConnection,
    journal: Journal,
    *,
    table: str | None = None,
    job: str | None = None,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
    run_statements: bool = True,
) -> RecoveryReport:
    """Resolve this journal's in-doubt branches (of `table`'s or `job`'s only, when given);
    `run_statements`: finish staged jobs whose plans run the write's own statements."""
    report = RecoveryReport(dry_run=dry_run, journal=describe(journal))
    resolver = Resolver(ops, conn, journal, grace, dry_run, report, run_statements)
    committing = journal.jobs_in_state(conn, JobState.COMMITTING)  # oldest decision first
    candidates = {branch.job_id for branch, _ in ops.prepared()}
    candidates.update(r.job_id for r in committing)
    candidates.update(journal.running(conn))  # silent before any branch prepared
    undecided, decided = list[str](), list[str]()
    for job_id in sorted(candidates):
        if job is not None and job_id != job:
            continue
        if not valid_job_id(job_id):
            resolver.job_action(
                job_id[:64], RecoveryAction.FAILED, "not an xasink job id: row ignored"
            )
            continue
        record = journal.job(conn, job_id)
        if table is not None and not _changes(journal, conn, record, table):
            continue
        (decided if record and record.state == JobState.COMMITTING else undecided).append(job_id)
    order = {r.job_id: i for i, r in enumerate(committing)}
    for job_id in undecided + sorted(decided, key=lambda j: order.get(j, len(order))):
        resolver.resolve(job_id)
    resolver.drop_finished_stages(table, job)
    return report


def _changes(journal: Journal, conn: JdbcConnection, record: JobRecord | None, table: str) -> bool:
    """Whether the job changes `table`: its row's own table, or one of a transaction's."""
    if record is None or record.table == table:
        return record is not None
    if not record.staged:
        return False
    try:
        plan = stored_plan(journal, conn, record.job_id, journal.staged)
    except JournalError:
        return False
    return plan is not None and table in map(str, plan.targets)


def describe(journal: Journal) -> str:
    where = f"schema {journal.schema}" if journal.schema else "the default schema"
    return f"journal in {where}, tag {journal.tag or '(none)'}"
