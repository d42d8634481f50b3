"""The order of deleted keys: where a table stores the `order` column (the one case where
the newest change of a key wins across writes), a merge's delete of a key leaves a
tombstone (key, order, when), also when the table did not hold the key, since the delete is
still that key's newest known change. A later change of the key whose order is no higher
is stale, as a change no newer than a stored row is: it is not applied and counts in
`stale`. A newer change inserts the row again (a merge's also removes the tombstone; an
upsert only reads them, so a login that may only read them can upsert, and an upsert never
makes the table); a newer delete raises its order, an older one never lowers it.

Each such table has one table of tombstones, beside it in its own schema, named from its
identity (`tomb_table`) and typed like its key and order columns (a key an index holds
only by a prefix, MySQL's TEXT, cannot key one: such a merge is refused), so the apply
compares them exactly, in its own statements and transaction (`applier`). One for the
table, not one per journal: two writers of a table with journals of their own (which
share its apply lock, `protocol.applying`) must see each other's deletes. A merge makes it
before any branch opens (`tombstone_tables`: DDL cannot run inside an XA branch, nor
inside the apply's transaction on MySQL), and every journal whose merges write it lists
it, with its target, in its own `xasink_tombstones`, so that the journal's retention
deletes the tombstones older than the retention (`forget`): past it, a change older than
a forgotten delete inserts the row again. Each journal sweeps by its own retention, so a
table written through several keeps its deletes' order for the shortest of theirs.

A stored row speaks for its key: a tombstone only speaks for a key the table does not hold
(a row another writer put back outranks it), so each change is stale when the stored row is
as new or newer, or when there is none and the tombstone is as new or newer.
"""

from __future__ import annotations

import hashlib
import logging
import re

from ..dialects import Dialect
from ..errors import JournalError
from ..runtime.jdbc import JdbcConnection, Param, execute, query
from ..spec import TableRef
from .modes import MERGE, ORDER_COLUMN, UPSERT, ModeOptions
from .retyping import keeps_values
from .staging import ApplyPlan

log = logging.getLogger("xasink")

#: The list of tables of tombstones next to a journal, with their targets.
REGISTRY = "xasink_tombstones"
_PREFIX = "xasink_tomb_"
#: A tombstone's order (typed as the target's order column) and when its delete applied.
ORDER, DELETED_AT = ORDER_COLUMN, "xasink_deleted_at"
#: The readable part of a name: the digest makes it unique, this tells a person whose.
_READABLE = 24

Statement = tuple[str, tuple[Param, ...]]


def keeps_deletes(options: ModeOptions) -> bool:
    """Whether a write keeps (and honours) the order of deleted keys: an upsert or merge with
    `order` into a table that stores the order column."""
    return options.mode in (UPSERT, MERGE) and options.order is not None and options.order_stored


def tomb_table(target: TableRef) -> TableRef:
    """The table keeping the order of `target`'s deleted keys, beside it in its schema: a
    safe part of the target's name, then a digest of its identity (schema and name, exactly
    as the server resolves them). At most 53 characters: both servers allow 63, and its
    index adds 7."""
    readable = re.sub(r"[^a-z0-9]+", "_", target.name.lower())[:_READABLE].strip("_")
    digest = hashlib.sha256(f"{target.schema or ''}\x00{target.name}".encode()).hexdigest()
    name = f"{_PREFIX}{readable}_{digest[:16]}" if readable else f"{_PREFIX}{digest[:16]}"
    return TableRef(name, target.schema)


def check_tombs(plan: ApplyPlan) -> None:
    """Refuse a plan whose tombstones are not its target's own (a journal row xasink did
    not write: recovery may run with more privileges than writers)."""
    if plan.tombs is not None and plan.tombs != tomb_table(plan.target):
        raise JournalError(
            f"A job's apply plan names {plan.tombs} for the deleted keys of {plan.target}, "
            "which is not the table xasink keeps for them: refusing to act on it. Check who "
            "can write the journal's tables."
        )


def _same(dialect: Dialect, plan: ApplyPlan, a: str, b: str) -> str:
    return " AND ".join(f"{a}.{dialect.quote(k)} = {b}.{dialect.quote(k)}" for k in plan.key)


def _tombs(dialect: Dialect, plan: ApplyPlan) -> str:
    assert plan.tombs is not None
    return dialect.qualified(plan.tombs)


def stale_statement(dialect: Dialect, plan: ApplyPlan, latest: str, older: str) -> Statement:
    """The count of the staged changes (`latest`, one per key, named `s`) that will not
    apply: the stored row (`o`) is not `older`, or there is none and the tombstone is as
    new or newer."""
    q = dialect.quote
    first, order = q(plan.key[0]), q(plan.order_column or "")
    return (
        f"SELECT COUNT(*) FROM {latest} LEFT JOIN {dialect.qualified(plan.target)} o ON "
        f"{_same(dialect, plan, 's', 'o')} LEFT JOIN {_tombs(dialect, plan)} t ON "
        f"{_same(dialect, plan, 's', 't')} WHERE NOT {older} OR (o.{first} IS NULL AND "
        f"t.{q(ORDER)} >= s.{order})",
        (),
    )


def _held(dialect: Dialect, plan: ApplyPlan) -> str:
    """The table holds staged change `s`'s key."""
    target = dialect.qualified(plan.target)
    return f"EXISTS (SELECT 1 FROM {target} x WHERE {_same(dialect, plan, 's', 'x')})"


def unburied(dialect: Dialect, plan: ApplyPlan) -> str:
    """What an insert of staged change `s` needs. A merge's, once `tomb_steps` ran: no
    tombstone of its key is left (those left are as new or newer, of keys the table does
    not hold). An upsert's, which changes no tombstone (it deletes nothing, and needs only
    to read them): the table holds its key, or no tombstone of it is as new or newer."""
    same, tombs = _same(dialect, plan, "s", "t"), _tombs(dialect, plan)
    if plan.mode == MERGE:
        return f"NOT EXISTS (SELECT 1 FROM {tombs} t WHERE {same})"
    newer = f"t.{dialect.quote(ORDER)} >= s.{dialect.quote(plan.order_column or '')}"
    return (
        f"({_held(dialect, plan)} OR NOT EXISTS (SELECT 1 FROM {tombs} t WHERE {same} AND {newer}))"
    )


def tomb_steps(dialect: Dialect, plan: ApplyPlan, source: str) -> list[Statement]:
    """A merge's statements on the tombstones, after its DELETEs and before its INSERTs
    (`source`: the staged changes, one per key, named `s`); an upsert has none. Each delete
    whose key the table does not hold now (it held none, or an older row the DELETE
    removed) leaves its order, raising a lower one, never lowering a higher one. The
    tombstone of a key an insert or update changes goes when that change is newer, or when
    the table holds the key."""
    if plan.mode != MERGE:
        return []
    q, tombs, held = dialect.quote, _tombs(dialect, plan), _held(dialect, plan)
    keys = ", ".join(q(k) for k in plan.key)
    order = f"s.{q(plan.order_column or '')}"
    newer = f"(t.{q(ORDER)} < {order} OR {held})"
    deletes = plan.delete_values
    marks = ", ".join("?" for _ in deletes)
    op = plan.op_sql(dialect, "s.")
    selected = ", ".join(f"s.{q(k)}" for k in plan.key)
    upsert = dialect.upsert_clause(plan.key, [DELETED_AT, ORDER], ORDER, tombs)
    leave = (
        f"INSERT INTO {dialect.upsert_target(tombs)} ({keys}, {q(ORDER)}, {q(DELETED_AT)}) "
        f"SELECT {selected}, {order}, {dialect.now_sql} FROM {source} "
        f"WHERE {op} IN ({marks}) AND NOT {held} {upsert}"
    )
    where = f"{op} NOT IN ({marks}) AND {newer}"
    forget = dialect.delete_joined(tombs, "t", source, _same(dialect, plan, "s", "t"), where)
    return [(leave, deletes), (forget, deletes)]


def present(conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan) -> bool:
    """Whether the plan's tombstones can be kept (a merge) or honoured (an upsert, which
    only reads them), read in the apply's transaction; a merge's under a lock that keeps
    the table's definition until it ends. A plan without them keeps none, and an upsert
    into a table none of whose keys was ever deleted by a merge has none to honour. One
    whose table is gone (dropped by hand since the write began), or no longer holds the
    key and order the job staged (changed by hand behind preflight's remembered check),
    applies without it, saying so, rather than fail after its decision on a value the
    table cannot hold (which would blame the data)."""
    if plan.tombs is None:
        return False
    if dialect.table_identity(conn, plan.tombs) is None:
        if plan.mode != MERGE:
            return False
        why, fix = "is gone", "the next write makes it again"
    else:
        columns = (
            dialect.locked_column_types(conn, plan.tombs)
            if plan.mode == MERGE
            else described(conn, dialect, plan.tombs)
        )
        if columns is None or not plan.types or holds(dialect, _staged(plan), columns):
            return True
        why = "cannot hold the key and order this job staged"
        fix = "drop it, and a write after preflight's next check makes it afresh"
    log.warning(
        "xasink: %s, which keeps the order of the deleted keys of %s, %s: this job's changes "
        "apply without it, and its deletes keep no order (%s)",
        plan.tombs,
        plan.target,
        why,
        fix,
    )
    return False


def described(conn: JdbcConnection, dialect: Dialect, table: TableRef) -> dict[str, str]:
    """The table's columns (as `column_key` names them) and their types; {}: no table."""
    sql, params = dialect.describe_columns_sql(table)
    rows = query(conn, sql, params) if sql else []
    return {dialect.column_key(str(r[0])): str(r[1]).lower() for r in rows}


def _staged(plan: ApplyPlan) -> dict[str, str]:
    """The key's and the order's types the plan staged, as the tombstones name them."""
    typed = dict(zip(plan.columns, plan.types, strict=True))
    return {**{k: typed[k] for k in plan.key}, ORDER: typed[plan.order_column or ""]}


def holds(dialect: Dialect, wanted: dict[str, str], columns: dict[str, str]) -> bool:
    """Whether a table of tombstones of `columns` (name: type) holds every value of the
    `wanted` key and order types (name: type) unchanged, and has no other column but when
    its delete applied."""
    found = {dialect.column_key(n): t for n, t in columns.items()}
    need = {dialect.column_key(n): t for n, t in wanted.items()}
    return set(found) == {*need, dialect.column_key(DELETED_AT)} and all(
        keeps_values(dialect.name, t, found[n]) for n, t in need.items()
    )


# -- the journal's retention ---------------------------------------------------------------
def listed(
    conn: JdbcConnection, dialect: Dialect, schema: str | None
) -> list[tuple[TableRef, TableRef]]:
    """(tombstones, target) for every table of tombstones that the journal in `schema`
    lists, exists, and is the one xasink makes for its target (any other row is skipped)."""
    registry = TableRef(REGISTRY, schema)
    if dialect.table_identity(conn, registry) is None:
        return []
    rows = query(
        conn,
        f"SELECT tomb_table, target_schema, target_name FROM {dialect.qualified(registry)} "
        "ORDER BY tomb_table",
    )
    found = []
    for name, target_schema, target_name in rows:
        target = TableRef(str(target_name), None if target_schema is None else str(target_schema))
        tombs = tomb_table(target)
        if tombs.name != str(name):
            log.warning("xasink: %s lists %s, which xasink did not make: skipped", registry, name)
        elif dialect.table_identity(conn, tombs) is not None:
            found.append((tombs, target))
    return found


def _old(dialect: Dialect, seconds: float) -> str:
    return f"{dialect.quote(DELETED_AT)} < {dialect.ago_sql(seconds)}"


def count_old(
    conn: JdbcConnection,
    dialect: Dialect,
    tombs: TableRef,
    seconds: float,
    at_most: int | None = None,
) -> int:
    """How many of the tombstones are older than `seconds` (up to `at_most`, when given:
    the index reads that many)."""
    rows = f"SELECT 1 FROM {dialect.qualified(tombs)} WHERE {_old(dialect, seconds)}"
    if at_most is not None:
        rows += f" {dialect.limit_sql(at_most)}"
    return int(query(conn, f"SELECT COUNT(*) FROM ({rows}) x")[0][0])


def forget(
    conn: JdbcConnection, dialect: Dialect, tombs: TableRef, seconds: float, rows: int
) -> int:
    """Delete at most `rows` tombstones older than `seconds`; how many went."""
    return execute(
        conn, dialect.delete_some_sql(dialect.qualified(tombs), _old(dialect, seconds), rows)
    )
