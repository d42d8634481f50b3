"""Session-wide database server fixtures (see ``servers.py`` for the sources).

Servers start lazily, once per test session, on the first test that asks for
them. When no source can provide a server the dependent tests are skipped,
unless ``XASINK_TEST_REQUIRE_SERVERS=1`` (e.g. in CI), where they fail.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

try:  # tests/ on sys.path (default rootdir-relative import mode)
    from servers import (
        DbServer,
        Kind,
        ServerUnavailable,
        shared_server,
        stop_shared_servers,
    )
except ImportError:  # tests/ imported as a package
    from tests.servers import (
        DbServer,
        Kind,
        ServerUnavailable,
        shared_server,
        stop_shared_servers,
    )


#: pyspark picks classic or Connect for `functions.col` & co by a process-wide setting, so
#: a Connect client cannot share a process with the classic session the other tests use.
CONNECT_CLIENT = "connect_client"


def pytest_configure(config: pytest.Config) -> None:
    """Register markers so ``--strict-markers`` accepts them."""
    config.addinivalue_line("markers", "slow: long-running test (deselect with -m 'not slow')")
    config.addinivalue_line(
        "markers",
        f"{CONNECT_CLIENT}: Spark Connect client test; needs a pytest process of its own",
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


def _server(kind: Kind, **settings: object) -> DbServer:
    """Shared server, or skip/fail the test when none can be had."""
    try:
        return shared_server(kind, **settings)
    except ServerUnavailable as exc:
        if os.environ.get("XASINK_TEST_REQUIRE_SERVERS", "").strip() not in ("", "0"):
            pytest.fail(f"{kind} server required but unavailable: {exc}")
        pytest.skip(f"no {kind} server available: {exc}")


@pytest.fixture(scope="session")
def _db_servers() -> Iterator[None]:
    """Owns the shared servers: stops them when the session ends."""
    yield
    stop_shared_servers()


@pytest.fixture(scope="session")
def postgres(_db_servers: None) -> DbServer:
    """PostgreSQL with max_prepared_transactions=100, as the app user."""
    return _server("postgres")


@pytest.fixture(scope="session")
def mariadb(_db_servers: None) -> DbServer:
    """MariaDB 10.11+, as the app user."""
    return _server("mariadb")


@pytest.fixture(scope="session")
def pg_no_xa(_db_servers: None) -> DbServer:
    """PostgreSQL with max_prepared_transactions=0 (two-phase commit refused)."""
    return _server("postgres", max_prepared_transactions=0)


@pytest.fixture(scope="session")
def pg_sync_standby(_db_servers: None) -> DbServer:
    """PostgreSQL waiting for a synchronous standby that never comes, for the sessions
    that ask to (SET synchronous_commit = on): one COMMIT PREPARED can be held open."""
    return _server("postgres", synchronous_standby_names="nobody")


@pytest.fixture(params=["postgres", "mariadb"], ids=["postgres", "mariadb"])
def db(request: pytest.FixtureRequest) -> DbServer:
    """Each supported server kind in turn."""
    server: DbServer = request.getfixturevalue(request.param)
    return server


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One local Spark for the in-process tests (local[2,4]: tasks may be retried)."""
    from support import spark_builder

    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
