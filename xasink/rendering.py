"""How `xasink check` prints its report: lines for a person (cron mails them), one JSON
object for scripts, or Prometheus' text exposition format for a node exporter's textfile
collector; and how `xasink jobs` prints its table. The report and the jobs are
`protocol.health`'s and `protocol.listing`'s; nothing here reads a database."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from .protocol.health import AGE_FROM_JOB_START, HealthReport, JournalStatus, ProblemKind
from .protocol.listing import JobInfo
from .protocol.states import JobState


def check_text(report: HealthReport) -> str:
    """One line per problem, then one summary line (which names the journal, so that a
    wrong --url or --journal-schema shows at once)."""
    lines = [problem.line() for problem in report.problems]
    lines += [f"warning: {warning}" for warning in report.warnings]
    verdict = "healthy" if report.healthy else f"UNHEALTHY: {len(report.problems)} problem(s)"
    jobs = sum(report.jobs_by_state.values())
    states = ", ".join(
        f"{state} {'~' if state in report.estimated_states else ''}{n}"
        for state, n in report.jobs_by_state.items()
    )
    approx = "~" if report.estimated_states else ""
    counted = f"{approx}{jobs} job(s)" + (f" ({states})" if states else "")
    if report.journal_status == JournalStatus.DAMAGED:
        counted = "jobs not read"
    parts = [verdict, report.journal, counted]
    branches = f"{len(report.branches)} in-doubt branch(es)"
    oldest = report.oldest_prepared_seconds
    if oldest is not None:
        since = " since its job began" if report.age_source == AGE_FROM_JOB_START else ""
        branches += f", oldest prepared {oldest:.0f}s{since}"
    parts.append(branches)
    if report.other_journal_branches:
        parts.append(
            f"{report.other_journal_branches} prepared xasink branch(es) of other journals, "
            "not checked"
        )
    lines.append("; ".join(parts))
    return "\n".join(lines)


def check_json(report: HealthReport) -> str:
    return json.dumps(report.as_dict(), indent=2)


def duration(seconds: float) -> str:
    """An age as a person reads it: 45s, 12.5m, 3.0h, 2.1d."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def jobs_text(jobs: Sequence[JobInfo]) -> str:
    """One line per job (id, state, modes, the rows in its table, age, tables), then its
    notes: a stream's batch, rows that are not all in the table, what blocks it, how it
    was ended by hand."""
    wide = max([9, *(len(j.mode) for j in jobs)])  # a transaction's modes: "upsert,append"
    lines = [
        f"{'job':32}  {'state':10}  {'mode':{wide}}  {'rows':>10}  {'age':>8}  table / blocker"
    ]
    for j in jobs:
        rows = "-" if j.rows is None else str(j.rows)
        age = "-" if j.age_seconds is None else duration(j.age_seconds)
        lines.append(
            f"{j.job_id:32}  {j.state:10}  {j.mode:{wide}}  {rows:>10}  {age:>8}  {j.table}"
        )
        stream = f"sink {j.sink_id} batch {j.batch_id}" if j.sink_id else ""
        for note in (stream, _rows_note(j), j.blocker, j.resolution):
            if note:
                lines.append(f"{'':32}  -> {note}")
    return "\n".join(lines)


def _rows_note(job: JobInfo) -> str:
    """What the rows column leaves out: decided rows that are not (all) in the table."""
    lost = job.lost_partitions
    if job.rows_decided is None or (job.rows == job.rows_decided and not lost):
        return ""
    held = "?" if job.rows is None else str(job.rows)
    note = f"{held} of {job.rows_decided} decided rows are in the table"
    if lost:
        note += f"; {len(lost)} winning branch(es) lost, partition(s) {list(lost)[:20]}"
    return note


def label_value(value: str) -> str:
    """A label value escaped as the exposition format asks: backslash, double quote and
    line feed (sink ids are the user's strings)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    return {math.inf: "+Inf", -math.inf: "-Inf"}.get(value, repr(value))


def _metric(
    name: str, help_text: str, samples: Iterable[tuple[str, float]], kind: str = "gauge"
) -> list[str]:
    """One metric family: HELP, TYPE, then `name{labels} value` per sample."""
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    lines += [f"{name}{labels} {_number(value)}" for labels, value in samples]
    return lines


def check_prometheus(report: HealthReport) -> str:
    """The report as gauges, every name starting with `xasink_`. Every known job state and
    problem kind is always present (0 when none), so that a series never vanishes."""
    states = {str(s): 0 for s in JobState}
    states.update(report.jobs_by_state)
    kinds = {str(k): 0 for k in ProblemKind}
    for problem in report.problems:
        kinds[str(problem.kind)] += 1
    oldest = report.oldest_prepared_seconds
    lines = [
        *_metric(
            "xasink_check_healthy",
            "1 when xasink check found no problem, else 0.",
            [("", 1 if report.healthy else 0)],
        ),
        *_metric(
            "xasink_check_problems",
            "Problems xasink check found, by kind.",
            [(f'{{kind="{label_value(k)}"}}', n) for k, n in kinds.items()],
        ),
        *_metric(
            "xasink_check_warnings",
            "What xasink check warned of (asynchronous replication, say): not problems yet.",
            [("", len(report.warnings))],
        ),
        *_metric(
            "xasink_journal_present",
            "1 when the journal exists (whole or damaged), 0 where xasink never wrote.",
            [("", 0 if report.journal_status == JournalStatus.MISSING else 1)],
        ),
        *_metric(
            "xasink_in_doubt_branches",
            "Prepared (in-doubt) branches of this journal, not yet committed or rolled back.",
            [("", len(report.branches))],
        ),
        *_metric(
            "xasink_oldest_prepared_age_seconds",
            "Age of the oldest in-doubt branch: since PREPARE on PostgreSQL, since its job "
            "began on MySQL/MariaDB; 0 when there is none.",
            [("", 0.0 if oldest is None else oldest)],
        ),
        *_metric(
            "xasink_jobs",
            "Jobs in the journal, by state (committed ones of a long journal: the server's "
            "row estimate, as counting them would read its whole history).",
            [(f'{{state="{label_value(s)}"}}', n) for s, n in states.items()],
        ),
        *_metric(
            "xasink_sink_last_batch_id",
            "Each streaming sink's last decided batch id (-1: none yet).",
            [(f'{{sink="{label_value(s)}"}}', b) for s, b in report.sink_batches.items()],
        ),
    ]
    return "\n".join(lines)


__all__ = ["check_json", "check_prometheus", "check_text", "jobs_text", "label_value"]
