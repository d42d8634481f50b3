"""XIDs: generic XA identifiers, and the layout that marks a branch as xasink's own.

Modelled on psycopg's `Xid`: a frozen value with checked ranges, built from parts or parsed
from a pgjdbc-compatible gid. xasink's branches are recognised by one fixed formatId *and* a
gtrid layout; recovery acts on nothing else.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

#: "xasx": fixed, positive, inside 31 bits (MariaDB's xid literal breaks on negative ids).
FORMAT_ID = 0x78617378
MAX_PART_BYTES = 64

# Matched whole (fullmatch): `$` would also match before a trailing newline.
_GTRID = re.compile(rb"xasink1:([0-9a-f]{8}):([0-9a-f]{32})")
_BQUAL = re.compile(rb"p(0|[1-9][0-9]{0,9}):a(0|[1-9][0-9]{0,18})")
_JOB_ID = re.compile(r"[0-9a-f]{32}")
_TAG = re.compile(r"[0-9a-f]{8}")


@dataclass(frozen=True)
class Xid:
    """An XA transaction id: formatId, global transaction id and branch qualifier."""

    format_id: int
    gtrid: bytes
    bqual: bytes

    def __post_init__(self) -> None:
        if not 0 <= self.format_id < 2**31:
            raise ValueError(f"formatId must be in 0..2**31-1, got {self.format_id}")
        for name in ("gtrid", "bqual"):
            part = getattr(self, name)
            if not isinstance(part, bytes):
                raise TypeError(f"{name} must be bytes, got {type(part).__name__}")
            if len(part) > MAX_PART_BYTES:
                raise ValueError(f"{name} is {len(part)} bytes; XA allows {MAX_PART_BYTES}")

    @classmethod
    def from_parts(cls, format_id: int, gtrid: bytes | str, bqual: bytes | str) -> Xid:
        def as_bytes(part: bytes | str) -> bytes:
            return part.encode() if isinstance(part, str) else bytes(part)

        return cls(int(format_id), as_bytes(gtrid), as_bytes(bqual))

    @classmethod
    def from_string(cls, gid: str) -> Xid:
        """Parse pgjdbc's gid `formatId_base64(gtrid)_base64(bqual)`."""
        parts = gid.split("_")
        if len(parts) != 3:
            raise ValueError(f"not a pgjdbc gid: {gid!r}")
        try:
            return cls(
                int(parts[0]),
                base64.b64decode(parts[1], validate=True),
                base64.b64decode(parts[2], validate=True),
            )
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"not a pgjdbc gid: {gid!r}") from exc

    def __str__(self) -> str:
        """The pgjdbc gid, also a readable unique name for logs."""
        gtrid = base64.b64encode(self.gtrid).decode()
        bqual = base64.b64encode(self.bqual).decode()
        return f"{self.format_id}_{gtrid}_{bqual}"


def valid_job_id(job_id: object) -> bool:
    """xasink job ids are 32 lowercase hex digits; anything else is not one of ours."""
    return isinstance(job_id, str) and bool(_JOB_ID.fullmatch(job_id))


@dataclass(frozen=True)
class BranchId:
    """What an xasink XID encodes: whose journal, which job, which partition and attempt.

    `attempt` is Spark's task attempt id, unique across all attempts in one application,
    so a retried, speculative or re-run stage attempt never reuses an XID.
    """

    journal: str
    job_id: str
    partition: int
    attempt: int

    def __post_init__(self) -> None:
        if not _TAG.fullmatch(self.journal):
            raise ValueError(f"journal tag must be 8 hex digits, got {self.journal!r}")
        if not _JOB_ID.fullmatch(self.job_id):
            raise ValueError(f"job id must be 32 hex digits, got {self.job_id!r}")
        if not 0 <= self.partition < 2**31:
            raise ValueError(f"partition out of range: {self.partition}")
        if not 0 <= self.attempt < 2**63:
            raise ValueError(f"attempt out of range: {self.attempt}")

    @property
    def xid(self) -> Xid:
        return Xid(
            FORMAT_ID,
            f"xasink1:{self.journal}:{self.job_id}".encode(),
            f"p{self.partition}:a{self.attempt}".encode(),
        )

    @property
    def name(self) -> str:
        """Short form for messages: `job/partition/attempt`."""
        return f"{self.job_id}/p{self.partition}/a{self.attempt}"

    @classmethod
    def parse(cls, xid: Xid) -> BranchId | None:
        """The branch an XID names, or None when the XID is not xasink's."""
        if xid.format_id != FORMAT_ID:
            return None
        gtrid, bqual = _GTRID.fullmatch(xid.gtrid), _BQUAL.fullmatch(xid.bqual)
        if gtrid is None or bqual is None:
            return None
        partition, attempt = int(bqual.group(1)), int(bqual.group(2))
        if partition >= 2**31 or attempt >= 2**63:
            return None  # no xasink writer makes such a branch: not ours, never an error
        return cls(gtrid.group(1).decode(), gtrid.group(2).decode(), partition, attempt)
