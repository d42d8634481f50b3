"""Results out: a markdown table, a JSON file with every timing, and a PNG chart.

Every figure is computed from the timings of this run; nothing is carried over.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .contenders import CONTENDERS
from .history_report import markdown_lines as history_lines
from .measure import Summary, Timing, by_key
from .stream_contenders import STREAM_CONTENDERS, STREAM_FLOORS
from .streams import StreamSummary
from .transactions import markdown_lines as transaction_lines

RATIOS = (
    ("write_xa", "spark_jdbc"),
    ("write_xa", "raw"),
    ("write_xa_per_partition", "spark_jdbc"),
    ("write_xa", "arrow_floor"),
)
#: Stream ratios, of batches/s and of median batch latency: (contender, against).
STREAM_RATIOS = (
    ("write_xa", "spark_jdbc"),
    ("write_xa_format", "spark_jdbc"),
    *((floor, "spark_jdbc") for floor in STREAM_FLOORS),
    # How close each writer comes to the floor of its kind.
    ("write_xa", "stream_collect"),
    ("write_xa_format", "python_noop"),
    # Against the least a sink of its kind pays that writes each batch durably: from the
    # driver (collect + raw load), or from a Python data source's tasks.
    ("collect_load", "stream_collect"),
    ("write_xa", "collect_load"),
    ("python_load", "python_noop"),
    ("write_xa_format", "python_load"),
)
RATIO_NAMES = {
    "write_xa_format": 'format("xasink")',
    "write_xa": "write_xa",
    "spark_jdbc": "Spark JDBC",
    "raw": "raw",
    "write_xa_per_partition": "write_xa 1 branch/partition",
    "arrow_floor": "floor",
    "stream_collect": "collect only",
    "collect_load": "collect + raw load",
    "python_noop": "no-op Python source",
    "python_load": "Python source + raw load",
    "spark_noop": "Spark noop",
}


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value else "failed"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.3g}" if a and b else "—"


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], right: int) -> list[str]:
    """A markdown table: its head, the last `right` columns aligned right, a line a row."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * (len(head) - right) + "---:|" * right]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _own_rounds(meta: dict[str, Any]) -> list[str]:
    """Workloads measured with their own number of calls (the small ones)."""
    own = [w for w in meta["config"]["workloads"] if w.get("repetitions")]
    lines = [
        f"{w['name']}: {w.get('warmups') or 0} warm-up + median of {w['repetitions']} calls."
        for w in own
    ]
    return ["", *lines] if lines else []


def markdown(
    summaries: Sequence[Summary],
    contenders: Sequence[str],
    partitions: dict[str, int],
    meta: dict[str, Any],
    streams: Sequence[StreamSummary] = (),
    transactions: Sequence[Timing] = (),
    history: Sequence[Timing] = (),
) -> str:
    """Rows/s per contender (median run) and the write_xa ratios, plus every timed run; then
    the stream workloads' batches/s and latencies, the transaction workloads' time per call
    and ratios, and the history workloads' fresh and long journals side by side, if any
    ran."""
    machine = meta["machine"]
    lines = [
        "# xasink benchmark",
        "",
        f"{meta['created']} · {machine['cpu_count']} CPUs ({machine['cpu_model']})"
        f" · Spark {machine['spark']} `{machine['spark_master']}`"
        + (
            f" · {meta['config']['warmups']} warm-up + median of "
            f"{meta['config']['repetitions']} run(s), contenders in turns (a new order each round)."
            if summaries or transactions
            else "."
        ),
        *_own_rounds(meta),
        "",
        _load_line(meta),
        "",
        _xasink_line(meta),
    ]
    if summaries:
        lines += ["", *_bulk_lines(summaries, contenders, partitions)]
    if streams:
        lines += ["", *_stream_lines(streams, meta)]
    if transactions:
        workloads = {w["name"]: w for w in meta["config"]["workloads"]}
        lines += ["", *transaction_lines(transactions, workloads)]
    if history:
        workloads = {w["name"]: w for w in meta["config"]["workloads"]}
        lines += ["", *history_lines(history, workloads, meta)]
    return "\n".join(lines) + "\n"


def _bulk_lines(
    summaries: Sequence[Summary], contenders: Sequence[str], partitions: dict[str, int]
) -> list[str]:
    """The bulk workloads' table of rows/s and ratios, and every timed run."""
    labels = [CONTENDERS[c].label for c in contenders]
    ratios = [(a, b) for a, b in RATIOS if a in contenders and b in contenders]
    head = ["database", "workload", "rows", "partitions"]
    head += [f"{label} rows/s" for label in labels]
    head += [f"{RATIO_NAMES[a]} / {RATIO_NAMES[b]}" for a, b in ratios]
    rows = []
    for (database, workload), row in by_key(summaries).items():
        first = next(iter(row.values()))
        cells = [database, workload, f"{first.rows:,}", str(partitions[workload])]
        cells += [_rate(row[c].rows_per_second) if c in row else "—" for c in contenders]
        cells += [
            _ratio(
                row[a].rows_per_second if a in row else None,
                row[b].rows_per_second if b in row else None,
            )
            for a, b in ratios
        ]
        rows.append(cells)
    every = [
        [s.database, s.workload, CONTENDERS[s.contender].label, _runs(s.seconds), str(s.failures)]
        for s in summaries
    ]
    return [
        *_table(head, rows, right=len(head) - 2),
        "",
        "Rows/s = rows ÷ median seconds of the timed runs. Ratios above 1 mean write_xa is"
        " faster. Each run starts from a truncated table; its time covers the write call only,"
        " and the row count is checked afterwards.",
        "",
        "## Every timed run (seconds)",
        "",
        *_table(["database", "workload", "contender", "seconds", "failures"], every, right=1),
    ]


def _runs(values: Sequence[float]) -> str:
    """Every timed run's figure, or a dash for none."""
    return ", ".join(f"{x:.2f}" for x in values) or "—"


def _ms(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "—"


def _stream_lines(streams: Sequence[StreamSummary], meta: dict[str, Any]) -> list[str]:
    """Per contender batches/s and latencies, then the ratios of each pair in the same run."""
    workloads = {w["name"]: w for w in meta["config"]["workloads"]}
    lines = ["## Streams of micro-batches", ""]
    for name in dict.fromkeys(s.workload for s in streams):
        w = workloads[name]
        lines.append(
            f"{name}: per query {w['warmup_batches']} warm-up + {w['batches']} timed "
            f"micro-batches of {w['rows']:,} rows (one parquet file each, "
            "`maxFilesPerTrigger=1`, `trigger(availableNow=True)`); one query per contender "
            f"per round, {w.get('repetitions') or meta['config']['repetitions']} round(s), "
            "contenders in turns (a new order each round)."
        )
    head = ["database", "workload", "contender", "batches/s", "median batch ms"]
    head += ["p90 batch ms", "median write ms", "queries", "failures"]
    rows = []
    for s in streams:
        rate = f"{s.batches_per_second:.2f}" if s.batches_per_second else "failed"
        write = _ms(s.median_write_ms) + (" (addBatch)" if s.write_measure == "addBatch" else "")
        label = STREAM_CONTENDERS[s.contender].label
        rows.append([s.database, s.workload, label, rate, _ms(s.median_batch_ms)])
        rows[-1] += [_ms(s.p90_batch_ms), write, str(len(s.seconds)), str(s.failures)]
    lines += ["", *_table(head, rows, right=6), *_stream_ratio_lines(streams)]
    every = [
        [s.database, s.workload, STREAM_CONTENDERS[s.contender].label, _runs(s.run_rates)]
        for s in streams
    ]
    return [
        *lines,
        "",
        "Batches/s = timed batches ÷ the median query's wall time for them (from the first"
        " timed batch's trigger to the end of the last). Batch ms: Spark's `triggerExecution`"
        " per batch (offsets, planning, the sink, the checkpoint's commit), over the timed"
        " batches of all queries. Write ms: time inside the foreachBatch function; for a"
        " `format(...)` sink, which has none, Spark's `addBatch`. Ratios of batches/s above 1"
        " mean the first is faster; ratios of latency above 1 mean it is slower. Each query"
        " starts from an empty table and a new checkpoint; afterwards every batch's row count"
        " (Spark's progress) and the table's count are checked (0 rows for a contender that"
        " writes nothing: a floor, the most a sink of its kind could reach here).",
        "",
        "Batches/s of every timed query:",
        "",
        *_table(["database", "workload", "contender", "batches/s"], every, right=0),
    ]


def _stream_ratio_lines(streams: Sequence[StreamSummary]) -> list[str]:
    """Each pair's ratios in the same run, of batches/s and of median batch latency."""
    present = {s.contender for s in streams}
    ratios = [(a, b) for a, b in STREAM_RATIOS if a in present and b in present]
    if not ratios:
        return []
    rows = []
    for (database, workload), row in by_key(streams).items():
        for a, b in ratios:
            one, other = row.get(a), row.get(b)
            rate = _ratio(
                one.batches_per_second if one else None,
                other.batches_per_second if other else None,
            )
            latency = _ratio(
                one.median_batch_ms if one else None,
                other.median_batch_ms if other else None,
            )
            rows.append([database, workload, f"{RATIO_NAMES[a]} / {RATIO_NAMES[b]}", rate, latency])
    head = ["database", "workload", "ratio", "of batches/s", "of median batch ms"]
    return ["", *_table(head, rows, right=2)]


def _load_line(meta: dict[str, Any]) -> str:
    """The machine's load during the run: on a small shared machine it explains the noise."""
    start = meta["machine"].get("load_average_at_start")
    end = meta["machine"].get("load_average_at_end")
    if not start or not end:
        return "Load average: not recorded."
    return (
        f"1-minute load average at start {start[0]:.1f}, at end {end[0]:.1f} "
        f"(per-run values in latest.json)."
    )


def _xasink_line(meta: dict[str, Any]) -> str:
    """Which xasink was measured, and a warning if its sources changed mid-run."""
    info = meta["machine"]["xasink"]
    commit = (info.get("commit") or "unknown")[:12]
    changes = info.get("uncommitted_xasink_changes") or []
    start, end = info.get("source_sha256", ""), info.get("source_sha256_at_end", "")
    line = (
        f"xasink {info['version']} at commit {commit}"
        f"{f' with {len(changes)} uncommitted file(s)' if changes else ''}"
        f", sources sha256 {start[:12]}."
    )
    if end and end != start:
        line += (
            f" **Its sources changed during the run (now {end[:12]}): write_xa runs may mix"
            " code versions.**"
        )
    return line


def write_json(
    path: Path,
    meta: dict[str, Any],
    timings: Sequence[Timing],
    summaries: Sequence[Summary],
    streams: Sequence[StreamSummary] = (),
) -> None:
    summary_rows = [
        {
            "database": s.database,
            "workload": s.workload,
            "contender": s.contender,
            "rows": s.rows,
            "timed_seconds": s.seconds,
            "median_seconds": s.median_seconds,
            "rows_per_second": s.rows_per_second,
            "failures": s.failures,
        }
        for s in summaries
    ]
    document = {
        **meta,
        "timings": [t.as_json() for t in timings],
        "summary": summary_rows,
        "stream_summary": [s.as_json() for s in streams],
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


def read_json(path: Path) -> tuple[dict[str, Any], list[Timing]]:
    """The run description and its timings back from `write_json`'s file."""
    document = json.loads(path.read_text())
    names = {f.name for f in dataclasses.fields(Timing)}
    timings = [Timing(**{k: v for k, v in t.items() if k in names}) for t in document["timings"]]
    meta = {k: v for k, v in document.items() if k not in ("timings", "summary", "stream_summary")}
    return meta, timings


def chart(
    path: Path,
    summaries: Sequence[Summary],
    contenders: Sequence[str],
    partitions: dict[str, int],
    title: str,
) -> None:
    """Grouped bars per database: median rows/s (log scale), whiskers from slowest to fastest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grouped = by_key(summaries)
    databases = list(dict.fromkeys(db for db, _ in grouped))
    fig, axes = plt.subplots(
        1, len(databases), figsize=(6.5 * len(databases), 5.6), squeeze=False, sharey=True
    )
    width = 0.8 / len(contenders)
    colours = {"spark_jdbc": "#4C72B0", "write_xa": "#DD8452", "raw": "#55A868"}
    top = max((s.rate_range or (0.0, 0.0))[1] for s in summaries) or 1.0
    for ax, database in zip(axes[0], databases, strict=True):
        workloads = [w for db, w in grouped if db == database]
        for index, contender in enumerate(contenders):
            xs, ys, lows, highs = [], [], [], []
            for position, workload in enumerate(workloads):
                summary = grouped[(database, workload)].get(contender)
                rate = summary.rows_per_second if summary else None
                spread = summary.rate_range if summary else None
                if not rate or not spread:
                    continue
                xs.append(position + (index - (len(contenders) - 1) / 2) * width)
                ys.append(rate)
                lows.append(rate - spread[0])
                highs.append(spread[1] - rate)
            bars = ax.bar(
                xs,
                ys,
                width,
                yerr=[lows, highs],
                capsize=3,
                label=CONTENDERS[contender].label,
                color=colours.get(contender),
            )
            ax.bar_label(
                bars, labels=[_short(y) for y in ys], label_type="center", fontsize=8, color="white"
            )
        ax.set_yscale("log")
        ax.set_ylim(top=top * 3)
        ax.set_xticks(
            range(len(workloads)),
            [f"{w}\n{partitions.get(w, '?')} partitions" for w in workloads],
        )
        ax.set_title(database)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].set_ylabel("rows/s, log scale (median; whiskers: slowest to fastest run)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(contenders), fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _short(value: float) -> str:
    """Three significant digits with a k/M suffix."""
    for factor, suffix in ((1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g}{suffix}"
    return f"{value:.3g}"
