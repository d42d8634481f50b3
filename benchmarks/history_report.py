"""The history workload's report: each journal's median beside the other's, the ratio and
its target, and how the history was made (how many jobs, how long the fill took, the load).

A timing's contender is `<what>:<journal>` ("batch:fresh", "check:history"); the fill is
"fill:history" (`history_runs`). Everything shown is computed from this run's timings.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from .measure import Timing

#: What each row measures, in the report's order, and its unit.
WHAT: dict[str, tuple[str, str]] = {
    "batch": ("a stream's batch (10 rows, write_xa with sink_id and batch_id)", "ms"),
    "call": ("a 1,000-row write_xa call (append, defaults)", "ms"),
    "jobs": ("`xasink jobs --limit 20`", "s"),
    "check": ("`xasink check`", "s"),
    "recover": ("`xasink recover`", "s"),
    "prune": ("`xasink prune --older-than 3650 --dry-run`", "s"),
}
#: The targets: history ÷ fresh at most this (the writes), or the history's median
#: under this many seconds (the commands an operator waits for).
RATIO_TARGETS = {"batch": 1.1, "call": 1.1}
SECONDS_TARGETS = {"jobs": 2.0, "check": 2.0, "recover": 2.0}


def median_seconds(runs: Sequence[Timing]) -> float | None:
    """The median of the timed (not warm-up), successful runs."""
    timed = [t.seconds for t in runs if not t.warmup and not t.error and t.seconds is not None]
    return statistics.median(timed) if timed else None


def _quartiles(what: str, runs: Sequence[Timing]) -> str:
    """The middle half of the timed runs (25th to 75th percentile), in the row's unit."""
    timed = [t.seconds for t in runs if not t.warmup and not t.error and t.seconds is not None]
    if len(timed) < 2:
        return "—"
    low, _, high = statistics.quantiles(timed, n=4)
    if WHAT.get(what, ("", "s"))[1] == "ms":
        return f"{low * 1000:,.0f}-{high * 1000:,.0f}"
    return f"{low:.3f}-{high:.3f}"


def shown(what: str, seconds: float | None) -> str:
    """Seconds in the row's unit: ms for the writes, seconds for the commands."""
    if seconds is None:
        return "failed"
    if WHAT.get(what, ("", "s"))[1] == "ms":
        return f"{seconds * 1000:,.1f} ms"
    return f"{seconds:.3f} s"


def _load(values: Any) -> str:
    return f"{values[0]:.2f}" if values else "?"


def _fill_rows(fills: Sequence[Timing]) -> list[str]:
    lines = [
        "| database | workload | finished jobs | fill s | VACUUM + CHECKPOINT s | journal on disk |"
        " load: before fill → after fill → measuring → end |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for fill in fills:
        d = fill.detail
        size = f"{d['journal_bytes'] / 2**20:,.0f} MiB" if d.get("journal_bytes") else "?"
        seconds = f"{fill.seconds:,.1f}" if fill.seconds is not None else "failed"
        settle = f"{d['settle_seconds']:.1f}" if d.get("settle_seconds") is not None else "—"
        load = " → ".join(
            _load(d.get(key))
            for key in (
                "load_average_before_fill",
                "load_average_after_fill",
                "load_average_at_start",
                "load_average_at_end",
            )
        )
        lines.append(
            f"| {fill.database} | {fill.workload} | {d.get('jobs', fill.rows):,} | {seconds} |"
            f" {settle} | {size} | {load} |"
        )
    return lines


def _target(what: str, fresh: float | None, old: float | None) -> tuple[str, str, str]:
    """(history ÷ fresh, the target, whether it is met)."""
    ratio = f"{old / fresh:.3g}" if fresh and old else "—"
    if what in RATIO_TARGETS:
        bound = RATIO_TARGETS[what]
        met = "" if not (fresh and old) else ("yes" if old / fresh <= bound else "**no**")
        return ratio, f"≤ {bound:g}", met
    if what in SECONDS_TARGETS:
        bound = SECONDS_TARGETS[what]
        met = "" if old is None else ("yes" if old < bound else "**no**")
        return ratio, f"history < {bound:g} s", met
    return ratio, "", ""


def _measure_rows(timings: Sequence[Timing]) -> list[str]:
    lines = [
        "| database | workload | what | fresh | history | history ÷ fresh | target | met |"
        " middle half: fresh / history | runs per journal (untimed + timed) | failures |",
        "|---|---|---|---:|---:|---:|---|---|---|---:|---:|",
    ]
    keys = dict.fromkeys((t.database, t.workload) for t in timings)
    for database, workload in keys:
        runs = [t for t in timings if (t.database, t.workload) == (database, workload)]
        for what, (label, _) in WHAT.items():
            by_role = {
                role: [t for t in runs if t.contender == f"{what}:{role}"]
                for role in ("fresh", "history")
            }
            if not any(by_role.values()):
                continue
            fresh, old = (median_seconds(by_role[r]) for r in ("fresh", "history"))
            ratio, target, met = _target(what, fresh, old)
            each = by_role["fresh"] or by_role["history"]
            timed = f"{sum(t.warmup for t in each)} + {sum(not t.warmup for t in each)}"
            failures = sum(1 for r in by_role.values() for t in r if t.error)
            spread = " / ".join(_quartiles(what, by_role[r]) for r in ("fresh", "history"))
            lines.append(
                f"| {database} | {workload} | {label} | {shown(what, fresh)} |"
                f" {shown(what, old)} | {ratio} | {target} | {met} | {spread} | {timed} |"
                f" {failures} |"
            )
    return lines


def markdown_lines(
    timings: Sequence[Timing], workloads: dict[str, dict[str, Any]], meta: dict[str, Any]
) -> list[str]:
    """How each history was made, then every measurement's medians side by side."""
    fills = [t for t in timings if t.contender == "fill:history"]
    lines = ["## A journal's history: a fresh journal beside a long one", ""]
    for name in dict.fromkeys(t.workload for t in timings):
        w = workloads[name]
        lines.append(
            f"{name}: the history journal holds {w['history']:,} finished jobs before the"
            " measurement, written by `benchmarks/history.py` with the server's own row"
            " generators: every other one a past batch of the measured stream (its table, its"
            " sink), the rest on 100 other tables (one in ten of those a transaction of two),"
            " created over 90 days. Its retention is set to 0 (keep everything), so xasink's"
            " own retention deletes none of it during the measurement; the fresh journal"
            " holds only the job that made it (its retention is the default; nothing in it is"
            " old enough)."
        )
    machine = meta.get("machine", {})
    command = " ".join(meta.get("command", [])) or "?"
    lines += [
        "",
        f"Command: `{command}` · {machine.get('cpu_count', '?')} CPUs"
        f" ({machine.get('cpu_model') or 'unknown CPU'}).",
        "",
        *_fill_rows(fills),
        "",
        *_measure_rows([t for t in timings if t.contender != "fill:history"]),
        "",
        "Medians over the timed runs (the middle half: their 25th to 75th percentile, ms for"
        " the writes, seconds for the commands); both journals take turns in every round, in"
        " an order that changes each round. A batch is `write_xa(df, table, sink_id=...,"
        " batch_id=..., journal_schema=...)` on 10 rows, what `xasink.foreach_batch` calls per"
        " micro-batch, its batch ids increasing from above every one the history holds; a call"
        " writes 1,000 rows (small: the driver writes them in one local transaction). After"
        " every write the table's row count is checked (untimed). The commands run in the"
        " benchmark's own process (`xasink.cli.main`, the same arguments as on a command"
        " line): the time of a new interpreter and JVM, the same for every journal, is not in"
        " them. Load: the 1-minute load average.",
    ]
    return lines


__all__ = ["RATIO_TARGETS", "SECONDS_TARGETS", "WHAT", "markdown_lines", "median_seconds", "shown"]
