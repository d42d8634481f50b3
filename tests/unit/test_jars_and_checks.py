"""Driver jar discovery (in a temporary folder, never the machine's) and the cache of
preflight checks."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from xasink.driver.check_cache import CheckCache
from xasink.errors import DriverNotFoundError
from xasink.runtime import jars
from xasink.runtime.jars import HIDDEN_ENV, JARS_ENV, find_driver_jar, resolve_classpath
from xasink.spec import ConnectionSpec


@pytest.fixture
def tmp_path(tmp_path: Path) -> Path:
    """The temporary folder as found paths spell it (resolved: /tmp may be a link)."""
    return tmp_path.resolve()


def touch(folder: Path, *names: str) -> None:
    for name in names:
        (folder / name).write_bytes(b"")


def test_jar_discovery_prefers_the_newest_version_numerically(tmp_path):
    touch(tmp_path, "postgresql-42.2.1.jar", "postgresql-42.10.0.jar", "postgresql-42.9.9.jar")
    touch(tmp_path, "other.jar", "mariadb-java-client-3.1.4.jar", "mysql-connector-j-8.4.0.jar")
    assert find_driver_jar("postgres", [tmp_path]) == str(tmp_path / "postgresql-42.10.0.jar")
    assert find_driver_jar("mariadb", [tmp_path]) == str(tmp_path / "mariadb-java-client-3.1.4.jar")
    assert find_driver_jar("mysql", [tmp_path]) == str(tmp_path / "mysql-connector-j-8.4.0.jar")


def test_jar_discovery_sees_a_jar_added_or_removed_since_the_last_search(tmp_path):
    """The folder's listing is cached by its change time: a change of its jars shows."""
    import os
    import time

    def changed(seconds_ago: int) -> None:  # long enough ago for the listing to be cached
        stamp = time.time_ns() - seconds_ago * 1_000_000_000
        os.utime(tmp_path, ns=(stamp, stamp))

    touch(tmp_path, "postgresql-42.2.1.jar")
    changed(30)
    assert find_driver_jar("postgres", [tmp_path]) == str(tmp_path / "postgresql-42.2.1.jar")
    touch(tmp_path, "postgresql-42.7.3.jar")
    changed(20)
    assert find_driver_jar("postgres", [tmp_path]) == str(tmp_path / "postgresql-42.7.3.jar")
    (tmp_path / "postgresql-42.7.3.jar").unlink()
    (tmp_path / "postgresql-42.2.1.jar").unlink()
    changed(10)
    assert find_driver_jar("postgres", [tmp_path]) is None


def test_jar_discovery_skips_a_link_whose_jar_is_gone_though_its_folder_is_unchanged(tmp_path):
    """A cached listing's entries are checked on every call: a link into another folder
    whose jar was removed there is skipped, with no change to the linking folder."""
    import os
    import time

    elsewhere, linked = tmp_path / "elsewhere", tmp_path / "linked"
    elsewhere.mkdir()
    linked.mkdir()
    touch(elsewhere, "postgresql-42.7.3.jar")
    (linked / "postgresql.jar").symlink_to(elsewhere / "postgresql-42.7.3.jar")
    stamp = time.time_ns() - 30_000_000_000
    os.utime(linked, ns=(stamp, stamp))
    assert find_driver_jar("postgres", [linked]) == str(elsewhere / "postgresql-42.7.3.jar")
    (elsewhere / "postgresql-42.7.3.jar").unlink()
    assert linked.stat().st_mtime_ns == stamp  # the linking folder did not change
    assert find_driver_jar("postgres", [linked]) is None


def test_jar_discovery_takes_the_first_folder_that_has_one(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    touch(first, "postgresql-42.0.0.jar")
    touch(second, "postgresql-42.7.3.jar")
    missing = tmp_path / "missing"
    assert find_driver_jar("postgres", [missing, first, second]) == str(
        first / "postgresql-42.0.0.jar"
    )
    assert find_driver_jar("mariadb", [first, second]) is None


def test_hidden_folders_are_not_searched(tmp_path, monkeypatch):
    touch(tmp_path, "postgresql-42.7.3.jar")
    monkeypatch.setenv(HIDDEN_ENV, os.pathsep.join(["/nowhere", str(tmp_path)]))
    assert find_driver_jar("postgres", [tmp_path]) is None


def test_explicit_jars_win_and_must_exist(tmp_path, monkeypatch):
    jar = tmp_path / "custom-driver.jar"
    jar.write_bytes(b"")
    touch(tmp_path, "postgresql-42.7.3.jar")
    monkeypatch.setattr(jars, "search_dirs", lambda: [tmp_path])
    assert resolve_classpath(("postgres",), [str(jar)]) == [str(jar)]
    missing = str(tmp_path / "missing.jar")
    with pytest.raises(DriverNotFoundError, match=re.escape(f"JDBC jar(s) not found: {missing}.")):
        resolve_classpath(("postgres",), [str(jar), missing])


def test_jars_from_the_environment_count_as_explicit(tmp_path, monkeypatch):
    one, two = tmp_path / "one.jar", tmp_path / "two.jar"
    touch(tmp_path, "one.jar", "two.jar")
    monkeypatch.setenv(JARS_ENV, os.pathsep.join([str(two), ""]))
    assert resolve_classpath(("postgres",), [str(one)]) == [str(one), str(two)]


def test_without_explicit_jars_the_search_finds_the_first_kind(tmp_path, monkeypatch):
    touch(tmp_path, "mysql-connector-j-8.4.0.jar", "mariadb-java-client-3.1.4.jar")
    monkeypatch.setattr(jars, "search_dirs", lambda: [tmp_path])
    assert resolve_classpath(("mariadb", "mysql")) == [
        str(tmp_path / "mariadb-java-client-3.1.4.jar")
    ]
    assert resolve_classpath(("mysql",)) == [str(tmp_path / "mysql-connector-j-8.4.0.jar")]


def test_no_driver_found_names_the_places_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(jars, "search_dirs", lambda: [tmp_path])
    with pytest.raises(DriverNotFoundError) as caught:
        resolve_classpath(("postgres",))
    message = str(caught.value)
    assert message.startswith(
        f"No JDBC driver jar found (file names postgresql*.jar). Looked in: jars=[...] and "
        f"$XASINK_JARS; {tmp_path}. Supply one with Database(url, jars=['/path/driver.jar']) "
        '(CLI: --jars; format("xasink"): xasink.jars), set XASINK_JARS, or put it in '
    )
    assert message.endswith(
        "To install: apt-get install libpostgresql-jdbc-java, or download postgresql-<version>.jar."
    )
    with pytest.raises(DriverNotFoundError) as caught:
        resolve_classpath(())
    assert str(caught.value).startswith(  # write_xa has no jars keyword: its Database has
        "No JDBC driver jar given for this database. Pass Database(url, xa_datasource=..., "
        "jars=['/path/driver.jar']) or set XASINK_JARS. Looked in: "
    )


def test_check_cache_expires_and_forgets_per_connection():
    now = [0.0]
    cache = CheckCache(ttl=60, clock=lambda: now[0])
    one = ConnectionSpec(url="jdbc:postgresql://h/a", dialect="postgres")
    two = ConnectionSpec(url="jdbc:postgresql://h/b", dialect="postgres")
    cache.put(one, "server", 4)
    cache.put(two, "server", 2)
    now[0] = 59.9
    assert cache.get(one, "server") == 4
    with pytest.raises(RuntimeError), cache.forgotten_on_failure(one):
        raise RuntimeError("the call failed")
    assert cache.get(one, "server") is None and cache.get(two, "server") == 2
    now[0] = 60.0
    assert cache.get(two, "server") is None and len(cache) == 0
    uncached = CheckCache(ttl=0)
    uncached.put(one, "server", 4)
    assert uncached.get(one, "server") is None


def test_check_cache_keys_by_the_whole_spec_password_included():
    cache = CheckCache(ttl=60, clock=lambda: 0.0)
    spec = ConnectionSpec("jdbc:postgresql://h/a", "u", "old", dialect="postgres")
    cache.put(spec, ("table", "t"), ("a", "b"))
    assert cache.get(spec, ("table", "t")) == ("a", "b")
    assert cache.get(spec, ("table", "u")) is None
    rotated = ConnectionSpec("jdbc:postgresql://h/a", "u", "new", dialect="postgres")
    assert cache.get(rotated, ("table", "t")) is None
    cache.clear()
    assert len(cache) == 0


@pytest.mark.parametrize(
    ("extra", "tool_options", "collector"),
    [
        ("", "", "-XX:+UseSerialGC"),
        ("-Xmx2g -XX:+UseCompressedOops", "", "-XX:+UseSerialGC"),
        ("-XX:+UseG1GC -Xmx2g", "", "-XX:+UseG1GC"),
        ("-XX:+UseZGC", "", "-XX:+UseZGC"),
        ("", "-XX:+UseParallelGC", None),  # JAVA_TOOL_OPTIONS: the JVM adds it itself
        ("-XX:VMOptionsFile=/etc/jvm.options", "", None),
    ],
)
def test_the_jvm_runs_the_serial_collector_unless_told_another(
    monkeypatch, extra, tool_options, collector
):
    """Two collectors would stop the JVM from starting: one chosen in $XASINK_JVM_OPTIONS,
    in the JVM's own option variables or in an options file replaces ours, and the user's
    options come last, so theirs win over the defaults."""
    from xasink.runtime.jvm import JVM_OPTIONS_ENV, jvm_options

    monkeypatch.setenv(JVM_OPTIONS_ENV, extra)
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", tool_options)
    options = jvm_options()
    collectors = [o for o in options if o.startswith("-XX:+Use") and o.endswith("GC")]
    assert collectors == ([collector] if collector else [])
    assert options[len(options) - len(extra.split()) :] == extra.split()
    assert "-XX:TieredStopAtLevel=1" in options and "-Duser.timezone=UTC" in options
