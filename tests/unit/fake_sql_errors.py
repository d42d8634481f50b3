"""A java.sql.SQLException as xasink reads one (its SQLSTATE, vendor code, message and
cause), for the unit tests that sort errors without a driver."""

from __future__ import annotations


class FakeSqlError(Exception):
    """Duck-types a java.sql.SQLException."""

    def __init__(self, state: str | None, code: int = 0, message: str | None = None) -> None:
        super().__init__(f"SQLSTATE {state}" if message is None else message)
        self._state, self._code = state, code

    def getSQLState(self) -> str | None:
        return self._state

    def getErrorCode(self) -> int:
        return self._code

    def getMessage(self) -> str:
        return str(self)

    def getCause(self) -> None:
        return None
