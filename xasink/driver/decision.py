"""The decision: which attempt of each partition wins, and the journal's record of it.

Exactly one message per partition names its winning attempt. The decision is written in one
local transaction; if that fails ambiguously, a fence (a conditional abort on a fresh
connection) settles it, never a plain read, which could miss a commit that lands later."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from ..errors import (
    CommitError,
    DecisionUnknownError,
    InputDataError,
    JobAbortedError,
    WriteError,
)
from ..executor.contract import JOB_ENDED, WritePlan
from ..protocol.connecting import journal_connection
from ..protocol.deciding import decide_commit
from ..protocol.journal import Journal
from ..protocol.states import Decision, JobState
from ..runtime.jdbc import JdbcConnection
from ..spec import ConnectionSpec
from ..xid import BranchId
from .request import PhaseOne
from .sinks import conflict_at_decision

log = logging.getLogger("xasink")


def phase_one_failed(plan: WritePlan, exc: Exception, on_driver: bool = False) -> WriteError:
    """Spark gave up on a partition (every attempt failed) or on the job, or the driver's
    own write of a small frame failed: say so as xasink's own error, with the first
    failure's own words (a worker's own exception line, and what to do when the workers
    cannot import a module). The original exception stays as the cause."""
    text = plan.spec.redact(exc)
    ours = [ln.strip() for ln in text.splitlines() if "WriteError:" in ln]
    cause = ours[0].split("WriteError:", 1)[1].strip() if ours else _worker_line(text)
    where = "by the driver (a small frame, one branch)" if on_driver else "in Spark"
    missing = _MISSING_MODULE.match(cause)
    remedy = (
        f"Spark's Python workers cannot import {missing[1]}: the interpreter they run lacks "
        "it. Run them with one that has xasink: set PYSPARK_PYTHON to it before Spark starts "
        "(spark-submit: --conf spark.pyspark.python=...), or activate its virtual "
        "environment, whose python3 they then run; on a cluster, install xasink on every "
        "node. Then run the write again."
        if missing
        else "Fix the cause and run the write again."
    )
    return WriteError(
        f"Writing job {plan.job_id} into {plan.target} failed {where} ({type(exc).__name__}: "
        f"{cause[:1500]}). Every branch of the job is rolled back: nothing was written. "
        f"{remedy}"
    )


_TRACEBACK = "Traceback (most recent call last):"
_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _worker_line(text: str) -> str:
    """The exception line of the last Python traceback in `text` (a PythonException's
    first line only says that a worker raised), else `text`'s first line."""
    _, header, after = text.strip().rpartition(_TRACEBACK)
    lines = [ln for ln in after.splitlines() if ln.strip() and not ln[0].isspace()]
    return lines[0].strip() if header and lines else text.strip().split("\n")[0]


def select_winners(
    plan: WritePlan, messages: Sequence[Any], branches: int, planned: bool
) -> PhaseOne:
    """Exactly one message per partition: those attempts are the winners."""
    seen: dict[int, Any] = {}
    for message in messages:
        if message.partition in seen:
            raise CommitError(f"Partition {message.partition} reported twice; refusing to commit.")
        seen[message.partition] = message
    partitions = branches if planned else min(branches, len(seen))
    expected = range(plan.partition_base, plan.partition_base + partitions)
    if sorted(seen) != list(expected):
        missing = sorted(set(expected) - set(seen))
        extra = sorted(set(seen) - set(expected))
        raise CommitError(
            f"Spark returned results for partitions {sorted(seen)[:20]} where {partitions} "
            f"were planned (missing {missing[:20]}, unexpected {extra[:20]}); refusing to "
            "commit. Nothing was written."
        )
    if any(m.problem == JOB_ENDED for m in seen.values()):
        raise aborted_by_recovery(plan)
    problems = [f"partition {m.partition}: {m.problem}" for m in seen.values() if m.problem]
    if problems:
        raise InputDataError(
            f"The rows cannot be written into {plan.target} ({'; '.join(problems[:5])}). "
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


def aborted_by_recovery(plan: WritePlan) -> JobAbortedError:
    return JobAbortedError(
        f"Job {plan.job_id} was aborted by a recovery run before its commit decision: its "
        "heartbeat looked older than that run's grace (e.g. `xasink recover --grace 0` while "
        f"the job was writing). Nothing was committed: {plan.target} is unchanged. Run "
        "the write again, and let recovery runs keep their default grace."
    )


def decide(
    plan: WritePlan,
    conn: JdbcConnection,
    winners: list[BranchId],
    rows_of: dict[int, int],
    participants: dict[str, list[tuple[int, int, int]]] | None = None,
) -> None:
    """Record the commit decision. If that fails ambiguously, settle it with a fence (a
    conditional abort on a fresh connection, which waits for a decision still in flight),
    never with a plain read, which could miss a commit that lands later."""
    keys = [(w.partition, w.attempt, rows_of[w.partition]) for w in winners]
    try:
        outcome = decide_commit(
            plan.journal, conn, plan.job_id, keys, plan.sink, participants or {}, plan.faults
        )
    except Exception as exc:
        reason = plan.spec.redact(exc)
        state = fence(plan.spec, plan.journal, plan.job_id)
        if state == JobState.COMMITTING:
            log.warning("xasink job %s: the decision held despite: %s", plan.job_id, reason)
            return
        if state == JobState.ABORTED:
            raise JobAbortedError(
                f"Recording the commit decision for job {plan.job_id} failed ({reason}); the "
                f"job is aborted and {plan.target} is unchanged. Run the write again."
            ) from None
        raise DecisionUnknownError(
            f"Recording the commit decision for job {plan.job_id} failed and its outcome is "
            f"unknown ({reason}). Do not run the write again yet: run `xasink recover`, which "
            "commits the prepared branches if the decision was recorded and rolls them back "
            "otherwise; `xasink jobs` then shows the job's outcome."
        ) from None
    if outcome == Decision.BATCH_TAKEN:
        assert plan.sink is not None
        raise conflict_at_decision(plan.journal, conn, plan.sink, plan.job_id)
    if outcome != Decision.DECIDED:
        raise aborted_by_recovery(plan)


def fence(spec: ConnectionSpec, journal: Journal, job_id: str) -> str | None:
    """The job's state once no decision can land any more (None: cannot tell)."""
    try:
        session = journal_connection(spec, journal.lock_wait)
        with session:
            return journal.fence_decision(session.connection, job_id)
    except Exception as exc:
        log.error("xasink job %s: settling the decision failed: %s", job_id, spec.redact(exc))
        return None
