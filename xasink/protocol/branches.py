"""Group operations on branches from the driver: commit, roll back, list prepared.

All of them run on an idle XA session of their own (COMMIT PREPARED needs a connection with
no transaction open). Transient failures reconnect and retry, a bounded number of times.
XAER_NOTA on commit means "already committed" only when the branch's marker row proves it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..errors import PreflightError
from ..spec import ConnectionSpec
from ..xid import BranchId, Xid
from . import sessions
from .journal import Journal
from .sessions import open_session
from .states import JobState
from .xa import FailureKind, XaFailure, XaSession

log = logging.getLogger("xasink")
T = TypeVar("T")
#: The kept-session role (xasink.protocol.sessions) of the branch operations' session.
OPS_ROLE = "branch ops"


class Outcome(enum.Enum):
    COMMITTED = "commit"
    ALREADY_COMMITTED = "already committed"
    ROLLED_BACK = "rollback"
    ALREADY_GONE = "already gone"
    LOST = "LOST"


#: The first wait for a branch held by another session (then doubled), in seconds.
SETTLE_FIRST_WAIT = 0.02


class BranchOps:
    """Commit / rollback / recover for one database, with reconnect-and-retry."""

    def __init__(
        self,
        spec: ConnectionSpec,
        journal: Journal,
        retries: int = 5,
        backoff: float = 0.5,
        reuse: bool = False,
    ) -> None:
        self.spec = spec
        self.journal = journal
        self.retries = retries
        self.backoff = backoff
        #: Take a kept session and hand it back after a clean exit (see `sessions`).
        self.reuse = reuse
        self._session: XaSession | None = None

    @property
    def session(self) -> XaSession:
        if self._session is None:
            kept = sessions.take(self.spec, OPS_ROLE) if self.reuse else None
            self._session = kept or open_session(self.spec)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> BranchOps:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        if self.reuse and exc_type is None and self._session is not None:
            sessions.give(self.spec, OPS_ROLE, self._session)
            self._session = None
        self.close()

    def _retry(self, operation: str, call: Callable[[XaSession], T]) -> T:
        for attempt in range(self.retries + 1):
            try:
                return call(self.session)
            except (XaFailure, PreflightError) as exc:
                transient = isinstance(exc, PreflightError) or exc.kind is FailureKind.TRANSIENT
                if not transient or attempt == self.retries:
                    raise
                delay = self.backoff * 2**attempt
                log.warning("xasink %s: %s; retrying in %.1fs", operation, exc, delay)
                self.close()
                time.sleep(delay)
        raise AssertionError("unreachable")

    def commit(self, branch: BranchId) -> Outcome:
        xid = branch.xid
        try:
            self._settle("commit", branch, lambda s: s.commit(xid))
            return Outcome.COMMITTED
        except XaFailure as failure:
            if failure.kind is FailureKind.NOT_FOUND:
                return self.settled(branch)  # gone from XA RECOVER: committed, or rolled back
            if failure.kind is FailureKind.ROLLED_BACK:
                return Outcome.LOST
            if failure.kind is FailureKind.HEURISTIC and failure.code == 7:  # HEURCOM
                self._retry("forget", lambda s: s.forget(xid))
                return Outcome.COMMITTED
            raise

    def rollback(self, branch: BranchId) -> Outcome:
        try:
            self._settle("rollback", branch, lambda s: s.rollback(branch.xid))
            return Outcome.ROLLED_BACK
        except XaFailure as failure:
            if failure.kind in (FailureKind.NOT_FOUND, FailureKind.ROLLED_BACK):
                return Outcome.ALREADY_GONE
            raise

    def _settle(self, operation: str, branch: BranchId, call: Callable[[XaSession], None]) -> None:
        """Run commit/rollback; XAER_NOTA is final only once XA RECOVER no longer lists it.

        Two answers mean "someone else holds this branch right now", and are waited out:
        MariaDB's XAER_NOTA for a branch that is prepared but still attached to the session
        that prepared it (until the server has processed that session's disconnect), and
        PostgreSQL's "busy" while another session (a recovery run, another writer's startup
        recovery, a replay) is finishing it. While the xid is still listed, back off and try
        again, bounded; once it is gone, busy is answered as XAER_NOTA (the caller then
        settles it by its marker), since the other session finished it.
        """
        deadline = time.monotonic() + self.journal.lock_wait
        # A MariaDB session's disconnect is usually processed within milliseconds: look
        # again soon, then back off, and give up after as long as `retries` backoffs take.
        patience = sum(min(self.backoff * 2**a, 5.0) for a in range(self.retries))
        attempt, waited = 0, 0.0
        while True:
            try:
                self._retry(operation, call)
                return
            except XaFailure as failure:
                if failure.kind not in (FailureKind.NOT_FOUND, FailureKind.BUSY):
                    raise
                if not self._is_prepared(branch):
                    if failure.kind is FailureKind.BUSY:
                        raise XaFailure(
                            operation, FailureKind.NOT_FOUND, failure.code, "finished elsewhere"
                        ) from None
                    raise
                busy = failure.kind is FailureKind.BUSY
                if (waited >= patience and not busy) or time.monotonic() > deadline:
                    raise XaFailure(
                        operation,
                        FailureKind.TRANSIENT,
                        failure.code,
                        f"{branch.name} is prepared but held by another session ("
                        f"{'being finished there' if busy else 'still attached to it'}); "
                        "run `xasink recover` once that session is done",
                    ) from None
                delay = min(SETTLE_FIRST_WAIT * 2**attempt, 5.0)
                if not busy:
                    delay = min(delay, max(patience - waited, SETTLE_FIRST_WAIT))
                attempt, waited = attempt + 1, waited + delay
                log.info(
                    "xasink %s %s: %s; retrying in %.2fs",
                    operation,
                    branch.name,
                    "being finished by another session" if busy else "still attached elsewhere",
                    delay,
                )
                time.sleep(delay)

    def _is_prepared(self, branch: BranchId) -> bool:
        return branch.xid in set(self._retry("recover", lambda s: s.recover()))

    def settled(self, branch: BranchId) -> Outcome:
        """What happened to a winner that XA RECOVER (read after the decision) no longer
        lists: its marker row proves a commit; once the job is `committed`, `finish` has
        deleted the winners' markers, and that state proves it instead. The order of the
        two reads matters: a finish between them leaves the state to tell."""

        def check(session: XaSession) -> Outcome:
            journal, conn = self.journal, session.connection
            if journal.marker_exists(conn, branch.job_id, branch.partition, branch.attempt):
                return Outcome.ALREADY_COMMITTED
            if journal.state(conn, branch.job_id) == JobState.COMMITTED:
                return Outcome.ALREADY_COMMITTED
            return Outcome.LOST

        return self._retry("marker check", check)

    def prepared(self) -> list[tuple[BranchId, Xid]]:
        """xasink branches of *this* journal that are prepared now; nothing else, ever."""
        if not self.journal.tag:
            return []  # no journal, no tag: nothing here is provably ours
        xids = self._retry("recover", lambda s: s.recover())
        ours = []
        for xid in xids:
            branch = BranchId.parse(xid)
            if branch is not None and branch.journal == self.journal.tag:
                ours.append((branch, xid))
        return ours

    def xasink_branches(self) -> list[BranchId]:
        """Every prepared branch in xasink's XID layout, whatever its tag (for reports)."""
        parsed = (BranchId.parse(xid) for xid in self._retry("recover", lambda s: s.recover()))
        return [b for b in parsed if b is not None]

    def prepared_of(self, job_id: str) -> list[BranchId]:
        """One job's prepared branches, from a fresh XA RECOVER listing."""
        found = [b for b, _ in self.prepared() if b.job_id == job_id]
        return sorted(found, key=lambda b: (b.partition, b.attempt))


BRANCHES_PER_CONNECTION = 8


@dataclass
class GroupCommit:
    """Outcome of committing many branches: what happened to each, and what failed."""

    outcomes: dict[BranchId, Outcome]
    errors: dict[BranchId, str]

    @property
    def lost(self) -> list[BranchId]:
        return [b for b, o in self.outcomes.items() if o is Outcome.LOST]


def commit_group(
    branches: Sequence[BranchId],
    *,
    ops: BranchOps,
    parallelism: int = 4,
    after_first: Callable[[], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> GroupCommit:
    """Commit `branches`: the first alone on `ops`, the rest over up to `parallelism`
    connections (`ops` plus new ones).

    COMMIT PREPARED mostly waits on the server's log flush, so a few connections in
    parallel cut phase 2 for many small branches; a new connection costs more than a few
    commits, so one is added per BRANCHES_PER_CONNECTION branches only. Every branch is
    attempted; failures are collected and never stop the others (the decision is durable).
    """
    result = GroupCommit({}, {})
    lock = threading.Lock()
    pending = list(branches)

    def commit_one(worker: BranchOps, branch: BranchId) -> None:
        try:
            outcome = worker.commit(branch)
            with lock:
                result.outcomes[branch] = outcome
        except Exception as exc:
            with lock:
                result.errors[branch] = worker.spec.redact(exc)
        if progress is not None:
            progress(len(result.outcomes) + len(result.errors), len(branches))

    def drain(worker: BranchOps) -> None:
        while True:
            with lock:
                if not pending:
                    return
                branch = pending.pop(0)
            commit_one(worker, branch)

    extra = max(0, min(parallelism - 1, (len(pending) - 1) // BRANCHES_PER_CONNECTION))
    with contextlib.ExitStack() as stack:
        pool = [ops] + [
            stack.enter_context(BranchOps(ops.spec, ops.journal, ops.retries, ops.backoff))
            for _ in range(extra)
        ]
        if pending:
            commit_one(pool[0], pending.pop(0))
            if after_first is not None:
                after_first()
        threads = [
            threading.Thread(target=drain, args=(worker,), name=f"xasink-commit-{i}")
            for i, worker in enumerate(pool[1:], start=1)
        ]
        for thread in threads:
            thread.start()
        drain(pool[0])
        for thread in threads:
            thread.join()
    return result
