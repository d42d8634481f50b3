"""The batched loader's two ways to bind, on real servers: ColumnBinder (one Java call per
batch) and the value-by-value fallback must store exactly the same rows."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from support import spec_for

from xasink.errors import WriteError
from xasink.loaders.base import LoadTarget
from xasink.loaders.batched import BatchedInsertLoader
from xasink.protocol.sessions import open_session
from xasink.runtime.javahelpers import helper_class

UTC = dt.timezone.utc
DDL = {
    "postgres": "CREATE TABLE {t} (id BIGINT, s TEXT, d DOUBLE PRECISION, b BOOLEAN, "
    "raw BYTEA, amount NUMERIC(38,10), day DATE, ts TIMESTAMPTZ)",
    "mysql": "CREATE TABLE {t} (id BIGINT, s LONGTEXT, d DOUBLE, b BOOLEAN, raw LONGBLOB, "
    "amount DECIMAL(38,10), day DATE, ts DATETIME(6)) DEFAULT CHARSET=utf8mb4",
}
BATCH = pa.record_batch(
    {
        "id": pa.array([-(2**63), 2**63 - 1, 0], pa.int64()),
        "s": ["quote ' \" , \\N \n tab\t 😀", None, ""],
        "d": [1.5, None, -2.25e300],
        "b": [True, None, False],
        "raw": pa.array([b"\x00\xff", None, b""], pa.binary()),
        "amount": pa.array(
            [
                decimal.Decimal("-9999999999999999999999999999.9999999999"),
                None,
                decimal.Decimal("0.0000000001"),
            ],
            pa.decimal128(38, 10),
        ),
        "day": pa.array([dt.date(1000, 1, 1), None, dt.date(9999, 12, 31)], pa.date32()),
        "ts": pa.array(
            [
                dt.datetime(1200, 3, 1, 1, 2, 3, 4, tzinfo=UTC),
                None,
                dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC),
            ],
            pa.timestamp("us", "UTC"),
        ),
    }
)


def _target(session, table: str, schema: pa.Schema, quote: str, **more) -> LoadTarget:
    names = list(schema.names)
    return LoadTarget(
        conn=session.connection,
        table_sql=table,
        quoted_columns=[f"{quote}{c}{quote}" for c in names],
        columns=names,
        column_types=[""] * len(names),
        **more,
    )


def load(db, table: str, use_binder: bool) -> None:
    quote = '"' if db.kind == "postgres" else "`"
    with open_session(spec_for(db)) as session:
        target = _target(session, table, BATCH.schema, quote)
        loader = BatchedInsertLoader(target, BATCH.schema, batch_size=2)
        if not use_binder:
            loader._binder = None
        loader.write(BATCH)
        loader.finish()


def rows(db, table: str) -> list[tuple]:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute(f"SELECT * FROM {table} ORDER BY id")
        return [tuple(r) for r in cursor.fetchall()]


def test_column_binder_is_available_with_a_jdk(postgres):
    with open_session(spec_for(postgres)):  # starts the JVM
        assert helper_class("ColumnBinder") is not None


@pytest.mark.parametrize("use_binder", [True, False], ids=["column-binder", "value-by-value"])
def test_both_binding_paths_store_the_same_rows(db, use_binder):
    table = f"ld_{'cb' if use_binder else 'vv'}_{db.kind}"
    with db.connect() as conn:
        conn.cursor().execute(f"DROP TABLE IF EXISTS {table}")
        conn.cursor().execute(DDL[db.dialect].format(t=table))
    load(db, table, use_binder)
    got = rows(db, table)
    flag = (lambda v: v) if db.kind == "postgres" else (lambda v: None if v is None else int(v))
    stamp = (
        (lambda v: v)
        if db.kind == "postgres"
        else (lambda v: None if v is None else v.replace(tzinfo=None))
    )
    want = [
        (r["id"], r["s"], r["d"], flag(r["b"]), r["raw"], r["amount"], r["day"], stamp(r["ts"]))
        for r in BATCH.to_pylist()
    ]
    assert got == sorted(want, key=lambda r: r[0])


@pytest.mark.parametrize("native", [True, False], ids=["compiled-xid", "python-proxy-xid"])
def test_both_xid_paths_prepare_list_and_commit(db, native, monkeypatch):
    """Where no JDK can compile XasinkXid, XIDs are Python proxies: a branch must prepare,
    be listed by XA RECOVER as the same XID, and commit from another session either way."""
    from xasink.runtime import jvm
    from xasink.xid import BranchId

    if not native:
        monkeypatch.setattr(jvm, "helper_class", lambda name: None)
    table = f"ld_xid_{'n' if native else 'p'}_{db.kind}"
    with db.connect() as conn:
        conn.cursor().execute(f"DROP TABLE IF EXISTS {table}")
        conn.cursor().execute(f"CREATE TABLE {table} (id BIGINT)")
    xid = BranchId("0badcafe", "0" * 32, 1, 7).xid
    spec = spec_for(db)
    with open_session(spec) as writer:
        writer.start(xid)
        statement = writer.connection.createStatement()
        statement.executeUpdate(f"INSERT INTO {table} VALUES (42)")
        statement.close()
        writer.end(xid)
        writer.prepare(xid)
    with open_session(spec) as finisher:
        assert xid in finisher.recover()
        finisher.commit(xid)
        assert xid not in finisher.recover()
    assert rows(db, table) == [(42,)]
    assert db.prepared_transactions() == []


# -- LOAD DATA, streamed: one statement per branch, fed chunk by chunk ---------------------
def _load_data_loader(session, table: str, schema: pa.Schema, chunk_bytes: int):
    from xasink.loaders.mysql_load_data import MySQLLoadDataLoader

    target = _target(session, table, schema, "`", dialect="mysql")
    return MySQLLoadDataLoader(target, schema, chunk_bytes=chunk_bytes)


def _fresh(db, table: str, ddl: str) -> None:
    with db.connect() as conn:
        conn.cursor().execute(f"DROP TABLE IF EXISTS {table}")
        conn.cursor().execute(f"CREATE TABLE {table} {ddl}")


def _ids(start: int, count: int) -> pa.RecordBatch:
    ids = list(range(start, start + count))
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "s": [f"row {i}" for i in ids]})


def _count_loads(db) -> int:
    with db.connect() as conn:
        cursor = conn.cursor()
        cursor.execute("SHOW GLOBAL STATUS LIKE 'Com_load'")
        return int(cursor.fetchone()[1])


@pytest.mark.parametrize("chunk_bytes", [64, 1 << 20], ids=["many-chunks", "one-chunk"])
def test_load_data_streams_a_branch_in_one_statement(mysql_family, chunk_bytes):
    """Many chunks (each batch its own, and the queue full at times) or one: every row once,
    in one LOAD DATA statement either way."""
    db, table = mysql_family, f"ld_stream_{mysql_family.kind}"
    _fresh(db, table, "(id BIGINT, s VARCHAR(32))")
    batches = [_ids(i * 500, 500) for i in range(40)]
    loads = _count_loads(db)
    with open_session(spec_for(db)) as session:
        session.connection.setAutoCommit(False)
        loader = _load_data_loader(session, table, batches[0].schema, chunk_bytes)
        try:
            for batch in batches:
                loader.write(batch)
            loader.finish()
        finally:
            loader.abort()  # a no-op after finish; ends the stream if a write failed
        session.connection.commit()
    assert _count_loads(db) - loads == 1
    assert [r[0] for r in rows(db, table)] == list(range(20_000))


def test_load_data_ended_by_the_server_fails_the_worker_rather_than_blocking_it(mysql_family):
    """A statement the server refuses at once (its table is gone) reads no chunk: the worker,
    waiting for room in the full queue, fails within seconds with the server's error instead
    of waiting for a reader that has ended."""
    import threading

    db = mysql_family
    outcome: list[BaseException] = []
    with open_session(spec_for(db)) as session:
        loader = _load_data_loader(session, "ld_no_such_table", _ids(0, 1).schema, 64)

        def send_forever() -> None:
            try:
                for i in range(10**9):
                    loader.write(_ids(i * 100, 100))
            except BaseException as exc:  # the failure this test waits for
                outcome.append(exc)

        sender = threading.Thread(target=send_forever, daemon=True)
        sender.start()
        sender.join(timeout=30)
        assert not sender.is_alive(), "the worker still waits for room in the queue"
        loader.abort()
    assert len(outcome) == 1 and "ld_no_such_table" in str(outcome[0]), outcome


def test_load_data_waits_for_a_slow_worker_longer_than_net_read_timeout(mysql_family):
    """The server waits for the streamed file's next packet while the worker computes the
    next rows (a slow upstream stage): longer than the session's `net_read_timeout`, the
    statement must still finish, as a wait between statements always could."""
    import time

    db, table = mysql_family, f"ld_slow_{mysql_family.kind}"
    _fresh(db, table, "(id BIGINT, s VARCHAR(32))")
    with open_session(spec_for(db)) as session:
        session.connection.setAutoCommit(False)
        statement = session.connection.createStatement()
        statement.execute("SET SESSION net_read_timeout = 1")
        statement.close()
        loader = _load_data_loader(session, table, _ids(0, 1).schema, chunk_bytes=64)
        try:
            loader.write(_ids(0, 100))  # the statement starts
            time.sleep(3)
            loader.write(_ids(100, 100))
            loader.finish()
        finally:
            loader.abort()
        session.connection.commit()
    assert [r[0] for r in rows(db, table)] == list(range(200))


def test_load_data_that_would_change_a_value_is_refused(mysql_family):
    """LOCAL turns a too-long string into a warning and a cut value: the loader refuses it."""
    db, table = mysql_family, f"ld_cut_{mysql_family.kind}"
    _fresh(db, table, "(id BIGINT, s VARCHAR(3))")
    with open_session(spec_for(db)) as session:
        session.connection.setAutoCommit(False)
        loader = _load_data_loader(session, table, _ids(0, 1).schema, chunk_bytes=64)
        with pytest.raises(WriteError, match=r"LOAD DATA stored \d+ of \d+ rows with warnings"):
            try:
                for i in range(20):
                    loader.write(_ids(i * 10, 10))
                loader.finish()
            finally:
                loader.abort()
        session.connection.rollback()
    assert rows(db, table) == []


def test_load_data_aborted_mid_stream_ends_its_statement(mysql_family):
    """abort() ends the stream and waits for the statement: the connection can roll back
    at once, and nothing stays."""
    db, table = mysql_family, f"ld_abort_{mysql_family.kind}"
    _fresh(db, table, "(id BIGINT, s VARCHAR(32))")
    with open_session(spec_for(db)) as session:
        session.connection.setAutoCommit(False)
        loader = _load_data_loader(session, table, _ids(0, 1).schema, chunk_bytes=64)
        for i in range(50):
            loader.write(_ids(i * 100, 100))
        loader.abort()
        assert loader._loading is not None and loader._loading.done()
        session.connection.rollback()
    assert rows(db, table) == []
