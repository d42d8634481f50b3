"""What an operator calls: `xasink.recover`, which the `xasink recover` command runs too.

It joins the two halves the protocol keeps apart: the journal's recovery (protocol/) and
the target's staged apply (tables/staging.py), which finishes a decided overwrite, upsert
or merge."""

from __future__ import annotations

from collections.abc import Sequence

from . import defaults
from .protocol import admin
from .protocol.actions import RecoveryReport
from .protocol.connecting import make_spec
from .runtime.jdbc import redacting_java_errors
from .runtime.shutdown import tracked
from .spec import Database, TableRef
from .tables.applier import STAGED_APPLY


@tracked  # the interpreter's exit waits for it, as for a write (xasink.runtime.shutdown)
@redacting_java_errors
def recover(
    database: Database | str,
    *,
    table: str | Sequence[str] | None = None,
    job: str | None = None,
    dry_run: bool = False,
    grace: float = defaults.GRACE,
    lock_wait_timeout: float = defaults.LOCK_WAIT,
    presume_abort_tag: str | None = None,
    participants: Sequence[Database | str] = (),
    run_statements: bool = False,
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in this database: commit what is decided, roll
    back what is not and whose owner is silent, finish decided staged jobs; then carry
    the decisions of its transactions over several databases to their `participants`.

    Args:
        database: the database (`xasink.Database`, or a JDBC URL string).
        table: only jobs on this table ("name", "schema.name" or (schema, name)).
        job: only this job id.
        dry_run: report what would be done, change nothing.
        grace: seconds of silence after which a running job's owner is taken for dead.
        lock_wait_timeout: the longest any statement waits for a lock.
        presume_abort_tag: without a journal nothing is touched, unless this names the tag
            whose prepared branches are to be rolled back (once older than `grace`, where
            the server tells a branch's age).
        participants: the other databases of this database's transactions, as
            `Database` values; a URL string gets this database's user, jars and timeouts,
            never its password. A participant of a pending transaction that is not given,
            or cannot be reached, is reported as unresolved (`report.ok` is False) and
            left as it is.
        run_statements: finish a decided job whose stored plan runs the write's own
            statements (`pre_sql`, `post_sql`), as this login. Without it such a job is
            left decided and reported: whoever can write the journal can write them.
    """
    db = Database.of(database)
    return admin.recover(
        make_spec(db),
        STAGED_APPLY,
        table=str(TableRef.parse(table)) if table is not None else None,
        job=job,
        grace=grace,
        dry_run=dry_run,
        journal_schema=db.journal_schema,
        lock_wait_timeout=lock_wait_timeout,
        presume_abort_tag=presume_abort_tag,
        participants=[make_spec(participant(db, p)) for p in participants],
        run_statements=run_statements,
    )


def participant(own: Database, other: Database | str) -> Database:
    """A participant as given, or a URL string with `own`'s login name, jars and timeouts:
    never its password, nor its properties (which may hold one), nor its driver's names."""
    if isinstance(other, Database):
        return other
    return Database(
        other,
        user=own.user,
        jars=own.jars,
        connect_timeout=own.connect_timeout,
        network_timeout=own.network_timeout,
    )
