"""The generic dialect without a server: errors sorted by SQLSTATE (and the vendor codes of
servers that report a class-wide one), and a data source configured by its JavaBean
properties from the URL, never with a value in a message."""

from __future__ import annotations

import pytest
from fake_sql_errors import FakeSqlError

from xasink.dialects import get_dialect
from xasink.dialects.beans import configure, url_parts
from xasink.driver.preflight import preflight
from xasink.driver.request import JobRequest
from xasink.errors import ConfigurationError, JournalError
from xasink.spec import ConnectionSpec, TableRef
from xasink.tables.modes import ModeOptions

GENERIC = get_dialect("generic")


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
        ("40XL2", 30000, "lock"),  # Derby: the same, with deadlock tracing on
        ("57033", -911, "lock"),  # DB2: a deadlock or a timeout, not rolled back
        ("S00018", 1222, "lock"),  # SQL Server: lock request time out
        ("S0002", 208, "missing"),  # SQL Server without xopenStates
        ("S0001", 2714, "existing"),
        ("21000", 1222, "none"),  # MySQL's 1222 (column counts) behind the generic dialect
        ("HY000", 54, "none"),  # another server's 54: only Oracle's (61000) is ORA-00054
        ("42S02", 942, "missing"),  # X/Open's state says it, whatever the code
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
    with pytest.raises(ConfigurationError, match="attribute number 2 is not key=value"):
        url_parts("jdbc:derby://h/db;create=true;s3cret")


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


@pytest.mark.parametrize("password", ["Qx7&Zr=Kp9", "Qx7&Zr9"])
def test_a_password_with_an_ampersand_is_one_attribute_and_never_quoted(password):
    # Derby splits `;k=v` attributes at `;` alone: `&` and `=` belong to the value.
    url = f"jdbc:derby://h:1527/db;create=true;password={password};user=u"
    assert url_parts(url)[3] == [("create", "true"), ("password", password), ("user", "u")]
    source = FakeDataSource(attributes=True)
    configure(source, url, [])
    assert source.values["connectionAttributes"] == f"create=true;password={password};user=u"
    with pytest.raises(ConfigurationError) as refused:
        configure(FakeDataSource(attributes=False), url, [])
    message = str(refused.value)
    assert "has no property create, password, user." in message
    assert not any(part in message for part in {password, *password.replace("=", "&").split("&")})


def _racing(monkeypatch, dialect, *, created_after, tag, create_fails):
    """A journal whose jobs table appears after `created_after` looks (another first writer)."""
    from xasink.protocol import schema

    looks, created = [], []

    def exists(self, conn):
        looks.append(1)
        return len(looks) > created_after

    def create(self, conn):
        if create_fails:
            raise FakeSqlError("X0Y32", 30000)  # Derby: the table exists
        created.append(1)

    monkeypatch.setattr(schema.JournalLayout, "exists", exists)
    monkeypatch.setattr(schema.JournalLayout, "_stored_tag", lambda self, conn: tag)
    monkeypatch.setattr(schema.JournalLayout, "_create", create)
    monkeypatch.setattr(schema, "CREATION_RACE_WAIT", 0.5)
    monkeypatch.setattr(schema, "_CREATION_POLL", 0.01)
    return schema.JournalLayout(dialect.name, None, "", 5.0), created


@pytest.mark.parametrize(("tag", "create_fails"), [("a1b2c3d4", False), (None, True)])
def test_a_first_writer_without_a_creation_lock_waits_for_the_other_ones_journal(
    monkeypatch, tag, create_fails
):
    # The tag without the jobs table, or a table that exists already: another first writer
    # is creating the journal at this moment (no creation lock on the generic dialect).
    journal, created = _racing(
        monkeypatch, GENERIC, created_after=3, tag=tag, create_fails=create_fails
    )
    journal._create_first(None)
    assert created == []


def test_a_journal_that_never_appears_is_refused_after_a_bounded_wait(monkeypatch):
    journal, _ = _racing(monkeypatch, GENERIC, created_after=10**9, tag=None, create_fails=True)
    with pytest.raises(JournalError, match=r"half-created.*Try again"):
        journal._create_first(None)
    journal, _ = _racing(monkeypatch, GENERIC, created_after=10**9, tag="t", create_fails=False)
    with pytest.raises(JournalError, match=r"incomplete.*restored from a backup"):
        journal._create_first(None)


def test_under_a_creation_lock_the_tag_without_jobs_is_a_lost_table(monkeypatch):
    journal, _ = _racing(
        monkeypatch, get_dialect("postgres"), created_after=3, tag="t", create_fails=False
    )
    with pytest.raises(JournalError, match="incomplete"):
        journal._create_first(None)


def test_no_retention_round_after_a_job_where_lock_waits_cannot_be_bounded():
    # Derby's lock wait is the server's (no lock_wait_sql): a round could stall a writer.
    from types import SimpleNamespace

    from xasink.protocol import retention
    from xasink.protocol.schema import JournalLayout

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the round used the session ({name})")

    journal = JournalLayout("generic", None, "a1b2c3d4", 5.0)
    spec = SimpleNamespace(url="jdbc:derby://h/db", user=None, redact=str)
    assert retention.tend(journal, Untouchable(), spec) is None


def test_a_layout_upgrade_on_the_generic_dialect_is_idempotent(monkeypatch):
    # No IF NOT EXISTS in its DDL: every table, index and column of an upgrade may be there
    # already (an earlier layout has most; a crashed upgrade some more).
    import contextlib

    from xasink.dialects import generic
    from xasink.protocol import jobtables, schema

    ran = []

    def derby(conn, sql, params=()):
        ran.append(sql.split(" ", 2)[:2])
        if sql.startswith(("CREATE", "ALTER")):
            raise FakeSqlError("X0Y32", 30000)  # Derby: table, index or column exists
        if sql.startswith("DROP INDEX"):
            raise FakeSqlError("42X65", 30000)  # Derby: no such index
        return 0

    monkeypatch.setattr(schema, "execute", derby)
    monkeypatch.setattr(generic, "execute", derby)
    monkeypatch.setattr(schema, "network_timeout_lifted", lambda conn: contextlib.nullcontext())
    monkeypatch.setattr(jobtables, "record_plans", lambda journal, conn: None)
    schema.JournalLayout("generic", None, "a1b2c3d4", 5.0)._upgrade_steps(None)
    assert ["CREATE", "TABLE"] in ran and ["ALTER", "TABLE"] in ran
    assert ran[-1] == ["UPDATE", '"xasink_meta"']  # the new version, once all is there


def test_a_staged_append_in_a_transaction_is_refused_with_per_branch_appends_named():
    from types import SimpleNamespace

    from xasink.driver.preflight import preflight
    from xasink.tables.modes import ModeOptions

    request = SimpleNamespace(
        spec=SimpleNamespace(dialect="generic"),
        target=None,
        options=ModeOptions("append", stage_append=True),
    )
    with pytest.raises(ConfigurationError) as refused:
        preflight(None, None, request, None, 1)
    message = str(refused.value)
    assert "per_branch_appends=True" in message and "transaction" in message
    assert "writes mode='append' only" not in message  # it is an append


def test_schema_evolution_is_refused_before_anything_is_read() -> None:
    """schema_mode='merge' is not offered on the generic dialect (its ALTER TABLE ADD has
    no tested form there): refused like a staged mode, before the connection is used."""
    spec = ConnectionSpec("jdbc:derby://db/app", "app", "pw", dialect="generic")
    request = JobRequest(spec, TableRef("events"), ModeOptions(), schema_mode="merge")
    with pytest.raises(ConfigurationError, match=r"generic dialect does not evolve"):
        preflight(None, None, request, None, 1)  # type: ignore[arg-type]
