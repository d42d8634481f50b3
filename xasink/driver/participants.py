"""A transaction's other databases on the driver: each is a participant with its own job
row under the transaction's job id, its own branches and markers, tied to the coordinator
(the transaction's own database, which records the one decision) by `protocol.links`.

The steps, in the order the protocol needs them (model/participants.pml checks them):

1. `enlist`: the coordinator records the participant (only while the job is running),
   then the participant records its coordinator, then its job row. A participant's job
   never aborts itself: only after the coordinator's job is aborted (`abort_all`).
2. The coordinator's decision carries every participant's winners (`winners_of`).
3. `copy_decisions`: each participant's row moves to `committing` with its winners; from
   then on its own database's recovery can finish it.
4. `commit_all`: each participant's phase 2 and apply, then its link is done.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .._testing.faults import trigger
from ..errors import CommitError, ConfigurationError, XasinkError
from ..protocol import links
from ..protocol.actions import BranchAction, RecoveryAction
from ..protocol.journal import Journal
from ..protocol.participants import FENCED_BY, Participant, copy_decision, settle_earlier
from ..protocol.single_branch import fence_one_phase
from ..protocol.states import JobState
from ..spec import Database
from .job import Job
from .phase_two import on_live_connection
from .request import PhaseOne, Preflight
from .transaction import TransactionSettings, aborted_while_writing, first_staged, joined

log = logging.getLogger("xasink")


@dataclass
class Member:
    """One participant database of a transaction: its job and its writes' phase one."""

    job: Job
    parts: list[PhaseOne] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return self.job.journal.tag

    @property
    def where(self) -> str:
        return self.job.spec.address

    def phase_one(self) -> PhaseOne:
        return joined(self.parts)


def elsewhere(settings: TransactionSettings, database: Database | str) -> TransactionSettings:
    """A participant's settings: its own database and journal, the transaction's commit
    properties and way of appending, and no sink (the coordinator's decision moves the
    stream's mark)."""
    return TransactionSettings.of(database, settings.commit, settings.per_branch_appends)


def same_database(coordinator: Job, opened: Job, members: Sequence[Job]) -> None:
    """Refuse a participant that is a database the transaction writes already (the same
    journal, reached by another URL): one database, one part of the transaction."""
    tag = opened.journal.tag
    if tag and tag == coordinator.journal.tag:
        raise ConfigurationError(
            f"url={opened.spec.address} reaches the transaction's own database (the same "
            "journal): leave url out of this tx.write."
        )
    for other in members:
        if tag and tag == other.journal.tag:
            raise ConfigurationError(
                f"url={opened.spec.address} reaches the same database as url="
                f"{other.spec.address} (the same journal): write both with the same url."
            )


def enlist(
    coordinator: Job, member: Job, pre: Preflight, columns: Sequence[str], lease: float
) -> list[BranchAction]:
    """A participant's first write: the links on both sides, then its job row under the
    coordinator's job id (its branches may open from then on). What earlier transactions
    of the coordinator left there is finished first; returns what recovery did."""
    job_id = coordinator.job_id
    assert job_id is not None
    links.ensure(coordinator.journal, coordinator.conn)
    links.ensure(member.journal, member.conn)
    here = member.spec.address
    settled = settle_left(coordinator, member)
    if not links.add_participant(
        coordinator.journal,
        coordinator.conn,
        job_id,
        member.journal.tag,
        here,
        member.journal.schema,
    ):
        raise aborted_while_writing(job_id)
    try:  # from here a failure withdraws the participant: the coordinator's link is made
        links.add_coordinator(
            member.journal,
            member.conn,
            job_id,
            coordinator.journal.tag,
            coordinator.spec.address,
            coordinator.journal.schema,
        )
        begun = member.begin(pre, columns, lease, job_id=job_id)
    except Exception:
        fenced = _fenced(member, job_id)
        _withdraw(coordinator, member, job_id)
        if fenced:
            raise aborted_while_writing(job_id) from None
        raise
    member.decided = True  # only its coordinator decides, and only abort_all aborts it
    return settled + begun.recovered


def _fenced(member: Job, job_id: str) -> bool:
    """Whether a recovery from the coordinator fenced the participant's job (its row is
    aborted): then the write failed because the transaction was aborted."""
    with contextlib.suppress(Exception):  # the connection may be what failed
        return member.journal.state(member.conn, job_id) == JobState.ABORTED
    return False


#: Why a withdrawn participant's job row is aborted (`resolved_by` is FENCED_BY).
WITHDRAWN = "the transaction's first write here failed, before its job took part"


def _withdraw(coordinator: Job, member: Job, job_id: str) -> None:
    """A participant whose first write failed is not a member, so `abort_all` never reaches
    it: its job is fenced (or, if `Job.begin` wrote its row, aborted) here, then the
    coordinator's link is done. Without that the link stayed pending for ever: `check`
    alarming, `prune` keeping the job, `recover` exiting 1 (review 4, R5;
    model/participants.pml `withdraw`). Where this fails too, recovery from the coordinator
    with `--participant` ends it, as for a driver that died here."""
    journal, conn = member.journal, member.conn
    try:
        state = fence_one_phase(journal, conn, job_id, "", FENCED_BY, WITHDRAWN)
        if state == JobState.RUNNING:
            journal.abort(conn, job_id)
            state = journal.state(conn, job_id)
        if state != JobState.ABORTED:
            raise XasinkError(f"its job is {state or 'missing'} there")
        links.mark_done(coordinator.journal, coordinator.conn, job_id, journal.tag)
    except Exception as exc:
        log.warning(
            "xasink job %s: the first write into participant %s failed and could not be "
            "withdrawn there (%s); `xasink recover --url <the transaction's database> "
            "--participant %s` ends it",
            job_id,
            member.spec.address,
            member.spec.redact(exc),
            member.spec.address,
        )


def settle_left(coordinator: Job, member: Job) -> list[BranchAction]:
    """What earlier transactions of the coordinator left in this participant (a decision
    that never reached it, an abort not carried there), finished before a write there, or
    instead of it when a stream's batch was decided before and is skipped."""
    if not member.journal.tag or not member.request.commit.recover_first:
        return []  # no journal there: nothing was ever written
    reached = Participant(member.spec, member.conn, member.journal, member.ops)
    return settle_earlier(
        coordinator.journal, coordinator.conn, reached, member.request.commit.grace
    )


def winners_of(members: Sequence[Member]) -> dict[str, list[tuple[int, int, int]]]:
    """Each participant's winners, (partition, attempt, rows), keyed by its journal tag."""
    result = {}
    for m in members:
        phase_one = m.phase_one()
        result[m.tag] = [
            (w.partition, w.attempt, phase_one.rows_of[w.partition]) for w in phase_one.winners
        ]
    return result


def copy_decisions(coordinator: Job, members: Sequence[Member]) -> None:
    """Record the coordinator's decision in every participant (step 3)."""
    if not members:
        return
    assert coordinator.plan is not None
    trigger(coordinator.plan.faults, "before_participants")
    winners = winners_of(members)
    for m in members:
        job, keys = m.job, winners[m.tag]
        assert job.plan is not None
        _settle_before(coordinator, m)
        try:  # on a fresh connection if the participant restarted since its writes
            copy = functools.partial(_copy, job.journal, str(job.job_id), keys)
            state = on_live_connection(job.plan, job.conn, copy)
        except Exception as exc:
            raise _undone(coordinator, m, m.job.spec.redact(exc)) from None
        if state not in (JobState.COMMITTING, JobState.COMMITTED):
            raise _undone(coordinator, m, f"its job is {state or 'missing'} there")
        m.job.trace.state = JobState.COMMITTING


def _settle_before(coordinator: Job, m: Member) -> None:
    """The coordinator's decisions taken before this job's and still pending in `m`,
    copied there first, oldest first, so that its tables apply them in the coordinator's
    order (review 4, R1; model/decisions.pml); they are finished after this job's commit
    there (`_settle_after`). If one cannot be copied, this job's decision is not copied
    either: recovery carries both later, in order."""
    try:
        done = _earlier(coordinator, m, copy_only=True)
    except Exception as exc:
        why = f"an earlier decision: {m.job.spec.redact(exc)}"
        raise _undone(coordinator, m, why) from None
    failed = [a for a in done if a.action == RecoveryAction.FAILED]
    if failed:
        why = f"job {failed[0].job_id}, decided before it, could not be copied there first"
        raise _undone(coordinator, m, f"{why}: {failed[0].detail}")


def _settle_after(coordinator: Job, m: Member) -> None:
    """The earlier decisions `_settle_before` copied into `m`, finished once this job's
    branches there are committed: an apply of one may have waited on their rows. One that
    fails is left to recovery (this job is committed)."""
    try:
        left = [a.line() for a in _earlier(coordinator, m, copy_only=False) if a.unresolved]
    except Exception as exc:
        left = [m.job.spec.redact(exc)]
    for why in left:
        log.warning(
            "xasink job %s: an earlier decision in participant %s is left to `xasink recover`: %s",
            coordinator.job_id,
            m.where,
            why,
        )


def _earlier(coordinator: Job, m: Member, copy_only: bool) -> list[BranchAction]:
    job = m.job
    reached = Participant(job.spec, job.conn, job.journal, job.ops)
    before = str(coordinator.job_id)
    return settle_earlier(
        coordinator.journal, coordinator.conn, reached, job.request.commit.grace, before, copy_only
    )


def _copy(journal: Journal, job_id: str, keys: Sequence[tuple[int, int, int]], conn: Any) -> Any:
    return copy_decision(journal, conn, job_id, keys)


def commit_all(coordinator: Job, members: Sequence[Member]) -> int:
    """Each participant's phase 2 and apply, in the order of their first write; returns
    how many losing attempts were rolled back."""
    losers = 0
    for m in members:
        job = m.job
        assert job.plan is not None
        first = first_staged(job)
        job.plan = dataclasses.replace(job.plan, apply=first, partition_base=0)
        losers += job.commit(m.phase_one())
        coordinator.trace.stale += job.trace.stale
        _settle_after(coordinator, m)
        try:
            links.mark_done(coordinator.journal, coordinator.conn, str(job.job_id), m.tag)
        except Exception as exc:  # recovery from the coordinator marks it done
            log.warning(
                "xasink job %s: participant %s finished, not yet marked so (%s)",
                job.job_id,
                m.where,
                coordinator.spec.redact(exc),
            )
    return losers


def abort_all(coordinator: Job, members: Sequence[Member]) -> None:
    """The block failed before the decision: abort the coordinator's job first, then,
    once it is aborted, every participant's (never before: only the coordinator decides)."""
    if coordinator.job_id is None or coordinator.decided:
        return
    coordinator.abort()
    if coordinator.trace.state != JobState.ABORTED:
        return  # not settled: recovery from the coordinator finishes the participants
    for m in members:
        m.job.abort()
        if m.job.trace.state == JobState.ABORTED:
            with contextlib.suppress(Exception):  # else recovery from the coordinator does
                links.mark_done(coordinator.journal, coordinator.conn, coordinator.job_id, m.tag)


def _undone(coordinator: Job, m: Member, why: str) -> CommitError:
    return CommitError(
        f"Job {coordinator.job_id} is decided for commit, but its decision could not be "
        f"recorded in participant {m.where} ({why}). Do not run the transaction again."
    )


def recover_command(coordinator: Job, members: Sequence[Member]) -> str:
    """The command that finishes a transaction in every one of its databases."""
    schema = coordinator.journal.schema
    command = f"xasink recover --url {coordinator.spec.address}"
    command += f" --journal-schema {schema}" if schema else ""
    return command + "".join(f" --participant {m.where}" for m in members)


def with_command(exc: XasinkError, coordinator: Job, members: Sequence[Member]) -> None:
    """A failure after the decision names the command that finishes every database."""
    if members and exc.args:
        command = recover_command(coordinator, members)
        exc.args = (f"{exc.args[0]} It has other databases: `{command}` finishes all.",)


__all__ = [
    "Member",
    "abort_all",
    "commit_all",
    "copy_decisions",
    "elsewhere",
    "enlist",
    "recover_command",
    "same_database",
    "settle_left",
    "winners_of",
    "with_command",
]
