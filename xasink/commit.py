"""Group operations on branches from the driver: commit, roll back, list prepared.

All of them run on an idle XA session of their own (COMMIT PREPARED needs a connection with
no transaction open). Transient failures reconnect and retry, a bounded number of times.
XAER_NOTA on commit means "already committed" only when the branch's marker row proves it.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from .connect import open_session
from .errors import PreflightError
from .journal import Journal
from .target import ConnectionSpec
from .xa import FailureKind, XaFailure, XaSession
from .xid import BranchId, Xid

log = logging.getLogger("xasink")
T = TypeVar("T")


class Outcome(enum.Enum):
    COMMITTED = "commit"
    ALREADY_COMMITTED = "already committed"
    ROLLED_BACK = "rollback"
    ALREADY_GONE = "already gone"
    LOST = "LOST"


class BranchOps:
    """Commit / rollback / recover for one database, with reconnect-and-retry."""

    def __init__(
        self, spec: ConnectionSpec, journal: Journal, retries: int = 5, backoff: float = 0.5
    ) -> None:
        self.spec = spec
        self.journal = journal
        self.retries = retries
        self.backoff = backoff
        self._session: XaSession | None = None

    @property
    def session(self) -> XaSession:
        if self._session is None:
            self._session = open_session(self.spec)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> BranchOps:
        return self

    def __exit__(self, *exc_info: object) -> None:
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
            self._retry("commit", lambda s: s.commit(xid))
            return Outcome.COMMITTED
        except XaFailure as failure:
            if failure.kind is FailureKind.NOT_FOUND:
                return self._committed_or_lost(branch)
            if failure.kind is FailureKind.ROLLED_BACK:
                return Outcome.LOST
            if failure.kind is FailureKind.HEURISTIC and failure.code == 7:  # HEURCOM
                self._retry("forget", lambda s: s.forget(xid))
                return Outcome.COMMITTED
            raise

    def _committed_or_lost(self, branch: BranchId) -> Outcome:
        found = self._retry(
            "marker check",
            lambda s: self.journal.marker_exists(
                s.connection, branch.job_id, branch.partition, branch.attempt
            ),
        )
        return Outcome.ALREADY_COMMITTED if found else Outcome.LOST

    def rollback(self, branch: BranchId) -> Outcome:
        try:
            self._retry("rollback", lambda s: s.rollback(branch.xid))
            return Outcome.ROLLED_BACK
        except XaFailure as failure:
            if failure.kind in (FailureKind.NOT_FOUND, FailureKind.ROLLED_BACK):
                return Outcome.ALREADY_GONE
            raise

    def prepared(self) -> list[tuple[BranchId, Xid]]:
        """xasink branches of *this* journal that are prepared now; nothing else, ever."""
        xids = self._retry("recover", lambda s: s.recover())
        ours = []
        for xid in xids:
            branch = BranchId.parse(xid)
            if branch is not None and branch.journal == self.journal.tag:
                ours.append((branch, xid))
        return ours
