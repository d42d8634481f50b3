"""A transaction's driver in its own process, so a test can SIGKILL its whole process group.

Usage: python transaction_driver.py URL USER PARENT CHILD FAULT_POINT PATH [SINK:BATCH]
It writes test_transaction's customers into PARENT and their orders into CHILD in one
transaction, the small frames held for one local transaction (PATH `driver`) or written by
tasks (`tasks`); with SINK:BATCH, as that batch of a stream. The password comes from
XASINK_TEST_PASSWORD. With XASINK_TEST_PARTICIPANT="URL TABLE", test_participants' audit
rows go into TABLE of that other database (same login) between the two writes. At
FAULT_POINT it prints `XASINK-FAULT <point>` and waits to be killed. It ends by printing
`RESULT {...}`, or `ERROR <class>: <message>` (exit 3).
"""

from __future__ import annotations

import json
import os
import sys

from support import spark_builder
from test_participants import _audit_frame
from test_transaction import PATHS, _frames

from xasink import CommitProperties, Database, transaction
from xasink._testing.faults import Fault, injected


def main() -> None:
    url, user, parent, child, point, path = sys.argv[1:7]
    stream: dict[str, str | int] = {}
    if sys.argv[7:]:
        sink_id, batch_id = sys.argv[7].rsplit(":", 1)
        stream = {"sink_id": sink_id, "batch_id": int(batch_id)}
    spark = spark_builder("xasink-transaction-driver").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    faults = [Fault(point, "hang", attempt_number=None)] if point != "none" else []
    parents, children = _frames(spark)
    password = os.environ["XASINK_TEST_PASSWORD"]
    participant = os.environ.get("XASINK_TEST_PARTICIPANT", "")
    try:
        with (
            injected(*faults),
            transaction(
                Database(url, user=user, password=password),
                **stream,
                commit_properties=CommitProperties(heartbeat_interval=1.0),
            ) as tx,
        ):
            tx.write(children, child, **PATHS[path])
            if participant:
                other_url, audit = participant.split()
                other = Database(other_url, user=user, password=password)
                tx.write(_audit_frame(spark), audit, database=other, **PATHS[path])
            tx.write(parents, parent, mode="upsert", key="id", **PATHS[path])
    except Exception as exc:
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
    result = tx.result
    assert result is not None
    outcome = {"job_id": result.job_id, "rows": result.rows, "skipped": result.skipped}
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
