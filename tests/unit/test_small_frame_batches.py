"""The driver's collected small frame is merged into few batches before its one branch
(xasink.spark.tasks.merged): the rows, their order and the size bound."""

from __future__ import annotations

import pyarrow as pa

from xasink.spark.tasks import merged


def batches(*sizes: int) -> list[pa.RecordBatch]:
    start, out = 0, []
    for size in sizes:
        out.append(pa.record_batch({"id": pa.array(range(start, start + size), pa.int64())}))
        start += size
    return out


def ids(result: list[pa.RecordBatch]) -> list[int]:
    return [v for batch in result for v in batch.column(0).to_pylist()]


def test_small_batches_become_one_with_every_row_in_order():
    result = merged(batches(500, 500, 3))
    assert [b.num_rows for b in result] == [1003]
    assert ids(result) == list(range(1003))


def test_no_merged_batch_exceeds_the_bound_and_a_larger_one_stays_whole():
    parts = batches(10, 10, 10, 1000, 10)
    bound = parts[0].nbytes * 2  # two small batches fit, a third does not
    result = merged(parts, limit=bound)
    assert [b.num_rows for b in result] == [20, 10, 1000, 10]
    assert ids(result) == list(range(1040))


def test_nothing_and_empty_batches():
    assert merged([]) == []
    empty = batches(0, 0)
    assert [b.num_rows for b in merged(empty)] == [0]
