"""Smoke tests for the server fixtures: they must support real 2PC as app user."""

from __future__ import annotations

import uuid

import psycopg
import pymysql
import pytest

try:
    from servers import APP_PASSWORD, APP_USER, DbServer
except ImportError:
    from tests.servers import APP_PASSWORD, APP_USER, DbServer


def _table() -> str:
    """Unique table name, so tests never collide on a shared server."""
    return f"t_{uuid.uuid4().hex[:12]}"


def test_app_user_is_unprivileged(db: DbServer) -> None:
    """The sink must work without superuser rights, so the fixtures must not grant them."""
    with db.connect() as conn, conn.cursor() as cur:
        if db.kind == "postgres":
            cur.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (APP_USER, False)
        else:
            cur.execute("SELECT CURRENT_USER()")
            row = cur.fetchone()
            assert row is not None and row[0] == f"{APP_USER}@%"
            with pytest.raises(pymysql.err.OperationalError, match="denied"):
                cur.execute("SELECT COUNT(*) FROM mysql.user")


def test_create_insert_select(db: DbServer) -> None:
    """The app user can create and use tables in its own database."""
    table = _table()
    with db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY, v VARCHAR(20))")
        cur.execute(f"INSERT INTO {table} VALUES (1, 'one')")
        cur.execute(f"SELECT id, v FROM {table}")
        assert cur.fetchall() in ([(1, "one")], ((1, "one"),))
        cur.execute(f"DROP TABLE {table}")


def test_jdbc_url_has_no_credentials(db: DbServer) -> None:
    """Credentials travel as connection properties, never in URLs or reprs."""
    scheme = {"postgres": "postgresql", "mysql": "mysql"}.get(db.kind, "mariadb")
    assert db.jdbc_url.split("?")[0] == f"jdbc:{scheme}://{db.host}:{db.port}/{db.database}"
    assert APP_PASSWORD not in db.jdbc_url and APP_USER not in db.jdbc_url
    assert APP_PASSWORD not in repr(db) and db.admin_password not in repr(db)


def test_postgres_prepare_and_commit_from_other_connection(postgres: DbServer) -> None:
    """Recovery commits from a different session than the one that prepared."""
    table = _table()
    gid = f"xasink-test-{uuid.uuid4().hex}"
    with postgres.connect() as conn:
        conn.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY)")
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table} VALUES (42)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")
    try:
        assert gid in postgres.prepared_transactions()
        with postgres.connect() as other:
            # Not visible before the second phase.
            assert other.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)
            other.execute(f"COMMIT PREPARED '{gid}'")
            assert other.execute(f"SELECT id FROM {table}").fetchall() == [(42,)]
        assert gid not in postgres.prepared_transactions()
    finally:
        postgres.rollback_prepared(gid)
        with postgres.connect() as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")


@pytest.mark.mariadb11_ci
def test_mariadb_xa_commit_of_detached_branch(any_mariadb: DbServer) -> None:
    """A prepared branch outlives its session and is committed from another one."""
    mariadb = any_mariadb
    table = _table()
    gtrid = f"xasink-test-{uuid.uuid4().hex[:16]}"
    bqual = "b1"
    xid_sql = f"'{gtrid}','{bqual}',4242"
    with mariadb.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {table} (id INT PRIMARY KEY) ENGINE=InnoDB")
        cur.execute(f"XA START {xid_sql}")
        cur.execute(f"INSERT INTO {table} VALUES (42)")
        cur.execute(f"XA END {xid_sql}")
        cur.execute(f"XA PREPARE {xid_sql}")
    # The preparing session is gone; the branch must survive it.
    try:
        expected = f"4242:{len(gtrid)}:{len(bqual)}:{gtrid}{bqual}"
        assert expected in mariadb.prepared_transactions()
        with mariadb.connect() as other, other.cursor() as cur:
            cur.execute("XA RECOVER")
            rows = cur.fetchall()
            assert any(r[0] == 4242 and r[3] == (gtrid + bqual).encode() for r in rows)
            cur.execute(f"SELECT COUNT(*) FROM {table}")
            assert cur.fetchone() == (0,)
            cur.execute(f"XA COMMIT {xid_sql}")
            cur.execute(f"SELECT id FROM {table}")
            assert cur.fetchall() == ((42,),)
        assert expected not in mariadb.prepared_transactions()
    finally:
        mariadb.rollback_prepared(gtrid)
        with mariadb.connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {table}")


def test_pg_no_xa_refuses_prepare(pg_no_xa: DbServer) -> None:
    """The preflight check needs a server that really refuses two-phase commit."""
    table = _table()
    with pg_no_xa.connect() as conn:
        assert conn.execute("SHOW max_prepared_transactions").fetchone() == ("0",)
        conn.execute(f"CREATE TABLE {table} (id INT)")
        conn.execute("BEGIN")
        conn.execute(f"INSERT INTO {table} VALUES (1)")
        with pytest.raises(
            psycopg.errors.ObjectNotInPrerequisiteState, match="prepared transactions are disabled"
        ):
            conn.execute("PREPARE TRANSACTION 'xasink-no-xa'")
        conn.execute("ROLLBACK")
        conn.execute(f"DROP TABLE {table}")
    assert pg_no_xa.prepared_transactions() == []
