"""The tables of a job that changes several (a transaction's), listed one row each in
`xasink_job_tables`, where an index reaches them.

A job row names one table. A transaction's other tables were once found only in its stored
plan's text, so every write that asked "is a job open on my table?" had to read the plan of
every row. Listed here, in the transaction that records the plan, they are found by key
(the open jobs, through their state's index, then their listed tables), and by table
(`xasink jobs --table`), however long the history.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..runtime.jdbc import JdbcConnection, execute_many, query
from ..spec import TableRef
from .journal_tables import SEVERAL_WRITES, JournalTables


def record(layout: JournalTables, conn: JdbcConnection, job_id: str, tables: Iterable[str]) -> None:
    """List `tables` for a job of several (those not listed yet); one table alone is the
    job row's own and is not listed. Runs in the caller's transaction, the one that
    records the job's plan."""
    names = set(tables)
    if len(names) < 2 or not layout.layered:  # an earlier layout: its plan says them
        return
    known = set(listed(layout, conn, [job_id]).get(job_id, []))
    execute_many(
        conn,
        f"INSERT INTO {layout.job_tables} (job_id, target_table, created_at) "
        f"VALUES (?, ?, {layout.dialect.now_sql})",
        [(job_id, table) for table in sorted(names - known)],
    )


def listed(layout: JournalTables, conn: JdbcConnection, jobs: list[str]) -> dict[str, list[str]]:
    """The tables listed for each of `jobs` (by key), in name order."""
    found: dict[str, list[str]] = {}
    if not jobs or not layout.layered:
        return found
    rows = query(
        conn,
        f"SELECT job_id, target_table FROM {layout.job_tables} WHERE job_id IN "
        f"({', '.join('?' for _ in jobs)}) ORDER BY job_id, target_table",
        jobs,
    )
    for job_id, table in rows:
        found.setdefault(str(job_id), []).append(str(table))
    return found


def record_plans(layout: JournalTables, conn: JdbcConnection) -> None:
    """List the tables of each transaction an earlier layout recorded only in its plan
    (running, deciding, or its staging tables still to drop): the upgrade's one read of
    every plan."""
    rows: list[tuple[Any, ...]] = query(
        conn,
        f"SELECT job_id, apply_plan FROM {layout.jobs} WHERE apply_plan LIKE ?",
        (f"{SEVERAL_WRITES}%",),
    )
    for job_id, plan in rows:
        record(layout, conn, str(job_id), tables_in_plan(str(plan)))


def joined_modes(modes: Iterable[str]) -> str:
    """A job's write modes as its row keeps them (`write_mode`): each once, in the order
    its writes came ("upsert,append")."""
    return ",".join(dict.fromkeys(modes))


def modes_in_plan(text: str) -> str:
    """The modes a stored apply plan's writes have (`joined_modes`); "" when the text is
    not such a plan."""
    try:
        raw = json.loads(text)
        writes = raw["writes"] if text.startswith(SEVERAL_WRITES) else [raw]
        return joined_modes(str(w["mode"]) for w in writes)
    except (ValueError, KeyError, TypeError):
        return ""


def tables_in_plan(text: str) -> list[str]:
    """The tables a stored apply plan names (a transaction's several writes, or one), as
    `TableRef` prints them; none when the text is not such a plan."""
    try:
        raw = json.loads(text)
        writes = raw["writes"] if text.startswith(SEVERAL_WRITES) else [raw]
        return [str(TableRef(**w["target"])) for w in writes]
    except (ValueError, KeyError, TypeError):
        return []


__all__ = [
    "SEVERAL_WRITES",
    "joined_modes",
    "listed",
    "modes_in_plan",
    "record",
    "record_plans",
    "tables_in_plan",
]
