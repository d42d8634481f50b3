"""Spark beyond one process for the tests: a Spark Connect server started as its own process
(as Spark's sbin/start-connect-server.sh starts it), and a multi-process local cluster."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
#: The server's class, which start-connect-server.sh hands to spark-daemon.sh. pip's pyspark
#: 4.0 to 4.2 ship the server's jar and spark-daemon.sh but not that script, so the tests
#: make the same call themselves.
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: Spark settings every test session shares (see support.spark_builder).
COMMON_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    "spark.task.maxFailures": "4",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, log: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return
        time.sleep(0.5)
    tail = log.read_text()[-3000:] if log.exists() else "(no log)"
    raise RuntimeError(f"Spark Connect server did not listen on {port}:\n{tail}")


def _without_python_paths() -> dict[str, str]:
    """This process's environment without PYTHON* settings, for another environment's
    Python: nothing of ours may leak onto its path."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}


@contextlib.contextmanager
def connect_server(
    master: str = "local[2,4]",
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    spark_home: Path = SPARK_HOME,
) -> Iterator[str]:
    """A Spark Connect server in its own process; yields its sc:// URL. `env` is added to
    the server's environment (its executors' Python workers inherit it); `python` and
    `spark_home` may come from another environment. local[2,4]: a failed task is retried,
    as on a cluster."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="xasink-connect-") as work:
        ident = f"xasink-test-{port}"
        inherited = os.environ if python == sys.executable else _without_python_paths()
        server_env = {
            **inherited,
            "SPARK_HOME": str(spark_home),
            "SPARK_PID_DIR": work,
            "SPARK_LOG_DIR": work,
            "SPARK_IDENT_STRING": ident,
            "PYSPARK_PYTHON": python,
            "SPARK_CONNECT_MODE": "0",  # the server itself is a classic Spark application
            **(env or {}),
        }
        conf = {**COMMON_CONF, "spark.connect.grpc.binding.port": str(port)}
        daemon = [str(spark_home / "sbin" / "spark-daemon.sh")]
        args = [*daemon, "submit", CONNECT_SERVER, "1", "--name", "Spark Connect server"]
        args += ["--master", master]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        subprocess.run(args, env=server_env, check=True, capture_output=True, timeout=120)
        logs = list(Path(work).glob("*.out"))
        try:
            _wait_for_port(port, logs[0] if logs else Path(work) / "missing")
            yield f"sc://127.0.0.1:{port}"
        finally:
            subprocess.run(
                [*daemon, "stop", CONNECT_SERVER, "1"],
                env=server_env,
                capture_output=True,
                timeout=120,
            )


def connect_session(url: str):  # -> pyspark.sql.connect.session.SparkSession
    """A Spark Connect client session (no SparkContext, no JVM in this process for Spark).

    Made the way a user makes one; the process must not hold a classic session as well
    (tests marked `connect_client` run in a pytest process of their own)."""
    from pyspark.sql import SparkSession

    return SparkSession.builder.remote(url).create()  # a new session per server
