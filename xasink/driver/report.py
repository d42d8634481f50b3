"""The job-end record: one line on the `xasink.jobs` logger when a job ends, whatever its
outcome, and the figures WriteResult carries, both from one `JobEnd`.

A job's steps fill in its `JobTrace` as they run (`Job` does); whoever ends the job calls
`JobTrace.end` once, and `JobTrace.ending` turns any exception into the failure's line.
Operators read the line (logfmt after a fixed prefix) or, in a JSON handler, the same
fields as the record's `xasink` attribute, without parsing.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from .. import defaults
from ..masking import Redactor
from ..protocol.sinkmarks import SinkBatch
from ..protocol.states import JobState, TextEnum
from ..runtime.timing import Stopwatch
from .request import JobRequest

JOBS = logging.getLogger("xasink.jobs")
#: What every job-end line starts with, before its key=value pairs.
PREFIX = "job end"


class JobOutcome(TextEnum):
    """How a job ended, as the process that ended it saw it."""

    #: Every row is in the table.
    COMMITTED = "committed"
    #: A streaming batch decided before (a replay): nothing written, its rows are in.
    SKIPPED = "skipped"
    #: Refused before a job was registered (arguments, server, table): nothing written.
    FAILED = "failed"
    #: Ended before its commit decision, and rolled back: nothing written.
    ABORTED = "aborted"
    #: Spark gave up on a format("xasink") job (failed tasks): rolled back, nothing written.
    CANCELLED = "cancelled"
    #: Decided but unfinished, or its decision unknown: `xasink recover` finishes it.
    IN_DOUBT = "in-doubt"


_LEVELS = {
    JobOutcome.COMMITTED: logging.INFO,
    JobOutcome.SKIPPED: logging.INFO,
    JobOutcome.IN_DOUBT: logging.ERROR,  # someone has to act
}
#: The phases of a job, in order; a failure ends the one running.
PHASES = ("preflight", "write", "decide", "commit")


@dataclass(frozen=True)
class PhaseSeconds:
    """Seconds a job spent in each phase: `preflight` (Spark and server checks, recovery of
    what earlier jobs left, the job's row), `write` (plan and staging table, then the
    branches loading and preparing), `decide` (winners and the recorded decision), `commit`
    (phase 2, finish, a staged apply), and `total`, from the call to the end."""

    preflight: float = 0.0
    write: float = 0.0
    decide: float = 0.0
    commit: float = 0.0
    total: float = 0.0


@dataclass(frozen=True)
class JobEnd:
    """One job's end: what its line says and what WriteResult carries."""

    outcome: JobOutcome
    job_id: str
    table: str
    mode: defaults.Mode
    rows: int
    branches: int
    load_paths: tuple[str, ...]
    #: Who wrote the branches: Spark "tasks", or the "driver" itself (a small frame).
    writer: str
    seconds: PhaseSeconds
    sink_id: str | None = None
    batch_id: int | None = None
    #: A streaming batch: seconds from Spark handing it to xasink to the end of its commit.
    lag_seconds: float | None = None
    decided_by: str | None = None
    #: The class name of the failure that ended the job (never its message).
    error: str | None = None
    redact: Redactor = field(default_factory=Redactor, repr=False, compare=False)
    #: Staged changes skipped as no newer than their stored rows (upsert, merge with an
    #: `order` column the table stores): a late change, or a replay of one.
    stale: int = 0

    @property
    def level(self) -> int:
        return _LEVELS.get(self.outcome, logging.WARNING)

    def fields(self) -> dict[str, object]:
        """The line's fields, in its order, with secrets masked (the `extra` dict too)."""
        seconds = self.seconds
        found: dict[str, object] = {
            "job": self.job_id or None,
            "table": self.redact(self.table),
            "mode": self.mode,
            "outcome": str(self.outcome),
            "rows": self.rows,
            **({"stale": self.stale} if self.stale else {}),
            "branches": self.branches,
            "load": list(self.load_paths),
            "writer": self.writer,
            **{f"{p}_s": round(getattr(seconds, p), 3) for p in (*PHASES, "total")},
        }
        if self.sink_id is not None:
            found["sink"] = self.redact(self.sink_id)
            found["batch"] = self.batch_id
            found["lag_s"] = None if self.lag_seconds is None else round(self.lag_seconds, 3)
        if self.decided_by:
            found["decided_by"] = self.decided_by
        if self.error:
            found["error"] = self.error
        return found

    def line(self) -> str:
        return f"{PREFIX} {logfmt(self.fields())}"


def logfmt(fields: Mapping[str, object]) -> str:
    """`key=value` pairs on one line: a value with a space, `=`, a quote, a backslash or
    nothing in it is quoted, and anything unprintable escaped, so a line is always one."""
    return " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _value(value: object) -> str:
    if value is None or value == []:
        return "-"
    if isinstance(value, float):
        text = f"{value:.3f}"
    elif isinstance(value, (list, tuple)):
        text = ",".join(str(v) for v in value)
    else:
        text = str(value)
    if text and text.isprintable() and not any(c in text for c in ' ="\\'):
        return text
    return '"' + "".join(map(_escaped, text)) + '"'


def _escaped(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if char.isprintable():
        return char
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(char)
    return named or char.encode("unicode_escape").decode("ascii")


def log_job_end(end: JobEnd, spark_worker: bool = False) -> None:
    """Log `end` on `xasink.jobs`. In a Python worker Spark started (format("xasink")'s
    writer, commit and abort run there), nobody configures logging: the line is logged
    whatever the levels say, to stderr when no handler would take it, which Spark copies
    into the driver's output (and with `spark.sql.pyspark.worker.logging.enabled`, into its
    `python_worker_logs`)."""
    if not (spark_worker or JOBS.isEnabledFor(end.level)):
        return
    fields = end.fields()
    line = f"{PREFIX} {logfmt(fields)}"
    where, number, function = _ender()
    record = JOBS.makeRecord(
        JOBS.name, end.level, where, number, "%s", (line,), None, function, {"xasink": fields}
    )
    if spark_worker and not JOBS.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.handle(record)
    else:
        JOBS.handle(record)


def _ender() -> tuple[str, int, str]:
    """Where the job was ended (the first frame outside this module and contextlib), for
    handlers that show a record's file and line."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename in (__file__, contextlib.__file__):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name


@dataclass
class JobTrace:
    """What a job did so far, filled in by its steps: the one source of its `JobEnd`.
    Pickled with a format("xasink") job from the process that registers it to the one that
    commits or aborts it."""

    table: str
    mode: defaults.Mode
    redact: Redactor = field(default_factory=Redactor, repr=False)
    clock: Stopwatch = field(default_factory=Stopwatch)
    #: Ends in a Python worker Spark started (see `log_job_end`).
    spark_worker: bool = False
    job_id: str = ""
    #: The job's state as this process left it (None: unknown).
    state: str | None = None
    rows: int = 0
    branches: int = 0
    load_paths: tuple[str, ...] = ()
    writer: str = "tasks"
    sink: SinkBatch | None = None
    decided_by: str | None = None
    #: Staged changes the apply skipped as no newer than the stored rows (`order`).
    stale: int = 0
    ended: JobEnd | None = None
    #: The running phase, as an index into PHASES.
    running: int = 0

    @classmethod
    def of(
        cls, request: JobRequest, clock: Stopwatch | None = None, spark_worker: bool = False
    ) -> JobTrace:
        return cls(
            str(request.target),
            request.options.mode,
            request.spec.redact,
            clock or Stopwatch(),
            spark_worker,
            sink=request.sink,
        )

    def done(self, phase: str) -> None:
        """`phase` ended now; the next one runs from here."""
        self.clock.mark(phase)
        self.running = PHASES.index(phase) + 1

    def end(self, outcome: JobOutcome, error: BaseException | None = None) -> JobEnd:
        """The job ended: its line is logged, once (a second call returns the first end)."""
        if self.ended is not None:
            return self.ended
        if self.running < len(PHASES):
            self.done(PHASES[self.running])  # the phase a failure, a skip or Spark ended
        total = self.clock.elapsed()
        self.ended = JobEnd(
            outcome=outcome,
            job_id=self.job_id,
            table=self.table,
            mode=self.mode,
            rows=self.rows,
            branches=self.branches,
            load_paths=self.load_paths,
            writer=self.writer,
            seconds=PhaseSeconds(
                **{p: self.clock.seconds.get(p, 0.0) for p in PHASES}, total=total
            ),
            sink_id=None if self.sink is None else self.sink.sink_id,
            batch_id=None if self.sink is None else self.sink.batch_id,
            lag_seconds=None if self.sink is None else total,
            decided_by=self.decided_by,
            error=None if error is None else type(error).__name__,
            redact=self.redact,
            stale=self.stale,
        )
        log_job_end(self.ended, self.spark_worker)
        return self.ended

    def failed(self, error: BaseException) -> JobEnd:
        """The job ended with `error`: its outcome follows from the state it was left in."""
        return self.end(self.outcome_now(), error)

    def outcome_now(self) -> JobOutcome:
        """The outcome the job's state, as this process left it, stands for."""
        if not self.job_id:
            return JobOutcome.FAILED
        if self.state == JobState.ABORTED:
            return JobOutcome.ABORTED
        if self.state == JobState.COMMITTED:
            return JobOutcome.COMMITTED
        return JobOutcome.IN_DOUBT

    @contextlib.contextmanager
    def ending(self, aborted_next: bool = False) -> Iterator[JobTrace]:
        """Any exception raised inside ends the job (unless it has ended already).

        `aborted_next`: a format("xasink") commit(), after whose failure Spark calls abort()
        in another process, with its own copy of the trace. A failure that left the job
        running (undecided, not aborted: e.g. its journal unreachable) did not end it:
        abort() ends it and logs its one line."""
        try:
            yield self
        except BaseException as exc:
            if self.ended is None and not (aborted_next and self.state == JobState.RUNNING):
                self.failed(exc)
            raise

    @classmethod
    def continued(cls, request: JobRequest, clock: Stopwatch) -> JobTrace:
        """A format("xasink") stream job's trace in commit()/abort(), from the stopwatch
        its tasks carried (the phases so far); the job's id, state and sink come from its
        plan (`opening.resume_job`)."""
        trace = cls.of(request, clock, spark_worker=True)
        trace.running = max((PHASES.index(p) + 1 for p in clock.seconds), default=0)
        return trace


__all__ = ["JOBS", "PHASES", "JobEnd", "JobOutcome", "JobTrace", "PhaseSeconds", "logfmt"]
