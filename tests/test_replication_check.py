"""`xasink check` warns where a failover could lose a decision: a primary whose replicas
it does not wait for (asynchronous replication), or says why it cannot tell.

A MariaDB primary with a replica reading its binary log: asynchronous, then semi-synchronous
(the primary waits for the replica's acknowledgement). MySQL's own binary log with no
replica, seen by a login that may not see other sessions (it cannot tell) and by one that
may (nothing to warn of). A PostgreSQL primary with a synchronous standby, then with none
named. A warning never makes the check unhealthy.
"""

from __future__ import annotations

import json

import pytest
import servers
from replicas import admin_of, mariadb_pair, semi_sync_clients
from support import run_sql, until, xasink_cli


def warnings_of(db: servers.DbServer) -> list[str]:
    done = xasink_cli(db, "check", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["healthy"] is True, report
    return list(report["warnings"])


def test_a_mariadb_replica_without_semi_sync_is_warned_of_until_the_primary_waits_for_it():
    with mariadb_pair() as (primary, replica):
        admin = admin_of(primary)

        def dumping() -> bool:
            return any(
                str(row[4]).startswith("Binlog Dump") for row in run_sql(admin, "SHOW PROCESSLIST")
            )

        until(dumping, "the replica connecting", 60.0)
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
        until(lambda: semi_sync_clients(primary) > 0, "the replica acknowledging", 60.0)
        assert warnings_of(admin) == []


@pytest.mark.mysql_ci
def test_mysqls_binary_log_without_a_replica_is_said_as_it_is_to_each_login(mysql):
    (hidden,) = warnings_of(mysql)  # the app login: XA_RECOVER_ADMIN, no PROCESS
    assert "cannot tell whether replicas read this server's binary log" in hidden, hidden
    assert "GRANT PROCESS" in hidden
    assert warnings_of(admin_of(mysql)) == []  # sees every session: no replica


def test_a_postgres_standby_is_warned_of_once_the_primary_stops_waiting_for_it():
    with servers.start_postgres_pair() as (primary, _standby):
        admin = admin_of(primary)
        assert warnings_of(admin) == []  # synchronous: the primary waits for its standby
        assert warnings_of(primary) == []  # the app login sees the standby too
        run_sql(admin, "ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()")
        until(lambda: bool(warnings_of(primary)), "the reloaded setting", 60.0)
        (warning,) = warnings_of(primary)
        assert "1 standby(s) replicate asynchronously (synchronous_standby_names is empty)" in (
            warning
        ), warning
