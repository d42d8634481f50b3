"""The statements that apply a job's staging tables to their targets, in the one local
transaction after phase 2 that also marks the job `committed`, and `STAGED_APPLY`, through
which the journal runs them (`xasink.tables.staging` says why a job stages)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from ..dialects import Dialect
from ..runtime.jdbc import JdbcConnection, Param, execute, query
from ..spec import TableRef
from . import tombstones
from .actions import run_actions
from .modes import APPEND, MERGE, OVERWRITE, UPSERT
from .self_reference import SelfReference, self_references, tree_order, unlinked
from .staging import (
    ApplyPlan,
    ApplyPlans,
    check_stage,
    drop_stage,
    is_data_error,
    stage_name,
)

_ROW_NUMBER = "xasink_rn"
#: What a merge's DELETE calls the stored row it compares orders with.
STORED = "xasink_stored"

Statement = tuple[str, tuple[Param, ...]]


def apply_statements(
    dialect: Dialect, plan: ApplyPlan, refs: Sequence[SelfReference] = ()
) -> list[Statement]:
    """The statements, in order, that make the target reflect the staged rows."""
    steps = _apply_steps(dialect, plan, refs)
    return steps.unlinks + steps.deletes + steps.tombs + steps.inserts


class Steps(NamedTuple):
    """One write's apply: UPDATEs that unlink the rows its deletes delete from each other
    (`self_reference`; their counts are not changes), its DELETEs, its INSERTs, and
    between them the statements that keep its deleted keys' order (`tombstones`)."""

    unlinks: list[Statement]
    deletes: list[Statement]
    tombs: list[Statement]
    inserts: list[Statement]


def _apply_steps(dialect: Dialect, plan: ApplyPlan, refs: Sequence[SelfReference] = ()) -> Steps:
    """The apply's DELETEs, then its INSERTs: a transaction runs every write's deletes
    children first, then every write's inserts parents first (`apply_all`). Where the
    target stores the order column, a change (an update, a delete) applies only over a
    stored row that is older (or has no order), in the same one statement. `refs`, the
    target's self-references a server checks row by row, order the inserts and unlink
    the deleted rows first. Where the plan keeps tombstones (`tombstones`), a change no
    newer than its key's delete applies neither."""
    q = dialect.quote
    target, stage = dialect.qualified(plan.target), dialect.qualified(plan.stage)
    columns = ", ".join(q(c) for c in plan.columns)
    insert = f"INSERT INTO {target} ({columns}) SELECT {columns} FROM "
    tree, order = tree_order(dialect, refs, _latest(dialect, plan, ""))
    if plan.mode in (APPEND, OVERWRITE):
        rows = (insert + f"{stage} s{tree}{order}" if tree else insert + stage, ())
        return _replaced(dialect, plan, refs, rows)
    source = _latest(dialect, plan)
    others = [c for c in plan.columns if c not in plan.key]
    upsert = dialect.upsert_clause(plan.key, others, plan.order_column, target)
    if plan.order_column is not None:  # the stored row is named in the upsert's condition
        insert = f"INSERT INTO {dialect.upsert_target(target)} ({columns}) SELECT {columns} FROM "
    kept = plan.tombs is not None
    tombs = tombstones.tomb_steps(dialect, plan, source) if kept else []
    unburied = tombstones.unburied(dialect, plan) if kept else ""
    if plan.mode == UPSERT:
        where = f" WHERE {unburied}" if kept else ""
        return Steps([], [], tombs, [(f"{insert}{source}{tree}{where}{order} {upsert}", ())])
    unburied = f" AND {unburied}" if kept else ""
    deletes = plan.delete_values
    marks = ", ".join("?" for _ in deletes)
    keys = ", ".join(q(k) for k in plan.key)
    op = plan.op_sql(dialect, "s.")
    inserts: list[Statement] = [
        (f"{insert}{source}{tree} WHERE {op} NOT IN ({marks}){unburied}{order} {upsert}", deletes)
    ]
    if plan.order_column is None:
        chosen = f"({keys}) IN (SELECT {keys} FROM {source} WHERE {op} IN ({marks}))"
        unlinks: list[Statement] = [
            (f"UPDATE {target} SET {s} WHERE {w} AND {chosen}", deletes)
            for s, w in unlinked(dialect, refs)
        ]
        return Steps(unlinks, [(f"DELETE FROM {target} WHERE {chosen}", deletes)], [], inserts)
    stored = q(STORED)
    same = " AND ".join(f"s.{q(k)} = {stored}.{q(k)}" for k in plan.key)
    where = f"{op} IN ({marks}) AND {_older(dialect, f'{stored}.', plan.order_column)}"
    unlinks = [
        (dialect.update_joined(target, stored, source, same, f"{w} AND {where}", s), deletes)
        for s, w in unlinked(dialect, refs, f"{stored}.")
    ]
    deleted: list[Statement] = [
        (dialect.delete_joined(target, stored, source, same, where), deletes)
    ]
    return Steps(unlinks, deleted, tombs, inserts)


def _replaced(
    dialect: Dialect, plan: ApplyPlan, refs: Sequence[SelfReference], rows: Statement
) -> Steps:
    """An append's steps (its rows), or an overwrite's: it unlinks and deletes the rows of
    the table, or with `replace_where` the rows of its slice only, then inserts its rows."""
    if plan.mode == APPEND:
        return Steps([], [], [], [rows])
    target = dialect.qualified(plan.target)
    where = f"({plan.replace_where})" if plan.replace_where is not None else ""
    unlinks: list[Statement] = [
        (f"UPDATE {target} SET {s} WHERE {w}{' AND ' + where if where else ''}", ())
        for s, w in unlinked(dialect, refs)
    ]
    delete = f"DELETE FROM {target}" + (f" WHERE {where}" if where else "")
    return Steps(unlinks, [(delete, ())], [], [rows])


def _older(dialect: Dialect, stored: str, order: str) -> str:
    """The stored row (columns prefixed `stored`) is older than the staged one `s`, or
    keeps no order: the change applies."""
    column = dialect.quote(order)
    return f"({stored}{column} IS NULL OR {stored}{column} < s.{column})"


def stale_statement(dialect: Dialect, plan: ApplyPlan) -> Statement | None:
    """The count of staged changes that will not apply, the stored row being as new or
    newer (a late change, a replay): run in the apply's transaction before it."""
    if plan.order_column is None or plan.mode not in (UPSERT, MERGE):
        return None
    if plan.tombs is not None:
        older = _older(dialect, "o.", plan.order_column)
        return tombstones.stale_statement(dialect, plan, _latest(dialect, plan), older)
    q = dialect.quote
    same = " AND ".join(f"s.{q(k)} = o.{q(k)}" for k in plan.key)
    return (
        f"SELECT COUNT(*) FROM {_latest(dialect, plan)} JOIN {dialect.qualified(plan.target)} "
        f"o ON {same} WHERE NOT {_older(dialect, 'o.', plan.order_column)}",
        (),
    )


def _latest(dialect: Dialect, plan: ApplyPlan, alias: str = " s") -> str:
    """The staged rows, one per key: the one with the highest order value, as the
    comparison across writes ranks them (`ApplyPlan.rank_column`)."""
    stage = dialect.qualified(plan.stage)
    if not plan.ordered:
        return f"{stage}{alias}"
    q = dialect.quote
    keys = ", ".join(q(k) for k in plan.key)
    ranked = (
        f"SELECT t.*, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {q(plan.rank_column)} DESC) "
        f"AS {_ROW_NUMBER} FROM {stage} t"
    )
    return f"(SELECT * FROM ({ranked}) r WHERE {_ROW_NUMBER} = 1){alias}"


def apply_all(conn: JdbcConnection, dialect: Dialect, plans: ApplyPlans) -> tuple[int, int]:
    """Apply every write of `plans` in the caller's one transaction: (rows changed, staged
    changes skipped as no newer than their stored rows). Parents come before their
    children (`parents_first`): every write's deletes run children first, then every
    write's inserts parents first, so that a foreign key between two tables of one
    transaction holds at each statement, on every server. Each write's tombstones are
    kept after every write's deletes, before the inserts (`tombstones.tomb_steps`).
    The writes' pre_sql ran before, in `StagedApplier.check`."""
    writes = [
        p if tombstones.present(conn, dialect, p) else replace(p, tombs=None) for p in plans.writes
    ]
    counts = [s for plan in writes if (s := stale_statement(dialect, plan))]
    stale = sum(int(query(conn, sql, params)[0][0]) for sql, params in counts)
    ordered = parents_first(conn, dialect, writes) if len(writes) > 1 else writes
    steps = [_apply_steps(dialect, p, self_references(conn, dialect, p)) for p in ordered]
    for step in reversed(steps):  # children first
        for sql, params in step.unlinks:
            execute(conn, sql, params)
    changed = sum(execute(conn, *s) for step in reversed(steps) for s in step.deletes)
    for sql, params in (s for step in steps for s in step.tombs):
        execute(conn, sql, params)
    changed += sum(execute(conn, *s) for step in steps for s in step.inserts)
    for plan in plans.writes:
        run_actions(conn, dialect, plan, "post_sql")
    return changed, stale


def parents_first(
    conn: JdbcConnection, dialect: Dialect, plans: Sequence[ApplyPlan]
) -> list[ApplyPlan]:
    """`plans` with every table after the tables it references (the catalog's foreign keys),
    else in the order given; the members of a cycle keep the order given."""
    links = _references(conn, dialect, [p.target for p in plans])
    order, _ = _sorted(links.parents if links else {i: set() for i in range(len(plans))})
    return [plans[i] for i in order]


def load_order(
    conn: JdbcConnection, dialect: Dialect, tables: Sequence[TableRef]
) -> list[int] | None:
    """The order (indexes of `tables`) in which rows can load straight into these tables,
    each after the tables it references, so that every foreign key holds at each statement.
    None where only a staged apply can order the rows: the dialect cannot tell its foreign
    keys, a table references itself (its rows come in the frame's order, which a key
    checked row by row, as InnoDB's are, refuses), or the tables reference each other in
    a cycle."""
    links = _references(conn, dialect, tables)
    if links is None or links.itself:
        return None
    order, cycle = _sorted(links.parents)
    return None if cycle else order


class _Links(NamedTuple):
    #: For each table (by index), the others of the list it references.
    parents: dict[int, set[int]]
    #: Some table of the list references itself.
    itself: bool


def _references(
    conn: JdbcConnection, dialect: Dialect, tables: Sequence[TableRef]
) -> _Links | None:
    """The foreign keys among `tables`, from the catalog; None: the dialect cannot tell."""
    found = dialect.foreign_keys_sql(tables)
    if found is None:
        return None
    index = {(t.schema, t.name): i for i, t in enumerate(tables)}
    names = [t.name for t in tables]
    # A target written without a schema (the session's own): its name alone, when unique.
    # Never for a resolved one: the catalog's rows name every schema's same-named tables.
    index |= {
        (None, t.name): i
        for i, t in enumerate(tables)
        if t.schema is None and names.count(t.name) == 1
    }

    def find(schema: object, name: object) -> int | None:
        found = index.get((str(schema), str(name)))
        return found if found is not None else index.get((None, str(name)))

    links = _Links({i: set() for i in range(len(tables))}, False)
    for child_schema, child, parent_schema, parent in query(conn, *found):
        c, p = find(child_schema, child), find(parent_schema, parent)
        if c is not None and c == p:
            links = links._replace(itself=True)
        elif c is not None and p is not None:
            links.parents[c].add(p)
    return links


def _sorted(parents: dict[int, set[int]]) -> tuple[list[int], bool]:
    """Every index after the ones it references, and whether a cycle had to be broken (its
    members then keep their order)."""
    done: list[int] = []
    cycle = False
    while len(done) < len(parents):
        ready = [i for i in parents if i not in done and parents[i] <= set(done)]
        cycle = cycle or not ready
        done.append(ready[0] if ready else min(i for i in parents if i not in done))
    return done, cycle


class StagedApplier:
    """xasink's staged apply, as the journal runs it when it finishes a staged job or drops
    its staging tables (it has the shape of `xasink.protocol.applying.StagedApply`). Whoever
    opens the journal to finish or recover jobs passes `STAGED_APPLY`."""

    def parse(self, text: str) -> ApplyPlans:
        return ApplyPlans.from_json(text)

    def stage_name(self, job_id: str, schema: str | None, index: int = 0) -> TableRef:
        return stage_name(job_id, schema, index)

    def check(self, conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan | ApplyPlans) -> None:
        """Every write's pre_sql first, in the order of the writes, then the checks of the
        whole staging tables: a pre_sql may change the target's types or what a
        replace_where selects, and the checks must see what the apply will."""
        writes = ApplyPlans.of(plan).writes
        for write in writes:
            run_actions(conn, dialect, write, "pre_sql")
        for write in writes:
            tombstones.check_tombs(write)
            check_stage(conn, dialect, write)

    def apply(
        self, conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan | ApplyPlans
    ) -> tuple[int, int]:
        return apply_all(conn, dialect, ApplyPlans.of(plan))

    def drop(
        self,
        conn: JdbcConnection,
        dialect: Dialect,
        plan: ApplyPlan | ApplyPlans,
        *,
        restore_seconds: float,
    ) -> None:
        for stage in plan.stages:
            drop_stage(conn, dialect, stage, restore_seconds=restore_seconds)

    def is_data_error(self, exc: BaseException) -> bool:
        return is_data_error(exc)

    def tombstones(
        self, conn: JdbcConnection, dialect: Dialect, schema: str | None
    ) -> list[tuple[TableRef, TableRef]]:
        return tombstones.listed(conn, dialect, schema)

    def count_tombstones(
        self,
        conn: JdbcConnection,
        dialect: Dialect,
        tombs: TableRef,
        seconds: float,
        at_most: int | None = None,
    ) -> int:
        return tombstones.count_old(conn, dialect, tombs, seconds, at_most)

    def forget_tombstones(
        self, conn: JdbcConnection, dialect: Dialect, tombs: TableRef, seconds: float, rows: int
    ) -> int:
        return tombstones.forget(conn, dialect, tombs, seconds, rows)

    def __reduce__(self) -> str:
        return "STAGED_APPLY"  # one instance, also where a journal is unpickled


STAGED_APPLY = StagedApplier()
