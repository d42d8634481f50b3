"""A class-data archive of Spark's driver classes, so that a test's Spark driver starts in
about half the time. Most tests that kill a driver start one in a process of their own, and
on two cores that start (loading and verifying some ten thousand classes) was most of their
time.

`make_archive()` (run once per test session, by tests/conftest.py) makes the archive when
this machine has none for this Java and this Spark: a short Spark job in a process of its
own whose JVM writes the classes it loaded when it exits (Java 17's dynamic archive, about
150 MB, in ~/.cache/xasink). `driver_java_options()` names it for every driver JVM that
`support.spark_builder()` starts. A JVM that cannot use it (another JDK, a changed class
path, a damaged file) starts as it would without it, saying nothing: the archive changes
how fast classes load, never which classes or what they do.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xasink"
#: CDS's own messages (a JVM that cannot map the archive says why) stay out of the output
#: that tests read.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: The archive's making: a DataFrame through a Python task and Arrow, and a file stream
#: through foreachBatch, so the classes most tests' drivers load are in it.
_WORKLOAD = """
import tempfile
from support import spark_builder
spark = spark_builder("xasink-class-archive").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
df = spark.range(1000, numPartitions=2).selectExpr("id", "cast(id as string) as name")
df.mapInArrow(lambda batches: batches, df.schema).toPandas()
with tempfile.TemporaryDirectory() as folder:
    df.write.parquet(folder + "/in")
    query = (
        spark.readStream.schema(df.schema).parquet(folder + "/in").writeStream
        .foreachBatch(lambda batch, _: batch.collect())
        .option("checkpointLocation", folder + "/cp").trigger(availableNow=True).start()
    )
    query.awaitTermination()
spark.stop()
"""


def archive_path() -> Path:
    """This machine's archive for this Java and this Spark (a new one when either changes)."""
    import pyspark

    java = Path(shutil.which("java") or "java").resolve()
    home = os.environ.get("JAVA_HOME", "")
    stamp = f"{pyspark.__version__}|{java}|{java.stat().st_mtime if java.exists() else 0}|{home}"
    return CACHE / f"spark-driver-{hashlib.sha256(stamp.encode()).hexdigest()[:16]}.jsa"


def driver_java_options() -> str:
    """The driver JVM's options: the archive, when this machine has it."""
    path = archive_path()
    return f"-XX:SharedArchiveFile={path} {QUIET}" if path.is_file() else ""


def make_archive(timeout: float = 300) -> Path | None:
    """Make the archive unless it exists; its path, or None when it could not be made
    (the tests then run without it, only slower). Written to a file of its own first and
    renamed, so a run that makes it at the same time, or is killed, leaves no half file."""
    path = archive_path()
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f"{path.stem}.{os.getpid()}.part")  # the JVM writes it at exit
    env = {
        **os.environ,
        "XASINK_TEST_DRIVER_JAVA_OPTIONS": f"-XX:ArchiveClassesAtExit={scratch} {QUIET}",
    }
    try:
        subprocess.run(
            [sys.executable, "-c", _WORKLOAD],
            cwd=Path(__file__).parent,
            env=env,
            timeout=timeout,
            capture_output=True,
            check=True,
        )
        if scratch.is_file():
            os.replace(scratch, path)
    except (OSError, subprocess.SubprocessError):
        pass
    finally:
        scratch.unlink(missing_ok=True)
    return path if path.is_file() else None
