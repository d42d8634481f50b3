"""Resolve in-doubt xasink branches: roll forward what is decided, roll back the rest.

Only branches whose XID carries xasink's formatId, gtrid layout *and* this journal's tag are
ever touched. A job's fate comes from its journal row:

* `committing` / `committed`: commit its winners, roll back every other attempt;
* `aborted`, or no row at all (presumed abort): roll everything back;
* `running`: alive while its heartbeat is younger than `grace`, and then left alone;
  otherwise first marked `aborted` (conditionally, so a late decision cannot also win),
  then rolled back.

A staged job (overwrite, upsert, merge) is finished once all its winners are committed: its
staging table is applied to the target in the transaction that marks it `committed`. The
staging tables of finished jobs are dropped. Job-level actions carry partition -1.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from .commit import BranchOps, Outcome
from .journal import ABORTED, COMMITTED, COMMITTING, RUNNING, JobRecord, Journal
from .xid import BranchId

log = logging.getLogger("xasink")

DEFAULT_GRACE = 120.0

# Actions that leave something in doubt.
LEFT, LOST, FAILED = "left", "LOST", "failed"


@dataclass(frozen=True)
class BranchAction:
    job_id: str
    partition: int
    attempt: int
    action: str
    detail: str = ""

    @property
    def unresolved(self) -> bool:
        return self.action in (LEFT, LOST, FAILED) or self.action.startswith("would ")

    def line(self) -> str:
        branch = (
            f" partition={self.partition} attempt={self.attempt}" if self.partition >= 0 else ""
        )
        text = f"job={self.job_id}{branch} action={self.action.replace(' ', '-')}"
        return f"{text} ({self.detail})" if self.detail else text


@dataclass
class RecoveryReport:
    dry_run: bool
    actions: list[BranchAction] = field(default_factory=list)

    @property
    def unresolved(self) -> list[BranchAction]:
        return [a for a in self.actions if a.unresolved]

    @property
    def ok(self) -> bool:
        return not self.unresolved

    def to_json(self) -> str:
        return json.dumps(
            {
                "dry_run": self.dry_run,
                "ok": self.ok,
                "actions": [asdict(a) for a in self.actions],
            },
            indent=2,
        )


@dataclass
class _Resolver:
    ops: BranchOps
    conn: Any
    journal: Journal | None
    grace: float
    dry_run: bool
    report: RecoveryReport

    def act(self, branch: BranchId, commit: bool, why: str) -> None:
        if self.dry_run:
            verb = "would commit" if commit else "would rollback"
            self._add(branch, verb, why)
            return
        try:
            outcome = self.ops.commit(branch) if commit else self.ops.rollback(branch)
        except Exception as exc:
            self._add(branch, FAILED, f"{why}; {self.ops.spec.redact(exc)}")
            return
        if outcome is Outcome.LOST:
            self._add(branch, LOST, "decided for commit, but gone without marker")
        else:
            self._add(branch, outcome.value, why)

    def _add(self, branch: BranchId, action: str, detail: str) -> None:
        self._log(BranchAction(branch.job_id, branch.partition, branch.attempt, action, detail))

    def _job_action(self, job_id: str, action: str, detail: str) -> None:
        self._log(BranchAction(job_id, -1, -1, action, detail))

    def _log(self, action: BranchAction) -> None:
        self.report.actions.append(action)
        log.info("xasink recover: %s", action.line())

    def record(self, job_id: str) -> JobRecord | None:
        return self.journal.job(self.conn, job_id) if self.journal else None

    def resolve_job(self, job_id: str, branches: list[BranchId], record: JobRecord | None) -> None:
        if record is None or record.state == ABORTED:
            why = "job aborted" if record else "no journal row: presumed abort"
            for branch in branches:
                self.act(branch, commit=False, why=why)
        elif record.state in (COMMITTING, COMMITTED):
            self._roll_forward(record, branches)
        elif record.state == RUNNING:
            self._resolve_running(record, branches)
        else:
            for branch in branches:
                self._add(branch, LEFT, f"unknown job state {record.state!r}")

    def _roll_forward(self, record: JobRecord, branches: list[BranchId]) -> None:
        if record.state == COMMITTING and self._alive(record):
            for branch in branches:
                self._add(branch, LEFT, self._alive_detail(record))
            return
        for branch in branches:
            winner = (branch.partition, branch.attempt) in record.winners
            self.act(branch, commit=winner, why="decided" if winner else "not a winner")
        if record.state != COMMITTING or self.journal is None:
            return
        prepared = {(b.partition, b.attempt) for b in branches}
        for partition, attempt in sorted(record.winners - prepared):
            branch = BranchId(self.journal.tag, record.job_id, partition, attempt)
            if self.journal.marker_exists(self.conn, record.job_id, partition, attempt):
                self._add(branch, Outcome.ALREADY_COMMITTED.value, "marker row found")
            else:
                self._add(branch, LOST, "decided for commit, but gone without marker")
        mine = [a for a in self.report.actions if a.job_id == record.job_id]
        if any(a.action == LOST for a in mine) and not self.dry_run:
            self._abandon_if_staged(record)
        if any(a.unresolved for a in mine):
            return
        if not self.dry_run:
            self._finish(record)
        elif self.journal.apply_plan(self.conn, record.job_id) is not None:
            self._job_action(record.job_id, "would apply", "staging table to the target")

    def _abandon_if_staged(self, record: JobRecord) -> None:
        """A staged job missing a winner was never applied: abort it, target unchanged
        (an append job's other rows are in the table already; it stays for a person)."""
        assert self.journal is not None
        if self.journal.abandon(self.conn, record.job_id):
            self._job_action(
                record.job_id,
                "aborted",
                "a decided branch was lost before the apply: the target is unchanged; "
                "run the write again",
            )

    def _finish(self, record: JobRecord) -> None:
        """Mark committed (and apply a staged job); a refused apply aborts it instead."""
        assert self.journal is not None
        staged = self.journal.apply_plan(self.conn, record.job_id) is not None
        try:
            refusal = self.journal.finish_or_refuse(self.conn, record.job_id, record.winners)
        except Exception as exc:
            detail = self.ops.spec.redact(exc)
            self._job_action(record.job_id, FAILED, f"finishing the job failed: {detail}")
            return
        if refusal is not None:
            detail = self.ops.spec.redact(refusal)
            log.error("xasink recover: job %s refused by its target: %s", record.job_id, detail)
            self._job_action(record.job_id, "aborted", f"target refused the rows: {detail}")
        elif staged:
            self._job_action(record.job_id, "applied", "staging table applied to the target")

    def drop_finished_stages(self, table: str | None) -> None:
        assert self.journal is not None
        for job_id, plan in self.journal.finished_stages(self.conn):
            if table is not None and str(plan.target) != table:
                continue
            if self.dry_run:
                self._job_action(job_id, "would drop stage", str(plan.stage))
                continue
            try:
                self.journal.release_stage(self.conn, job_id, plan)
                self._job_action(job_id, "dropped stage", str(plan.stage))
            except Exception as exc:
                self._job_action(
                    job_id, FAILED, f"dropping {plan.stage}: {self.ops.spec.redact(exc)}"
                )

    def _resolve_running(self, record: JobRecord, branches: list[BranchId]) -> None:
        if self._alive(record):
            for branch in branches:
                self._add(branch, LEFT, self._alive_detail(record))
            return
        if self.dry_run or self.journal is None:
            for branch in branches:
                self.act(branch, commit=False, why="no decision, job silent")
            return
        if self.journal.abort(self.conn, record.job_id, beats=record.beats):
            for branch in branches:
                self.act(branch, commit=False, why="no decision, job silent: aborted it")
            return
        # The job moved on while we looked (it decided, or beat again): look once more.
        fresh = self.record(record.job_id)
        if fresh is not None and fresh.state != RUNNING:
            self.resolve_job(record.job_id, branches, fresh)
        else:
            for branch in branches:
                self._add(branch, LEFT, "job became active again")

    def _alive(self, record: JobRecord) -> bool:
        return self.grace > 0 and record.heartbeat_age < self.grace

    def _alive_detail(self, record: JobRecord) -> str:
        return (
            f"job {record.state}, heartbeat {record.heartbeat_age:.0f}s ago < grace "
            f"{self.grace:.0f}s"
        )


def resolve_in_doubt(
    ops: BranchOps,
    conn: Any,
    journal: Journal | None,
    *,
    table: str | None = None,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
) -> RecoveryReport:
    """Resolve this journal's in-doubt branches (of `table`'s jobs only, when given)."""
    report = RecoveryReport(dry_run=dry_run)
    resolver = _Resolver(ops, conn, journal, grace, dry_run, report)
    by_job: dict[str, list[BranchId]] = defaultdict(list)
    for branch, _ in ops.prepared():
        by_job[branch.job_id].append(branch)
    decided = journal.jobs_in_state(conn, COMMITTING) if journal else []
    for record in decided:
        by_job.setdefault(record.job_id, [])
    for job_id in journal.staged_running(conn) if journal else []:
        by_job.setdefault(job_id, [])  # silent before any branch prepared: abort, drop stage
    for job_id in sorted(by_job):
        record = resolver.record(job_id)
        if table is not None and (record is None or record.table != table):
            continue
        branches = sorted(by_job[job_id], key=lambda b: (b.partition, b.attempt))
        resolver.resolve_job(job_id, branches, record)
    if journal is not None:
        resolver.drop_finished_stages(table)
    return report
