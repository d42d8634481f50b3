"""A journal with a long history, made by the server's own row generators in seconds.

A stream of one micro-batch a second leaves 86,400 finished jobs a day. `fill` writes `jobs`
such rows straight into a journal (and one winner row each, as a committed job keeps):
every other job on `table` and `sink` (a stream's own past batches), the rest spread over
100 other tables, every tenth of those a transaction of two tables (listed in
`xasink_job_tables`), all committed, created over the last `days` days, oldest first. The
rows are what xasink itself leaves; nothing of xasink runs to make them. The tests use it
to ask the servers how each statement of a call runs on a long history; the history
benchmark (`benchmarks/history_runs.py`) to time calls on one.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

Kind = Literal["postgres", "mysql"]

#: Rows one INSERT ... SELECT writes: the server's transaction stays small.
CHUNK = 1_000_000


def fill(
    kind: Kind,
    conn: Any,
    schema: str,
    *,
    jobs: int,
    table: str,
    sink: str,
    days: float = 90.0,
    newest_days_ago: float = 0.0,
) -> None:
    """Write `jobs` finished jobs into the journal in `schema` (quoted as it must be), on
    an autocommit psycopg or pymysql connection. `table` and `sink` are as xasink records
    them (the resolved table's name; the sink id). The newest ended `newest_days_ago`."""
    step = days * 86400.0 / max(jobs, 1)
    offset = newest_days_ago * 86400.0
    names = {n: f"{schema}.xasink_{n}" for n in ("jobs", "winners", "job_tables")}
    for start in range(0, jobs, CHUNK):
        count = min(CHUNK, jobs - start)
        statements = _statements(kind, names, start, count, step, offset)
        with contextlib.closing(conn.cursor()) as cur:
            cur.execute(statements[0], (table, sink))
            for sql in statements[1:]:
                cur.execute(sql)
    _analyze(kind, conn, tuple(names.values()))


def _statements(
    kind: Kind, names: dict[str, str], start: int, count: int, step: float, offset: float
) -> list[str]:
    """The INSERT ... SELECTs of one chunk: its job rows (bound: the table, the sink),
    their winners, and the tables of its transactions."""
    if kind == "postgres":
        numbers = f"generate_series({start + 1}, {start + count}) AS g(i)"
        job_id = "md5('xasink-history-' || i)"
        other = "'history_other_' || MOD(i, 100)"
        at = f"now() - make_interval(secs => {offset!r} + ({start} + {count} - i + 1) * {step!r})"
    else:
        places = max(1, len(str(count - 1)))  # 10**places combinations cover 0..count-1
        digits = " CROSS JOIN ".join(
            f"(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL "
            f"SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL "
            f"SELECT 8 UNION ALL SELECT 9) d{n}"
            for n in range(places)
        )
        number = " + ".join(f"d{n}.d * {10**n}" for n in range(places))
        numbers = (
            f"(SELECT {start} + {number} + 1 AS i FROM {digits} WHERE {number} < {count}) AS g"
        )
        job_id = "LEFT(SHA2(CONCAT('xasink-history-', i), 256), 32)"  # MySQL 9 has no MD5
        other = "CONCAT('history_other_', MOD(i, 100))"
        at = (
            f"UTC_TIMESTAMP(6) - INTERVAL ROUND(({offset!r} + ({start} + {count} - i + 1) * "
            f"{step!r}) * 1000000) MICROSECOND"
        )
    mark = "%s"
    jobs = (
        f"INSERT INTO {names['jobs']} (job_id, target_table, state, beats, lease_seconds, "
        "created_at, heartbeat_at, decided_at, finished_at, sink_id, batch_id) "
        f"SELECT {job_id}, CASE WHEN MOD(i, 2) = 0 THEN {mark} ELSE {other} END, "
        f"'committed', 1, 0, {at}, {at}, {at}, {at}, CASE WHEN MOD(i, 2) = 0 THEN {mark} END, "
        f"CASE WHEN MOD(i, 2) = 0 THEN i END FROM {numbers}"
    )
    winners = (
        f"INSERT INTO {names['winners']} (job_id, partition_id, attempt, row_count) "
        f"SELECT {job_id}, 0, 0, 10 FROM {numbers}"
    )
    listed = [
        f"INSERT INTO {names['job_tables']} (job_id, target_table, created_at) "
        f"SELECT {job_id}, {name}, {at} FROM {numbers} WHERE MOD(i, 10) = 5"
        for name in (other, other.replace("history_other_", "history_partner_"))
    ]
    return [jobs, winners, *listed]


def _analyze(kind: Kind, conn: Any, tables: tuple[str, ...]) -> None:
    """Fresh statistics, as the server's own background work would have them by now."""
    for table in tables:
        with contextlib.closing(conn.cursor()) as cur:
            cur.execute(f"ANALYZE {table}" if kind == "postgres" else f"ANALYZE TABLE {table}")
            if kind != "postgres":
                cur.fetchall()


__all__ = ["CHUNK", "fill"]
