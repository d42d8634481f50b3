"""A small staged write's temporary-stage probe only chooses a path: whatever error it
meets, the write takes the two-phase path and the process says why, once."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from fake_sql_errors import FakeSqlError

from xasink.driver.preflight import can_stage_temporarily
from xasink.spec import ConnectionSpec


class ProbeConnection:
    """A connection whose statements raise `error`; records commit mode and rollbacks."""

    def __init__(self, error: BaseException) -> None:
        self.error, self.autocommit, self.rollbacks = error, True, 0

    def setAutoCommit(self, on: bool) -> None:
        self.autocommit = on

    def rollback(self) -> None:
        self.rollbacks += 1

    def createStatement(self) -> ProbeConnection:
        return self

    def execute(self, sql: str) -> None:
        raise self.error


def _spec(name: str) -> ConnectionSpec:
    return ConnectionSpec(f"jdbc:mysql://db/{name}", user="u", password="pw", dialect="mysql")


READ_ONLY = "The MySQL server is running with the --read-only option so it cannot execute this"


@pytest.mark.parametrize(
    "error", [FakeSqlError("HY000", 1290, READ_ONLY), RuntimeError("the connection went away")]
)
def test_any_probe_error_falls_back_to_two_phases_with_one_warning(error, caplog):
    conn = ProbeConnection(error)
    journal = SimpleNamespace(schema="app")
    spec = _spec(f"fallback_{type(error).__name__}")
    with caplog.at_level(logging.WARNING, logger="xasink"):
        assert can_stage_temporarily(conn, journal, spec) is False  # type: ignore[arg-type]
        assert can_stage_temporarily(conn, journal, spec) is False  # type: ignore[arg-type]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert str(error) in warnings[0] and "commit in two phases" in warnings[0]
    assert conn.autocommit and conn.rollbacks == 2


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(1)])
def test_an_interrupt_during_the_probe_still_stops_the_write(interrupt):
    conn = ProbeConnection(interrupt)
    with pytest.raises(type(interrupt)):
        can_stage_temporarily(conn, SimpleNamespace(schema="app"), _spec("interrupt"))  # type: ignore[arg-type]
    assert conn.autocommit and conn.rollbacks == 1
