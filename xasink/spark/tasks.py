"""Where a branch meets Spark: the mapInArrow function, the data source task's entry, the
driver's own write of a small collected frame, and the message schema they report in."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa
from pyspark import TaskContext

from ..driver.decision import phase_one_failed
from ..errors import WriteError
from ..executor.branch import write_rows
from ..executor.contract import BranchReport, WritePlan
from ..protocol.sessions import set_jar_locator
from ..runtime.jvm import keep_fault_handlers
from ..runtime.timing import step
from .session import job_label, shipped_copy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame

#: A task's XA sessions load the JDBC driver from the jars the driver shipped with the job
#: (xasink.spark.session.ship_jars): every task runs through this module.
set_jar_locator(shipped_copy)

MESSAGE_SCHEMA = pa.schema(
    [
        ("partition", pa.int32()),
        ("attempt", pa.int64()),
        ("xid", pa.string()),
        ("rows", pa.int64()),
        ("peak_rss_kb", pa.int64()),
        ("path", pa.string()),
        ("problem", pa.string()),
    ]
)


MESSAGE_DDL = (
    "partition int, attempt long, xid string, rows long, peak_rss_kb long, path string, "
    "problem string"
)


def write_partition(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The mapInArrow function: write this partition into one prepared branch (the columns
    named back where they crossed by position, see `_crossing`)."""
    names = list(plan.columns)
    if _crossing(names) != names:
        batches = (pa.RecordBatch.from_arrays(b.columns, names=names) for b in batches)
    report = write_task(plan, batches)
    yield pa.RecordBatch.from_pylist([dataclasses.asdict(report)], schema=MESSAGE_SCHEMA)


def task_context() -> TaskContext:
    """This Spark task's context (xasink's partition writers run nowhere else)."""
    context = TaskContext.get()
    if context is None:
        raise WriteError("xasink's partition writer must run inside a Spark task.")
    return context


def write_task(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> BranchReport:
    """Write this task's rows into one prepared branch (none if it has no rows)."""
    context = task_context()
    keep_fault_handlers()  # this worker's earlier task may have started the JVM
    partition = plan.partition_base + context.partitionId()
    return write_rows(plan, batches, partition, context.taskAttemptId(), context.attemptNumber())


def write_from_driver(plan: WritePlan, df: DataFrame) -> BranchReport:
    """A small DataFrame, collected as Arrow and written by the driver itself as partition
    0's only attempt: no Python task, no worker connection. The rows arrive as the batches a
    mapInArrow task would get; nothing is written until all of them are here, so a failed
    Spark task is retried by Spark before any branch opens."""
    report = write_rows(plan, iter(collect_small_frame(df)), plan.partition_base, 0, 0)
    return dataclasses.replace(report, peak_rss_kb=0)  # no worker ran


def write_branches(df: DataFrame, plan: WritePlan, on_driver: bool) -> list[Any]:
    """Phase 1: the Spark job whose tasks prepare one branch per partition, or the
    driver's own write of a small frame; the partitions' messages."""
    label = f"xasink write into {plan.target} (job {plan.job_id})"
    try:
        with (
            step("phase 1 (Spark job)"),
            job_label(df.sparkSession, label, f"xasink-{plan.job_id}"),
        ):
            if on_driver:
                return [write_from_driver(plan, df)]
            writer = functools.partial(write_partition, plan)
            if _crossing(df.columns) != df.columns:
                df = df.toDF(*_crossing(df.columns))
            return df.mapInArrow(writer, MESSAGE_DDL).collect()
    except Exception as exc:
        raise phase_one_failed(plan, exc, on_driver) from exc


def _crossing(names: list[str]) -> list[str]:
    """The column names the frame crosses mapInArrow with: its own, or, when one holds a
    backtick or a dot, positional ones (PySpark's mapInArrow refers to every column as
    `df[name]`, unquoted, and misreads those). toDF renames in the JVM, parsing nothing."""
    if not any("`" in n or "." in n for n in names):
        return names
    return [f"_xasink_{i}" for i in range(len(names))]


#: The collected batches are merged up to this size: each batch costs the loader a fixed
#: share (an encoding pass, a crossing into Java), and a small frame arrives in as many
#: batches as it has partitions, often of a few hundred rows each.
MERGED_BATCH_BYTES = 1 << 20


def collect_small_frame(df: DataFrame) -> list[pa.RecordBatch]:
    """A small DataFrame's rows in the driver, in partition order, in batches of up to
    MERGED_BATCH_BYTES (one larger batch stays whole). Classic PySpark only, as is every
    driver-side write (`frame.writes_on_driver`)."""
    return merged(cast("ClassicDataFrame", df)._collect_as_arrow())  # toArrow() less its cast


def merged(batches: list[pa.RecordBatch], limit: int = MERGED_BATCH_BYTES) -> list[pa.RecordBatch]:
    """Consecutive `batches` joined into as few as fit `limit` bytes each, in order."""
    groups: list[list[pa.RecordBatch]] = []
    size = 0
    for batch in batches:
        if not groups or size + batch.nbytes > limit:
            groups.append([])
            size = 0
        groups[-1].append(batch)
        size += batch.nbytes
    joined: list[pa.RecordBatch] = []
    for group in groups:
        whole = pa.Table.from_batches(group).combine_chunks() if len(group) > 1 else None
        joined.extend(group if whole is None else whole.to_batches() or group[:1])
    return joined
