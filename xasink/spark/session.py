"""What xasink asks of the Spark session, in one place, for classic PySpark and Spark Connect.

A Spark Connect client has no SparkContext, no JVM gateway and no RDD API. Everything here
works through what both offer (`spark.conf`, DataFrame operations, job tags), and falls back
to the classic API only where that API exists.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pyspark import SparkFiles, TaskContext

from ..errors import PreflightError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("xasink")

#: Branches per job under Spark Connect with max_branches="auto" when the session tells
#: neither `spark.default.parallelism` nor a local master's cores.
CONNECT_DEFAULT_PARALLELISM = 4


def is_connect(spark: SparkSession) -> bool:
    """Whether `spark` is a Spark Connect client session.

    Told by the class's module, without importing pyspark's Connect client: that import
    starts concurrent.futures, which a write running while the interpreter exits must not
    be the first to do."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def conf(spark: SparkSession, key: str) -> str | None:
    """A Spark configuration value, or None when unset."""
    try:
        value = spark.conf.get(key, None)
    except Exception:  # some deployments refuse to show certain keys
        return None
    return None if value is None else str(value)


#: (session, key) -> a setting fixed when the session's context started (`static_conf`).
_static: dict[tuple[int, str], str | None] = {}


def static_conf(spark: SparkSession, key: str) -> str | None:
    """A setting fixed for the session's life (an executor's, read when its context
    started: setting it later changes nothing), read once per session. Every read through
    PySpark records the caller's stack, which costs a small write a few milliseconds."""
    cached = (id(spark), key)
    if cached not in _static:
        _static[cached] = conf(spark, key)
    return _static[cached]


def partition_count(df: DataFrame) -> int | None:
    """The DataFrame's partition count; None under Spark Connect, which cannot tell it
    without running a job."""
    if is_connect(df.sparkSession):
        return None
    # The plan's own RDD: what `df.rdd` wraps, without that conversion to Python rows, which
    # costs a micro-batch's new plan 3 ms more. Either runs the jobs of the plan's shuffle
    # stages (under adaptive execution), which the write's own job then reuses.
    return int(df._jdf.queryExecution().toRdd().getNumPartitions())


def estimated_bytes(df: DataFrame) -> int | None:
    """Spark's estimate of the DataFrame's size (its optimizer's statistics), in bytes; None
    where it cannot be had cheaply (Spark Connect, or no estimate)."""
    if is_connect(df.sparkSession):
        return None
    try:
        size = df._jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
        return size if isinstance(size, int) else int(str(size.toString()))  # py4j: either
    except Exception as exc:  # an estimate is an optimisation, never a reason to fail
        log.debug("xasink: no size estimate for the DataFrame: %s", type(exc).__name__)
        return None


def default_parallelism(spark: SparkSession) -> int:
    """Spark's default parallelism (under Connect: the setting, a local master's cores, or
    CONNECT_DEFAULT_PARALLELISM)."""
    if not is_connect(spark):
        return max(1, int(spark.sparkContext.defaultParallelism))
    setting = conf(spark, "spark.default.parallelism")
    if setting and setting.isdigit():
        return max(1, int(setting))
    master = conf(spark, "spark.master") or ""
    match = re.fullmatch(r"local\[(\d+)(?:,\s*\d+)?\]", master)
    if match:
        return max(1, int(match.group(1)))
    return CONNECT_DEFAULT_PARALLELISM


@contextlib.contextmanager
def job_label(spark: SparkSession, text: str, tag: str) -> Iterator[None]:
    """Name the Spark jobs run inside: the description in the classic UI, or an operation
    tag under Connect (`spark.interruptTag(tag)` stops them)."""
    if is_connect(spark):
        try:
            spark.addTag(tag)
        except Exception:
            yield
            return
        try:
            yield
        finally:
            spark.removeTag(tag)
        return
    context = spark.sparkContext
    previous = context.getLocalProperty("spark.job.description")
    context.setJobDescription(text)
    try:
        yield
    finally:
        # None clears the description (Spark's setLocalProperty), though PySpark's types say str.
        context.setJobDescription(cast(str, previous))


_shipped: dict[int, set[str]] = {}
_shipping = threading.Lock()


def ship_jars(spark: SparkSession, jars: Sequence[str]) -> None:
    """Send the driver's JDBC jars with the job, so executors without them can load the
    driver: SparkContext.addFile (classic) or session artifacts (Connect). Executors find
    them with `shipped_copy`. Each jar is shipped once per session."""
    with _shipping:
        done = _shipped.setdefault(id(spark), set())
        for jar in jars:
            if jar in done:
                continue
            try:
                if is_connect(spark):
                    spark.addArtifacts(jar, file=True)
                else:
                    spark.sparkContext.addFile(jar)
            except Exception as exc:  # e.g. the same name already shipped from elsewhere
                log.info("xasink: %s not shipped to executors (%s)", Path(jar).name, exc)
            done.add(jar)


def shipped_copy(jar: str) -> str | None:
    """On an executor, this task's copy of a jar the driver shipped (None outside a task,
    or when it was not shipped)."""
    if TaskContext.get() is None:
        return None
    try:
        path = Path(SparkFiles.get(Path(jar).name))
    except Exception:
        return None
    return str(path) if path.is_file() else None


#: The local property that names a streaming query: stable across restarts from one
#: checkpoint, new after the checkpoint is reset. Set on the stream's thread (so inside a
#: classic foreachBatch call) and on every task of the stream.
QUERY_ID_PROPERTY = "sql.streaming.queryId"


def streaming_query_id(spark: SparkSession) -> str | None:
    """The id of the streaming query running on this thread (a foreachBatch call); None
    outside a stream and under Spark Connect, which has no local properties."""
    if is_connect(spark):
        return None
    try:
        value = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception:  # a session without a SparkContext here
        return None
    return str(value) if value else None


def task_property(name: str) -> str | None:
    """A local property of the running task (e.g. `streaming.sql.batchId`)."""
    context = TaskContext.get()
    return None if context is None else context.getLocalProperty(name)


__all__ = [
    "conf",
    "default_parallelism",
    "is_connect",
    "job_label",
    "partition_count",
    "ship_jars",
    "shipped_copy",
    "streaming_query_id",
    "task_property",
]


#: Below this, the JVM that xasink starts inside a Python worker cannot start.
MIN_PYSPARK_MEMORY_MB = 2048

PYSPARK_MEMORY = "spark.executor.pyspark.memory"


def _megabytes(size: str) -> float | None:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", size.lower())
    if not match:
        return None
    scale = {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 2**20}[match.group(2)]
    return float(match.group(1)) * scale


def check_spark_conf(conf: dict[str, str]) -> None:
    """`spark.executor.pyspark.memory` caps the worker's address space; a JVM needs room."""
    value = conf.get(PYSPARK_MEMORY)
    size = _megabytes(value) if value else None
    if size is not None and size < MIN_PYSPARK_MEMORY_MB:
        raise PreflightError(
            f"spark.executor.pyspark.memory is {value}: it limits each Python worker's address "
            "space, and the JVM that xasink starts inside the worker cannot start under "
            f"{MIN_PYSPARK_MEMORY_MB // 1024}g. Raise it to at least "
            f"{MIN_PYSPARK_MEMORY_MB // 1024}g, or unset it."
        )
