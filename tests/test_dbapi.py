"""The bookkeeping SQL layer (runtime/jdbc.py) on real servers: the Python values each column
type the journal uses reads back as, parameters bound as the server's own types, Java errors
that keep their SQLSTATE and leave a public call redacted, and transactions that roll back
whole and leave the connection's autocommit as it was. Rows are checked with psycopg and
pymysql."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from typing import Any

import jpype
import pytest
from support import spec_for

from xasink.errors import XasinkError
from xasink.protocol.connecting import open_journal
from xasink.runtime.jdbc import (
    execute,
    execute_many,
    java_message,
    local_transaction,
    query,
    redacting_java_errors,
    sql_error_code,
    sql_state,
)

UTC = dt.timezone.utc
STAMP = dt.datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=UTC)


@pytest.fixture(params=["postgres", "mariadb"])
def server(request: pytest.FixtureRequest) -> Any:
    return request.getfixturevalue(request.param)


@pytest.fixture
def conn(server: Any) -> Iterator[Any]:
    """The logical connection of an XA connection, as the journal gets it."""
    session, _ = open_journal(spec_for(server), None)
    with session:
        yield session.connection


@pytest.fixture
def table(server: Any) -> Iterator[str]:
    """A table with a column of each type the journal's tables use, dropped afterwards."""
    name = f"dbapi_{uuid.uuid4().hex[:10]}"
    if server.kind == "postgres":
        types = "VARCHAR(64)", "TEXT", "TIMESTAMPTZ", "BYTEA"
    else:
        types = "VARCHAR(64)", "MEDIUMTEXT", "DATETIME(6)", "VARBINARY(16)"
    columns = ", ".join(
        f"{column} {kind}" for column, kind in zip(("v", "txt", "ts", "bin"), types, strict=True)
    )
    with server.connect() as admin:
        admin.cursor().execute(f"CREATE TABLE {name} (id INTEGER, big BIGINT, {columns})")
    yield name
    with server.connect() as admin:
        admin.cursor().execute(f"DROP TABLE {name}")


def rows_of(server: Any, table: str) -> list[tuple[Any, ...]]:
    """The table's rows as psycopg / pymysql read them (timestamps as aware UTC)."""
    with server.connect() as db:
        cursor = db.cursor()
        cursor.execute(f"SELECT id, big, v, txt, ts, bin FROM {table} ORDER BY id")
        rows = []
        for row in cursor.fetchall():
            stamp = row[4]
            if isinstance(stamp, dt.datetime) and stamp.tzinfo is None:
                stamp = stamp.replace(tzinfo=UTC)  # DATETIME(6) holds UTC, as the journal's
            blob = None if row[5] is None else bytes(row[5])
            rows.append((*row[:4], stamp, blob))
        return rows


def test_values_read_back_as_the_exact_python_types(server: Any, conn: Any, table: str) -> None:
    stamp = "2024-02-29 23:59:58.123456" + ("+00" if server.kind == "postgres" else "")
    with server.connect() as db:
        db.cursor().execute(
            f"INSERT INTO {table} VALUES (1, 9007199254740993, 'é ok', 'long text', %s, %s), "
            "(2, NULL, NULL, NULL, NULL, NULL)",
            (stamp, b"\x00\xff"),
        )
    rows = query(conn, f"SELECT id, big, v, txt, ts, bin FROM {table} ORDER BY id")
    assert rows == [
        (1, 9007199254740993, "é ok", "long text", STAMP, b"\x00\xff"),
        (2, None, None, None, None, None),
    ]
    assert [type(value) for value in rows[0]] == [int, int, str, str, dt.datetime, bytes]
    assert rows[0][4].tzinfo is UTC
    # What the journal's queries compute: a count (BIGINT), an age (DECIMAL / NUMERIC).
    age = "EXTRACT(EPOCH FROM ts)" if server.kind == "postgres" else "UNIX_TIMESTAMP(ts) / 1.0"
    (count, seconds), *_ = query(
        conn, f"SELECT count(*), max({age}) FROM {table} WHERE id = ?", (1,)
    )
    assert (type(count), count) == (int, 1)
    assert (type(seconds), seconds) == (float, pytest.approx(STAMP.timestamp(), abs=1e-3))


def test_parameters_bind_as_the_columns_types(server: Any, conn: Any, table: str) -> None:
    params = (1, 2**62 + 1, "caf\u00e9", "x" * 5000, None, b"\x01\x02")
    assert (
        execute(
            conn,
            f"INSERT INTO {table} (id, big, v, txt, ts, bin) VALUES (?, ?, ?, ?, ?, ?)",
            params,
        )
        == 1
    )
    execute_many(
        conn, f"INSERT INTO {table} (id, big, v) VALUES (?, ?, ?)", [(2, 20, "b"), (3, None, "c")]
    )
    assert rows_of(server, table) == [
        params,
        (2, 20, "b", None, None, None),
        (3, None, "c", None, None, None),
    ]
    # A NULL parameter compares as SQL NULL, and a bool as the server's true.
    assert query(conn, f"SELECT id FROM {table} WHERE big = ? OR (? AND id = 2)", (None, True)) == [
        (2,)
    ]


def test_errors_keep_their_sqlstate_and_leave_a_public_call_redacted(
    server: Any, conn: Any
) -> None:
    secret = "pw-" + uuid.uuid4().hex[:8]  # a table named like the password: the message has it
    missing = f'"{secret}"' if server.kind == "postgres" else f"`{secret}`"
    with pytest.raises(jpype.JException) as caught:
        query(conn, f"SELECT * FROM {missing} WHERE 1 = ?", (1,))
    assert sql_state(caught.value) == ("42P01" if server.kind == "postgres" else "42S02")
    if server.kind == "mariadb":
        assert sql_error_code(caught.value) == 1146
    assert secret in java_message(caught.value)
    with pytest.raises(jpype.JException) as caught:
        execute(conn, f"DELETE FROM {missing}")
    assert sql_state(caught.value) == ("42P01" if server.kind == "postgres" else "42S02")

    @redacting_java_errors
    def public_call(password: str) -> None:
        query(conn, f"SELECT * FROM {missing}")

    with pytest.raises(XasinkError) as wrapped:
        public_call(password=secret)
    assert secret not in str(wrapped.value) and "***" in str(wrapped.value)
    assert secret not in repr(wrapped.value.args)


def test_a_failed_transaction_rolls_back_whole_and_autocommit_is_restored(
    server: Any, conn: Any, table: str
) -> None:
    with pytest.raises(jpype.JException) as caught, local_transaction(conn):
        execute(conn, f"INSERT INTO {table} (id) VALUES (?)", (1,))
        execute_many(conn, f"INSERT INTO {table} (id) VALUES (?)", [(2,), (3,)])
        query(conn, "SELECT * FROM no_such_table_at_all")
    assert sql_state(caught.value) in ("42P01", "42S02")
    assert rows_of(server, table) == []
    assert bool(conn.getAutoCommit())
    with local_transaction(conn):
        execute(conn, f"INSERT INTO {table} (id) VALUES (?)", (4,))
    assert [row[0] for row in rows_of(server, table)] == [4]


def test_statements_leave_the_connections_autocommit_alone(
    server: Any, conn: Any, table: str
) -> None:
    execute(conn, f"INSERT INTO {table} (id) VALUES (?)", (1,))  # autocommit: at once
    assert [row[0] for row in rows_of(server, table)] == [1]
    conn.setAutoCommit(False)
    try:
        execute(conn, f"INSERT INTO {table} (id) VALUES (?)", (2,))
        assert query(conn, f"SELECT count(*) FROM {table}") == [(2,)]
        assert not bool(conn.getAutoCommit())
        assert [row[0] for row in rows_of(server, table)] == [1]  # not committed by a cursor
        conn.rollback()
    finally:
        with contextlib.suppress(jpype.JException):
            conn.setAutoCommit(True)
    assert [row[0] for row in rows_of(server, table)] == [1]


class _Interrupted:
    """A Java statement whose execution is interrupted on the Python side (a signal lands
    while the call returns), as the one connection method the DB-API layer calls needs."""

    def __init__(self, interrupt: BaseException) -> None:
        self.interrupt, self.closed = interrupt, False

    def prepareStatement(self, sql: str) -> _Interrupted:
        return self

    def execute(self) -> bool:
        raise self.interrupt

    def close(self) -> None:
        self.closed = True


def test_an_interrupt_during_a_statement_is_raised_as_itself(postgres: Any) -> None:
    """jaydebeapi's bare `except:` wraps whatever a statement raised as its InterfaceError,
    an ordinary Exception: an interrupt must come out as itself, or the code that handles
    failed statements would swallow it."""
    session, _ = open_journal(spec_for(postgres), None)  # the JVM, as the journal needs it
    session.close()
    for interrupt in (KeyboardInterrupt(), SystemExit(3)):
        for call in (execute, query):
            statement = _Interrupted(interrupt)
            with pytest.raises(type(interrupt)):
                call(statement, "UPDATE t SET a = 1")
            assert statement.closed
