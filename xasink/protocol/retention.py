"""A journal that bounds itself: the rows of jobs that ended longer ago than the journal's
retention are deleted by xasink, oldest first, a few thousand at a time.

A stream of one batch a second leaves 86,400 job rows a day. Every statement a write makes
reaches what it needs through an index (`schema`), so a long history does not slow a batch;
it only fills the disk and slows the commands that read history. So after a job has ended,
and at most once a minute per journal and process, the process that ended it sweeps one
round (`tend`): never inside a job's transaction, on rows that no writer touches any more,
each chunk of jobs deleted in one short local transaction. A backlog (a journal older than
this release) is worked off a round every few seconds; `xasink prune` deletes it at once.

The retention is the journal's own property (`xasink retention`), like a table's log
retention in Delta Lake: every writer of the journal applies the same one. 0 keeps
everything. What stays whatever its age, because something may still read it:

* a job that ended less than its own lease, or the grace, ago (a stalled driver of it may
  still settle its branches by its state);
* a job whose staging table is still to drop (its plan is still in its row);
* the job a sink's mark names (a replay of that batch reads it);
* a coordinator's job whose participant is not finished yet (its decision is read here);
* in a participant, the fence a recovery from the coordinator wrote (an aborted row of a
  job the participant never registered): a driver that stalled before registering it here
  would register it once the fence is gone, and leave a job nobody may end.

The same rounds forget the order of deleted keys (`xasink.tables.tombstones`, through the
staged apply the journal was opened with) kept longer than the retention: past it, a
change older than such a delete inserts the row again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..defaults import GRACE, MINIMUM_RETENTION_DAYS, RETENTION_DAYS
from ..errors import ConfigurationError
from ..masking import Redactor
from ..runtime.jdbc import JdbcConnection, Param, execute, java_message, local_transaction, query
from ..spec import ConnectionSpec, TableRef
from ..xid import FORMAT_ID, BranchId, Xid
from .applying import StagedApply, apply_key
from .journal import Journal
from .links import PARTICIPANT, PENDING
from .participants import FENCED_BY
from .schema import LINKED_VERSION, JournalLayout
from .states import FINAL_STATES, JobState
from .xa import XaSession

log = logging.getLogger("xasink")

#: Jobs deleted in one local transaction (their rows in every journal table).
CHUNK = 500
#: Jobs one round of `tend` deletes at most.
ROUND = 2000
#: Seconds between two rounds of one process on one journal; after a full round (more to
#: delete), `BACKLOG_INTERVAL`.
INTERVAL = 60.0
BACKLOG_INTERVAL = 5.0
#: Seconds a round's statements wait for a lock before the round gives up until the next.
ROUND_LOCK_WAIT = 2
#: The shortest retention a journal may have, in days (besides 0, everything).
MINIMUM_DAYS = MINIMUM_RETENTION_DAYS
#: Deleted keys' tombstones forgotten in one local transaction, and at most in one round.
TOMBSTONES_CHUNK = 5000
TOMBSTONES_ROUND = 50_000
#: What masks a failure's message where no login's secrets are known (URLs' passwords).
_MASKED = Redactor()


@dataclass(frozen=True)
class Swept:
    """What one sweep deleted (jobs, and deleted keys' tombstones), whether it stopped
    at its limit or skipped a table being applied to (more may be due), and the tables of
    tombstones it could not sweep (`skipped`: this login's privileges, a failure)."""

    jobs: int
    more: bool
    tombstones: int = 0
    skipped: tuple[str, ...] = ()


def retention_days(journal: JournalLayout, conn: JdbcConnection) -> float:
    """The journal's retention in days (its default while none is set, and in an earlier
    layout, which has no such setting; 0: keep all)."""
    if not journal.layered:
        return RETENTION_DAYS
    rows = query(conn, f"SELECT retention_days FROM {journal.meta} WHERE id = 1")
    if not rows or rows[0][0] is None:
        return RETENTION_DAYS
    return float(rows[0][0])


def set_retention(journal: JournalLayout, conn: JdbcConnection, days: float | None) -> None:
    """Set the journal's retention (None: back to the default). Below a day, a job whose
    one-phase commit's outcome was unknown could lose its row before an operator settles
    it (`xasink resolve --abandon --table` tells the outcome by the row)."""
    if days is not None and not (days == 0 or days >= MINIMUM_DAYS):
        raise ConfigurationError(
            f"The retention is a number of days: 0 (keep everything) or {MINIMUM_DAYS:g} or "
            f"more; got {days:g}."
        )
    if not journal.layered:
        raise ConfigurationError(
            f"The journal {journal.jobs} has not been upgraded yet (it waits for prepared "
            "branches to be resolved): run `xasink recover`, then set its retention."
        )
    execute(conn, f"UPDATE {journal.meta} SET retention_days = ? WHERE id = 1", (days,))


def sweep(
    journal: JournalLayout,
    conn: JdbcConnection,
    older_than_days: float,
    limit: int | None = None,
    dry_run: bool = False,
    staged: StagedApply[Any] | None = None,
    redact: Callable[[object], str] = _MASKED,
    retention: float | None = None,
    recovered: Callable[[], list[Xid]] | None = None,
) -> Swept:
    """Delete the rows of up to `limit` jobs (all, when None) that ended more than
    `older_than_days` ago and that nothing reads any more (see the module), oldest first,
    then (with `staged`) the tombstones of keys deleted longer ago, never one younger than
    the journal's `retention` (None: `older_than_days` is it; 0 keeps them all): a delete
    keeps its order for the retention, whatever age the jobs are pruned at. `dry_run`
    counts them. `redact` masks what a skipped table's failure says in the log;
    `recovered` lists the prepared XIDs through XA where the dialect cannot in SQL."""
    jobs = _sweep_jobs(journal, conn, older_than_days, limit, dry_run, recovered)
    kept = older_than_days if retention is None else retention
    seconds = max(older_than_days, kept) * 86400.0
    bound = None if limit is None else TOMBSTONES_ROUND
    tombs = (
        _sweep_tombstones(journal, conn, staged, max(seconds, GRACE), bound, dry_run, redact)
        if kept
        else Swept(0, False)
    )
    return Swept(jobs.jobs, jobs.more or tombs.more, tombs.tombstones, tombs.skipped)


def _sweep_jobs(
    journal: JournalLayout,
    conn: JdbcConnection,
    older_than_days: float,
    limit: int | None,
    dry_run: bool,
    recovered: Callable[[], list[Xid]] | None = None,
) -> Swept:
    """The jobs' part of `sweep`. Each read finds its candidates through the index of a
    state's jobs by age, so it reads what it deletes, not the history. A job with a branch
    still prepared (a late losing attempt) stays for recovery, and while any branch is
    prepared no marker row is deleted (see `forget`)."""
    if older_than_days < 0:
        raise ConfigurationError("--older-than takes a number of days, 0 or more.")
    d = journal.dialect
    age, prepared = d.age_sql("j.finished_at"), d.prepared_xids(conn, FORMAT_ID)
    if prepared is None and recovered is not None:  # XA's own listing (the generic dialect)
        prepared = [x for x in recovered() if x.format_id == FORMAT_ID]
    if age is None or prepared is None:
        raise ConfigurationError(
            f"The {d.name} dialect cannot tell ages or list prepared branches in SQL; "
            "prune by hand."
        )
    busy = sorted({b.job_id for x in prepared if (b := BranchId.parse(x))})
    seconds = max(older_than_days * 86400.0, GRACE)
    # A job that ended before the cutoff began before it: the index's range.
    eligible = (
        f"FROM {journal.jobs} j WHERE j.state = ? AND j.created_at < {d.ago_sql(seconds)} "
        f"AND j.apply_plan IS NULL AND j.finished_at IS NOT NULL AND {age} > ? "
        f"AND {age} > COALESCE(j.lease_seconds, 0) AND NOT EXISTS (SELECT 1 FROM "
        f"{journal.sinks} s WHERE s.job_id = j.job_id) AND (j.state <> ? OR j.resolved_by IS "
        "NULL OR j.resolved_by <> ?)"
    )
    params: tuple[Param, ...] = (seconds, JobState.ABORTED, FENCED_BY)
    if journal.version >= LINKED_VERSION:
        eligible += (
            f" AND NOT EXISTS (SELECT 1 FROM {journal.links} l WHERE l.job_id = j.job_id AND "
            "l.role = ? AND l.state = ?)"
        )
        params += (PARTICIPANT, PENDING)
    if busy:
        eligible += f" AND j.job_id NOT IN ({', '.join('?' for _ in busy)})"
        params += tuple(busy)
    if dry_run:
        counts = [query(conn, f"SELECT COUNT(*) {eligible}", (s, *params)) for s in FINAL_STATES]
        return Swept(sum(int(c[0][0]) for c in counts), False)
    total = 0
    for state in FINAL_STATES:
        while limit is None or total < limit:
            want = CHUNK if limit is None else min(CHUNK, limit - total)
            rows = query(
                conn,
                f"SELECT j.job_id {eligible} ORDER BY j.created_at {d.limit_sql(want)}",
                (state, *params),
            )
            forget(journal, conn, [str(row[0]) for row in rows], markers=not prepared)
            total += len(rows)
            if len(rows) < want:
                break
        else:
            return Swept(total, True)
    return Swept(total, False)


def _sweep_tombstones(
    journal: JournalLayout,
    conn: JdbcConnection,
    staged: StagedApply[Any] | None,
    seconds: float,
    limit: int | None,
    dry_run: bool,
    redact: Callable[[object], str],
) -> Swept:
    """Forget up to `limit` (all, when None) tombstones of keys deleted more than `seconds`
    ago, a chunk per local transaction: Swept(no jobs, whether more may be due, how many,
    the tables skipped). A table whose sweep fails (a login that may not delete from it:
    every table one lists is another writer's too) is skipped and said once; the others
    are swept, and the jobs' rounds go on."""
    if staged is None:
        return Swept(0, False)
    d, total, more = journal.dialect, 0, False
    skipped: list[str] = []
    for tombs, target in staged.tombstones(conn, d, journal.schema):
        if limit is not None and total >= limit:
            return Swept(0, True, total, tuple(skipped))
        budget = None if limit is None else limit - total
        try:
            gone, busy = _sweep_table(
                journal, conn, staged, (tombs, target), seconds, budget, dry_run
            )
        except Exception as exc:
            log.warning(
                "xasink: the retention skipped %s, whose deleted keys' order this login could "
                "not forget (grant it DELETE there, or leave it to a login that may): %s",
                tombs,
                redact(java_message(exc)),
            )
            skipped.append(str(tombs))
            continue
        total, more = total + gone, more or busy
    return Swept(0, more, total, tuple(skipped))


def _sweep_table(
    journal: JournalLayout,
    conn: JdbcConnection,
    staged: StagedApply[Any],
    table: tuple[TableRef, TableRef],
    seconds: float,
    budget: int | None,
    dry_run: bool,
) -> tuple[int, bool]:
    """One table of tombstones (and its target): how many went (`dry_run`: would go), and
    whether more may be due (old ones are left: an apply held its lock, or `budget` ran
    out). A busy table with none old asks for no early round."""
    (tombs, target), d = table, journal.dialect
    if dry_run:
        return staged.count_tombstones(conn, d, tombs, seconds), False
    if not staged.count_tombstones(conn, d, tombs, seconds, at_most=1):
        return 0, False  # nothing old: no lock to try, no round to come back for
    total = 0
    while budget is None or total < budget:
        want = TOMBSTONES_CHUNK if budget is None else min(TOMBSTONES_CHUNK, budget - total)
        gone = _forget_tombstones(journal, conn, staged, tombs, target, seconds, want)
        if gone is None:
            return total, True
        total += gone
        if gone < want:
            return total, False
    return total, True


def _forget_tombstones(
    journal: JournalLayout,
    conn: JdbcConnection,
    staged: StagedApply[Any],
    tombs: TableRef,
    target: TableRef,
    seconds: float,
    rows: int,
) -> int | None:
    """One chunk, under the target's apply lock, tried without waiting (None: an apply
    holds it; the next round tries again): an apply counts its stale changes, then runs
    its statements, and sees all of a chunk gone or none of it, so that what it counts is
    what it skips."""
    d, key = journal.dialect, apply_key(target)
    try:
        with local_transaction(conn):
            if not d.try_lock_apply(conn, key):
                return None
            return staged.forget_tombstones(conn, d, tombs, seconds, rows)
    finally:
        d.unlock_apply(conn, key)  # where the lock is the session's (MySQL)


def forget(
    journal: JournalLayout, conn: JdbcConnection, jobs: list[str], markers: bool = True
) -> None:
    """Delete every row of these long finished jobs, together (one local transaction): a
    job row is never left without its winners, nor the reverse. A job a sink's mark came
    to name meanwhile (a decided batch aborted, its mark put back) stays whole. Without
    `markers`, their marker rows stay (a finished job has none but an abandoned job's
    winners'): InnoDB's DELETE may read the whole table and wait on a prepared branch's
    uncommitted marker row, even another job's."""
    if not jobs:
        return
    marks = ", ".join("?" for _ in jobs)
    named = query(conn, f"SELECT job_id FROM {journal.sinks} WHERE job_id IN ({marks})", jobs)
    jobs = sorted(set(jobs) - {str(row[0]) for row in named})
    marks = ", ".join("?" for _ in jobs)
    tables = [journal.winners, *([journal.markers] if markers else [])]
    tables += [journal.links] if journal.version >= LINKED_VERSION else []
    tables += [journal.job_tables] if journal.layered else []
    with local_transaction(conn):
        for table in (*tables, journal.jobs):
            if jobs:
                execute(conn, f"DELETE FROM {table} WHERE job_id IN ({marks})", jobs)


#: When each (journal, process) is due for its next round: monotonic seconds.
_due: dict[tuple[str | None, ...], float] = {}
_due_lock = threading.Lock()


def tend(journal: JournalLayout, session: XaSession, spec: ConnectionSpec) -> Swept | None:
    """One round of the journal's retention if it is due in this process (None: not
    due, or the journal keeps everything). Called after a job ended, on the session the
    job used (to the database `spec` names), with no transaction open; its lock waits
    are bounded to a few seconds meanwhile (a round never waits on a writer for long).
    Never raises: a failed round is retried later, and a job's outcome is never its
    business. Never runs on a dialect that cannot bound its lock waits (generic)."""
    if journal.dialect.lock_wait_sql(ROUND_LOCK_WAIT)[0] is None:
        # A dialect that cannot bound a session's lock waits (generic: Derby waits its
        # server-wide derby.locks.waitTimeout, and its reads take locks) could stall a
        # writer behind the round: `xasink prune` by hand.
        return None
    key = (spec.url, spec.user, journal.schema, journal.tag)
    now = time.monotonic()
    with _due_lock:
        if _due.get(key, 0.0) > now:
            return None
        _due[key] = now + INTERVAL
    d, conn = journal.dialect, session.connection
    if d.age_sql("finished_at") is None:
        return None  # a dialect that cannot tell ages: `xasink prune` by hand
    try:
        days = retention_days(journal, conn)
        if days == 0:
            return None
        staged = journal.staged if isinstance(journal, Journal) else None
        with d.waits_bounded(conn, ROUND_LOCK_WAIT, journal.lock_wait):
            swept = sweep(
                journal,
                conn,
                days,
                limit=ROUND,
                staged=staged,
                redact=spec.redact,
                recovered=session.recover,
            )
    except Exception as exc:
        log.warning(
            "xasink: the journal's retention round failed (retried later): %s", spec.redact(exc)
        )
        return None
    if swept.more:
        with _due_lock:
            _due[key] = time.monotonic() + BACKLOG_INTERVAL
    if swept.jobs or swept.tombstones:
        log.info(
            "xasink: retention deleted %d finished job(s) and %d deleted key(s)' order from %s",
            swept.jobs,
            swept.tombstones,
            journal.jobs,
        )
    return swept


__all__ = ["Swept", "forget", "retention_days", "set_retention", "sweep", "tend"]
