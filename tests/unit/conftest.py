"""The fast unit layer: no database, no Spark session, no JVM.

Every test here runs in-process on pure Python (pyarrow and numpy included). The root
``tests/conftest.py`` only *defines* server fixtures (they start a server when a test asks
for one); nothing there runs per test. To keep it that way for this folder:

* the server and Spark fixtures are overridden below so that asking for one fails at once,
  naming the rule, instead of starting a server (or skipping, without
  ``XASINK_TEST_REQUIRE_SERVERS``);
* an autouse guard refuses TCP connections and checks after each test that no JVM runs.

The shared fakes (a journal, branch operations, partition reports) live here too, handed
to tests by the `fakes` fixture.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Literal

import pytest

from xasink.protocol.applying import Finished
from xasink.protocol.branches import Outcome
from xasink.protocol.records import JobRecord
from xasink.runtime.jars import HIDDEN_ENV, JARS_ENV
from xasink.spec import ConnectionSpec
from xasink.xid import BranchId

#: A valid job id, journal tag and secret used across the unit tests.
JOB = "0123456789abcdef0123456789abcdef"
TAG = "a1b2c3d4"
SECRET = "s3cr3t-Pa55word!"
#: Job states as the journal stores them.
RUNNING, COMMITTING, COMMITTED, ABORTED = "running", "committing", "committed", "aborted"

_NO_SERVER = "tests/unit takes no database server and no Spark session: move this test up"


# -- no servers, no Spark, no JVM ----------------------------------------------------------
def _refused(name: str, scope: Literal["session", "function"] = "session") -> Any:
    """The fixture `name` overridden: asking for it fails at once, naming the rule."""

    def fixture() -> None:
        pytest.fail(_NO_SERVER)

    fixture.__name__ = fixture.__qualname__ = name
    return pytest.fixture(scope=scope, name=name)(fixture)


postgres = _refused("postgres")
mariadb = _refused("mariadb")
pg_no_xa = _refused("pg_no_xa")
pg_sync_standby = _refused("pg_sync_standby")
db = _refused("db", scope="function")
spark = _refused("spark")


@pytest.fixture(autouse=True)
def _unit_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No network connection, no JVM, and no jar from the environment leaking in."""
    real_connect = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            raise AssertionError(f"unit tests open no network connection (to {address!r})")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv(JARS_ENV, raising=False)
    monkeypatch.delenv(HIDDEN_ENV, raising=False)
    # In `make test` the unit tests share a process with tests that started a JVM and a
    # Spark session before them: what matters is that no unit test starts one.
    before = _jvm_started(), _spark_context()
    yield
    assert before[0] or not _jvm_started(), "a unit test started a JVM"
    assert before[1] is not None or _spark_context() is None, "a unit test started Spark"


def _jvm_started() -> bool:
    jpype = sys.modules.get("jpype")
    return jpype is not None and bool(jpype.isJVMStarted())


def _spark_context() -> Any:
    context = sys.modules.get("pyspark.core.context") or sys.modules.get("pyspark.context")
    return getattr(getattr(context, "SparkContext", None), "_active_spark_context", None)


# -- a fake journal and fake branch operations, for recovery -----------------------------
def job_record(
    state: str,
    winners: frozenset[tuple[int, int]] = frozenset(),
    *,
    job_id: str = JOB,
    table: str = "public.events",
    heartbeat_age: float = 1000.0,
    beats: int = 3,
    lease: float = 0.0,
    staged: bool = False,
) -> JobRecord:
    return JobRecord(job_id, table, state, winners, heartbeat_age, beats, lease, staged)


class LockTimeout(Exception):
    """A lock wait that gave up (what `FakeDialect.is_lock_timeout` recognises)."""


class FakeDialect:
    """A server that does not say when a branch was prepared."""

    def prepared_ages_sql(self) -> None:
        return None

    def is_lock_timeout(self, exc: BaseException) -> bool:
        return isinstance(exc, LockTimeout)


@dataclass
class FakeJournal:
    """The journal rows recovery reads and the conditional updates it makes, in memory.

    `beat_on_read`: the job's owner beats each time its row is read (a live writer), so a
    conditional abort by beat count never lands."""

    jobs: dict[str, JobRecord] = field(default_factory=dict)
    tag: str = TAG
    schema: str | None = None
    lock_wait: float = 60.0
    beat_on_read: bool = False
    #: What finishes staged jobs (recovery hands it on; the fakes never call it).
    staged: Any = None
    #: What finish_or_refuse returns (or raises) per job; default (Finished(), None).
    finishes: dict[str, Any] = field(default_factory=dict)
    stages: list[tuple[str, Any]] = field(default_factory=list)
    #: Exceptions the next release_stage calls raise, in order.
    release_failures: list[BaseException] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    #: The coordinator's link of a participant's job (a transaction over several databases).
    coordinators: dict[str, Any] = field(default_factory=dict)

    @property
    def dialect(self) -> FakeDialect:
        return FakeDialect()

    def job(self, conn: Any, job_id: str) -> JobRecord | None:
        record = self.jobs.get(job_id)
        if record is not None and self.beat_on_read:
            self.jobs[job_id] = replace(record, beats=record.beats + 1)
        return record

    def coordinator(self, conn: Any, job_id: str) -> Any:
        return self.coordinators.get(job_id)

    def linked(self, conn: Any, job_id: str) -> Any:
        return self.coordinators.get(job_id)

    def state(self, conn: Any, job_id: str) -> str | None:
        record = self.jobs.get(job_id)
        return None if record is None else record.state

    def jobs_in_state(self, conn: Any, state: str) -> list[JobRecord]:
        return [r for r in self.jobs.values() if r.state == state]

    def running(self, conn: Any) -> list[str]:
        return [r.job_id for r in self.jobs.values() if r.state == RUNNING]

    def abort(self, conn: Any, job_id: str, beats: int | None = None) -> bool:
        self.calls.append(("abort", job_id, beats))
        record = self.jobs.get(job_id)
        if record is None or record.state != RUNNING:
            return False
        if beats is not None and record.beats != beats:
            return False
        self.jobs[job_id] = replace(record, state=ABORTED)
        return True

    def abandon(self, conn: Any, job_id: str) -> bool:
        self.calls.append(("abandon", job_id))
        record = self.jobs.get(job_id)
        if record is None or record.state != COMMITTING or not record.staged:
            return False
        self.jobs[job_id] = replace(record, state=ABORTED)
        return True

    def finish_or_refuse(self, conn: Any, job_id: str, winners: Any) -> tuple[Any, Any]:
        self.calls.append(("finish", job_id, frozenset(winners)))
        result = self.finishes.get(job_id, (Finished(), None))
        if isinstance(result, BaseException):
            raise result
        if result[0]:
            self.jobs[job_id] = replace(self.jobs[job_id], state=COMMITTED)
        return result

    def finished_stages(self, conn: Any) -> list[tuple[str, Any]]:
        return list(self.stages)

    def release_stage(self, conn: Any, job_id: str, plan: Any) -> None:
        self.calls.append(("release", job_id, str(plan.stage)))
        if self.release_failures:
            raise self.release_failures.pop(0)


class FakeOps:
    """XA branch operations over an in-memory list of prepared branches.

    `outcomes` overrides what commit/rollback of one branch returns (an Outcome) or raises
    (an exception); `settled` answers for winners no longer listed (default: committed)."""

    def __init__(
        self,
        prepared: list[BranchId] = (),  # type: ignore[assignment]
        *,
        password: str = SECRET,
        outcomes: dict[BranchId, Any] | None = None,
        settled: dict[BranchId, Outcome] | None = None,
    ) -> None:
        self.spec = ConnectionSpec("jdbc:postgresql://db/app", "app", password, dialect="postgres")
        self.branches = list(prepared)
        self.outcomes = outcomes or {}
        self.settled_as = settled or {}
        self.calls: list[tuple[str, str]] = []

    def prepared(self) -> list[tuple[BranchId, Any]]:
        return [(b, b.xid) for b in self.branches]

    def prepared_of(self, job_id: str) -> list[BranchId]:
        found = [b for b in self.branches if b.job_id == job_id]
        return sorted(found, key=lambda b: (b.partition, b.attempt))

    def _settle(self, verb: str, branch: BranchId, done: Outcome) -> Outcome:
        self.calls.append((verb, branch.name))
        result = self.outcomes.get(branch, done)
        if isinstance(result, BaseException):
            raise result
        self.branches.remove(branch)
        return result

    def commit(self, branch: BranchId) -> Outcome:
        return self._settle("commit", branch, Outcome.COMMITTED)

    def rollback(self, branch: BranchId) -> Outcome:
        return self._settle("rollback", branch, Outcome.ROLLED_BACK)

    def settled(self, branch: BranchId) -> Outcome:
        self.calls.append(("settled", branch.name))
        return self.settled_as.get(branch, Outcome.ALREADY_COMMITTED)


def branch(partition: int, attempt: int, job_id: str = JOB, tag: str = TAG) -> BranchId:
    return BranchId(tag, job_id, partition, attempt)


# -- partition reports and a plan, for the driver's winner selection ------------------------
def report(
    partition: int,
    attempt: int = 0,
    *,
    xid: str = "x",
    rows: int = 0,
    peak_rss_kb: int = 0,
    path: str = "",
    problem: str = "",
) -> SimpleNamespace:
    """What one partition tells the driver (the fields of a branch report)."""
    return SimpleNamespace(
        partition=partition,
        attempt=attempt,
        xid=xid,
        rows=rows,
        peak_rss_kb=peak_rss_kb,
        path=path,
        problem=problem,
    )


def write_plan(job_id: str = JOB, table: str = "events") -> SimpleNamespace:
    """The parts of a write plan the winner selection reads."""
    return SimpleNamespace(
        job_id=job_id,
        table=table,
        target=table,
        apply=None,
        partition_base=0,
        journal=SimpleNamespace(tag=TAG),
        spec=ConnectionSpec("jdbc:postgresql://db/app", "app", SECRET, dialect="postgres"),
    )


@pytest.fixture
def fakes() -> SimpleNamespace:
    """The fakes above, for tests (a conftest is not imported by name: two share it)."""
    return SimpleNamespace(
        JOB=JOB,
        TAG=TAG,
        SECRET=SECRET,
        Journal=FakeJournal,
        LockTimeout=LockTimeout,
        Ops=FakeOps,
        record=job_record,
        branch=branch,
        report=report,
        plan=write_plan,
    )
