"""A table whose foreign key references the table itself (an org chart's `boss` → `id`, a
category tree), applied where the server checks foreign keys row by row (InnoDB). One
statement then holds only if every parent goes in before its children, and every child
is gone, or unlinked, before its parent. PostgreSQL checks at each statement's end: its
dialect reports no self-reference, and nothing here runs there.

Inserts take the staged rows in tree order: a recursive query gives each staged row its
depth among the staged rows (a row whose parent is not staged, or is itself, is a root),
and the INSERT ... SELECT runs ORDER BY that depth, the order InnoDB inserts in. Deletes
first set the self-reference of the rows they delete to NULL, where it takes NULL, so
that their order no longer matters; a row left behind that still references a deleted one
meets the key's own ON DELETE rule, as it would on PostgreSQL. A self-reference that
cannot be unlinked (a NOT NULL column) leaves no order that always holds, so a write that
deletes from such a table is refused before it begins (`refuse_fixed_deletes`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..dialects import Dialect
from ..errors import PreflightError
from ..runtime.jdbc import JdbcConnection, query
from ..spec import TableRef
from .modes import MERGE, OVERWRITE
from .staging import ApplyPlan

#: How deep a tree of staged rows is ordered (MySQL stops a recursion at 1,000 levels); a
#: row deeper than that goes in with the unordered rest, after the ordered ones.
MAX_DEPTH = 500
LEVELS = "xasink_levels"
_DEPTH = "xasink_depth"
_TREE = "xasink_tree"
_NODES = "xasink_nodes"
_LAST = 1_000_000_000


@dataclass(frozen=True)
class SelfReference:
    """One foreign key from the table to itself, its columns in the write's spelling where
    it stages them (the catalog's otherwise)."""

    columns: tuple[str, ...]
    referenced: tuple[str, ...]
    #: Every referencing column takes NULL: a row can be unlinked before it is deleted.
    nullable: bool
    #: The write stages every column of it: its inserts can be put in tree order.
    staged: bool = True


def self_references(
    conn: JdbcConnection, dialect: Dialect, plan: ApplyPlan
) -> tuple[SelfReference, ...]:
    """The target's self-references. One whose columns the write does not stage keeps its
    stored values on insert, but its rows must still be unlinked before a delete."""
    spelling = {c.lower(): c for c in plan.columns}
    return tuple(
        SelfReference(
            tuple(spelling.get(c.lower(), c) for c, _, _ in parts),
            tuple(spelling.get(r.lower(), r) for _, r, _ in parts),
            all(n for _, _, n in parts),
            all(c.lower() in spelling and r.lower() in spelling for c, r, _ in parts),
        )
        for parts in _catalogued(conn, dialect, plan.target)
    )


def _catalogued(
    conn: JdbcConnection, dialect: Dialect, table: TableRef
) -> list[list[tuple[str, str, bool]]]:
    """The table's self-references as the catalog spells them, each as its (column,
    referenced column, the column takes NULL) in key order; none where the server checks a
    key per statement."""
    found = dialect.self_references_sql(table)
    if found is None:
        return []
    keys: dict[str, list[tuple[str, str, bool]]] = {}
    for name, column, referenced, nullable in query(conn, *found):
        keys.setdefault(str(name), []).append(
            (str(column), str(referenced), str(nullable).upper() == "YES")
        )
    return list(keys.values())


def refuse_fixed_deletes(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, mode: str
) -> None:
    """Refuse (PreflightError), before any job exists, a write that may delete rows
    (overwrite, merge) from a table whose self-reference the server checks row by row and
    that cannot be unlinked (a NOT NULL column). One DELETE of a parent and its child then
    holds only if the child goes first, an order the server does not promise, and its
    refusal would come at the apply, after the decision: in a transaction's participant, a
    decided job that no run can finish. Whether a merge's rows hold a delete is only known
    once the rows are staged, inside the branches, so merge is refused whatever its rows."""
    if mode not in (OVERWRITE, MERGE):  # ModeOptions.deletes
        return
    fixed = [c for parts in _catalogued(conn, dialect, table) for c, _, n in parts if not n]
    if not fixed:
        return
    named = ", ".join(fixed)
    write = f"an {mode}" if mode == OVERWRITE else f"a {mode}"
    instead = "; changes that hold no delete can be written with mode='upsert'"
    raise PreflightError(
        f"{table} references itself through {named} (NOT NULL), a key that MySQL and MariaDB "
        f"check row by row: {write} deletes rows in one statement, and the server would "
        "refuse it, once the write was decided, wherever a row goes before one that "
        "references it (a parent before its child). Nothing was written. Make "
        f"{named} nullable (xasink then unlinks the rows it deletes first), or keep this "
        "table in PostgreSQL, which checks the key at each statement's end"
        f"{instead if mode == MERGE else ''}."
    )


def refuse_linked_slice(
    conn: JdbcConnection, dialect: Dialect, table: TableRef, replace_where: str
) -> None:
    """Refuse (PreflightError), before any job exists, a replace_where that names a
    self-reference column the server checks row by row. The apply unlinks the slice's rows
    first (that column set to NULL), and then a condition on it (`boss = 7`, `boss IS NOT
    NULL`) no longer selects them: its DELETE would leave the old slice. The column is
    found as a word of the condition, quoted or not, in any case (a string literal naming
    it refuses too: safe)."""
    columns = {c for parts in _catalogued(conn, dialect, table) for c, _, _ in parts}
    named = sorted(
        c
        for c in columns
        if re.search(rf"(?<![\w$]){re.escape(c)}(?![\w$])", replace_where, re.IGNORECASE)
    )
    if named:
        raise PreflightError(
            f"replace_where {replace_where!r} names {', '.join(named)}, through which "
            f"{table} references itself, a key that MySQL and MariaDB check row by row: the "
            "apply sets it to NULL in the slice's rows before deleting them, after which the "
            "condition would no longer select them. Nothing was written. Select the slice "
            "by other columns (e.g. its key), or keep this table in PostgreSQL."
        )


def tree_order(
    dialect: Dialect, refs: Sequence[SelfReference], rows: str, alias: str = "s"
) -> tuple[str, str]:
    """(a LEFT JOIN that gives each staged row `alias` its depth, the ORDER BY that puts
    parents first), or ("", "") when no self-reference is staged. `rows` (a FROM item
    taking an alias after it) are the rows the apply writes, one per key; the depth
    follows the staged self-references onto the same columns as the first. Nodes and
    depths are distinct, so that no row is reached once per path."""
    staged = [r for r in refs if r.staged]
    if not staged:
        return "", ""
    q = dialect.quote
    key = staged[0].referenced
    same = [r for r in staged if r.referenced == key]
    names = [f"xasink_k{i}" for i in range(len(key))]
    quoted = [q(k) for k in key]
    columns = list(dict.fromkeys([*quoted, *(q(c) for r in same for c in r.columns)]))

    def parent(child: str, parent: str, columns: Sequence[str]) -> str:
        return " OR ".join(
            "("
            + " AND ".join(
                f"{child}.{q(f)} = {parent}.{c}" for f, c in zip(r.columns, columns, strict=True)
            )
            + ")"
            for r in same
        )

    def itself(a: str, a_columns: Sequence[str], b: str, b_columns: Sequence[str]) -> str:
        return " AND ".join(f"{a}.{x} = {b}.{y}" for x, y in zip(a_columns, b_columns, strict=True))

    nodes = f"SELECT DISTINCT {', '.join(f'n.{c}' for c in columns)} FROM {rows} n"
    roots = (
        f"SELECT {', '.join(f'r.{k}' for k in quoted)}, 0 FROM {_NODES} r WHERE NOT EXISTS "
        f"(SELECT 1 FROM {_NODES} p WHERE ({parent('r', 'p', quoted)}) "
        f"AND NOT ({itself('p', quoted, 'r', quoted)}))"
    )
    step = (
        f"SELECT {', '.join(f'c.{k}' for k in quoted)}, t.{_DEPTH} + 1 FROM {_NODES} c JOIN "
        f"{_TREE} t ON {parent('c', 't', names)} WHERE t.{_DEPTH} < {MAX_DEPTH} "
        f"AND NOT ({itself('c', quoted, 't', names)})"
    )
    levels = (
        f"WITH RECURSIVE {_NODES} AS ({nodes}), {_TREE} ({', '.join(names)}, {_DEPTH}) AS "
        f"({roots} UNION {step}) SELECT {', '.join(names)}, MAX({_DEPTH}) AS {_DEPTH} "
        f"FROM {_TREE} GROUP BY {', '.join(names)}"
    )
    on = " AND ".join(f"{alias}.{k} = {LEVELS}.{n}" for k, n in zip(quoted, names, strict=True))
    return (
        f" LEFT JOIN ({levels}) {LEVELS} ON {on}",
        f" ORDER BY COALESCE({LEVELS}.{_DEPTH}, {_LAST})",
    )


def unlinked(
    dialect: Dialect, refs: Sequence[SelfReference], alias: str = ""
) -> list[tuple[str, str]]:
    """(SET assignments, WHERE condition) per nullable self-reference: what sets it to NULL
    in the rows a DELETE will delete (named `alias`), before it deletes them."""
    q = dialect.quote
    return [
        (
            ", ".join(f"{alias}{q(c)} = NULL" for c in r.columns),
            "(" + " OR ".join(f"{alias}{q(c)} IS NOT NULL" for c in r.columns) + ")",
        )
        for r in refs
        if r.nullable
    ]
