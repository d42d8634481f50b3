"""The contenders, each a function that writes the whole DataFrame once.

Each returns a small dict of details worth keeping next to its timing (e.g. xasink's own
phase split). Truncating before and counting after are the caller's job and never timed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from . import rawload, xasink_calls

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from .databases import Database

#: Rows per JDBC batch, for Spark (its `batchsize` option) and xasink (its default) alike.
JDBC_BATCH_SIZE = 10_000


@dataclass
class Target:
    """Where and what one measurement writes."""

    db: Database
    table: str
    df: DataFrame
    csv: rawload.CsvBuffer | None
    rows: int
    #: PostgreSQL only: the same rows in binary COPY format, built by the server (untimed).
    pg_binary: bytes | None = None

    @property
    def tables(self) -> dict[str, int]:
        """Each table a run writes, and the rows it must hold afterwards."""
        return {self.table: self.rows}


def jdbc_properties(db: Database) -> dict[str, str]:
    """Spark JDBC's connection properties: batched, rewritten inserts (streams use them too)."""
    return {
        "user": db.server.user,
        "password": db.server.password,
        "driver": db.driver_class,
        "batchsize": str(JDBC_BATCH_SIZE),
        db.batch_rewrite_property: "true",
    }


def spark_jdbc(target: Target) -> dict[str, Any]:
    """Spark's own writer: ``df.write.jdbc``, append, batched and rewritten inserts."""
    db = target.db
    target.df.write.jdbc(db.jdbc_url, target.table, mode="append", properties=jdbc_properties(db))
    return {}


def write_xa(target: Target, **options: Any) -> dict[str, Any]:
    """xasink with its defaults (plus `options`): what a user gets from the README's call."""
    result = xasink_calls.write_xa(target.db, target.df, target.table, **options)
    if result.rows != target.rows:
        raise AssertionError(f"write_xa reported {result.rows} rows, expected {target.rows}")
    return {
        "prepare_seconds": result.prepare_seconds,
        "commit_seconds": result.commit_seconds,
        "xasink_total_seconds": result.total_seconds,
        "branches": result.partitions,
        "rolled_back_attempts": result.rolled_back_attempts,
    }


def _drain_batches(batches: Any) -> Any:
    for _ in batches:
        pass
    yield from ()


def arrow_floor(target: Target) -> dict[str, Any]:
    """No write at all: a no-op ``mapInArrow`` job over the same DataFrame. Spark→Arrow→
    Python worker is what any Python writer pays first, so write_xa's time over this one is
    what xasink itself adds (encoding, Java, the server's load, XA)."""
    target.df.mapInArrow(_drain_batches, target.df.schema).count()
    return {}


def arrow_collect(target: Target) -> dict[str, Any]:
    """No write: the DataFrame collected into the driver as Arrow batches, as write_xa's
    small-frame path collects it before its one transaction (a Spark job, no Python task)."""
    target.df._collect_as_arrow()
    return {}


def collect_load(target: Target) -> dict[str, Any]:
    """The floor that writes: the DataFrame collected as Arrow (as `arrow_collect`), then its
    rows loaded raw in one autocommit COPY / LOAD DATA on a connection held for the run
    (rawload.load_batches): no xasink, no XA, no journal, no exactly-once."""
    from .rawload import load_batches

    df = target.df
    loaded = load_batches(target.db, target.table, df._collect_as_arrow(), tuple(df.columns))
    return {"loaded": loaded}


def least_job(target: Target) -> dict[str, Any]:
    """No write, nothing returned: Spark's cheapest job over the same DataFrame (a count of
    its internal rows), the least any Spark writer pays per call for reading its rows."""
    target.df._jdf.queryExecution().toRdd().count()
    return {}


def recover_write_xa(target: Target) -> dict[str, Any]:
    """After a failed write_xa: let xasink resolve its own in-doubt branches on this table.

    Without this, a branch left prepared holds locks and every later run of the block
    would fail behind it. What recovery did is recorded with the failed run.
    """
    return recover_table(target.db, target.table)


def recover_table(db: Database, table: str) -> dict[str, Any]:
    """`xasink.recover` of one table with no grace: what a failed write_xa left is resolved."""
    return xasink_calls.recovered(db, table=table)


def raw(target: Target) -> dict[str, Any]:
    """Binary COPY (PostgreSQL) / LOAD DATA LOCAL (MariaDB) of a pre-built buffer, one process."""
    if target.csv is None:
        raise RuntimeError("no CSV was built for the raw contender")
    if target.db.kind == "postgres":
        return rawload.copy_postgres(target.db, target.table, target.csv, target.pg_binary)
    return rawload.load_data_mariadb(target.db, target.table, target.csv)


TargetT = TypeVar("TargetT")


@dataclass(frozen=True)
class Contender(Generic[TargetT]):
    """A named writer of one kind of target (a `Target` here; transactions.py has its own)."""

    name: str
    label: str
    run: Callable[[TargetT], dict[str, Any]]
    #: Runs after a failed measurement, before the next one; its result goes in the detail.
    cleanup: Callable[[TargetT], dict[str, Any]] | None = None
    #: False for a floor that writes nothing: its row count is not checked.
    writes: bool = True


class Named(Protocol):
    """A contender of any kind: a `Contender` or a stream's."""

    @property
    def name(self) -> str: ...


NamedT = TypeVar("NamedT", bound=Named)


def by_name(*contenders: NamedT) -> dict[str, NamedT]:
    """The contenders by their names, in the order given."""
    return {c.name: c for c in contenders}


CONTENDERS: dict[str, Contender[Target]] = by_name(
    Contender("spark_jdbc", "Spark JDBC", spark_jdbc),
    Contender("write_xa", "xasink write_xa", write_xa, recover_write_xa),
    # The fixed cost of a branch and a Python task, which max_branches="auto" hides.
    Contender(
        "write_xa_per_partition",
        "write_xa, 1 branch/partition",
        functools.partial(write_xa, writer={"max_branches": None}),
        recover_write_xa,
    ),
    Contender("raw", "raw COPY / LOAD DATA", raw),
    Contender("arrow_floor", "no-op mapInArrow (floor)", arrow_floor, writes=False),
    Contender("arrow_collect", "collect as Arrow (no write)", arrow_collect, writes=False),
    # Small workloads only (run.py: COLLECTED_ROWS): it collects every row into the driver.
    Contender("collect_load", "collect, then raw bulk load (no xasink)", collect_load),
    Contender("least_job", "Spark's cheapest job (no write)", least_job, writes=False),
    # The staged modes' price: rows loaded into a staging table, then applied in one
    # transaction (the table is emptied before each run, so this is load + copy).
    Contender(
        "write_xa_overwrite",
        "write_xa, mode=overwrite",
        functools.partial(write_xa, mode="overwrite"),
        recover_write_xa,
    ),
)
#: What runs unless --contenders says otherwise (the staged-mode cost is opt-in).
DEFAULT_CONTENDERS = ["spark_jdbc", "write_xa", "write_xa_per_partition", "raw", "arrow_floor"]
