"""A write_xa driver in its own process, so a test can SIGKILL its whole process group.

Usage: python driver_process.py URL USER TABLE ROWS PARTITIONS FAULT_POINT [MODE]
With MODE, it writes support.mode_case's input for that mode instead of ROWS events.
The password comes from XASINK_TEST_PASSWORD. The fault's action is XASINK_TEST_FAULT_ACTION
(default `hang`): at the point the script prints `XASINK-FAULT <point>`, then waits to be
killed (`hang`) or stops itself until SIGCONT (`pause`). XASINK_TEST_SINK="<sink id>:<batch
id>" makes the write that batch of a stream. XASINK_TEST_WRITER=driver makes the driver
write the frame itself (one branch, as for any small frame); by default tasks write a
branch per partition. XASINK_TEST_OPTIONS, a JSON object, adds write_xa keywords. It ends
by printing `RESULT {...}`, or `ERROR <class>: <message>` (exit 3) when write_xa raises.
XASINK_TEST_XA_DATASOURCE names the XADataSource class of another driver (the generic
dialect; its jar from XASINK_JARS).
"""

from __future__ import annotations

import json
import os
import sys

from support import events_df, mode_case, spark_builder

from xasink import CommitProperties, Database, WriterProperties, write_xa
from xasink._testing.faults import Fault, injected


def main() -> None:
    url, user, table, rows, partitions, point = sys.argv[1:7]
    mode = sys.argv[7] if len(sys.argv) > 7 else None
    spark = spark_builder("xasink-driver-process").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    action = os.environ.get("XASINK_TEST_FAULT_ACTION", "hang")
    faults = [Fault(point, action, attempt_number=None)] if point != "none" else []
    df, options = events_df(spark, int(rows), int(partitions)), {}
    if mode:
        df, options, _ = mode_case(spark, mode, int(partitions))
    options.update(json.loads(os.environ.get("XASINK_TEST_OPTIONS", "{}")))
    if os.environ.get("XASINK_TEST_WRITER") == "driver":
        options = {"writer_properties": WriterProperties(driver_write_bytes=1 << 30), **options}
    else:  # a branch per partition, written by tasks, whatever the frame's size or keys
        options = {"writer_properties": WriterProperties(max_branches=int(partitions)), **options}
    sink = os.environ.get("XASINK_TEST_SINK")
    if sink:
        sink_id, batch_id = sink.rsplit(":", 1)
        options.update(sink_id=sink_id, batch_id=int(batch_id))
    try:
        with injected(*faults):
            result = write_xa(
                df,
                Database(
                    url,
                    user=user,
                    password=os.environ["XASINK_TEST_PASSWORD"],
                    xa_datasource=os.environ.get("XASINK_TEST_XA_DATASOURCE"),
                ),
                table,
                **options,
                commit_properties=CommitProperties(heartbeat_interval=1.0),
            )
    except Exception as exc:
        print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
        sys.exit(3)
    outcome = {"job_id": result.job_id, "rows": result.rows, "skipped": result.skipped}
    print("RESULT " + json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
