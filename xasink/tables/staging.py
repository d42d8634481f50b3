"""Staged write modes (overwrite, upsert, merge): branches fill a job-private staging table;
one local transaction applies it to the target once every branch has committed.

Why not write the target inside the branches? A prepared branch keeps its locks until phase 2,
and phase 2 starts only when every branch has prepared. An overwrite's DELETE in one branch
and INSERTs in another, or (InnoDB) an upsert's gap lock and another branch's insert, would
then wait on each other until a lock timeout. A branch that touches only its job's own
staging table (and its own marker row) has nothing to wait for. The target is changed by one
statement sequence, in one local transaction, after phase 2, with no prepared branch of the
job left: readers see the old contents until it commits and the new ones after.

That transaction also flips the job row from `committing` to `committed` (see
`Journal.finish`), so it runs exactly once even when a driver and `xasink recover` race.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..dialects import Dialect
from ..errors import InputDataError, JournalError, RowsRefusedError
from ..runtime.jdbc import JdbcConnection, execute, query, sql_error_code, sql_state
from ..spec import TableRef
from .modes import OP_COLUMN, ORDER_COLUMN
from .retyping import ChangedTypesError, check_types
from .user_sql import stored_sql_problem

#: How many offending keys or values an error names.
SHOWN = 5


@dataclass(frozen=True)
class ApplyPlan:
    """How to apply a job's staging table to its target; kept in the journal as JSON, so
    that `xasink recover` can finish the job without the driver."""

    mode: str
    target: TableRef
    stage: TableRef
    #: Target columns written (the table's spelling); the staging table has the same names.
    columns: tuple[str, ...]
    key: tuple[str, ...] = ()
    ordered: bool = False
    op_values: tuple[tuple[str, bool], ...] = ()
    #: The op column is compared lower-cased (the built-in change-feed spellings).
    op_fold: bool = False
    #: Op values whose rows are dropped before the staging table (e.g. update_preimage).
    op_skip: tuple[str, ...] = ()
    #: The target's column types (per `columns`) the staging table was built with; the
    #: apply refuses a target whose types changed since (`retyping.check_types`).
    #: Empty in plans written before it was recorded: not checked.
    types: tuple[str, ...] = ()
    #: The target's `order` column (its spelling), when it stores one: a staged change
    #: applies only over an older stored row (`applier`). None: the target keeps no order.
    order_column: str | None = None
    #: The table keeping the order of the target's deleted keys (`tombstones`), when the
    #: target stores the order column; None in plans written before it was kept.
    tombs: TableRef | None = None
    #: An overwrite's SQL condition: the rows it replaces (None: the whole table).
    replace_where: str | None = None
    #: The write's own statements, run in the apply's transaction before and after it.
    pre_sql: tuple[str, ...] = ()
    post_sql: tuple[str, ...] = ()

    @property
    def requires(self) -> tuple[str, ...]:
        """What of this plan a release must know to apply it (`ApplyPlans.to_json`)."""
        needs = ("replace_where",) if self.replace_where is not None else ()
        return needs + (("actions",) if self.pre_sql or self.post_sql else ())

    def to_json(self) -> str:
        if self.requires:  # never in a shape an older release would apply without them
            return ApplyPlans((self,)).to_json()
        return json.dumps(self.raw(), sort_keys=True)

    def raw(self) -> dict[str, Any]:
        """The plan as JSON values; a plan without the later fields keeps the earlier shape."""
        raw = asdict(self)
        for name in ("replace_where", "pre_sql", "post_sql"):
            if not raw[name]:
                del raw[name]
        return raw

    @classmethod
    def from_json(cls, text: str) -> ApplyPlan:
        """The plan a job row stores; a row this version did not write is an error, never
        filled in with guesses (the journal's schema version says what it holds)."""
        try:
            return cls._from_raw(json.loads(text))
        except (KeyError, TypeError, ValueError) as exc:
            raise JournalError(
                f"A job row's apply plan is not one this xasink wrote ({type(exc).__name__}: "
                f"{exc}); `xasink jobs` shows the job, and `xasink resolve JOB --abandon` "
                "ends it with its target unchanged."
            ) from None

    @classmethod
    def _from_raw(cls, raw: dict[str, Any]) -> ApplyPlan:
        """Its SQL checked again: whoever writes the journal writes plans, which recover runs."""
        plan = cls._unchecked(raw)
        if problem := stored_sql_problem(plan.replace_where, plan.pre_sql, plan.post_sql):
            raise JournalError(
                f"A job row's apply plan for {plan.target} holds SQL that xasink refuses, and "
                f"never stores ({problem}). Check who can write the journal; `xasink resolve "
                "JOB --abandon` ends the job with its target unchanged."
            )
        return plan

    @classmethod
    def _unchecked(cls, raw: dict[str, Any]) -> ApplyPlan:
        return cls(
            mode=raw["mode"],
            target=TableRef(**raw["target"]),
            stage=TableRef(**raw["stage"]),
            columns=tuple(raw["columns"]),
            key=tuple(raw["key"]),
            ordered=bool(raw["ordered"]),
            op_values=tuple((str(v), bool(d)) for v, d in raw["op_values"]),
            op_fold=bool(raw["op_fold"]),
            op_skip=tuple(str(v) for v in raw["op_skip"]),
            types=tuple(str(t) for t in raw.get("types", ())),
            order_column=raw.get("order_column"),
            tombs=TableRef(**raw["tombs"]) if raw.get("tombs") else None,
            replace_where=raw.get("replace_where"),
            pre_sql=tuple(str(s) for s in raw.get("pre_sql", ())),
            post_sql=tuple(str(s) for s in raw.get("post_sql", ())),
        )

    @property
    def targets(self) -> tuple[TableRef, ...]:
        return (self.target,)

    @property
    def stages(self) -> tuple[TableRef, ...]:
        return (self.stage,)

    @property
    def stage_columns(self) -> tuple[str, ...]:
        """The staging table's columns, in the order the writers fill them."""
        extra = (OP_COLUMN,) if self.op_values else ()
        return (*self.columns, *extra, *((ORDER_COLUMN,) if self.ordered else ()))

    @property
    def rank_column(self) -> str:
        """The staged column the changes of a key are ranked by: the target's own order
        column where it stores one (its type and collation, which compare the orders across
        writes too), else the order as the DataFrame gave it."""
        return self.order_column or ORDER_COLUMN

    @property
    def delete_values(self) -> tuple[str, ...]:
        return tuple(v for v, is_delete in self.op_values if is_delete)

    def op_sql(self, dialect: Dialect, alias: str = "") -> str:
        """The staged op column as the op values compare with it."""
        column = f"{alias}{dialect.quote(OP_COLUMN)}"
        return f"LOWER({column})" if self.op_fold else column


@dataclass(frozen=True)
class ApplyPlans:
    """A transaction's staged writes into one database (`xasink.transaction`), in the order
    of its `tx.write` calls: one job, one journal row, and one local transaction that
    applies every one of them, so that readers see all its tables change at once. The
    apply runs parents before children (`apply_all`)."""

    writes: tuple[ApplyPlan, ...]

    @classmethod
    def of(cls, plan: ApplyPlan | ApplyPlans) -> ApplyPlans:
        return plan if isinstance(plan, ApplyPlans) else cls((plan,))

    @classmethod
    def together(cls, plans: Sequence[ApplyPlan | None]) -> ApplyPlan | ApplyPlans | None:
        """What one transaction applies: no plan, one write's, or several writes'."""
        staged = tuple(p for p in plans if p is not None)
        if len(staged) <= 1:
            return staged[0] if staged else None
        return cls(staged)

    def adding(self, plan: ApplyPlan) -> ApplyPlans:
        return ApplyPlans((*self.writes, plan))

    @property
    def targets(self) -> tuple[TableRef, ...]:
        return tuple(p.target for p in self.writes)

    @property
    def stages(self) -> tuple[TableRef, ...]:
        return tuple(p.stage for p in self.writes)

    def to_json(self) -> str:
        """One write keeps the single plan's text, which every xasink release reads;
        several start with `xasink.protocol.journal_tables.SEVERAL_WRITES`. A plan that
        needs what older releases do not know (`ApplyPlan.requires`: a replace_where
        overwrite applied as a whole-table one would delete every row) also lists it under
        "requires": a release that reads only a plan or exactly {"writes": [...]} refuses
        it as a plan it did not write, and this one refuses a requirement it does not know."""
        requires = sorted({r for p in self.writes for r in p.requires})
        if len(self.writes) == 1 and not requires:
            return self.writes[0].to_json()
        writes = json.dumps({"writes": [p.raw() for p in self.writes]}, sort_keys=True)
        if not requires:
            return writes
        # "writes" first all the same: the text still starts with SEVERAL_WRITES.
        return f"{writes[:-1]}, {json.dumps('requires')}: {json.dumps(requires)}}}"

    @classmethod
    def from_json(cls, text: str) -> ApplyPlans:
        try:
            raw = json.loads(text)
            if isinstance(raw, dict) and set(raw) in ({"writes"}, {"writes", "requires"}):
                unknown = sorted(set(raw.get("requires", ())) - set(REQUIREMENTS))
                if unknown:
                    raise JournalError(
                        f"A job row's apply plan requires {', '.join(map(repr, unknown))}, "
                        "which this xasink release does not know: finish the job with the "
                        "release that wrote it (`xasink recover`), never with this one."
                    )
                return cls(tuple(ApplyPlan._from_raw(w) for w in raw["writes"]))
        except (KeyError, TypeError, ValueError):
            pass
        return cls((ApplyPlan.from_json(text),))


#: What a stored plan may require of the release that applies it (`ApplyPlans.to_json`).
REQUIREMENTS = ("actions", "replace_where")


def stage_name(job_id: str, schema: str | None, index: int = 0) -> TableRef:
    """One staging table per write of a job, next to the journal (a transaction's later
    writes number theirs)."""
    suffix = f"_{index}" if index else ""
    return TableRef(f"xasink_stage_{job_id}{suffix}", schema)


def create_stage_sql(
    dialect: Dialect, plan: ApplyPlan, types: Sequence[str], temporary: bool = False
) -> str:
    """Every column nullable and no key: checks run in the branch, constraints at apply.
    `temporary`: the session's own table, for a job committed in one local transaction."""
    columns = ", ".join(
        f"{dialect.quote(name)} {sql_type}"
        for name, sql_type in zip(plan.stage_columns, types, strict=True)
    )
    kind = "TEMPORARY TABLE" if temporary else "TABLE"
    return f"CREATE {kind} {dialect.qualified(plan.stage)} ({columns})"


def temporary_stage(plan: ApplyPlan, dialect: Dialect) -> ApplyPlan:
    """The plan with its staging table in the session's temporary schema: a single-branch
    job stages and applies in one local transaction, so nothing outlives its session."""
    schema = dialect.temporary_schema or plan.stage.schema
    return replace(plan, stage=TableRef(plan.stage.name, schema))


#: A DROP waits behind any branch still holding the table; never wait forever.
DROP_LOCK_WAIT_SECONDS = 10


def drop_stage(
    conn: JdbcConnection, dialect: Dialect, stage: TableRef, *, restore_seconds: float | None = None
) -> None:
    """DROP the staging table, waiting at most DROP_LOCK_WAIT_SECONDS behind a branch that
    still holds it; then the session's lock bound is `restore_seconds` (or the default)."""
    bound, unbound = dialect.lock_wait_sql(DROP_LOCK_WAIT_SECONDS)
    if restore_seconds is not None:
        unbound, _ = dialect.lock_wait_sql(max(1, int(restore_seconds)))
    if bound:
        execute(conn, bound)
    try:
        execute(conn, f"DROP TABLE IF EXISTS {dialect.qualified(stage)}")
    finally:
        if unbound:
            execute(conn, unbound)


# -- inside each branch: the rows must be appliable ----------------------------------------
def branch_problem(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan) -> str | None:
    """Why this branch's staged rows cannot be applied, or None.

    Runs inside the branch before PREPARE and sees only this branch's rows. Key routing
    puts every row of a key in one branch, as Spark compares keys (binary); keys that only
    the column's collation makes equal ('Bob' and 'bob' under a case-insensitive one) are
    caught by `check_stage` over the whole staging table, in the apply transaction.
    A replace_where overwrite's rows must all lie in its slice, as the server evaluates
    its condition (`outside_slice`)."""
    outside = outside_slice(conn, dialect, plan)
    if outside:
        return outside
    if not plan.key:
        return None
    q = dialect.quote
    stage = dialect.qualified(plan.stage)
    keys = ", ".join(q(k) for k in plan.key)
    null_key = " OR ".join(f"{q(k)} IS NULL" for k in plan.key)
    if query(conn, f"SELECT 1 FROM {stage} WHERE {null_key}"):
        return f"a key column ({', '.join(plan.key)}) is NULL in some rows"
    if plan.ordered:
        nulls = query(conn, f"SELECT {keys} FROM {stage} WHERE {q(ORDER_COLUMN)} IS NULL")
        if nulls:
            return f"the order column is NULL for key(s) {_show(plan.key, nulls)}"
    problem = _duplicates(conn, dialect, plan)
    if problem:
        return problem
    if plan.op_values:
        known = [v for v, _ in plan.op_values]
        marks = ", ".join("?" for _ in known)
        op = plan.op_sql(dialect)
        unknown = query(
            conn,
            f"SELECT DISTINCT {q(OP_COLUMN)} FROM {stage} "
            f"WHERE {q(OP_COLUMN)} IS NULL OR {op} NOT IN ({marks})",
            known,
        )
        if unknown:
            shown = ", ".join(repr(row[0]) for row in unknown[:SHOWN])
            return f"unknown op value(s) {shown}; op_values accepts {', '.join(map(repr, known))}"
    return None


def outside_slice(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan) -> str | None:
    """Why rows of the staging table lie outside the overwrite's `replace_where` (its
    condition false or NULL for them: the overwrite would not replace what they replace, as
    Delta refuses them too), naming a few; None when every row is in the slice."""
    if plan.replace_where is None:
        return None
    shown = plan.key or plan.columns[:3]
    columns = ", ".join(dialect.quote(c) for c in shown)
    rows = query(
        conn,
        f"SELECT {columns} FROM {dialect.qualified(plan.stage)} "
        f"WHERE NOT COALESCE(({plan.replace_where}), FALSE) {dialect.limit_sql(SHOWN + 1)}",
    )
    if not rows:
        return None
    more = " and more" if len(rows) > SHOWN else ""
    return (
        f"rows outside replace_where ({plan.replace_where}), which it would not replace: "
        f"{_show(shown, rows[:SHOWN])}{more}. Filter the DataFrame to the condition, or "
        "widen it"
    )


def _duplicates(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan) -> str | None:
    """Keys (with `order`: key and order value) that occur twice in the staging table, as
    the table's own collation compares them."""
    q = dialect.quote
    keys = ", ".join(q(k) for k in plan.key)
    group = keys + (f", {q(plan.rank_column)}" if plan.ordered else "")
    duplicates = query(
        conn,
        f"SELECT {keys} FROM {dialect.qualified(plan.stage)} GROUP BY {group} "
        f"HAVING COUNT(*) > 1 ORDER BY {keys}",
    )
    if not duplicates:
        return None
    if plan.ordered:
        return (
            f"rows share a key and an order value, so the last change is ambiguous: "
            f"{_show(plan.key, duplicates)}"
        )
    return (
        f"duplicate key(s) in the input: {_show(plan.key, duplicates)}. Pass order='<column>' "
        "to keep the last row per key, or deduplicate the DataFrame"
    )


def check_stage(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan) -> None:
    """In the apply transaction, under its apply lock: the target still has the column
    types the staging table was built for (and keeps them until commit), every row lies in
    the slice as the DELETE sees it (a pre_sql, another write, the clock or a late recover
    may have changed it since the branches checked), and the keys are unambiguous."""
    check_types(conn, dialect, plan.target, plan.columns, plan.types)
    problem = outside_slice(conn, dialect, plan) or (plan.key and _duplicates(conn, dialect, plan))
    if problem:
        raise StagedRowsError(problem)


class StagedRowsError(InputDataError):
    """The staged rows of a job, taken together, cannot be applied."""


def _show(key: Sequence[str], rows: Sequence[tuple[Any, ...]]) -> str:
    shown = [", ".join(f"{k}={v!r}" for k, v in zip(key, row, strict=False)) for row in rows]
    more = f" and {len(rows) - SHOWN} more" if len(rows) > SHOWN else ""
    return "; ".join(f"({s})" for s in shown[:SHOWN]) + more


#: Vendor codes of refused rows that MySQL reports under a generic SQLSTATE (HY000):
#: CHECK (3819; MariaDB 4025), NOT NULL (1048), duplicate key (1062), foreign key (1452),
#: bad value (1366).
_REFUSED_ROW_CODES = (3819, 4025, 1048, 1062, 1452, 1366)
#: SQLSTATEs of refused rows outside classes 22/23: cardinality (21000: ON CONFLICT would
#: change a row twice), a trigger's RAISE EXCEPTION (P0001) or SIGNAL (45000).
_REFUSED_ROW_STATES = ("21000", "P0001", "45000")


def is_data_error(exc: BaseException) -> bool:
    """The rows themselves were refused: retrying the same apply cannot help."""
    if isinstance(exc, (InputDataError, ChangedTypesError, RowsRefusedError)):
        return True
    state = sql_state(exc) or ""
    return (
        state[:2] in ("22", "23")
        or state in _REFUSED_ROW_STATES
        or sql_error_code(exc) in _REFUSED_ROW_CODES
    )


def refused(target: str, job_id: str, reason: str, staged: bool = True) -> InputDataError:
    """`target`: the job's table, or tables (`staged` False: its rows went straight in)."""
    return InputDataError(
        f"{target} refused the rows of job {job_id} ({reason}). Nothing was changed in {target}: "
        f"the job is aborted{' and its staging table dropped' if staged else ''}. Fix the data "
        "or the table's constraints, then run the write again."
    )
