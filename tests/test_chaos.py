"""Chaos: random driver kills, recoveries racing live jobs, database restarts, network cuts
and a concurrency soak, on both databases. Every run ends all-or-nothing, checked with
psycopg/pymysql: the table holds exactly its old contents or exactly the new ones, no
xasink branch is prepared and no staging table is left.

The default run is a seeded CI subset; `XASINK_CHAOS_FULL=1` (`make chaos`) runs the full
suite, and `XASINK_CHAOS_SEED` replays a run. Each run is appended to a results file that
`python -m tests.chaos_report` prints as a table.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from chaos_support import (
    CUTS,
    FULL,
    JOB_TIMEOUT,
    KILLS,
    MODES,
    RACE_SECONDS,
    RESULTS,
    SOAK_SECONDS,
    DriverHost,
    case,
    describe_mix,
    leftovers,
    outcome_of,
    promise_of_line,
    promised,
    proxied,
    record,
    rng,
)
from servers import (
    SID_KINDS,
    ServerUnavailable,
    restart_server,
    start_mariadb,
    start_mariadb11,
    start_mysql,
    start_postgres,
)
from support import (
    KEYED_DDL,
    PARTITIONS,
    DriverProcess,
    cli,
    connection_args,
    contents,
    mode_case,
    seeded_table,
)

from xasink import CommitProperties, write_xa


@pytest.fixture(scope="module", autouse=True)
def _fresh_results() -> Iterator[None]:
    """One results file per run of this module (`make chaos` prints it afterwards)."""
    if not os.environ.get("XASINK_CHAOS_KEEP_RESULTS"):
        RESULTS.unlink(missing_ok=True)
    yield


def recover_all(db) -> None:
    """The real CLI with grace 0: it must leave nothing in doubt (exit 0), and no secret."""
    done = cli(db, "--grace", "0")
    assert db.password not in done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr


def bounded(
    fn: Callable[[], Any], timeout: float = JOB_TIMEOUT
) -> tuple[Any, BaseException | None]:
    """Run `fn` in a thread; (its result, the exception it raised). A job that does not end
    within `timeout` is a hang or a deadlock, and fails the test."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"a job did not end within {timeout:.0f}s (hang or deadlock)"
    return box.get("result"), box.get("error")


def judge(db, table: str, mode: str, promise: str) -> tuple[str, list[str]]:
    """(outcome, problems) of one finished run, after the final recovery."""
    old, new = case(mode)
    outcome = outcome_of(db, table, old, new)
    branches, stages = leftovers(db)
    problems = []
    if outcome == "MIXED":
        problems.append("not all-or-nothing: " + describe_mix(db, table, old, new))
    elif promise in ("old", "new") and outcome != promise:
        problems.append(f"the job promised {promise!r} but the table holds {outcome!r}")
    elif promise not in ("old", "new", "either"):
        problems.append(f"the job's report is not acceptable: {promise}")
    if branches:
        problems.append(f"prepared branches left: {branches}")
    if stages:
        problems.append(f"staging tables left: {stages}")
    return outcome, problems


# -- 1. random driver kills ---------------------------------------------------------------


@pytest.mark.ci_postgres
def test_random_driver_kills(db):
    """SIGKILL a write_xa driver at a random moment of a random job (append, upsert or
    overwrite, 1-4 partitions), then `xasink recover --grace 0`: old contents or exactly the
    new ones, every time, and nothing left prepared or staged."""
    random = rng(f"kills-{db.kind}")
    problems: list[str] = []
    host = DriverHost(db)
    try:
        # Calibration: jobs left alone (the first one also warms Spark's Python workers).
        for _ in range(2):
            table = seeded_table(db)
            report = host.run(table, "upsert", 3, JOB_TIMEOUT)
            assert str(report["final"]).startswith("RESULT "), report
            assert not judge(db, table, "upsert", "new")[1]
        duration = float(report["elapsed"])
        timing = json.loads(str(report["final"])[len("RESULT ") :])
        decided, phase_two = float(timing["decided_at"]), float(timing["commit_seconds"])
        print(f"calibration: a job takes {duration:.1f}s, decided at {decided:.1f}s")
        tally = {"old": 0, "new": 0, "MIXED": 0}
        for run in range(KILLS):
            mode, partitions = random.choice(MODES), random.randint(1, 4)
            if random.random() < 0.5:  # anywhere in the job
                delay = random.uniform(0, duration * 1.2)
            else:  # around the decision and phase 2, where the protocol is most delicate
                delay = random.uniform(max(0, decided - 0.4), decided + phase_two + 0.4)
            table = seeded_table(db)
            report = host.run(table, mode, partitions, delay)
            recover_all(db)
            promise = promise_of_line(report["final"])
            outcome, bad = judge(db, table, mode, promise)
            tally[outcome] += 1
            record(
                "driver-kill",
                db,
                outcome,
                len(leftovers(db)[0]),
                mode=mode,
                delay=delay,
                killed=report["killed"],
            )
            problems += [
                f"run {run} ({mode}, {partitions} partitions, kill at {delay:.2f}s, {report}): {p}"
                for p in bad
            ]
    finally:
        host.close()
    print(f"driver kills on {db.kind}: {KILLS} runs, {tally}")
    assert not problems, "\n".join(problems)


# -- 2. recovery racing live jobs ---------------------------------------------------------


class RecoveryLoop:
    """`xasink recover` with grace 0 and small graces, over and over, in another thread."""

    def __init__(self, db, random, graces=(0, 0, 0.5, 1, 2, 3)) -> None:
        self.db, self.random, self.graces = db, random, graces
        self.runs: list[tuple[float, int]] = []
        self.problems: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        deadline = time.monotonic() + RACE_SECONDS + 2 * JOB_TIMEOUT
        while not self._stop.is_set() and time.monotonic() < deadline:
            grace = self.random.choice(self.graces)
            done = cli(self.db, "--grace", str(grace))
            self.runs.append((grace, done.returncode))
            text = done.stdout + done.stderr
            if self.db.password in text:
                self.problems.append("the password appears in recover's output")
            if done.returncode not in (0, 1) or "Traceback" in text:
                self.problems.append(
                    f"recover --grace {grace} exit {done.returncode}: {text[-800:]}"
                )
            self._stop.wait(self.random.uniform(0, 0.7))

    def __enter__(self) -> RecoveryLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=330)
        assert not self._thread.is_alive(), "a recovery run hung"


@pytest.mark.ci_postgres
def _write(db, df, table: str, options: dict, heartbeat: float) -> Callable[[], Any]:
    """A write_xa call of `df` into `table` with `options`, beating every `heartbeat` s."""
    beats = CommitProperties(heartbeat_interval=heartbeat)
    args = {**options, **connection_args(db), "commit_properties": beats}
    return functools.partial(write_xa, df, table=table, **args)


def test_recovery_races_live_jobs(spark, db):
    """Jobs write while recoveries with grace 0..3 s run in a loop. Each job's report is the
    truth: returned -> exactly the new contents; an error saying nothing was written -> the
    old ones; after a final `recover --grace 0`, never a mix, nothing left behind."""
    random = rng(f"race-{db.kind}")
    jobs: list[tuple[str, str, str, str]] = []
    warm = seeded_table(db)  # the session's first job pays for starting Python workers
    df, options, _ = mode_case(spark, "upsert", 2)
    write_xa(df, table=warm, **options, **connection_args(db))
    with RecoveryLoop(db, random) as loop:
        deadline = time.monotonic() + RACE_SECONDS
        while time.monotonic() < deadline:
            mode, partitions = random.choice(MODES), random.randint(1, 4)
            table = seeded_table(db)
            df, options, _ = mode_case(spark, mode, partitions)
            _, error = bounded(_write(db, df, table, options, heartbeat=0.3))
            if error is not None and db.password in str(error):
                loop.problems.append("the password appears in an error message")
            jobs.append((table, mode, promised(error), f"{type(error).__name__}: {error}"))
    recover_all(db)
    problems = list(loop.problems)
    tally: dict[str, int] = {}
    for table, mode, promise, error in jobs:
        outcome, bad = judge(db, table, mode, promise)
        tally[outcome] = tally.get(outcome, 0) + 1
        record("recover-race", db, outcome, len(leftovers(db)[0]), mode=mode, promise=promise)
        problems += [f"{mode} job into {table} ({error[:400]}): {p}" for p in bad]
    print(f"recovery races on {db.kind}: {len(jobs)} jobs, {tally}, recoveries {loop.runs}")
    assert len(jobs) >= 2 and loop.runs, "the race did not run"
    assert not problems, "\n".join(problems)


# -- 3. database restarts -----------------------------------------------------------------


@pytest.fixture(scope="module", params=["postgres", "mariadb", "mariadb11", "mysql"])
def restartable(request) -> Iterator[Any]:
    """A dedicated throwaway server (never the shared one): these tests crash it."""
    starter = {
        "postgres": start_postgres,
        "mariadb": start_mariadb,
        "mariadb11": start_mariadb11,
        "mysql": start_mysql,
    }
    try:
        with starter[request.param]() as server:
            if server.source != "local":
                pytest.skip("restarts need a server started from local binaries")
            yield server
    except ServerUnavailable as exc:
        required = os.environ.get("XASINK_TEST_REQUIRE_SERVERS", "").strip() not in ("", "0")
        if required and request.param not in SID_KINDS:  # only their roots' provisioning can
            pytest.fail(f"{request.param} server required but unavailable: {exc}")
        pytest.skip(f"no {request.param} server: {exc}")


RESTARTS = [
    # (fault point, what the driver does, mode); the CI subset runs one per server (CI_RESTART).
    ("before_decision", "killed", "append"),
    ("after_first_commit", "continues", "upsert"),
    ("after_first_commit", "killed", "append"),
    ("before_decision", "continues", "overwrite"),
    ("before_decision", "killed", "upsert"),
    ("after_first_commit", "continues", "append"),
]

#: The case each server runs in CI (MariaDB 11.8: in make test-mariadb11): MySQL's is a SIGKILL
#: between PREPARE and the decision.
CI_RESTART = {"postgres": 0, "mariadb": 1, "mariadb11": 1, "mysql": 0}


@pytest.mark.mysql_ci
@pytest.mark.parametrize(
    ("point", "driver_fate", "mode"),
    [pytest.param(*r, id="-".join(r)) for r in RESTARTS],
)
def test_database_restart(restartable, point, driver_fate, mode):
    """The server is SIGKILLed and started again on the same data dir and port between
    PREPARE and the decision (`before_decision`) or during phase 2 (`after_first_commit`).
    The prepared branches survive; the driver is killed (or continues on its broken
    connections); `xasink recover --grace 0` then finishes the job exactly."""
    db = restartable
    ci = RESTARTS.index((point, driver_fate, mode)) == CI_RESTART[db.kind]
    if not (FULL or ci):
        pytest.skip("full chaos run only (XASINK_CHAOS_FULL=1)")
    rng(f"restart-{db.kind}-{point}-{driver_fate}-{mode}")
    table = seeded_table(db)
    action = "hang" if driver_fate == "killed" else "pause"
    driver = DriverProcess(db, table, point, mode, action=action)
    try:
        driver.wait_for_point()
        before = leftovers(db)[0]
        if driver_fate == "killed":
            driver.kill()
        restart_server(db)
        after = leftovers(db)[0]
        # Prepared branches survive the crash; uncommitted work does not exist any more.
        assert sorted(after) == sorted(before), (before, after)
        expected = PARTITIONS if point == "before_decision" else PARTITIONS - 1
        if mode == "append":  # staged modes may plan their own number of branches
            assert len(after) == expected, after
        assert after, "no prepared branch at the fault point"
        final = driver.resume(timeout=JOB_TIMEOUT) if driver_fate == "continues" else None
    finally:
        if driver.proc.poll() is None:
            driver.kill()
    promise = (
        promise_of_line(final)
        if driver_fate == "continues"
        else ("old" if point == "before_decision" else "new")
    )
    if driver_fate == "continues" and point == "after_first_commit" and promise == "old":
        promise = "a decided job reported as not written: " + str(final)
    recover_all(db)
    outcome, bad = judge(db, table, mode, promise)
    record("db-restart", db, outcome, len(leftovers(db)[0]), point=point, fate=driver_fate)
    print(f"restart {db.kind} at {point}, driver {driver_fate}: {final} -> {outcome}")
    assert not bad, bad


# -- 4. network cuts ----------------------------------------------------------------------


def test_network_cuts(spark, db):
    """A TCP proxy between the JDBC URL and the server resets every connection (and refuses
    new ones for up to 1.5 s) at a random moment of phase 1, the decision or phase 2. The
    job succeeds exactly, or fails with an XasinkError without the password; after a direct
    `xasink recover --grace 0` the table is old or new, never a mix."""
    random = rng(f"cuts-{db.kind}")
    problems: list[str] = []
    with proxied(db) as (through, proxy):

        def job(table: str, mode: str, partitions: int) -> Any:
            df, options, _ = mode_case(spark, mode, partitions)
            return write_xa(
                df,
                table=table,
                **options,
                **connection_args(through),
                commit_properties=CommitProperties(heartbeat_interval=0.5),
            )

        table = seeded_table(db)
        started = time.monotonic()
        _, error = bounded(lambda: job(table, "upsert", 3))
        duration = time.monotonic() - started
        assert error is None, error
        print(f"calibration: a job through the proxy takes {duration:.1f}s")
        tally: dict[str, int] = {}
        for run in range(CUTS):
            mode, partitions = random.choice(MODES), random.randint(1, 4)
            delay, refuse = random.uniform(0, duration), random.choice([0, 0, 0.5, 1.5])
            table = seeded_table(db)
            cutter = threading.Timer(delay, proxy.cut, kwargs={"refuse_for": refuse})
            cutter.start()
            _, error = bounded(functools.partial(job, table, mode, partitions))
            cutter.cancel()
            cutter.join()
            time.sleep(refuse)
            promise = promised(error)
            if error is not None and db.password in str(error):
                problems.append(f"run {run}: the password appears in {type(error).__name__}")
            recover_all(db)  # directly, not through the proxy
            outcome, bad = judge(db, table, mode, promise)
            tally[outcome] = tally.get(outcome, 0) + 1
            record("net-cut", db, outcome, len(leftovers(db)[0]), mode=mode, delay=delay)
            problems += [
                f"run {run} ({mode}, cut at {delay:.2f}s, refuse {refuse}s, "
                f"{type(error).__name__}: {str(error)[:400]}): {p}"
                for p in bad
            ]
    print(f"network cuts on {db.kind}: {CUTS} runs, {tally}")
    assert not problems, "\n".join(problems)


# -- 5. concurrency soak ------------------------------------------------------------------

SHARED_KEYS = 100


def _soak_rows(kind: str, thread: int, number: int) -> tuple[str, list[tuple[Any, ...]], range]:
    """(mode, rows, own key range) of one soak job. Every job writes its own key range; an
    upsert also rewrites the shared keys with values every upsert agrees on (idempotent), so
    the final state is exact whatever the order."""
    base = 1_000_000 * (thread + 1) + 1_000 * number
    own = range(base, base + 200)
    if kind == "append":
        return kind, [(i, f"a{thread}", float(i)) for i in own], own
    rows = [(i, f"u{thread}", float(i)) for i in own]
    rows += [(k, "shared", float(k) * 3) for k in range(SHARED_KEYS)]
    return kind, rows, own


@pytest.mark.ci_postgres
def test_concurrency_soak(spark, db):
    """Four threads of one Spark session write the same keyed table at once (append and
    upsert mixed) for a while; each job is bounded. Final contents are exact: every job that
    returned has its rows, every job that said nothing was written has none, the shared keys
    hold the upserts' agreed values, and nothing is left prepared or staged."""
    random = rng(f"soak-{db.kind}")
    table = f"soak_{uuid.uuid4().hex[:10]}"
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(KEYED_DDL[db.dialect].format(t=table))
        cursor.executemany(
            f"INSERT INTO {table} (id, name, v) VALUES (%s, %s, %s)",
            [(k, "old", float(k)) for k in range(SHARED_KEYS)],
        )
    plans = [[random.choice(["append", "upsert"]) for _ in range(200)] for _ in range(4)]
    jobs: list[tuple[str, range, list[tuple[Any, ...]], str, str]] = []
    lock = threading.Lock()
    deadline = time.monotonic() + SOAK_SECONDS

    def worker(thread: int) -> None:
        for number, kind in enumerate(plans[thread]):
            if time.monotonic() >= deadline:
                return
            mode, rows, own = _soak_rows(kind, thread, number)
            df = spark.createDataFrame(rows, "id long, name string, v double").repartition(
                random.randint(1, 3)
            )
            options = {"mode": "upsert", "key": ["id"]} if mode == "upsert" else {}
            _, error = bounded(_write(db, df, table, options, heartbeat=0.5))
            with lock:
                jobs.append((mode, own, rows, promised(error), f"{type(error).__name__}: {error}"))

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(SOAK_SECONDS + 2 * JOB_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a soak job hung"
    recover_all(db)
    got = contents(db, table)
    problems = [
        f"{mode} job: the report is not acceptable ({promise}): {error[:400]}"
        for mode, _, _, promise, error in jobs
        if promise not in ("old", "new", "either")
    ]
    expected: dict[int, tuple[Any, Any]] = {k: ("old", float(k)) for k in range(SHARED_KEYS)}
    upserted = "none"
    tally: dict[str, int] = {}
    for mode, own, rows, promise, error in jobs:
        mine = {i: (n, v) for i, n, v in rows if i in own}
        present = {i: got[i] for i in own if i in got}
        outcome = "new" if present == mine else "old" if not present else "MIXED"
        tally[outcome] = tally.get(outcome, 0) + 1
        if outcome == "MIXED" or (promise in ("old", "new") and outcome != promise):
            problems.append(f"{mode} job {own} promised {promise}, holds {outcome}: {error[:300]}")
        elif outcome == "new" and not error.startswith("NoneType"):
            # Strict: no fault is injected here, so a job whose rows all committed must
            # have said so; an error (e.g. a CommitError from meeting a concurrent
            # finisher) would send its caller to recover, or to write it again.
            problems.append(f"{mode} job {own} committed but reported an error: {error[:300]}")
        expected.update(present)
        record("soak", db, outcome, 0, mode=mode, promise=promise)
        if mode == "upsert" and outcome == "new":
            upserted = "yes"
    if upserted == "yes":
        expected.update({k: ("shared", float(k) * 3) for k in range(SHARED_KEYS)})
    if got != expected:
        wrong = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
        problems.append(f"final contents differ at {len(wrong)} keys, e.g. {wrong[:10]}")
    branches, stages = leftovers(db)
    problems += [f"prepared branches left: {branches}"] * bool(branches)
    problems += [f"staging tables left: {stages}"] * bool(stages)
    if branches or got != expected:
        record("soak-final-state", db, "MIXED", len(branches), jobs=len(jobs))
    print(f"soak on {db.kind}: {len(jobs)} jobs in {SOAK_SECONDS:.0f}s, {tally}")
    assert sum(1 for j in jobs if j[3] == "new") >= 4, f"too few jobs succeeded: {tally}"
    assert not problems, "\n".join(problems)
