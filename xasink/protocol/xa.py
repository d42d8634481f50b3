"""A thin XA facade: one XAConnection, its XAResource, and errors sorted into kinds.

Callers decide by `XaFailure.kind`, never by driver-specific codes: MariaDB Connector/J maps
only a few server errors to XA codes and reports the rest as errorCode 0 with the SQL error as
cause, so classification looks at both.
"""

from __future__ import annotations

import enum
import logging
from typing import Any

import jpype

from ..errors import XaError
from ..masking import Redactor
from ..runtime.jdbc import java_message, sql_error_code, sql_state
from ..runtime.jvm import java_xid, xid_from_java
from ..xid import Xid

log = logging.getLogger("xasink")

XA_RDONLY = 3
XAER_RMERR, XAER_NOTA, XAER_RMFAIL = -3, -4, -7
_ROLLED_BACK = range(100, 108)
_HEURISTIC = (5, 6, 7, 8)
_TMNOFLAGS, _TMSUCCESS, _TMFAIL = 0, 0x04000000, 0x20000000
_TMSTARTRSCAN, _TMENDRSCAN = 0x01000000, 0x00800000
# MariaDB/MySQL server errors that mean "unknown xid" or "connection trouble".
_MYSQL_NOTA = 1397
_MYSQL_TRANSIENT = {1399, 2002, 2003, 2006, 2013, 1927}
_PG_BUSY = "55000"


class FailureKind(enum.Enum):
    NOT_FOUND = "not found (XAER_NOTA)"
    #: Another session is finishing the branch right now (PostgreSQL: "prepared transaction
    #: ... is busy", SQLSTATE 55000, which pgjdbc reports as XAER_RMERR).
    BUSY = "busy (being finished by another session)"
    TRANSIENT = "transient (resource unavailable)"
    ROLLED_BACK = "rolled back (XA_RB*)"
    HEURISTIC = "heuristic outcome"
    ERROR = "resource error"


class XaFailure(XaError):
    """An XA call failed; `kind` says what a caller may do about it."""

    def __init__(self, operation: str, kind: FailureKind, code: int, detail: str) -> None:
        super().__init__(f"XA {operation} failed: {kind.value}, code {code}: {detail}")
        self.operation = operation
        self.kind = kind
        self.code = code


def classify(operation: str, exc: BaseException, redact: Redactor) -> XaFailure:
    """Sort a Java exception from an XA or SQL call into a FailureKind."""
    code = int(getattr(exc, "errorCode", 0) or 0)
    vendor, state = sql_error_code(exc), sql_state(exc)
    if code == XAER_NOTA or vendor == _MYSQL_NOTA:
        kind = FailureKind.NOT_FOUND
    elif state == _PG_BUSY and operation in ("commit", "rollback"):
        kind = FailureKind.BUSY
    elif code in _ROLLED_BACK:
        kind = FailureKind.ROLLED_BACK
    elif code in _HEURISTIC:
        kind = FailureKind.HEURISTIC
    elif (
        code == XAER_RMFAIL
        or (state is not None and state.startswith("08"))
        or vendor in _MYSQL_TRANSIENT
    ):
        kind = FailureKind.TRANSIENT
    else:
        kind = FailureKind.ERROR
    return XaFailure(operation, kind, code, redact(java_message(exc)))


class XaSession:
    """One XAConnection: its XAResource for XA calls and its Connection for SQL."""

    def __init__(self, xa_connection: Any, redact: Redactor) -> None:
        self._xa_connection = xa_connection
        self.resource = xa_connection.getXAResource()
        self.connection = xa_connection.getConnection()
        self.redact = redact
        self._java_xids: dict[Xid, Any] = {}
        #: The seconds every lock wait of this session is bounded to, as set by
        #: `sessions.bind_lock_wait` (None: the server's default).
        self.lock_bound: int | None = None

    def _call(self, operation: str, method: str, *args: Any) -> Any:
        try:
            return getattr(self.resource, method)(*args)
        except jpype.JException as exc:
            raise classify(operation, exc, self.redact) from None

    def _jxid(self, xid: Xid) -> Any:
        # Reuse one Java object per XID so a driver's identity checks also hold.
        if xid not in self._java_xids:
            self._java_xids[xid] = java_xid(xid)
        return self._java_xids[xid]

    def start(self, xid: Xid) -> None:
        self._java_xids.clear()  # a reused connection must not keep every past branch's XID
        self._call("start", "start", self._jxid(xid), _TMNOFLAGS)

    def end(self, xid: Xid, success: bool = True) -> None:
        self._call("end", "end", self._jxid(xid), _TMSUCCESS if success else _TMFAIL)

    def prepare(self, xid: Xid) -> None:
        vote = int(self._call("prepare", "prepare", self._jxid(xid)))
        if vote == XA_RDONLY:
            # A read-only vote means nothing was kept, not even the marker row.
            raise XaFailure("prepare", FailureKind.ERROR, vote, "branch voted read-only")

    def commit(self, xid: Xid) -> None:
        self._call("commit", "commit", self._jxid(xid), False)

    def rollback(self, xid: Xid) -> None:
        self._call("rollback", "rollback", self._jxid(xid))

    def forget(self, xid: Xid) -> None:
        self._call("forget", "forget", self._jxid(xid))

    def recover(self) -> list[Xid]:
        """Every prepared XID the resource reports (one full scan)."""
        found = self._call("recover", "recover", _TMSTARTRSCAN | _TMENDRSCAN)
        return [xid_from_java(x) for x in (found or [])]

    def close(self) -> None:
        """Close quietly: a failure to close must not mask the real outcome."""
        try:
            self._xa_connection.close()
        except jpype.JException as exc:
            log.debug("closing XA connection failed: %s", self.redact(java_message(exc)))

    def __enter__(self) -> XaSession:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
