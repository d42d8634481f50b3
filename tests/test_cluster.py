"""Real clusters: executors that have no JDBC jar of their own load the one the driver
shipped with the job (SparkContext.addFile; under Connect, see test_connect.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support import TESTS, assert_exactly, new_table


@pytest.mark.ci_postgres
def test_executors_without_the_jar_use_the_copy_the_driver_shipped(db, tmp_path):
    """local-cluster[2,1,1024]: two executor processes, each with its own Python workers,
    told to ignore every folder that holds a JDBC jar, the driver's own included."""
    table = new_table(db)
    done = subprocess.run(
        [
            sys.executable,
            str(TESTS / "cluster_driver.py"),
            db.jdbc_url,
            db.user,
            table,
            str(tmp_path),
        ],
        cwd=TESTS,
        env={**os.environ, "XASINK_TEST_PASSWORD": db.password},
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("RESULT ", "ERROR "))]
    assert lines and lines[-1].startswith("RESULT "), done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result == {"rows": 2000, "executors": 2}
    assert db.password not in done.stdout + done.stderr
    assert_exactly(db, table, range(2000))
