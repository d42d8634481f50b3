"""The links of a transaction over several databases: which journal decides a job, and
which journals hold its other branches.

The transaction's own database is the coordinator: its journal records the one decision.
Every other database written is a participant, with its own job row under the same job
id, its own branches (XIDs with its own journal's tag) and its own markers. One row of
`xasink_links` on each side ties them together:

* in the coordinator, one row per participant (role `participant`), recorded before the
  participant's job row exists, and only while the job is running (`add_participant`), so
  that recovery from the coordinator knows every participant that may hold a branch; the
  decision writes each participant's winners into its row in the decision's own local
  transaction (`record_winners`); the row is `done` once the participant is final;
* in a participant, one row naming the coordinator (role `coordinator`), recorded before
  its job row: a running job with such a row is never aborted by that database's own
  recovery, whatever its heartbeat, because only the coordinator may decide it.

Journals of this release have the table from the start. In an earlier layout it joined a
journal the first time the journal took part in such a transaction, and the journal's
version became 2: a release that knows nothing of links refuses the journal instead of
aborting a participant's job it cannot see is coordinated.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..runtime.jdbc import JdbcConnection, execute, query
from .schema import LINKED_VERSION, JournalLayout
from .states import DECIDED_STATES, JobState

#: A link row's role: the peer named is the job's coordinator, or one of its participants.
COORDINATOR, PARTICIPANT = "coordinator", "participant"
#: A participant's link in the coordinator: still to finish, or final there.
PENDING, DONE = "pending", "done"
#: How an operator's end of one database's part of a linked job (`xasink resolve --abandon
#: --linked`, after a lost branch) starts its recorded resolution.
LINKED_END = "ended in this database alone (--linked)"


@dataclass(frozen=True)
class Link:
    """One link row: the peer journal (its tag, where it is, its schema) of a job."""

    job_id: str
    peer: str
    role: str
    address: str
    schema: str | None
    #: A participant's winners, (partition, attempt, rows), recorded with the decision.
    winners: tuple[tuple[int, int, int], ...] = ()
    state: str = PENDING

    @property
    def where(self) -> str:
        """The peer as a person reads it: its address, schema and journal tag."""
        schema = f", journal schema {self.schema}" if self.schema else ""
        return f"{self.address} (journal tag {self.peer}{schema})"


def ensure(layout: JournalLayout, conn: JdbcConnection) -> None:
    """The journal, ready to take part in a transaction over several databases (DDL,
    before any branch opens)."""
    layout.ensure_linked(conn)


def add_participant(
    layout: JournalLayout,
    conn: JdbcConnection,
    job_id: str,
    peer: str,
    address: str,
    schema: str | None,
) -> bool:
    """Record a participant of a running job, before the participant's job row exists.
    False: the job is no longer running (a recovery run aborted it)."""
    changed = execute(
        conn,
        f"INSERT INTO {layout.links} (job_id, peer, role, address, peer_schema, state) "
        f"SELECT job_id, ?, ?, ?, ?, ? FROM {layout.jobs} WHERE job_id = ? AND state = ?",
        (peer, PARTICIPANT, address, schema, PENDING, job_id, JobState.RUNNING),
    )
    return changed == 1


def add_coordinator(
    layout: JournalLayout,
    conn: JdbcConnection,
    job_id: str,
    peer: str,
    address: str,
    schema: str | None,
) -> None:
    """Record, in a participant, the journal that decides `job_id` (before its job row)."""
    execute(
        conn,
        f"INSERT INTO {layout.links} (job_id, peer, role, address, peer_schema, state) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (job_id, peer, COORDINATOR, address, schema, PENDING),
    )


def record_winners(
    layout: JournalLayout,
    conn: JdbcConnection,
    job_id: str,
    winners: Mapping[str, Sequence[tuple[int, int, int]]],
) -> None:
    """Each participant's winners into its link row (inside the decision's transaction)."""
    for peer, keys in winners.items():
        execute(
            conn,
            f"UPDATE {layout.links} SET winners = ? WHERE job_id = ? AND peer = ? AND role = ?",
            (json.dumps([list(k) for k in keys]), job_id, peer, PARTICIPANT),
        )


def mark_done(layout: JournalLayout, conn: JdbcConnection, job_id: str, peer: str) -> None:
    """A participant's part of the job is final: recovery from the coordinator skips it."""
    execute(
        conn,
        f"UPDATE {layout.links} SET state = ? WHERE job_id = ? AND peer = ? AND role = ?",
        (DONE, job_id, peer, PARTICIPANT),
    )


def coordinator_of(layout: JournalLayout, conn: JdbcConnection, job_id: str) -> Link | None:
    """The journal that decides `job_id`, when this journal is one of its participants."""
    found = _links(layout, conn, "l.job_id = ? AND l.role = ?", (job_id, COORDINATOR))
    return found[0] if found else None


def participants(
    layout: JournalLayout,
    conn: JdbcConnection,
    job_id: str | None = None,
    pending: bool = True,
    peer: str | None = None,
) -> list[Link]:
    """The participants this coordinator recorded (of `job_id`, in journal `peer`; still
    pending only)."""
    where, params = "l.role = ?", [PARTICIPANT]
    if peer is not None:
        where += " AND l.peer = ?"
        params.append(peer)
    if job_id is not None:
        where += " AND l.job_id = ?"
        params.append(job_id)
    if pending:
        where += " AND l.state = ?"
        params.append(PENDING)
    # In the coordinator's decision order (undecided last), so that a participant meets
    # them in that order, an earlier one applied before a later one's apply needs it.
    decided_first = "CASE WHEN j.decided_at IS NULL THEN 1 ELSE 0 END, j.decided_at, l.job_id"
    joined = (f"LEFT JOIN {layout.jobs} j ON j.job_id = l.job_id", ())
    return _links(layout, conn, where, tuple(params), joined, decided_first)


def decided_before(
    layout: JournalLayout, conn: JdbcConnection, job_id: str, peer: str
) -> list[Link]:
    """The participant `peer`'s pending links of this coordinator's jobs decided (committing
    or committed) before `job_id`, oldest decision first: carried there before `job_id`'s,
    so that every database applies its transactions in the coordinator's decision order
    (review 4, R1; model/decisions.pml)."""
    return _links(
        layout,
        conn,
        "l.role = ? AND l.state = ? AND l.peer = ? AND j.state IN (?, ?, ?) AND l.job_id <> "
        "me.job_id AND (j.decided_at < me.decided_at OR (j.decided_at = me.decided_at AND "
        "j.job_id < me.job_id))",
        (PARTICIPANT, PENDING, peer, *DECIDED_STATES),
        joined=(
            f"JOIN {layout.jobs} j ON j.job_id = l.job_id JOIN {layout.jobs} me ON me.job_id = ?",
            (job_id,),
        ),
        order="j.decided_at, j.job_id",
    )


def lost_here(link: Link, staged: bool) -> str:
    """What a lost winner leaves of a linked job in this database, and how to end it."""
    held = "nothing of it was applied here" if staged else "its other branches' rows are in"
    return (
        f"lost: {held}; the transaction's other databases (with {link.where}) hold their "
        f"part. Once you have dealt with the rows, `xasink resolve {link.job_id} --abandon "
        "--linked` against this database ends it here, and recovery from its coordinator "
        "then closes the transaction"
    )


def ended_here(link: Link, staged: bool) -> str:
    """What `resolve --abandon --linked` did: this database's part ended, the decision
    standing for the others (what each holds, and what finishes them)."""
    held = (
        "nothing of it is applied here"
        if staged
        else "the rows of its branches that were not lost are in"
    )
    others = (
        "recovery from this database, the coordinator (`xasink recover --participant URL`), "
        "carries it to the participants that have not finished their part"
        if link.role == PARTICIPANT
        else f"the transaction's other databases keep their part; recovery from its "
        f"coordinator ({link.address}) closes the transaction"
    )
    return f"{LINKED_END}: {held}. The decision stands: {others}"


def linked(layout: JournalLayout, conn: JdbcConnection, job_id: str) -> Link | None:
    """A link of `job_id` in either role: the job is part of a transaction over several
    databases, which no database may end alone once it is decided."""
    found = _links(layout, conn, "l.job_id = ?", (job_id,))
    return found[0] if found else None


def _links(
    layout: JournalLayout,
    conn: JdbcConnection,
    where: str,
    params: tuple[Any, ...],
    joined: tuple[str, tuple[Any, ...]] = ("", ()),
    order: str = "l.job_id",
) -> list[Link]:
    """Link rows (`l`, with the tables `joined` names and its parameters); none in a journal
    that never took part in such a transaction (its version says so, read after the failed
    read: a table made since is seen)."""
    try:
        rows = query(
            conn,
            f"SELECT l.job_id, l.peer, l.role, l.address, l.peer_schema, l.winners, l.state "
            f"FROM {layout.links} l {joined[0]} WHERE {where} ORDER BY {order}, l.peer",
            (*joined[1], *params),
        )
    except Exception as exc:  # MySQL denies a table it does not let this login see
        if layout.dialect.is_missing_table(exc) or layout.stored_version(conn) < LINKED_VERSION:
            return []
        raise
    return [
        Link(
            str(job_id),
            str(peer),
            str(role),
            str(address),
            None if schema is None else str(schema),
            _winners(winners),
            str(state),
        )
        for job_id, peer, role, address, schema, winners, state in rows
    ]


def _winners(text: object) -> tuple[tuple[int, int, int], ...]:
    if text is None:
        return ()
    return tuple((int(p), int(a), int(r)) for p, a, r in json.loads(str(text)))


def winner_keys(winners: Iterable[tuple[int, int, int]]) -> frozenset[tuple[int, int]]:
    return frozenset((p, a) for p, a, _ in winners)


__all__ = [
    "COORDINATOR",
    "DONE",
    "PARTICIPANT",
    "PENDING",
    "Link",
    "add_coordinator",
    "add_participant",
    "coordinator_of",
    "ensure",
    "linked",
    "mark_done",
    "participants",
    "record_winners",
]
