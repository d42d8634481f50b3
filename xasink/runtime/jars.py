"""Find JDBC driver jars: explicit paths, then `jars/`, then system locations."""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path

from ..errors import DriverNotFoundError

JARS_ENV = "XASINK_JARS"
#: Test-only: folders (os.pathsep-separated) whose jars this process must not see, to play
#: an executor on a machine that lacks the driver's jars (tests/test_cluster.py).
HIDDEN_ENV = "XASINK_TEST_HIDE_JAR_DIRS"
SYSTEM_DIRS: tuple[Path, ...] = (Path("/usr/share/java"), Path("/usr/local/share/java"))
_PROJECT_JARS = Path(__file__).resolve().parents[2] / "jars"

#: Which jar files hold which driver, by file name pattern.
DRIVER_JAR_PATTERNS: dict[str, tuple[str, ...]] = {
    "postgres": ("postgresql*.jar",),
    "mariadb": ("mariadb-java-client*.jar",),
    "mysql": ("mysql-connector-j*.jar", "mysql-connector-java*.jar"),
}

#: How to get each driver, for the error message.
INSTALL_HINTS: dict[str, str] = {
    "postgres": "apt-get install libpostgresql-jdbc-java, or download postgresql-<version>.jar",
    "mariadb": "apt-get install libmariadb-java, or download mariadb-java-client-<version>.jar",
    "mysql": "download mysql-connector-j-<version>.jar",
}


def search_dirs() -> list[Path]:
    """Folders searched after explicit jars, in order."""
    dirs = [_PROJECT_JARS, Path.cwd() / "jars", *SYSTEM_DIRS]
    unique: list[Path] = []
    for folder in dirs:
        if folder not in unique:
            unique.append(folder)
    return unique


def visible(path: str | Path) -> bool:
    """Whether a jar file exists here (and is not hidden by HIDDEN_ENV)."""
    resolved = Path(path).resolve()
    hidden = [Path(p).resolve() for p in os.environ.get(HIDDEN_ENV, "").split(os.pathsep) if p]
    return resolved.is_file() and not any(resolved.is_relative_to(d) for d in hidden)


def explicit_jars(jars: Sequence[str] | None) -> list[str]:
    """Jars named by the caller or by `XASINK_JARS`; each must exist."""
    named = list(jars or [])
    env = os.environ.get(JARS_ENV, "")
    named += [p for p in env.split(os.pathsep) if p]
    missing = [p for p in named if not visible(p)]
    if missing:
        raise DriverNotFoundError(
            f"JDBC jar(s) not found: {', '.join(missing)}. Check the paths given in jars=[...] "
            f"or in ${JARS_ENV}."
        )
    return [str(Path(p).resolve()) for p in named]


def _version_key(path: Path) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", path.name))


def find_driver_jar(kind: str, folders: Sequence[Path] | None = None) -> str | None:
    """The newest jar for `kind` in the first folder that has one."""
    for folder in folders if folders is not None else search_dirs():
        found = {p.resolve() for p in _matches(folder, DRIVER_JAR_PATTERNS[kind]) if visible(p)}
        if found:
            return str(max(found, key=_version_key))
    return None


#: A folder changed this recently is searched again on every call: a second change within
#: the file system's timestamp resolution would not show in its change time.
_SETTLED_NS = 2_000_000_000


def _matches(folder: Path, patterns: tuple[str, ...]) -> tuple[Path, ...]:
    """The entries of `folder` matching `patterns`, as listed (unresolved, unchecked). A
    system folder holds hundreds of jars and every write resolves its driver, so the listing
    is cached by which folder it is and its change time (a jar added, removed, renamed or
    relinked in it changes that); the caller checks each match again on every call."""
    try:
        info = folder.stat()
    except OSError:
        return ()
    if not stat.S_ISDIR(info.st_mode):
        return ()
    if time.time_ns() - info.st_mtime_ns < _SETTLED_NS:
        return _listing(folder, patterns)
    return _cached_listing(folder, patterns, (info.st_dev, info.st_ino, info.st_mtime_ns))


def _listing(folder: Path, patterns: tuple[str, ...]) -> tuple[Path, ...]:
    return tuple(p for pattern in patterns for p in folder.glob(pattern))


@functools.lru_cache(maxsize=64)
def _cached_listing(
    folder: Path, patterns: tuple[str, ...], identity: tuple[int, int, int]
) -> tuple[Path, ...]:
    del identity  # the cache key only: which folder, as of which change
    return _listing(folder, patterns)


def resolve_classpath(kinds: Sequence[str], jars: Sequence[str] | None = None) -> list[str]:
    """Explicit jars if any were given, else the first driver found for `kinds` (in order).

    Raises DriverNotFoundError naming every place searched.
    """
    classpath = explicit_jars(jars)
    if classpath:
        return classpath
    for kind in kinds:
        jar = find_driver_jar(kind)
        if jar:
            return [jar]
    places = "; ".join([f"jars=[...] and ${JARS_ENV}"] + [str(d) for d in search_dirs()])
    if not kinds:
        raise DriverNotFoundError(
            "No JDBC driver jar given for this database. Pass Database(url, xa_datasource=..., "
            f"jars=['/path/driver.jar']) or set {JARS_ENV}. Looked in: {places}."
        )
    patterns = ", ".join(p for k in kinds for p in DRIVER_JAR_PATTERNS[k])
    hints = "; ".join(INSTALL_HINTS[k] for k in kinds)
    raise DriverNotFoundError(
        f"No JDBC driver jar found (file names {patterns}). Looked in: {places}. Supply one "
        "with Database(url, jars=['/path/driver.jar']) (CLI: --jars; format(\"xasink\"): "
        f"xasink.jars), set {JARS_ENV}, or put it in "
        f"{_PROJECT_JARS}. To install: {hints}."
    )
