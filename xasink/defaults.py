"""Every default of xasink in one place: `write_xa`'s keywords, `format("xasink")`'s
options and the command line all read them from here, so that they cannot disagree."""

from __future__ import annotations

from typing import Literal

#: Write modes: append inserts; the others stage the rows and apply them in one transaction.
Mode = Literal["append", "overwrite", "upsert", "merge"]
#: What to do about a missing table: create it from the DataFrame's schema, or refuse.
Create = Literal["if_missing", "never"]
#: `schema_mode`: "merge" adds the DataFrame's new columns to the table (None refuses them).
SchemaMode = Literal["merge"]

MODE: Mode = "append"
CREATE: Create = "if_missing"
#: Rows per JDBC batch on the batched-INSERT path.
BATCH_SIZE = 10_000
#: Seconds to wait for a TCP connection to the database.
CONNECT_TIMEOUT = 10
#: Seconds any JDBC call may wait for an answer; above the lock wait, so that a live
#: server's lock waits never run into it.
NETWORK_TIMEOUT = 600.0
#: Seconds any bookkeeping or apply statement may wait for a lock.
LOCK_WAIT = 60.0
#: Seconds a job's owner may stay silent before recovery may take the job for dead.
GRACE = 120.0
#: Days a journal keeps the rows of finished jobs before xasink deletes them itself (a
#: journal's own setting, `xasink retention`; 0 keeps everything).
RETENTION_DAYS = 7.0
#: The shortest retention a journal may have, in days (besides 0, everything).
MINIMUM_RETENTION_DAYS = 1.0
#: The SQL dialects xasink speaks (`xasink.dialects` has one class for each), named here
#: for the command line, which lists them without loading any database code.
DIALECT_NAMES = ("postgres", "mysql", "generic")
#: Seconds between heartbeats of a job's owner.
HEARTBEAT_INTERVAL = 10.0
#: A job's lease, stored on its row, is this many heartbeat intervals: recovery never takes
#: a job for dead sooner, whatever grace it was given (except an explicit grace of 0).
LEASE_INTERVALS = 3
#: Retries of a phase-2 operation that fails transiently, after its first attempt.
COMMIT_RETRIES = 5
#: Connections committing branches in parallel.
COMMIT_PARALLELISM = 4
#: A frame Spark estimates at most this size is collected and written by the driver.
DRIVER_WRITE_BYTES = 4 << 20

#: format("xasink"): how long a job may wait for its first task (upstream stages, a queue
#: for executors) before a recovery run takes it for dead; it holds nothing until then.
START_TIMEOUT = 3600.0
#: format("xasink"): how long its tasks may go silent once they write (between waves of
#: tasks, and between the last task and Spark's commit call).
TASK_LEASE = 300.0
#: format("xasink") on PostgreSQL without numPartitions: every branch holds one of the
#: server's few prepared-transaction slots, and the writer cannot learn the input's
#: partition count before the tasks run.
POSTGRES_BRANCHES = 8
#: format("xasink"): the branch count the server check assumes when nothing bounds it.
BRANCH_HINT = 8
