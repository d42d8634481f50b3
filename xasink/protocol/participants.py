"""Finishing a transaction's participants from its coordinator: the decision recorded in
the coordinator's journal is carried to every participant database (`links` says which).

The coordinator's job row decides for every database:

* `committing` or later: the participant's job is decided too. Its own row moves from
  `running` to `committing` with its winners (`copy_decision`; the same conditional change
  as the coordinator's own decision), and from then on that database's own recovery can
  finish it alone;
* `aborted`: the participant's job is aborted and its branches rolled back;
* `running`: its driver is alive (recovery from the coordinator aborted it otherwise);
  nothing is done.

A participant whose coordinator decided nothing is never touched by anyone but the
coordinator's driver or recovery (`waiting.awaits_coordinator`): a decided branch is never
rolled back.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ..runtime.jdbc import JdbcConnection
from ..spec import ConnectionSpec
from . import links
from .actions import BranchAction, RecoveryAction, RecoveryReport, log_action
from .applying import StagedApply
from .branches import BranchOps
from .connecting import open_journal
from .deciding import decide_commit
from .journal import Journal
from .links import Link
from .recovery import resolve_in_doubt
from .single_branch import fence_one_phase
from .states import FINAL_STATES, Decision, JobState


@dataclass(frozen=True)
class Participant:
    """A participant database as recovery reaches it: its journal, connection and ops."""

    spec: ConnectionSpec
    conn: JdbcConnection
    journal: Journal
    ops: BranchOps


#: Opens the participant a link names (None: not given); raises when it cannot be reached.
Opener = Callable[[links.Link], AbstractContextManager[Participant | None]]


def copy_decision(
    journal: Journal, conn: JdbcConnection, job_id: str, winners: Sequence[tuple[int, int, int]]
) -> str | None:
    """Record the coordinator's commit decision in a participant's journal; returns the
    participant's job state afterwards (`committing`, or later when it was copied before)."""
    if decide_commit(journal, conn, job_id, winners) == Decision.DECIDED:
        return JobState.COMMITTING
    return journal.state(conn, job_id)


def finish(
    coordinator: Journal,
    conn: JdbcConnection,
    report: RecoveryReport,
    opener: Opener,
    *,
    job: str | None = None,
    grace: float,
    dry_run: bool,
    redact: Callable[[object], str] = str,
    peer: str | None = None,
) -> None:
    """Carry every decided (or aborted) job's outcome to its pending participants, after
    the coordinator's own recovery ran; what was done goes into `report`. A participant
    that is not given or cannot be reached is reported, never skipped silently. A decision
    reaches a participant only after every earlier decision of this coordinator still
    pending there is copied (`_Carrier.earlier`): each database applies them in the
    coordinator's order. An earlier job's apply can wait on a later one's prepared branches
    there (per-branch appends hold their rows until phase 2), so the links are carried in
    two passes (`_two_passes`)."""
    listed = links.participants(coordinator, conn, job, peer=peer)
    _two_passes(_Carrier(coordinator, conn, report, opener, grace, dry_run, redact), listed)


def _two_passes(carrier: _Carrier, listed: Sequence[Link]) -> None:
    """Carry `listed` (in the coordinator's decision order), then once more the links that
    are not final: an earlier job's apply may have waited on a later one's prepared
    branches, which the first pass committed, and a later job's apply on an earlier one
    not yet applied. What the second pass finishes drops the first pass's failures of that
    link from the report (the same job in the same participant); the rest stays."""
    report = carrier.report
    first = _fresh(carrier, RecoveryReport(dry_run=report.dry_run))
    for link in listed:
        first.carry(link)
    left = [link for link in listed if not first.final(link)]
    if carrier.dry_run or not left:
        report.actions += first.report.actions
        return
    again = _fresh(carrier, RecoveryReport(dry_run=False))
    for link in left:
        again.carry(link)
    ended = {(link.job_id, f"participant {link.where}:") for link in left if again.final(link)}
    report.actions += [a for a in first.report.actions if not (a.unresolved and _of(a, ended))]
    report.actions += again.report.actions


def _fresh(carrier: _Carrier, report: RecoveryReport) -> _Carrier:
    """`carrier` for one pass: its own report, nothing carried yet."""
    return dataclasses.replace(carrier, report=report, carried={}, copies=set(), uncopied=set())


def _of(action: BranchAction, links_: set[tuple[str, str]]) -> bool:
    """Whether `action` is about one of `links_` (its job, in that participant)."""
    return any(action.job_id == job and action.detail.startswith(where) for job, where in links_)


def settle_earlier(
    coordinator: Journal,
    conn: JdbcConnection,
    here: Participant,
    grace: float,
    before: str | None = None,
    copy_only: bool = False,
) -> list[BranchAction]:
    """What earlier transactions of this coordinator left in the participant `here` (a
    decision not yet copied, an abort not yet carried), finished by a transaction that is
    about to write there. With `before` (a decided job), only the decisions taken before
    it, oldest first: by its driver, copied (`copy_only`) before it copies its own, and
    finished once its own is committed there (their applies may need rows its prepared
    branches hold). Returns what was done; an action FAILED means an earlier decision could
    not be carried."""

    @contextlib.contextmanager
    def opener(link: Link) -> Iterator[Participant | None]:
        yield here

    report = RecoveryReport(dry_run=False)
    carrier = _Carrier(coordinator, conn, report, opener, grace, False, here.spec.redact)
    peer = here.journal.tag
    if before is None:
        _two_passes(carrier, links.participants(coordinator, conn, peer=peer))
    elif copy_only:
        carrier.earlier(before, peer)
    else:
        _two_passes(carrier, links.decided_before(coordinator, conn, before, peer))
    return [a for a in report.actions if a.action != RecoveryAction.LEFT]


@dataclass
class _Carrier:
    """Carries the coordinator's outcomes to participants, one link at a time."""

    coordinator: Journal
    conn: JdbcConnection
    report: RecoveryReport
    opener: Opener
    grace: float
    dry_run: bool
    redact: Callable[[object], str]
    #: Each link carried so far, (job, peer), and whether it is final there.
    carried: dict[tuple[str, str], bool] = field(default_factory=dict)
    #: The links whose decision is copied into their participant (not yet final there).
    copies: set[tuple[str, str]] = field(default_factory=set)
    #: The links whose copy was tried and failed (reported once).
    uncopied: set[tuple[str, str]] = field(default_factory=set)

    def carry(self, listed: Link) -> bool:
        """`listed`'s outcome in its participant, after the earlier decisions still pending
        there; True once it is final there."""
        if (listed.job_id, listed.peer) in self.carried:  # carried before a later one
            return self.carried[(listed.job_id, listed.peer)]
        coordinator, conn = self.coordinator, self.conn
        state = coordinator.state(conn, listed.job_id)
        if state in (None, JobState.RUNNING):
            why = (
                "no job row"
                if state is None
                else "still running (alive, or not aborted by this run)"
            )
            _add(self.report, listed, RecoveryAction.LEFT, f"coordinator's job {why}")
            return False
        if state != JobState.ABORTED:
            blocker = self.earlier(listed.job_id, listed.peer)
            if blocker is not None:
                detail = (
                    f"waits for job {blocker}, decided before it, to be copied there first "
                    "(decisions reach a participant in the coordinator's order)"
                )
                _add(self.report, listed, RecoveryAction.LEFT, detail)
                return False
        return self._one(listed, state)

    def earlier(self, job_id: str, peer: str) -> str | None:
        """Copy the decisions taken before `job_id`'s still pending in `peer`, oldest first:
        the participant stamps them in the coordinator's order, and its own order check
        applies them so. Only copied: an apply of one may wait on `job_id`'s prepared
        branches there, which only its own commit releases. Returns the first that could
        not be copied there (None: all were)."""
        for link in links.decided_before(self.coordinator, self.conn, job_id, peer):
            if not self._copied(link) and not self.dry_run:
                return link.job_id
        return None

    def _copied(self, link: Link) -> bool:
        """`link`'s decision recorded in its participant (True: there, or its job ended)."""
        key = (link.job_id, link.peer)
        if self.carried.get(key) or key in self.copies:
            return True
        if key in self.uncopied:  # reported once: not reached again for each later link
            return False
        self.uncopied.add(key)
        try:
            with self.opener(link) as participant:
                if participant is None:
                    _add(self.report, link, RecoveryAction.LEFT, "not given: pass --participant")
                    return False
                journal, conn = participant.journal, participant.conn
                state = journal.state(conn, link.job_id)
                if state == JobState.RUNNING and not self.dry_run:
                    state = copy_decision(journal, conn, link.job_id, link.winners)
        except Exception as exc:
            _add(self.report, link, RecoveryAction.FAILED, f"copying: {self.redact(exc)}")
            return False
        if state == JobState.RUNNING:
            return False  # a dry run's, or one a person ended there meanwhile
        self.uncopied.discard(key)
        self.copies.add(key)  # or no row: pruned there once final (`_finish_one`'s case)
        return True

    def final(self, link: Link) -> bool:
        """Whether `link` was carried to the end in this pass."""
        return bool(self.carried.get((link.job_id, link.peer)))

    def _one(self, listed: Link, state: str) -> bool:
        key = (listed.job_id, listed.peer)
        if key not in self.carried:
            self.carried[key] = self._finish(listed, state)
        return self.carried[key]

    def _finish(self, listed: Link, state: str) -> bool:
        coordinator, conn, report = self.coordinator, self.conn, self.report
        # Read again after the state: the decision writes the winners with it, so a link
        # listed before a decision that landed meanwhile has none (model: stale winners).
        found = links.participants(coordinator, conn, listed.job_id, peer=listed.peer)
        if not found:
            return True  # finished by another process meanwhile
        link = found[0]
        reached = False
        try:
            with self.opener(link) as participant:
                reached = participant is not None
                if participant is None:
                    _add(
                        report,
                        link,
                        RecoveryAction.LEFT,
                        f"not given: pass --participant with its URL (participants=[...]) "
                        f"to finish it ({'commit' if state != JobState.ABORTED else 'abort'})",
                    )
                    return False
                alone = coordinator.resolution(conn, link.job_id).startswith(links.LINKED_END)
                done = _finish_one(
                    participant, link, state, report, self.grace, self.dry_run, alone
                )
                if done and not self.dry_run:
                    links.mark_done(coordinator, conn, link.job_id, link.peer)
                return done
        except Exception as exc:
            what = "finishing it failed" if reached else "cannot reach it or log in"
            _add(report, link, RecoveryAction.FAILED, f"{what}: {self.redact(exc)}")
            return False


def _finish_one(
    p: Participant,
    link: links.Link,
    decided: str,
    report: RecoveryReport,
    grace: float,
    dry_run: bool,
    ended_alone: bool = False,
) -> bool:
    """One participant of one job, as its coordinator decided; True once it is final as
    decided (a contradiction, which only a person can have made, is reported, not done),
    or, where an operator ended it in one database alone after a lost branch (here, or in
    the coordinator: `ended_alone`), final at all."""
    job_id, journal, conn = link.job_id, p.journal, p.conn
    commit = decided != JobState.ABORTED
    found = journal.state(conn, job_id)
    if found in (None, JobState.RUNNING) and dry_run:
        what = RecoveryAction.WOULD_COMMIT if commit else RecoveryAction.WOULD_ROLLBACK
        _add(report, link, what, f"as its coordinator decided ({decided})")
        return False
    if found is None and not commit:  # a fence: a driver registering it later fails on it
        found = fence_one_phase(journal, conn, job_id, "", FENCED_BY, _FENCED)
        if found == JobState.ABORTED:
            _add(report, link, RecoveryAction.ABORTED, _FENCED)
    if found == JobState.RUNNING:
        if commit:
            copy_decision(journal, conn, job_id, link.winners)
            _add(report, link, RecoveryAction.COMMITTED, "the coordinator's decision recorded")
        elif journal.abort(conn, job_id):
            _add(report, link, RecoveryAction.ABORTED, "its coordinator aborted the job")
    sub = resolve_in_doubt(p.ops, conn, journal, job=job_id, grace=grace, dry_run=dry_run)
    where = f"participant {link.where}"
    report.actions += [
        BranchAction(a.job_id, a.partition, a.attempt, a.action, f"{where}: {a.detail}")
        for a in sub.actions
    ]
    final = journal.state(conn, job_id)
    expected = (JobState.COMMITTED,) if commit else (JobState.ABORTED,)
    if final is None or final in expected:
        return True
    if final in FINAL_STATES:  # ended there by a person against the coordinator's decision
        disagree = (
            f"its job is {final} there although its coordinator decided {decided}: the "
            "databases disagree"
        )
        if ended_alone or journal.resolution(conn, job_id).startswith(links.LINKED_END):
            # `xasink resolve --abandon --linked` after a lost branch: the transaction is over.
            detail = f"{disagree}, as an operator ended it (`--linked`): closed"
            _add(report, link, RecoveryAction.FINISHED_ELSEWHERE, detail)
            return True
        _add(
            report,
            link,
            RecoveryAction.FAILED,
            f"{disagree}. Compare the rows of both and mend them by hand",
        )
    return False


#: Who a fence row is resolved by: the journal's retention and `xasink prune` keep it for
#: good, since a driver that stalled before registering the job here would register it
#: after the fence is gone, and no one could end that job (model: participants.pml PR).
FENCED_BY = "xasink recover"
_FENCED = (
    "its coordinator aborted the transaction before this participant registered it: the "
    "row keeps a late registration from preparing anything (model: fence)"
)


def _add(report: RecoveryReport, link: links.Link, action: RecoveryAction, detail: str) -> None:
    entry = BranchAction(link.job_id, -1, -1, action, f"participant {link.where}: {detail}")
    report.actions.append(entry)
    log_action(entry)


@contextlib.contextmanager
def given(
    specs: Sequence[ConnectionSpec], staged: StagedApply[Any], lock_wait: float
) -> Iterator[Opener]:
    """Opens the given participant whose journal (in the schema a link names) has the
    link's tag; each database is opened once, on first need, and closed at the end."""
    with contextlib.ExitStack() as stack:
        found: dict[tuple[int, str | None], Participant] = {}

        @contextlib.contextmanager
        def opener(link: Link) -> Iterator[Participant | None]:
            failure: Exception | None = None
            for index, spec in enumerate(specs):
                key = (index, link.schema)
                if key not in found:
                    try:
                        session, journal = open_journal(spec, link.schema, lock_wait, staged=staged)
                    except Exception as exc:
                        failure = failure or exc
                        continue
                    stack.enter_context(session)
                    ops = stack.enter_context(BranchOps(spec, journal))
                    found[key] = Participant(spec, session.connection, journal, ops)
                if found[key].journal.tag == link.peer:
                    yield found[key]
                    return
            if failure is not None:  # perhaps the one it names
                raise failure
            yield None

        yield opener


__all__ = ["Opener", "Participant", "copy_decision", "finish", "given", "settle_earlier"]
