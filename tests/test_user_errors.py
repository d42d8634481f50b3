"""What a new user gets wrong, and what xasink then says: the real cause, and what to do.
Each case leaves nothing written, prepared or staged."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from support import TESTS, assert_clean, ids_in, new_table

REPO = TESTS.parent

NO_XASINK_DRIVER = """
import sys
sys.path[:0] = sys.argv[1:3]  # the tests' helpers and this checkout, for the driver alone
from support import events_df, spark_builder
from xasink import Database, WriterProperties, WriteError, write_xa
url, user, password, table = sys.argv[3:7]
spark = spark_builder("xasink-workers-without-xasink").getOrCreate()
spark.sparkContext.setLogLevel("OFF")
try:
    write_xa(
        events_df(spark, 1000, 2),
        Database(url, user=user, password=password),
        table,
        writer_properties=WriterProperties(driver_write_bytes=0),  # tasks write, not the driver
    )
except WriteError as exc:
    print("WRITE ERROR", exc, flush=True)
"""


def _python_without_xasink(root: Path) -> str:
    """A virtual environment's Python that sees this Python's packages (pyspark, pyarrow,
    pandas) but not xasink, as when the workers run another interpreter than the one
    xasink was installed into: the site folder is a plain path entry, so its .pth files (an
    editable install's among them) are not read."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = str(root / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run(
        [python, "-c", "import pyspark, pyarrow, pandas\nimport xasink"],
        capture_output=True,
        text=True,
        cwd=root,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert "No module named 'xasink'" in probe.stderr, probe.stderr  # the case under test
    return python


def test_workers_without_xasink_say_so(postgres, tmp_path):
    """Spark's Python workers run `PYSPARK_PYTHON` (else `python3` from PATH): when that
    interpreter lacks xasink, the write fails with the worker's own last line and the
    remedy, not with PythonException's first line; nothing is written."""
    python = _python_without_xasink(tmp_path / "venv")
    table = new_table(postgres)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    login = [postgres.jdbc_url, postgres.user, postgres.password, table]
    done = subprocess.run(
        [sys.executable, "-c", NO_XASINK_DRIVER, str(TESTS), str(REPO), *login],
        env={**env, "PYSPARK_PYTHON": python},
        cwd=tmp_path,  # the workers' working directory: no checkout to import from
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("WRITE ERROR")), "")
    assert "ModuleNotFoundError: No module named 'xasink'" in line, done.stdout[-3000:]
    assert "PYSPARK_PYTHON" in line and "spark.pyspark.python" in line, line
    assert postgres.password not in done.stdout + done.stderr
    assert ids_in(postgres, table) == []
    assert_clean(postgres)
