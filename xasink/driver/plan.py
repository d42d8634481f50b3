"""What a job's branches load into: the target itself, or the job's staging table (created
here: DDL cannot run inside an XA branch), and the plan that applies the staging table.
Runs on the driver before any branch opens."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..dialects import Dialect
from ..dialects.grants import STAGED_WRITES
from ..errors import PreflightError
from ..protocol.journal import Journal
from ..runtime.jdbc import JdbcConnection, execute, is_denied, java_message
from ..spec import ConnectionSpec, TableRef
from ..tables.catalog import table_columns
from ..tables.columns import TableColumn, describe_table, unique_keys
from ..tables.modes import ModeOptions
from ..tables.staging import ApplyPlan, create_stage_sql, stage_name
from ..tables.tombstones import keeps_deletes, tomb_table
from ..tables.types import column_ddl_type

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = logging.getLogger("xasink")


def one_stream(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, options: ModeOptions
) -> bool:
    """Whether an append should load through one branch: the server loads one stream into a
    table without a unique key faster than several (`Dialect.one_stream_without_key`). A
    transaction's staged append loads its staging table, which has no key."""
    if not dialect.one_stream_without_key or (options.staged and not options.stage_append):
        return False
    return options.stage_append or not unique_keys(conn, dialect, table)


def apply_plan_for(
    options: ModeOptions,
    target: TableRef,
    frame_columns: Sequence[str],
    targets: Sequence[TableColumn],
    job_id: str,
    journal: Journal,
    index: int = 0,
) -> ApplyPlan | None:
    """A staged mode's plan, in the table's spelling of every column; None for append
    (unless `options` stage it: a transaction's append). `index`: the job's how-manieth
    staged write (a transaction's), which names its staging table."""
    if not options.staged:
        return None
    spelled = dict(zip(options.written(frame_columns), (c.name for c in targets), strict=True))
    return ApplyPlan(
        mode=options.mode,
        target=target,
        stage=stage_name(job_id, journal.schema, index),
        columns=tuple(spelled.values()),
        key=tuple(spelled[k] for k in options.key),
        ordered=options.order is not None,
        order_column=spelled.get(options.order) if options.order else None,
        op_values=options.op_values,
        op_fold=options.op_fold,
        op_skip=options.op_skip,
        types=tuple(c.sql_type for c in targets),
        tombs=tomb_table(target) if keeps_deletes(options) else None,
        replace_where=options.replace_where,
        pre_sql=options.pre_sql,
        post_sql=options.post_sql,
    )


def load_target(
    schema: StructType,
    conn: JdbcConnection,
    spec: ConnectionSpec,
    dialect: Dialect,
    target: TableRef,
    targets: Sequence[TableColumn],
    options: ModeOptions,
    apply_plan: ApplyPlan | None,
    journal: Journal,
    temporary: bool = False,
) -> tuple[TableRef, list[TableColumn], str]:
    """The table the branches load, its columns, and the DDL its branch runs first: the
    target itself (append); the job's staging table, created here with the target's
    column types; or with `temporary` (a one-phase job), the session's temporary staging
    table, which the branch creates inside its transaction."""
    if apply_plan is None:
        return target, list(targets), ""
    ddl = stage_sql(schema, dialect, targets, options, apply_plan, temporary)
    if temporary:  # described by the branch once it exists; here, as declared
        steering = zip(
            apply_plan.stage_columns[len(targets) :],
            _steering_types(schema, dialect, targets, options, apply_plan),
            strict=True,
        )
        declared = [TableColumn(n, t.split("(")[0].lower(), t, True, False) for n, t in steering]
        return apply_plan.stage, [*targets, *declared], ddl
    try:
        execute(conn, ddl)
    except Exception as exc:
        if not is_denied(exc):
            raise
        _refuse_stage(conn, journal, apply_plan, spec.redact(java_message(exc)))
    names = table_columns(conn, dialect, apply_plan.stage, spec.redact)
    return apply_plan.stage, describe_table(conn, dialect, apply_plan.stage, names), ""


def _refuse_stage(conn: JdbcConnection, journal: Journal, plan: ApplyPlan, said: str) -> None:
    """This login may not create the job's staging table (beside the journal): refused
    before any branch opens, with the GRANTs staged writes need there."""
    grants = journal.grants(conn, None).get(STAGED_WRITES, [])
    raise PreflightError(
        f"A {plan.mode} stages its rows in a table of its own ({plan.stage.name}, beside the "
        f"journal), and this login may not create it: {said}. Nothing was written. Grant "
        f"it: {'; '.join(grants) or 'CREATE (and DROP) where the journal is'} (`xasink init "
        "--writer LOGIN` prints every GRANT a writer needs)."
    ) from None


def stage_sql(
    schema: StructType,
    dialect: Dialect,
    targets: Sequence[TableColumn],
    options: ModeOptions,
    apply_plan: ApplyPlan,
    temporary: bool = False,
) -> str:
    """The staging table's CREATE: the target's column types, then the steering columns
    (op, order) typed from the DataFrame."""
    types = [c.sql_type for c in targets]
    types += _steering_types(schema, dialect, targets, options, apply_plan)
    return create_stage_sql(dialect, apply_plan, types, temporary)


def _steering_types(
    schema: StructType,
    dialect: Dialect,
    targets: Sequence[TableColumn],
    options: ModeOptions,
    apply_plan: ApplyPlan,
) -> list[str]:
    """The steering columns' (op, order) SQL types, from the DataFrame's."""
    return [
        column_ddl_type(dialect.name, name, schema[frame].dataType, key=False)
        for name, frame in zip(
            apply_plan.stage_columns[len(targets) :], options.steering, strict=True
        )
    ]


def bulk_available(dialect: Dialect, conn: JdbcConnection) -> bool:
    """Whether the dialect's bulk load works on this server (else batched INSERTs)."""
    problem = dialect.bulk_problem(conn)
    if problem:
        log.warning("xasink: bulk loading is off (%s); writing with batched INSERTs", problem)
    return problem is None
