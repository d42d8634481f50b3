"""The decision log: one row per job in the target database, plus one marker per branch.

Presumed abort: a job commits only once its row says `committing` with its winners, written
in a local transaction before phase 2. Every state change is a conditional UPDATE, so the
driver deciding and a recovery aborting a silent job cannot both win.

The decision is the job row's `committing` state plus one `xasink_winners` row per winning
branch, written together. A marker row is written inside each branch. It becomes visible
exactly when its branch commits, which is the only evidence that turns XAER_NOTA into
"already committed". `finish` deletes the winners' markers in the transaction that makes the
job `committed`, so from then on the job's state is that evidence.

One journal has exactly one tag, stored in `xasink_meta` when the journal is created: every
connection, role or schema spelling that finds the journal finds the same tag, and the tag
is what tells this journal's branches from every other transaction on the server.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..dialects import Dialect, get_dialect
from ..errors import JournalError
from ..runtime.jdbc import execute, local_transaction, network_timeout_lifted, query
from ..spec import ConnectionSpec
from ..target.staging import ApplyPlan, apply, check_stage, drop_stage, is_data_error, stage_name
from ..xid import valid_job_id

log = logging.getLogger("xasink")

META_TABLE = "xasink_meta"
JOBS_TABLE = "xasink_jobs"
WINNERS_TABLE = "xasink_winners"
MARKERS_TABLE = "xasink_markers"
#: One row per streaming sink: the highest batch id whose commit decision is recorded.
SINKS_TABLE = "xasink_sinks"

RUNNING, COMMITTING, COMMITTED, ABORTED = "running", "committing", "committed", "aborted"
#: Terminal state of an append job that an operator closed with a lost winner (`xasink
#: resolve --abandon`): its other branches' rows are in the table, the lost ones' are not.
ABANDONED = "abandoned"
FINAL_STATES = (COMMITTED, ABORTED, ABANDONED)

#: Default bound on any lock wait of xasink's own bookkeeping and apply statements.
DEFAULT_LOCK_WAIT = 60.0

Winner = tuple[int, int]  # (partition, attempt)

#: `decide_commit`'s outcomes. BATCH_TAKEN: the sink's mark had reached the batch, or
#: belongs to another query (the caller reads the mark to say which).
DECIDED, JOB_ENDED, BATCH_TAKEN = "decided", "job ended", "batch taken"
#: A sink's high-water mark before its first batch.
NO_BATCH = -1
#: The journal's table layout; stored in `xasink_meta`, checked on every use.
SCHEMA_VERSION = 1
_LOSS_IF_RECREATED = (
    "an empty stand-in would forget decisions, sink marks or the tag that tells this "
    "journal's prepared branches from every other transaction"
)


@dataclass(frozen=True)
class SinkBatch:
    """A streaming job's place in its sink: batch `batch_id` of sink `sink_id`, written by
    the streaming query `query_id` (Spark's id of the query and its checkpoint; None where
    Spark does not tell it)."""

    sink_id: str
    batch_id: int
    query_id: str | None = None


@dataclass(frozen=True)
class SinkMark:
    """A sink's high-water mark: the highest decided batch, the job that decided it and the
    query that wrote it."""

    sink_id: str
    batch_id: int
    job_id: str | None
    query_id: str | None = None


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    table: str
    state: str
    winners: frozenset[Winner]
    #: Seconds since the last heartbeat, on the database clock (inf when unknown).
    heartbeat_age: float
    beats: int
    #: How long the job's own driver may stay silent (a few heartbeat intervals).
    lease: float = 0.0
    staged: bool = False


@dataclass(frozen=True)
class Journal:
    """Where the bookkeeping tables live, and their tag; picklable for the executors."""

    dialect_name: str
    schema: str | None
    tag: str
    lock_wait: float = DEFAULT_LOCK_WAIT

    @property
    def dialect(self) -> Dialect:
        return get_dialect(self.dialect_name)

    def _table(self, name: str) -> str:
        d = self.dialect
        return f"{d.quote(self.schema)}.{d.quote(name)}" if self.schema else d.quote(name)

    @property
    def meta(self) -> str:
        return self._table(META_TABLE)

    @property
    def jobs(self) -> str:
        return self._table(JOBS_TABLE)

    @property
    def winners(self) -> str:
        return self._table(WINNERS_TABLE)

    @property
    def markers(self) -> str:
        return self._table(MARKERS_TABLE)

    @property
    def sinks(self) -> str:
        return self._table(SINKS_TABLE)

    # -- setup -----------------------------------------------------------------------
    @classmethod
    def locate(
        cls,
        conn: Any,
        spec: ConnectionSpec,
        schema: str | None,
        lock_wait: float = DEFAULT_LOCK_WAIT,
    ) -> Journal:
        """The journal in this schema, with its stored tag ("" while it has none: it does not
        exist, or it lost its tag, which `ensure` and `check_complete` refuse).

        Also bounds every lock wait of `conn`, which from now on serves the journal."""
        dialect = get_dialect(spec.dialect)
        bound, _ = dialect.lock_wait_sql(max(1, int(lock_wait)))
        if bound:
            execute(conn, bound)
        journal = cls(spec.dialect, schema, "", lock_wait)
        return replace(journal, tag=journal._stored_tag(conn) or "")

    def _stored_tag(self, conn: Any) -> str | None:
        try:
            rows = query(conn, f"SELECT tag FROM {self.meta} WHERE id = 1")
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                return None
            raise
        return str(rows[0][0]) if rows else None

    def exists(self, conn: Any) -> bool:
        """Whether the journal's tables are here. Only "no such table" means no; any other
        failure (a privilege, a lock timeout, a lost connection) is raised: recovery must
        never mistake an unreadable journal for a missing one."""
        return self._table_exists(conn, self.jobs)

    def check_complete(self, conn: Any) -> None:
        """An existing journal must be whole and of this version: every table, and the one
        row of `xasink_meta` with its tag. An empty stand-in for a lost table would turn
        decided jobs into undecided ones (winners, markers), replays into new batches
        (sinks), or the tag into another one, which hides every prepared branch of the
        journal from recovery (meta). So nothing is ever recreated: it is an error."""
        try:
            rows = query(
                conn,
                f"SELECT m.tag, m.version, (SELECT COUNT(*) FROM {self.winners} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.markers} WHERE 1=0), "
                f"(SELECT COUNT(*) FROM {self.sinks} WHERE 1=0) FROM {self.meta} m WHERE m.id = 1",
            )
        except Exception:  # look table by table, to say what is wrong
            rows = None
        if rows and int(rows[0][1]) == SCHEMA_VERSION:
            return
        for table in (self.meta, self.winners, self.markers, self.sinks):
            if not self._table_exists(conn, table):
                raise JournalError(
                    f"The journal is incomplete: {table} is missing although {self.jobs} "
                    f"exists. xasink will not recreate it ({_LOSS_IF_RECREATED}) and touches "
                    "nothing until it is restored from a backup."
                )
        if rows is None:
            raise JournalError(
                f"The journal's tables ({self.meta} and the others) are not laid out as "
                f"schema version {SCHEMA_VERSION} lays them out (a journal of another xasink "
                "release, or changed by hand). xasink touches nothing in it: use the release "
                "that wrote it, or restore it."
            )
        if not rows:
            raise JournalError(
                f"The journal has lost its tag: {self.meta} has no row. xasink will not make "
                f"a new one ({_LOSS_IF_RECREATED}) and touches nothing until the row is "
                "restored from a backup (`xasink recover` then finds this journal's branches "
                "again)."
            )
        raise JournalError(
            f"The journal in {self.meta} has schema version {rows[0][1]}; this xasink reads "
            f"version {SCHEMA_VERSION}. Use the xasink release that wrote it."
        )

    def _table_exists(self, conn: Any, table: str) -> bool:
        try:
            query(conn, f"SELECT 1 FROM {table} WHERE 1=0")
            return True
        except Exception as exc:
            if self.dialect.is_missing_table(exc):
                return False
            raise

    def _check_not_half_gone(self, conn: Any) -> None:
        """No jobs table, yet the journal's tag is there: the jobs table was lost (or a
        first writer is creating the journal right now, which ends within moments)."""
        for wait in (0.2, 0.5, 1.0, 2.0, 0.0):
            if self._stored_tag(conn) is None or self.exists(conn):
                return
            time.sleep(wait)
        raise JournalError(
            f"The journal is incomplete: {self.jobs} is missing although {self.meta} holds "
            f"its tag. xasink will not recreate it ({_LOSS_IF_RECREATED}) and touches "
            "nothing until it is restored from a backup."
        )

    def ensure(self, conn: Any, spec: ConnectionSpec | None = None) -> Journal:
        """Create the journal if this schema has none (DDL, before any branch opens), or
        check that the existing one is whole; returns the journal with its tag."""
        if self.exists(conn):
            self.check_complete(conn)
            return replace(self, tag=str(self._stored_tag(conn)))
        self._check_not_half_gone(conn)
        if self.exists(conn):  # another first writer finished creating it meanwhile
            self.check_complete(conn)
            return replace(self, tag=str(self._stored_tag(conn)))
        d = self.dialect
        ts, sink_id = d.timestamp_type, d.ascii_id_type(200)
        # The meta row first and the jobs table last: whoever sees the jobs table (the sign
        # that a journal exists) finds every other table and the tag already there.
        meta = "id INTEGER NOT NULL PRIMARY KEY, tag VARCHAR(16) NOT NULL, version INTEGER NOT NULL"
        for sql in d.create_table_sql(self.meta, META_TABLE, meta):
            execute(conn, sql)
        try:  # two first writers may race: one insert wins, both read the winner's tag
            execute(
                conn,
                f"INSERT INTO {self.meta} (id, tag, version) VALUES (1, ?, ?)",
                (secrets.token_hex(4), SCHEMA_VERSION),
            )
        except Exception:
            if self._stored_tag(conn) is None:
                raise
        tables = [
            (
                self.winners,
                WINNERS_TABLE,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
                "NOT NULL, row_count BIGINT, PRIMARY KEY (job_id, partition_id)",
                (),
            ),
            (
                self.markers,
                MARKERS_TABLE,
                "job_id VARCHAR(64) NOT NULL, partition_id INTEGER NOT NULL, attempt BIGINT "
                "NOT NULL, row_count BIGINT NOT NULL, PRIMARY KEY (job_id, partition_id, "
                "attempt)",
                (),
            ),
            (
                self.sinks,
                SINKS_TABLE,
                f"sink_id {sink_id} NOT NULL PRIMARY KEY, batch_id BIGINT NOT NULL, "
                f"job_id VARCHAR(64), query_id VARCHAR(64), updated_at {ts} NOT NULL",
                (),
            ),
            (
                self.jobs,
                JOBS_TABLE,
                f"job_id VARCHAR(64) NOT NULL PRIMARY KEY, target_table {d.text_type} NOT "
                f"NULL, state VARCHAR(16) NOT NULL, beats BIGINT NOT NULL, lease_seconds "
                f"BIGINT, created_at {ts} NOT NULL, heartbeat_at {ts} NOT NULL, decided_at "
                f"{ts}, finished_at {ts}, apply_plan {d.long_text_type}, resolved_by "
                f"{d.text_type}, resolution {d.long_text_type}, sink_id {sink_id}, batch_id "
                f"BIGINT, query_id VARCHAR(64), stream_key VARCHAR(64), prev_batch_id BIGINT, "
                f"prev_job_id VARCHAR(64), prev_query_id VARCHAR(64)",
                # What every call reads: the table's open jobs, a state's jobs, a sink's.
                (("state",), ("target_table", "state"), ("sink_id", "batch_id")),
            ),
        ]
        for table, name, columns, indexes in tables:
            for sql in d.create_table_sql(table, name, columns, indexes):
                execute(conn, sql)
        return replace(self, tag=str(self._stored_tag(conn)))

    # -- the driver's job lifecycle --------------------------------------------------
    def begin_job(
        self,
        conn: Any,
        job_id: str,
        table: str,
        plan: ApplyPlan | None,
        lease: float,
        sink: SinkBatch | None = None,
        stream_key: str | None = None,
        stream_sink: str | None = None,
    ) -> None:
        """Register the job, and its staging table (if any) before that table exists.

        A format("xasink") stream's job is registered before its batch is known: with
        `stream_key`, its writer's identity, hashed (see `running_of_stream`), and
        `stream_sink`, its sink when the options name it (`reset_sink` sees it running)."""
        now = self.dialect.now_sql
        execute(
            conn,
            f"INSERT INTO {self.jobs} (job_id, target_table, state, beats, created_at, "
            "heartbeat_at, apply_plan, lease_seconds, sink_id, batch_id, query_id, stream_key) "
            f"VALUES (?, ?, ?, 0, {now}, {now}, ?, ?, ?, ?, ?, ?)",
            (
                job_id,
                table,
                RUNNING,
                plan.to_json() if plan else None,
                int(lease + 0.999),
                sink.sink_id if sink else stream_sink,
                sink.batch_id if sink else None,
                sink.query_id if sink else None,
                stream_key,
            ),
        )

    def _register_sink(self, conn: Any, sink_id: str) -> None:
        if self.sink_mark(conn, sink_id) is not None:
            return
        try:  # two first batches may race: one insert wins
            execute(
                conn,
                f"INSERT INTO {self.sinks} (sink_id, batch_id, job_id, updated_at) "
                f"VALUES (?, ?, NULL, {self.dialect.now_sql})",
                (sink_id, NO_BATCH),
            )
        except Exception:
            if self.sink_mark(conn, sink_id) is None:
                raise

    def sink_mark(self, conn: Any, sink_id: str, for_update: bool = False) -> SinkMark | None:
        """The sink's high-water mark (None: the sink has never written)."""
        rows = query(
            conn,
            f"SELECT batch_id, job_id, query_id FROM {self.sinks} WHERE sink_id = ?"
            + (" FOR UPDATE" if for_update else ""),
            (sink_id,),
        )
        if not rows:
            return None
        batch, job, query_id = rows[0]
        return SinkMark(
            sink_id, int(batch), str(job) if job else None, str(query_id) if query_id else None
        )

    def reset_sink(self, conn: Any, sink_id: str) -> SinkMark | None:
        """Forget a sink's mark (an operator's reset after a checkpoint was deleted on
        purpose), unless a job of the sink is still running or deciding. Returns the mark
        that was forgotten (None: there was none)."""
        with local_transaction(conn):
            mark = self.sink_mark(conn, sink_id, for_update=True)
            if mark is None:
                return None
            rows = query(
                conn,
                f"SELECT job_id FROM {self.jobs} WHERE sink_id = ? AND state IN (?, ?)",
                (sink_id, RUNNING, COMMITTING),
            )
            if rows:
                raise JournalError(
                    f"Sink {sink_id!r} has job {rows[0][0]} still running or deciding: stop "
                    "its query and run `xasink recover` first; nothing was changed."
                )
            execute(conn, f"DELETE FROM {self.sinks} WHERE sink_id = ?", (sink_id,))
        return mark

    def heartbeat(self, conn: Any, job_id: str, lease: float | None = None) -> None:
        """Prove the job's owner alive; `lease` replaces the job's lease (a format("xasink")
        job's writing tasks, once they run, keep a shorter one than its start)."""
        execute(
            conn,
            f"UPDATE {self.jobs} SET heartbeat_at = {self.dialect.now_sql}, beats = beats + 1, "
            "lease_seconds = COALESCE(?, lease_seconds) WHERE job_id = ? AND state IN (?, ?)",
            (None if lease is None else int(lease + 0.999), job_id, RUNNING, COMMITTING),
        )

    def decide_commit(
        self,
        conn: Any,
        job_id: str,
        winners: Iterable[tuple[int, int, int]],
        sink: SinkBatch | None = None,
    ) -> str:
        """Durably record the commit decision. Returns DECIDED, JOB_ENDED (the job is no
        longer running) or BATCH_TAKEN (the sink's mark already reached this batch, belongs
        to another query, or was reset meanwhile: nothing was recorded).

        `winners` are (partition, attempt, rows). A streaming job's decision also moves its
        sink's mark to its batch, in the same local transaction and only if the mark is
        below it and was not written by another query, so one batch of a sink is decided
        once, whoever races for it, and a sink is written by one query."""
        if sink is not None:
            self._register_sink(conn, sink.sink_id)
        try:
            with local_transaction(conn):
                changed = execute(
                    conn,
                    f"UPDATE {self.jobs} SET state = ?, decided_at = {self.dialect.now_sql} "
                    "WHERE job_id = ? AND state = ?",
                    (COMMITTING, job_id, RUNNING),
                )
                if changed != 1:
                    return JOB_ENDED
                if sink is not None:
                    self._advance_sink(conn, job_id, sink)
                self._batch(
                    conn,
                    f"INSERT INTO {self.winners} (job_id, partition_id, attempt, row_count) "
                    "VALUES (?, ?, ?, ?)",
                    job_id,
                    winners,
                )
        except _BatchTaken:  # rolled back: the job is still running, and undecided
            return BATCH_TAKEN
        return DECIDED

    def _advance_sink(self, conn: Any, job_id: str, sink: SinkBatch) -> None:
        """Move the sink's mark to this job's batch, remembering the mark it replaces."""
        mark = self.sink_mark(conn, sink.sink_id, for_update=True)
        if mark is None or mark.batch_id >= sink.batch_id or foreign(mark, sink):
            raise _BatchTaken()
        execute(
            conn,
            f"UPDATE {self.sinks} SET batch_id = ?, job_id = ?, query_id = COALESCE(?, "
            f"query_id), updated_at = {self.dialect.now_sql} WHERE sink_id = ?",
            (sink.batch_id, job_id, sink.query_id, sink.sink_id),
        )
        execute(
            conn,
            f"UPDATE {self.jobs} SET sink_id = ?, batch_id = ?, query_id = ?, prev_batch_id = "
            "?, prev_job_id = ?, prev_query_id = ? WHERE job_id = ?",
            (
                sink.sink_id,
                sink.batch_id,
                sink.query_id,
                mark.batch_id,
                mark.job_id,
                mark.query_id,
                job_id,
            ),
        )

    def restore_sink(self, conn: Any, job_id: str) -> None:
        """A decided streaming job ended without its rows (aborted after its decision): put
        its sink's mark back, so that the batch's replay writes it instead of skipping it.
        Runs in the caller's transaction, with the job's state change. A mark that moved on
        since (a later batch decided) is left as it is."""
        rows = query(
            conn,
            f"SELECT sink_id, prev_batch_id, prev_job_id, prev_query_id FROM {self.jobs} "
            "WHERE job_id = ?",
            (job_id,),
        )
        if not rows or rows[0][0] is None or rows[0][1] is None:
            return
        sink_id, previous, previous_job, previous_query = rows[0]
        execute(
            conn,
            f"UPDATE {self.sinks} SET batch_id = ?, job_id = ?, query_id = ?, updated_at = "
            f"{self.dialect.now_sql} WHERE sink_id = ? AND job_id = ?",
            (int(previous), previous_job, previous_query, str(sink_id), job_id),
        )

    def fence_decision(self, conn: Any, job_id: str) -> str | None:
        """After the decision's commit failed ambiguously: settle it for good.

        A conditional abort waits for the decision's transaction if it is still in flight
        (it holds the row lock). If it changes the row, the decision never happened and now
        never will; otherwise the state read afterwards is final. Returns ABORTED when this
        call aborted the job, else the state found (COMMITTING: the decision holds)."""
        if self.abort(conn, job_id):
            return ABORTED
        return self.state(conn, job_id)

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

    def finish(self, conn: Any, job_id: str, winners: Iterable[Winner]) -> bool:
        """Phase 2 is complete: mark the job committed and drop its now useless markers.

        A staged job's apply runs in the same local transaction, after the conditional
        state change: it happens once, together with `committed`, or not at all. Returns
        whether this call made the change (False: another process finished or ended it)."""
        with local_transaction(conn):
            changed = self._end(conn, job_id, COMMITTING, COMMITTED)
            if changed:
                plan = self.apply_plan(conn, job_id)
                if plan is not None:
                    self._check_apply_order(conn, job_id, plan)
                    check_stage(conn, self.dialect, plan)
                    with network_timeout_lifted(conn):  # may run long on a live server
                        apply(conn, self.dialect, plan)
                # Exact keys only: a late, still-prepared loser's marker row stays untouched
                # (a range delete would wait on its lock).
                self._batch(
                    conn,
                    f"DELETE FROM {self.markers} WHERE job_id = ? AND partition_id = ? "
                    "AND attempt = ?",
                    job_id,
                    winners,
                )
        return changed

    def _check_apply_order(self, conn: Any, job_id: str, plan: ApplyPlan) -> None:
        """Staged jobs on one table are applied in decision order: an older decided job
        that is not finished yet blocks this one (it would otherwise be applied later and
        overwrite newer data)."""
        rows = query(
            conn,
            f"SELECT o.job_id FROM {self.jobs} o, {self.jobs} j WHERE j.job_id = ? "
            "AND o.target_table = j.target_table AND o.state = ? AND o.job_id <> j.job_id "
            "AND o.apply_plan IS NOT NULL AND (o.decided_at < j.decided_at OR "
            "(o.decided_at = j.decided_at AND o.job_id < j.job_id)) ORDER BY o.decided_at",
            (job_id, COMMITTING),
        )
        if rows:
            raise JobOrderError(str(rows[0][0]), plan)

    def finish_or_refuse(
        self, conn: Any, job_id: str, winners: Iterable[Winner]
    ) -> tuple[bool, Exception | None]:
        """`finish`, except that when the target refuses a staged job's rows (a data error:
        retrying cannot help) the job is abandoned and the refusal returned. Any other
        failure propagates, leaving the decision for recovery. Returns (finished by this
        call, refusal)."""
        try:
            return self.finish(conn, job_id, winners), None
        except Exception as exc:
            if is_data_error(exc) and self.abandon(conn, job_id):
                return False, exc
            raise

    def abandon(self, conn: Any, job_id: str) -> bool:
        """Abort a decided *staged* job that can never be applied (the target refused its
        rows, or a winner was lost). Its apply is one transaction, so the target was never
        changed, and a streaming job's sink mark goes back with the state. An append job is
        never abandoned here: other branches' rows are in the table (an operator closes it
        with `xasink resolve --abandon`)."""
        with local_transaction(conn):
            ended = self._end(conn, job_id, COMMITTING, ABORTED, staged_only=True)
            if ended:
                self.restore_sink(conn, job_id)
        return ended

    def apply_plan(self, conn: Any, job_id: str) -> ApplyPlan | None:
        rows = query(
            conn, f"SELECT apply_plan, target_table FROM {self.jobs} WHERE job_id = ?", (job_id,)
        )
        if not rows or not rows[0][0]:
            return None
        return self._trusted_plan(job_id, str(rows[0][0]), str(rows[0][1]))

    def _trusted_plan(self, job_id: str, text: str, table: str) -> ApplyPlan:
        """The apply plan of a journal row, refused unless it names this job's own staging
        table and the job's own target: recovery may run with more privileges than the
        writers that can write journal rows, and must never drop or fill another table."""
        plan = ApplyPlan.from_json(text)
        expected = stage_name(job_id, self.schema)
        own_stage = plan.stage.name == expected.name and plan.stage.schema in (None, self.schema)
        if not valid_job_id(job_id) or not own_stage or str(plan.target) != table:
            raise JournalError(
                f"Journal row {job_id[:64]!r} names staging table {plan.stage} for target "
                f"{plan.target}, which is not what xasink creates for that job ({expected} for "
                f"{table}). It was not written by xasink: refusing to act on it. Check who can "
                f"write {self.jobs}."
            )
        return plan

    def finished_stages(self, conn: Any) -> list[tuple[str, ApplyPlan | JournalError]]:
        """Staging tables of jobs that are over, still to drop (or why one is refused)."""
        rows = query(
            conn,
            f"SELECT job_id, apply_plan, target_table FROM {self.jobs} "
            "WHERE apply_plan IS NOT NULL AND state IN (?, ?, ?)",
            FINAL_STATES,
        )
        found: list[tuple[str, ApplyPlan | JournalError]] = []
        for job, text, table in rows:
            try:
                found.append((str(job), self._trusted_plan(str(job), str(text), str(table))))
            except JournalError as exc:
                found.append((str(job), exc))
        return found

    def release_stage(self, conn: Any, job_id: str, plan: ApplyPlan) -> None:
        """Drop a finished job's staging table, then forget it (idempotent)."""
        drop_stage(conn, self.dialect, plan.stage, restore_seconds=self.lock_wait)
        execute(conn, f"UPDATE {self.jobs} SET apply_plan = NULL WHERE job_id = ?", (job_id,))

    def _batch(self, conn: Any, sql: str, job_id: str, branches: Iterable[tuple[int, ...]]) -> None:
        """Run `sql` once per (job, partition, attempt, ...), as one JDBC batch."""
        statement = conn.prepareStatement(sql)
        try:
            for numbers in branches:
                statement.setString(1, job_id)
                for index, number in enumerate(numbers, start=2):
                    statement.setLong(index, number)
                statement.addBatch()
            statement.executeBatch()
        finally:
            statement.close()

    # -- reading ---------------------------------------------------------------------
    def state(self, conn: Any, job_id: str) -> str | None:
        """The job's state alone (one cheap read; None: no such job)."""
        rows = query(conn, f"SELECT state FROM {self.jobs} WHERE job_id = ?", (job_id,))
        return str(rows[0][0]) if rows else None

    def job(self, conn: Any, job_id: str) -> JobRecord | None:
        records = self._records(conn, "job_id = ?", (job_id,))
        return records[0] if records else None

    def jobs_in_state(self, conn: Any, state: str) -> list[JobRecord]:
        """Jobs in `state`, oldest decision first (the order staged jobs must apply in)."""
        return self._records(conn, "state = ?", (state,), order="decided_at, job_id")

    def table_settled(self, conn: Any, table: str) -> bool:
        """No job on `table` is running or deciding, and no finished job's staging table is
        left (on any table): recovery scoped to `table` would find no job row to act on."""
        rows = query(
            conn,
            f"SELECT COUNT(*) FROM {self.jobs} WHERE (target_table = ? AND state IN (?, ?)) "
            "OR (apply_plan IS NOT NULL AND state IN (?, ?, ?))",
            (table, RUNNING, COMMITTING, *FINAL_STATES),
        )
        return int(rows[0][0]) == 0

    def running_of_stream(self, conn: Any, stream_key: str) -> list[str]:
        """Running jobs that a format("xasink") stream with these writer options minted."""
        rows = query(
            conn,
            f"SELECT job_id FROM {self.jobs} WHERE stream_key = ? AND state = ?",
            (stream_key, RUNNING),
        )
        return [str(row[0]) for row in rows]

    def running(self, conn: Any) -> list[str]:
        """Running jobs: a silent one is aborted by recovery even before any branch
        prepared (a staged one's staging table is dropped then)."""
        rows = query(conn, f"SELECT job_id FROM {self.jobs} WHERE state = ?", (RUNNING,))
        return [str(row[0]) for row in rows]

    def _records(
        self, conn: Any, where: str, params: tuple[Any, ...], order: str = "job_id"
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

    def winners_of(self, conn: Any, job_id: str) -> frozenset[Winner]:
        rows = query(
            conn,
            f"SELECT partition_id, attempt FROM {self.winners} WHERE job_id = ?",
            (job_id,),
        )
        return frozenset((int(p), int(a)) for p, a in rows)

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


def foreign(mark: SinkMark, sink: SinkBatch) -> bool:
    """The mark was written by another streaming query than the one writing `sink` (both
    known): a reset checkpoint, or two queries sharing one sink id."""
    return None not in (mark.query_id, sink.query_id) and mark.query_id != sink.query_id


class _BatchTaken(Exception):
    """Raised inside the decision's transaction to roll it back."""


class JobOrderError(JournalError):
    """A staged job cannot be applied yet: an older decided job on its table comes first."""

    def __init__(self, blocker: str, plan: ApplyPlan) -> None:
        super().__init__(
            f"job {blocker}, decided earlier on {plan.target}, is not finished yet; staged "
            "jobs on one table are applied in decision order"
        )
        self.blocker = blocker
