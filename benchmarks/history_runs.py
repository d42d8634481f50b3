"""A journal with a long history beside a fresh one: a stream's batch, a 1,000-row call and
the commands, timed in the same rounds on the same server.

A stream of one micro-batch a second leaves 86,400 finished jobs a day. Every statement a
write sends to the journal is served by an index, so a batch on day 90 should cost what it
cost on day 1, and the commands should still answer at once. Each database gets two
journals, each in a schema of its own with its own table: "fresh", made by one write_xa
call and nothing else, and "history", made the same way, then filled with the workload's
finished jobs by the server's own row generators (`history.fill`: half of them the
stream's past batches on the same table and sink) and its retention set to 0, so that
xasink's own retention deletes none of that history while it is measured. Then both take
turns in every round, in an order that changes each round (`measure.round_order`), so a
slow spell of this shared machine hits both: the stream's batches (write_xa with a sink
and a batch id, what `foreach_batch` calls), 1,000-row calls, then each command, run in
this process (`xasink.cli.main`): a new interpreter and JVM would add seconds that say
nothing about the journal.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from . import history, xasink_calls
from .history_report import median_seconds, shown
from .machine import load_average
from .measure import Timing, record_failure, round_order, start_timing
from .workloads import Workload, build_dataframe, table_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from .databases import Database

Role = Literal["fresh", "history"]
ROLES: tuple[Role, ...] = ("fresh", "history")

#: A stream's micro-batch: a few rows, so the batch's cost is the protocol's.
BATCH_ROWS = 10
#: Timed batches per journal, and untimed ones first (a new sink's first batches, caches).
BATCHES = 100
BATCH_WARMUPS = 10
#: Each command's timed runs per journal, and untimed ones first.
COMMAND_RUNS = 5
COMMAND_WARMUPS = 1
#: The commands, as an operator types them (after --url, --user, --password-env and
#: --journal-schema). The prune counts jobs older than ten years: none, so it reads only
#: what it would delete, and deletes nothing.
COMMANDS: dict[str, tuple[str, ...]] = {
    "jobs": ("jobs", "--limit", "20"),
    "check": ("check",),
    "recover": ("recover",),
    "prune": ("prune", "--older-than", "3650", "--dry-run"),
}
#: The variable the commands read the password from (never on their command line).
PASSWORD_ENV = "XASINK_BENCH_PASSWORD"
#: A phase of one database stops after this many failed runs: the rest would fail alike.
MAX_FAILURES = 3


@dataclass
class Journal:
    """One journal under measurement: its schema, the table its writes go to (as written
    and as the journal records it), its stream's sink and next batch id, and the rows the
    table must hold."""

    role: Role
    schema: str
    table: str
    recorded_table: str
    sink: str
    next_batch: int
    rows: int


#: One timed thing on a journal; returns the details worth keeping.
Run = Callable[[Journal], dict[str, Any]]


@dataclass(frozen=True)
class Probe:
    """One thing timed on a journal: `run` returns details worth keeping (untimed checks
    come after it, in `check`)."""

    name: str
    rows: int
    run: Run
    check: Callable[[Journal], None] | None = None


def run_workload(
    spark: SparkSession,
    workload: Workload,
    databases: Sequence[Database],
    timings: list[Timing],
) -> None:
    """On each database: two journals, one filled with `workload.history` jobs, then the
    stream's batches, the calls and the commands on both, in turns."""
    batch_shape = Workload(f"{workload.name}-batch", "narrow", BATCH_ROWS, 1)
    frames = (build_dataframe(spark, batch_shape).cache(), build_dataframe(spark, workload).cache())
    try:
        for df, shape in zip(frames, (batch_shape, workload), strict=True):
            if df.count() != shape.rows:
                raise RuntimeError(f"{workload.name}: a frame is not as built")
        for db in databases:
            try:
                with _journals(db, workload, frames[0], timings) as journals:
                    _measure(db, workload, journals, frames, timings)
            except Exception as exc:  # no journals (or a harness error): the next database
                failed = start_timing(db.kind, workload.name, "fill:history", 0, False, 0)
                record_failure(failed, exc, None)
                timings.append(failed)
                print(f"[{db.kind} {workload.name}] setup FAILED: {failed.error}", flush=True)
    finally:
        for df in frames:
            df.unpersist(blocking=True)


@contextlib.contextmanager
def _journals(
    db: Database, workload: Workload, batch: DataFrame, timings: list[Timing]
) -> Iterator[list[Journal]]:
    """The fresh and the history journal, each in a schema of its own (dropped after the
    block); the history's fill recorded as a timing of its own ("fill:history")."""
    label, tag = f"[{db.kind} {workload.name}]", uuid.uuid4().hex[:6]
    schemas = {role: f"xh_{role}_{tag}" for role in ROLES}
    journals: list[Journal] = []
    try:
        for role in ROLES:
            journals.append(_new_journal(db, workload, role, schemas[role], batch))
        timings.append(_fill(db, workload, journals[1]))
        print(f"{label} {_fill_line(timings[-1])}", flush=True)
        yield journals
    finally:
        for schema in schemas.values():
            try:
                _admin(db, _drop_sql(db, schema))
            except Exception as exc:
                print(f"{label} could not drop {schema}: {exc}", flush=True)


def _new_journal(
    db: Database, workload: Workload, role: Role, schema: str, batch: DataFrame
) -> Journal:
    """A schema the app user owns (MariaDB: a database it has ALL on), the stream's table
    in it, and its journal, made by a first write_xa call."""
    if db.kind == "postgres":
        _admin(db, f"CREATE SCHEMA {schema} AUTHORIZATION {db.server.user}")
    else:
        grant = f"GRANT ALL ON {schema}.* TO '{db.server.user}'@'%'"
        _admin(db, f"CREATE DATABASE {schema}", grant)
    table = f"{schema}.events"
    db.execute(table_ddl(db.kind, workload, table))
    xasink_calls.write_xa(db, batch, table, journal_schema=schema)
    recorded = str(db.scalar(f"SELECT MIN(target_table) FROM {schema}.xasink_jobs"))
    # The same batch ids on both journals, above every one the history holds.
    first_batch = (workload.history or 0) + 1
    return Journal(role, schema, table, recorded, f"stream-{role}", first_batch, BATCH_ROWS)


def _fill(db: Database, workload: Workload, journal: Journal) -> Timing:
    """Retention 0, then `workload.history` finished jobs on the journal's table and sink;
    then PostgreSQL's VACUUM and a checkpoint, which the server would otherwise run in
    the middle of the measurement (and a long-lived journal's pages are vacuumed)."""
    jobs = workload.history or 0
    timing = start_timing(db.kind, workload.name, "fill:history", 0, False, jobs)
    db.execute(f"UPDATE {journal.schema}.xasink_meta SET retention_days = 0 WHERE id = 1")
    before = load_average()
    started = time.perf_counter()
    with contextlib.closing(db.server.admin_connect()) as conn:
        history.fill(
            "postgres" if db.kind == "postgres" else "mysql",
            conn,
            journal.schema,
            jobs=jobs,
            table=journal.recorded_table,
            sink=journal.sink,
        )
    timing.seconds = time.perf_counter() - started
    settled: float | None = None
    if db.kind == "postgres":
        started = time.perf_counter()
        names = ", ".join(f"{journal.schema}.xasink_{t}" for t in ("jobs", "winners", "job_tables"))
        _admin(db, f"VACUUM (ANALYZE) {names}", "CHECKPOINT")
        settled = time.perf_counter() - started
    timing.detail = {
        "jobs": jobs,
        "settle_seconds": settled,
        "journal_bytes": _journal_bytes(db, journal.schema),
        "load_average_before_fill": before,
        "load_average_after_fill": load_average(),
        "retention_days": 0,
        "table": journal.recorded_table,
        "sink": journal.sink,
    }
    return timing


def _measure(
    db: Database,
    workload: Workload,
    journals: list[Journal],
    frames: tuple[DataFrame, DataFrame],
    timings: list[Timing],
) -> None:
    """The batches, then the calls, then the commands; both journals in every round."""
    batch, call = frames
    phases: list[tuple[list[Probe], int, int]] = [
        ([Probe("batch", BATCH_ROWS, _writer(db, batch, BATCH_ROWS, True), _counted(db))],
         BATCH_WARMUPS, BATCHES),
        ([Probe("call", workload.rows, _writer(db, call, workload.rows, False), _counted(db))],
         workload.warmups or 0, workload.repetitions or 1),
        ([Probe(name, 0, _command(db, argv)) for name, argv in COMMANDS.items()],
         COMMAND_WARMUPS, COMMAND_RUNS),
    ]  # fmt: skip
    fill = next(t for t in reversed(timings) if t.contender == "fill:history")
    fill.detail["load_average_at_start"] = load_average()
    os.environ[PASSWORD_ENV] = db.server.password
    try:
        for probes, warmups, repetitions in phases:
            done = _rounds(db, workload, probes, journals, timings, warmups, repetitions)
            for line in _phase_lines(done):
                print(f"[{db.kind} {workload.name}] {line}", flush=True)
    finally:
        os.environ.pop(PASSWORD_ENV, None)
        fill.detail["load_average_at_end"] = load_average()


def _rounds(
    db: Database,
    workload: Workload,
    probes: list[Probe],
    journals: list[Journal],
    timings: list[Timing],
    warmups: int,
    repetitions: int,
) -> list[Timing]:
    """`warmups` + `repetitions` rounds of every probe on every journal, in turns; the
    phase's timings (also appended to `timings` as they happen)."""
    steps = [(probe, journal) for probe in probes for journal in journals]
    done: list[Timing] = []
    for round_no in range(1, warmups + repetitions + 1):
        for probe, journal in round_order(steps, round_no):
            timing = start_timing(
                db.kind,
                workload.name,
                f"{probe.name}:{journal.role}",
                round_no,
                round_no <= warmups,
                probe.rows,
            )
            try:
                started = time.perf_counter()
                timing.detail = probe.run(journal)
                timing.seconds = time.perf_counter() - started
                if probe.check is not None:
                    probe.check(journal)
            except Exception as exc:
                timing.seconds = None
                record_failure(timing, exc, lambda j=journal: _recover(db, j))
                print(f"[{db.kind} {workload.name}] {timing.contender} FAILED: {exc}", flush=True)
            timings.append(timing)
            done.append(timing)
            if sum(1 for t in done if t.error) >= MAX_FAILURES:
                print(f"[{db.kind} {workload.name}] too many failures: phase skipped", flush=True)
                return done
    return done


def _writer(db: Database, df: DataFrame, rows: int, stream: bool) -> Run:
    """One write_xa call of `df` into the journal's table, with defaults: as a stream's
    next batch (its sink, the next batch id: `foreach_batch`'s call), or as a plain call."""

    def run(journal: Journal) -> dict[str, Any]:
        batch: dict[str, Any] = {}
        if stream:
            batch = {"sink_id": journal.sink, "batch_id": journal.next_batch}
            journal.next_batch += 1
        result = xasink_calls.write_xa(
            db, df, journal.table, journal_schema=journal.schema, **batch
        )
        if result.skipped or result.rows != rows:
            raise AssertionError(f"write_xa wrote {result.rows} rows (skipped={result.skipped})")
        journal.rows += rows
        return {"writer": result.writer, "branches": result.branches, **batch}

    return run


def _counted(db: Database) -> Callable[[Journal], None]:
    """After a write (untimed): the table holds exactly the rows written so far."""

    def check(journal: Journal) -> None:
        found, expected = db.count(journal.table), journal.rows
        if found != expected:
            journal.rows = found  # the next runs are checked from here on
            raise AssertionError(f"{journal.table} holds {found} rows, expected {expected}")

    return check


def _command(db: Database, argv: tuple[str, ...]) -> Run:
    """One `xasink` command on the journal, in this process; exit status 0 expected."""

    def run(journal: Journal) -> dict[str, Any]:
        from xasink.cli import main

        out, err = io.StringIO(), io.StringIO()
        login = xasink_calls.command_login(db, PASSWORD_ENV)
        status = main(
            [argv[0], *login, "--journal-schema", journal.schema, *argv[1:]], out=out, err=err
        )
        if status != 0:
            text = (err.getvalue() + out.getvalue()).strip()[:1000]
            raise RuntimeError(f"xasink {' '.join(argv)} exited {status}: {text}")
        return {"output_lines": len(out.getvalue().splitlines())}

    return run


def _recover(db: Database, journal: Journal) -> dict[str, Any]:
    """After a failed run: what it left in doubt on the journal's table, resolved now."""
    return xasink_calls.recovered(db, table=journal.table, journal_schema=journal.schema)


def _admin(db: Database, *statements: str) -> None:
    """Statements as the server's admin, autocommitted (schemas, VACUUM, CHECKPOINT)."""
    with (
        contextlib.closing(db.server.admin_connect()) as conn,
        contextlib.closing(conn.cursor()) as cur,
    ):
        for sql in statements:
            cur.execute(sql)


def _drop_sql(db: Database, schema: str) -> str:
    return f"DROP SCHEMA {schema} CASCADE" if db.kind == "postgres" else f"DROP DATABASE {schema}"


def _journal_bytes(db: Database, schema: str) -> int | None:
    """The journal's tables and indexes on disk, as the server counts them."""
    sql = (
        "SELECT SUM(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n ON "
        "n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname LIKE "
        "'xasink%%'"
        if db.kind == "postgres"
        else "SELECT SUM(data_length + index_length) FROM information_schema.TABLES WHERE "
        "table_schema = %s AND table_name LIKE 'xasink%%'"
    )
    with (
        contextlib.closing(db.server.admin_connect()) as conn,
        contextlib.closing(conn.cursor()) as cur,
    ):
        cur.execute(sql, (schema,))
        row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _fill_line(fill: Timing) -> str:
    d = fill.detail
    size = f"{d['journal_bytes'] / 2**20:,.0f} MiB" if d.get("journal_bytes") else "size unknown"
    settled = d["settle_seconds"]
    vacuum = f"VACUUM and CHECKPOINT {settled:.1f} s; " if settled is not None else ""
    return (
        f"history journal filled with {d['jobs']:,} finished jobs in {fill.seconds:.1f} s "
        f"({vacuum}journal {size})"
    )


def _phase_lines(done: Sequence[Timing]) -> Iterator[str]:
    """One line per probe: each journal's median and failures."""
    for probe in dict.fromkeys(t.contender.partition(":")[0] for t in done):
        parts = []
        for role in ROLES:
            runs = [t for t in done if t.contender == f"{probe}:{role}"]
            failed = sum(1 for t in runs if t.error)
            note = f" ({failed} failed)" if failed else ""
            parts.append(f"{role} {shown(probe, median_seconds(runs))}{note}")
        yield f"{probe}: median " + ", ".join(parts)


__all__ = ["BATCHES", "COMMANDS", "ROLES", "run_workload"]
