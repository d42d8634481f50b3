"""An administrator sets the journal up, so that writers need no more than DML on it.

A writer creates the journal on its first write when nothing has, which needs CREATE in
its schema. Where writers run with least privilege, `xasink init` creates (or upgrades)
the journal with the administrator's login instead, and says what to grant a writer."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..defaults import LOCK_WAIT
from ..spec import Database
from .connecting import journal_session


@dataclass(frozen=True)
class JournalSetUp:
    """What `set_up` found and did: the journal's schema, whether it was made now, its
    layout, and the GRANTs a writer login needs, grouped by the writes that need them."""

    schema: str
    created: bool
    version: int
    grants: dict[str, list[str]] = field(default_factory=dict)


def set_up(
    database: Database | str, writer: str | None, lock_wait: float = LOCK_WAIT
) -> JournalSetUp:
    """Create the journal of `database` unless it exists (an earlier layout is upgraded in
    place), with the login `database` gives; with `writer`, the GRANTs that login needs."""
    with journal_session(database, lock_wait) as (spec, conn, journal):
        created = not journal.exists(conn)
        journal = journal.ensure(conn, spec)
        grants = journal.grants(conn, writer) if writer else {}
        return JournalSetUp(journal.schema_name(conn), created, journal.version, grants)


__all__ = ["JournalSetUp", "set_up"]
