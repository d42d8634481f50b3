"""Whether a failover could lose a decision: `xasink check`'s look at how the server it
reads replicates.

A decision is durable once its COMMIT returns on the primary. A standby promoted after a
failover holds it only if the primary waited for that standby before answering: with
asynchronous replication a job whose writer was told "committed" can vanish with its rows,
and no recovery can bring it back. The check reads the server's replication settings (never
changes them) and warns where replicas are attached without that wait, or says why it
cannot tell."""

from __future__ import annotations

from collections.abc import Callable

from ..runtime.jdbc import JdbcConnection, query

LOST = "a failover to one can lose jobs decided here, rows and all"
#: The status variables that say a primary waits for a replica's acknowledgement.
SEMI_SYNC_ON = ("rpl_semi_sync_master_status", "rpl_semi_sync_source_status")


def _postgres(conn: JdbcConnection) -> str | None:
    names, commit, standbys, standby = query(
        conn,
        "SELECT current_setting('synchronous_standby_names'), "
        "current_setting('synchronous_commit'), (SELECT count(*) FROM pg_stat_replication), "
        "pg_is_in_recovery()",
    )[0]
    if bool(standby) or not int(standbys):
        return None  # a standby, or no standby attached: nothing a failover could take
    if not str(names).strip():
        why = "synchronous_standby_names is empty"
    elif str(commit) in ("off", "local"):
        why = f"synchronous_commit is {commit}"
    else:
        return None
    return (
        f"replication: {standbys} standby(s) replicate asynchronously ({why}): {LOST}. "
        "Set synchronous_standby_names to them, with synchronous_commit on or remote_apply"
    )


def _mysql(conn: JdbcConnection) -> str | None:
    if str(query(conn, "SELECT @@GLOBAL.log_bin")[0][0]) in ("0", "OFF"):
        return None  # no binary log: no replica reads this server
    # MariaDB's built-in semi-sync says rpl_semi_sync_master_*, MySQL's plugin *_source_*.
    status = query(conn, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_%_status'")
    if any(str(name).lower() in SEMI_SYNC_ON and str(on).upper() == "ON" for name, on in status):
        return None
    # SHOW PROCESSLIST lists other logins' sessions, replicas' included, to PROCESS only.
    replicas = sum(
        1 for row in query(conn, "SHOW PROCESSLIST") if str(row[4]).startswith("Binlog Dump")
    )
    if replicas:
        return (
            f"replication: {replicas} replica(s) read the binary log without semi-synchronous "
            f"replication: {LOST}. Turn on rpl_semi_sync_master_enabled (MariaDB) or "
            "rpl_semi_sync_source_enabled (MySQL) on the primary, and the replicas' side"
        )
    granted = query(
        conn,
        "SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES WHERE PRIVILEGE_TYPE = "
        "'PROCESS' AND GRANTEE = CONCAT('''', REPLACE(CURRENT_USER(), '@', '''@'''), '''')",
    )
    if int(granted[0][0]):
        return None
    return (
        "replication: cannot tell whether replicas read this server's binary log (this login "
        "sees only its own sessions; GRANT PROCESS lets xasink check tell). A replica without "
        f"semi-synchronous replication: {LOST}"
    )


_PROBES: dict[str, Callable[[JdbcConnection], str | None]] = {
    "postgres": _postgres,
    "mysql": _mysql,
}


def replication_warning(conn: JdbcConnection, dialect: str) -> str | None:
    """What a failover of this server could lose, or None (no replica, or one the primary
    waits for; a dialect this cannot read is not guessed at)."""
    probe = _PROBES.get(dialect)
    if probe is None:
        return None
    try:
        return probe(conn)
    except Exception as exc:  # a server that hides these: say so, never fail the check
        return f"replication: cannot tell how this server replicates ({str(exc)[:200]})"


__all__ = ["replication_warning"]
