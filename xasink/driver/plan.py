"""Turn a call into a job: how many branches, what they load into, and the DataFrame they read.

Everything here runs on the driver before any branch opens, including the staging table's
DDL (DDL cannot run inside an XA branch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..dialects import Dialect
from ..errors import ConfigurationError
from ..executor.branch import WritePlan
from ..protocol.journal import Journal
from ..runtime.jdbc import execute
from ..spark.session import default_parallelism, estimated_bytes, partition_count
from ..spec import ConnectionSpec, TableRef
from ..target.columns import TableColumn, describe_table, unique_keys
from ..target.fit import table_columns
from ..target.staging import ApplyPlan, ModeOptions, create_stage_sql, stage_name

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

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
                "many there are: pass max_branches=<n> (or 'auto')."
            )
        return partitions, True
    if max_branches == "auto":
        limit = 2 * default_parallelism(df.sparkSession)
    elif isinstance(max_branches, int) and max_branches >= 1:
        limit = max_branches
    else:
        raise ConfigurationError("max_branches must be a positive integer, 'auto' or None.")
    if options.routed:
        return limit, True
    if partitions is None:
        return limit, False
    return min(partitions, limit), True


#: write_xa's default `driver_write_bytes`: DataFrames Spark estimates at most this large are
#: written by the driver. A Python task costs 100-200 ms per call, more than Spark JDBC's whole
#: call for 1,000 rows; collecting a few MB as Arrow costs a fraction of that.
DRIVER_WRITE_BYTES = 4 << 20


def writes_on_driver(df: DataFrame, limit: int) -> bool:
    """Whether the driver writes `df` itself, in one branch (xasink.writer.write_from_driver):
    Spark estimates it at most `limit` bytes. Never under Spark Connect (no estimate, no
    Arrow collect into this process)."""
    if limit <= 0:
        return False
    size = estimated_bytes(df)
    return size is not None and size <= limit


def one_stream(conn: Any, dialect: Dialect, table: TableRef, options: ModeOptions) -> bool:
    """Whether an append should load through one branch: the server loads one stream into a
    table without a unique key faster than several (`Dialect.one_stream_without_key`)."""
    if options.staged or not dialect.one_stream_without_key:
        return False
    return not unique_keys(conn, dialect, table)


def apply_plan_for(
    options: ModeOptions,
    target: TableRef,
    frame_columns: Sequence[str],
    targets: Sequence[TableColumn],
    job_id: str,
    journal: Journal,
) -> ApplyPlan | None:
    """A staged mode's plan, in the table's spelling of every column; None for append."""
    if not options.staged:
        return None
    spelled = dict(zip(options.written(frame_columns), (c.name for c in targets), strict=True))
    return ApplyPlan(
        mode=options.mode,
        target=target,
        stage=stage_name(job_id, journal.schema),
        columns=tuple(spelled.values()),
        key=tuple(spelled[k] for k in options.key),
        ordered=options.order is not None,
        op_values=options.op_values,
        op_fold=options.op_fold,
        op_skip=options.op_skip,
    )


def load_target(
    schema: StructType,
    conn: Any,
    spec: ConnectionSpec,
    dialect: Dialect,
    target: TableRef,
    targets: Sequence[TableColumn],
    options: ModeOptions,
    apply_plan: ApplyPlan | None,
) -> tuple[TableRef, list[TableColumn]]:
    """The table the branches load and its columns: the target itself (append), or the
    job's staging table, created here with the target's column types."""
    if apply_plan is None:
        return target, list(targets)
    from ..target.types import column_ddl_type

    steering = [
        column_ddl_type(dialect.name, name, schema[frame].dataType, key=False)
        for name, frame in zip(
            apply_plan.stage_columns[len(targets) :], options.steering, strict=True
        )
    ]
    execute(conn, create_stage_sql(dialect, apply_plan, [c.sql_type for c in targets] + steering))
    names = table_columns(conn, dialect, apply_plan.stage, spec.redact)
    return apply_plan.stage, describe_table(conn, dialect, apply_plan.stage, names)


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
    from pyspark.sql import functions as F

    from ..target.types import needs_spark_conversion, to_wire

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
