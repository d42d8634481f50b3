"""Throwaway PostgreSQL, MariaDB and MySQL servers for the integration tests.

The XA sink is only meaningful against real servers that can hold prepared
(two-phase) transactions, so every test database comes from one of these
sources, tried in order for each kind:

1. an existing server named by ``XASINK_TEST_POSTGRES_URL`` /
   ``XASINK_TEST_MARIADB_URL`` / ``XASINK_TEST_MARIADB11_URL`` /
   ``XASINK_TEST_MYSQL_URL`` (``postgresql://user:pw@host:port/db`` /
   ``mysql://user:pw@host:port/db``; that user must be able to create users,
   databases and tables and is used as the admin),
2. testcontainers, when a Docker engine answers (disable with
   ``XASINK_TEST_DOCKER=0``; no MySQL image),
3. private servers started from local binaries, in a fresh temporary
   directory on a free 127.0.0.1 port, removed afterwards: PostgreSQL and
   MariaDB 10.11 as installed; MariaDB 11.8 (``mariadb11``) and MySQL 9 from
   Debian unstable roots built once per machine (``provision_sid.sh``).

Every source is provisioned the same way: an unprivileged application user
:data:`APP_USER` (password :data:`APP_PASSWORD`, which deliberately needs
URL-encoding) owning / having ALL on the database :data:`APP_DATABASE`.
The returned :class:`DbServer` connects as that user; the admin credentials
stay available through :meth:`DbServer.admin_connect`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import glob
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote, urlsplit

if TYPE_CHECKING:
    import psycopg
    import pymysql.connections

    DbConnection = psycopg.Connection[Any] | pymysql.connections.Connection

Kind = Literal["postgres", "mariadb", "mariadb11", "mysql"]
MARIADB_KINDS: tuple[Kind, ...] = ("mariadb", "mariadb11")
#: The kinds whose binaries come from a Debian unstable root (``provision_sid.sh``).
SID_KINDS: tuple[Kind, ...] = ("mariadb11", "mysql")
Settings = Mapping[str, object]

APP_USER = "xasink_app"
APP_PASSWORD = "s3cr3t-Pa55word!"
APP_DATABASE = "xasink_test"

ENV_URL = {
    "postgres": "XASINK_TEST_POSTGRES_URL",
    "mariadb": "XASINK_TEST_MARIADB_URL",
    "mariadb11": "XASINK_TEST_MARIADB11_URL",
    "mysql": "XASINK_TEST_MYSQL_URL",
}
ENV_DOCKER = "XASINK_TEST_DOCKER"
POSTGRES_IMAGE = os.environ.get("XASINK_TEST_POSTGRES_IMAGE", "postgres:15")
MARIADB_IMAGE = os.environ.get("XASINK_TEST_MARIADB_IMAGE", "mariadb:10.11")
MARIADB11_IMAGE = os.environ.get("XASINK_TEST_MARIADB11_IMAGE", "mariadb:11.8")

DEFAULT_TIMEOUT = 60.0


class ServerUnavailable(RuntimeError):
    """No source can provide a server of this kind (callers may skip)."""


class ServerStartError(RuntimeError):
    """A server was found but failed to start or to become ready."""


# --------------------------------------------------------------------------
# DbServer
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class XaXid:
    """One MariaDB ``XA RECOVER`` row, kept as bytes so nothing is lost."""

    format_id: int
    gtrid: bytes
    bqual: bytes

    def __str__(self) -> str:
        """Render ``formatID:gtrid_length:bqual_length:data`` (lengths in bytes)."""
        data = (self.gtrid + self.bqual).decode("utf-8", "backslashreplace")
        return f"{self.format_id}:{len(self.gtrid)}:{len(self.bqual)}:{data}"

    @property
    def sql(self) -> str:
        """The xid as SQL (``X'..',X'..',fid``), safe to splice into XA COMMIT."""
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{self.format_id}"


@dataclass(frozen=True)
class DbServer:
    """Where a test database lives and how to reach it as app user or admin."""

    kind: Kind
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str
    admin_user: str
    admin_password: str = field(repr=False)
    source: Literal["env", "docker", "local"] = "local"
    #: Connection properties in the JDBC URL (``a=b&c=d``).
    url_query: str = ""
    #: psycopg / pymysql keywords every test connection adds (a TLS server's CA, say).
    client_options: tuple[tuple[str, Any], ...] = ()

    @property
    def is_mariadb(self) -> bool:
        """Either MariaDB (10.11 or 11.8): what differs from MySQL in the same dialect."""
        return self.kind in MARIADB_KINDS

    @property
    def dialect(self) -> Literal["postgres", "mysql"]:
        """The SQL family: MariaDB and MySQL speak one dialect (xasink's ``mysql``)."""
        return "postgres" if self.kind == "postgres" else "mysql"

    @property
    def jdbc_url(self) -> str:
        """JDBC URL without credentials (they go in connection properties)."""
        scheme = (
            "postgresql" if self.kind == "postgres" else "mariadb" if self.is_mariadb else "mysql"
        )
        query = f"?{self.url_query}" if self.url_query else ""
        return f"jdbc:{scheme}://{self.host}:{self.port}/{self.database}{query}"

    @property
    def jdbc_driver(self) -> str:
        """JDBC driver class matching :attr:`jdbc_url`."""
        if self.kind == "postgres":
            return "org.postgresql.Driver"
        return "org.mariadb.jdbc.Driver"

    def connect(self, **kw: Any) -> DbConnection:
        """Autocommit connection as the application user (``kw`` overrides)."""
        return _connect(
            self.kind,
            self.host,
            self.port,
            self.user,
            self.password,
            self.database,
            {**dict(self.client_options), **kw},
        )

    def admin_connect(self, **kw: Any) -> DbConnection:
        """Autocommit connection as the admin/superuser (``kw`` overrides)."""
        return _connect(
            self.kind,
            self.host,
            self.port,
            self.admin_user,
            self.admin_password,
            self.database,
            {**dict(self.client_options), **kw},
        )

    def xa_recover(self) -> list[XaXid]:
        """MariaDB: prepared XA branches (server-wide, any database)."""
        if self.kind == "postgres":
            raise TypeError("xa_recover() is for MySQL/MariaDB; use prepared_transactions()")
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("XA RECOVER")
            rows = cur.fetchall()
        xids = []
        for format_id, gtrid_len, bqual_len, data in rows:
            raw = data if isinstance(data, bytes) else str(data).encode()
            xids.append(
                XaXid(int(format_id), raw[:gtrid_len], raw[gtrid_len : gtrid_len + bqual_len])
            )
        return xids

    def prepared_transactions(self) -> list[str]:
        """Transactions left prepared: PG gids of this database; MariaDB xids.

        MariaDB entries are ``f"{formatID}:{gtrid_length}:{bqual_length}:{data}"``
        (see :class:`XaXid`); ``XA RECOVER`` is server-wide, not per database.
        """
        if self.kind != "postgres":
            return [str(x) for x in self.xa_recover()]
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT gid FROM pg_prepared_xacts"
                " WHERE database = current_database() ORDER BY prepared"
            )
            return [row[0] for row in cur.fetchall()]

    def rollback_prepared(self, prefix: str = "") -> int:
        """Roll back prepared transactions whose gid/gtrid starts with ``prefix``.

        Tests call this to avoid leaving locks behind on a shared server.
        Returns how many were rolled back.
        """
        count = 0
        if self.kind != "postgres":
            import pymysql

            with self.admin_connect() as conn, conn.cursor() as cur:
                for xid in self.xa_recover():
                    if xid.gtrid.startswith(prefix.encode()):
                        try:
                            cur.execute(f"XA ROLLBACK {xid.sql}")
                        except pymysql.err.OperationalError as exc:
                            # 1402 XA_RBROLLBACK: a detached read-only branch is
                            # listed by XA RECOVER but already rolled back.
                            if exc.args[0] != 1402:
                                raise
                        count += 1
            return count
        from psycopg import sql

        with self.admin_connect() as conn:
            for gid in self.prepared_transactions():
                if gid.startswith(prefix):
                    conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
                    count += 1
        return count

    def create_database(self, name: str) -> DbServer:
        """Create (if missing) a database the app user owns; return a server for it."""
        _create_app_database(self, name)
        return dataclasses.replace(self, database=name)


def _connect(
    kind: Kind,
    host: str,
    port: int,
    user: str,
    password: str,
    database: str,
    overrides: Mapping[str, Any],
) -> DbConnection:
    """Open an autocommit psycopg / pymysql connection; ``overrides`` win."""
    params: dict[str, Any] = dict(
        host=host, port=port, user=user, password=password, autocommit=True, connect_timeout=10
    )
    if kind == "postgres":
        import psycopg

        return psycopg.connect(**{**params, "dbname": database, **overrides})
    import pymysql

    mysql = {"database": database, "local_infile": True, "charset": "utf8mb4"}
    return pymysql.connect(**{**params, **mysql, **overrides})


# --------------------------------------------------------------------------
# Provisioning (same for every source)
# --------------------------------------------------------------------------


def _provision(server: DbServer, maintenance_db: str) -> None:
    """Create the app user and its database via the admin account (idempotent)."""
    if server.kind == "postgres":
        _provision_postgres(server, maintenance_db)
    else:
        _provision_mariadb(server, maintenance_db)


def _provision_postgres(server: DbServer, maintenance_db: str) -> None:
    """App role without special rights; it owns APP_DATABASE (so it may create)."""
    import psycopg
    from psycopg import sql

    with server.admin_connect(dbname=maintenance_db) as conn:
        role, password = sql.Identifier(server.user), sql.Literal(server.password)
        try:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role, password))
        except psycopg.errors.DuplicateObject:  # shared server, or a parallel worker
            conn.execute(sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, password))
        superuser = conn.execute(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        if not (superuser and superuser[0]):
            # A CREATEROLE/CREATEDB admin must be a member to give ownership away.
            with contextlib.suppress(Exception):
                conn.execute(
                    sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(server.user))
                )
    _create_app_database(dataclasses.replace(server, database=maintenance_db), server.database)


def _provision_mariadb(server: DbServer, maintenance_db: str) -> None:
    """App user with ALL on APP_DATABASE only.

    MariaDB 10.11 checks no privilege at all for ``XA RECOVER``, ``XA COMMIT``
    or ``XA ROLLBACK`` of a branch prepared by another (disconnected) session:
    plain USAGE is enough, even for a user who cannot touch the tables the
    branch wrote. So nothing beyond the database grant is needed. MySQL 8
    instead requires ``XA_RECOVER_ADMIN`` for XA RECOVER, granted only there.
    """
    with server.admin_connect(database=maintenance_db) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (server.user, server.password)
        )
        cur.execute("ALTER USER %s@'%%' IDENTIFIED BY %s", (server.user, server.password))
        cur.execute("SELECT VERSION()")
        row = cur.fetchone()
        if row and "mariadb" not in str(row[0]).lower():
            cur.execute("GRANT XA_RECOVER_ADMIN ON *.* TO %s@'%%'", (server.user,))
    _create_app_database(dataclasses.replace(server, database=maintenance_db), server.database)


def _create_app_database(server: DbServer, name: str) -> None:
    """Create ``name`` for the app user; ``server.database`` must already exist."""
    if server.kind == "postgres":
        import psycopg
        from psycopg import sql

        db, owner = sql.Identifier(name), sql.Identifier(server.user)
        with server.admin_connect() as conn:
            try:
                conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(db, owner))
            except psycopg.errors.DuplicateDatabase:
                conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(db, owner))
        return
    # Doubled % because pymysql %-formats the statement when given args.
    quoted = "`" + name.replace("`", "``").replace("%", "%%") + "`"
    with server.admin_connect() as conn, conn.cursor() as cur:
        cur.execute(
            f"CREATE DATABASE IF NOT EXISTS {quoted}"
            " CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
            (),
        )
        cur.execute(f"GRANT ALL PRIVILEGES ON {quoted}.* TO %s@'%%'", (server.user,))


# --------------------------------------------------------------------------
# Source 1: environment variables
# --------------------------------------------------------------------------


def _server_from_env(kind: Kind) -> tuple[DbServer, str] | None:
    """Parse ``XASINK_TEST_<KIND>_URL``; returns (server, maintenance db)."""
    url = os.environ.get(ENV_URL[kind], "").strip()
    if not url:
        return None
    parts = urlsplit(url)
    schemes = {"postgres": ("postgresql", "postgres")}.get(kind, ("mysql", "mariadb"))
    if parts.scheme.split("+")[0] not in schemes or not parts.hostname:
        raise ValueError(f"{ENV_URL[kind]} must look like {schemes[0]}://user:pw@host:port/db")
    admin_db = unquote(parts.path.lstrip("/")) or ("postgres" if kind == "postgres" else "mysql")
    server = DbServer(
        kind=kind,
        host=parts.hostname,
        port=parts.port or (5432 if kind == "postgres" else 3306),
        user=APP_USER,
        password=APP_PASSWORD,
        database=APP_DATABASE,
        admin_user=unquote(parts.username or ""),
        admin_password=unquote(parts.password or ""),
        source="env",
    )
    return server, admin_db


def _env_satisfies(server: DbServer, maintenance_db: str, settings: Settings) -> bool:
    """Whether an external server already has the requested settings.

    Its configuration cannot be changed from here, so e.g. a request for
    ``max_prepared_transactions=0`` must fall through to another source.
    """
    key = "dbname" if server.kind == "postgres" else "database"
    with server.admin_connect(**{key: maintenance_db}) as conn, conn.cursor() as cur:
        for name, wanted in settings.items():
            if server.kind == "postgres":
                cur.execute(f"SHOW {_guc_name(name)}")
            else:
                cur.execute(f"SELECT @@GLOBAL.{_guc_name(name)}")
            row = cur.fetchone()
            actual = str(row[0] if row else "").lower()
            if name == "max_prepared_transactions" and _setting_str(wanted) != "0":
                ok = actual not in ("", "0")
            else:
                ok = actual == _setting_str(wanted).lower()
            if not ok:
                warnings.warn(
                    f"{ENV_URL[server.kind]} server has {name}={actual},"
                    f" wanted {wanted}; trying other sources",
                    stacklevel=2,
                )
                return False
    return True


# --------------------------------------------------------------------------
# Source 2: testcontainers
# --------------------------------------------------------------------------


_docker_ok: bool | None = None


def _docker_socket_missing() -> bool:
    """True when the engine's unix socket plainly does not exist.

    Saves the SDK round trip (which also leaks a socket on failure) in the
    common no-Docker case. Other DOCKER_HOST forms (tcp://, ssh://) are pinged.
    """
    host = os.environ.get("DOCKER_HOST", "").strip()
    if host and not host.startswith("unix://"):
        return False
    path = host[len("unix://") :] if host else "/var/run/docker.sock"
    return not os.path.exists(path)


def docker_available() -> bool:
    """Quick, cached check that a Docker engine answers (ping, 3 s timeout)."""
    global _docker_ok
    if _docker_ok is None:
        disabled = os.environ.get(ENV_DOCKER, "").strip().lower() in ("0", "false", "no")
        if disabled or _docker_socket_missing():
            _docker_ok = False
        else:
            try:
                import docker

                client = docker.from_env(timeout=3)
                try:
                    _docker_ok = bool(client.ping())
                finally:
                    client.close()
            except Exception:
                _docker_ok = False
    return _docker_ok


def _start_docker(
    stack: contextlib.ExitStack, kind: Kind, settings: Settings, timeout: float
) -> tuple[DbServer, str]:
    """Start a container; settings become ``-c k=v`` / ``--k=v`` server options."""
    admin_password = secrets.token_hex(12)
    container: Any
    command: list[str]
    if kind == "postgres":
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:  # testcontainers < 4.10
            from testcontainers.postgres import PostgresContainer

        opts = {
            "max_connections": 200,
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **settings,
        }
        command = ["postgres"]
        for key, value in opts.items():
            command += ["-c", f"{_guc_name(key)}={_setting_str(value)}"]
        container = PostgresContainer(
            POSTGRES_IMAGE,
            username="xasink_admin",
            password=admin_password,
            dbname="postgres",
            driver=None,
        ).with_command(command)
        admin_user, maintenance_db, inner_port = "xasink_admin", "postgres", 5432
    else:
        try:
            from testcontainers.community.mysql import MySqlContainer
        except ImportError:  # testcontainers < 4.10
            from testcontainers.mysql import MySqlContainer

        image, fast = MARIADB11_IMAGE, _MARIADB11_FAST
        if kind == "mariadb":
            image, fast = MARIADB_IMAGE, _MARIADB_FAST
        opts = {**fast, **settings}
        command = [
            f"--{_guc_name(k).replace('_', '-')}={_setting_str(v)}" for k, v in opts.items()
        ] + ["--skip-log-bin"]
        container = MySqlContainer(
            image, username="root", password=admin_password, dbname=APP_DATABASE
        ).with_command(command)
        admin_user, maintenance_db, inner_port = "root", "mysql", 3306
    stack.enter_context(container)
    server = DbServer(
        kind=kind,
        host=container.get_container_host_ip(),
        port=int(container.get_exposed_port(inner_port)),
        user=APP_USER,
        password=APP_PASSWORD,
        database=APP_DATABASE,
        admin_user=admin_user,
        admin_password=admin_password,
        source="docker",
    )
    _wait_until(
        lambda: _probe(server, maintenance_db),
        timeout,
        lambda: f"{kind} container did not accept connections within {timeout:g}s",
        lambda: None,
    )
    return server, maintenance_db


# --------------------------------------------------------------------------
# Source 3: local binaries
# --------------------------------------------------------------------------

# MariaDB 11.8 keeps its own defaults (innodb_snapshot_isolation ON, utf8mb4 with
# utf8mb4_uca1400_ai_ci), so the tests meet what its users meet: the throwaway-data speedups
# (small, unsafe but fast InnoDB settings) and local_infile (ON, as the fast path needs) are
# all that differ.
_MARIADB11_FAST: dict[str, object] = {
    "innodb_buffer_pool_size": "32M",
    "innodb_log_file_size": "16M",
    "innodb_flush_log_at_trx_commit": 2,
    "innodb_doublewrite": 0,
    "max_connections": 200,
    "local_infile": 1,
}
# MariaDB 10.11: the same, with utf8mb4 as the server's character set.
_MARIADB_FAST: dict[str, object] = {
    **_MARIADB11_FAST,
    "character_set_server": "utf8mb4",
    "collation_server": "utf8mb4_general_ci",
}

# MySQL keeps its own defaults where a user's server would (the binary log, utf8mb4_0900_ai_ci,
# caching_sha2_password), so the tests meet what users meet; beside the throwaway-data speedups
# only local_infile differs (ON, as the fast path needs; the fallback's test turns it OFF).
_MYSQL_FAST: dict[str, object] = {
    "innodb_buffer_pool_size": "32M",
    "innodb_redo_log_capacity": "64M",
    "innodb_flush_log_at_trx_commit": 2,
    "innodb_doublewrite": "OFF",
    "sync_binlog": 0,
    "max_connections": 200,
    "mysqlx": "OFF",
    "local_infile": 1,
}

_PG_FAST: dict[str, object] = {
    "listen_addresses": "127.0.0.1",
    "max_connections": 200,
    "shared_buffers": "16MB",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "logging_collector": "off",
}


def _version_key(text: str) -> tuple[int, ...]:
    """Numeric version tuple from the first ``N.N`` in ``text``, for sorting."""
    match = re.search(r"(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def find_postgres_bindir() -> Path | None:
    """Newest directory holding both ``postgres`` and ``initdb``.

    Candidates: every PATH entry (symlinks resolved, so the sibling tools are
    found) and the Debian/Ubuntu layout ``/usr/lib/postgresql/*/bin``.
    """
    candidates: set[Path] = set()
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        exe = Path(entry or ".", "postgres")
        if exe.is_file():
            candidates.add(exe.resolve().parent)
    candidates.update(Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin"))
    best: tuple[tuple[int, ...], Path] | None = None
    for bindir in candidates:
        if not ((bindir / "postgres").is_file() and (bindir / "initdb").is_file()):
            continue
        try:
            out = subprocess.run(
                [str(bindir / "postgres"), "--version"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        key = _version_key(out.split("(PostgreSQL)")[-1])
        if best is None or key > best[0]:
            best = (key, bindir)
    return best[1] if best else None


def find_mariadb_binaries() -> tuple[Path, Path] | None:
    """``(mariadbd, mariadb-install-db)`` from PATH plus the sbin directories."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin"])
    server = shutil.which("mariadbd", path=path) or shutil.which("mysqld", path=path)
    install = shutil.which("mariadb-install-db", path=path) or shutil.which(
        "mysql_install_db", path=path
    )
    return (Path(server), Path(install)) if server and install else None


def _free_port() -> int:
    """A port that was free on 127.0.0.1 a moment ago (callers retry on races)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as() -> pwd.struct_passwd | None:
    """Unprivileged account for servers that refuse root (None: not root)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise ServerUnavailable("running as root but no 'postgres'/'nobody' account")


_PIDS_FILE = "xasink-pids"  # pids of the test process and the server


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale_tmpdirs(base: str, prefix: str) -> None:
    """Remove dirs left by a test process that was killed (no cleanup ran).

    Only when neither the process that made the dir nor its server lives on.
    """
    for path in Path(base).glob(prefix + "*"):
        try:
            pids = [int(p) for p in (path / _PIDS_FILE).read_text().split()]
        except (OSError, ValueError):
            continue
        if pids and not any(_pid_alive(pid) for pid in pids):
            shutil.rmtree(path, ignore_errors=True)


def _record_pid(tmp: Path, pid: int) -> None:
    with open(tmp / _PIDS_FILE, "a") as fh:
        fh.write(f"{pid}\n")


def _make_tmpdir(stack: contextlib.ExitStack, prefix: str, owner: pwd.struct_passwd | None) -> Path:
    """Fresh private temp dir, deleted when ``stack`` closes.

    Kept short because unix socket paths are limited to ~100 bytes.
    """
    base = tempfile.gettempdir() if len(tempfile.gettempdir()) < 60 else "/tmp"
    _sweep_stale_tmpdirs(base, prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    stack.callback(shutil.rmtree, path, ignore_errors=True)
    _record_pid(path, os.getpid())
    if owner is not None:
        os.chown(path, owner.pw_uid, owner.pw_gid)
    return path


_libc: Any = None
if sys.platform == "linux":
    with contextlib.suppress(OSError):
        _libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent(sig: int) -> Callable[[], None] | None:
    """preexec_fn making the server get ``sig`` if the test process dies.

    Covers kill -9 of pytest, where no cleanup code runs. Linux only; note the
    signal fires when the *thread* that started the server exits, so start
    servers from the main thread (pytest fixtures do).
    """
    if _libc is None:
        return None
    libc = _libc

    def preexec() -> None:
        libc.prctl(1, int(sig))  # PR_SET_PDEATHSIG

    return preexec


class _Process:
    """A server process we own: started in its own session, stopped on exit."""

    def __init__(
        self, argv: list[str], log: Path, stop_signal: int, run_as: pwd.struct_passwd | None
    ) -> None:
        self.argv = argv
        self.log = log
        self.stop_signal = stop_signal
        kw: dict[str, Any] = {}
        if run_as is not None:
            kw.update(user=run_as.pw_uid, group=run_as.pw_gid, extra_groups=[])
        with open(log, "ab") as out:
            # Own session: a terminal Ctrl-C reaches pytest (which tears
            # down cleanly) but not the servers directly.
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(signal.SIGKILL),
                **kw,
            )
        _live_processes.add(self)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        """Ask politely, then kill; idempotent."""
        _live_processes.discard(self)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)


_live_processes: set[_Process] = set()


@atexit.register
def _stop_leftovers() -> None:
    """Last resort if a context manager was never closed."""
    stop_shared_servers()
    for proc in list(_live_processes):
        proc.stop()


def _log_tail(path: Path, lines: int = 30) -> str:
    """Last lines of a server log, for error messages."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"


def _wait_until(
    probe: Callable[[], bool],
    timeout: float,
    describe: Callable[[], str],
    check_alive: Callable[[], None],
) -> None:
    """Poll ``probe`` until true; raise ServerStartError with ``describe()``."""
    deadline = time.monotonic() + timeout
    delay = 0.02
    while True:
        check_alive()
        if probe():
            return
        if time.monotonic() > deadline:
            raise ServerStartError(describe())
        time.sleep(delay)
        delay = min(delay * 1.5, 0.5)


def _probe(server: DbServer, maintenance_db: str) -> bool:
    """Whether the admin can log in over TCP yet."""
    key = "dbname" if server.kind == "postgres" else "database"
    try:
        with server.admin_connect(**{key: maintenance_db, "connect_timeout": 2}):
            return True
    except Exception:
        return False


_ADDRESS_IN_USE = re.compile(r"address already in use|errno 98|error: 98", re.I)


def _start_process_on_free_port(
    make_argv: Callable[[int], list[str]],
    log: Path,
    stop_signal: int,
    run_as: pwd.struct_passwd | None,
    ready: Callable[[int], bool],
    timeout: float,
    what: str,
    attempts: int = 5,
) -> tuple[_Process, int]:
    """Start a server on a fresh port, retrying when another process won the race."""
    for attempt in range(attempts):
        port = _free_port()
        offset = log.stat().st_size if log.exists() else 0
        proc = _Process(make_argv(port), log, stop_signal, run_as)

        def check_alive(proc: _Process = proc) -> None:
            if not proc.alive():
                raise _Exited()

        try:
            _wait_until(
                lambda port=port: ready(port),
                timeout,
                lambda: f"{what} not ready within {timeout:g}s; log tail:\n{_log_tail(log)}",
                check_alive,
            )
            return proc, port
        except _Exited:
            proc.stop()
            with open(log, "rb") as fh:
                fh.seek(offset)
                new_output = fh.read().decode(errors="replace")
            if _ADDRESS_IN_USE.search(new_output) and attempt + 1 < attempts:
                continue
            raise ServerStartError(
                f"{what} exited with code {proc.proc.returncode}; log tail:\n{_log_tail(log)}"
            ) from None
        except BaseException:
            proc.stop()
            raise
    raise AssertionError("unreachable")


class _Exited(Exception):
    """The server process ended before becoming ready."""


def _guc_name(name: str) -> str:
    """Validate a setting name before it is spliced into SQL or argv."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.]*", name):
        raise ValueError(f"bad setting name {name!r}")
    return name


def _setting_str(value: object) -> str:
    """Server-side spelling of a setting value (booleans as on/off)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def _start_local_postgres(
    stack: contextlib.ExitStack, settings: Settings, timeout: float
) -> tuple[DbServer, str]:
    """initdb + postgres in a temp dir; scram-sha-256 for TCP, trust on socket."""
    bindir = find_postgres_bindir()
    if bindir is None:
        raise ServerUnavailable("no PostgreSQL binaries (postgres + initdb) found")
    run_as = _run_as()
    tmp = _make_tmpdir(stack, "xasink-pg-", run_as)
    data = tmp / "data"
    admin_password = secrets.token_hex(12)
    pwfile = tmp / "pwfile"
    pwfile.write_text(admin_password + "\n")
    if run_as is not None:
        os.chown(pwfile, run_as.pw_uid, run_as.pw_gid)
    kw: dict[str, Any] = {}
    if run_as is not None:
        kw.update(user=run_as.pw_uid, group=run_as.pw_gid, extra_groups=[])
    init = subprocess.run(
        [
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "xasink_admin",
            f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256",
            "--auth-local=trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=max(timeout, 60),
        cwd=tmp,
        **kw,
    )
    pwfile.unlink()
    if init.returncode != 0:
        raise ServerStartError(
            f"initdb failed ({init.returncode}):\n{init.stdout[-2000:]}\n{init.stderr[-2000:]}"
        )
    opts = {**_PG_FAST, "unix_socket_directories": str(tmp), **settings}
    server = DbServer(
        kind="postgres",
        host="127.0.0.1",
        port=0,
        user=APP_USER,
        password=APP_PASSWORD,
        database=APP_DATABASE,
        admin_user="xasink_admin",
        admin_password=admin_password,
    )
    port = _run_postgres(stack, bindir, tmp, opts, run_as, server, timeout, "postgres")
    return dataclasses.replace(server, port=port), "postgres"


def _run_postgres(
    stack: contextlib.ExitStack,
    bindir: Path,
    tmp: Path,
    opts: Settings,
    run_as: pwd.struct_passwd | None,
    server: DbServer,
    timeout: float,
    what: str,
) -> int:
    """Run `postgres` on the data directory in `tmp` with `opts`, on a free port, until the
    stack closes; the port, once `server`'s login is taken there."""
    data, log = tmp / "data", tmp / "postgres.log"

    def argv(port: int) -> list[str]:
        cmd = [str(bindir / "postgres"), "-D", str(data), "-p", str(port)]
        for key, value in opts.items():
            cmd += ["-c", f"{_guc_name(key)}={_setting_str(value)}"]
        return cmd

    # SIGINT = fast shutdown: ends client sessions instead of waiting for them.
    proc, port = _start_process_on_free_port(
        argv,
        log,
        signal.SIGINT,
        run_as,
        lambda port: _probe(dataclasses.replace(server, port=port), "postgres"),
        timeout,
        what,
    )
    stack.callback(proc.stop)
    _record_pid(tmp, proc.proc.pid)
    return port


@dataclass(frozen=True)
class _MysqlFamily:
    """How to initialise and run one MySQL-protocol server from local binaries."""

    what: str
    #: The server binary, behind its loader when it needs one; ``--no-defaults`` follows it.
    server: list[str]
    #: Where the server finds its own files (messages, character sets, plugins).
    paths: list[str]
    #: The command (before the common options) and the flags (after them) that make a data
    #: directory whose root@localhost logs in on the socket with no password.
    initialise: list[str]
    init_flags: list[str]
    fast: Settings
    #: MySQL refuses to start unless ``secure_file_priv`` names a folder that exists.
    needs_file_folder: bool = False


def _mariadb_family(_tmp: Path) -> _MysqlFamily:
    binaries = find_mariadb_binaries()
    if binaries is None:
        raise ServerUnavailable("no MariaDB binaries (mariadbd + mariadb-install-db)")
    mariadbd, install_db = binaries
    return _MysqlFamily(
        what="mariadbd",
        server=[str(mariadbd)],
        paths=[],
        initialise=[str(install_db)],
        init_flags=_MARIADB_INIT_FLAGS,
        fast=_MARIADB_FAST,
    )


_MARIADB_INIT_FLAGS = ["--auth-root-authentication-method=normal", "--skip-test-db"]


def _through_loader(root: Path) -> list[str]:
    """The root's own dynamic loader and libraries, to run one of its binaries on this host
    (its C library is newer than the host's)."""
    loaders = sorted(root.glob("usr/lib/*-linux-gnu/ld-linux*.so.*"))
    if not loaders:
        raise ServerUnavailable(f"no dynamic loader in the Debian unstable root {root}")
    return [str(loaders[0]), "--library-path", str(loaders[0].parent)]


def _mariadb11_family(tmp: Path) -> _MysqlFamily:
    """mariadbd 11.8 of its cached Debian unstable root, run through that root's loader.

    Its mariadb-install-db (a shell script) runs the tools it finds under ``--basedir``, so
    it gets a base folder in ``tmp`` whose tools are small wrappers calling the root's
    binaries through the loader, and whose ``share`` is the root's."""
    root = sid_root("mariadb11")
    loader = _through_loader(root)
    base = tmp / "base"
    for tool in ("bin/my_print_defaults", "bin/resolveip", "sbin/mariadbd"):
        wrapper = base / tool
        wrapper.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(shlex.quote(arg) for arg in [*loader, str(root / "usr" / tool)])
        wrapper.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        wrapper.chmod(0o755)
    (base / "share").symlink_to(root / "usr/share")
    return _MysqlFamily(
        what="mariadbd",
        server=[*loader, str(root / "usr/sbin/mariadbd")],
        paths=[
            f"--basedir={base}",
            f"--lc-messages-dir={root / 'usr/share/mariadb'}",
            f"--character-sets-dir={root / 'usr/share/mariadb/charsets'}",
        ],
        initialise=["sh", str(root / "usr/bin/mariadb-install-db")],
        init_flags=_MARIADB_INIT_FLAGS,
        fast=_MARIADB11_FAST,
    )


def _mysql_family(_tmp: Path) -> _MysqlFamily:
    """mysqld of the cached Debian unstable root, run through that root's own loader and
    libraries: data, socket and port stay host paths."""
    root = sid_root("mysql")
    server = [*_through_loader(root), str(root / "usr/sbin/mysqld")]
    return _MysqlFamily(
        what="mysqld",
        server=server,
        paths=[
            f"--basedir={root / 'usr'}",
            f"--lc-messages-dir={root / 'usr/share/mysql'}",
            f"--character-sets-dir={root / 'usr/share/mysql/charsets'}",
            f"--plugin-dir={root / 'usr/lib/mysql/plugin'}",
        ],
        initialise=server,
        init_flags=["--initialize-insecure"],
        fast=_MYSQL_FAST,
        needs_file_folder=True,
    )


_PROVISION_SCRIPT = Path(__file__).with_name("provision_sid.sh")
_SID_NAMES = {"mariadb11": "MariaDB 11.8", "mysql": "MySQL"}
_sid_roots_lock = threading.Lock()
_sid_roots: dict[str, Path | ServerUnavailable] = {}


def sid_root(kind: Kind) -> Path:
    """The Debian unstable root holding ``kind``'s server (one of :data:`SID_KINDS`), built
    once per machine by ``provision_sid.sh``.

    Raises :class:`ServerUnavailable` with the script's own reason when it cannot be built;
    the outcome is remembered for the process, so a failure costs one attempt."""
    with _sid_roots_lock:
        if kind not in _sid_roots:
            name = _SID_NAMES[kind]
            try:
                done = _run_group(["bash", str(_PROVISION_SCRIPT), kind], timeout=1200)
            except (OSError, subprocess.SubprocessError) as exc:
                _sid_roots[kind] = ServerUnavailable(f"provisioning {name} failed: {exc}")
            else:
                if done.returncode == 0 and done.stdout.strip():
                    _sid_roots[kind] = Path(done.stdout.strip().splitlines()[-1])
                else:
                    why = " | ".join(done.stderr.strip().splitlines()[-3:]) or "no output"
                    _sid_roots[kind] = ServerUnavailable(f"provisioning {name} failed: {why}")
        found = _sid_roots[kind]
        if isinstance(found, ServerUnavailable):
            raise found
        return found


def mysql_root() -> Path:
    """The Debian unstable root holding MySQL (see :func:`sid_root`)."""
    return sid_root("mysql")


def _run_group(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run `argv` in a process group of its own; on timeout the whole group is killed (the
    script's debootstrap or apt-get too, which would otherwise keep its lock)."""
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _start_local_mariadb(
    stack: contextlib.ExitStack, settings: Settings, timeout: float
) -> tuple[DbServer, str]:
    """mariadb-install-db + mariadbd in a temp dir, with a real grant system."""
    return _start_local_mysql_family(stack, "mariadb", _mariadb_family, settings, timeout)


def _start_local_mariadb11(
    stack: contextlib.ExitStack, settings: Settings, timeout: float
) -> tuple[DbServer, str]:
    """MariaDB 11.8's mariadb-install-db + mariadbd (its Debian unstable root) in a temp dir."""
    return _start_local_mysql_family(stack, "mariadb11", _mariadb11_family, settings, timeout)


def _start_local_mysql(
    stack: contextlib.ExitStack, settings: Settings, timeout: float
) -> tuple[DbServer, str]:
    """mysqld --initialize-insecure + mysqld in a temp dir, with a real grant system."""
    return _start_local_mysql_family(stack, "mysql", _mysql_family, settings, timeout)


def _start_local_mysql_family(
    stack: contextlib.ExitStack,
    kind: Kind,
    make_family: Callable[[Path], _MysqlFamily],
    settings: Settings,
    timeout: float,
) -> tuple[DbServer, str]:
    """Initialise a data directory in a temp dir, start the server on a free port, and make
    a TCP admin account through root's password-less socket login."""
    tmp = _make_tmpdir(stack, "xasink-my-", None)
    family = make_family(tmp)
    data = tmp / "data"
    sock = tmp / "mysqld.sock"
    log = tmp / f"{family.what}.log"
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    opts = {**family.fast, **settings}
    server_opts = [f"--{_guc_name(k).replace('_', '-')}={_setting_str(v)}" for k, v in opts.items()]
    # --no-defaults must come first; it keeps the system my.cnf out.
    common = ["--no-defaults", f"--datadir={data}", "--skip-name-resolve", *as_root]
    if family.needs_file_folder:
        (tmp / "files").mkdir()
        common.append(f"--secure-file-priv={tmp / 'files'}")
    init = subprocess.run(
        [*family.initialise, *common, *family.paths, *family.init_flags, *server_opts],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=max(timeout, 60),
        cwd=tmp,
    )
    if init.returncode != 0:
        raise ServerStartError(
            f"{family.what} initialisation failed ({init.returncode}):\n"
            f"{init.stdout[-2000:]}\n{init.stderr[-2000:]}"
        )

    def argv(port: int) -> list[str]:
        return [
            *family.server,
            *common,
            *family.paths,
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--socket={sock}",
            f"--pid-file={tmp / 'server.pid'}",
            f"--tmpdir={tmp}",
            *server_opts,
        ]

    def socket_root_ready(_port: int) -> bool:
        import pymysql

        # Raw probe first: pymysql leaks its socket when connect() fails.
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(sock))
            except OSError:
                return False
        try:
            pymysql.connect(
                unix_socket=str(sock), user="root", password="", connect_timeout=2
            ).close()
            return True
        except Exception:
            return False

    proc, port = _start_process_on_free_port(
        argv, log, signal.SIGTERM, None, socket_root_ready, timeout, family.what
    )
    stack.callback(proc.stop)
    _record_pid(tmp, proc.proc.pid)

    # root@localhost (socket only, no password) creates a TCP admin account.
    import pymysql

    admin_password = secrets.token_hex(12)
    with (
        pymysql.connect(unix_socket=str(sock), user="root", password="", autocommit=True) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("CREATE USER 'xasink_admin'@'%%' IDENTIFIED BY %s", (admin_password,))
        cur.execute("GRANT ALL PRIVILEGES ON *.* TO 'xasink_admin'@'%' WITH GRANT OPTION")
    # MySQL's caching_sha2_password: the first JDBC login after each start (a restart
    # included) needs the server's RSA key, as README tells users to configure.
    key = data / "public_key.pem"
    server = DbServer(
        kind=kind,
        host="127.0.0.1",
        port=port,
        user=APP_USER,
        password=APP_PASSWORD,
        database=APP_DATABASE,
        admin_user="xasink_admin",
        admin_password=admin_password,
        url_query=f"serverRsaPublicKeyFile={key}" if key.exists() else "",
    )
    return server, "mysql"


# --------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------


@contextlib.contextmanager
def _start(kind: Kind, settings: Settings, timeout: float) -> Iterator[DbServer]:
    """Try env URL, then Docker, then local binaries; provision; clean up."""
    with contextlib.ExitStack() as stack:
        found = _server_from_env(kind)
        if found is not None and not _env_satisfies(found[0], found[1], settings):
            found = None
        if found is None and kind != "mysql" and docker_available():  # no MySQL image here
            found = _start_docker(stack, kind, settings, timeout)
        if found is None:
            starter = {
                "postgres": _start_local_postgres,
                "mariadb": _start_local_mariadb,
                "mariadb11": _start_local_mariadb11,
                "mysql": _start_local_mysql,
            }[kind]
            found = starter(stack, settings, timeout)
        server, maintenance_db = found
        _provision(server, maintenance_db)
        yield server


@contextlib.contextmanager
def start_postgres(
    *, max_prepared_transactions: int = 100, timeout: float = DEFAULT_TIMEOUT, **settings: object
) -> Iterator[DbServer]:
    """A PostgreSQL for the duration of the ``with`` block.

    ``settings`` are extra GUCs (``postgres -c name=value``). Use
    ``max_prepared_transactions=0`` for a server that refuses two-phase commit.
    """
    merged = {"max_prepared_transactions": max_prepared_transactions, **settings}
    with _start("postgres", merged, timeout) as server:
        yield server


@contextlib.contextmanager
def start_mariadb(*, timeout: float = DEFAULT_TIMEOUT, **settings: object) -> Iterator[DbServer]:
    """A MariaDB (10.11+) for the duration of the ``with`` block.

    ``settings`` are extra server options (``mariadbd --name=value``).
    """
    with _start("mariadb", settings, timeout) as server:
        yield server


@contextlib.contextmanager
def start_mariadb11(*, timeout: float = DEFAULT_TIMEOUT, **settings: object) -> Iterator[DbServer]:
    """A MariaDB 11.8 LTS (from its cached Debian unstable root, or the ``mariadb:11.8`` image)
    for the duration of the ``with`` block, with the server's own defaults
    (``innodb_snapshot_isolation`` ON).

    ``settings`` are extra server options (``mariadbd --name=value``). Raises
    :class:`ServerUnavailable` when the root cannot be provisioned.
    """
    with _start("mariadb11", settings, timeout) as server:
        yield server


@contextlib.contextmanager
def start_mysql(*, timeout: float = DEFAULT_TIMEOUT, **settings: object) -> Iterator[DbServer]:
    """A MySQL 9 (from the cached Debian unstable root) for the duration of the ``with`` block.

    ``settings`` are extra server options (``mysqld --name=value``). Raises
    :class:`ServerUnavailable` when the root cannot be provisioned.
    """
    with _start("mysql", settings, timeout) as server:
        yield server


_shared_lock = threading.Lock()
_shared_stack = contextlib.ExitStack()
_shared: dict[tuple[str, tuple[tuple[str, str], ...]], DbServer] = {}
_versions: dict[str, str] = {}


def shared_server(kind: Kind, **settings: object) -> DbServer:
    """One server per (kind, settings) for the whole process, started lazily.

    Stopped by :func:`stop_shared_servers` (called from the pytest session
    teardown, and at interpreter exit as a fallback).
    """
    key = (kind, tuple(sorted((k, _setting_str(v)) for k, v in settings.items())))
    with _shared_lock:
        if key not in _shared:
            starter: Callable[..., contextlib.AbstractContextManager[DbServer]]
            starter = {
                "postgres": start_postgres,
                "mariadb": start_mariadb,
                "mariadb11": start_mariadb11,
            }.get(kind, start_mysql)
            _shared[key] = _shared_stack.enter_context(starter(**settings))
            _versions[kind] = server_version(_shared[key])
        return _shared[key]


def server_version(server: DbServer) -> str:
    """What the server says it is, e.g. ``15.19`` or ``9.7.4-2``."""
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute("SHOW server_version" if server.kind == "postgres" else "SELECT VERSION()")
        row = cur.fetchone()
    return str(row[0]).split(" ")[0] if row else "?"


def started_servers() -> dict[str, str]:
    """Each kind this process started a shared server of, with its version."""
    return dict(_versions)


def stop_shared_servers() -> None:
    """Stop every server started by :func:`shared_server`."""
    with _shared_lock:
        _shared.clear()
        _shared_stack.close()


# --------------------------------------------------------------------------
# Restarting a private server (chaos tests)
# --------------------------------------------------------------------------


def _respawn(self: _Process, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
    """Stop this server abruptly (``sig`` to its whole process group: SIGKILL, or SIGQUIT
    for a PostgreSQL immediate shutdown), then start it again with the same command line:
    same data directory, same port, same log. The object keeps owning the new process, so
    its ``stop()`` (registered when the server was started) stops the new one."""
    pid = self.proc.pid
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        uid = os.geteuid()
    run_as = pwd.getpwuid(uid) if uid != os.geteuid() else None
    _kill_group(self, sig, timeout)
    self.__init__(self.argv, self.log, self.stop_signal, run_as)  # type: ignore[misc]


def _kill_group(server: _Process, sig: int, timeout: float) -> None:
    """``sig`` to a server's whole process group; return once every process of it is gone
    (bounded by ``timeout``, then SIGKILL)."""
    pid = server.proc.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
    try:
        server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        server.proc.wait(timeout)
    # Backends of a SIGQUIT/SIGKILLed postmaster may linger for a moment: wait (bounded).
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)


_Process.respawn = _respawn  # type: ignore[attr-defined]


def _owner(server: DbServer) -> _Process:
    """The live process of a server started from local binaries, found by its port."""
    if server.source != "local":
        raise ServerUnavailable(f"only a local-binaries server can be crashed ({server.source})")
    port_args = {f"--port={server.port}", str(server.port)}
    owners = [p for p in list(_live_processes) if port_args & set(p.argv) and p.alive()]
    if len(owners) != 1:
        raise ServerUnavailable(f"no single local server process on port {server.port}")
    return owners[0]


def restart_server(
    server: DbServer, sig: int = signal.SIGKILL, timeout: float = DEFAULT_TIMEOUT
) -> None:
    """Crash a server started from local binaries (SIGKILL of its process group by default,
    i.e. no shutdown at all) and start it again on the same data directory and port; return
    once it accepts connections again. Prepared transactions must survive this."""
    owner = _owner(server)
    owner.respawn(sig, timeout)  # type: ignore[attr-defined]

    def check_alive() -> None:
        if not owner.alive():
            raise ServerStartError(f"{server.kind} exited on restart:\n{_log_tail(owner.log)}")

    _wait_until(
        lambda: _probe(server, server.database),
        timeout,
        lambda: f"{server.kind} did not come back within {timeout:g}s:\n{_log_tail(owner.log)}",
        check_alive,
    )


# --------------------------------------------------------------------------
# A primary with a synchronous standby (failover tests)
# --------------------------------------------------------------------------

#: The standby's name (its ``cluster_name``, so its ``application_name`` on the primary),
#: which the primary's ``synchronous_standby_names`` waits for.
STANDBY_NAME = "xasink_standby"


@contextlib.contextmanager
def start_postgres_pair(
    *, max_prepared_transactions: int = 100, timeout: float = DEFAULT_TIMEOUT
) -> Iterator[tuple[DbServer, DbServer]]:
    """(primary, standby): two PostgreSQL servers from local binaries for the duration of the
    ``with`` block, the standby a hot standby streaming from the primary, which waits for it
    on every commit and PREPARE TRANSACTION (``synchronous_commit=on``,
    ``synchronous_standby_names`` naming it). The standby is made by ``pg_basebackup -R``
    once the app user and database exist, so both log in alike.

    ``fsync`` stays off, as on every test server: the failover tests kill processes, never
    the machine, and a write the kernel holds survives them."""
    settings = {
        "max_prepared_transactions": max_prepared_transactions,
        "wal_level": "replica",
        "max_wal_senders": 4,
        "synchronous_commit": "on",
    }
    with contextlib.ExitStack() as stack:
        primary, maintenance_db = _start_local_postgres(stack, settings, timeout)
        _provision(primary, maintenance_db)
        standby = _start_local_standby(stack, primary, settings, timeout)
        # Only now: the standby's copy of postgresql.auto.conf must not wait for a standby
        # of its own once it is promoted.
        with primary.admin_connect(dbname=maintenance_db) as conn:
            conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'")
            conn.execute("SELECT pg_reload_conf()")

        def synchronous() -> bool:
            with primary.admin_connect(dbname=maintenance_db) as conn:
                row = conn.execute(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                    (STANDBY_NAME,),
                ).fetchone()
            return row is not None and row[0] == "sync"

        _wait_until(
            synchronous,
            timeout,
            lambda: f"the standby never became synchronous:\n{_log_tail(_owner(standby).log)}",
            lambda: None,
        )
        yield primary, standby


def _start_local_standby(
    stack: contextlib.ExitStack, primary: DbServer, settings: Settings, timeout: float
) -> DbServer:
    """A hot standby of `primary` (``pg_basebackup -R`` over TCP, as its admin) in a temp dir
    of its own, on a free port; the returned server logs in as `primary` does."""
    bindir = find_postgres_bindir()
    if bindir is None:
        raise ServerUnavailable("no PostgreSQL binaries (postgres + initdb) found")
    run_as = _run_as()
    tmp = _make_tmpdir(stack, "xasink-pg-", run_as)
    data = tmp / "data"
    kw: dict[str, Any] = {}
    if run_as is not None:
        kw.update(user=run_as.pw_uid, group=run_as.pw_gid, extra_groups=[])
    backup = subprocess.run(
        [
            str(bindir / "pg_basebackup"),
            "-D",
            str(data),
            "-h",
            primary.host,
            "-p",
            str(primary.port),
            "-U",
            primary.admin_user,
            "--no-password",
            "--wal-method=stream",
            "--write-recovery-conf",
            "--checkpoint=fast",
            "--no-sync",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=max(timeout, 60),
        cwd=tmp,
        env={**os.environ, "PGPASSWORD": primary.admin_password},
        **kw,
    )
    if backup.returncode != 0:
        raise ServerStartError(
            f"pg_basebackup failed ({backup.returncode}):\n{backup.stderr[-2000:]}"
        )
    # A standby needs max_prepared_transactions (and max_connections) at least the
    # primary's: the same settings.
    opts = {
        **_PG_FAST,
        "unix_socket_directories": str(tmp),
        **settings,
        "cluster_name": STANDBY_NAME,
        "hot_standby": "on",
    }
    port = _run_postgres(stack, bindir, tmp, opts, run_as, primary, timeout, "postgres standby")
    return dataclasses.replace(primary, port=port)


def kill_server(server: DbServer, timeout: float = DEFAULT_TIMEOUT) -> None:
    """SIGKILL a server started from local binaries (its whole process group: no shutdown,
    no last word to its clients or standbys); return once every process of it is gone."""
    owner = _owner(server)
    _kill_group(owner, signal.SIGKILL, timeout)
    owner.stop()


def promote(standby: DbServer, timeout: float = DEFAULT_TIMEOUT) -> None:
    """Promote a standby (``pg_promote``, waiting for it); return once it takes writes."""
    with standby.admin_connect(dbname="postgres") as conn:
        row = conn.execute("SELECT pg_promote(true, %s)", (int(timeout),)).fetchone()
        assert row is not None and row[0], "pg_promote did not finish in time"
        row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        assert row is not None and not row[0], "the promoted standby is still in recovery"
