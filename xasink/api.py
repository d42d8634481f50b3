"""`write_xa` and `recover`: the orchestration, kept apart from XA, journal and writers."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from .commit import BranchOps, commit_group
from .connect import check_reachable, classpath_for, open_session
from .dialects import Dialect, dialect_name_for, get_dialect
from .errors import (
    CommitError,
    ConfigurationError,
    DecisionUnknownError,
    InputDataError,
    JobAbortedError,
    JournalError,
    LostBranchError,
    PreflightError,
    WriteError,
    XasinkError,
)
from .faults import Fault, trigger
from .heartbeat import Heartbeat
from .jdbc import redacting_java_errors
from .journal import (
    ABORTED,
    COMMITTED,
    COMMITTING,
    DEFAULT_LOCK_WAIT,
    FINAL_STATES,
    JobOrderError,
    Journal,
)
from .planning import apply_plan_for, branch_count, load_target, shape_frame
from .preflight import check_spark_conf
from .recovery import (
    DEFAULT_GRACE,
    BranchAction,
    RecoveryReport,
    blocked_detail,
    describe,
    no_journal,
    presume_abort,
    resolve_in_doubt,
)
from .staging import APPEND, ApplyPlan, ModeOptions, refused
from .tables import check_create, check_fit, ensure_table
from .target import ConnectionSpec, TableRef, properties_tuple
from .writer import JOB_ENDED, MESSAGE_DDL, WritePlan, write_partition
from .xa import XaSession
from .xid import BranchId

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger("xasink")
T = TypeVar("T")


@dataclass(frozen=True)
class WriteResult:
    """What a write_xa call did."""

    job_id: str
    table: str
    rows: int
    partitions: int
    empty_partitions: int
    prepare_seconds: float
    commit_seconds: float
    total_seconds: float
    rolled_back_attempts: int = 0
    recovered: list[BranchAction] = field(default_factory=list)
    #: Highest peak RSS reported by a partition writer's Python worker, in KiB.
    worker_peak_rss_kb: int = 0
    #: How rows were loaded: "copy-binary", "copy-csv", "load-data" and/or "batched".
    load_paths: tuple[str, ...] = ()
    mode: str = APPEND
    #: Whether write_xa created the table (create="if_missing").
    created: bool = False


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
) -> ConnectionSpec:
    """Validate the connection arguments and resolve the driver jars up front."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError("url must be a JDBC URL string, e.g. jdbc:postgresql://host/db")
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
    )
    return ConnectionSpec(**{**spec.__dict__, "jars": tuple(classpath_for(spec))})


def _open_journal(
    spec: ConnectionSpec, schema: str | None, lock_wait: float = DEFAULT_LOCK_WAIT
) -> tuple[XaSession, Journal]:
    check_reachable(spec)
    session = open_session(spec)
    try:
        return session, Journal.locate(session.connection, spec, schema, lock_wait)
    except BaseException:
        session.close()
        raise


@redacting_java_errors
def write_xa(
    df: DataFrame,
    url: str,
    table: str | Sequence[str],
    *,
    mode: str = APPEND,
    key: str | Sequence[str] | None = None,
    op: str | None = None,
    order: str | None = None,
    op_values: Mapping[str, str | Sequence[str]] | None = None,
    create: str = "if_missing",
    user: str | None = None,
    password: str | None = None,
    properties: Mapping[str, object] | None = None,
    batch_size: int = 10_000,
    bulk: bool = True,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = 10,
    commit_retries: int = 5,
    commit_parallelism: int = 4,
    max_branches: int | Literal["auto"] | None = "auto",
    recover_first: bool = True,
    grace: float = DEFAULT_GRACE,
    heartbeat_interval: float = 10.0,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    _faults: Sequence[Fault] = (),
) -> WriteResult:
    """Write every row of `df` into `table` exactly once, or none of them.

    Each partition writes into its own XA branch and PREPAREs it; the driver records the
    commit decision in the target database, then commits the winning branches. A failure
    before the decision rolls everything back and re-raises; a crash after it is finished
    by `xasink recover` (or by the next write_xa on this table).

    `mode`: "append" (default) inserts the rows. "overwrite" replaces the table's contents,
    "upsert" inserts or updates by `key`, and "merge" applies change rows: `op` names the
    column saying insert/update/delete (values per `op_values`), and `order` the column whose
    highest value per key wins (for upsert too). These three load a staging table in the
    branches and change the table in one transaction after phase 2, so readers see the old
    contents or the new, never a mix. `create="if_missing"` creates the table from the
    DataFrame's schema (`key` becomes its primary key); "never" refuses.

    Rows go through the dialect's bulk loader (PostgreSQL COPY, MySQL/MariaDB LOAD DATA
    LOCAL) unless `bulk=False`, the server refuses it, or a column type has no bulk encoding;
    then through JDBC batches of `batch_size` rows.

    No bookkeeping or apply statement waits longer than `lock_wait_timeout` seconds for a
    lock. Every XasinkError raised once the job exists carries its id as `job_id`.
    """
    started = time.monotonic()
    if batch_size < 1:
        raise ConfigurationError("batch_size must be at least 1.")
    options = ModeOptions.build(mode, key, op, order, op_values, df.columns)
    check_create(create)
    spec = make_spec(
        url,
        user=user,
        password=password,
        properties=properties,
        dialect=dialect,
        xa_datasource=xa_datasource,
        jars=jars,
        connect_timeout=connect_timeout,
    )
    target = TableRef.parse(table)
    check_spark_conf(dict(df.sparkSession.sparkContext.getConf().getAll()))
    branches = branch_count(df, max_branches, options)
    session, journal = _open_journal(spec, journal_schema, lock_wait_timeout)
    with session:
        conn = session.connection
        the_dialect = get_dialect(spec.dialect)
        the_dialect.check_server(conn, branches, user)
        existing, created = ensure_table(
            conn, the_dialect, target, df.schema, options, create, spec.redact
        )
        targets = check_fit(conn, the_dialect, target, df.schema, options, existing)
        journal = journal.ensure(conn, spec)
        with BranchOps(spec, journal, retries=commit_retries) as ops:
            recovered = (
                _recover_table(ops, conn, journal, str(target), grace, options.staged)
                if recover_first
                else []
            )
            job_id = uuid.uuid4().hex
            heartbeat = Heartbeat(journal, spec, job_id, heartbeat_interval)
            apply_plan = apply_plan_for(options, target, df.columns, targets, job_id, journal)
            journal.begin_job(conn, job_id, str(target), apply_plan, heartbeat.lease)
            heartbeat.start()  # from the first moment the job can be seen
            try:
                try:
                    load_table, columns = load_target(
                        df, conn, spec, the_dialect, target, targets, options, apply_plan
                    )
                    plan = WritePlan(
                        spec.with_defaults(the_dialect.branch_properties()),
                        load_table,
                        tuple(c.name for c in columns),
                        journal,
                        job_id,
                        batch_size,
                        bulk=bulk and _bulk_available(the_dialect, conn),
                        faults=tuple(_faults),
                        column_types=tuple(c.type_name for c in columns),
                        apply=apply_plan,
                    )
                    shaped = shape_frame(df, plan, options, the_dialect, columns, branches)
                except BaseException:
                    _abort_quietly(journal, conn, job_id, spec)  # no branch has opened yet
                    raise
                log.info(
                    "xasink job %s: writing %d branches into %s (mode %s)",
                    job_id,
                    branches,
                    target,
                    options.mode,
                )
                phase_one = _prepare_all(shaped, plan, branches, ops, conn)
                winners, rows = phase_one.winners, phase_one.rows
                prepare_seconds = time.monotonic() - started
                log.info(
                    "xasink job %s: %d branches prepared (%d rows) and commit decided in %.1fs",
                    job_id,
                    len(winners),
                    rows,
                    prepare_seconds,
                )
                commit_started = time.monotonic()
                losers = _commit_all(plan, ops, conn, phase_one, commit_parallelism)
                commit_seconds = time.monotonic() - commit_started
            except XasinkError as exc:
                exc.job_id = job_id  # type: ignore[attr-defined]
                raise
            finally:
                heartbeat.stop()
                _release_stage(journal, conn, job_id, apply_plan, spec)
    total = time.monotonic() - started
    log.info("xasink job %s: committed %d rows in %.1fs", job_id, rows, total)
    return WriteResult(
        job_id=job_id,
        table=str(target),
        rows=rows,
        partitions=len(winners),
        empty_partitions=phase_one.empty_partitions,
        prepare_seconds=prepare_seconds,
        commit_seconds=commit_seconds,
        total_seconds=total,
        rolled_back_attempts=losers,
        recovered=recovered,
        worker_peak_rss_kb=phase_one.worker_peak_rss_kb,
        load_paths=phase_one.load_paths,
        mode=options.mode,
        created=created,
    )


def _recover_table(
    ops: BranchOps, conn: Any, journal: Journal, table: str, grace: float, staged: bool
) -> list[BranchAction]:
    """Resolve what earlier jobs left on this table. Decided jobs are finished whatever
    their heartbeat, so a staged write never starts while an older decided one is pending:
    it would be applied after this one and overwrite newer data."""
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


def _abort_quietly(journal: Journal, conn: Any, job_id: str, spec: ConnectionSpec) -> None:
    try:
        journal.abort(conn, job_id)
    except Exception as exc:
        log.warning("xasink job %s: could not mark it aborted (%s)", job_id, spec.redact(exc))


def _release_stage(
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


def _bulk_available(dialect: Dialect, conn: Any) -> bool:
    problem = dialect.bulk_problem(conn)
    if problem:
        log.warning("xasink: bulk loading is off (%s); writing with batched INSERTs", problem)
    return problem is None


def _prepare_all(
    df: DataFrame, plan: WritePlan, partitions: int, ops: BranchOps, conn: Any
) -> PhaseOne:
    """Phase 1 and the decision. Any failure before the decision rolls the job back."""
    try:
        with _job_description(df, f"xasink write_xa into {plan.table} (job {plan.job_id})"):
            writer = functools.partial(write_partition, plan)
            try:
                messages = df.mapInArrow(writer, MESSAGE_DDL).collect()
            except Exception as exc:
                raise _phase_one_failed(plan, exc) from exc
        phase_one = _winners(plan, messages, partitions)
        trigger(plan.faults, "before_decision")
        _decide(plan, conn, phase_one.winners, phase_one.rows_of)
        return phase_one
    except DecisionUnknownError:
        raise
    except BaseException:
        _abort(plan, ops, conn)
        raise


def _phase_one_failed(plan: WritePlan, exc: Exception) -> WriteError:
    """Spark gave up on a partition (every attempt failed) or on the job: say so as xasink's
    own error, with the first failure's own words. Spark's exception stays as the cause."""
    text = plan.spec.redact(exc)
    ours = [ln.strip() for ln in text.splitlines() if "WriteError:" in ln]
    cause = ours[0].split("WriteError:", 1)[1].strip() if ours else text.strip().split("\n")[0]
    return WriteError(
        f"Writing job {plan.job_id} into {plan.table} failed in Spark ({type(exc).__name__}: "
        f"{cause[:1500]}). Every branch of the job is rolled back: nothing was written. Fix "
        "the cause and run the write again."
    )


@contextlib.contextmanager
def _job_description(df: DataFrame, text: str) -> Iterator[None]:
    """Name the Spark job in the UI, then restore the caller's description."""
    try:
        context = df.sparkSession.sparkContext
        previous = context.getLocalProperty("spark.job.description")
        context.setJobDescription(text)
    except Exception:  # Spark Connect has no SparkContext; the description is cosmetic
        yield
        return
    try:
        yield
    finally:
        context.setJobDescription(previous)


def _winners(plan: WritePlan, messages: list[Any], partitions: int) -> PhaseOne:
    """Exactly one message per partition: those attempts are the winners."""
    seen: dict[int, Any] = {}
    for message in messages:
        if message.partition in seen:
            raise CommitError(f"Partition {message.partition} reported twice; refusing to commit.")
        seen[message.partition] = message
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
        decided = plan.journal.decide_commit(conn, plan.job_id, keys)
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
    if not decided:
        raise _aborted_by_recovery(plan)


def _fence(plan: WritePlan) -> str | None:
    """The job's state once no decision can land any more (None: cannot tell)."""
    try:
        session, _ = _open_journal(plan.spec, plan.journal.schema, plan.journal.lock_wait)
        with session:
            return plan.journal.fence_decision(session.connection, plan.job_id)
    except Exception as exc:
        log.error(
            "xasink job %s: settling the decision failed: %s", plan.job_id, plan.spec.redact(exc)
        )
        return None


def _abort(plan: WritePlan, ops: BranchOps, conn: Any) -> None:
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


def _commit_all(
    plan: WritePlan, ops: BranchOps, conn: Any, phase_one: PhaseOne, parallelism: int
) -> int:
    """Phase 2: commit the winners, then roll back every other attempt of this job."""
    last_report = time.monotonic()
    winners = phase_one.winners

    def progress(done: int, total: int) -> None:
        nonlocal last_report
        if time.monotonic() - last_report > 5:
            log.info("xasink job %s: committed %d/%d branches", plan.job_id, done, total)
            last_report = time.monotonic()

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
    losers = _roll_back_others(plan, ops, keep=winner_keys)
    if group.lost:
        _raise_lost(plan, conn, group.lost, phase_one.rows_of)
    trigger(plan.faults, "before_finish")
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
    session, _ = _open_journal(plan.spec, plan.journal.schema, plan.journal.lock_wait)
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


@contextlib.contextmanager
def _journal_session(
    url: str, journal_schema: str | None, lock_wait_timeout: float, **connection: Any
) -> Iterator[tuple[ConnectionSpec, Any, Journal]]:
    """(spec, journal connection, journal as found) for the journal at `url`."""
    spec = make_spec(url, **connection)
    session, journal = _open_journal(spec, journal_schema, lock_wait_timeout)
    with session:
        yield spec, session.connection, journal


@contextlib.contextmanager
def operate(
    url: str,
    *,
    journal_schema: str | None = None,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    **connection: Any,
) -> Iterator[tuple[Any, Journal, BranchOps]]:
    """(connection, journal, branch ops) for operating an existing journal; `connection`
    takes make_spec's keyword arguments."""
    connection = {"connect_timeout": 10, "properties": None, **connection}
    with _journal_session(url, journal_schema, lock_wait_timeout, **connection) as (
        spec,
        conn,
        journal,
    ):
        if not journal.exists(conn):
            raise JournalError(
                f"No xasink journal in {describe(journal)} at {spec.masked_url}: check --url "
                "and --journal-schema."
            )
        journal = journal.ensure(conn, spec)
        with BranchOps(spec, journal) as ops:
            yield conn, journal, ops


@redacting_java_errors
def recover(
    url: str,
    *,
    user: str | None = None,
    password: str | None = None,
    table: str | Sequence[str] | None = None,
    job: str | None = None,
    grace: float = DEFAULT_GRACE,
    dry_run: bool = False,
    properties: Mapping[str, object] | None = None,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = 10,
    lock_wait_timeout: float = DEFAULT_LOCK_WAIT,
    presume_abort_tag: str | None = None,
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in this database; see :mod:`xasink.recovery`.

    Without a journal nothing is touched, unless `presume_abort_tag` names the tag whose
    prepared branches are to be rolled back (once older than `grace`, where the server
    tells a branch's age)."""
    with _journal_session(
        url,
        journal_schema,
        lock_wait_timeout,
        user=user,
        password=password,
        properties=properties,
        dialect=dialect,
        xa_datasource=xa_datasource,
        jars=jars,
        connect_timeout=connect_timeout,
    ) as (spec, conn, journal):
        exists = journal.exists(conn)  # raises unless the journal is truly missing
        if presume_abort_tag is not None:
            if exists:
                raise ConfigurationError(
                    "The journal exists, so recovery decides from it: drop --presume-abort."
                )
            orphan = replace(journal, tag=presume_abort_tag)
            with BranchOps(spec, orphan) as ops:
                return presume_abort(
                    ops, presume_abort_tag, grace=grace, dry_run=dry_run, conn=conn, journal=orphan
                )
        if not exists:
            with BranchOps(spec, journal) as ops:
                return no_journal(ops, journal, dry_run)
        if dry_run:
            journal.check_complete(conn)
        else:
            journal = journal.ensure(conn, spec)  # upgrades an older journal's tables
        with BranchOps(spec, journal) as ops:
            return resolve_in_doubt(
                ops,
                conn,
                journal,
                table=str(TableRef.parse(table)) if table is not None else None,
                job=job,
                grace=grace,
                dry_run=dry_run,
            )


__all__ = ["WriteResult", "recover", "write_xa"]
