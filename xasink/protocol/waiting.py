"""Why recovery leaves a job, in words an operator can act on: what a lock wait is probably
stuck behind, a participant's job that only its coordinator decides, a decided branch that
something outside xasink rolled back. Recovery, the driver's phase 2, `xasink jobs` and
`xasink check` say the same things."""

from __future__ import annotations

from collections.abc import Sequence

from ..runtime.jdbc import JdbcConnection
from ..xid import BranchId
from . import links
from .branches import BranchOps
from .records import JournalReader


def awaits_coordinator(coordinator: links.Link) -> str:
    """Why a participant's undecided job is left, and what finishes it."""
    schema = f" --journal-schema {coordinator.schema}" if coordinator.schema else ""
    return (
        f"a transaction over several databases, decided by the journal at "
        f"{coordinator.where}: never aborted from here. Finish it with `xasink recover "
        f"--url {coordinator.address}{schema} --participant <this database's URL>`"
    )


#: A winner that a listing lacks, with no marker and no committed job: it was rolled back.
LOST_DETAIL = (
    "decided for commit, but rolled back without committing (no marker, job not committed): "
    "its rows are NOT in the table"
)


def lost_detail(
    journal: JournalReader, conn: JdbcConnection, job_id: str, lost: Sequence[int], staged: bool
) -> str:
    """Why a decided job can never finish: its winners of partitions `lost` were rolled
    back behind xasink's back (`xasink recover` cannot bring them back), and what ends it:
    `xasink resolve --abandon`, with --linked for a transaction over several databases."""
    where = f"winning branch(es) of partition(s) {list(lost)[:20]} were rolled back outside"
    link = journal.linked(conn, job_id)
    if link is not None:
        return f"{where} xasink, {links.lost_here(link, staged)}"
    held = "the table is unchanged" if staged else "the other branches' rows are in"
    return (
        f"{where} xasink: their rows are NOT in the table ({held}); `xasink resolve {job_id} "
        "--abandon` ends the job once you have dealt with them"
    )


def blocked_detail(
    ops: BranchOps, conn: JdbcConnection, journal: JournalReader, job_id: str, reason: str
) -> str:
    """Name what a lock wait is probably stuck behind: prepared transactions still open."""
    try:
        others: dict[str, int] = {}
        foreign = 0
        for xid in ops.session.recover():
            branch = BranchId.parse(xid)
            if branch is None or branch.journal != journal.tag:
                foreign += 1
            elif branch.job_id != job_id:
                others[branch.job_id] = others.get(branch.job_id, 0) + 1
    except Exception:
        return f"{reason}; gave up waiting for a lock"
    held = [
        f"xasink job {job} ({n} prepared branch(es), {journal.state(conn, job) or 'no row'})"
        for job, n in sorted(others.items())
    ]
    if foreign:
        held.append(f"{foreign} prepared transaction(s) of other applications or journals")
    blockers = "; ".join(held) if held else "no prepared transaction: a long local transaction"
    return (
        f"gave up after {journal.lock_wait:.0f}s waiting for a lock ({reason}). Probably held "
        f"by: {blockers}. Resolve those (`xasink recover`; other applications' with their "
        "own tools), then run `xasink recover` to finish this job"
    )


__all__ = ["LOST_DETAIL", "awaits_coordinator", "blocked_detail", "lost_detail"]
