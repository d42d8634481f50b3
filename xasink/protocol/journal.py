"""The decision log: one row per job in the target database, plus one marker per branch.

Presumed abort: a job commits only once its row says `committing` with its winners, written
in a local transaction before phase 2. Every state change is a conditional UPDATE, so the
driver deciding and a recovery aborting a silent job cannot both win.

The decision is the job row's `committing` state plus one `xasink_winners` row per winning
branch, written together. A marker row is written inside each branch. It becomes visible
exactly when its branch commits, which is the only evidence that turns XAER_NOTA into
"already committed". `finish` deletes the winners' markers in the transaction that makes the
job `committed`, so from then on the job's state is that evidence.

`Journal` writes every row of the journal; its tables' layout is `schema`'s, a streaming
sink's mark `sinkmarks`', and how a staged job is applied the caller's (`applying`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..runtime.jdbc import (
    JdbcConnection,
    execute,
    execute_many,
    local_transaction,
    network_timeout_lifted,
)
from ..spec import ConnectionSpec
from . import applying, jobtables, links, sinkmarks
from .applying import Finished, StagedApply, StagedPlan
from .records import OPEN_STATES, JournalReader, Winner
from .schema import DEFAULT_LOCK_WAIT
from .sinkmarks import SinkBatch, SinkMark
from .states import JobState

log = logging.getLogger("xasink")


@dataclass(frozen=True)
class Journal(JournalReader):
    """The journal's tables (`JournalLayout`), the reads of their rows (`JournalReader`)
    and every write to them; picklable for the executors.

    `staged` reads, applies and drops staged jobs' plans (`applying.StagedApply`): whoever
    opens the journal to finish or recover jobs passes it (`Journal.locate`)."""

    staged: StagedApply[Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def locate(
        cls,
        conn: JdbcConnection,
        spec: ConnectionSpec,
        schema: str | None,
        lock_wait: float = DEFAULT_LOCK_WAIT,
        staged: StagedApply[Any] | None = None,
    ) -> Journal:
        """`JournalLayout.locate`, with the staged apply this journal finishes jobs with."""
        return replace(super().locate(conn, spec, schema, lock_wait), staged=staged)

    # -- the driver's job lifecycle --------------------------------------------------
    def begin_job(
        self,
        conn: JdbcConnection,
        job_id: str,
        table: str,
        plan: StagedPlan | None,
        lease: float,
        sink: SinkBatch | None = None,
        stream_key: str | None = None,
        stream_sink: str | None = None,
        modes: str = "",
    ) -> None:
        """Register the job, and its staging table (if any) before that table exists;
        `modes`, its writes' modes so far (`jobtables.joined_modes`).

        A format("xasink") stream's job is registered before its batch is known: with
        `stream_key`, its writer's identity, hashed (see `running_of_stream`), and
        `stream_sink`, its sink when the options name it (`reset_sink` sees it running)."""
        values: dict[str, Any] = {"apply_plan": plan.to_json() if plan else None}
        values |= {"stream_key": stream_key, "lease_seconds": int(lease + 0.999)}
        values |= sinkmarks.job_columns(sink)
        values |= {"sink_id": stream_sink} if sink is None else {}
        values |= self.mode_column(modes)
        tables = [str(t) for t in plan.targets] if plan else []
        with local_transaction(conn) if len(tables) > 1 else contextlib.nullcontext():
            self.insert_job(conn, job_id, table, JobState.RUNNING, values)
            jobtables.record(self, conn, job_id, tables)

    def insert_job(
        self,
        conn: JdbcConnection,
        job_id: str,
        table: str,
        state: str,
        values: dict[str, Any],
        stamped: tuple[str, ...] = (),
    ) -> None:
        """A job's row: born now with no beats, in `state`, the `stamped` columns set to now
        too, and `values` (column names are this module's, never a caller's text)."""
        now, timed = self.dialect.now_sql, ("created_at", "heartbeat_at", *stamped)
        names = ", ".join(["job_id", "target_table", "state", "beats", *timed, *values])
        marks = ", ".join(["?", "?", "?", "0", *(now for _ in timed), *("?" for _ in values)])
        sql = f"INSERT INTO {self.jobs} ({names}) VALUES ({marks})"
        execute(conn, sql, (job_id, table, state, *values.values()))

    def mode_column(self, modes: str) -> dict[str, str]:
        """The job row's `write_mode` value, where the layout has it and `modes` are known
        (a column name of this module's, never a caller's text)."""
        return {"write_mode": modes} if modes and self.moded else {}

    def mode_set(self, modes: str) -> tuple[str, tuple[str, ...]]:
        """`mode_column` as an UPDATE's further assignment, and its parameter."""
        column = self.mode_column(modes)
        return "".join(f", {name} = ?" for name in column), tuple(column.values())

    def store_plan(
        self, conn: JdbcConnection, job_id: str, plan: StagedPlan, modes: str = ""
    ) -> bool:
        """A running transaction's plan, grown by a write whose staging table is made next
        (recorded before it exists, as `begin_job` records the first), and its writes'
        modes so far. False: the job is no longer running (a recovery run aborted it)."""
        also, mode = self.mode_set(modes)
        sql = f"UPDATE {self.jobs} SET apply_plan = ?{also} WHERE job_id = ? AND state = ?"
        with local_transaction(conn):
            if execute(conn, sql, (plan.to_json(), *mode, job_id, JobState.RUNNING)) != 1:
                return False
            jobtables.record(self, conn, job_id, map(str, plan.targets))
        return True

    def heartbeat(self, conn: JdbcConnection, job_id: str, lease: float | None = None) -> None:
        """Prove the job's owner alive; `lease` replaces its lease (a format job's tasks')."""
        execute(
            conn,
            f"UPDATE {self.jobs} SET heartbeat_at = {self.dialect.now_sql}, beats = beats + 1, "
            "lease_seconds = COALESCE(?, lease_seconds) WHERE job_id = ? AND state IN (?, ?)",
            (None if lease is None else int(lease + 0.999), job_id, *OPEN_STATES),
        )

    def fence_decision(self, conn: JdbcConnection, job_id: str) -> str | None:
        """After the decision's commit failed ambiguously: settle it for good.

        A conditional abort waits for the decision's transaction if it is still in flight
        (it holds the row lock). If it changes the row, the decision never happened and now
        never will; otherwise the state read afterwards is final. Returns ABORTED when this
        call aborted the job, else the state found (COMMITTING: the decision holds)."""
        if self.abort(conn, job_id):
            return JobState.ABORTED
        return self.state(conn, job_id)

    def abort(self, conn: JdbcConnection, job_id: str, beats: int | None = None) -> bool:
        """Mark a running job aborted; with `beats`, only if no heartbeat came since."""
        return self.end(conn, job_id, JobState.RUNNING, JobState.ABORTED, beats)

    def end(
        self,
        conn: JdbcConnection,
        job_id: str,
        current: str,
        final: JobState,
        beats: int | None = None,
        staged_only: bool = False,
        decided: bool = False,
    ) -> bool:
        """Move the job from `current` to a final state, only if it is still in `current`
        (`decided`: stamped as decided now too)."""
        now = self.dialect.now_sql
        stamps = f"finished_at = {now}" + (f", decided_at = {now}" if decided else "")
        sql = f"UPDATE {self.jobs} SET state = ?, {stamps} WHERE job_id = ? AND state = ?"
        params: tuple[Any, ...] = (final, job_id, current)
        if beats is not None:
            sql += " AND beats = ?"
            params += (beats,)
        if staged_only:
            sql += " AND apply_plan IS NOT NULL"
        return execute(conn, sql, params) == 1

    def finish(
        self, conn: JdbcConnection, job_id: str, winners: Iterable[Winner]
    ) -> Finished | None:
        """Phase 2 is complete: mark the job committed and drop its now useless markers.

        A staged job's apply runs in the same local transaction, after the conditional
        state change: it happens once, together with `committed`, or not at all. It holds
        the table's apply lock, as a one-phase job does (`write_one_phase`, from its load on), so
        applies into one table never interleave. Returns what this call finished (None:
        another process finished or ended it)."""
        held: list[StagedPlan] = []
        stale = 0
        try:
            with local_transaction(conn):
                # The apply lock before the job's row, as a one-phase job takes them. Read,
                # wait, write: correct at READ COMMITTED only (see Dialect.session_sql).
                plan = applying.stored_plan(self, conn, job_id, self.staged)
                if plan is not None:
                    applying.lock_apply(self, conn, plan)
                    held.append(plan)
                changed = self.end(conn, job_id, JobState.COMMITTING, JobState.COMMITTED)
                if changed:
                    if plan is not None:
                        staged = applying.need(self.staged)
                        applying.check_apply_order(self, conn, job_id, plan, self.staged)
                        staged.check(conn, self.dialect, plan)
                        with network_timeout_lifted(conn):  # may run long on a live server
                            stale = staged.apply(conn, self.dialect, plan)[1]
                    # Exact keys only: a late, still-prepared loser's marker row stays
                    # untouched (a range delete would wait on its lock).
                    self.batch(
                        conn,
                        f"DELETE FROM {self.markers} WHERE job_id = ? AND partition_id = ? "
                        "AND attempt = ?",
                        job_id,
                        winners,
                    )
        finally:
            for plan in held:
                applying.release_apply_lock(self, conn, plan)
        return Finished(stale) if changed else None

    def finish_or_refuse(
        self, conn: JdbcConnection, job_id: str, winners: Iterable[Winner]
    ) -> tuple[Finished | None, Exception | None]:
        """`finish`, except that when the target refuses a staged job's rows (a data error:
        retrying cannot help) the job is abandoned and the refusal returned. Any other
        failure propagates, leaving the decision for recovery. Returns (what this call
        finished, refusal)."""
        try:
            return self.finish(conn, job_id, winners), None
        except Exception as exc:
            refused = self.staged is not None and self.staged.is_data_error(exc)
            if refused and self.abandon(conn, job_id):
                return None, exc
            raise

    def abandon(self, conn: JdbcConnection, job_id: str) -> bool:
        """Abort a decided *staged* job that can never be applied (the target refused its
        rows, or a winner was lost): its apply is one transaction, the target unchanged, a
        stream's sink mark goes back with it. Never an append job (other branches' rows are
        in: `xasink resolve --abandon`), nor one of several databases (others may hold
        theirs: it waits for a person, decided)."""
        if links.linked(self, conn, job_id):
            return False
        with local_transaction(conn):
            ended = self.end(conn, job_id, JobState.COMMITTING, JobState.ABORTED, staged_only=True)
            if ended:
                sinkmarks.restore(self, conn, job_id)
        return ended

    def end_by_operator(
        self, conn: JdbcConnection, job_id: str, current: str, final: JobState, who: str, what: str
    ) -> bool:
        """An operator's end of a job (`xasink resolve --abandon`): from `current` to
        `final`, only if it is still `current`, recording who did what. An aborted
        streaming batch's sink mark goes back with it (its replay writes it again)."""
        with local_transaction(conn):
            changed = execute(
                conn,
                f"UPDATE {self.jobs} SET state = ?, finished_at = {self.dialect.now_sql}, "
                "resolved_by = ?, resolution = ? WHERE job_id = ? AND state = ?",
                (final, who, what, job_id, current),
            )
            if changed == 1 and final == JobState.ABORTED:
                sinkmarks.restore(self, conn, job_id)
        return changed == 1

    # -- staging tables ----------------------------------------------------------------
    def finished_stages(self, conn: JdbcConnection) -> list[tuple[str, Any]]:
        """Staging tables of jobs that are over, still to drop: (job, plan), or (job,
        JournalError) for a row that names a table xasink would not have made."""
        return applying.finished_stages(self, conn, self.staged)

    def release_stage(self, conn: JdbcConnection, job_id: str, plan: StagedPlan) -> None:
        """Drop a finished job's staging table, then forget it (idempotent)."""
        applying.need(self.staged).drop(conn, self.dialect, plan, restore_seconds=self.lock_wait)
        execute(conn, f"UPDATE {self.jobs} SET apply_plan = NULL WHERE job_id = ?", (job_id,))

    def batch(
        self, conn: JdbcConnection, sql: str, job_id: str, branches: Iterable[tuple[int, ...]]
    ) -> None:  # `sql` once per (job, partition, attempt, ...), as one JDBC batch
        execute_many(conn, sql, [(job_id, *numbers) for numbers in branches])

    # -- streaming sinks -----------------------------------------------------------------
    def sink_mark(
        self, conn: JdbcConnection, sink_id: str, for_update: bool = False
    ) -> SinkMark | None:
        """The sink's high-water mark (None: the sink has never written)."""
        return sinkmarks.read(self, conn, sink_id, for_update)

    def reset_sink(self, conn: JdbcConnection, sink_id: str) -> SinkMark | None:
        """Forget a sink's mark unless one of its jobs is open (`sinkmarks.reset`)."""
        return sinkmarks.reset(self, conn, sink_id)

    # -- inside a branch (executor) ------------------------------------------------------
    def write_marker(
        self, conn: JdbcConnection, job_id: str, partition: int, attempt: int, rows: int
    ) -> None:
        execute(
            conn,
            f"INSERT INTO {self.markers} (job_id, partition_id, attempt, row_count) "
            "VALUES (?, ?, ?, ?)",
            (job_id, partition, attempt, rows),
        )


__all__ = ["Journal"]
