"""A write's own statements (`pre_sql`, `post_sql`, checked by `user_sql`), run in its
apply's local transaction (`applier.apply_all`): before its statements and after them, so
that they commit or roll back with its rows. A statement that fails for itself ends the
job aborted with its target unchanged (it would fail again); a failure that is no fault of
the statement (a lost connection, a lock wait) leaves the job to be applied again."""

from __future__ import annotations

from collections.abc import Callable

from ..dialects import Dialect
from ..errors import InputDataError, JournalError
from ..runtime.jdbc import (
    JdbcConnection,
    execute_text,
    java_message,
    mark_ran_statements,
    query,
    sql_state,
)
from .staging import ApplyPlan, ApplyPlans, refused
from .user_sql import stored_sql_problem


class ActionError(InputDataError):
    """A write's own statement (`pre_sql`, `post_sql`) failed in its apply's transaction,
    which rolls back with it: applying again would fail the same way, so the job is
    aborted, its target unchanged (a lost connection or a lock wait is not this: the
    apply is retried, by `xasink recover`)."""

    #: Its message names the statement itself, not the rows (`xasink recover`'s report).
    names_statement = True


#: SQLSTATE classes of failures that are no fault of the statement itself: a connection
#: (08), a deadlock or serialization failure (40), resources (53), an operator (57).
_TRANSIENT_CLASSES = ("08", "40", "53", "57")


def run_actions(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan, which: str) -> None:
    """Run the plan's `which` ("pre_sql", "post_sql") statements, in order, in the
    caller's transaction (the apply's); a statement's own failure is an ActionError."""
    statements: tuple[str, ...] = getattr(plan, which)
    pre, post = (statements, ()) if which == "pre_sql" else ((), statements)
    if problem := stored_sql_problem(None, pre, post, dialect.name):
        raise JournalError(f"{which} of the apply plan for {plan.target} is refused: {problem}")
    if statements:
        mark_ran_statements(conn)  # its session is never kept (`sessions.park`)
    for number, statement in enumerate(statements, 1):
        try:
            execute_text(conn, statement)  # as text: a `?` is the server's, not a parameter
        except Exception as exc:
            state = sql_state(exc)
            if state is None or state[:2] in _TRANSIENT_CLASSES or dialect.is_lock_timeout(exc):
                raise
            shown = statement if len(statement) <= 80 else statement[:77] + "..."
            raise ActionError(
                f"{which} statement {number} of {len(statements)} for {plan.target}, "
                f"{shown!r}, failed: {java_message(exc)}"
            ) from None
    if statements and dialect.name != "postgres" and _autocommits(conn):
        raise JournalError(  # not a data error: the job stays decided, for a person
            f"{which} of the apply plan for {plan.target} turned autocommit on (MySQL and "
            "MariaDB then commit each statement at once): the apply stops here. Check the "
            "target, and what of the apply committed, before `xasink recover`."
        )


def _autocommits(conn: JdbcConnection) -> bool:
    """The session commits each statement at once (a statement turned autocommit on)."""
    return str(query(conn, "SELECT @@autocommit")[0][0]) not in ("0", "False", "false")


def runs_actions(plan: ApplyPlan | ApplyPlans | None) -> bool:
    """The apply runs a write's own statements: its session is never kept for the next
    job, whatever they changed in it (a setting, a variable, a role)."""
    return plan is not None and any(w.pre_sql or w.post_sql for w in ApplyPlans.of(plan).writes)


def refused_by(
    target: str,
    job_id: str,
    exc: BaseException,
    redact: Callable[[object], str],
    staged: bool = True,
) -> InputDataError:
    """The error of a staged job aborted because its apply failed for good (`is_data_error`):
    the target refused its rows, or one of the write's own statements failed. `staged`
    False: the rows went straight into the target (`staging.refused`)."""
    if not isinstance(exc, ActionError):
        return refused(target, job_id, redact(exc), staged)
    return ActionError(
        f"Job {job_id} was not applied: its {redact(exc)}. The statement ran in the "
        f"transaction that applies the job's rows, which rolled back with it: nothing was "
        f"changed in {target} and none of the job's rows were written; the job is aborted "
        "and its staging table dropped. Fix the statement (or what it needs), then run the "
        "write again."
    )


__all__ = ["ActionError", "refused_by", "run_actions", "runs_actions"]
