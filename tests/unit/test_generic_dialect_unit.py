"""The generic dialect without a server: errors sorted by SQLSTATE (and the vendor codes of
servers that report a class-wide one), and a data source configured by its JavaBean
properties from the URL, never with a value in a message."""

from __future__ import annotations

import pytest

from xasink.dialects import get_dialect
from xasink.dialects.beans import configure, url_parts
from xasink.driver.preflight import preflight
from xasink.driver.request import JobRequest
from xasink.errors import ConfigurationError
from xasink.spec import ConnectionSpec, TableRef
from xasink.tables.modes import ModeOptions

GENERIC = get_dialect("generic")


class FakeSqlError(Exception):
    """Duck-types a java.sql.SQLException as xasink reads one."""

    def __init__(self, state: str | None, code: int = 0) -> None:
        super().__init__(f"SQLSTATE {state}")
        self._state, self._code = state, code

    def getSQLState(self) -> str | None:
        return self._state

    def getErrorCode(self) -> int:
        return self._code

    def getCause(self) -> None:
        return None


@pytest.mark.parametrize(
    ("state", "code", "kind"),
    [
        ("42X05", 30000, "missing"),  # Derby: table/view does not exist
        ("42Y07", 30000, "missing"),  # Derby: the schema does not exist (yet)
        ("42S02", 208, "missing"),  # SQL Server: invalid object name
        ("42000", 942, "missing"),  # Oracle: ORA-00942
        ("X0Y32", 30000, "existing"),  # Derby: table or index exists
        ("42S01", 2714, "existing"),  # SQL Server
        ("40XL1", 30000, "lock"),  # Derby: lock wait timed out
        ("61000", 54, "lock"),  # Oracle: ORA-00054, resource busy
        ("42000", 1, "none"),
        ("23505", 20000, "none"),  # a duplicate key is none of them
    ],
)
def test_errors_are_sorted_by_sqlstate(state, code, kind):
    exc = FakeSqlError(state, code)
    found = {
        "missing": GENERIC.is_missing_table(exc),
        "existing": GENERIC.is_existing_table(exc),
        "lock": GENERIC.is_lock_timeout(exc),
    }
    assert [k for k, v in found.items() if v] == ([] if kind == "none" else [kind])


def test_url_parts():
    assert url_parts("jdbc:derby://h:1527/db;create=true;user=u") == (
        "h",
        1527,
        "db",
        [("create", "true"), ("user", "u")],
    )
    assert url_parts("jdbc:db2://h/x") == ("h", None, "x", [])
    assert url_parts("jdbc:vendor://[::1]:9/d?a=1&b=2") == ("::1", 9, "d", [("a", "1"), ("b", "2")])
    with pytest.raises(ConfigurationError, match="jdbc:<driver>://host:port/database"):
        url_parts("jdbc:oracle:thin:@h:1521/x")


class FakeDataSource:
    """Setters as JPype shows a Java bean's: one typed value each."""

    def __init__(self, attributes: bool) -> None:
        self.values: dict[str, object] = {}
        if attributes:
            self.setConnectionAttributes = lambda v: self._put("connectionAttributes", v, str)

    def _put(self, name: str, value: object, kind: type) -> None:
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise TypeError("no matching overload")
        self.values[name] = value

    def setServerName(self, v: object) -> None:
        self._put("serverName", v, str)

    def setPortNumber(self, v: object) -> None:
        self._put("portNumber", v, int)

    def setDatabaseName(self, v: object) -> None:
        self._put("databaseName", v, str)

    def setLoginTimeout(self, v: object) -> None:
        self._put("loginTimeout", v, int)


def test_a_data_source_without_a_url_is_configured_by_its_properties():
    source = FakeDataSource(attributes=True)
    configure(source, "jdbc:derby://h:1527/db;create=true", [("logintimeout", "5")])
    assert source.values == {
        "serverName": "h",
        "portNumber": 1527,
        "databaseName": "db",
        "loginTimeout": 5,  # a setter of the name, in any case, with its type
        "connectionAttributes": "create=true",  # Derby's: what has no setter of its own
    }


def test_a_property_without_a_setter_is_refused_without_its_value():
    with pytest.raises(ConfigurationError) as refused:
        configure(FakeDataSource(attributes=False), "jdbc:x://h:1/d", [("secretKey", "hunter2")])
    assert "has no property secretKey" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    with pytest.raises(ConfigurationError) as refused:
        configure(FakeDataSource(attributes=False), "jdbc:x://h:1/d", [("portNumber", "hunter2")])
    assert "takes neither text, a number nor true/false" in str(refused.value)
    assert "hunter2" not in str(refused.value)


def test_schema_evolution_is_refused_before_anything_is_read() -> None:
    """schema_mode='merge' is not offered on the generic dialect (its ALTER TABLE ADD has
    no tested form there): refused like a staged mode, before the connection is used."""
    spec = ConnectionSpec("jdbc:derby://db/app", "app", "pw", dialect="generic")
    request = JobRequest(spec, TableRef("events"), ModeOptions(), schema_mode="merge")
    with pytest.raises(ConfigurationError, match=r"generic dialect does not evolve"):
        preflight(None, None, request, None, 1)  # type: ignore[arg-type]
