"""The driver's part of one job, from preflight to finish: shared by `write_xa` and the
Data Source writers (`df.write.format("xasink")`), which run these steps in separate processes."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from .._testing.faults import Fault, trigger
from ..dialects import Dialect, dialect_name_for, get_dialect
from ..errors import (
    CommitError,
    ConfigurationError,
    DecisionUnknownError,
    InputDataError,
    JobAbortedError,
    LostBranchError,
    PreflightError,
    WriteError,
)
from ..executor.branch import JOB_ENDED, WritePlan
from ..protocol import idle
from ..protocol.branches import BranchOps, commit_group
from ..protocol.journal import (
    ABORTED,
    BATCH_TAKEN,
    COMMITTED,
    COMMITTING,
    DECIDED,
    DEFAULT_LOCK_WAIT,
    FINAL_STATES,
    JobOrderError,
    Journal,
    SinkBatch,
    SinkMark,
)
from ..protocol.recovery import (
    DEFAULT_GRACE,
    BranchAction,
    blocked_detail,
    resolve_in_doubt,
)
from ..protocol.sessions import check_reachable, classpath_for, open_session
from ..protocol.xa import XaSession
from ..runtime.timing import step
from ..spec import DEFAULT_NETWORK_TIMEOUT, ConnectionSpec, TableRef, properties_tuple
from ..target.catalog import check_create, check_fit, ensure_table
from ..target.columns import TableColumn
from ..target.staging import ApplyPlan, ModeOptions, refused
from ..xid import FORMAT_ID, BranchId
from .checks import UNCACHED, CheckCache
from .plan import apply_plan_for, load_target
from .sinks import conflict_at_decision, decided_already

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("xasink")
T = TypeVar("T")
#: xasink.idle's name for write_xa's journal session.
JOURNAL_ROLE = "journal"


@dataclass(frozen=True)
class PhaseOne:
    """What the partition messages told the driver."""

    winners: list[BranchId]
    #: Rows per winning partition.
    rows_of: dict[int, int]
    rows: int
    empty_partitions: int
    worker_peak_rss_kb: int
    load_paths: tuple[str, ...]


def make_spec(
    url: str,
    *,
    user: str | None,
    password: str | None,
    properties: Mapping[str, object] | None,
    dialect: str | None,
    xa_datasource: str | None,
    jars: Sequence[str] | None,
    connect_timeout: int,
    network_timeout: float = DEFAULT_NETWORK_TIMEOUT,
) -> ConnectionSpec:
    """Validate the connection arguments and resolve the driver jars up front."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError("url must be a JDBC URL string, e.g. jdbc:postgresql://host/db")
    if not network_timeout > 0:
        raise ConfigurationError("network_timeout must be a number of seconds above 0.")
    name = dialect_name_for(url, dialect, xa_datasource)
    spec = ConnectionSpec(
        url=url,
        user=user,
        password=password,
        properties=properties_tuple(properties),
        dialect=name,
        xa_datasource=xa_datasource,
        jars=tuple(jars or ()),
        connect_timeout=connect_timeout,
        network_timeout=float(network_timeout),
    )
    return ConnectionSpec(**{**spec.__dict__, "jars": tuple(classpath_for(spec))})


def open_journal(
    spec: ConnectionSpec,
    schema: str | None,
    lock_wait: float = DEFAULT_LOCK_WAIT,
    reuse: bool = False,
) -> tuple[XaSession, Journal]:
    """A session on the journal, and the journal as found. With `reuse`, a session an
    earlier call of this process handed back (xasink.idle) if it still answers."""
    with step("journal connection"):
        session = idle.take(spec, JOURNAL_ROLE) if reuse else None
        if session is None:
            with step("reachability probe"):
                check_reachable(spec)
            session = open_session(spec)
    try:
        with step("journal tag"):
            return session, Journal.locate(session.connection, spec, schema, lock_wait)
    except BaseException:
        session.close()
        raise


@dataclass(frozen=True)
class JobRequest:
    """A write's validated arguments: write_xa's keywords, or format("xasink")'s options."""

    spec: ConnectionSpec
    target: TableRef
    options: ModeOptions
    create: str = "if_missing"
    batch_size: int = 10_000
    bulk: bool = True
    journal_schema: str | None = None
    lock_wait: float = DEFAULT_LOCK_WAIT
    grace: float = DEFAULT_GRACE
    recover_first: bool = True
    commit_retries: int = 5
    commit_parallelism: int = 4
    sink: SinkBatch | None = None
    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigurationError("batch_size must be at least 1.")
        if self.spec.network_timeout <= self.lock_wait:
            raise ConfigurationError(
                f"network_timeout ({self.spec.network_timeout:g} s) must be above "
                f"lock_wait_timeout ({self.lock_wait:g} s): a lock wait would otherwise be "
                "taken for a dead connection."
            )
        check_create(self.create)


@dataclass(frozen=True)
class Preflight:
    """What the checks before a job found: the journal (with its tag), the target's
    columns for the written ones, and whether the table was created."""

    journal: Journal
    targets: list[TableColumn]
    created: bool


@dataclass(frozen=True)
class Begun:
    """A job registered in the journal (its branches may open from now on)."""

    job_id: str
    apply: ApplyPlan | None
    recovered: list[BranchAction]


@dataclass(frozen=True)
class Skipped:
    """A streaming batch that is already decided (and finished): nothing to write."""

    mark: SinkMark
    recovered: list[BranchAction]


def preflight(
    conn: Any,
    journal: Journal,
    request: JobRequest,
    schema: StructType,
    branches: int,
    checks: CheckCache = UNCACHED,
) -> Preflight:
    """Server, table and journal checks (DDL included), before any job exists; what passed
    recently on this connection is not checked again (see xasink.checkcache)."""
    spec, target, options = request.spec, request.target, request.options
    dialect = get_dialect(spec.dialect)
    with step("server checks"):
        passed = checks.get(spec, "server")
        if not isinstance(passed, int) or passed < branches:
            dialect.check_server(conn, branches, spec.user)
            checks.put(spec, "server", max(branches, passed or 0))
    with step("table description"):
        described = checks.get(spec, ("table", target))
        if isinstance(described, tuple):
            existing, created = list(described), False
        else:
            existing, created = ensure_table(
                conn, dialect, target, schema, options, request.create, spec.redact
            )
            checks.put(spec, ("table", target), tuple(existing))
        targets = check_fit(conn, dialect, target, schema, options, existing)
    with step("journal DDL checks"):
        if not (journal.tag and checks.get(spec, ("journal", journal.schema, journal.tag))):
            journal = journal.ensure(conn, spec)
            checks.put(spec, ("journal", journal.schema, journal.tag), True)
    return Preflight(journal, targets, created)


def begin(
    conn: Any,
    ops: BranchOps,
    request: JobRequest,
    pre: Preflight,
    columns: Sequence[str],
    lease: float,
    stream_key: str | None = None,
    stream_sink: str | None = None,
) -> Begun | Skipped:
    """Resolve what earlier jobs left on the table, skip a decided streaming batch, else
    register a new job."""
    journal, target = pre.journal, request.target
    with step("recovery scan"):
        recovered = (
            recover_table(ops, conn, journal, str(target), request.grace, request.options.staged)
            if request.recover_first
            else []
        )
    done = request.sink and decided_already(ops, conn, journal, request.sink)
    if done:
        return Skipped(done, recovered)
    with step("job row"):
        job_id = uuid.uuid4().hex
        apply = apply_plan_for(request.options, target, columns, pre.targets, job_id, journal)
        journal.begin_job(
            conn, job_id, str(target), apply, lease, request.sink, stream_key, stream_sink
        )
    return Begun(job_id, apply, recovered)


def plan_job(
    conn: Any,
    request: JobRequest,
    pre: Preflight,
    begun: Begun,
    schema: StructType,
    task_heartbeat: float = 0.0,
    task_lease: float | None = None,
) -> tuple[WritePlan, list[TableColumn]]:
    """The branches' plan, and the columns they load (the staging table is created here).
    A failure aborts the job: no branch has opened yet."""
    spec, journal = request.spec, pre.journal
    dialect = get_dialect(spec.dialect)
    try:
        with step("plan (stage, bulk check)"):
            load_table, columns = load_target(
                schema,
                conn,
                spec,
                dialect,
                request.target,
                pre.targets,
                request.options,
                begun.apply,
            )
            plan = WritePlan(
                spec.with_defaults(dialect.branch_properties()),
                load_table,
                tuple(c.name for c in columns),
                journal,
                begun.job_id,
                request.batch_size,
                bulk=request.bulk and bulk_available(dialect, conn),
                faults=request.faults,
                column_types=tuple(c.type_name for c in columns),
                apply=begun.apply,
                sink=request.sink,
                task_heartbeat=task_heartbeat,
                task_lease=task_lease,
            )
    except BaseException:
        abort_quietly(journal, conn, begun.job_id, spec)
        raise
    return plan, columns


def decide_all(
    plan: WritePlan,
    ops: BranchOps,
    conn: Any,
    messages: Sequence[Any],
    branches: int,
    planned: bool,
) -> PhaseOne:
    """The partitions' messages, then the decision. Any failure before the decision rolls
    the job back."""
    try:
        phase_one = _winners(plan, messages, branches, planned)
        trigger(plan.faults, "before_decision")
        with step("decision"):
            _decide(plan, conn, phase_one.winners, phase_one.rows_of)
        return phase_one
    except DecisionUnknownError:
        raise
    except BaseException:
        abort(plan, ops, conn)
        raise


def recover_table(
    ops: BranchOps, conn: Any, journal: Journal, table: str, grace: float, staged: bool
) -> list[BranchAction]:
    """Resolve what earlier jobs left on this table. Decided jobs are finished whatever
    their heartbeat, so a staged write never starts while an older decided one is pending:
    it would be applied after this one and overwrite newer data. The full scan runs only
    when a cheap look cannot prove that there is nothing to do."""
    if nothing_in_doubt(conn, journal, table):
        return []
    actions = resolve_in_doubt(ops, conn, journal, table=table, grace=grace).actions
    stuck = {a.job_id for a in actions if a.unresolved and a.action != "left"}
    for action in actions:
        if action.job_id in stuck:
            log.warning("xasink: an earlier job on %s needs attention: %s", table, action.line())
    if staged:
        pending = [
            r
            for r in journal.jobs_in_state(conn, COMMITTING)
            if r.staged and r.table == table and r.job_id in stuck
        ]
        if pending:
            raise PreflightError(
                f"Job {pending[0].job_id} on {table} is decided but cannot be finished, and "
                "staged writes to one table are applied in decision order. Nothing was "
                "written. `xasink jobs` shows what blocks it; if it can never finish, "
                f"`xasink resolve {pending[0].job_id} --abandon` ends it."
            )
    return actions


def nothing_in_doubt(conn: Any, journal: Journal, table: str) -> bool:
    """Proof that recovery scoped to `table` would do nothing: no job on it is running or
    deciding and no finished job's staging table is left, then (read after that) no
    prepared transaction in xasink's XID format at all, whatever its job, tag or table.
    A job in doubt shows at the first read as such a row, or, once its row is final, only
    through a prepared straggler, which the second read lists. Anything unsure (no journal
    tag yet, a dialect that cannot list) means no. It only reads: it never acts."""
    if not journal.tag or not journal.table_settled(conn, table):
        return False
    return journal.dialect.prepared_count(conn, FORMAT_ID) == 0


def abort_quietly(journal: Journal, conn: Any, job_id: str, spec: ConnectionSpec) -> None:
    try:
        journal.abort(conn, job_id)
    except Exception as exc:
        log.warning("xasink job %s: could not mark it aborted (%s)", job_id, spec.redact(exc))


def release_stage(
    journal: Journal, conn: Any, job_id: str, plan: ApplyPlan | None, spec: ConnectionSpec
) -> None:
    """Drop a finished job's staging table; one still in doubt stays for `xasink recover`."""
    if plan is None:
        return
    try:
        if journal.state(conn, job_id) in FINAL_STATES:
            journal.release_stage(conn, job_id, plan)
    except Exception as exc:
        log.warning(
            "xasink job %s: staging table %s left in place (%s); `xasink recover` drops it",
            job_id,
            plan.stage,
            spec.redact(exc),
        )


def bulk_available(dialect: Dialect, conn: Any) -> bool:
    problem = dialect.bulk_problem(conn)
    if problem:
        log.warning("xasink: bulk loading is off (%s); writing with batched INSERTs", problem)
    return problem is None


def phase_one_failed(plan: WritePlan, exc: Exception, on_driver: bool = False) -> WriteError:
    """Spark gave up on a partition (every attempt failed) or on the job, or the driver's
    own write of a small frame failed: say so as xasink's own error, with the first
    failure's own words. The original exception stays as the cause."""
    text = plan.spec.redact(exc)
    ours = [ln.strip() for ln in text.splitlines() if "WriteError:" in ln]
    cause = ours[0].split("WriteError:", 1)[1].strip() if ours else text.strip().split("\n")[0]
    where = "by the driver (a small frame, one branch)" if on_driver else "in Spark"
    return WriteError(
        f"Writing job {plan.job_id} into {plan.table} failed {where} ({type(exc).__name__}: "
        f"{cause[:1500]}). Every branch of the job is rolled back: nothing was written. Fix "
        "the cause and run the write again."
    )


def _winners(plan: WritePlan, messages: Sequence[Any], branches: int, planned: bool) -> PhaseOne:
    """Exactly one message per partition: those attempts are the winners."""
    seen: dict[int, Any] = {}
    for message in messages:
        if message.partition in seen:
            raise CommitError(f"Partition {message.partition} reported twice; refusing to commit.")
        seen[message.partition] = message
    partitions = branches if planned else min(branches, len(seen))
    if sorted(seen) != list(range(partitions)):
        missing = sorted(set(range(partitions)) - set(seen))
        extra = sorted(set(seen) - set(range(partitions)))
        raise CommitError(
            f"Spark returned results for partitions {sorted(seen)[:20]} where {partitions} "
            f"were planned (missing {missing[:20]}, unexpected {extra[:20]}); refusing to "
            "commit. Nothing was written."
        )
    if any(m.problem == JOB_ENDED for m in seen.values()):
        raise _aborted_by_recovery(plan)
    problems = [f"partition {m.partition}: {m.problem}" for m in seen.values() if m.problem]
    if problems:
        raise InputDataError(
            f"The rows cannot be written into {plan.table} ({'; '.join(problems[:5])}). "
            "Nothing was written."
        )
    winners = [
        BranchId(plan.journal.tag, plan.job_id, m.partition, m.attempt)
        for m in seen.values()
        if m.xid
    ]
    rows_of = {m.partition: int(m.rows) for m in seen.values() if m.xid}
    peak = max((m.peak_rss_kb for m in seen.values()), default=0)
    paths = tuple(sorted({m.path for m in seen.values() if m.path}))
    rows = sum(rows_of.values())
    return PhaseOne(winners, rows_of, rows, partitions - len(winners), peak, paths)


def _aborted_by_recovery(plan: WritePlan) -> JobAbortedError:
    return JobAbortedError(
        f"Job {plan.job_id} was aborted by a recovery run before its commit decision: its "
        "heartbeat looked older than that run's grace (e.g. `xasink recover --grace 0` while "
        f"the job was writing). Nothing was committed: {_target_of(plan)} is unchanged. Run "
        "the write again, and let recovery runs keep their default grace."
    )


def _target_of(plan: WritePlan) -> str:
    return str(plan.apply.target) if plan.apply is not None else str(plan.table)


def _decide(plan: WritePlan, conn: Any, winners: list[BranchId], rows_of: dict[int, int]) -> None:
    """Record the commit decision. If that fails ambiguously, settle it with a fence (a
    conditional abort on a fresh connection, which waits for a decision still in flight),
    never with a plain read, which could miss a commit that lands later."""
    keys = [(w.partition, w.attempt, rows_of[w.partition]) for w in winners]
    try:
        outcome = plan.journal.decide_commit(conn, plan.job_id, keys, plan.sink)
    except Exception as exc:
        reason = plan.spec.redact(exc)
        state = _fence(plan)
        if state == COMMITTING:
            log.warning("xasink job %s: the decision held despite: %s", plan.job_id, reason)
            return
        if state == ABORTED:
            raise JobAbortedError(
                f"Recording the commit decision for job {plan.job_id} failed ({reason}); the "
                f"job is aborted and {_target_of(plan)} is unchanged. Run the write again."
            ) from None
        raise DecisionUnknownError(
            f"Recording the commit decision for job {plan.job_id} failed and its outcome is "
            f"unknown ({reason}). Do not run the write again yet: run `xasink recover`, which "
            "commits the prepared branches if the decision was recorded and rolls them back "
            "otherwise; `xasink jobs` then shows the job's outcome."
        ) from None
    if outcome == BATCH_TAKEN:
        assert plan.sink is not None
        raise conflict_at_decision(plan.journal, conn, plan.sink, plan.job_id)
    if outcome != DECIDED:
        raise _aborted_by_recovery(plan)


def _fence(plan: WritePlan) -> str | None:
    """The job's state once no decision can land any more (None: cannot tell)."""
    try:
        session, _ = open_journal(plan.spec, plan.journal.schema, plan.journal.lock_wait)
        with session:
            return plan.journal.fence_decision(session.connection, plan.job_id)
    except Exception as exc:
        log.error(
            "xasink job %s: settling the decision failed: %s", plan.job_id, plan.spec.redact(exc)
        )
        return None


def abort(plan: WritePlan, ops: BranchOps, conn: Any) -> None:
    """Presumed abort, made explicit: mark the job aborted, then roll back its branches.

    Branches are rolled back only once the journal says `aborted`; if that cannot be
    established, they stay prepared for `xasink recover`, which decides from the journal.
    """
    try:
        try:
            plan.journal.abort(conn, plan.job_id)
            state = plan.journal.state(conn, plan.job_id)
        except Exception:  # the journal connection broke: the fence uses a fresh one
            state = _fence(plan)
        if state != ABORTED:
            log.error(
                "xasink job %s is %s, not aborted: leaving its branches to `xasink recover`",
                plan.job_id,
                state or "in an unknown state",
            )
            return
        _roll_back_others(plan, ops, keep=set())
    except Exception as exc:
        log.error(
            "xasink job %s is aborted, but rolling back its branches is incomplete (%s); "
            "`xasink recover` rolls back the rest",
            plan.job_id,
            plan.spec.redact(exc),
        )


def commit_all(
    plan: WritePlan, ops: BranchOps, conn: Any, phase_one: PhaseOne, parallelism: int
) -> int:
    """Phase 2: commit the winners, then roll back every other attempt of this job."""
    trigger(plan.faults, "after_decision")
    last_report = time.monotonic()
    winners = phase_one.winners

    def progress(done: int, total: int) -> None:
        nonlocal last_report
        if time.monotonic() - last_report > 5:
            log.info("xasink job %s: committed %d/%d branches", plan.job_id, done, total)
            last_report = time.monotonic()

    with step("phase 2 (commit)"):
        group = commit_group(
            winners,
            ops=ops,
            parallelism=parallelism,
            after_first=lambda: trigger(plan.faults, "after_first_commit"),
            progress=progress,
        )
    if group.errors:
        failed = "; ".join(f"{b.name}: {e}" for b, e in list(group.errors.items())[:5])
        raise CommitError(
            f"Committing {len(group.errors)} branch(es) of job {plan.job_id} failed ({failed}). "
            "The commit decision is recorded, so run `xasink recover` to finish the commit. "
            "Do not run the write again."
        )
    winner_keys = {(w.partition, w.attempt) for w in winners}
    with step("sweep"):
        losers = _roll_back_others(plan, ops, keep=winner_keys)
    if group.lost:
        _raise_lost(plan, conn, group.lost, phase_one.rows_of)
    trigger(plan.faults, "before_finish")
    with step("finish"):
        _finish(plan, ops, conn, winner_keys)
    return losers


def _on_live_connection(plan: WritePlan, conn: Any, call: Callable[[Any], T]) -> T:
    """`call(conn)`; if that fails because `conn` died (e.g. the server restarted during
    phase 2), once more on a fresh journal connection."""
    try:
        return call(conn)
    except Exception:
        try:
            alive = bool(conn.isValid(2))
        except Exception:
            alive = False
        if alive:
            raise
    session, _ = open_journal(plan.spec, plan.journal.schema, plan.journal.lock_wait)
    with session:
        return call(session.connection)


#: How often a staged job helps older decided jobs on its table finish before its own apply.
_HELP_ROUNDS = 3


def _finish_in_order(
    plan: WritePlan, ops: BranchOps, conn: Any, winners: set[tuple[int, int]]
) -> tuple[bool, Exception | None]:
    """`finish_or_refuse`; while an older decided staged job on the table is unfinished,
    finish that one first (as recovery would: it is decided), then try again."""
    for attempt in range(_HELP_ROUNDS + 1):
        try:
            return plan.journal.finish_or_refuse(conn, plan.job_id, winners)
        except JobOrderError as exc:
            if attempt == _HELP_ROUNDS:
                raise
            log.info("xasink job %s: finishing older job %s first", plan.job_id, exc.blocker)
            resolve_in_doubt(ops, conn, plan.journal, job=exc.blocker, grace=DEFAULT_GRACE)
    raise AssertionError("unreachable")


def _raise_lost(plan: WritePlan, conn: Any, lost: list[BranchId], rows_of: dict[int, int]) -> None:
    names = [b.name for b in lost]
    partitions = ", ".join(f"{b.partition} ({rows_of.get(b.partition, 0)} rows)" for b in lost)
    if plan.apply is not None and plan.journal.abandon(conn, plan.job_id):
        raise LostBranchError(
            f"{len(names)} winning branch(es) of job {plan.job_id} were rolled back before "
            f"commit (partitions {partitions[:300]}), so the staged rows are incomplete. "
            f"Nothing was applied: {plan.apply.target} is unchanged and the job is aborted. "
            "Something outside xasink rolled them back (an administrator, or a server "
            "without durable XA). Run the write again.",
            names,
        )
    raise LostBranchError(
        f"{len(names)} winning branch(es) of job {plan.job_id} were rolled back before "
        f"commit: the rows of partition(s) {partitions[:300]} are NOT in {plan.table}; the "
        "other partitions' rows ARE, so do not run the whole write again (it would duplicate "
        "them). Something outside xasink rolled them back (an administrator, or a server "
        "without durable XA). Write the missing rows again, then close the job with "
        f"`xasink resolve {plan.job_id} --abandon`.",
        names,
    )


def _finish(plan: WritePlan, ops: BranchOps, conn: Any, winners: set[tuple[int, int]]) -> None:
    """Mark the job committed (and, for a staged mode, apply it in the same transaction).

    A staged apply the target refuses (constraint, value) ends the job aborted with the
    target unchanged; any other failure leaves the decision for `xasink recover`. Success
    is reported only for a job that is `committed`, by this call or by another process."""
    journal = plan.journal
    try:
        finished, refusal = _on_live_connection(
            plan, conn, lambda c: _finish_in_order(plan, ops, c, winners)
        )
    except JobOrderError as exc:
        raise CommitError(
            f"Job {plan.job_id} is committed in its branches, but not applied yet: {exc}, and "
            f"it could not be finished now. Run `xasink recover` to finish both; `xasink "
            f"jobs` shows what blocks job {exc.blocker}."
        ) from None
    except Exception as exc:
        reason = plan.spec.redact(exc)
        if journal.dialect.is_lock_timeout(exc):
            reason = blocked_detail(ops, conn, journal, plan.job_id, reason)
        raise CommitError(
            f"Job {plan.job_id} is committed in its branches, but finishing it failed "
            f"({reason}). Run `xasink recover` to finish it; do not run the write again."
        ) from None
    if refusal is not None and plan.apply is not None:
        raise refused(plan.apply, plan.job_id, plan.spec.redact(refusal))
    if finished:
        return
    state = _on_live_connection(plan, conn, lambda c: journal.state(c, plan.job_id))
    if state == COMMITTED:
        log.info("xasink job %s: another process (a recovery run) finished it", plan.job_id)
        return
    raise CommitError(
        f"Job {plan.job_id} was ended by another process after its commit decision (state "
        f"{state}): nothing was applied and {_target_of(plan)} is unchanged. `xasink jobs` "
        "shows who resolved it; run the write again if it was aborted."
    )


def _roll_back_others(plan: WritePlan, ops: BranchOps, keep: set[tuple[int, int]]) -> int:
    """Roll back this job's prepared branches other than `keep`; returns how many.

    One branch that cannot be rolled back now (e.g. a zombie attempt still attached to its
    session) is logged and left to recovery: it must not hide the job's real outcome.
    """
    done = 0
    for branch, _ in ops.prepared():
        if branch.job_id != plan.job_id or (branch.partition, branch.attempt) in keep:
            continue
        try:
            ops.rollback(branch)
            done += 1
        except Exception as exc:
            log.warning(
                "xasink job %s: could not roll back %s yet (%s); `xasink recover` will",
                plan.job_id,
                branch.name,
                plan.spec.redact(exc),
            )
    return done
