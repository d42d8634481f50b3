"""What a new user runs right after `pip install xasink`: run by tests/test_install.py with
the Python of a fresh virtual environment, never with the checkout on its path.

Usage: user_script.py classic|sc://host:port TABLE_PREFIX [die]; the connection comes from
XASINK_URL, XASINK_USER and XASINK_PASSWORD. Prints one line per write: `wrote NAME ROWS
WRITER` (WRITER: who wrote the branches, the "driver" in one local transaction or Spark's
"tasks"). With `die`, a third write, two-phase (tasks' branches), then has its driver exit
between PREPARE and its decision (exit status 17), leaving prepared branches for `xasink
recover`; the fault hooks fail the script if that point is never reached.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

import xasink
from xasink import Database, WriterProperties, write_xa
from xasink._testing.faults import Fault, injected


def main(where: str, prefix: str, then: str = "") -> None:
    if where == "classic":
        spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
        spark = spark.getOrCreate()
    else:
        spark = SparkSession.builder.remote(where).getOrCreate()
    print("xasink from", os.path.dirname(xasink.__file__), flush=True)
    db = Database(
        os.environ["XASINK_URL"],
        user=os.environ["XASINK_USER"],
        password=os.environ["XASINK_PASSWORD"],
    )
    df = spark.range(0, 300, numPartitions=2).selectExpr("id", "cast(id * 2 as double) AS v")
    (
        df.write.format("xasink")
        .mode("append")
        .option("url", db.url)
        .option("dbtable", f"{prefix}_format")
        .option("user", db.user)
        .option("password", db.password)
        .option("xasink.create", "if_missing")
        .save()
    )
    print(f"wrote {prefix}_format 300 tasks", flush=True)
    # A small frame: classic Spark's driver writes it in one local transaction with its
    # bookkeeping; under Spark Connect (no size estimate, no collect here) its tasks do.
    result = write_xa(df, db, f"{prefix}_write_xa", create="if_missing")
    print(f"wrote {prefix}_write_xa {result.rows} {result.writer}", flush=True)
    if then == "die":
        with injected(Fault("before_decision", "exit")):  # two phases: a branch per task
            write_xa(
                df,
                db,
                f"{prefix}_write_xa",
                writer_properties=WriterProperties(driver_write_bytes=0),
            )
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
