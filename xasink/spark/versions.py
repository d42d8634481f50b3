"""What differs between the PySpark releases xasink supports (3.5 and every 4.x), in one place.

- Python data sources (`format("xasink")`) exist from Spark 4.0 on. Spark 3.5 looks a
  format up among JVM classes only, which a Python package cannot add without a jar: there
  it fails with Spark's own `[DATA_SOURCE_NOT_FOUND]`, and importing the data source's
  names from here raises :data:`FORMAT_NEEDS_SPARK_4` instead of a bare
  `ModuleNotFoundError`.
- `DataSourceStreamArrowWriter` exists from 4.1 on. Spark 4.0 hands a stream writer Arrow
  batches when it is also a `DataSourceArrowWriter` (its rows as Python objects otherwise),
  so 4.0 gets a stand-in that is both. Without it the import failed inside Spark's scan for
  `pyspark_*` modules, which then registered no source at all (`[DATA_SOURCE_NOT_FOUND]`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NoReturn

import pyspark


def release(version: str) -> tuple[int, int]:
    """(major, minor) of a PySpark version string ("4.0.5", "4.1.0.dev1")."""
    major, minor = version.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


#: The running PySpark's (major, minor).
PYSPARK = release(pyspark.__version__)

FORMAT_NEEDS_SPARK_4 = (
    "format('xasink') needs PySpark 4.0 or newer (Python data sources); this is PySpark "
    f"{pyspark.__version__}: write with xasink.write_xa(df, ...) or xasink.foreach_batch(...), "
    "which have the same guarantees."
)

_DATA_SOURCE_NAMES = frozenset(
    ("DataSource", "DataSourceArrowWriter", "DataSourceStreamArrowWriter", "WriterCommitMessage")
)

if TYPE_CHECKING or PYSPARK >= (4, 1):
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamArrowWriter,
        WriterCommitMessage,
    )
elif PYSPARK >= (4, 0):
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceArrowWriter,
        DataSourceStreamWriter,
        WriterCommitMessage,
    )

    class DataSourceStreamArrowWriter(DataSourceStreamWriter, DataSourceArrowWriter):
        """Spark 4.1's class on 4.0: a stream writer that 4.0's tasks give Arrow batches."""

else:

    def __getattr__(name: str) -> NoReturn:
        """Spark 3.5 has no Python data sources: say so, in xasink's words."""
        if name in _DATA_SOURCE_NAMES:
            raise ImportError(FORMAT_NEEDS_SPARK_4)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FORMAT_NEEDS_SPARK_4",
    "PYSPARK",
    "DataSource",
    "DataSourceArrowWriter",
    "DataSourceStreamArrowWriter",
    "WriterCommitMessage",
    "release",
]
