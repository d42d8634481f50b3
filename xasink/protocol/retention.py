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
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from ..defaults import GRACE, RETENTION_DAYS
from ..errors import ConfigurationError
from ..runtime.jdbc import JdbcConnection, execute, local_transaction, query
from ..spec import ConnectionSpec
from .links import PARTICIPANT, PENDING
from .participants import FENCED_BY
from .schema import JournalLayout
from .states import FINAL_STATES, JobState

log = logging.getLogger("xasink")

#: Jobs deleted in one local transaction (their rows in every journal table).
CHUNK = 500
#: Jobs one round of `tend` deletes at most.
ROUND = 2000
#: Seconds between two rounds of one process on one journal; after a full round (more to
#: delete), `BACKLOG_INTERVAL`.
INTERVAL = 60.0
BACKLOG_INTERVAL = 5.0


@dataclass(frozen=True)
class Swept:
    """What one sweep deleted, and whether it stopped at its limit (more may be due)."""

    jobs: int
    more: bool


def retention_days(journal: JournalLayout, conn: JdbcConnection) -> float:
    """The journal's retention in days (its default while none is set; 0: keep all)."""
    rows = query(conn, f"SELECT retention_days FROM {journal.meta} WHERE id = 1")
    if not rows or rows[0][0] is None:
        return RETENTION_DAYS
    return float(rows[0][0])


def set_retention(journal: JournalLayout, conn: JdbcConnection, days: float | None) -> None:
    """Set the journal's retention (None: back to the default)."""
    if days is not None and not days >= 0:
        raise ConfigurationError("The retention is a number of days, 0 (keep all) or more.")
    execute(conn, f"UPDATE {journal.meta} SET retention_days = ? WHERE id = 1", (days,))


def sweep(
    journal: JournalLayout,
    conn: JdbcConnection,
    older_than_days: float,
    limit: int | None = None,
    dry_run: bool = False,
) -> Swept:
    """Delete the rows of up to `limit` jobs (all, when None) that ended more than
    `older_than_days` ago and that nothing reads any more (see the module), oldest first.
    Each read finds its candidates through the index of a state's jobs by age, so it
    reads what it deletes, not the history; `dry_run` only counts them."""
    if older_than_days < 0:
        raise ConfigurationError("--older-than takes a number of days, 0 or more.")
    d = journal.dialect
    age = d.age_sql("j.finished_at")
    if age is None:
        raise ConfigurationError(f"The {d.name} dialect cannot compute ages; prune by hand.")
    seconds = max(older_than_days * 86400.0, GRACE)
    # A job that ended before the cutoff began before it: the index's range.
    eligible = (
        f"SELECT j.job_id FROM {journal.jobs} j WHERE j.state = ? AND j.created_at < "
        f"{d.ago_sql(seconds)} AND j.apply_plan IS NULL AND j.finished_at IS NOT NULL "
        f"AND {age} > ? AND {age} > COALESCE(j.lease_seconds, 0) "
        f"AND NOT EXISTS (SELECT 1 FROM {journal.sinks} s WHERE s.job_id = j.job_id) "
        f"AND NOT EXISTS (SELECT 1 FROM {journal.links} l WHERE l.job_id = j.job_id AND "
        "l.role = ? AND l.state = ?) AND (j.state <> ? OR j.resolved_by IS NULL OR "
        "j.resolved_by <> ?) ORDER BY j.created_at"
    )
    kept = (PARTICIPANT, PENDING, JobState.ABORTED, FENCED_BY)
    total, more = 0, False
    for state in FINAL_STATES:
        while limit is None or total < limit:
            want = CHUNK if limit is None else min(CHUNK, limit - total)
            rows = query(conn, f"{eligible} {d.limit_sql(want)}", (state, seconds, *kept))
            jobs = [str(row[0]) for row in rows]
            if not dry_run and jobs:
                forget(journal, conn, jobs)
            total += len(jobs)
            if len(jobs) < want or dry_run:
                break
        else:
            more = True
            break
    return Swept(total, more)


def forget(journal: JournalLayout, conn: JdbcConnection, jobs: list[str]) -> None:
    """Delete every row of these long finished jobs, together (one local transaction): a
    job row is never left without its winners, nor the reverse. A job a sink's mark came
    to name meanwhile (a decided batch aborted, its mark put back) stays."""
    marks = ", ".join("?" for _ in jobs)
    with local_transaction(conn):
        for table in (journal.winners, journal.markers, journal.job_tables, journal.links):
            execute(conn, f"DELETE FROM {table} WHERE job_id IN ({marks})", jobs)
        execute(
            conn,
            f"DELETE FROM {journal.jobs} WHERE job_id IN ({marks}) AND NOT EXISTS "
            f"(SELECT 1 FROM {journal.sinks} s WHERE s.job_id = {journal.jobs}.job_id)",
            jobs,
        )


#: When each (journal, process) is due for its next round: monotonic seconds.
_due: dict[tuple[str | None, ...], float] = {}
_due_lock = threading.Lock()


def tend(journal: JournalLayout, conn: JdbcConnection, spec: ConnectionSpec) -> Swept | None:
    """One round of the journal's retention if it is due in this process (None: not
    due, or the journal keeps everything). Called after a job ended, on the connection
    the job used (to the database `spec` names), with no transaction open. Never raises:
    a failed round is retried later, and a job's outcome is never its business."""
    key = (spec.url, spec.user, journal.schema, journal.tag)
    now = time.monotonic()
    with _due_lock:
        if _due.get(key, 0.0) > now:
            return None
        _due[key] = now + INTERVAL
    try:
        days = retention_days(journal, conn)
        if days == 0:
            return None
        swept = sweep(journal, conn, days, limit=ROUND)
    except Exception as exc:
        log.warning(
            "xasink: the journal's retention round failed (retried later): %s", spec.redact(exc)
        )
        return None
    if swept.more:
        with _due_lock:
            _due[key] = time.monotonic() + BACKLOG_INTERVAL
    if swept.jobs:
        log.info("xasink: retention deleted %d finished job(s) from %s", swept.jobs, journal.jobs)
    return swept


__all__ = ["Swept", "forget", "retention_days", "set_retention", "sweep", "tend"]
