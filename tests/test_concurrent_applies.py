"""Two transactions applying a parent and a child table at the same moment.

Each holds the apply lock of its own tables only, yet a child's insert checks, and so
locks, the parent rows it references. Here one transaction's driver has applied an upsert
of the parent rows and stopped before its local commit (the exclusive row locks held, as
by any slow commit), while another transaction appends child rows that reference them:

- InnoDB (MariaDB, MySQL): the child's insert waits for the parents' exclusive locks, up
  to `lock_wait_timeout`. A small write (one local transaction) then fails with nothing
  written; a staged write decided before its apply keeps its decision, and `xasink
  recover` applies it once the parent's driver is gone: committed, exactly once.
- PostgreSQL: the check's key-share lock does not conflict with an update of a non-key
  column; the child commits at once.

Either way every job ends, each exactly once, with nothing left prepared or staged. Rows
are read with psycopg/pymysql.
"""

from __future__ import annotations

import uuid

import pytest
from support import WatchedDriver, connection_args, ids_in, job_states, stage_tables, xasink_cli
from test_transaction import CUSTOMERS, ORDERS, _expected, _frames

from xasink import CommitProperties, WriterProperties, transaction

PATHS = {
    "driver": {},
    "tasks": {"writer_properties": WriterProperties(driver_write_bytes=0, max_branches=2)},
}
#: Seconds the child's apply waits for a parent row's lock.
LOCK_WAIT = 3.0


def _sql(db, *statements: str) -> None:
    with db.connect() as conn:
        cursor = conn.cursor()
        for statement in statements:
            cursor.execute(statement)
        conn.commit()


def _tables(db) -> tuple[str, str, str]:
    """Parents (seeded), their children (a foreign key), and a table with the children's
    columns and no key, which the held transaction writes beside the parents."""
    suffix = uuid.uuid4().hex[:10]
    parent, child, other = f"pp_{suffix}", f"pc_{suffix}", f"po_{suffix}"
    _sql(
        db,
        f"CREATE TABLE {parent} (id BIGINT PRIMARY KEY, name VARCHAR(64))",
        f"CREATE TABLE {child} (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        f"amount DOUBLE PRECISION, FOREIGN KEY (customer_id) REFERENCES {parent} (id))",
        f"CREATE TABLE {other} (id BIGINT PRIMARY KEY, customer_id BIGINT NOT NULL, "
        "amount DOUBLE PRECISION)",
        f"INSERT INTO {parent} (id, name) VALUES "
        + ", ".join(f"({i}, 'old')" for i in range(CUSTOMERS)),
    )
    return parent, child, other


@pytest.mark.ci_one_server  # make test: each path on one of the two servers
@pytest.mark.parametrize("path", list(PATHS))
def test_a_child_applied_while_its_parents_are_held_ends_exactly_once(spark, db, path):
    parent, child, other = _tables(db)
    args = [db.jdbc_url, db.user, parent, other, "before_local_commit", "driver"]
    held = WatchedDriver("transaction_driver.py", args, db.password, {})
    try:
        assert held.wait_for("XASINK-FAULT before_local_commit"), held.tail()
        _, children = _frames(spark)
        options = connection_args(db) | {
            "commit_properties": CommitProperties(lock_wait_timeout=LOCK_WAIT)
        }
        error: Exception | None = None
        try:
            with transaction(**options) as tx:
                tx.write(children, child, **PATHS[path])
        except Exception as exc:  # InnoDB: the lock wait; checked against the journal
            error = exc
        waited = db.kind != "postgres"
        assert (error is not None) == waited, error
        assert ids_in(db, child) == ([] if waited else _expected()[1])
    finally:
        held.kill()  # the held transaction never committed: the server rolls it back
    assert ids_in(db, parent) == list(range(CUSTOMERS)) and ids_in(db, other) == []
    recovered = xasink_cli(db, "recover", "--grace", "0")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    state = job_states(db).get(tx.job_id)
    print(f"\n{db.kind} {path}: {type(error).__name__}: {str(error)[:300]} -> {state}")
    if error is not None and path == "driver":  # one local transaction: nothing written
        assert state is None and "nothing was written" in str(error), (state, error)
        assert ids_in(db, child) == []
    else:  # committed by its driver, or decided and applied by recover
        assert state == "committed", (state, error)
        assert ids_in(db, child) == _expected()[1] and len(ids_in(db, child)) == CUSTOMERS * ORDERS
    assert db.prepared_transactions() == [], "prepared transactions were left behind"
    assert stage_tables(db) == [], "a staging table was left behind"
