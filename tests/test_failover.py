"""Failover, PostgreSQL: a primary with a synchronous streaming standby, both throwaway
servers. The primary is SIGKILLed at each point of a job (while branches prepare, right
after the decision, in the middle of phase 2, during a staged apply, before a small write's
one local COMMIT, right after a job returned, and inside a stream's batch), the standby is
promoted, and `xasink recover --grace 0` and the next write are pointed at it. Every job
ends all-or-nothing on the promoted server, checked with psycopg: exactly the old contents
or exactly the new ones, the job's state in the journal saying which, no prepared
transaction and no staging table left; a job the driver reported committed is there whole,
and the write run again (where its state says to) gives exactly the new contents.

The driver goes on after the kill (its job is held at the point, then released once the
standby is promoted): it meets the dead primary, and what it reports is checked against
what the promoted server holds.

Left out of `make test`: `make failover` (XASINK_FAILOVER=1) runs it, and prints the table
of `python -m tests.failover_report`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chaos_support import case, describe_mix, outcome_of, promise_of_line, promised
from replicas import promote_replica, replica_pair
from servers import ServerUnavailable, kill_server, promote, start_postgres_pair
from support import (
    PARTITIONS,
    TESTS,
    DriverProcess,
    cli,
    connection_args,
    database_of,
    ids_in,
    journaled,
    mode_case,
    new_table,
    run_sql,
    seeded_table,
    sink_mark,
    stage_tables,
    start_foreach_stream,
    stream_files,
    until,
    xasink_cli,
)

from xasink import CommitProperties, WriterProperties, foreach_batch, write_xa
from xasink._testing.faults import Fault, held, injected, release
from xasink.errors import DecisionUnknownError

FAILOVER = any(
    os.environ.get(name, "").strip() not in ("", "0")
    for name in ("XASINK_FAILOVER", "XASINK_CHAOS_FULL")
)
RESULTS = Path(
    os.environ.get("XASINK_FAILOVER_RESULTS")
    or TESTS.parent / ".pytest_cache" / "xasink-failover" / "results.jsonl"
)
#: No job, and no wait for a point, may take longer (a hang fails the test).
JOB_TIMEOUT = 180.0

pytestmark = pytest.mark.skipif(
    not FAILOVER, reason="failover run only: make failover (XASINK_FAILOVER=1)"
)

#: The writes against the primary, which dies under them: one retry of a failed phase-2
#: commit, not five. Against a server that is gone, each retry only delays the driver's
#: error (by about 15 s per branch with the default backoff); what the job becomes is
#: settled on the promoted server, whatever the driver does meanwhile.
ONE_RETRY = CommitProperties(retries=1)
#: A branch per partition, written by Spark's tasks, prepared, decided, committed in phase 2.
TASKS = WriterProperties(max_branches=PARTITIONS)
#: The driver writes the frame itself, in one local transaction (as for any small frame).
DRIVER = WriterProperties(driver_write_bytes=1 << 30)

#: Kill point -> (the fault that holds the job there, or None, how the job is written, what
#: the promoted server must hold once recovered: the old contents or the new ones).
POINTS: dict[str, tuple[str | None, WriterProperties, str]] = {
    # A branch prepared, the others preparing or loading: no decision, so nothing.
    "branches preparing": ("after_prepare", TASKS, "old"),
    # The decision's COMMIT returned: the standby has it, so everything.
    "after the decision": ("after_decision", TASKS, "new"),
    # One winner committed, the others prepared.
    "mid phase 2": ("after_first_commit", TASKS, "new"),
    # Phase 2 done, the apply's one transaction waiting for a row lock of the target.
    "during the staged apply": (None, TASKS, "new"),
    # A small frame's one local transaction, everything in it, before its COMMIT.
    "one-phase before commit": ("before_local_commit", DRIVER, "old"),
    # write_xa returned: every row must be on the standby.
    "returned (tasks)": (None, TASKS, "new"),
    "returned (one-phase)": (None, DRIVER, "new"),
    # The decision's COMMIT, or a small frame's, written on the primary and waiting for the
    # standby (its WAL receiver stopped): the driver is told nothing, and the promoted
    # server holds the job whole or not at all, whichever WAL reached it.
    "decision awaiting the standby": ("before_decision", TASKS, "either"),
    "one-phase commit awaiting the standby": ("before_local_commit", DRIVER, "either"),
}
#: The points whose COMMIT the test holds at the standby's acknowledgement.
AWAITING = ("decision awaiting the standby", "one-phase commit awaiting the standby")
MODES = ("append", "overwrite", "upsert", "merge")


def slug(point: str) -> str:
    """A kill point as a test id: `-k` takes no parentheses or commas."""
    return re.sub(r"[^a-z0-9]+", "-", point).strip("-")


STAGED = ("overwrite", "upsert", "merge")
CASES = [
    pytest.param(point, mode, id=f"{slug(point)}-{mode}")
    for point in POINTS
    for mode in (STAGED if point == "during the staged apply" else MODES)
]
#: A row every mode's job changes (mode_rows: upsert 50-349, overwrite all, merge 30-59).
LOCKED_ID = 55


@pytest.fixture(scope="module", autouse=True)
def _fresh_results() -> Iterator[None]:
    """One results file per run of this module (`make failover` prints it afterwards)."""
    if not os.environ.get("XASINK_FAILOVER_KEEP_RESULTS"):
        RESULTS.unlink(missing_ok=True)
    yield


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[Any, Any]]:
    """(primary, standby): a fresh pair per case, since each case kills its primary; a
    PostgreSQL pair unless the case names a MySQL-family kind (its primary waits for the
    replica semi-synchronously)."""
    kind = getattr(request, "param", "postgres")
    with contextlib.ExitStack() as stack:
        try:
            made = start_postgres_pair() if kind == "postgres" else replica_pair(kind, True)
            servers = stack.enter_context(made)
        except ServerUnavailable as exc:
            if os.environ.get("XASINK_TEST_REQUIRE_SERVERS", "").strip() not in ("", "0"):
                pytest.fail(f"a {kind} pair is required but unavailable: {exc}")
            pytest.skip(f"no {kind} pair: {exc}")
        yield servers


def record(point: str, mode: str, outcome: str, prepared: int, **detail: Any) -> None:
    """One run's result for the `make failover` table. `outcome` is old, new or MIXED."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    row = {"point": point, "mode": mode, "outcome": outcome, "prepared_left": prepared}
    with open(RESULTS, "a") as fh:
        fh.write(json.dumps({**row, **detail}, default=str) + "\n")


class Job:
    """A call on a thread of its own: its result, or the exception it raised."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(call,), daemon=True)
        self.thread.start()

    def _run(self, call: Callable[[], Any]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc

    def alive(self) -> bool:
        return self.thread.is_alive()

    def join(self) -> None:
        self.thread.join(JOB_TIMEOUT)
        assert not self.thread.is_alive(), f"the job did not end within {JOB_TIMEOUT:.0f}s"


def prepared_count(server: Any) -> int:
    """Every prepared transaction of the server, xasink's or not."""
    if server.kind != "postgres":
        return len(server.xa_recover())  # server-wide
    with server.admin_connect() as conn:
        row = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    return int(row[0])


def job_states(server: Any, table: str) -> dict[str, str]:
    """Job id -> state of the jobs the journal has on `table` (a small job that never
    committed has no row)."""
    found = run_sql(
        server,
        f"SELECT job_id, state FROM xasink_jobs WHERE target_table = '{journaled(server, table)}'",
        admin=False,
    )
    return {str(job): str(state) for job, state in found}


def lock_waiters(server: Any, table: str) -> int:
    """Sessions of the server waiting for a lock now in a statement that names `table`."""
    if server.kind != "postgres":  # InnoDB: a transaction waiting for a row lock
        sql = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' "
        return int(run_sql(server, sql + f"AND trx_query LIKE '%{table}%'")[0][0])
    with server.admin_connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND strpos(query, %s) > 0",
            (table,),
        ).fetchone()
    return int(row[0])


def wal_receiver(standby: Any) -> int:
    """The process id of the standby's WAL receiver."""
    with standby.admin_connect() as conn:
        row = conn.execute("SELECT pid FROM pg_stat_wal_receiver").fetchone()
    assert row is not None and row[0], "the standby has no WAL receiver"
    return int(row[0])


def commits_awaiting_standby(primary: Any) -> int:
    """Sessions of the primary whose COMMIT waits for the synchronous standby."""
    with primary.admin_connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
            "AND upper(query) = 'COMMIT'"
        ).fetchone()
    return int(row[0])


def recover(server: Any) -> str:
    """`xasink recover --grace 0` on the promoted server: nothing may stay in doubt."""
    done = cli(server, "--grace", "0")
    assert server.password not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def settle(server: Any, error: DecisionUnknownError, table: str) -> str:
    """`xasink resolve JOB --abandon --table T`, as the error says, on `server`."""
    assert error.job_id is not None, error
    done = xasink_cli(server, "resolve", error.job_id, "--abandon", "--table", table, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


def kill_and_promote(primary: Any, standby: Any) -> float:
    """SIGKILL the primary, promote the standby; seconds the failover took."""
    started = time.monotonic()
    kill_server(primary)
    promote(standby) if standby.kind == "postgres" else promote_replica(standby)
    return time.monotonic() - started


@pytest.mark.parametrize(("point", "mode"), CASES)
def test_failover_at_each_point(spark, pair, point, mode):
    """The primary dies at `point` of a `mode` job; on the promoted standby, once recovered,
    the table holds the old contents or the new ones, as the point and the driver's report
    say, the journal agrees, nothing is prepared; the write run again where its state says
    so gives exactly the new contents."""
    fail_over_at(spark, pair, point, mode)


#: MySQL and MariaDB replicate XA PREPARE through the binary log: the replica holds each
#: prepared branch, and once promoted lists it in XA RECOVER as the primary did.
FAMILY = ("mariadb", "mariadb11", "mysql")
FAMILY_CASES = [
    *((point, "append") for point in list(POINTS)[:3]),
    ("one-phase before commit", "append"),
    ("returned (tasks)", "append"),
    ("after the decision", "upsert"),
    ("mid phase 2", "merge"),
    ("during the staged apply", "upsert"),
]


@pytest.mark.parametrize("pair", FAMILY, indirect=True)
@pytest.mark.parametrize(
    ("point", "mode"), [pytest.param(p, m, id=f"{slug(p)}-{m}") for p, m in FAMILY_CASES]
)
def test_failover_of_a_semi_synchronous_replica(spark, pair, point, mode):
    """The same kills on MariaDB 10.11 and 11.8 and MySQL 9.7, whose primary waits for its
    replica's acknowledgement: the promoted replica holds every prepared branch and every
    decision, and recovery there ends each job as on PostgreSQL."""
    fail_over_at(spark, pair, point, mode)


def fail_over_at(spark: Any, pair: tuple[Any, Any], point: str, mode: str) -> None:
    primary, standby = pair
    fault_point, writer, expected = POINTS[point]
    started = time.monotonic()
    table = seeded_table(primary)
    df, options, _ = mode_case(spark, mode, PARTITIONS)
    if writer is DRIVER:  # cached, Spark knows its size: the driver writes it itself
        df = df.cache()
        df.count()

    def write(server: Any) -> Any:
        return write_xa(
            df,
            table=table,
            **options,
            **connection_args(server),
            writer_properties=writer,
            commit_properties=ONE_RETRY if server is primary else None,
        )

    if point in AWAITING:
        assert fault_point is not None
        with injected(Fault(fault_point, "hold")) as (fault,):
            job = Job(lambda: write(primary))
            until(
                lambda: held(fault) or not job.alive(),
                f"the job reaching {fault_point}",
                JOB_TIMEOUT,
            )
            assert held(fault), f"the job ended before {fault_point}: {job.error!r}"
            receiver = wal_receiver(standby)
            os.kill(receiver, signal.SIGSTOP)
            try:
                release(fault)
                until(
                    lambda: commits_awaiting_standby(primary) > 0 or not job.alive(),
                    "a COMMIT waiting for the standby",
                    JOB_TIMEOUT,
                )
                assert job.alive(), f"the job ended without waiting: {job.error!r}"
                kill_server(primary)
            finally:
                os.kill(receiver, signal.SIGCONT)
            started_promotion = time.monotonic()
            promote(standby)
            failover = time.monotonic() - started_promotion
            job.join()
    elif fault_point is not None:
        with injected(Fault(fault_point, "hold")) as (fault,):
            job = Job(lambda: write(primary))
            until(
                lambda: held(fault) or not job.alive(),
                f"the job reaching {fault_point}",
                JOB_TIMEOUT,
            )
            assert held(fault), f"the job ended before {fault_point}: {job.error!r}"
            failover = kill_and_promote(primary, standby)
            release(fault)
            job.join()
    elif point == "during the staged apply":
        holder = primary.connect(autocommit=False)
        try:
            lock = f"SELECT id FROM {table} WHERE id = %s FOR UPDATE"
            holder.cursor().execute(lock, (LOCKED_ID,))  # psycopg and pymysql alike
            job = Job(lambda: write(primary))
            until(
                lambda: lock_waiters(primary, table) > 0 or not job.alive(),
                "the apply's wait",
                JOB_TIMEOUT,
            )
            assert job.alive(), f"the job ended before its apply: {job.error!r}"
            failover = kill_and_promote(primary, standby)
            job.join()
        finally:
            with contextlib.suppress(Exception):
                holder.close()
    else:  # returned: the driver said committed
        job = Job(lambda: write(primary))
        job.join()
        assert job.error is None, job.error
        assert job.result.writer == ("driver" if writer is DRIVER else "tasks"), job.result
        failover = kill_and_promote(primary, standby)
    finish(
        point, mode, expected, job.error, standby, table, lambda: write(standby), failover, started
    )


def finish(
    point: str,
    mode: str,
    expected: str,
    error: BaseException | str | None,
    standby: Any,
    table: str,
    write: Callable[[], Any],
    failover: float,
    started: float,
) -> None:
    """Recover the promoted standby, check it against what the point and the driver's
    report (`error`: its exception, or a killed driver's last line) say, write again where
    the job's state says to, record the run, and fail on any problem."""
    if isinstance(error, str):  # a driver process's last line: RESULT ... / ERROR ... / None
        promise = promise_of_line(error if error.startswith(("RESULT ", "ERROR ")) else None)
        report = error[:600]
    else:
        promise = promised(error)
        report = f"{type(error).__name__}: {str(error)[:600]}" if error else "returned"
    assert standby.password not in report

    recovered = recover(standby)
    problems = []
    if isinstance(error, DecisionUnknownError) and "xasink resolve" in str(error):
        # A small job's COMMIT whose reply was lost: its error names the command that
        # settles it; the operator runs it against the promoted server.
        settled = settle(standby, error, table)
        recovered += settled
        if "state=" not in settled:
            problems.append(f"resolve did not settle the job: {settled}")
    old, new = case(mode)
    outcome = outcome_of(standby, table, old, new)
    states = job_states(standby, table)
    prepared, stages = prepared_count(standby), stage_tables(standby)
    if outcome == "MIXED":
        problems.append("not all-or-nothing: " + describe_mix(standby, table, old, new))
    elif expected != "either" and outcome != expected:
        problems.append(f"the promoted server holds {outcome!r}, expected {expected!r}")
    if promise in ("old", "new") and outcome != promise:
        problems.append(f"the driver promised {promise!r} but the table holds {outcome!r}")
    elif promise not in ("old", "new", "either"):
        problems.append(f"the driver's report is not acceptable: {promise}")
    final = sorted(states.values())
    if outcome == "new" and final != ["committed"]:
        problems.append(f"new contents, but the journal says {states}")
    if outcome == "old" and "committed" in final:
        problems.append(f"old contents, but the journal says {states}")
    if prepared:
        problems.append(f"{prepared} prepared transaction(s) left after recovery")
    if stages:
        problems.append(f"staging tables left: {stages}")

    # Decide by the state, as an operator would: an aborted (or absent) job is written
    # again; a committed append is not; a committed staged job again is harmless.
    rerun = "-"
    if outcome == "old" or mode != "append":
        again = Job(write)
        again.join()
        rerun = outcome_of(standby, table, old, new)
        if again.error is not None or rerun != "new":
            problems.append(f"the rerun holds {rerun!r} ({again.error!r})")
        if prepared_count(standby) or stage_tables(standby):
            problems.append("the rerun left a prepared transaction or a staging table")
        states_after = set(job_states(standby, table).values())
        if not states_after <= {"committed", "aborted"}:
            problems.append(f"after the rerun the journal says {states_after}")
    seconds = time.monotonic() - started
    record(
        point if standby.kind == "postgres" else f"{point} [{standby.kind}]",
        mode,
        outcome,
        prepared,
        expected=expected,
        promise=promise,
        report=report,
        states=states,
        rerun=rerun,
        failover_seconds=round(failover, 2),
        seconds=round(seconds, 1),
        ok=not problems,
    )
    print(
        f"\nfailover {point} / {mode}: driver {report[:160]!r} -> {outcome}, journal {states}, "
        f"rerun {rerun}, {seconds:.1f}s"
    )
    assert not problems, "\n".join(problems) + "\nrecover said:\n" + recovered


#: (kill point, fault, mode, what the promoted server must hold) with the driver's process
#: group SIGKILLed too, right after the primary: nothing of the job goes on anywhere.
KILLED_DRIVER = [
    ("after the decision, driver killed", "after_decision", "append", "new"),
    ("mid phase 2, driver killed", "after_first_commit", "merge", "new"),
]


@pytest.mark.parametrize(
    ("point", "fault_point", "mode", "expected"),
    [pytest.param(*case, id=slug(case[0])) for case in KILLED_DRIVER],
)
def test_failover_with_the_driver_killed(spark, pair, point, fault_point, mode, expected):
    """A write_xa driver process stops at `fault_point`; the primary is SIGKILLed, the
    standby promoted and the driver's process group SIGKILLed: recovery on the promoted
    server finishes the job, as the point says."""
    primary, standby = pair
    started = time.monotonic()
    table = seeded_table(primary)
    driver = DriverProcess(primary, table, fault_point, mode)
    try:
        driver.wait_for_point()
        failover = kill_and_promote(primary, standby)
    finally:
        driver.kill()
    df, options, _ = mode_case(spark, mode, PARTITIONS)

    def write() -> Any:
        return write_xa(
            df, table=table, **options, **connection_args(standby), writer_properties=TASKS
        )

    last = [ln.strip() for ln in driver.output if ln.startswith(("RESULT ", "ERROR "))]
    final = last[-1] if last else "killed before it reported"
    finish(point, mode, expected, final, standby, table, write, failover, started)


# -- a stream's batch ---------------------------------------------------------------------

STREAM_BATCHES, PER_BATCH = 3, 50
#: Kill point -> (the fault that holds the first batch there, how it is written, the
#: batches the promoted server holds once recovered).
STREAM_POINTS = {
    "stream batch one-phase": ("before_local_commit", DRIVER, 0),
    "stream batch after decision": ("after_decision", WriterProperties(max_branches=2), 1),
}


@pytest.mark.parametrize("pair", ["postgres", *FAMILY], indirect=True)
@pytest.mark.parametrize("point", [pytest.param(p, id=slug(p)) for p in STREAM_POINTS])
def test_failover_in_a_stream_batch(spark, pair, tmp_path, point):
    """A foreachBatch stream (three one-file batches) whose primary dies inside its first
    batch: after recovery the promoted server holds whole batches and the sink's mark
    agrees; the query restarted from its checkpoint against the promoted server replays
    the batch, and every row is there exactly once."""
    primary, standby = pair
    fault_point, writer, batches = STREAM_POINTS[point]
    started = time.monotonic()
    table, sink = new_table(primary), f"failover-{uuid.uuid4().hex[:8]}"
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    stream_files(source, batches=STREAM_BATCHES, per_batch=PER_BATCH)

    def sink_to(server: Any) -> Any:
        retries = ONE_RETRY if server is primary else None
        return foreach_batch(
            database_of(server),
            table,
            sink_id=sink,
            writer_properties=writer,
            commit_properties=retries,
        )

    with injected(Fault(fault_point, "hold")) as (fault,):
        query = start_foreach_stream(spark.newSession(), source, checkpoint, sink_to(primary))
        until(
            lambda: held(fault) or not query.isActive,
            f"the batch reaching {fault_point}",
            JOB_TIMEOUT,
        )
        assert held(fault), f"the stream ended before {fault_point}: {query.exception()}"
        failover = kill_and_promote(primary, standby)
        release(fault)
        with contextlib.suppress(Exception):  # the query fails: its server is gone
            query.awaitTermination(JOB_TIMEOUT)
        assert not query.isActive, "the stream did not stop"
    error = query.exception()
    report = f"{type(error).__name__}: {error}" if error else "ended"
    assert standby.password not in report

    recovered = recover(standby)
    named = re.search(r"`xasink resolve (\w+) --abandon --table ([\w.]+)`", report)
    if named:  # a batch's one-phase COMMIT whose reply was lost: settled as its error says
        settled = xasink_cli(
            standby, "resolve", *named.groups()[:1], "--abandon", "--yes", "--table", named.group(2)
        )
        assert settled.returncode == 0, settled.stdout + settled.stderr
        recovered += settled.stdout
    ids, mark = ids_in(standby, table), sink_mark(standby, sink)
    prepared, stages = prepared_count(standby), stage_tables(standby)
    whole = len(ids) % PER_BATCH == 0 and ids == list(range(len(ids)))
    outcome = "MIXED" if not whole else "new" if ids else "old"
    problems = []
    if not whole:
        problems.append(f"not whole batches: {len(ids)} rows, {len(set(ids))} distinct")
    marked = -1 if mark is None else mark[0]
    if whole and marked != len(ids) // PER_BATCH - 1:
        problems.append(f"{len(ids)} rows, but the sink's mark is {mark}")
    if whole and len(ids) != batches * PER_BATCH:
        problems.append(f"{len(ids)} rows, expected {batches} batch(es) of {PER_BATCH}")
    if prepared:
        problems.append(f"{prepared} prepared transaction(s) left after recovery")
    if stages:
        problems.append(f"staging tables left: {stages}")

    again = start_foreach_stream(spark.newSession(), source, checkpoint, sink_to(standby))
    again.awaitTermination(JOB_TIMEOUT)
    assert not again.isActive, "the restarted stream did not end"
    final = ids_in(standby, table)
    rerun = "new" if final == list(range(STREAM_BATCHES * PER_BATCH)) else "MIXED"
    if rerun != "new":
        problems.append(f"after the replay: {len(final)} rows, {len(set(final))} distinct")
    mark = sink_mark(standby, sink)
    if mark is None or mark[0] != STREAM_BATCHES - 1:
        problems.append(f"after the replay the sink's mark is {mark}")
    if prepared_count(standby) or stage_tables(standby):
        problems.append("the replay left a prepared transaction or a staging table")
    seconds = time.monotonic() - started
    record(
        point if standby.kind == "postgres" else f"{point} [{standby.kind}]",
        "append",
        outcome,
        prepared,
        expected="new" if batches else "old",
        report=report[:600],
        resolved=bool(named),
        rerun=rerun,
        failover_seconds=round(failover, 2),
        seconds=round(seconds, 1),
        ok=not problems,
    )
    print(f"\nfailover {point}: {report[:160]!r} -> {len(ids)} rows, mark {marked}, {seconds:.1f}s")
    assert not problems, "\n".join(problems) + "\nrecover said:\n" + recovered
