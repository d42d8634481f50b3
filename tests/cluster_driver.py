"""A write_xa driver on a multi-process local cluster whose executors cannot see any JDBC
jar: the only copy is the driver's, in a temporary folder that the executors are told to
ignore (the test-only XASINK_TEST_HIDE_JAR_DIRS, set through spark.executorEnv). One task
fails in its first attempt and is retried.

Usage: python cluster_driver.py URL USER TABLE JAR_DIR  (password in XASINK_TEST_PASSWORD)
Prints `RESULT {...}` or `ERROR <class>: <message>` (exit 3).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile

import pyspark

os.environ.setdefault("SPARK_HOME", os.path.dirname(pyspark.__file__))

from pyspark.sql import SparkSession
from support import events_df, failing_once

from xasink import Database, write_xa
from xasink.runtime.jars import HIDDEN_ENV, SYSTEM_DIRS, find_driver_jar, search_dirs


def main() -> None:
    url, user, table, jar_dir = sys.argv[1:5]
    kind = "postgres" if url.startswith("jdbc:postgresql:") else "mariadb"
    jar = shutil.copy(find_driver_jar(kind), jar_dir)
    hidden = [jar_dir, *map(str, SYSTEM_DIRS), *map(str, search_dirs())]
    with tempfile.TemporaryDirectory(prefix="xasink-workers-") as work:
        spark = (
            SparkSession.builder.master("local-cluster[2,1,1024]")
            .config("spark.ui.enabled", "false")
            .config("spark.pyspark.python", sys.executable)
            .config("spark.executorEnv." + HIDDEN_ENV, os.pathsep.join(hidden))
            .config("spark.worker.dir", work)
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        try:
            result = write_xa(
                failing_once(events_df(spark, 2000, 4), 1300),
                Database(url, user=user, password=os.environ["XASINK_TEST_PASSWORD"], jars=[jar]),
                table,
            )
            executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
        except Exception as exc:
            print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
            sys.exit(3)
        finally:
            spark.stop()
    print("RESULT " + json.dumps({"rows": result.rows, "executors": executors}), flush=True)


if __name__ == "__main__":
    main()
