"""The DataFrame side of a job: how many branches it writes, whether the driver writes a
small frame itself, and the frame the branches read (columns in the load table's order and
wire shape, spread over the branches)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from ..dialects import Dialect
from ..errors import ConfigurationError
from ..executor.contract import WritePlan
from ..tables.columns import TableColumn
from ..tables.modes import ModeOptions
from ..tables.types import needs_spark_conversion
from .session import default_parallelism, estimated_bytes, partition_count
from .wire import to_wire

log = logging.getLogger("xasink")


def branch_count(
    df: DataFrame, max_branches: int | Literal["auto"] | None, options: ModeOptions
) -> tuple[int, bool]:
    """How many branches the job writes (see `shape_frame`), and whether exactly that many
    (False: at most; Spark Connect cannot tell a DataFrame's partition count).

    Each Python task costs tens of milliseconds and each branch holds a prepared slot, so
    200 tiny partitions are cheaper written as a few larger branches (like Spark JDBC's
    `numPartitions`). "auto" means twice Spark's default parallelism; None keeps every
    partition. Keyed modes repartition by key into that many branches."""
    partitions = partition_count(df)
    if max_branches is None:
        if partitions is None:
            raise ConfigurationError(
                "max_branches=None keeps every partition, but Spark Connect cannot tell how "
                "many there are: pass WriterProperties(max_branches=<n>) (or 'auto')."
            )
        return partitions, True
    if max_branches == "auto":
        limit = 2 * default_parallelism(df.sparkSession)
    elif isinstance(max_branches, int) and max_branches >= 1:
        limit = max_branches
    else:
        raise ConfigurationError(
            "WriterProperties(max_branches=...) must be a positive integer, 'auto' or None."
        )
    if options.routed:
        return limit, True
    if partitions is None:
        return limit, False
    return min(partitions, limit), True


def writes_on_driver(df: DataFrame, limit: int) -> bool:
    """Whether the driver writes `df` itself, in one branch (xasink.spark.tasks.write_from_driver):
    Spark estimates it at most `limit` bytes. Never under Spark Connect (no estimate, no
    Arrow collect into this process)."""
    if limit <= 0:
        return False
    size = estimated_bytes(df)
    return size is not None and size <= limit


def shape_frame(
    df: DataFrame,
    plan: WritePlan,
    options: ModeOptions,
    dialect: Dialect,
    columns: Sequence[TableColumn],
    branches: int,
    on_driver: bool = False,
) -> DataFrame:
    """The DataFrame the writers read: the written columns then the steering ones, named as
    the load table names them, in the shape each column's type takes on the wire, spread
    over `branches` partitions (by key hash for keyed modes, so two branches never hold the
    same key), or left as it is for the driver's one branch."""
    names = list(df.columns)
    positions = [names.index(c) for c in [*options.written(names), *options.steering]]
    types = [df.schema.fields[i].dataType for i in positions]
    converts = any(
        needs_spark_conversion(t, dialect.name, c) for t, c in zip(types, columns, strict=False)
    )
    # Spark analyses every DataFrame operation on the driver at once (10-20 ms each here):
    # none when the frame already has the writers' shape, else one projection.
    if converts or positions != list(range(len(names))) or list(plan.columns) != names:
        scratch = [f"_xasink_{i}" for i in range(len(names))]  # names select() cannot misparse
        wire = to_wire([F.col(scratch[i]) for i in positions], types, dialect.name, columns)
        aliased = (c.alias(n) for c, n in zip(wire, plan.columns, strict=True))
        df = df.toDF(*scratch).select(*aliased)
    if on_driver:
        # One collect task per partition: 200 tiny shuffle partitions cost more as tasks
        # than their rows do, so many partitions are read by one task (no shuffle).
        many = 2 * default_parallelism(df.sparkSession)
        partitions = partition_count(df)
        return df.coalesce(1) if partitions is not None and partitions > many else df
    if options.routed:
        assert plan.apply is not None
        return df.repartition(branches, *(F.col(_escaped(k)) for k in plan.apply.key))
    partitions = partition_count(df)
    if partitions is None or partitions > branches:
        log.info("xasink: coalescing into at most %d branches", branches)
        return df.coalesce(branches)
    return df


def _escaped(column: str) -> str:
    return "`" + column.replace("`", "``") + "`"
