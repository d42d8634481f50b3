"""The small write at its floor: every target of the small call and the stream, side by
side, repeated, with the median and the spread of each ratio over the runs.

    python -m benchmarks.floor [--runs 3] [--databases postgres,mariadb]
        [--repetitions 3] [--output-dir benchmarks/results/floor] [--quick]

Each run is one `python -m benchmarks` process of its own (its own servers, Spark and JVM),
writing `run-<n>/latest.{json,md}`: the 1,000-row `write_xa` call beside the collect of the
same frame (small-1k), a stream of 1,000-row micro-batches through every floor (stream-1k),
and a transaction of two 1,000-row writes beside the two writes apart (tx-small-1k); then
`python -m benchmarks.breakdown together` in the same directory: four streams at once
through one driver and one journal, beside one alone (benchmarks/together.py). Every
ratio is computed within one run, where its two sides shared the machine's state; the
table then gives each run's ratio, their median and spread, and whether every run met the
target. A figure of a single run says little on a shared 2-core machine: the spread is part
of the answer. `latest.md` and `latest.json` name the commit, the machine and the load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.machine import load_average, measured_xasink, xasink_line

RESULTS = Path(__file__).parent / "results" / "floor"
WORKLOADS = ("small-1k", "stream-1k", "tx-small-1k")
CONTENDERS = (
    "write_xa",
    "arrow_collect",
    "stream_collect",
    "collect_load",
    "write_xa_format",
    "python_noop",
    "python_load",
    "transaction",
)

#: One run's figures: (database, workload, contender) -> seconds per call (median of the
#: run's timed calls) or, for a stream, batches per second (median of its queries).
Figures = dict[tuple[str, str, str], float]


@dataclass(frozen=True)
class Target:
    """A ratio of two figures of one run, and the bound the issue sets for it."""

    label: str
    #: Seconds ("s": lower is better, the ratio is mine/theirs of time) or batches per
    #: second ("b/s": higher is better, the ratio is mine/theirs of rate).
    unit: str
    workload: str
    mine: str
    theirs: str
    bound: str  # "<= 1.15", ">= 0.95", "< 1", or "" (a figure only)
    databases: tuple[str, ...] = ("postgres", "mariadb")

    def ratio(self, figures: Figures, database: str) -> float | None:
        mine = figures.get((database, self.workload, self.mine))
        theirs = figures.get((database, self.workload, self.theirs))
        return mine / theirs if mine and theirs else None

    def met(self, value: float) -> bool:
        if not self.bound:
            return True
        op, limit = self.bound.split()
        return {
            "<=": value <= float(limit),
            ">=": value >= float(limit),
            "<": value < float(limit),
        }[op]


TARGETS = (
    Target(
        "1,000-row write_xa call time / collect of the frame",
        "s",
        "small-1k",
        "write_xa",
        "arrow_collect",
        "<= 1.15",
    ),
    Target(
        "1,000-row collect, then raw bulk load (no xasink) / collect of the frame",
        "s",
        "small-1k",
        "collect_load",
        "arrow_collect",
        "",
    ),
    Target(
        "1,000-row write_xa call time / collect, then raw bulk load",
        "s",
        "small-1k",
        "write_xa",
        "collect_load",
        "",
    ),
    Target(
        "foreach_batch batches/s / collect, then raw bulk load",
        "b/s",
        "stream-1k",
        "write_xa",
        "collect_load",
        ">= 0.95",
    ),
    Target(
        "foreach_batch batches/s / collect only",
        "b/s",
        "stream-1k",
        "write_xa",
        "stream_collect",
        ">= 0.97",
    ),
    Target(
        "format batches/s / Python source that loads raw",
        "b/s",
        "stream-1k",
        "write_xa_format",
        "python_load",
        ">= 0.97",
    ),
    Target(
        "format batches/s / no-op Python source",
        "b/s",
        "stream-1k",
        "write_xa_format",
        "python_noop",
        "",
    ),
    Target(
        "transaction of two writes time / the two writes apart",
        "s",
        "tx-small-1k",
        "transaction",
        "write_xa",
        "< 1",
    ),
)


def run_once(
    index: int, args: argparse.Namespace, out: Path, runner: Callable[..., Any] = subprocess.run
) -> Path:
    """One `python -m benchmarks` process; returns its output directory."""
    directory = out / f"run-{index}"
    command = [
        sys.executable,
        "-m",
        "benchmarks",
        "--databases",
        args.databases,
        "--workloads",
        ",".join(WORKLOADS),
        "--contenders",
        ",".join(CONTENDERS),
        "--output-dir",
        str(directory),
    ]
    command += ["--quick"] if args.quick else ["--repetitions", str(args.repetitions)]
    streams = [
        sys.executable,
        "-m",
        "benchmarks.breakdown",
        "together",
        "--databases",
        args.databases,
        "--streams",
        str(args.streams),
        "--rounds",
        "1" if args.quick else "2",
        "--output-dir",
        str(directory),
    ]
    for step in (command, streams):
        print(f"floor run {index}: {' '.join(step[1:])}", flush=True)
        runner(step, check=False)
    return directory


def figures_of(run: dict[str, Any]) -> Figures:
    """A run's figures from its latest.json: median seconds of each timed call, and each
    stream's batches per second (the median of its queries)."""
    seconds: dict[tuple[str, str, str], list[float]] = {}
    for timing in run["timings"]:
        if timing["warmup"] or timing["error"] or timing["seconds"] is None:
            continue
        key = (timing["database"], timing["workload"], timing["contender"])
        seconds.setdefault(key, []).append(timing["seconds"])
    figures: Figures = {key: statistics.median(values) for key, values in seconds.items()}
    for stream in run.get("stream_summary", []):
        key = (stream["database"], stream["workload"], stream["contender"])
        rate = stream.get("batches_per_second")
        if rate:
            figures[key] = rate
        else:
            figures.pop(key, None)
    return figures


#: The streams-together target: xasink's growth of a batch's call over the floor's.
TOGETHER = "streams at once: foreach_batch call's growth (together / alone) / the floor's"


def together_ratio(run: dict[str, Any], database: str) -> float | None:
    """A run's growth of foreach_batch's call when streams run together, over the
    collect-only floor's growth (`benchmarks.together`)."""
    figures = run.get("together", {}).get("databases", {}).get(database, {})
    mine = figures.get("write_xa", {}).get("growth")
    floor = figures.get("stream_collect", {}).get("growth")
    return mine / floor if mine and floor else None


def _row(label: str, database: str, bound: str, values: list[float | None]) -> dict[str, Any]:
    found = [v for v in values if v is not None]
    limit = Target(label, "", "", "", "", bound)
    return {
        "target": label,
        "database": database,
        "bound": bound,
        "runs": values,
        "median": statistics.median(found) if found else None,
        "min": min(found) if found else None,
        "max": max(found) if found else None,
        "every_run_met": bool(found)
        and len(found) == len(values)
        and all(limit.met(v) for v in found),
    }


def summarise(runs: Sequence[dict[str, Any]], databases: Sequence[str]) -> list[dict[str, Any]]:
    """Per target and database: each run's ratio, their median, min and max, and whether
    every run met the bound."""
    per_run = [figures_of(run) for run in runs]
    rows = []
    for target in TARGETS:
        for database in databases:
            if database not in target.databases:
                continue
            values = [target.ratio(f, database) for f in per_run]
            rows.append(_row(target.label, database, target.bound, values))
    for database in databases:
        values = [together_ratio(run, database) for run in runs]
        rows.append(_row(TOGETHER, database, "<= 1", values))
    return rows


def markdown(report: dict[str, Any]) -> str:
    runs = report["runs"]
    loads = ", ".join(
        f"{r['load_average_at_start'][0]:.1f} to {r['load_average_at_end'][0]:.1f}"
        for r in runs
        if r.get("load_average_at_start") and r.get("load_average_at_end")
    )
    lines = [
        "# The small write at its floor",
        "",
        f"{report['created']} · {report['machine']} · {len(runs)} run(s) of `python -m "
        f"benchmarks --workloads {','.join(WORKLOADS)}`, each its own process "
        f"({report['per_run']}).",
        "",
        xasink_line(report),
        "",
        f"1-minute load average per run, start to end: {loads or 'unknown'}.",
        "",
        "| ratio | database | target | runs | median | spread (min to max) | every run met |",
        "|---|---|---|---|---:|---|---|",
    ]
    for row in report["ratios"]:
        runs_text = ", ".join("—" if v is None else f"{v:.2f}" for v in row["runs"])
        spread = "—" if row["min"] is None else f"{row['min']:.2f} to {row['max']:.2f}"
        median = "—" if row["median"] is None else f"{row['median']:.2f}"
        met = ("yes" if row["every_run_met"] else "no") if row["bound"] else ""
        lines.append(
            f"| {row['target']} | {row['database']} | {row['bound'] or '(figure)'} | "
            f"{runs_text} | {median} | {spread} | {met} |"
        )
    lines += [
        "",
        "Times are medians of a run's timed calls; rates are a stream's batches per second, "
        "the median of its queries. Each run's own tables: `run-<n>/latest.md`.",
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.floor", description=__doc__)
    parser.add_argument("--runs", type=int, default=3, help="processes, each a whole run")
    parser.add_argument("--databases", default="postgres,mariadb")
    parser.add_argument("--repetitions", type=int, default=3, help="rounds within a run")
    parser.add_argument("--output-dir", type=Path, default=RESULTS)
    parser.add_argument("--streams", type=int, default=4, help="streams run together")
    parser.add_argument("--quick", action="store_true", help="each run as --quick (a smoke)")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    out: Path = args.output_dir
    out.mkdir(parents=True, exist_ok=True)
    created = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    runs, failed = [], 0
    for index in range(1, args.runs + 1):
        directory = run_once(index, args, out)
        try:
            run = json.loads((directory / "latest.json").read_text())
        except (OSError, ValueError) as exc:
            print(f"floor run {index} wrote no results: {exc}", file=sys.stderr)
            failed += 1
            continue
        try:
            run["together"] = json.loads((directory / "breakdown-together.json").read_text())
        except (OSError, ValueError) as exc:
            print(f"floor run {index}: no streams-together figures: {exc}", file=sys.stderr)
            failed += 1
        runs.append(run)
    if not runs:
        return 1
    machine = runs[0]["machine"]
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    report = {
        "created": created,
        "command": ["python", "-m", "benchmarks.floor", *(argv or sys.argv[1:])],
        "machine": f"{machine['cpu_count']} CPUs ({machine['cpu_model']})",
        "per_run": "--quick" if args.quick else f"1 warm-up + {args.repetitions} rounds",
        "xasink": measured_xasink(),
        "load_average_at_end": load_average(),
        "runs": [
            {
                "xasink": r["machine"]["xasink"],
                "load_average_at_start": r["machine"].get("load_average_at_start"),
                "load_average_at_end": r["machine"].get("load_average_at_end"),
            }
            for r in runs
        ],
        "ratios": summarise(runs, databases),
        "failed_runs": failed,
    }
    (out / "latest.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    text = markdown(report)
    (out / "latest.md").write_text(text)
    print(text)
    print(f"wrote {out / 'latest.md'}, {out / 'latest.json'}")
    errors = sum(1 for r in runs for t in r["timings"] if t["error"])
    return 1 if failed or errors else 0


if __name__ == "__main__":
    # Each run's Spark workers import the harness and xasink from this checkout.
    os.environ.setdefault("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
