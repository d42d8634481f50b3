"""A throwaway Apache Derby network server, for the generic dialect's tests, and reads of it
through Derby's own JDBC client (JPype), never through xasink's write path.

Debian's `libderby-java` (the engine and `derbynet.jar`, the network server) and
`libderbyclient-java` (the client and its `ClientXADataSource`) put the jars in
/usr/share/java; `make install` installs them. The server runs in a fresh temporary folder
on a free 127.0.0.1 port, in UTC (Derby's CURRENT_TIMESTAMP is the server's local time),
with Derby's built-in authentication on, so the app user's password is checked (and must be
masked) as on a real server. It starts in 2-3 s.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import servers

JARS_DIR = Path("/usr/share/java")
SERVER_JARS = ("derby.jar", "derbynet.jar")
CLIENT_JAR = JARS_DIR / "derbyclient.jar"
XA_DATASOURCE = "org.apache.derby.jdbc.ClientXADataSource"
DATABASE = "xasink_test"
#: Derby waits this long for a lock before it gives up (40XL1) and rolls the transaction back.
LOCK_WAIT_SECONDS = 20
_READY = "started and ready to accept connections"


@dataclass(frozen=True)
class DerbyServer:
    """Where the Derby server listens, and the app user's login."""

    host: str
    port: int
    user: str = servers.APP_USER
    password: str = field(default=servers.APP_PASSWORD, repr=False)
    database: str = DATABASE

    @property
    def jdbc_url(self) -> str:
        return f"jdbc:derby://{self.host}:{self.port}/{self.database};create=true"

    @property
    def process_env(self) -> dict[str, str]:
        """What a driver process or `xasink` command needs beyond the URL: the client jar
        (`XASINK_JARS`) and the XADataSource class (driver_process.py reads it)."""
        return {"XASINK_JARS": str(CLIENT_JAR), "XASINK_TEST_XA_DATASOURCE": XA_DATASOURCE}

    def database_args(self) -> dict[str, Any]:
        """`Database(...)`'s keywords for this server through the generic dialect."""
        return {
            "url": self.jdbc_url,
            "user": self.user,
            "password": self.password,
            "dialect": "generic",
            "xa_datasource": XA_DATASOURCE,
            "jars": [str(CLIENT_JAR)],
        }

    # -- reading it with Derby's own client ---------------------------------------------
    def _java(self) -> Any:
        from xasink.runtime.jvm import ensure_jvm

        ensure_jvm([str(CLIENT_JAR)])

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        """A plain JDBC connection (autocommit) through Derby's ClientDriver."""
        from xasink.runtime.jvm import jclass

        self._java()
        props = jclass("java.util.Properties")()
        props.setProperty("user", self.user)
        props.setProperty("password", self.password)
        conn = jclass("org.apache.derby.jdbc.ClientDriver")().connect(self.jdbc_url, props)
        try:
            yield conn
        finally:
            conn.close()

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows of `sql` as Python values (numbers, text, None)."""
        with self.connect() as conn:
            statement = conn.createStatement()
            results = statement.executeQuery(sql)
            width = results.getMetaData().getColumnCount()
            rows = []
            while results.next():
                rows.append(tuple(_python(results.getObject(i + 1)) for i in range(width)))
            statement.close()
            return rows

    def ids_in(self, table: str) -> list[int]:
        """The table's ids, sorted, each as often as it is stored."""
        return sorted(int(r[0]) for r in self.query(f'SELECT "id" FROM "{table}"'))

    def prepared(self) -> list[str]:
        """Every prepared (in-doubt) transaction Derby lists through its own XAResource's
        recover, as `formatId:gtrid:bqual` (xasink's or not)."""
        from xasink.runtime.jvm import jclass

        self._java()
        source = jclass(XA_DATASOURCE)()
        source.setServerName(self.host)
        source.setPortNumber(self.port)
        source.setDatabaseName(self.database)
        xa = source.getXAConnection(self.user, self.password)
        try:
            flags = 0x01000000 | 0x00800000  # TMSTARTRSCAN | TMENDRSCAN
            found = xa.getXAResource().recover(flags) or []
            return [
                f"{x.getFormatId()}:{bytes(x.getGlobalTransactionId()).decode(errors='replace')}"
                f":{bytes(x.getBranchQualifier()).decode(errors='replace')}"
                for x in found
            ]
        finally:
            xa.close()

    def version(self) -> str:
        with self.connect() as conn:
            return str(conn.getMetaData().getDatabaseProductVersion()).split(" ")[0]


def _python(value: Any) -> Any:
    if value is None:
        return None
    text = str(value.toString())
    try:
        return int(text)
    except ValueError:
        return text


def unavailable() -> str | None:
    """Why no Derby server can start here (None: it can)."""
    missing = [str(JARS_DIR / j) for j in (*SERVER_JARS, CLIENT_JAR.name)]
    missing = [j for j in missing if not Path(j).is_file()]
    if missing:
        return f"missing {', '.join(missing)} (make install: libderby-java libderbyclient-java)"
    if shutil.which("java") is None:
        return "no java on PATH"
    return None


@contextlib.contextmanager
def start_derby(timeout: float = 60.0) -> Iterator[DerbyServer]:
    """A Derby network server in a fresh folder on a free port, stopped and removed after."""
    why = unavailable()
    if why:
        raise servers.ServerUnavailable(why)
    with contextlib.ExitStack() as stack:
        home = servers._make_tmpdir(stack, "xasink-derby-", None)
        log = home / "server.log"
        user, password = servers.APP_USER, servers.APP_PASSWORD

        def argv(port: int) -> list[str]:
            return [
                "java",
                "-Xmx256m",
                "-XX:TieredStopAtLevel=1",
                "-Xshare:auto",
                "-Duser.timezone=UTC",
                f"-Dderby.system.home={home}",
                "-Dderby.connection.requireAuthentication=true",
                "-Dderby.authentication.provider=BUILTIN",
                f"-Dderby.user.{user}={password}",
                f"-Dderby.locks.waitTimeout={LOCK_WAIT_SECONDS}",
                "-cp",
                ":".join(str(JARS_DIR / j) for j in SERVER_JARS),
                "org.apache.derby.drda.NetworkServerControl",
                "start",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-noSecurityManager",
            ]

        def ready(_port: int) -> bool:
            try:
                return _READY in log.read_text(errors="replace")
            except OSError:
                return False

        proc, port = servers._start_process_on_free_port(
            argv, log, signal.SIGTERM, None, ready, timeout, "Derby network server"
        )
        stack.callback(proc.stop)
        servers._record_pid(home, proc.proc.pid)
        yield DerbyServer("127.0.0.1", port)
