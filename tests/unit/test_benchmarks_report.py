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
    staged = "| mariadb | tx-large-10k | transaction (appends staged) | 4+4 | 1,500 | 1,500 | 1 |"
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
