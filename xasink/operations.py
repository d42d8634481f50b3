"""What an operator calls: `xasink.recover`, which the `xasink recover` command runs too.

It joins the two halves the protocol keeps apart: the journal's recovery (protocol/) and
the target's staged apply (tables/staging.py), which finishes a decided overwrite, upsert
or merge."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import defaults
from .protocol import admin
from .protocol.actions import RecoveryReport
from .protocol.connecting import make_spec
from .runtime.jdbc import redacting_java_errors
from .runtime.shutdown import tracked
from .spec import TableRef
from .tables.applier import STAGED_APPLY


@tracked  # the interpreter's exit waits for it, as for a write (xasink.runtime.shutdown)
@redacting_java_errors
def recover(
    url: str,
    *,
    user: str | None = None,
    password: str | None = None,
    table: str | Sequence[str] | None = None,
    job: str | None = None,
    grace: float = defaults.GRACE,
    dry_run: bool = False,
    properties: Mapping[str, object] | None = None,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = defaults.CONNECT_TIMEOUT,
    network_timeout: float = defaults.NETWORK_TIMEOUT,
    lock_wait_timeout: float = defaults.LOCK_WAIT,
    presume_abort_tag: str | None = None,
    participants: Sequence[str | Mapping[str, Any]] = (),
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in this database: commit what is decided, roll
    back what is not and whose owner is silent, finish decided staged jobs; then carry
    the decisions of its transactions over several databases to their `participants`.

    Args:
        url, user, password, properties, jars, dialect, xa_datasource, connect_timeout,
            network_timeout: the connection, as for `write_xa`.
        table: only jobs on this table ("name", "schema.name" or (schema, name)).
        job: only this job id.
        grace: seconds of silence after which a running job's owner is taken for dead.
        dry_run: report what would be done, change nothing.
        journal_schema, lock_wait_timeout: as for `write_xa`.
        presume_abort_tag: without a journal nothing is touched, unless this names the tag
            whose prepared branches are to be rolled back (once older than `grace`, where
            the server tells a branch's age).
        participants: the other databases of this database's transactions: a URL (this
            call's user and jars, no password), or a mapping of these keywords (url, user,
            password, properties, jars, dialect, xa_datasource). This call's password is
            never sent to another server. A participant of a
            pending transaction that is not given, or cannot be reached, is reported as
            unresolved (`report.ok` is False) and left as it is.
    """
    spec = make_spec(
        url,
        user=user,
        password=password,
        properties=properties,
        dialect=dialect,
        xa_datasource=xa_datasource,
        jars=jars,
        connect_timeout=connect_timeout,
        network_timeout=network_timeout,
    )
    return admin.recover(
        spec,
        STAGED_APPLY,
        table=str(TableRef.parse(table)) if table is not None else None,
        job=job,
        grace=grace,
        dry_run=dry_run,
        journal_schema=journal_schema,
        lock_wait_timeout=lock_wait_timeout,
        presume_abort_tag=presume_abort_tag,
        participants=[
            make_spec(
                **{
                    "user": user,
                    "password": None,  # never this database's, unless given for it
                    "jars": jars,
                    "properties": None,
                    "dialect": None,
                    "xa_datasource": None,
                    "connect_timeout": connect_timeout,
                    "network_timeout": network_timeout,
                    **({"url": p} if isinstance(p, str) else dict(p)),
                }
            )
            for p in participants
        ],
    )
