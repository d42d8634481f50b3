"""The benchmark harness's stream workload and its report numbers (no Spark, no server)."""

from __future__ import annotations

import re

import pytest

from benchmarks.measure import Timing
from benchmarks.run import DEFAULT_WORKLOADS, QUICK_WORKLOADS
from benchmarks.streams import batches_from_progress, stream_detail, summarise_streams
from benchmarks.workloads import parse_workloads


def test_stream_workloads_parse_and_are_in_the_default_run():
    (stream,) = parse_workloads(["stream-1k"], partitions=4)
    assert (stream.rows, stream.partitions, stream.is_stream) == (1000, 1, True)
    assert stream.total_batches == stream.batches + stream.warmup_batches
    assert stream.warmup_batches > 0 and stream.warmups == 0
    assert not parse_workloads(["narrow-1k"], 4)[0].is_stream
    assert "stream-1k" in DEFAULT_WORKLOADS and "stream-1k" not in QUICK_WORKLOADS
    with pytest.raises(ValueError, match="at least one row"):
        parse_workloads(["stream-0"], 4)


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
