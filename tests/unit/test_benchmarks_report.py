"""The benchmark harness's stream and transaction workloads and their report numbers (no
Spark, no server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.measure import Timing, round_order
from benchmarks.run import DEFAULT_WORKLOADS, QUICK_WORKLOADS, parse_args
from benchmarks.streams import batches_from_progress, stream_detail, summarise_streams
from benchmarks.transactions import markdown_lines as transaction_lines
from benchmarks.workloads import SMALL_CALLS, parse_workloads


def test_stream_workloads_parse_and_are_in_the_default_run():
    (stream,) = parse_workloads(["stream-1k"], partitions=4)
    assert (stream.rows, stream.partitions, stream.is_stream) == (1000, 1, True)
    assert stream.total_batches == stream.batches + stream.warmup_batches
    assert stream.warmup_batches > 0 and stream.warmups == 0
    assert not parse_workloads(["narrow-1k"], 4)[0].is_stream
    assert "stream-1k" in DEFAULT_WORKLOADS and "stream-1k" not in QUICK_WORKLOADS
    with pytest.raises(ValueError, match="at least one row"):
        parse_workloads(["stream-0"], 4)


def test_each_round_takes_the_contenders_in_another_order_the_same_in_every_run():
    """A fixed rotation kept every contender behind the same one; the shuffled rounds give
    each of eight contenders another predecessor within three rounds, repeatably."""
    names = [f"c{i}" for i in range(8)]
    rounds = [round_order(names, n) for n in range(1, 5)]
    assert rounds[0] == names
    assert all(sorted(r) == names for r in rounds)
    assert rounds == [round_order(names, n) for n in range(1, 5)]

    def before(order: list[str]) -> dict[str, str]:
        return {b: a for a, b in zip(order[-1:] + order[:-1], order, strict=True)}

    timed = [before(r) for r in rounds[1:]]  # round 1 is the warm-up
    assert all(len({t[name] for t in timed}) > 1 for name in names)


def _progress(batch_id: int, rows: int, start_ms: int, trigger_ms: int) -> dict:
    second, ms = divmod(start_ms, 1000)
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "timestamp": f"2024-01-01T00:00:{second:02d}.{ms:03d}Z",
        "durationMs": {"triggerExecution": trigger_ms, "addBatch": trigger_ms - 100},
    }


def test_stream_timings_cover_the_timed_batches_only():
    # Batches 0-1 are warm-ups; 2-4 start a second apart and take 500 ms each. A no-data
    # trigger at the end is no batch.
    progress = [_progress(b, 10, b * 1000, 5000 if b == 0 else 500) for b in range(5)]
    progress.append(_progress(5, 0, 5000, 20))
    batches = batches_from_progress(progress, {2: 0.3, 3: 0.2, 4: 0.25, 0: 9.0})
    seconds, detail = stream_detail(batches, expected=5, warmups=2, rows_per_batch=10)
    assert seconds == pytest.approx(2.5)  # from batch 2's start (2.0 s) to 4's end (4.5 s)
    assert detail["batches_per_second"] == pytest.approx(3 / 2.5)
    assert (detail["median_batch_ms"], detail["median_write_ms"]) == (500, 250)
    assert detail["write_measure"] == "foreachBatch call"
    with pytest.raises(AssertionError, match="other than 20 rows"):
        stream_detail(batches, expected=5, warmups=2, rows_per_batch=20)
    with pytest.raises(AssertionError, match=re.escape("expected 0..5")):
        stream_detail(batches, expected=6, warmups=2, rows_per_batch=10)

    def run(round_no: int, error: str | None = None) -> Timing:
        return Timing(
            "postgres", "stream-1k", "write_xa", round_no, False, 30, None if error else seconds,
            error, {} if error else detail,
        )  # fmt: skip

    (summary,) = summarise_streams([run(1), run(2), run(3, "boom")], {"stream-1k"})
    assert summary.seconds == [2.5, 2.5] and summary.failures == 1
    assert summary.batch_ms == [500.0] * 6  # the timed batches of both good queries
    assert summary.batches_per_second == pytest.approx(1.2)
    assert summary.median_write_ms == 250


def test_transaction_workloads_parse_and_are_in_the_default_and_quick_runs():
    small, large = parse_workloads(["tx"], partitions=4)
    assert (small.name, small.rows, small.partitions, small.tables) == ("tx-small-1k", 1000, 2, 2)
    assert (small.transaction, small.repetitions) == ("small", SMALL_CALLS)
    assert (large.name, large.rows, large.partitions) == ("tx-large-500k", 500_000, 4)
    assert (large.transaction, large.repetitions, large.tables) == ("large", None, 2)
    assert parse_workloads(["narrow-1k"], 4)[0].tables == 1
    assert "tx" in DEFAULT_WORKLOADS
    quick = parse_args(["--quick"]).workload_specs
    assert [w.transaction for w in quick if w.transaction] == ["small", "large"]
    # A smoke run: one round of each transaction workload, no warm-up.
    assert all((w.repetitions, w.warmups) == (1, 0) for w in quick if w.transaction)
    assert parse_args(["--workloads", "tx-small-1k"]).workload_specs[0].repetitions == SMALL_CALLS
    with pytest.raises(ValueError, match="at least one row"):
        parse_workloads(["tx-large-0"], 4)


def _tx_run(workload: str, contender: str, seconds: float | None, branches: int) -> Timing:
    detail = {"writes": [{"branches": branches}, {"branches": branches}]}
    return Timing(
        "mariadb", workload, contender, 2, False, 2000, seconds,
        None if seconds else "boom", detail if seconds else {},
    )  # fmt: skip


def test_transaction_report_has_the_ratios_and_their_targets():
    workloads = {w.name: w.__dict__ for w in parse_workloads(["tx-small-1k", "tx-large-10k"], 4)}
    timings = [
        _tx_run("tx-small-1k", "write_xa", 0.2, 1),
        _tx_run("tx-small-1k", "transaction", 0.1, 1),
        _tx_run("tx-large-10k", "write_xa", 1.0, 1),
        _tx_run("tx-large-10k", "transaction_per_branch", 1.05, 4),
        _tx_run("tx-large-10k", "transaction", 1.5, 4),
        _tx_run("tx-large-10k", "transaction", None, 4),
    ]
    text = "\n".join(transaction_lines(timings, workloads))
    assert "| mariadb | tx-small-1k | transaction / write_xa per table | 0.5 | < 1 |" in text
    pair = "transaction per_branch_appends / write_xa per table"
    assert f"| mariadb | tx-large-10k | {pair} | 1.05 | ≤ 1.1 |" in text
    visibility = "transaction / transaction per_branch_appends"
    assert f"| mariadb | tx-large-10k | {visibility} | 1.43 |  |" in text
    assert f"| mariadb | tx-small-1k | {visibility}" not in text  # not measured: no ratio
    staged = "| mariadb | tx-large-10k | transaction (the default) | 4+4 | 1,500 | 1,500 | 1 |"
    assert staged in text


def test_a_recorded_command_names_no_folder_outside_the_checkout(tmp_path):
    from benchmarks.machine import shown_command

    outside = str(tmp_path / "out")
    assert shown_command(["--workloads", "tx", "--output-dir", outside]) == [
        "--workloads",
        "tx",
        "--output-dir",
        "<a folder outside the checkout>",
    ]
    assert shown_command([f"--output-dir={outside}"]) == [
        "--output-dir=<a folder outside the checkout>"
    ]
    inside = str(Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "streams")
    assert shown_command(["--output-dir", inside]) == ["--output-dir", "benchmarks/results/streams"]


def test_a_format_batch_report_sets_each_step_beside_the_raw_load_of_its_rows():
    from benchmarks.format_batch import STEPS, markdown

    counted = {
        "figures": {"statements": 30.0, "connections": 0.0, "write_commits": 5.0},
        "counters": {},
        "statements": {},
    }
    result = {
        "calls": 100,
        "median_ms": dict(zip(STEPS, (2.5, 0.1, 9.0, 0.2, 6.0), strict=True)),
        "median_total_ms": 17.8,
        "median_raw_load_ms": 4.5,
        "median_over_raw_ms": 13.1,
        "per_batch": {"format batch": counted, "raw load": counted},
    }
    report = {
        "load_average_start": [0.5, 0, 0],
        "load_average_end": [0.9, 0, 0],
        "rows_per_batch": 1000,
        "databases": {"postgres": result},
    }
    text = markdown(report)
    assert "over 100 batches" in text and "load average 0.50 at the start" in text
    assert "| postgres | 2.50 | 0.10 | 9.00 | 0.20 | 6.00 | 17.80 | 4.50 | 13.10 |" in text
    assert "| postgres | format batch | 30 | 0 | 5 |" in text


def test_history_workloads_parse_and_stay_out_of_the_quick_run():
    (long,) = parse_workloads(["history-10m"], partitions=4)
    assert (long.history, long.rows, long.partitions) == (10_000_000, 1000, 2)
    assert (long.repetitions, long.is_stream, long.transaction) == (SMALL_CALLS, False, None)
    assert parse_workloads(["narrow-1k"], 4)[0].history is None
    assert not any(w.history for w in parse_args(["--quick"]).workload_specs)
    with pytest.raises(ValueError, match="at least one job"):
        parse_workloads(["history-0"], 4)


def _history_run(what: str, seconds: float | None, round_no: int = 2, **kw) -> Timing:
    rows = {"batch": 10, "call": 1000}.get(what.partition(":")[0], 0)
    return Timing(
        "postgres", "history-10m", what, round_no, round_no == 1, rows, seconds,
        None if seconds else "boom", kw,
    )  # fmt: skip


def test_a_history_report_sets_each_journal_beside_the_other_with_its_target():
    """Medians of the timed runs only, the ratio against the fresh journal, and whether
    each target is met: the writes by ratio, the commands by the history's seconds."""
    from benchmarks.history_report import markdown_lines as history_lines

    fill = _history_run(
        "fill:history", 250.0, round_no=0, jobs=10_000_000, settle_seconds=31.5,
        journal_bytes=6 * 2**30, load_average_before_fill=[0.5, 0, 0],
        load_average_after_fill=[1.9, 0, 0], load_average_at_start=[1.2, 0, 0],
        load_average_at_end=[0.8, 0, 0],
    )  # fmt: skip
    timings = [
        fill,
        _history_run("batch:fresh", 9.0, round_no=1),  # a warm-up: not in the median
        _history_run("batch:fresh", 0.050),
        _history_run("batch:fresh", 0.060),
        _history_run("batch:history", 0.052),
        _history_run("batch:history", 0.058),
        _history_run("call:fresh", 0.100),
        _history_run("call:history", 0.120),
        _history_run("check:fresh", 0.1),
        _history_run("check:history", 2.5),
        _history_run("prune:fresh", 0.05),
        _history_run("prune:history", None),
    ]
    workloads = {w.name: w.__dict__ for w in parse_workloads(["history-10m"], 4)}
    meta = {
        "command": ["python", "-m", "benchmarks", "--workloads", "history-10m"],
        "machine": {"cpu_count": 2, "cpu_model": "AMD EPYC"},
    }
    text = "\n".join(history_lines(timings, workloads, meta))
    assert "holds 10,000,000 finished jobs" in text and "retention is set to 0" in text
    assert "Command: `python -m benchmarks --workloads history-10m` · 2 CPUs (AMD EPYC)" in text
    assert "| postgres | history-10m | 10,000,000 | 250.0 | 31.5 | 6,144 MiB |" in text
    fill.detail["settle_seconds"] = None  # MariaDB: nothing to vacuum
    shown = "\n".join(history_lines(timings, workloads, meta))
    assert "| postgres | history-10m | 10,000,000 | 250.0 | — | 6,144 MiB |" in shown
    assert "0.50 → 1.90 → 1.20 → 0.80 |" in text
    assert "| postgres | history-10m | a stream's batch (10 rows, write_xa" in text
    assert "| 55.0 ms | 55.0 ms | 1 | ≤ 1.1 | yes | 48-62 / 50-60 | 1 + 2 | 0 |" in text
    assert "| 100.0 ms | 120.0 ms | 1.2 | ≤ 1.1 | **no** | — / — | 0 + 1 | 0 |" in text
    assert "| `xasink check` | 0.100 s | 2.500 s | 25 | history < 2 s | **no** |" in text
    prune = "| `xasink prune --older-than 3650 --dry-run` | 0.050 s | failed | — |"
    assert prune + "  |  | — / — | 0 + 1 | 1 |" in text
    assert "`xasink jobs" not in text  # not measured: no row


def _order_run(
    contender: str, seconds: float | None, commit: float = 0.0, apply: float = 0.0, **kw
) -> Timing:
    detail = {"commit_seconds": commit, "steps": {"finish": apply}, "branches": 4, "stale": 0}
    return Timing(
        "postgres", "order-upsert", contender, kw.get("round_no", 2), kw.get("round_no") == 1,
        1000, seconds, None if seconds else "boom", detail | kw.get("detail", {}),
    )  # fmt: skip


def test_an_order_report_sets_each_write_beside_todays_with_the_ratios():
    """Medians and middle halves of the timed runs only (no warm-up, no failed run), each
    write's ratio to the table without the order column, and the stale count it reported."""
    from benchmarks.order_cost import markdown, summarise

    stale = {"detail": {"stale": 1000}}
    timings = [
        _order_run("today", 9.0, 5.0, 5.0, round_no=1),  # the warm-up: in no median
        *(_order_run("today", s, c, a) for s, c, a in [(2.0, 0.4, 0.3), (2.2, 0.5, 0.4)]),
        _order_run("today", 2.4, 0.6, 0.5),
        *(_order_run("ordered", s, c, a) for s, c, a in [(2.2, 0.5, 0.4), (2.4, 0.6, 0.5)]),
        _order_run("ordered", 2.6, 0.7, 0.6),
        *(_order_run("stale", s, 0.3, 0.2, **stale) for s in (1.9, 2.0, 2.1)),
        _order_run("stale", None),
    ]
    summary = summarise(timings)
    assert summary["today"]["total"] == {
        "median": 2.2, "q1": pytest.approx(2.1), "q3": pytest.approx(2.3),
        "samples": [2.0, 2.2, 2.4],
    }  # fmt: skip
    assert summary["ordered"]["over_today"]["commit"] == pytest.approx(1.2)
    assert summary["stale"]["failures"] == 1 and summary["stale"]["stale"] == 1000
    report = {
        "rows": 1000,
        "partitions": 4,
        "warmups": 1,
        "rounds": 3,
        "command": ["python", "-m", "benchmarks.breakdown", "order", "--rows", "1000"],
        "cpu": "AMD EPYC",
        "cpu_count": 2,
        "load_average_start": [1.5, 0, 0],
        "load_average_end": [2.25, 0, 0],
        "databases": {"postgres": {"upsert": summary}},
    }
    text = markdown(report)
    assert "upsert and merge of 1,000 rows" in text and "1 warm-up + 3 timed rounds" in text
    assert "load average 1.50 at the start, 2.25 at the end; 2 CPUs (AMD EPYC)" in text
    assert "Command: `python -m benchmarks.breakdown order --rows 1000`" in text
    today = "| postgres | upsert | today: no order column | 2.20 (2.10-2.30) | 0.50 (0.45-0.55)"
    assert today + " | 0.40 (0.35-0.45) | 1.00 | 1.00 | 1.00 | 0 |" in text
    ordered = "| postgres | upsert | ordered: seq stored, every change newer | 2.40 (2.30-2.50)"
    assert ordered + " | 0.60 (0.55-0.65) | 0.50 (0.45-0.55) | 1.09 | 1.20 | 1.25 | 0 |" in text
    assert "| 0.91 | 0.60 | 0.50 | 1,000 |" in text
    assert "postgres upsert stale: 1 failed run(s): boom" in text


def test_an_order_write_expects_its_tables_contents_and_resets_them_on_the_server():
    from benchmarks.order_cost import OrderWrite, reset_sql

    def write(name: str, mode: str, ordered: bool, older: bool) -> OrderWrite:
        return OrderWrite(name, mode, "t", ordered, None, older)

    # Merge deletes every tenth id (ids 0, 10, ... 990 of 1,000) unless they are all older.
    assert write("today", "merge", False, False).expected(1000) == {
        "rows": 900, "old_rows": 0, "seq": None, "stale": 0,
    }  # fmt: skip
    assert write("ordered", "merge", True, False).expected(1001)["rows"] == 900
    assert write("ordered", "upsert", True, False).expected(1000)["seq"] == 2
    assert write("stale", "merge", True, True).expected(1000) == {
        "rows": 1000, "old_rows": 1000, "seq": 1, "stale": 1000,
    }  # fmt: skip
    pg = reset_sql("postgres", "t", True, 1000)
    assert pg[0] == "TRUNCATE TABLE t" and "generate_series(0, 999)" in pg[1]
    assert "INSERT INTO t (id, name, v, seq) SELECT g, 'old', -1, 1" in pg[1]
    maria = reset_sql("mariadb", "t", False, 1000)
    assert maria[1] == "INSERT INTO t (id, name, v) SELECT seq, 'old', -1 FROM seq_0_to_999"
    assert maria[2] == "ANALYZE TABLE t"


def _floor_run(write_xa: float, collect: float, foreach: float, floor: float) -> dict:
    """A run's latest.json as the floor command reads it: timings and stream summaries."""

    def timing(contender: str, seconds: float, warmup: bool = False) -> dict:
        return {
            "database": "postgres",
            "workload": "small-1k",
            "contender": contender,
            "warmup": warmup,
            "error": None,
            "seconds": seconds,
        }

    return {
        "timings": [
            timing("write_xa", 9.0, warmup=True),  # a warm-up never counts
            timing("write_xa", write_xa),
            timing("write_xa", write_xa),
            timing("arrow_collect", collect),
        ],
        "stream_summary": [
            {
                "database": "postgres",
                "workload": "stream-1k",
                "contender": c,
                "batches_per_second": r,
            }
            for c, r in (("write_xa", foreach), ("collect_load", floor))
        ],
    }


def test_the_floor_command_gives_each_runs_ratio_its_median_and_spread():
    """Every ratio is taken within one run; a bound must hold in every run, and a run
    without the figure fails it rather than passing unseen."""
    from benchmarks.floor import summarise

    runs = [_floor_run(0.11, 0.10, 9.6, 10.0), _floor_run(0.13, 0.10, 9.0, 10.0)]
    rows = {r["target"]: r for r in summarise(runs, ["postgres"])}
    small = rows["1,000-row write_xa call time / collect of the frame"]
    assert small["runs"] == pytest.approx([1.1, 1.3])
    assert (small["min"], small["max"]) == pytest.approx((1.1, 1.3))
    assert small["median"] == pytest.approx(1.2)
    assert small["every_run_met"] is False  # 1.3 > 1.15
    stream = rows["foreach_batch batches/s / collect, then raw bulk load"]
    assert stream["runs"] == pytest.approx([0.96, 0.9])
    assert stream["every_run_met"] is False
    missing = rows["transaction of two writes time / the two writes apart"]
    assert missing["runs"] == [None, None] and missing["every_run_met"] is False


def test_streams_together_compare_xasinks_growth_with_the_floors():
    """Growth is the median call together over the median call alone, per sink; the
    floor command holds xasink's growth to the collect-only floor's."""
    from benchmarks.floor import TOGETHER, summarise
    from benchmarks.together import _growth

    growth = _growth(
        {
            "write_xa": {"apart": [40.0, 50.0, 60.0], "together": [70.0, 75.0, 80.0]},
            "stream_collect": {"apart": [30.0], "together": [45.0]},
        }
    )
    assert growth["write_xa"]["growth"] == pytest.approx(1.5)
    assert growth["stream_collect"]["growth"] == pytest.approx(1.5)
    run = {"timings": [], "stream_summary": [], "together": {"databases": {"postgres": growth}}}
    (row,) = [r for r in summarise([run], ["postgres"]) if r["target"] == TOGETHER]
    assert row["runs"] == pytest.approx([1.0]) and row["every_run_met"] is True
