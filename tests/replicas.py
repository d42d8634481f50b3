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
from collections.abc import Iterator

import servers
from support import run_sql, until

REPLICA_LOGIN = ("xasink_repl", "repl-pw-1")


def admin_of(db: servers.DbServer) -> servers.DbServer:
    """`db` as its administrator logs in."""
    return dataclasses.replace(db, user=db.admin_user, password=db.admin_password)


#: How each kind is told to replicate and to wait: MariaDB's built-in semi-synchronous
#: replication, MySQL's plugins; MySQL 8.4 renamed SHOW MASTER STATUS and the replica's words.
_WORDS = {
    "mariadb": ("SHOW MASTER STATUS", "MASTER", "SLAVE"),
    "mysql": ("SHOW BINARY LOG STATUS", "REPLICATION SOURCE", "REPLICA"),
}


def _settings(kind: str, server_id: int, semi_sync: bool) -> dict[str, object]:
    settings: dict[str, object] = {"log_bin": "binlog", "server_id": server_id}
    if not semi_sync:
        return settings
    if kind == "mysql":
        plugin, side = (
            ("semisync_source", "source") if server_id == 1 else ("semisync_replica", "replica")
        )
        # loose_: the initialisation loads no plugin, and would refuse their settings
        settings |= {"plugin_load_add": f"{plugin}.so", f"loose_rpl_semi_sync_{side}_enabled": "ON"}
    else:
        side = "master" if server_id == 1 else "slave"
        settings[f"rpl_semi_sync_{side}_enabled"] = "ON"
    if server_id == 1:
        timeout = "loose_rpl_semi_sync_source" if kind == "mysql" else "rpl_semi_sync_master"
        settings[f"{timeout}_timeout"] = 60000
    return settings


@contextlib.contextmanager
def replica_pair(
    kind: servers.Kind = "mariadb", semi_sync: bool = False
) -> Iterator[tuple[servers.DbServer, servers.DbServer]]:
    """(primary, replica) of `kind` (MariaDB 10.11 or 11.8, MySQL 9): the primary's binary
    log on, the replica reading it; with `semi_sync`, once the primary waits for it."""
    start = {
        "mariadb": servers.start_mariadb,
        "mariadb11": servers.start_mariadb11,
        "mysql": servers.start_mysql,
    }[kind]
    family = "mysql" if kind == "mysql" else "mariadb"
    status, source, replica_word = _WORDS[family]
    with (
        start(**_settings(family, 1, semi_sync)) as primary,
        start(**_settings(family, 2, semi_sync)) as replica,
    ):
        user, password = REPLICA_LOGIN
        file, position = run_sql(
            primary,
            f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'",
            f"GRANT REPLICATION SLAVE ON *.* TO '{user}'@'%'",
            status,
        )[0][:2]
        prefix = "SOURCE" if family == "mysql" else "MASTER"
        extra = ", GET_SOURCE_PUBLIC_KEY=1" if family == "mysql" else ""
        run_sql(
            replica,
            f"CHANGE {source} TO {prefix}_HOST='127.0.0.1', {prefix}_PORT={primary.port}, "
            f"{prefix}_USER='{user}', {prefix}_PASSWORD='{password}', "
            f"{prefix}_LOG_FILE='{file}', {prefix}_LOG_POS={position}{extra}",
            f"START {replica_word}",
        )
        if semi_sync:
            until(lambda: semi_sync_clients(primary) > 0, "the replica acknowledging", 60.0)
        yield primary, replica


def mariadb_pair(
    semi_sync: bool = False,
) -> contextlib.AbstractContextManager[tuple[servers.DbServer, servers.DbServer]]:
    """A MariaDB 10.11 primary and its replica (`replica_pair`)."""
    return replica_pair("mariadb", semi_sync)


def semi_sync_clients(primary: servers.DbServer) -> int:
    rows = run_sql(primary, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_%_clients'")
    return sum(int(row[1]) for row in rows)


def replica_status(replica: servers.DbServer) -> dict[str, object]:
    """SHOW REPLICA STATUS as a dict, in MariaDB's words ({}: it replicates nothing)."""
    mysql = replica.kind == "mysql"
    with contextlib.closing(replica.admin_connect()) as conn, conn.cursor() as cur:
        cur.execute("SHOW REPLICA STATUS" if mysql else "SHOW SLAVE STATUS")
        row = cur.fetchone()
        names = [d[0].replace("Source", "Master") for d in cur.description or ()]
        return dict(zip(names, row or (), strict=False))


def promote_replica(replica: servers.DbServer) -> None:
    """Make the replica a primary, as a failover does: stop reading the dead primary, apply
    what it received, forget it, take writes."""
    word = "REPLICA" if replica.kind == "mysql" else "SLAVE"
    run_sql(replica, f"STOP {word} IO_THREAD")

    def applied() -> bool:
        status = replica_status(replica)
        return status.get("Master_Log_File") == status.get("Relay_Master_Log_File") and (
            status.get("Read_Master_Log_Pos") == status.get("Exec_Master_Log_Pos")
        )

    until(applied, "the replica applying what it received", 60.0)
    run_sql(replica, f"STOP {word}", f"RESET {word} ALL", "SET GLOBAL read_only = OFF")
