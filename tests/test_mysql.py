"""What only MySQL has, on a real MySQL 9: a user holding only the privileges README lists,
logging in through `caching_sha2_password`, writing every mode and recovering a killed driver.

The MySQL-protocol cases MariaDB shares (a branch committed from a second connection while
its preparing session is open, local_infile ON and OFF, a server SIGKILLed between PREPARE
and the decision) run beside their MariaDB peers, marked ``mysql_ci``.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterator

import pytest
from servers import DbServer
from support import (
    assert_exactly,
    connection_args,
    contents,
    events_df,
    ids_in,
    job_states,
    kill_driver_at,
    mode_case,
    mode_rows,
    seeded_table,
    stage_tables,
    xasink_cli,
    xasink_prepared,
)

from xasink import write_xa
from xasink.errors import PreflightError

#: README's list for MySQL: XA_RECOVER_ADMIN, and these on the database holding the table and
#: the journal (CREATE and DROP for the journal's tables and each staged job's table).
DATABASE_GRANTS = "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP"

pytestmark = pytest.mark.mysql_ci


@pytest.fixture
def least(mysql: DbServer) -> Iterator[DbServer]:
    """A fresh user and database with exactly README's grants, whose password login has
    never been cached: its first login is a full `caching_sha2_password` exchange."""
    name = f"xasink_least_{uuid.uuid4().hex[:6]}"
    password = "Least/Pa55:w@rd?"
    with mysql.admin_connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}`")
        cur.execute("CREATE USER %s@'%%' IDENTIFIED BY %s", (name, password))
        cur.execute("GRANT XA_RECOVER_ADMIN ON *.* TO %s@'%%'", (name,))
        cur.execute(f"GRANT {DATABASE_GRANTS} ON `{name}`.* TO %s@'%%'", (name,))
        cur.execute("SELECT plugin FROM mysql.user WHERE user = %s", (name,))
        assert cur.fetchone() == ("caching_sha2_password",)
        cur.execute("FLUSH PRIVILEGES")  # empties the password cache: no fast login
    user = dataclasses.replace(mysql, user=name, password=password, database=name)
    try:
        yield user
    finally:
        # A failed test may leave this user's branches prepared: they would hold locks the
        # DROP waits for, and XA RECOVER is server-wide.
        xasink_cli(user, "recover", "--grace", "0")
        with mysql.admin_connect() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE `{name}`")
            cur.execute("DROP USER %s@'%%'", (name,))


def test_a_user_with_only_the_listed_grants_logs_in_writes_and_recovers(spark, least):
    # xasink's JDBC connection is this user's first login since the cache was emptied: with
    # neither the server's RSA key nor TLS, the driver cannot send the password at all.
    first = f"ev_{uuid.uuid4().hex[:8]}"
    keyless = connection_args(dataclasses.replace(least, url_query=""))
    with pytest.raises(PreflightError, match="serverRsaPublicKeyFile=") as refused:
        write_xa(events_df(spark, 5, 1), table=first, create="if_missing", **keyless)
    assert least.password not in str(refused.value)
    assert least.url_query.startswith("serverRsaPublicKeyFile=")  # what README says to add
    args = connection_args(least)
    result = write_xa(events_df(spark, 500, 2), table=first, create="if_missing", **args)
    assert (result.rows, result.created, result.load_paths) == (500, True, ("load-data",))
    assert_exactly(least, first, range(500))

    for mode in ("append", "overwrite", "upsert", "merge"):
        df, options, want = mode_case(spark, mode)
        table = seeded_table(least, prefix=f"kv_{mode}")
        done = write_xa(df, table=table, **options, **args)
        assert job_states(least)[done.job_id] == "committed"
        assert contents(least, table) == want, mode

    # A driver killed before its decision leaves prepared branches this user must find
    # (XA RECOVER needs XA_RECOVER_ADMIN) and roll back.
    killed = f"ev_{uuid.uuid4().hex[:8]}"
    write_xa(events_df(spark, 1, 1), table=killed, create="if_missing", **args)
    with least.connect() as conn:
        conn.cursor().execute(f"DELETE FROM {killed}")
    kill_driver_at(least, killed, "before_decision")
    assert xasink_prepared(least) and ids_in(least, killed) == []
    recovered = xasink_cli(least, "recover", "--grace", "0")
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    assert least.password not in recovered.stdout + recovered.stderr
    assert_exactly(least, killed, [])


def test_a_small_staged_write_without_temporary_tables_commits_in_two_phases(spark, least, caplog):
    """README's grants have no CREATE TEMPORARY TABLES, which a small frame's staged job needs
    to stage inside its one transaction: it takes the two-phase path with a real staging
    table instead, commits exactly, and the process says once why and what to grant."""
    caplog.set_level(logging.WARNING, logger="xasink")
    args = connection_args(least)
    for _ in range(2):
        table = seeded_table(least, prefix="kv_small")
        rows, schema, options, want = mode_rows("upsert")
        df = spark.createDataFrame(rows, schema).cache()  # cached: Spark knows its size
        df.count()
        done = write_xa(df, table=table, **options, **args)
        assert (done.writer, done.branches) == ("driver", 1)
        assert job_states(least)[done.job_id] == "committed"
        assert contents(least, table) == want
    warnings = [r.getMessage() for r in caplog.records if "temporary table" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert (
        f"GRANT CREATE TEMPORARY TABLES ON `{least.database}`.* TO '{least.user}'" in (warnings[0])
    )
    assert least.password not in warnings[0]
    assert stage_tables(least) == [] and xasink_prepared(least) == []
