"""The batched loader's two ways to bind, on real servers: ColumnBinder (one Java call per
batch) and the value-by-value fallback must store exactly the same rows."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from support import spec_for

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


def load(db, table: str, use_binder: bool) -> None:
    spec = spec_for(db)
    quote = '"' if db.kind == "postgres" else "`"
    names = list(BATCH.schema.names)
    with open_session(spec) as session:
        target = LoadTarget(
            conn=session.connection,
            table_sql=table,
            quoted_columns=[f"{quote}{c}{quote}" for c in names],
            columns=names,
            column_types=[""] * len(names),
        )
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
