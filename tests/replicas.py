"""A MariaDB primary and a replica of it, both throwaway servers, and the replica's
promotion: for the replication warning of `xasink check` and the failover runs.

The replica reads the primary's binary log from where it stood once both were provisioned
(each made its own app login and database), so it holds whatever the tests do next, XA
PREPARE included (MariaDB replicates a prepared branch as one, from 10.5). With `semi_sync`
the primary waits for the replica's acknowledgement before a COMMIT or a PREPARE returns,
as a failover that must lose nothing needs."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator

import servers
from support import run_sql

REPLICA_LOGIN = ("xasink_repl", "repl-pw-1")


def admin_of(db: servers.DbServer) -> servers.DbServer:
    """`db` as its administrator logs in."""
    return dataclasses.replace(db, user=db.admin_user, password=db.admin_password)


def until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f}s"
        time.sleep(0.1)


@contextlib.contextmanager
def mariadb_pair(semi_sync: bool = False) -> Iterator[tuple[servers.DbServer, servers.DbServer]]:
    """(primary, replica): a MariaDB 10.11 with its binary log on, and one replicating it;
    with `semi_sync`, once the primary waits for it."""
    waits = {"rpl_semi_sync_master_enabled": "ON", "rpl_semi_sync_master_timeout": 60000}
    with (
        servers.start_mariadb(
            log_bin="mariadb-bin", server_id=1, **(waits if semi_sync else {})
        ) as primary,
        servers.start_mariadb(
            log_bin="mariadb-bin",
            server_id=2,
            **({"rpl_semi_sync_slave_enabled": "ON"} if semi_sync else {}),
        ) as replica,
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
        if semi_sync:
            until(lambda: semi_sync_clients(primary) > 0, "the replica acknowledging")
        yield primary, replica


def semi_sync_clients(primary: servers.DbServer) -> int:
    rows = run_sql(primary, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")
    return int(rows[0][1]) if rows else 0


def replica_status(replica: servers.DbServer) -> dict[str, object]:
    """SHOW SLAVE STATUS as a dict ({} where the server replicates nothing)."""
    with contextlib.closing(replica.admin_connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        return dict(zip([d[0] for d in cur.description or ()], row or (), strict=False))


def promote_replica(replica: servers.DbServer) -> None:
    """Make the replica a primary, as a failover does: stop reading the dead primary, apply
    what it received, forget it, take writes."""
    run_sql(replica, "STOP SLAVE IO_THREAD")

    def applied() -> bool:
        status = replica_status(replica)
        return status.get("Master_Log_File") == status.get("Relay_Master_Log_File") and (
            status.get("Read_Master_Log_Pos") == status.get("Exec_Master_Log_Pos")
        )

    until(applied, "the replica applying what it received")
    run_sql(replica, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
