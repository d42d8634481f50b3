"""What a recovery run did, or would do: one action per branch or job, and the report.

Job-level actions carry partition -1. An action's text (`RecoveryAction`'s value) is what
`xasink recover` prints, as `action=<text with dashes>`, and what its JSON holds.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field

from .branches import Outcome
from .states import TextEnum

#: The logger of each action as recovery takes it (a line of its report): INFO, a lost or
#: failed branch WARNING. A child of `xasink`; the command line, which prints the report,
#: leaves it out of its log.
RECOVERY_LOGGER = "xasink.recover"
_log = logging.getLogger(RECOVERY_LOGGER)


class RecoveryAction(TextEnum):
    # What happened to a branch (the values of `branches.Outcome`).
    COMMIT = "commit"
    ALREADY_COMMITTED = "already committed"
    ROLLBACK = "rollback"
    ALREADY_GONE = "already gone"
    #: A winner rolled back without committing: its rows are not in the table.
    LOST = "LOST"
    # What happened to a job.
    ABORTED = "aborted"
    APPLIED = "applied"
    COMMITTED = "committed"
    FINISHED_ELSEWHERE = "finished elsewhere"
    #: Ended in one database alone by an operator (`resolve --abandon --linked`).
    ENDED = "ended"
    DROPPED_STAGE = "dropped stage"
    # Left in doubt: nothing done (alive, too young, waiting), or it failed.
    LEFT = "left"
    FAILED = "failed"
    # A dry run's plan.
    WOULD_COMMIT = "would commit"
    WOULD_ROLLBACK = "would rollback"
    WOULD_APPLY = "would apply"
    WOULD_DROP_STAGE = "would drop stage"

    @classmethod
    def of(cls, outcome: Outcome) -> RecoveryAction:
        return cls(outcome.value)

    @property
    def dry_run(self) -> bool:
        """What a dry run would do (and so has not done)."""
        return self in _DRY_RUN

    @property
    def unresolved(self) -> bool:
        """Something is left in doubt: a dry run's plan, a branch left or lost, a failure."""
        return self.dry_run or self in _IN_DOUBT


_DRY_RUN = frozenset(
    {
        RecoveryAction.WOULD_COMMIT,
        RecoveryAction.WOULD_ROLLBACK,
        RecoveryAction.WOULD_APPLY,
        RecoveryAction.WOULD_DROP_STAGE,
    }
)
_IN_DOUBT = frozenset({RecoveryAction.LEFT, RecoveryAction.LOST, RecoveryAction.FAILED})


@dataclass(frozen=True)
class BranchAction:
    job_id: str
    partition: int
    attempt: int
    action: RecoveryAction
    detail: str = ""

    def __post_init__(self) -> None:  # the action's text is taken too ("commit")
        object.__setattr__(self, "action", RecoveryAction(self.action))

    @property
    def unresolved(self) -> bool:
        return self.action.unresolved

    @property
    def is_branch(self) -> bool:
        return self.partition >= 0

    def line(self) -> str:
        branch = f" partition={self.partition} attempt={self.attempt}" if self.is_branch else ""
        text = f"job={self.job_id}{branch} action={self.action.value.replace(' ', '-')}"
        return f"{text} ({self.detail})" if self.detail else text


def log_action(action: BranchAction) -> None:
    """`action` as recovery's log says it (`RECOVERY_LOGGER`)."""
    failed = action.action in (RecoveryAction.LOST, RecoveryAction.FAILED)
    _log.log(logging.WARNING if failed else logging.INFO, "xasink recover: %s", action.line())


@dataclass
class RecoveryReport:
    dry_run: bool
    #: Which journal was read, and its tag: a wrong schema shows here at once.
    journal: str = ""
    actions: list[BranchAction] = field(default_factory=list)

    @property
    def unresolved(self) -> list[BranchAction]:
        return [a for a in self.actions if a.unresolved]

    @property
    def ok(self) -> bool:
        return not self.unresolved

    def summary(self) -> str:
        branches = sum(1 for a in self.actions if a.is_branch)
        jobs = len({a.job_id for a in self.actions})
        left = len(self.unresolved)
        return f"{branches} branch(es) of {jobs} job(s) handled, {left} action(s) left unresolved"

    def to_json(self) -> str:
        return json.dumps(
            {
                "dry_run": self.dry_run,
                "journal": self.journal,
                "ok": self.ok,
                "actions": [asdict(a) for a in self.actions],
            },
            indent=2,
        )


__all__ = ["RECOVERY_LOGGER", "BranchAction", "RecoveryAction", "RecoveryReport", "log_action"]
