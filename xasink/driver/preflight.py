"""Before a job exists: the server, table and journal checks (with DDL), then recovery of
what earlier jobs left on the table. Every failure says how to fix it; nothing is written."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..dialects import get_dialect
from ..errors import ConfigurationError, PreflightError
from ..protocol.actions import BranchAction, RecoveryAction
from ..protocol.branches import BranchOps
from ..protocol.journal import Journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.states import JobState
from ..runtime.jdbc import JdbcConnection, java_message, query
from ..runtime.timing import step
from ..spec import ConnectionSpec, TableRef
from ..tables.catalog import check_fit, ensure_table, table_columns
from ..tables.columns import TableColumn, describe_table
from ..tables.evolution import MERGE_SCHEMA, add_columns, check_before_adding, new_columns
from ..tables.self_reference import refuse_fixed_deletes, refuse_linked_slice
from ..tables.tombstone_tables import ensure_tombstones
from ..tables.tombstones import keeps_deletes
from ..tables.user_sql import check_on_server
from ..xid import FORMAT_ID
from .check_cache import UNCACHED, CheckCache
from .request import JobRequest, Preflight

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from ..tables.modes import ModeOptions

log = logging.getLogger("xasink")


def preflight(
    conn: JdbcConnection,
    journal: Journal,
    request: JobRequest,
    schema: StructType,
    branches: int,
    checks: CheckCache = UNCACHED,
) -> Preflight:
    """Server, table and journal checks (DDL included), before any job exists; what passed
    recently on this connection is not checked again (see check_cache). A write that may
    delete from a table whose deletes the server cannot be given an order for is refused
    here (`tables.self_reference`), not at its apply after the decision."""
    spec, target, options = request.spec, request.target, request.options
    dialect = get_dialect(spec.dialect)
    if options.staged and not dialect.stages:
        raise ConfigurationError(
            f"The {dialect.name} dialect writes mode='append' only; mode={options.mode!r} "
            "stages the rows and applies them with an upsert, a joined DELETE and an apply "
            "lock, which have no ANSI SQL form. Nothing was written. Use the postgres or mysql "
            "dialect for it, or append."
        )
    with step("server checks"):
        passed = checks.get(spec, "server")
        if not isinstance(passed, int) or passed < branches:
            dialect.check_server(conn, branches, spec.user)
            checks.put(spec, "server", max(branches, passed if isinstance(passed, int) else 0))
    with step("table description"):
        described = checks.get(spec, ("table", target))
        try:
            if not isinstance(described, tuple):
                raise _Undescribed
            created, (options, targets) = False, _fitted(conn, request, schema, list(described))
        except (_Undescribed, PreflightError):
            # A remembered description may only let a write on: a refusal rests on a fresh one
            # (a column added a moment ago is there now).
            existing, created = ensure_table(
                conn,
                dialect,
                target,
                schema,
                options,
                request.create,
                spec.redact,
                spec.user,
                request.new_table,
            )
            if request.schema_mode == MERGE_SCHEMA:
                existing = _evolved(conn, journal, request, schema, existing)
            checks.put(spec, ("table", target), tuple(existing))
            options, targets = _fitted(conn, request, schema, existing)
    with step("table identity"):
        table = checks.get(spec, ("identity", target))
        if not isinstance(table, TableRef):
            table = dialect.table_identity(conn, target) or target
            checks.put(spec, ("identity", target), table)
    with step("replace_where and action checks"):
        sql = {"pre_sql": options.pre_sql, "post_sql": options.post_sql}
        if options.replace_where is not None or options.actions:
            written = [c.name for c in targets]
            check_on_server(conn, dialect, table, written, options.replace_where, sql, spec.redact)
        if options.replace_where is not None:  # the apply unlinks self-references first
            refuse_linked_slice(conn, dialect, table, options.replace_where)
    with step("self-reference check"):  # a write that may delete rows (overwrite, merge)
        if options.deletes and not checks.get(spec, ("deletes hold", table, options.mode)):
            refuse_fixed_deletes(conn, dialect, table, options.mode)
            checks.put(spec, ("deletes hold", table, options.mode), True)
    with step("journal DDL checks"):
        if not (journal.tag and checks.get(spec, ("journal", journal.schema, journal.tag))):
            journal = journal.ensure(conn, spec)
            checks.put(spec, ("journal", journal.schema, journal.tag), True)
    with step("tombstones DDL checks"):  # the order of deleted keys (tables.tombstones)
        _tombstones(conn, request, journal, table, options, schema, targets, checks)
    return Preflight(journal, targets, created, table, options)


def _tombstones(
    conn: JdbcConnection,
    request: JobRequest,
    journal: Journal,
    table: TableRef,
    options: ModeOptions,
    schema: StructType,
    targets: list[TableColumn],
    checks: CheckCache,
) -> None:
    """The table keeping the order of the target's deleted keys, where the write keeps it.
    Remembered by the columns' types too (MySQL's name their collation): a key or order
    whose type changed is checked against its tombstones again."""
    spec = request.spec
    types = tuple(c.sql_type for c in targets)
    kept = ("tombstones", table, journal.schema, options.mode, options.key, options.order, types)
    if keeps_deletes(options) and not checks.get(spec, kept):
        args = (options, schema.names, targets, spec.user, journal.lock_wait, spec.redact)
        ensure_tombstones(conn, get_dialect(spec.dialect), table, journal.schema, *args)
        checks.put(spec, kept, True)


class _Undescribed(Exception):
    """No remembered description of the table: read it."""


def _evolved(
    conn: JdbcConnection,
    journal: Journal,
    request: JobRequest,
    schema: StructType,
    existing: list[TableColumn],
) -> list[TableColumn]:
    """The table's columns once the frame's new ones are added (`tables.evolution`), read
    again (another writer may have added some first, of its own type). The columns the
    table has must fit first: a refused write leaves the table as it was."""
    dialect = get_dialect(request.spec.dialect)
    named = {dialect.column_key(c.name) for c in existing}
    options = request.options.with_table(lambda column: dialect.column_key(column) in named)
    missing = new_columns(dialect, schema, options, existing)
    if not missing:
        return existing
    check_before_adding(conn, dialect, request.target, schema, options, existing, missing)
    with step("schema evolution"):
        spec, target = request.spec, request.target
        add_columns(
            conn,
            dialect,
            target,
            schema,
            options,
            missing,
            new_table=request.new_table,
            lock_wait=journal.lock_wait,
            redact=spec.redact,
            user=spec.user,
        )
        return describe_table(
            conn, dialect, target, table_columns(conn, dialect, target, spec.redact)
        )


def _fitted(
    conn: JdbcConnection, request: JobRequest, schema: StructType, existing: list[TableColumn]
) -> tuple[ModeOptions, list[TableColumn]]:
    """The mode's options told which columns the table has, and the columns written (refused
    with SchemaMismatchError when the frame does not fit)."""
    dialect = get_dialect(request.spec.dialect)
    named = {dialect.column_key(c.name) for c in existing}
    options = request.options.with_table(lambda column: dialect.column_key(column) in named)
    return options, check_fit(conn, dialect, request.target, schema, options, existing)


#: (connection, schema) pairs whose temporary-stage refusal this process has warned about.
_WARNED: set[tuple[object, str | None]] = set()


def can_stage_temporarily(
    conn: JdbcConnection,
    journal: Journal,
    spec: ConnectionSpec,
    checks: CheckCache = UNCACHED,
    table: TableRef | None = None,
) -> bool:
    """Whether a single-branch staged job may stage in a temporary table inside its one
    transaction (tried once per `checks` period). Where the login may not, or the try fails
    for any other reason, such a job takes the two-phase path large frames take, with a real
    staging table, and the process says once why and what would restore the faster path.
    With `table`, also whether that table's apply can read a temporary stage."""
    fits = table is None or temporary_stage_fits(conn, table, spec, checks)
    return fits and _temporary_tables_allowed(conn, journal, spec, checks)


def _temporary_tables_allowed(
    conn: JdbcConnection, journal: Journal, spec: ConnectionSpec, checks: CheckCache
) -> bool:
    dialect = get_dialect(spec.dialect)
    if not dialect.temporary_tables:
        return False
    key = ("temporary stage", journal.schema)
    known = checks.get(spec, key)
    if isinstance(known, bool):
        return known
    with step("temporary stage check"):
        try:
            refusal = dialect.temporary_stage_refusal(conn, journal.schema, spec.user)
        except Exception as exc:  # the probe only chooses a path: a failure means the slower one
            refusal = (f"the check failed: {java_message(exc)[:200]}", "resolve that error")
    if refusal is not None and (spec, journal.schema) not in _WARNED:
        _WARNED.add((spec, journal.schema))
        log.warning(
            "xasink: this login could not create a temporary table inside a transaction (%s), "
            "so small staged writes stage in a real table and commit in two phases, as large "
            "ones do (slower). To let them commit in one transaction: %s",
            spec.redact(refusal[0]),
            refusal[1],
        )
    checks.put(spec, key, refusal is None)
    return refusal is None


def temporary_stage_fits(
    conn: JdbcConnection, table: TableRef, spec: ConnectionSpec, checks: CheckCache = UNCACHED
) -> bool:
    """Whether a temporary staging table can feed this table's apply. The apply of a table
    that references itself reads its staging table several times in one statement
    (`tables.self_reference`), which MySQL refuses for a temporary table ("Can't reopen
    table"): such a table's small staged writes take the two-phase path instead."""
    dialect = get_dialect(spec.dialect)
    key = ("temporary stage fits", table)
    known = checks.get(spec, key)
    if isinstance(known, bool):
        return known
    found = dialect.self_references_sql(table)
    fits = found is None or not query(conn, *found) or dialect.reopens_temporary(conn)
    checks.put(spec, key, fits)
    return fits


def recover_table(
    ops: BranchOps, conn: JdbcConnection, journal: Journal, table: str, grace: float, staged: bool
) -> list[BranchAction]:
    """Resolve what earlier jobs left on this table. Decided jobs are finished whatever
    their heartbeat, so a staged write never starts while an older decided one is pending:
    it would be applied after this one and overwrite newer data. The full scan runs only
    when a cheap look cannot prove that there is nothing to do."""
    if nothing_in_doubt(conn, journal, table):
        return []
    actions = resolve_in_doubt(ops, conn, journal, table=table, grace=grace).actions
    stuck = {a.job_id for a in actions if a.unresolved and a.action != RecoveryAction.LEFT}
    for action in actions:
        if action.job_id in stuck:
            log.warning("xasink: an earlier job on %s needs attention: %s", table, action.line())
    if staged:
        pending = [
            r
            for r in journal.jobs_in_state(conn, JobState.COMMITTING)
            if r.staged and r.table == table and r.job_id in stuck
        ]
        if pending:
            job = pending[0].job_id
            why = next(a.line() for a in actions if a.job_id == job and a.unresolved)
            # Most such failures pass (a lock wait, a lost connection): the job is healthy,
            # and abandoning it drops its rows for good.
            last = (
                "It is one transaction over several databases: it is never dropped here alone "
                "while it can still finish (only a lost branch is ended with `xasink resolve "
                f"{job} --abandon --linked`)."
                if journal.linked(conn, job)
                else f"Only a job that can never finish is for `xasink resolve {job} --abandon`, "
                "which drops its rows."
            )
            raise PreflightError(
                f"Job {job} on {table} is decided, but finishing it failed just now ({why}). "
                "Staged writes to one table are applied in decision order, so this write "
                "waits for it; nothing was written. Run the write again (or `xasink "
                f"recover`) once the cause is gone: that finishes the job first. {last}"
            )
    return actions


def nothing_in_doubt(conn: JdbcConnection, journal: Journal, table: str) -> bool:
    """Proof that recovery scoped to `table` would do nothing: no job on it is running or
    deciding and no finished job's staging table is left, then (read after that) no
    prepared transaction in xasink's XID format at all, whatever its job, tag or table.
    A job in doubt shows at the first read as such a row, or, once its row is final, only
    through a prepared straggler, which the second read lists. Anything unsure (no journal
    tag yet, a dialect that cannot list) means no. It only reads: it never acts."""
    if not journal.tag or not journal.table_settled(conn, table):
        return False
    return journal.dialect.prepared_count(conn, FORMAT_ID) == 0
