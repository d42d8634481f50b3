"""Session-wide database server fixtures (see ``servers.py`` for the sources).

Servers start lazily, once per test session, on the first test that asks for
them. When no source can provide a server the dependent tests are skipped,
unless ``XASINK_TEST_REQUIRE_SERVERS=1`` (e.g. in CI), where they fail. MySQL and
MariaDB 11.8 (``mariadb11``) are the exception: each comes from a Debian unstable
root the harness builds once per machine, and when that build itself fails its
tests are skipped with one loud line in the summary, whatever the setting.

The ``db`` fixture runs a test on PostgreSQL, MariaDB 10.11, MariaDB 11.8 and
MySQL. The MySQL case runs only for tests marked ``mysql_ci`` (what proves
MySQL's own behaviour), unless ``XASINK_TEST_MYSQL=all`` runs every one, or
``XASINK_TEST_MYSQL=only`` (``make test-mysql``) every MySQL case and nothing
else. MariaDB 11.8 likewise: ``mariadb11_ci``, ``XASINK_TEST_MARIADB11=all|only``
(``make test-mariadb11``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:  # tests/ on sys.path (default rootdir-relative import mode)
    import servers
    from spark_archive import make_archive
except ImportError:  # tests/ imported as a package
    from tests import servers
    from tests.spark_archive import make_archive


#: pyspark picks classic or Connect for `functions.col` & co by a process-wide setting, so
#: a Connect client cannot share a process with the classic session the other tests use.
CONNECT_CLIENT = "connect_client"
MYSQL_CI = "mysql_ci"
MARIADB11_CI = "mariadb11_ci"
#: The kinds a run tests only where a test is marked for them, unless their variable says
#: ``all`` (every case) or ``only`` (their cases and nothing else): kind -> (variable, marker).
OPT_IN: dict[str, tuple[str, str]] = {
    "mysql": ("XASINK_TEST_MYSQL", MYSQL_CI),
    "mariadb11": ("XASINK_TEST_MARIADB11", MARIADB11_CI),
}
CI_POSTGRES = "ci_postgres"
FULL_ONLY = "full_only"
CI_ONE_SERVER = "ci_one_server"
#: The servers a ``ci_one_server`` test takes turns on in make test.
TURNS = ("postgres", "mariadb")
#: Where each pytest process records the servers it tested, for `python -m tests.servers_report`.
SERVERS_RECORD = Path(__file__).parent.parent / ".pytest_cache" / "xasink-servers.jsonl"
_unavailable: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Register markers so ``--strict-markers`` accepts them."""
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")
    config.addinivalue_line(
        "markers",
        f"{CONNECT_CLIENT}: Spark Connect client test; needs a pytest process of its own",
    )
    config.addinivalue_line(
        "markers",
        f"{MYSQL_CI}: runs on MySQL in every run (the rest of the MySQL cases: make test-mysql)",
    )
    config.addinivalue_line(
        "markers",
        f"{MARIADB11_CI}: runs on MariaDB 11.8 in every run (the rest of its cases: "
        "make test-mariadb11)",
    )
    config.addinivalue_line(
        "markers",
        f"{FULL_ONLY}: left out of make test (a repeat of a case it runs); make test-full runs it",
    )
    config.addinivalue_line(
        "markers",
        f"{CI_POSTGRES}: in make test, only the PostgreSQL case (a long test whose MariaDB "
        "case repeats the same code path; make test-full and make chaos run every database)",
    )
    config.addinivalue_line(
        "markers",
        f"{CI_ONE_SERVER}: in make test, the PostgreSQL or the MariaDB case of each set of "
        "parameters, by turns (a long test of the protocol, the same code on both; make "
        "test-full runs both)",
    )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the Connect client tests, with the command that runs them, when the same run
    also holds classic-session tests (`make test` runs both kinds, one process each)."""
    clients = [item for item in items if item.get_closest_marker(CONNECT_CLIENT)]
    if clients and len(clients) < len(items):
        reason = f"Spark Connect client tests need their own process: pytest -m {CONNECT_CLIENT}"
        for item in clients:
            item.add_marker(pytest.mark.skip(reason=reason))
    scopes = {kind: os.environ.get(var, "").strip() for kind, (var, _) in OPT_IN.items()}
    only = {kind for kind, scope in scopes.items() if scope == "only"}
    if only:
        dropped = [item for item in items if _opt_in_case(item) not in only]
    else:
        dropped = [
            item
            for item in items
            if (kind := _opt_in_case(item)) is not None
            and scopes[kind] != "all"
            and item.get_closest_marker(OPT_IN[kind][1]) is None
        ]
    if not only and not os.environ.get("XASINK_TEST_FULL"):
        dropped += [
            item
            for item in items
            if (item.get_closest_marker(CI_POSTGRES) and _database(item) not in (None, "postgres"))
            or item.get_closest_marker(FULL_ONLY)
        ]
        dropped += _off_turn(items)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = set(dropped)
        items[:] = [item for item in items if item not in gone]


def _off_turn(items: list[pytest.Item]) -> list[pytest.Item]:
    """The ``ci_one_server`` cases make test leaves out: of each set of parameters, the
    cases on :data:`TURNS` other than its turn's server. Turns go by the order the sets are
    collected in, so each server runs half of them, whatever their names; a set marked
    ``ci_postgres`` as well keeps its PostgreSQL case."""
    turns: dict[str, str] = {}
    off = []
    for item in items:
        database = _database(item)
        if database not in TURNS or item.get_closest_marker(CI_ONE_SERVER) is None:
            continue
        params = item.callspec.params  # type: ignore[attr-defined]
        rest = ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k != "db")
        group = f"{item.path}::{item.originalname}[{rest}]"  # type: ignore[attr-defined]
        turn = turns.setdefault(group, TURNS[len(turns) % len(TURNS)])
        # A `ci_postgres` set runs on PostgreSQL alone whatever its turn: dropped there
        # too, on a MariaDB turn, it would run nowhere.
        if database != turn and not item.get_closest_marker(CI_POSTGRES):
            off.append(item)
    return off


def _opt_in_case(item: pytest.Item) -> str | None:
    """The kind of :data:`OPT_IN` a test case runs against: its ``db`` (``mysql_family``,
    ``any_mariadb``, ``restartable``) parameter, or that kind's fixture it asks for by name."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    for name in ("db", "mysql_family", "any_mariadb", "restartable"):
        if params.get(name) in OPT_IN:
            return str(params[name])
    names = set(getattr(item, "fixturenames", ())) - set(params)  # not a parametrize argument
    return next((kind for kind in OPT_IN if kind in names), None)


def _database(item: pytest.Item) -> str | None:
    """The server kind a parametrized case runs against (None: not parametrized so)."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("db")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first test that starts a Spark driver: this machine's class archive for
    the drivers (tests/spark_archive.py), made once; `make unit` starts none, makes none."""
    if any(Path(item.path).parent.name != "unit" for item in session.items):
        make_archive()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which servers this run tested, and why a kind was not; record it for the report."""
    tested = servers.started_servers()
    if not tested and not _unavailable:
        return
    words = [f"{kind} {version}" for kind, version in sorted(tested.items())]
    words += [f"{kind} NOT TESTED ({why})" for kind, why in sorted(_unavailable.items())]
    terminalreporter.write_line("servers: " + "; ".join(words), bold=True)
    SERVERS_RECORD.parent.mkdir(parents=True, exist_ok=True)
    with SERVERS_RECORD.open("a") as record:
        record.write(json.dumps({"at": time.time(), "tested": tested, "not": _unavailable}) + "\n")


def _server(kind: servers.Kind, **settings: object) -> servers.DbServer:
    """Shared server, or skip/fail the test when none can be had."""
    try:
        return servers.shared_server(kind, **settings)
    except servers.ServerUnavailable as exc:
        if kind in servers.SID_KINDS:  # only its root's provisioning raises this: skip, loudly
            _unavailable[kind] = str(exc)
            pytest.skip(f"{kind} tests skipped: {exc}")
        if os.environ.get("XASINK_TEST_REQUIRE_SERVERS", "").strip() not in ("", "0"):
            pytest.fail(f"{kind} server required but unavailable: {exc}")
        pytest.skip(f"no {kind} server available: {exc}")


@pytest.fixture(scope="session")
def _db_servers() -> Iterator[None]:
    """Owns the shared servers: stops them when the session ends."""
    yield
    servers.stop_shared_servers()


def _server_fixture(name: str, kind: servers.Kind, doc: str, **settings: object) -> Any:
    """The session fixture `name`: the shared `kind` server started with `settings`, as the
    app user (`doc` is its docstring)."""

    def fixture(_db_servers: None) -> servers.DbServer:
        return _server(kind, **settings)

    fixture.__name__ = fixture.__qualname__ = name
    fixture.__doc__ = doc
    return pytest.fixture(scope="session", name=name)(fixture)


def _each_server(name: str, kinds: list[str], doc: str) -> Any:
    """The fixture `name`: each server fixture of `kinds` in turn (`doc`: its docstring)."""

    def fixture(request: pytest.FixtureRequest) -> servers.DbServer:
        server: servers.DbServer = request.getfixturevalue(request.param)
        return server

    fixture.__name__ = fixture.__qualname__ = name
    fixture.__doc__ = doc
    return pytest.fixture(params=kinds, name=name)(fixture)


postgres = _server_fixture(
    "postgres", "postgres", "PostgreSQL with max_prepared_transactions=100, as the app user."
)
mariadb = _server_fixture("mariadb", "mariadb", "MariaDB 10.11 (as installed), as the app user.")
mariadb11 = _server_fixture(
    "mariadb11",
    "mariadb11",
    "MariaDB 11.8 LTS with its defaults (innodb_snapshot_isolation ON; from a Debian unstable "
    "root built once per machine), as the app user.",
)
mysql = _server_fixture(
    "mysql",
    "mysql",
    "MySQL 9 (from a Debian unstable root built once per machine), as the app user.",
)
pg_no_xa = _server_fixture(
    "pg_no_xa",
    "postgres",
    "PostgreSQL with max_prepared_transactions=0 (two-phase commit refused).",
    max_prepared_transactions=0,
)
pg_sync_standby = _server_fixture(
    "pg_sync_standby",
    "postgres",
    "PostgreSQL waiting for a synchronous standby that never comes, for the sessions that ask "
    "to (SET synchronous_commit = on): one COMMIT PREPARED can be held open.",
    synchronous_standby_names="nobody",
)
db = _each_server(
    "db",
    ["postgres", "mariadb", "mariadb11", "mysql"],
    "Each supported server kind in turn (MySQL, MariaDB 11.8: see the module's docstring).",
)
mysql_family = _each_server(
    "mysql_family",
    ["mariadb", "mariadb11", "mysql"],
    "Each MySQL-protocol server in turn, for what only that family has.",
)
any_mariadb = _each_server(
    "any_mariadb",
    ["mariadb", "mariadb11"],
    "Each MariaDB in turn (10.11, 11.8), for what MariaDB does and MySQL does not.",
)


@pytest.fixture(scope="module")
def derby(_db_servers: None) -> Iterator[Any]:
    """An Apache Derby network server (tests/derby_server.py), for the generic dialect: its
    own kind, as it is read through Derby's client, not psycopg or pymysql."""
    from derby_server import start_derby

    try:
        with start_derby() as server:
            servers._versions["derby"] = server.version()  # the run's "servers:" line
            yield server
    except servers.ServerUnavailable as exc:
        _unavailable["derby"] = str(exc)
        if os.environ.get("XASINK_TEST_REQUIRE_SERVERS", "").strip() not in ("", "0"):
            pytest.fail(f"derby server required but unavailable: {exc}")
        pytest.skip(f"no derby server available: {exc}")


@pytest.fixture
def journal_schema(db: servers.DbServer) -> Iterator[str]:
    """A journal schema (MySQL: a database) of the test's own on each `db`, dropped
    afterwards (`support.own_journal_schema`)."""
    from support import own_journal_schema

    yield from own_journal_schema(db)


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark for the in-process tests (local[2,4]: tasks may be retried)."""
    from support import spark_builder

    session = spark_builder(short_lived=False).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
