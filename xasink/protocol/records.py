"""Reading the journal's job rows: a job's state and record, the jobs in a state, and the
evidence of its branches (winners, markers). Only reads: every write is `Journal`'s."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from ..runtime.jdbc import JdbcConnection, query
from .journal_tables import JOBS_TABLE
from .links import Link, coordinator_of, linked, participants
from .schema import JournalLayout
from .states import FINAL_STATES, JobState

Winner = tuple[int, int]  # (partition, attempt)
#: How many distinct states `counts_by_state` looks for (xasink writes five).
_MOST_STATES = 32
#: A journal of more rows than this has its committed jobs estimated, not counted
#: (`counts_by_state`): counting them takes the server about a second per few million.
ESTIMATED_FROM = 200_000
#: The states of a job that is not over yet.
OPEN_STATES = (JobState.RUNNING, JobState.COMMITTING)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    table: str
    #: A `JobState` value (kept as read: a state this release does not know stays visible).
    state: str
    winners: frozenset[Winner]
    #: Seconds since the last heartbeat, on the database clock (inf when unknown).
    heartbeat_age: float
    beats: int
    #: How long the job's own driver may stay silent (a few heartbeat intervals).
    lease: float = 0.0
    staged: bool = False


@dataclass(frozen=True)
class JournalReader(JournalLayout):
    """The journal's tables (`JournalLayout`) and the reads of their rows."""

    def state(self, conn: JdbcConnection, job_id: str) -> str | None:
        """The job's state alone (one cheap read; None: no such job)."""
        rows = query(conn, f"SELECT state FROM {self.jobs} WHERE job_id = ?", (job_id,))
        return str(rows[0][0]) if rows else None

    def resolution(self, conn: JdbcConnection, job_id: str) -> str:
        """What an operator recorded when ending the job by hand ('' when none did)."""
        rows = query(conn, f"SELECT resolution FROM {self.jobs} WHERE job_id = ?", (job_id,))
        return str(rows[0][0] or "") if rows else ""

    def ended(self, conn: JdbcConnection, job_id: str) -> tuple[str, float] | None:
        """The job's state and how many seconds ago it ended (infinite when not known; 0
        for a job not ended); None: no such job."""
        d = self.dialect
        age = d.age_sql("finished_at")
        rows = query(
            conn,
            f"SELECT state, finished_at, {d.now_sql}, {age or 'NULL'} FROM {self.jobs} "
            "WHERE job_id = ?",
            (job_id,),
        )
        if not rows:
            return None
        state, finished_at, now, age_s = rows[0]
        if finished_at is None:
            return str(state), 0.0
        if age_s is not None:
            return str(state), float(age_s)
        if isinstance(now, dt.datetime) and isinstance(finished_at, dt.datetime):
            return str(state), (now - finished_at).total_seconds()
        return str(state), float("inf")

    def job(self, conn: JdbcConnection, job_id: str) -> JobRecord | None:
        records = self._records(conn, "job_id = ?", (job_id,))
        return records[0] if records else None

    def jobs_in_state(self, conn: JdbcConnection, state: JobState) -> list[JobRecord]:
        """Jobs in `state`, oldest decision first (the order staged jobs must apply in)."""
        return self._records(conn, "state = ?", (state,), order="decided_at, job_id")

    def table_settled(self, conn: JdbcConnection, table: str) -> bool:
        """No job on `table` is running or deciding (a transaction's of several tables
        counts for each), and no finished job's staging table is left (on any table):
        recovery scoped to `table` would find no job row to act on. Both reads go through
        indexes that hold only such jobs' rows, however long the history."""
        changes, params = self.changes("j", [table])
        rows = query(
            conn,
            f"SELECT COUNT(*) FROM {self.jobs} j WHERE j.state IN (?, ?) AND {changes} "
            f"UNION ALL SELECT COUNT(*) FROM {self.jobs} WHERE apply_plan IS NOT NULL AND "
            "state IN (?, ?, ?)",  # two counts, not one SELECT without FROM: ANSI's way
            (*OPEN_STATES, *params, *FINAL_STATES),
        )
        return sum(int(row[0]) for row in rows) == 0

    def counts_by_state(self, conn: JdbcConnection) -> tuple[dict[str, int], tuple[str, ...]]:
        """Jobs per state, and which counts are the server's estimate: committed jobs are
        nearly the whole history, which counting would read row by row (the retention
        bounds it, but a health check must not wait on it), so theirs is the table's row
        estimate less the others. Every other state is counted exactly through the state
        index, found by skipping from one state to the next (an unknown one included)."""
        states = self._states(conn)
        counts: dict[str, int] = {}
        for state in states:
            if state != JobState.COMMITTED:
                found = query(conn, f"SELECT COUNT(*) FROM {self.jobs} WHERE state = ?", (state,))
                counts[str(state)] = int(found[0][0])
        if JobState.COMMITTED not in states:
            return dict(sorted(counts.items())), ()
        estimate = self.dialect.estimated_rows(conn, self.jobs, self.schema, JOBS_TABLE)
        if estimate is None or estimate < ESTIMATED_FROM:  # counted: cheap, or no statistics
            found = query(
                conn, f"SELECT COUNT(*) FROM {self.jobs} WHERE state = ?", (JobState.COMMITTED,)
            )
            counts[JobState.COMMITTED] = int(found[0][0])
            return dict(sorted(counts.items())), ()
        counts[JobState.COMMITTED] = max(0, estimate - sum(counts.values()))
        return dict(sorted(counts.items())), (str(JobState.COMMITTED),)

    def _states(self, conn: JdbcConnection) -> list[str]:
        """Every state the journal holds, an unknown one included: one `MIN(state)` above
        the last found at a time, each a single index probe (a recursive query doing the
        same walked MariaDB's whole index: 3.6 s at 10M jobs)."""
        found: list[str] = []
        while len(found) < _MOST_STATES:
            above = " WHERE state > ?" if found else ""
            rows = query(conn, f"SELECT MIN(state) FROM {self.jobs}{above}", tuple(found[-1:]))
            if not rows or rows[0][0] is None:
                break
            found.append(str(rows[0][0]))
        return found

    def running_of_stream(self, conn: JdbcConnection, stream_key: str) -> list[str]:
        """Running jobs that a format("xasink") stream with these writer options minted."""
        rows = query(
            conn,
            f"SELECT job_id FROM {self.jobs} WHERE stream_key = ? AND state = ?",
            (stream_key, JobState.RUNNING),
        )
        return [str(row[0]) for row in rows]

    def running(self, conn: JdbcConnection) -> list[str]:
        """Running jobs: a silent one is aborted by recovery even before any branch
        prepared (a staged one's staging table is dropped then)."""
        rows = query(conn, f"SELECT job_id FROM {self.jobs} WHERE state = ?", (JobState.RUNNING,))
        return [str(row[0]) for row in rows]

    def _records(
        self, conn: JdbcConnection, where: str, params: tuple[Any, ...], order: str = "job_id"
    ) -> list[JobRecord]:
        d = self.dialect
        age = d.age_sql("heartbeat_at")
        rows = query(
            conn,
            f"SELECT job_id, target_table, state, heartbeat_at, beats, {d.now_sql}, "
            f"{age or 'NULL'}, lease_seconds, apply_plan IS NOT NULL "
            f"FROM {self.jobs} WHERE {where} ORDER BY {order}",
            params,
        )
        records = []
        for job_id, table, state, heartbeat_at, beats, now, age_s, lease, staged in rows:
            if age_s is not None:
                seconds = float(age_s)
            elif isinstance(now, dt.datetime) and isinstance(heartbeat_at, dt.datetime):
                seconds = (now - heartbeat_at).total_seconds()
            else:
                seconds = float("inf")  # unknown is never "alive"
            records.append(
                JobRecord(
                    str(job_id),
                    str(table),
                    str(state),
                    self.winners_of(conn, str(job_id)),
                    seconds,
                    int(beats),
                    float(lease or 0),
                    bool(staged) and str(staged) not in ("0", "false", "False"),
                )
            )
        return records

    def coordinator(self, conn: JdbcConnection, job_id: str) -> Link | None:
        """The journal that decides `job_id`, when this one is its participant (`links`)."""
        return coordinator_of(self, conn, job_id)

    def linked(self, conn: JdbcConnection, job_id: str) -> Link | None:
        """A link of `job_id` in either role (`links.linked`)."""
        return linked(self, conn, job_id)

    def pending_participants(self, conn: JdbcConnection) -> list[Link]:
        """Participants of this coordinator's transactions not finished yet (`links`)."""
        return participants(self, conn)

    def winners_of(self, conn: JdbcConnection, job_id: str) -> frozenset[Winner]:
        rows = query(
            conn,
            f"SELECT partition_id, attempt FROM {self.winners} WHERE job_id = ?",
            (job_id,),
        )
        return frozenset((int(p), int(a)) for p, a in rows)

    def marker_exists(
        self, conn: JdbcConnection, job_id: str, partition: int, attempt: int
    ) -> bool:
        rows = query(
            conn,
            f"SELECT 1 FROM {self.markers} WHERE job_id = ? AND partition_id = ? AND attempt = ?",
            (job_id, partition, attempt),
        )
        return bool(rows)


__all__ = ["OPEN_STATES", "JobRecord", "JournalReader", "Winner"]
