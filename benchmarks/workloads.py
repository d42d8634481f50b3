"""What is written: row shapes, sizes and partitioning, and the matching table DDL.

Every workload is generated from ``spark.range`` so that it costs no input I/O and
every contender gets the very same cached rows.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

Shape = Literal["narrow", "wide"]
Kind = Literal["postgres", "mariadb"]

#: SQL type of each logical column type, per database.
SQL_TYPES: dict[Kind, dict[str, str]] = {
    "postgres": {
        "long": "BIGINT",
        "int": "INTEGER",
        "double": "DOUBLE PRECISION",
        "string": "VARCHAR(64)",
        "timestamp": "TIMESTAMPTZ",
        "date": "DATE",
    },
    "mariadb": {
        "long": "BIGINT",
        "int": "INT",
        "double": "DOUBLE",
        "string": "VARCHAR(64)",
        "timestamp": "DATETIME(6)",
        "date": "DATE",
    },
}

#: The tiny workload: many small partitions, so the fixed cost per partition dominates.
TINY_PARTITIONS = 200
TINY_ROWS_PER_PARTITION = 100

#: The small workloads: many calls of a few rows, so the fixed cost per *call* dominates
#: (preflight, journal, recovery scan, job row, decision). `small` means both sizes.
SMALL_ROWS = (1_000, 10_000)
SMALL_PARTITIONS = 2
#: Timed calls per contender (the median is taken) and untimed ones first, per size.
SMALL_CALLS = 15
SMALL_WARMUPS = 3

#: The stream workloads (`stream-<n>`: n rows per micro-batch): each query runs the warm-up
#: batches first (a new query's first batches pay for Python workers, JDBC classes and JIT),
#: then the timed ones. One query per contender per round.
STREAM_BATCHES = 30
STREAM_WARMUP_BATCHES = 5

#: The transaction workloads (`tx-small-<n>`, `tx-large-<n>`: n rows per write): one write
#: into each of `TX_TABLES` tables of one database, by one `xasink.transaction` or by one
#: write_xa call per table. `tx` means both, at the sizes below. Small writes are held by
#: the driver (one local transaction); large ones go through Spark tasks (two phases).
TX_TABLES = 2
TX_WORKLOADS = ("tx-small-1k", "tx-large-500k")
TxWrites = Literal["small", "large"]

#: The history workloads (`history-<n>`: a journal holding n finished jobs, against a fresh
#: one): their 1,000-row calls are the `small-1k` calls (`benchmarks/history_runs.py`
#: times the stream's batches and the commands by its own counts).
HISTORY_CALL_ROWS = 1_000

EPOCH_SECONDS = 1_700_000_000


@dataclass(frozen=True)
class ColumnSpec:
    """One generated column: its name, logical type and how it derives from ``id``."""

    name: str
    type: str
    expr: Callable[[Column], Column]


@dataclass(frozen=True)
class Workload:
    """A named row shape, row count and partition count.

    A stream workload (`batches` set) writes `rows` rows per micro-batch, in `partitions`
    partitions each, `warmup_batches` + `batches` micro-batches per query. A transaction
    workload (`transaction` set) writes `rows` rows into each of its `tables` per call.
    """

    name: str
    shape: Shape
    rows: int
    partitions: int
    #: Timed runs and warm-ups of each contender; None: the command line's.
    repetitions: int | None = None
    warmups: int | None = None
    #: Stream workloads only: timed micro-batches per query, and untimed ones before them.
    batches: int | None = None
    warmup_batches: int = 0
    #: Transaction workloads only: the size of every write, which decides its path.
    transaction: TxWrites | None = None
    #: History workloads only: the finished jobs written into the history journal.
    history: int | None = None

    @property
    def columns(self) -> list[ColumnSpec]:
        return narrow_columns() if self.shape == "narrow" else wide_columns()

    @property
    def is_stream(self) -> bool:
        return self.batches is not None

    @property
    def tables(self) -> int:
        """Tables written per call, `rows` rows each."""
        return TX_TABLES if self.transaction else 1

    @property
    def total_batches(self) -> int:
        """Micro-batches per query, warm-ups included (one source file each)."""
        return (self.batches or 0) + self.warmup_batches


def narrow_columns() -> list[ColumnSpec]:
    """Five columns: long, string, double, int, timestamp (like the tests' events)."""
    from pyspark.sql import functions as F

    return [
        ColumnSpec("id", "long", lambda i: i),
        ColumnSpec("name", "string", lambda i: F.concat(F.lit("name-"), i.cast("string"))),
        ColumnSpec("v", "double", lambda i: i * 0.5),
        ColumnSpec("n", "int", lambda i: (i % 1000).cast("int")),
        ColumnSpec("ts", "timestamp", lambda i: F.timestamp_seconds(i + F.lit(EPOCH_SECONDS))),
    ]


def wide_columns() -> list[ColumnSpec]:
    """Thirty columns: five each of long, int, double, string, timestamp and date."""
    from pyspark.sql import functions as F

    def group(k: int) -> list[ColumnSpec]:
        long_col = (
            ColumnSpec("id", "long", lambda i: i)
            if k == 0
            else ColumnSpec(f"l{k}", "long", lambda i: i * (k + 1) + k)
        )
        return [
            long_col,
            ColumnSpec(f"i{k}", "int", lambda i: ((i + k) % 100_000).cast("int")),
            ColumnSpec(f"d{k}", "double", lambda i: i * (0.25 + k)),
            ColumnSpec(
                f"s{k}",
                "string",
                lambda i: F.concat(F.lit(f"s{k}-"), F.hex(i * (k + 7)), F.lit("-x" * k)),
            ),
            ColumnSpec(
                f"t{k}",
                "timestamp",
                lambda i: F.timestamp_seconds(i + F.lit(EPOCH_SECONDS + k * 86_400)),
            ),
            ColumnSpec(
                f"dt{k}",
                "date",
                lambda i: F.date_add(
                    F.lit("2020-01-01").cast("date"), ((i + k) % 3650).cast("int")
                ),
            ),
        ]

    return [spec for k in range(5) for spec in group(k)]


_COUNT = re.compile(r"^(\d+)([km]?)$")


def parse_count(text: str) -> int:
    """'100k' → 100_000, '10m' → 10_000_000, '2500' → 2500."""
    match = _COUNT.match(text.lower())
    if not match:
        raise ValueError(f"not a row count: {text!r} (use e.g. 100k, 1m, 2500)")
    number, suffix = match.groups()
    return int(number) * {"": 1, "k": 1_000, "m": 1_000_000}[suffix]


def _count_name(rows: int) -> str:
    return f"{rows // 1000}k" if rows % 1000 == 0 else str(rows)


#: Names that stand for several workloads.
SHORTCUTS = {
    "small": tuple(f"small-{_count_name(rows)}" for rows in SMALL_ROWS),
    "tx": TX_WORKLOADS,
}


def parse_workloads(names: list[str], partitions: int) -> list[Workload]:
    """Each name's workloads, in order: `small` stands for small-1k and small-10k, `tx` for
    tx-small-1k and tx-large-500k."""
    chosen = [n for name in names for n in SHORTCUTS.get(name, (name,))]
    return [parse_workload(name, partitions) for name in dict.fromkeys(chosen)]


def parse_workload(name: str, partitions: int) -> Workload:
    """'tiny', 'small-<count>', 'stream-<count>' (rows per micro-batch), 'tx-small-<count>'
    or 'tx-large-<count>' (rows per write), 'history-<count>' (finished jobs in a journal's
    history), or '<narrow|wide>-<count>' such as 'narrow-1m'."""
    if name == "tiny":
        return Workload(
            "tiny", "narrow", TINY_PARTITIONS * TINY_ROWS_PER_PARTITION, TINY_PARTITIONS
        )
    if name.startswith("small-"):
        return _many_calls(name, parse_count(name.removeprefix("small-")))
    if name.startswith("stream-"):
        # One source file, so one partition, per micro-batch. No warm-up *queries*: every
        # query's own warm-up batches are excluded instead.
        rows = parse_count(name.removeprefix("stream-"))
        if rows < 1:
            raise ValueError(f"{name}: a micro-batch needs at least one row")
        return Workload(
            name,
            "narrow",
            rows,
            1,
            warmups=0,
            batches=STREAM_BATCHES,
            warmup_batches=STREAM_WARMUP_BATCHES,
        )
    if name.startswith(("tx-small-", "tx-large-")):
        # Small: a few calls' worth of rows, many calls, like `small`. Large: the bulk
        # workloads' partitions and the command line's rounds.
        writes: TxWrites = "small" if name.startswith("tx-small-") else "large"
        rows = parse_count(name.removeprefix(f"tx-{writes}-"))
        if rows < 1:
            raise ValueError(f"{name}: a write needs at least one row")
        if writes == "small":
            return _many_calls(name, rows, transaction=writes)
        return Workload(name, "narrow", rows, partitions, transaction=writes)
    if name.startswith("history-"):
        jobs = parse_count(name.removeprefix("history-"))
        if jobs < 1:
            raise ValueError(f"{name}: a history needs at least one job")
        return _many_calls(name, HISTORY_CALL_ROWS, history=jobs)
    shape, _, count = name.partition("-")
    if shape not in ("narrow", "wide") or not count:
        raise ValueError(
            f"unknown workload {name!r}: use tiny, small, small-<count>, stream-<count>, "
            "tx, tx-small-<count>, tx-large-<count>, history-<count>, narrow-<count> or "
            "wide-<count>"
        )
    rows = parse_count(count)
    return Workload(name, "narrow" if shape == "narrow" else "wide", rows, partitions)


def _many_calls(name: str, rows: int, **kind: Any) -> Workload:
    """A workload of many small calls, as `small`'s: its own number of calls and warm-ups."""
    return Workload(name, "narrow", rows, SMALL_PARTITIONS, SMALL_CALLS, SMALL_WARMUPS, **kind)


def build_dataframe(spark: SparkSession, workload: Workload, first_id: int = 0) -> DataFrame:
    """The workload's rows, ids first_id..first_id+rows-1, in exactly `workload.partitions`
    partitions."""
    from pyspark.sql import functions as F

    base = spark.range(first_id, first_id + workload.rows, numPartitions=workload.partitions)
    ident = F.col("id")
    return base.select(*[spec.expr(ident).alias(spec.name) for spec in workload.columns])


def table_ddl(kind: Kind, workload: Workload, table: str) -> str:
    """CREATE TABLE for the workload (no primary key: duplicates would show in counts)."""
    types = SQL_TYPES[kind]
    columns = ", ".join(f"{spec.name} {types[spec.type]}" for spec in workload.columns)
    return f"CREATE TABLE {table} ({columns})"
