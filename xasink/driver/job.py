"""One job on the driver, from preflight to finish: the one object that `write_xa`,
`foreach_batch` and the data source writers all drive.

`write_xa` runs every step in one process. The data source runs them in three (Spark's
`writer()`, the tasks, then `commit()` or `abort()`), so a later step resumes the job from
its pickled plan (`opening.resume_job`). Either way, two rules live here and nowhere else:

* abort unless decided: any failure before the commit decision is recorded aborts the job
  and rolls back its branches; after it (or when its outcome is unknown), the job is left
  to phase 2 and `xasink recover`, because a decided job is never rolled back;
* every XasinkError raised while a job exists carries its id as `job_id`.

Its steps also fill in the job's `JobTrace` (phases, rows, the state it was left in), from
which the job's one end line and WriteResult come (xasink.driver.report).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .. import defaults
from .._testing.faults import trigger
from ..dialects import Dialect, get_dialect
from ..errors import DecisionUnknownError, XasinkError
from ..executor.contract import WritePlan
from ..protocol.branches import BranchOps
from ..protocol.heartbeat import Heartbeat
from ..protocol.jobtables import joined_modes
from ..protocol.journal import Journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.states import FINAL_STATES, JobState
from ..protocol.xa import XaSession
from ..runtime.jdbc import JdbcConnection
from ..runtime.timing import step
from ..tables.columns import TableColumn
from ..tables.staging import ApplyPlan, ApplyPlans, temporary_stage
from .check_cache import UNCACHED, CheckCache
from .decision import decide, select_winners
from .phase_two import abort_job, commit_all, on_live_connection
from .plan import apply_plan_for, bulk_available, load_target
from .preflight import can_stage_temporarily, preflight, recover_table
from .report import JobOutcome, JobTrace
from .request import Begun, JobRequest, PhaseOne, Preflight, Skipped
from .sinks import decided_already

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ..protocol.actions import BranchAction
    from ..spec import TableRef

log = logging.getLogger("xasink")


class Job:
    """A job's steps on one journal connection. Open it with `opening.open_job` (a new job)
    or `opening.resume_job` (a job minted by another process), then call its steps in
    order."""

    def __init__(
        self,
        request: JobRequest,
        session: XaSession,
        journal: Journal,
        trace: JobTrace | None = None,
        *,
        reuse: bool = False,
        checks: CheckCache = UNCACHED,
    ) -> None:
        self.request = request
        self.trace = trace if trace is not None else JobTrace.of(request)
        self.spec = request.spec
        self.session = session
        self.conn: JdbcConnection = session.connection
        self.journal = journal
        self.job_id: str | None = None
        #: The job's staged plan, as its journal row holds it (a transaction's: several).
        self.apply: ApplyPlan | ApplyPlans | None = None
        #: The staged plan of the write being planned (`make_plan`); None for an append.
        self.current: ApplyPlan | None = None
        #: The mode of each of its writes so far, in order (its row's `write_mode`).
        self.modes: list[str] = []
        self.plan: WritePlan | None = None
        #: The commit decision is recorded: from now on nothing rolls the job back.
        self.decided = False
        self._ops: BranchOps | None = None
        #: Sessions kept for the next job of this process, and the preflight checks that
        #: passed (`opening`: both forgotten on any failure).
        self._reuse, self._checks = reuse, checks
        #: What the job opens as it goes (its branch operations), closed with its session.
        self.closing = contextlib.ExitStack()
        #: What preflight's recovery did before it altered the table, not yet reported.
        self._recovered: list[BranchAction] = []

    @property
    def ops(self) -> BranchOps:
        """Branch operations on this job's journal (as preflight found it), opened once."""
        if self._ops is None:
            ops = BranchOps(
                self.spec, self.journal, retries=self.request.commit.retries, reuse=self._reuse
            )
            self._ops = self.closing.enter_context(ops)
        return self._ops

    @property
    def dialect(self) -> Dialect:
        return get_dialect(self.spec.dialect)

    # -- before the job exists --------------------------------------------------------

    def preflight(self, schema: StructType, branches: int) -> Preflight:
        """Server, table and journal checks (with DDL), some cached (`opened`); no row written."""
        recover = self._recover_early if self.request.commit.recover_first else None
        checks = self._checks
        pre = preflight(self.conn, self.journal, self.request, schema, branches, checks, recover)
        self.journal = pre.journal
        # From here on the job names its table as the server resolved it, and writes its
        # `order` column if the table has one.
        self.request = dataclasses.replace(self.request, target=pre.table, options=pre.options)
        return pre

    def _recover_early(self, journal: Journal, table: TableRef) -> None:
        """Preflight's recovery before it alters the table (`preflight._evolved`); what it
        did is reported with the job's own recovery (`recover`). A decided staged job that
        cannot finish yet is refused there, not here."""
        self.journal = journal
        grace = self.request.commit.grace
        self._recovered += recover_table(self.ops, self.conn, journal, str(table), grace, False)

    def recover(self, staged: bool) -> list[BranchAction]:
        """Resolve what earlier jobs left on the job's table (`recover_table`), unless
        recover_first is off; with what preflight resolved before altering the table."""
        request, (early, self._recovered) = self.request, (self._recovered, [])
        if not request.commit.recover_first:
            return early
        grace, table = request.commit.grace, str(request.target)
        return early + recover_table(self.ops, self.conn, self.journal, table, grace, staged)

    def can_stage_temporarily(self) -> bool:
        """Whether a one-phase staged job into its table may stage here (`preflight`)."""
        target, checks = self.request.target, self._checks
        return can_stage_temporarily(self.conn, self.journal, self.spec, checks, target)

    def begin(
        self,
        pre: Preflight,
        columns: Sequence[str],
        lease: float,
        stream_key: str | None = None,
        stream_sink: str | None = None,
        one_phase: bool = False,
        job_id: str | None = None,
    ) -> Begun | Skipped:
        """Resolve what earlier jobs left on the table, skip a decided streaming batch, else
        register a new job (its branches may open from now on). A `one_phase` job is not
        registered: its row is born committed inside its branch
        (`xasink.driver.one_phase.commit_one_phase`). A transaction's participant takes the
        transaction's `job_id`."""
        request, target = self.request, self.request.target
        with step("recovery scan"):
            recovered = self.recover(request.options.staged)
        sink = request.sink
        # A one-phase job's transaction moves the mark only from a row that exists.
        ops, conn, journal = self.ops, self.conn, self.journal
        done = sink and decided_already(ops, conn, journal, sink, register=one_phase)
        if done:
            self.trace.decided_by = done.job_id
            self.trace.done("preflight")
            return Skipped(done, recovered)
        with step("job row"):
            job_id = job_id or uuid.uuid4().hex
            apply = apply_plan_for(
                request.options, target, columns, pre.targets, job_id, self.journal
            )
            self.modes = [request.options.mode]
            if one_phase:
                apply = apply and temporary_stage(apply, self.dialect)
            else:
                self.journal.begin_job(
                    self.conn,
                    job_id,
                    str(target),
                    apply,
                    lease,
                    request.sink,
                    stream_key,
                    stream_sink,
                    joined_modes(self.modes),
                )
        self.job_id, self.apply, self.current = job_id, apply, apply
        self.trace.job_id, self.trace.state = job_id, JobState.RUNNING
        self.trace.done("preflight")
        return Begun(job_id, apply, recovered)

    # -- while the job runs -----------------------------------------------------------

    @contextlib.contextmanager
    def running(self, heartbeat_interval: float = 0.0) -> Iterator[None]:
        """The job's lifetime in this process: it beats (unless its tasks do), every
        XasinkError carries its id, a failure before the decision aborts it, and its
        staging table is dropped once the job is final."""
        assert self.job_id is not None
        heartbeat = None
        if heartbeat_interval:
            with step("heartbeat start"):
                heartbeat = Heartbeat(self.journal, self.spec, self.job_id, heartbeat_interval)
                heartbeat.start()
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, XasinkError):
                exc.job_id = self.job_id
            if isinstance(exc, DecisionUnknownError):
                self.trace.state = None
            elif not self.decided:
                self.abort()
            else:
                self.trace.state = self._state_now()
            raise
        finally:
            if heartbeat is not None:
                with step("heartbeat stop"):
                    heartbeat.stop()
            with step("stage release"):
                self.release_stage()

    def make_plan(
        self,
        pre: Preflight,
        schema: StructType,
        task_heartbeat: float = 0.0,
        task_lease: float | None = None,
        one_phase: bool = False,
        partition_base: int = 0,
    ) -> tuple[WritePlan, list[TableColumn]]:
        """The branches' plan, and the columns they load (the staging table is created
        here, before any branch opens; a `one_phase` job's is a temporary table, which its
        branch creates)."""
        assert self.job_id is not None
        request, dialect = self.request, self.dialect
        with step("plan (stage, bulk check)"):
            load_table, columns, stage_ddl = load_target(
                schema,
                self.conn,
                self.spec,
                dialect,
                request.target,
                pre.targets,
                request.options,
                self.current,
                self.journal,
                temporary=one_phase,
            )
            self.plan = WritePlan(
                self.spec.with_defaults(dialect.branch_properties()),
                load_table,
                tuple(c.name for c in columns),
                self.journal,
                self.job_id,
                request.writer.batch_size,
                bulk=request.writer.bulk and bulk_available(dialect, self.conn),
                faults=request.faults,
                column_types=tuple(c.type_name for c in columns),
                apply=self.current,
                sink=request.sink,
                task_heartbeat=task_heartbeat,
                task_lease=task_lease,
                one_phase=one_phase,
                stage_ddl=stage_ddl,
                partition_base=partition_base,
            )
        return self.plan, columns

    def decide(self, messages: Sequence[Any], branches: int, planned: bool) -> PhaseOne:
        """Select each partition's winning attempt from the messages and record the commit
        decision. `planned`: exactly `branches` partitions report, else at most that many."""
        assert self.plan is not None
        self.trace.done("write")
        return self.record_decision(select_winners(self.plan, messages, branches, planned))

    def record_decision(
        self,
        phase_one: PhaseOne,
        participants: dict[str, list[tuple[int, int, int]]] | None = None,
    ) -> PhaseOne:
        """Record the commit decision for every winner of `phase_one` (a transaction's:
        every write's), on `self.plan`'s job; with each participant database's winners
        (by journal tag) for a transaction over several."""
        assert self.plan is not None
        trace = self.trace
        trace.rows, trace.load_paths = phase_one.rows, phase_one.load_paths
        trace.branches = len(phase_one.winners) + phase_one.empty_partitions
        trigger(self.plan.faults, "before_decision")
        with step("decision"):
            modes = joined_modes(self.modes)
            decide(self.plan, self.conn, phase_one.winners, phase_one.rows_of, participants, modes)
        self.decided = True
        trace.state = JobState.COMMITTING
        trace.done("decide")
        return phase_one

    def commit(self, phase_one: PhaseOne) -> int:
        """Phase 2 and finish; returns how many losing attempts were rolled back."""
        assert self.plan is not None and self.decided
        losers, self.trace.stale = commit_all(
            self.plan, self.ops, self.conn, phase_one, self.request.commit.parallelism
        )
        self.trace.state = JobState.COMMITTED
        self.trace.done("commit")
        return losers

    # -- ending it otherwise ----------------------------------------------------------

    def abort(self) -> None:
        """Presumed abort, made explicit (`phase_two.abort_job`). Never raises: the failure
        that led here is the one to report."""
        assert self.job_id is not None
        self.trace.state = abort_job(self.spec, self.journal, self.conn, self.ops, self.job_id)

    def cancel(
        self, outcome: JobOutcome = JobOutcome.CANCELLED, error: BaseException | None = None
    ) -> str | None:
        """Spark gave up on the job (or on its commit): abort it unless its decision is
        recorded, in which case it is finished instead. Returns the job's final state.

        The job's end is logged here, as `outcome` (with `error`) once aborted, only when
        this call ends it: a job found ended, or decided, was logged by the step that got
        that far."""
        assert self.job_id is not None
        found: str | None = None
        try:
            found = self.journal.state(self.conn, self.job_id)
            # Abort it, and roll back what it prepared.
            if found in (JobState.RUNNING, JobState.ABORTED):
                self.abort()
            elif found == JobState.COMMITTING:
                resolve_in_doubt(
                    self.ops, self.conn, self.journal, job=self.job_id, grace=defaults.GRACE
                )
            self.release_stage()
            final = self.journal.state(self.conn, self.job_id)
        except BaseException as exc:
            if found in (None, JobState.RUNNING):
                self.trace.failed(exc)
            raise
        if found == JobState.RUNNING:
            self.trace.state = final
            aborted = final == JobState.ABORTED
            self.trace.end(outcome if aborted else self.trace.outcome_now(), error)
        return final

    def _state_now(self) -> str | None:
        """The job's state, read once after a failure (None: cannot tell)."""
        try:
            return self.journal.state(self.conn, self.job_id) if self.job_id else None
        except Exception:
            return None

    def release_stage(self) -> None:
        """Drop a final job's staging table; one still in doubt stays for `xasink recover`."""
        if self.apply is None or self.job_id is None:
            return
        job_id, plan = self.job_id, self.apply

        def release(conn: JdbcConnection) -> None:
            if self.journal.state(conn, job_id) in FINAL_STATES:
                self.journal.release_stage(conn, job_id, plan)

        try:  # on a fresh connection if the server restarted meanwhile
            on_live_connection(self.plan, self.conn, release) if self.plan else release(self.conn)
        except Exception as exc:
            log.warning(
                "xasink job %s: staging table %s left in place (%s); `xasink recover` drops it",
                self.job_id,
                ", ".join(map(str, self.apply.stages)),
                self.spec.redact(exc),
            )
