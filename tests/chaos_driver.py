"""A long-lived write_xa host for the chaos suite's driver kills.

Usage: python chaos_driver.py URL USER   (password in XASINK_TEST_PASSWORD)

It starts Spark once and prints READY. Then, for each JSON line on stdin
({"table", "mode", "partitions", "delay"}), it forks a child that runs one write_xa job (the
xasink driver: its own JPype JVM, journal connection, heartbeat and commit connections, using
the parent's Spark through fresh Py4J connections), SIGKILLs that child `delay` seconds after
the start unless it ended before, cancels whatever Spark still runs for it, waits until Spark
is idle, and prints `DONE {"final": <the child's last line or null>, "killed": ..., "elapsed":
...}`. The child's last line is `RESULT {...}` or `ERROR <class>: <message>`.

Starting Spark and warming its Python workers costs ~30 s here, so a fresh process per kill
would make 100 kills take an hour; the fork keeps a kill at ~2-4 s. The parent never starts
xasink's JVM (a JVM does not survive a fork); each child starts its own.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import sys
import threading
import time

from support import mode_case, spark_builder

from xasink import CommitProperties, Database


def child(spark, job: dict, out: int) -> None:
    """Runs in the forked child: one write_xa; its last line goes to `out`."""
    from pyspark import SparkContext

    client = SparkContext._gateway._gateway_client  # never reuse the parent's sockets
    client.deque = collections.deque()
    client.thread_connection = threading.local()
    from xasink import write_xa

    started = time.monotonic()
    try:
        df, options, _ = mode_case(spark, job["mode"], int(job["partitions"]))
        result = write_xa(
            df,
            Database(job["url"], user=job["user"], password=os.environ["XASINK_TEST_PASSWORD"]),
            job["table"],
            **options,
            commit_properties=CommitProperties(heartbeat_interval=0.5),
        )
        # When, from the child's start, the decision was taken and how long phase 2 took:
        # the test aims half of its kills around them.
        decided = time.monotonic() - started - result.total_seconds + result.prepare_seconds
        line = "RESULT " + json.dumps(
            {
                "job_id": result.job_id,
                "rows": result.rows,
                "decided_at": decided,
                "commit_seconds": result.commit_seconds,
            }
        )
    except BaseException as exc:
        line = f"ERROR {type(exc).__name__}: {exc}"
    os.write(out, (line.replace("\n", " ") + "\n").encode())


def run_one(spark, job: dict) -> dict:
    read, write = os.pipe()
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            child(spark, job, write)
        finally:
            os._exit(0)
    os.close(write)
    deadline = started + float(job["delay"])
    data = b""
    killed = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([read], [], [], left)
        if not ready:
            continue
        chunk = os.read(read, 65536)
        if not chunk:
            break  # the child ended
        data += chunk
    try:
        ended = os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:  # already reaped
        ended = True
    if not ended:
        os.kill(pid, signal.SIGKILL)
        killed = True
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    elapsed = time.monotonic() - started
    while True:  # whatever it wrote before dying
        ready, _, _ = select.select([read], [], [], 0)
        chunk = os.read(read, 65536) if ready else b""
        if not chunk:
            break
        data += chunk
    os.close(read)
    # The driver is gone; in a real crash its tasks die with it. Cancel them, and wait
    # (bounded) until Spark is idle, so no task of this job prepares after recovery ran.
    context = spark.sparkContext
    context.cancelAllJobs()
    tracker = context.statusTracker()
    idle_by = time.monotonic() + 120
    while time.monotonic() < idle_by and (
        tracker.getActiveJobsIds() or tracker.getActiveStageIds() or running_tasks(context)
    ):
        time.sleep(0.1)
    lines = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return {"final": lines[-1] if lines else None, "killed": killed, "elapsed": elapsed}


def running_tasks(context) -> int:
    """Tasks still running on the executors (a cancelled task ends asynchronously)."""
    infos = context._jsc.sc().statusTracker().getExecutorInfos()
    return sum(info.numRunningTasks() for info in infos)


def main() -> None:
    url, user = sys.argv[1:3]
    spark = spark_builder("xasink-chaos-driver").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print("READY", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        job = {**json.loads(line), "url": url, "user": user}
        print("DONE " + json.dumps(run_one(spark, job)), flush=True)


if __name__ == "__main__":
    main()
