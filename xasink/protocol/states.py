"""The words of the protocol: a job's states and a decision's outcomes.

Each is a `str` enum: a member is stored, bound and printed as its value ("running"), and
compares equal to it, so rows read back as plain text compare with the members directly.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """A `str` enum whose text is its value, on every Python (str(), f-strings, binds)."""

    def __str__(self) -> str:
        return str(self.value)


class JobState(TextEnum):
    """A job row's `state`. Every change is a conditional UPDATE from one state to another."""

    RUNNING = "running"
    #: The commit decision: recorded with the winners, before phase 2.
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"
    #: Terminal state of an append job that an operator closed with a lost winner (`xasink
    #: resolve --abandon`): its other branches' rows are in the table, the lost ones' are not.
    ABANDONED = "abandoned"


#: The states a job never leaves.
FINAL_STATES = (JobState.COMMITTED, JobState.ABORTED, JobState.ABANDONED)
#: The states of a job decided for commit: `abandoned` is one an operator ended after a
#: lost branch, whose decision stands for its other branches (and a transaction's other
#: databases).
DECIDED_STATES = (JobState.COMMITTING, JobState.COMMITTED, JobState.ABANDONED)


class Decision(TextEnum):
    """What `deciding.decide_commit` did."""

    DECIDED = "decided"
    #: The job is no longer running (a recovery run aborted it): nothing was recorded.
    JOB_ENDED = "job ended"
    #: The sink's mark had reached the batch, or belongs to another query (the caller reads
    #: the mark to say which): nothing was recorded.
    BATCH_TAKEN = "batch taken"


class JobEnded(Exception):
    """A registered job's one-phase commit found its row no longer running (a recovery run
    aborted it first): the transaction is rolled back."""


#: The attempt of a shipped batch's one winner row: no task's (a task's attempt is its
#: Spark task attempt id, 0 or more), so a losing task attempt's prepared branch never
#: passes for it (recovery commits a committed job's listed branches that are winners).
SHIPPED = -1


__all__ = [
    "DECIDED_STATES",
    "FINAL_STATES",
    "SHIPPED",
    "Decision",
    "JobEnded",
    "JobState",
    "TextEnum",
]
