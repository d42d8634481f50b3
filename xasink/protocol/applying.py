"""What the journal asks of a staged job's apply, without knowing how it is done.

A staged job (overwrite, upsert, merge) keeps its plan in its journal row, as JSON text, and
is applied in the local transaction that marks it `committed` (`Journal.finish`). How a plan
is read, checked, applied and its staging table dropped is the target's business
(`xasink.tables.applier.STAGED_APPLY`): whoever opens the journal passes it in.

The journal's own part is here too: a row's plan is trusted only when it names the job's
own staging table and target, and staged jobs on one table apply in decision order.
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ..dialects import Dialect
from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, query
from ..spec import TableRef
from ..xid import valid_job_id
from .schema import JournalLayout
from .states import FINAL_STATES, JobState

log = logging.getLogger("xasink")


class StagedPlan(Protocol):
    """A staged job's plan, as the journal stores and checks it: the tables it changes and
    its staging tables (one each; a transaction's job has several)."""

    @property
    def targets(self) -> tuple[TableRef, ...]: ...

    @property
    def stages(self) -> tuple[TableRef, ...]: ...

    def to_json(self) -> str: ...


Plan = TypeVar("Plan", bound=StagedPlan)


class StagedApply(Protocol[Plan]):
    """The operations on staged plans that the journal runs."""

    def parse(self, text: str) -> Plan:
        """The plan stored (by `to_json`) in a job row."""
        ...

    def stage_name(self, job_id: str, schema: str | None, index: int = 0) -> TableRef:
        """The staging table xasink creates for a job's `index`-th staged write, next to the
        journal in `schema`."""
        ...

    def check(self, conn: JdbcConnection, dialect: Dialect, plan: Plan) -> None:
        """Raise unless the whole staging tables can be applied (in the apply transaction,
        before `apply`, which it may prepare: xasink's runs the writes' pre_sql first)."""
        ...

    def apply(self, conn: JdbcConnection, dialect: Dialect, plan: Plan) -> tuple[int, int]:
        """Apply the staging tables to their targets, in the caller's one transaction:
        (rows changed, staged changes skipped as no newer than the row stored)."""
        ...

    def drop(
        self, conn: JdbcConnection, dialect: Dialect, plan: Plan, *, restore_seconds: float
    ) -> None:
        """Drop the staging tables; then the session's lock bound is `restore_seconds`."""
        ...

    def is_data_error(self, exc: BaseException) -> bool:
        """The target refused the rows themselves: applying again cannot help."""
        ...

    def tombstones(
        self, conn: JdbcConnection, dialect: Dialect, schema: str | None
    ) -> list[tuple[TableRef, TableRef]]:
        """(table, target) for each table next to the journal in `schema` that keeps the
        order of a target's deleted keys, which the journal's retention bounds."""
        ...

    def count_tombstones(
        self,
        conn: JdbcConnection,
        dialect: Dialect,
        tombs: TableRef,
        seconds: float,
        at_most: int | None = None,
    ) -> int:
        """How many of the deleted keys it keeps were deleted longer than `seconds` ago
        (counted up to `at_most`, when given)."""
        ...

    def forget_tombstones(
        self, conn: JdbcConnection, dialect: Dialect, tombs: TableRef, seconds: float, rows: int
    ) -> int:
        """Forget at most `rows` of those, in the caller's transaction; how many went."""
        ...


@dataclass(frozen=True)
class Finished:
    """A job this call made final, and how many of its staged changes the apply skipped,
    the stored row being as new or newer (a late change or a replay, by its order)."""

    stale: int = 0


def stored_plan(
    journal: JournalLayout, conn: JdbcConnection, job_id: str, staged: StagedApply[Plan] | None
) -> Plan | None:
    """The job's plan, from its row (None: not a staged job).

    A plain read before the apply lock's wait, after which the transaction writes rows a
    heartbeat or another apply may have changed meanwhile: correct because every journal
    transaction runs at READ COMMITTED (`Dialect.session_sql`), where a snapshot taken
    here would fail those writes (40001; MariaDB's 1020 under innodb_snapshot_isolation)."""
    rows = query(
        conn, f"SELECT apply_plan, target_table FROM {journal.jobs} WHERE job_id = ?", (job_id,)
    )
    if not rows or not rows[0][0]:
        return None
    return trusted_plan(journal, job_id, str(rows[0][0]), str(rows[0][1]), staged)


def runs_statements(journal: JournalLayout, conn: JdbcConnection, job_id: str) -> bool:
    """The job's stored plan runs the write's own statements (`pre_sql`, `post_sql`): a
    plan that does says so in its "requires" (`ApplyPlans.to_json`), so that no release
    that does not know them applies it. Read before parsing: nothing of it is run."""
    rows = query(conn, f"SELECT apply_plan FROM {journal.jobs} WHERE job_id = ?", (job_id,))
    try:
        raw = json.loads(str(rows[0][0])) if rows and rows[0][0] else {}
    except ValueError:
        return False  # not a plan at all: parsing it refuses it, and runs nothing
    return isinstance(raw, dict) and STATEMENTS in raw.get("requires", ())


#: What a stored plan "requires" when it runs the write's own statements.
STATEMENTS = "actions"


def trusted_plan(
    journal: JournalLayout, job_id: str, text: str, table: str, staged: StagedApply[Plan] | None
) -> Plan:
    """The apply plan of a journal row, refused unless it names this job's own staging
    tables and the job's own target among its tables: recovery may run with more
    privileges than the writers that can write journal rows, and must never drop or fill
    another table."""
    staged = need(staged)
    plan = staged.parse(text)
    expected = [staged.stage_name(job_id, journal.schema, i) for i in range(len(plan.stages))]
    own_stages = [s.name for s in plan.stages] == [e.name for e in expected] and all(
        s.schema in (None, journal.schema) for s in plan.stages
    )
    if not valid_job_id(job_id) or not own_stages or table not in map(str, plan.targets):
        raise JournalError(
            f"Journal row {job_id[:64]!r} names staging table(s) "
            f"{', '.join(map(str, plan.stages))} for target(s) "
            f"{', '.join(map(str, plan.targets))}, which is not what xasink creates for that "
            f"job ({', '.join(map(str, expected))} for {table}). It was not written by xasink: "
            f"refusing to act on it. Check who can write {journal.jobs}."
        )
    return plan


def finished_stages(
    journal: JournalLayout, conn: JdbcConnection, staged: StagedApply[Plan] | None
) -> list[tuple[str, Plan | JournalError]]:
    """Staging tables of jobs that are over, still to drop (or why one is refused)."""
    rows = query(
        conn,
        f"SELECT job_id, apply_plan, target_table FROM {journal.jobs} "
        "WHERE apply_plan IS NOT NULL AND state IN (?, ?, ?)",
        FINAL_STATES,
    )
    found: list[tuple[str, Plan | JournalError]] = []
    for job, text, table in rows:
        try:
            found.append((str(job), trusted_plan(journal, str(job), str(text), str(table), staged)))
        except JournalError as exc:
            found.append((str(job), exc))
    return found


def check_apply_order(
    journal: JournalLayout,
    conn: JdbcConnection,
    job_id: str,
    plan: StagedPlan,
    staged: StagedApply[Plan] | None,
) -> None:
    """Staged jobs on one table are applied in decision order: an older decided job
    that is not finished yet, on any of this job's tables, blocks this one (it would
    otherwise be applied later and overwrite newer data)."""
    tables = [str(t) for t in plan.targets]
    changes, params = journal.changes("o", tables)
    rows = query(
        conn,
        f"SELECT o.job_id, o.target_table, o.apply_plan FROM {journal.jobs} o, {journal.jobs} j "
        "WHERE j.job_id = ? AND o.state = ? AND o.job_id <> j.job_id AND o.apply_plan IS NOT "
        f"NULL AND {changes} AND (o.decided_at < j.decided_at OR "
        "(o.decided_at = j.decided_at AND o.job_id < j.job_id)) ORDER BY o.decided_at, o.job_id",
        (job_id, JobState.COMMITTING, *params),
    )
    _raise_first_sharing(journal, rows, plan, staged)


def lock_apply(journal: JournalLayout, conn: JdbcConnection, plan: StagedPlan) -> None:
    """Take the apply lock of each of the plan's targets, in one order for every job (waits
    at most the journal's lock bound for each): every staged apply into one table, one at a
    time, and two jobs sharing tables never wait on each other in a circle."""
    for key in _apply_keys(plan):
        journal.dialect.lock_apply(conn, key, max(1, int(journal.lock_wait)))


def release_apply_lock(journal: JournalLayout, conn: JdbcConnection, plan: StagedPlan) -> None:
    """Release the apply locks where they outlive the transaction (MySQL's named locks).
    Never raises: the outcome it follows is already decided; a broken session drops
    its locks anyway."""
    for key in _apply_keys(plan):
        try:
            journal.dialect.unlock_apply(conn, key)
        except Exception as exc:
            log.warning("xasink: releasing the apply lock failed: %s", type(exc).__name__)


def _apply_keys(plan: StagedPlan) -> list[str]:
    """The tables themselves, not a journal's or a caller's name for them: a plan's targets
    are the tables as the server resolved them (`Dialect.table_identity`), so two
    spellings, or two journals, writing one table take one lock. PostgreSQL's advisory
    locks are per database; MySQL's named locks are server-wide, and the schema there is
    the database."""
    return sorted({apply_key(t) for t in plan.targets})


def apply_key(table: TableRef) -> str:
    """The name of a table's apply lock (`_apply_keys`)."""
    return f"apply:{table.schema or ''}\x00{table.name}"


def lock_apply_order(
    journal: JournalLayout,
    conn: JdbcConnection,
    job_id: str,
    plan: StagedPlan,
    staged: StagedApply[Plan] | None,
) -> None:
    """`check_apply_order` for a job decided by its own commit (one local transaction),
    under its tables' apply locks: it comes after every staged job on them decided before
    it, so one decided but not yet applied raises JobOrderError. A locking read: it sees
    the latest decisions, not the transaction's snapshot (InnoDB)."""
    tables = [str(t) for t in plan.targets]
    changes, params = journal.changes("o", tables)
    rows = query(
        conn,
        f"SELECT o.job_id, o.target_table, o.apply_plan FROM {journal.jobs} o WHERE o.state = ? "
        f"AND o.job_id <> ? AND o.apply_plan IS NOT NULL AND {changes} "
        "ORDER BY o.decided_at, o.job_id FOR UPDATE",
        (JobState.COMMITTING, job_id, *params),
    )
    _raise_first_sharing(journal, rows, plan, staged)


def _raise_first_sharing(
    journal: JournalLayout,
    rows: list[tuple[object, ...]],
    plan: StagedPlan,
    staged: StagedApply[Plan] | None,
) -> None:
    """JobOrderError for the first of `rows` (job, target_table, apply_plan) that changes
    one of the plan's tables: its own table, or one of a transaction's (the row's plan
    says which; a plan that cannot be read counts by its table alone)."""
    ours = {str(t) for t in plan.targets}
    for job, table, text in rows:
        theirs = {str(table)}
        with contextlib.suppress(JournalError):
            theirs |= {str(t) for t in need(staged).parse(str(text)).targets}
        if theirs & ours:
            raise JobOrderError(str(job), ", ".join(sorted(theirs & ours)))


def need(staged: StagedApply[Plan] | None) -> StagedApply[Plan]:
    """The staged apply the journal was opened with, which a staged job needs."""
    if staged is None:
        raise JournalError(
            "This journal was opened without the staged apply (an xasink bug): it cannot "
            "apply or drop a staged job's staging table. Run `xasink recover`."
        )
    return staged


class JobOrderError(JournalError):
    """A staged job cannot be applied yet: an older decided job on its table comes first."""

    def __init__(self, blocker: str, tables: str) -> None:
        super().__init__(
            f"job {blocker}, decided earlier on {tables}, is not finished yet; staged "
            "jobs on one table are applied in decision order"
        )
        self.blocker = blocker


__all__ = ["Finished", "JobOrderError", "StagedApply", "StagedPlan"]
