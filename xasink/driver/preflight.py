"""Before a job exists: the server, table and journal checks (with DDL), then recovery of
what earlier jobs left on the table. Every failure says how to fix it; nothing is written."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..dialects import Dialect, get_dialect
from ..errors import ConfigurationError, PreflightError, XasinkError
from ..protocol.actions import BranchAction, RecoveryAction
from ..protocol.branches import BranchOps
from ..protocol.journal import Journal
from ..protocol.recovery import resolve_in_doubt
from ..protocol.states import JobState
from ..runtime.jdbc import JdbcConnection, java_message, query
from ..runtime.timing import step
from ..spec import ConnectionSpec, TableRef
from ..tables.catalog import check_fit, ensure_table
from ..tables.columns import TableColumn
from ..tables.evolution import MERGE_SCHEMA, add_columns, check_before_adding, new_columns
from ..tables.modes import APPEND
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
    recover: Recover | None = None,
) -> Preflight:
    """Server, table and journal checks (DDL included), before any job exists; what passed
    recently on this connection is not checked again (see check_cache). A write that may
    delete from a table whose deletes the server cannot be given an order for is refused
    here (`tables.self_reference`), not at its apply after the decision. `recover`
    resolves what earlier jobs left on the table before schema evolution alters it."""
    spec, target, options = request.spec, request.target, request.options
    dialect = get_dialect(spec.dialect)
    _refuse_unsupported(dialect, request)
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
            added: list[str] = []
            if request.schema_mode == MERGE_SCHEMA:
                existing, journal, added = _evolved(
                    conn, journal, request, schema, existing, checks, recover
                )
            checks.put(spec, ("table", target), tuple(existing))
            options, targets = _fitted(conn, request, schema, existing, added)
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
        journal = _journal(conn, journal, spec, checks)
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


def _refuse_staging(dialect: Dialect, options: ModeOptions) -> None:
    """A dialect without staging (generic) takes appends only, and not a transaction's
    staged ones."""
    if not options.staged or dialect.stages:
        return
    if options.mode == APPEND and options.actions:
        raise ConfigurationError(
            f"The {dialect.name} dialect cannot stage rows, and an append with pre_sql or "
            "post_sql stages them (to run the statements in the transaction that applies "
            "them). Nothing was written. Run the statements apart, or use the postgres or "
            "mysql dialect."
        )
    if options.mode == APPEND:  # a transaction stages its appends by default
        raise ConfigurationError(
            f"The {dialect.name} dialect cannot stage rows, and a transaction stages its "
            "appends (so that all its tables change at once). Nothing was written. Open "
            "the transaction with per_branch_appends=True (each task's rows committed "
            "by its own branch), or use the postgres or mysql dialect."
        )
    raise ConfigurationError(
        f"The {dialect.name} dialect writes mode='append' only; mode={options.mode!r} "
        "stages the rows and applies them with an upsert, a joined DELETE and an apply "
        "lock, which have no ANSI SQL form. Nothing was written. Use the postgres or mysql "
        "dialect for it, or append."
    )


#: Resolves what earlier jobs left on a table (`recover_table`, with the job's branch
#: operations on this journal), before schema evolution alters it.
Recover = Callable[[Journal, TableRef], None]


class _Undescribed(Exception):
    """No remembered description of the table: read it."""


def _journal(
    conn: JdbcConnection, journal: Journal, spec: ConnectionSpec, checks: CheckCache
) -> Journal:
    """The journal, created or checked (once per `checks` period), with its tag."""
    if not (journal.tag and checks.get(spec, ("journal", journal.schema, journal.tag))):
        journal = journal.ensure(conn, spec)
        checks.put(spec, ("journal", journal.schema, journal.tag), True)
    return journal


def _evolved(
    conn: JdbcConnection,
    journal: Journal,
    request: JobRequest,
    schema: StructType,
    existing: list[TableColumn],
    checks: CheckCache,
    recover: Recover | None,
) -> tuple[list[TableColumn], Journal, list[str]]:
    """The table's columns once the frame's new ones are added (`tables.evolution`), read
    again (another writer may have added some first, of its own type), the journal, and
    the columns this write added.
    The columns the table has must fit first: a refused write leaves the table as it was.
    An earlier job's prepared branches hold the table (a row lock on PostgreSQL, a metadata
    lock on MySQL and MariaDB) until recovery ends them, so with `recover` what earlier
    jobs left on it is resolved before the ALTER, which would otherwise wait for them in
    vain on every run."""
    dialect, options = get_dialect(request.spec.dialect), _told(request, existing)
    missing = new_columns(dialect, schema, options, existing)
    if not missing:
        return existing, journal, []
    check_before_adding(conn, dialect, request.target, schema, options, existing, missing)
    spec, target = request.spec, request.target
    if recover is not None:
        with step("recovery scan"):
            journal = _journal(conn, journal, spec, checks)
            recover(journal, dialect.table_identity(conn, target) or target)
    with step("schema evolution"):
        added, columns = add_columns(
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
    return columns, journal, added


def _fitted(
    conn: JdbcConnection,
    request: JobRequest,
    schema: StructType,
    existing: list[TableColumn],
    added: Sequence[str] = (),
) -> tuple[ModeOptions, list[TableColumn]]:
    """The mode's options told which columns the table has, and the columns written (refused
    with SchemaMismatchError when the frame does not fit; such a refusal names the columns
    schema evolution `added` just before, which stay)."""
    dialect, options = get_dialect(request.spec.dialect), _told(request, existing)
    try:
        return options, check_fit(conn, dialect, request.target, schema, options, existing)
    except XasinkError as exc:
        if not added:
            raise
        raise type(exc)(
            f"{exc} (schema_mode='merge' added column(s) {', '.join(map(repr, added))} to "
            "the table first: they stay, NULL in every row.)"
        ) from None


def _refuse_unsupported(dialect: Dialect, request: JobRequest) -> None:
    """What the dialect cannot do, refused before anything is read or written."""
    _refuse_staging(dialect, request.options)
    if request.schema_mode == MERGE_SCHEMA and not dialect.evolves:
        raise ConfigurationError(
            f"The {dialect.name} dialect does not evolve a table: schema_mode='merge' adds "
            "columns with an ALTER TABLE whose form and locking xasink has not tested on "
            "other servers. Nothing was written. Add the DataFrame's new columns to the "
            "table yourself, or write without schema_mode."
        )


def _told(request: JobRequest, existing: list[TableColumn]) -> ModeOptions:
    """The mode's options told which columns the table has (its `order` column's)."""
    dialect = get_dialect(request.spec.dialect)
    named = {dialect.column_key(c.name) for c in existing}
    return request.options.with_table(lambda column: dialect.column_key(column) in named)


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
