"""`xasink check` warns where a failover could lose a decision: a primary whose replicas
it does not wait for (asynchronous replication), or says why it cannot tell.

A MariaDB primary with a replica reading its binary log: asynchronous, then semi-synchronous
(the primary waits for the replica's acknowledgement). MySQL's own binary log with no
replica, seen by a login that may not see other sessions (it cannot tell) and by one that
may (nothing to warn of). The PostgreSQL case, a synchronous standby made asynchronous, is
in tests/test_failover.py's pair. A warning never makes the check unhealthy.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Iterator

import pytest
import servers
from support import run_sql, xasink_cli

REPLICA_LOGIN = ("xasink_repl", "repl-pw-1")


def warnings_of(db: servers.DbServer) -> list[str]:
    done = xasink_cli(db, "check", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["healthy"] is True, report
    return list(report["warnings"])


def admin_of(db: servers.DbServer) -> servers.DbServer:
    return dataclasses.replace(db, user=db.admin_user, password=db.admin_password)


@contextlib.contextmanager
def mariadb_pair() -> Iterator[tuple[servers.DbServer, servers.DbServer]]:
    """A MariaDB primary (binary log on) and a replica reading it from its current position."""
    with (
        servers.start_mariadb(log_bin="mariadb-bin", server_id=1) as primary,
        servers.start_mariadb(server_id=2) as replica,
    ):
        user, password = REPLICA_LOGIN
        file, position = run_sql(
            primary,
            f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
            f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'",
            "SHOW MASTER STATUS",
        )[0][:2]
        run_sql(
            replica,
            f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={primary.port}, "
            f"MASTER_USER='{user}', MASTER_PASSWORD='{password}', MASTER_LOG_FILE='{file}', "
            f"MASTER_LOG_POS={position}",
            "START SLAVE",
        )
        yield primary, replica


def _until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_mariadb_replica_without_semi_sync_is_warned_of_until_the_primary_waits_for_it():
    with mariadb_pair() as (primary, replica):
        admin = admin_of(primary)

        def dumping() -> bool:
            return any(
                str(row[4]).startswith("Binlog Dump") for row in run_sql(admin, "SHOW PROCESSLIST")
            )

        _until(dumping, "the replica never connected")
        (warning,) = warnings_of(admin)
        assert "1 replica(s) read the binary log without semi-synchronous" in warning, warning
        assert "rpl_semi_sync_master_enabled" in warning

        (hidden,) = warnings_of(primary)  # the app login: no PROCESS
        assert "cannot tell whether replicas read" in hidden and "GRANT PROCESS" in hidden

        run_sql(admin, "SET GLOBAL rpl_semi_sync_master_enabled = ON")
        run_sql(
            admin_of(replica),
            "SET GLOBAL rpl_semi_sync_slave_enabled = ON",
            "STOP SLAVE IO_THREAD",
            "START SLAVE IO_THREAD",
        )

        def semi_sync() -> bool:
            rows = run_sql(admin, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
            return bool(rows) and int(rows[0][1]) > 0

        _until(semi_sync, "the replica never acknowledged semi-synchronously")
        assert warnings_of(admin) == []


@pytest.mark.mysql_ci
def test_mysqls_binary_log_without_a_replica_is_said_as_it_is_to_each_login(mysql):
    (hidden,) = warnings_of(mysql)  # the app login: XA_RECOVER_ADMIN, no PROCESS
    assert "cannot tell whether replicas read this server's binary log" in hidden, hidden
    assert "GRANT PROCESS" in hidden
    assert warnings_of(admin_of(mysql)) == []  # sees every session: no replica
