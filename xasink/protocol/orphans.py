"""Prepared branches that no journal here decides: recovery touches none of them unless the
operator names the tag whose journal is truly gone (`xasink recover --presume-abort TAG`),
and then only once they were prepared longer than the grace."""

from __future__ import annotations

from ..runtime.jdbc import JdbcConnection
from .actions import BranchAction, RecoveryAction, RecoveryReport
from .branches import BranchOps
from .journal import Journal
from .recovery import Resolver, describe


def presume_abort(
    ops: BranchOps, tag: str, *, grace: float, dry_run: bool, conn: JdbcConnection, journal: Journal
) -> RecoveryReport:
    """No journal exists: roll back the prepared branches carrying `tag`, as the operator
    asked, once prepared longer than the grace (when the server says when)."""
    report = RecoveryReport(dry_run=dry_run, journal=f"no journal; presumed abort for tag {tag}")
    resolver = Resolver(ops, conn, journal, grace, dry_run, report)
    for job_id in sorted({b.job_id for b, _ in ops.prepared()}):
        resolver.without_row(job_id, ops.prepared_of(job_id))
    return report


def no_journal(ops: BranchOps, journal: Journal, dry_run: bool) -> RecoveryReport:
    """No journal here: touch nothing, and say what xasink-shaped branches are left."""
    report = RecoveryReport(dry_run=dry_run, journal=f"no journal in {describe(journal)}")
    for branch in ops.xasink_branches():
        report.actions.append(
            BranchAction(
                branch.job_id,
                branch.partition,
                branch.attempt,
                RecoveryAction.LEFT,
                f"tag {branch.journal}: no journal here to decide by (wrong --journal-schema "
                "or database?). Nothing was touched; --presume-abort TAG rolls back a tag's "
                "branches when its journal is truly gone",
            )
        )
    return report


__all__ = ["no_journal", "presume_abort"]
