"""The decision log: one row per job in the target database, plus one marker per branch.

Presumed abort: a job commits only once its row says `committing` with its winners, written
in a local transaction before phase 2. Every state change is a conditional UPDATE, so the
driver deciding and a recovery aborting a silent job cannot both win.

The decision is the job row's `committing` state plus one `xasink_winners` row per winning
branch, written together. A marker row is written inside each branch. It becomes visible
exactly when its branch commits, which is the only evidence that turns XAER_NOTA into
"already committed".
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .dialects import Dialect, get_dialect
from .jdbc import execute, local_transaction, query
from .staging import ApplyPlan, apply, drop_stage, is_data_error
from .target import ConnectionSpec

log = logging.getLogger("xasink")

JOBS_TABLE = "xasink_jobs"
WINNERS_TABLE = "xasink_winners"
MARKERS_TABLE = "xasink_markers"

RUNNING, COMMITTING, COMMITTED, ABORTED = "running", "committing", "committed", "aborted"

Winner = tuple[int, int]  # (partition, attempt)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    table: str
    state: str
    winners: frozenset[Winner]
    heartbeat_age: float
    beats: int


@dataclass(frozen=True)
class Journal:
    """Where the bookkeeping tables live; picklable so executors can write markers."""

    dialect_name: str
    schema: str | None
    tag: str

    @property
    def dialect(self) -> Dialect:
        return get_dialect(self.dialect_name)

    def _table(self, name: str) -> str:
        d = self.dialect
        return f"{d.quote(self.schema)}.{d.quote(name)}" if self.schema else d.quote(name)

    @property
    def jobs(self) -> str:
        return self._table(JOBS_TABLE)

    @property
    def winners(self) -> str:
        return self._table(WINNERS_TABLE)

    @property
    def markers(self) -> str:
        return self._table(MARKERS_TABLE)

    # -- setup -----------------------------------------------------------------------
    @classmethod
    def locate(cls, conn: Any, spec: ConnectionSpec, schema: str | None) -> Journal:
        """The journal for this connection; its tag tells its branches from others'."""
        dialect = get_dialect(spec.dialect)
        sql = dialect.location_sql()
        location = str(query(conn, sql)[0][0]) if sql else spec.url.split("?")[0].split(";")[0]
        digest = hashlib.sha256(f"{location}|{schema or ''}".encode()).hexdigest()
        return cls(spec.dialect, schema, digest[:8])

    def exists(self, conn: Any) -> bool:
        try:
            for table in (self.jobs, self.winners, self.markers):
                query(conn, f"SELECT 1 FROM {table} WHERE 1=0")
            return True
        except Exception:
            return False

    def ensure(self, conn: Any) -> None:
        """Create the bookkeeping tables if missing (DDL, before any branch opens)."""
        if self.exists(conn):
            self.upgrade(conn)
            return
        d = self.dialect
        ts = d.timestamp_type
        statements = [
            d.create_table_sql(
                self.jobs,
                f"job_id VARCHAR(64) NOT NULL PRIMARY KEY, target_table {d.text_type} NOT NULL, "
                f"state VARCHAR(16) NOT NULL, beats BIGINT NOT NULL, "
                f"created_at {ts} NOT NULL, heartbeat_at {ts} NOT NULL, decided_at {ts}, "
                f"finished_at {ts}, apply_plan {d.long_text_type}",
            ),
            d.create_table_sql(
                self.winners,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT NOT "
                "NULL, PRIMARY KEY (job_id, partition_id)",
            ),
            d.create_table_sql(
                self.markers,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT NOT "
                "NULL, row_count BIGINT NOT NULL, PRIMARY KEY (job_id, partition_id, attempt)",
            ),
        ]
        for sql in statements:
            execute(conn, sql)

    def upgrade(self, conn: Any) -> None:
        """Add what later versions keep in the jobs table (apply_plan: staged modes)."""
        try:
            query(conn, f"SELECT apply_plan FROM {self.jobs} WHERE 1=0")
        except Exception:
            execute(conn, f"ALTER TABLE {self.jobs} ADD apply_plan {self.dialect.long_text_type}")

    # -- the driver's job lifecycle --------------------------------------------------
    def begin_job(self, conn: Any, job_id: str, table: str, plan: ApplyPlan | None) -> None:
        """Register the job, and its staging table (if any) before that table exists."""
        now = self.dialect.now_sql
        execute(
            conn,
            f"INSERT INTO {self.jobs} (job_id, target_table, state, beats, created_at, "
            f"heartbeat_at, apply_plan) VALUES (?, ?, ?, 0, {now}, {now}, ?)",
            (job_id, table, RUNNING, plan.to_json() if plan else None),
        )

    def heartbeat(self, conn: Any, job_id: str) -> None:
        execute(
            conn,
            f"UPDATE {self.jobs} SET heartbeat_at = {self.dialect.now_sql}, beats = beats + 1 "
            "WHERE job_id = ? AND state IN (?, ?)",
            (job_id, RUNNING, COMMITTING),
        )

    def decide_commit(self, conn: Any, job_id: str, winners: Iterable[Winner]) -> bool:
        """Durably record the commit decision; False if the job is no longer running."""
        with local_transaction(conn):
            changed = execute(
                conn,
                f"UPDATE {self.jobs} SET state = ?, decided_at = {self.dialect.now_sql} "
                "WHERE job_id = ? AND state = ?",
                (COMMITTING, job_id, RUNNING),
            )
            if changed == 1:
                self._batch(
                    conn,
                    f"INSERT INTO {self.winners} (job_id, partition_id, attempt) VALUES (?, ?, ?)",
                    job_id,
                    winners,
                )
        return changed == 1

    def abort(self, conn: Any, job_id: str, beats: int | None = None) -> bool:
        """Mark a running job aborted; with `beats`, only if no heartbeat came since."""
        return self._end(conn, job_id, RUNNING, ABORTED, beats)

    def _end(
        self,
        conn: Any,
        job_id: str,
        current: str,
        final: str,
        beats: int | None = None,
        staged_only: bool = False,
    ) -> bool:
        """Move the job from `current` to a final state, only if it is still in `current`."""
        sql = (
            f"UPDATE {self.jobs} SET state = ?, finished_at = {self.dialect.now_sql} "
            "WHERE job_id = ? AND state = ?"
        )
        params: tuple[Any, ...] = (final, job_id, current)
        if beats is not None:
            sql += " AND beats = ?"
            params += (beats,)
        if staged_only:
            sql += " AND apply_plan IS NOT NULL"
        return execute(conn, sql, params) == 1

    def finish(self, conn: Any, job_id: str, winners: Iterable[Winner]) -> None:
        """Phase 2 is complete: mark the job committed and drop its now useless markers.

        A staged job's apply runs in the same local transaction, after the conditional
        state change: it happens once, together with `committed`, or not at all."""
        with local_transaction(conn):
            changed = self._end(conn, job_id, COMMITTING, COMMITTED)
            plan = self.apply_plan(conn, job_id) if changed else None
            if plan is not None:
                apply(conn, self.dialect, plan)
            # Exact keys only: a late, still-prepared loser's marker row stays untouched
            # (a range delete would wait on its lock).
            self._batch(
                conn,
                f"DELETE FROM {self.markers} WHERE job_id = ? AND partition_id = ? AND attempt = ?",
                job_id,
                winners,
            )

    def finish_or_refuse(
        self, conn: Any, job_id: str, winners: Iterable[Winner]
    ) -> Exception | None:
        """`finish`, except that when the target refuses a staged job's rows (SQLSTATE class
        22/23: retrying cannot help) the job is abandoned and the refusal returned. Any
        other failure propagates, leaving the decision for recovery."""
        try:
            self.finish(conn, job_id, winners)
            return None
        except Exception as exc:
            if is_data_error(exc) and self.abandon(conn, job_id):
                return exc
            raise

    def abandon(self, conn: Any, job_id: str) -> bool:
        """Abort a decided *staged* job that can never be applied (the target refused its
        rows, or a winner was lost). Its apply is one transaction, so the target was never
        changed. An append job is never abandoned: other branches' rows are in the table."""
        return self._end(conn, job_id, COMMITTING, ABORTED, staged_only=True)

    def apply_plan(self, conn: Any, job_id: str) -> ApplyPlan | None:
        rows = query(conn, f"SELECT apply_plan FROM {self.jobs} WHERE job_id = ?", (job_id,))
        return ApplyPlan.from_json(rows[0][0]) if rows and rows[0][0] else None

    def finished_stages(self, conn: Any) -> list[tuple[str, ApplyPlan]]:
        """Staging tables of jobs that are over (committed or aborted), still to drop."""
        rows = query(
            conn,
            f"SELECT job_id, apply_plan FROM {self.jobs} "
            "WHERE apply_plan IS NOT NULL AND state IN (?, ?)",
            (COMMITTED, ABORTED),
        )
        return [(str(job), ApplyPlan.from_json(str(text))) for job, text in rows]

    def staged_running(self, conn: Any) -> list[str]:
        """Running staged jobs: a silent one is aborted by recovery even without branches."""
        rows = query(
            conn,
            f"SELECT job_id FROM {self.jobs} WHERE apply_plan IS NOT NULL AND state = ?",
            (RUNNING,),
        )
        return [str(row[0]) for row in rows]

    def release_stage(self, conn: Any, job_id: str, plan: ApplyPlan) -> None:
        """Drop a finished job's staging table, then forget it (idempotent)."""
        drop_stage(conn, self.dialect, plan.stage)
        execute(conn, f"UPDATE {self.jobs} SET apply_plan = NULL WHERE job_id = ?", (job_id,))

    @staticmethod
    def _batch(conn: Any, sql: str, job_id: str, branches: Iterable[Winner]) -> None:
        """Run `sql` once per (job, partition, attempt), as one JDBC batch."""
        statement = conn.prepareStatement(sql)
        try:
            for partition, attempt in branches:
                statement.setString(1, job_id)
                statement.setInt(2, partition)
                statement.setLong(3, attempt)
                statement.addBatch()
            statement.executeBatch()
        finally:
            statement.close()

    # -- reading ---------------------------------------------------------------------
    def job(self, conn: Any, job_id: str) -> JobRecord | None:
        records = self._records(conn, "job_id = ?", job_id)
        return records[0] if records else None

    def jobs_in_state(self, conn: Any, state: str) -> list[JobRecord]:
        return self._records(conn, "state = ?", state)

    def _records(self, conn: Any, where: str, value: str) -> list[JobRecord]:
        rows = query(
            conn,
            f"SELECT job_id, target_table, state, heartbeat_at, beats, {self.dialect.now_sql} "
            f"FROM {self.jobs} WHERE {where}",
            (value,),
        )
        records = []
        for job_id, table, state, heartbeat_at, beats, now in rows:
            age = (now - heartbeat_at).total_seconds() if isinstance(now, dt.datetime) else 0.0
            winners = frozenset(
                (int(p), int(a))
                for p, a in query(
                    conn,
                    f"SELECT partition_id, attempt FROM {self.winners} WHERE job_id = ?",
                    (job_id,),
                )
            )
            records.append(JobRecord(job_id, table, state, winners, age, int(beats)))
        return records

    def marker_exists(self, conn: Any, job_id: str, partition: int, attempt: int) -> bool:
        rows = query(
            conn,
            f"SELECT 1 FROM {self.markers} WHERE job_id = ? AND partition_id = ? AND attempt = ?",
            (job_id, partition, attempt),
        )
        return bool(rows)

    # -- inside a branch (executor) ------------------------------------------------------
    def write_marker(self, conn: Any, job_id: str, partition: int, attempt: int, rows: int) -> None:
        execute(
            conn,
            f"INSERT INTO {self.markers} (job_id, partition_id, attempt, row_count) "
            "VALUES (?, ?, ?, ?)",
            (job_id, partition, attempt, rows),
        )


class Heartbeat:
    """Refreshes the job row while the driver lives, so recovery can tell it from a dead one."""

    def __init__(
        self, journal: Journal, spec: ConnectionSpec, job_id: str, interval: float
    ) -> None:
        self._journal, self._spec, self._job_id = journal, spec, job_id
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="xasink-heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._thread.start()
        return self

    def _run(self) -> None:
        from .connect import open_session

        session = None
        try:
            while not self._stop.wait(self._interval):
                try:
                    session = session or open_session(self._spec)
                    self._journal.heartbeat(session.connection, self._job_id)
                except Exception as exc:  # keep beating; recovery decides if we went silent
                    log.warning("xasink heartbeat failed: %s", self._spec.redact(exc))
                    if session is not None:
                        session.close()
                        session = None
        finally:
            if session is not None:
                session.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
