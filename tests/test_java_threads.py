"""Java called from several Python threads: phase 2's commit pool, the heartbeat and the
LOAD DATA loader's thread never kill the process inside JPype.

The hazard (JPype 1.7.1, and its master as of this writing): JPype publishes a Java class's
Python wrapper before the wrapper's conversion hints (`PyJPClass_hook` sets the host, then
`_jclassPost`, which is Python code, sets `_hints`). A thread that resolves an overload
against that class in between, giving it a Python value or a Java object not assignable to
it, reads a null and the process dies: SIGSEGV in `JPHintsConversion::matches` or
`JPConversionObject::matches`. A thread that must create a wrapper itself waits on JPype's
Java-side lock instead, so only a thread resolving against a class that another thread is
still wrapping can fall in. (JPype's fix of its overload cache after 1.7.1 matters only
without the GIL: with it, that cache is only read and written by the thread holding it.)

The adversary: in a fresh process, every class wrapped after setup is held in that gap for
`HOLD` seconds (the GIL free), and the interpreter switches threads every microsecond. The
control shows that it kills a process whose threads do resolve against a class being
wrapped. xasink's threads survive it: they hand Python values only to parameters JPype's
built-in conversions take before any hints (String, Object and the primitives, wrapped when
the JVM starts; byte[] from bytes) and Java objects only to parameters they are assignable
to, so no resolution of theirs reads the hints of a class being wrapped; and the classes
they wrap themselves (the heartbeat's ForkJoinPool, the loader's Enumeration) are resolved
against by no other thread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator

import pytest
from servers import DbServer
from support import own_journal_schema, run_script, run_sql

from xasink import FORMAT_ID

#: How long the adversary holds each class between its wrapper and its hints, in seconds.
HOLD = 0.05
SERVER_ENV = "XASINK_TEST_THREADS_SERVER"

ADVERSARY = """
import json, sys, threading, time
import jpype._jcustomizer as _customizer

HOLD = float(sys.argv[1])
held = []  # (thread, class): each wrapper held between its publication and its hints
_hints_of = _customizer.getClassHints


def _held(name):
    if sys._getframe(1).f_code.co_name == "_jclassPost":  # the wrapper is published
        held.append((threading.current_thread().name, str(name)))
        time.sleep(HOLD)  # its hints are not: any thread may run now
    return _hints_of(name)


def arm():
    sys.setswitchinterval(1e-6)
    _customizer.getClassHints = _held


def report(**result):
    print("RESULT " + json.dumps({**result, "held": held}), flush=True)
"""

CONTROL = (
    ADVERSARY
    + """
import jpype
from xasink.runtime.jars import resolve_classpath
from xasink.runtime.jvm import ensure_jvm

ensure_jvm(resolve_classpath(("postgres",), None))
completion = jpype.JClass("java.util.concurrent.ExecutorCompletionService")
arm()
threading.Thread(target=jpype.JClass, args=("java.util.concurrent.Executor",), daemon=True).start()
deadline = time.monotonic() + 30
while not held and time.monotonic() < deadline:
    time.sleep(0.001)
try:
    completion(1)  # an int for its Executor, resolved while Executor is being wrapped
except TypeError:
    pass  # what a process whose JPype waits for the hints says
report()
"""
)

JOURNAL = """
import os, uuid
from servers import DbServer
from support import spec_for
from xasink.protocol.connecting import open_journal
from xasink.protocol.heartbeat import Heartbeat
from xasink.xid import BranchId

server = DbServer(**json.loads(os.environ["XASINK_TEST_THREADS_SERVER"]))
schema, spec, job = sys.argv[2], spec_for(server), uuid.uuid4().hex
session, journal = open_journal(spec, schema)  # the driver's, open long before phase 2
journal = journal.ensure(session.connection, spec)
journal.begin_job(session.connection, job, "java_threads", None, lease=60.0)
"""

PHASE_TWO = (
    ADVERSARY
    + JOURNAL
    + """
from support import prepared_branch, run_sql
from xasink.protocol.branches import BranchOps, commit_group
from xasink.runtime.jdbc import execute, network_timeout_lifted

count, parallelism = int(sys.argv[3]), int(sys.argv[4])
branches = [BranchId(journal.tag, job, p, 1) for p in range(count)]
for branch in branches:
    undo = prepared_branch(server, schema, branch)
    if branch.partition % 5 == 4:  # finished by another session: XAER_NOTA, then its marker
        run_sql(server, undo.replace("ROLLBACK", "COMMIT", 1))
arm()
beat = Heartbeat(journal, spec, job, interval=0.01, beat_now=True).start()
with session:
    with BranchOps(spec, journal, backoff=0.05) as ops:
        group = commit_group(branches, ops=ops, parallelism=parallelism)
    with network_timeout_lifted(session.connection):  # a staged apply's, beside the beats
        execute(session.connection, "SELECT 1")
    beat.stop()
outcomes = [o.value for o in group.outcomes.values()]
report(job=job, outcomes=outcomes, errors=[str(e) for e in group.errors.values()])
"""
)

LOAD = (
    ADVERSARY
    + JOURNAL
    + """
import pyarrow as pa
from xasink.loaders.base import LoadTarget
from xasink.loaders.mysql_load_data import MySQLLoadDataLoader
from xasink.protocol.sessions import open_session

table, loads, batches = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
xid, columns = BranchId(journal.tag, job, 0, 1).xid, ["id", "s"]
arrow = pa.schema([("id", pa.int64()), ("s", pa.string())])
arm()
beat = Heartbeat(journal, spec, job, interval=0.01, beat_now=True).start()
with session, open_session(spec) as branch:
    branch.start(xid)
    quoted = [f"`{c}`" for c in columns]
    target = LoadTarget(branch.connection, f"`{table}`", quoted, columns, ["", ""], "mysql")
    sent = 0
    for _ in range(loads):  # each load streams from a loader thread of its own
        loader = MySQLLoadDataLoader(target, arrow, chunk_bytes=64)
        try:
            for _ in range(batches):
                ids = list(range(sent, sent + 20))
                loader.write(pa.record_batch([pa.array(ids), [f"r{i}" for i in ids]], arrow))
                sent += 20
            loader.finish()
        finally:
            loader.abort()
    branch.end(xid)
    branch.prepare(xid)
    branch.commit(xid)
    beat.stop()
report(job=job, sent=sent)
"""
)


def _run(code: str, *args: object) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`code` in a process of its own (a crash must not take pytest with it); its result."""
    proc = run_script(code, str(HOLD), *map(str, args), timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return proc, json.loads(lines[-1][len("RESULT ") :]) if lines else {}


def _survived(proc: subprocess.CompletedProcess[str], result: dict) -> None:
    died = [line for line in (proc.stdout + proc.stderr).splitlines() if "C  [" in line]
    assert proc.returncode == 0 and result, (
        f"the process died (exit {proc.returncode}) {died[:2]}:\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    threads = {thread for thread, _ in result["held"]}
    assert threads - {"MainThread"}, (
        f"no class was wrapped on another thread than the main one ({result['held']}): "
        "the adversary had no gap to hold open"
    )


@pytest.fixture
def hs_err_aside(tmp_path, monkeypatch) -> None:
    """A crashing JVM writes its report under tmp_path, not into tests/ (the cwd)."""
    options = os.environ.get("XASINK_JVM_OPTIONS", "")
    monkeypatch.setenv("XASINK_JVM_OPTIONS", f"{options} -XX:ErrorFile={tmp_path}/hs_err_%p.log")


@contextlib.contextmanager
def _handed_over(server: DbServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The server, handed to the child processes in their environment; a journal schema of
    their own, dropped afterwards. A child that died in phase 2 left its branches prepared,
    holding locks the drop would wait for forever: they are rolled back first."""
    monkeypatch.setenv(SERVER_ENV, json.dumps(dataclasses.asdict(server)))
    schemas = own_journal_schema(server)
    try:
        yield next(schemas)
    finally:
        server.rollback_prepared(f"{FORMAT_ID}_" if server.kind == "postgres" else "xasink1:")
        next(schemas, None)


def test_the_adversary_kills_threads_that_resolve_against_a_class_being_wrapped(hs_err_aside):
    """The control: one thread wraps Executor, the main thread resolves a constructor that
    takes an Executor meanwhile. With JPype's gap held open, that process dies."""
    proc, result = _run(CONTROL)
    if proc.returncode == 0:
        assert result.get("held"), f"the adversary never held a class:\n{proc.stdout}"
        pytest.skip("this JPype waits for a class's hints: the hazard this file guards is gone")
    frames = proc.stdout + proc.stderr
    assert "JPHintsConversion::matches" in frames or "JPConversionObject::matches" in frames, (
        frames[-3000:]
    )


@pytest.mark.parametrize(
    "processes, branches, parallelism",
    [(1, 40, 4), pytest.param(10, 90, 8, marks=pytest.mark.full_only)],
    ids=["ci", "full"],
)
def test_the_commit_pool_and_the_heartbeat_survive_the_adversary(
    db, monkeypatch, hs_err_aside, processes, branches, parallelism
):
    """Phase 2 in fresh driver processes: the first branch committed alone, the rest over
    `parallelism` connections on their threads (every fifth finished elsewhere, so its
    commit fails and its marker is read on the pool's threads) while the heartbeat's first
    beats wrap its classes; then the main thread lifts its network timeout, as a staged
    apply does. Every branch is committed exactly once and none is left prepared."""
    with _handed_over(db, monkeypatch) as schema:
        for _ in range(processes):
            _commit_in_a_fresh_driver(db, schema, branches, parallelism)


def _commit_in_a_fresh_driver(db: DbServer, schema: str, branches: int, parallelism: int) -> None:
    proc, result = _run(PHASE_TWO, schema, branches, parallelism)
    _survived(proc, result)
    assert result["errors"] == []
    elsewhere = len(range(4, branches, 5))
    assert Counter(result["outcomes"]) == {
        "commit": branches - elsewhere,
        "already committed": elsewhere,
    }
    where = f"job_id = '{result['job']}'"
    markers = run_sql(db, f"SELECT partition_id FROM {schema}.xasink_markers WHERE {where}")
    assert sorted(int(p) for (p,) in markers) == list(range(branches))
    assert db.prepared_transactions() == [], "prepared transactions were left behind"


@pytest.mark.parametrize(
    "processes, loads",
    [(1, 3), pytest.param(10, 6, marks=pytest.mark.full_only)],
    ids=["ci", "full"],
)
def test_the_loader_thread_and_the_heartbeat_survive_the_adversary(
    mysql_family, monkeypatch, hs_err_aside, processes, loads
):
    """LOAD DATA streamed from its loader's thread, whose Enumeration Java calls back into
    while the heartbeat beats and the branch's own thread encodes: every row once."""
    db = mysql_family
    with _handed_over(db, monkeypatch) as schema:
        _load_in_fresh_workers(db, schema, processes, loads)


def _load_in_fresh_workers(db: DbServer, schema: str, processes: int, loads: int) -> None:
    table = f"java_threads_{schema}"
    run_sql(db, f"CREATE TABLE {db.database}.{table} (id BIGINT, s VARCHAR(32))")
    try:
        for _ in range(processes):
            run_sql(db, f"TRUNCATE TABLE {db.database}.{table}")
            proc, result = _run(LOAD, schema, table, loads, 30)
            _survived(proc, result)
            assert result["sent"] == loads * 30 * 20
            ids = run_sql(db, f"SELECT id FROM {db.database}.{table} ORDER BY id")
            assert [int(i) for (i,) in ids] == list(range(result["sent"]))
            assert db.prepared_transactions() == [], "prepared transactions were left behind"
    finally:
        run_sql(db, f"DROP TABLE IF EXISTS {db.database}.{table}")
