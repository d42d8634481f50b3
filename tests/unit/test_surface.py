"""The public values a caller builds: a Database hides its password and cannot change
under the caller's feet, the grouped properties refuse nonsense when they are made, and a
write's keywords are checked by name, as Python checks a signature's."""

from __future__ import annotations

import pickle

import pytest

from xasink import CommitProperties, ConfigurationError, Database, WriterProperties
from xasink.protocol.connecting import make_spec
from xasink.spec import write_options

SECRET = "s3cr3t-pw"


def test_a_database_never_shows_its_password() -> None:
    """(A password in the URL's user info is refused: test_masking.py.)"""
    db = Database(
        f"jdbc:postgresql://db/app?password={SECRET}",
        user="app",
        password=SECRET,
        properties={"sslpassword": SECRET, "pwd": SECRET, "passwd": SECRET, "ssl": "true"},
    )
    for text in (repr(db), str(db), repr([db]), f"{db!r}"):
        assert SECRET not in text, text
    assert "ssl" in repr(db) and "app" in repr(db)


def test_a_database_is_immutable_and_copies_what_it_is_given() -> None:
    properties, jars = {"ssl": "true"}, ["/a.jar"]
    db = Database("jdbc:postgresql://db/app", properties=properties, jars=jars)
    properties["ssl"], jars[0] = "false", "/b.jar"
    assert (dict(db.properties), db.jars) == ({"ssl": "true"}, ("/a.jar",))
    with pytest.raises(AttributeError):
        db.url = "jdbc:postgresql://other/app"  # type: ignore[misc]
    with pytest.raises(TypeError):
        db.properties["ssl"] = "false"  # type: ignore[index]
    same = Database("jdbc:postgresql://db/app", properties={"ssl": "true"}, jars=("/a.jar",))
    assert db == same and hash(db) == hash(same) and len({db, same}) == 1
    assert pickle.loads(pickle.dumps(db)) == db


def test_a_url_string_stands_for_a_database() -> None:
    assert Database.of("jdbc:mariadb://db/app") == Database("jdbc:mariadb://db/app")
    db = Database("jdbc:mariadb://db/app", user="u")
    assert Database.of(db) is db
    assert make_spec("jdbc:postgresql://db/app").dialect == "postgres"


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"url": ""}, "A database is a JDBC URL string"),
        ({"url": 5}, "got int"),
        ({"url": "jdbc:postgresql://db/app", "network_timeout": 0}, "network_timeout must be"),
        ({"url": "jdbc:postgresql://db/app", "connect_timeout": -1}, "connect_timeout must be"),
    ],
)
def test_a_database_refuses_what_cannot_connect(given: dict, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        Database(**given)


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: WriterProperties(batch_size=0), "batch_size must be at least 1"),
        (lambda: WriterProperties(driver_write_bytes=-1), "driver_write_bytes must be"),
        (lambda: CommitProperties(heartbeat_interval=0), "heartbeat_interval must be"),
        (lambda: CommitProperties(grace=-1), "grace must be 0 or above"),
        (lambda: CommitProperties(lock_wait_timeout=0), "lock_wait_timeout above 0"),
        (lambda: CommitProperties(retries=-1), "retries must be 0 or more"),
        (lambda: CommitProperties(parallelism=0), "parallelism 1 or more"),
    ],
)
def test_the_properties_refuse_nonsense_when_made(make, error: str) -> None:
    with pytest.raises(ConfigurationError, match=error):
        make()


def test_no_retries_is_a_choice() -> None:
    assert CommitProperties(retries=0, grace=0).retries == 0


def test_a_write_keyword_is_checked_by_name() -> None:
    assert write_options("write_xa", {"mode": "upsert", "key": "id"}) == {
        "mode": "upsert",
        "key": "id",
    }
    with pytest.raises(TypeError, match=r"write_xa\(\) got an unexpected keyword argument 'usr'"):
        write_options("write_xa", {"mode": "append", "usr": "app"})
    with pytest.raises(TypeError, match=r"'driver_write_bytes'.*writer_properties"):
        write_options("tx.write", {"driver_write_bytes": 0})
