"""What to connect to and where to write: the public values a caller gives (`Database`,
`WriterProperties`, `CommitProperties`, `WriteOptions`), and the resolved, picklable
`ConnectionSpec` shipped to every executor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from types import MappingProxyType
from typing import Literal, TypedDict, cast

from . import defaults
from .errors import ConfigurationError
from .masking import MASK, SECRET_KEY, Redactor, has_login, mask_url, url_secrets


@dataclass(frozen=True)
class ConnectionSpec:
    """A database and its credentials. The password never appears in repr or messages."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    properties: tuple[tuple[str, str], ...] = ()
    dialect: str = "generic"
    xa_datasource: str | None = None
    jars: tuple[str, ...] = ()
    connect_timeout: int = 10
    network_timeout: float = defaults.NETWORK_TIMEOUT
    #: Statements run on every connection opened for this database (`Database.session_init`).
    session_init: tuple[str, ...] = ()

    @property
    def masked_url(self) -> str:
        return mask_url(self.url)

    @property
    def address(self) -> str:
        """Where the database is, as other databases' journals record it: the URL without
        its parameters (no password, no property) and without a password in it."""
        return self.masked_url.split("?", 1)[0]

    @property
    def redact(self) -> Redactor:
        """Masks this spec's passwords: its own, its password-like properties, its URL's."""
        return Redactor(secrets_of(self))

    def with_defaults(self, properties: tuple[tuple[str, str], ...]) -> ConnectionSpec:
        """This spec with more connection properties; the caller's own take precedence."""
        given = {k for k, _ in self.properties}
        extra = tuple((k, v) for k, v in properties if k not in given)
        return replace(self, properties=extra + self.properties) if extra else self

    def __repr__(self) -> str:
        return (
            f"ConnectionSpec(url={self.masked_url!r}, user={self.user!r}, dialect={self.dialect!r})"
        )


def properties_tuple(properties: Mapping[str, object] | None) -> tuple[tuple[str, str], ...]:
    return tuple((str(k), str(v)) for k, v in (properties or {}).items())


def secrets_of(*values: object) -> list[str]:
    """Every password `values` carry, for a Redactor: a `Database`'s or `ConnectionSpec`'s
    (its own, its password-like properties, its URL's), a URL string's, a mapping's
    password-like entries, and those of the items of a sequence and the fields of a
    dataclass (a write's plan or request holds its spec). A public call's arguments are
    such values: the secrets come from them, whatever the calling convention."""
    found: list[str] = []
    _collect(values, found, depth=4)
    return found


def _collect(value: object, found: list[str], depth: int) -> None:
    if isinstance(value, (Database, ConnectionSpec)):
        found += [value.password or "", *url_secrets(value.url)]
        found += [str(v) for k, v in dict(value.properties).items() if SECRET_KEY.search(str(k))]
    elif isinstance(value, str):
        found += url_secrets(value)
    elif depth <= 0 or isinstance(value, (bytes, bytearray, type)):
        return
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if SECRET_KEY.search(str(key)) and item is not None:
                found.append(str(item))
            else:
                _collect(item, found, depth - 1)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            _collect(item, found, depth - 1)
    elif is_dataclass(value):
        for f in fields(value):
            _collect(getattr(value, f.name), found, depth - 1)


@dataclass(frozen=True)
class TableRef:
    """A table name, optionally schema-qualified. Never pasted into SQL unquoted."""

    name: str
    schema: str | None = None

    @classmethod
    def parse(cls, table: str | Sequence[str]) -> TableRef:
        """`"t"`, `"schema.t"` or `("schema", "t")`; a tuple allows dots inside names."""
        if isinstance(table, str):
            parts = table.split(".", 1) if "." in table else [table]
        else:
            parts = list(table)
        if not 1 <= len(parts) <= 2 or any(not isinstance(p, str) or not p for p in parts):
            raise ConfigurationError(
                f"Table must be 'name', 'schema.name' or ('schema', 'name'); got {table!r}."
            )
        if any("\x00" in p for p in parts):
            raise ConfigurationError("Table and schema names cannot contain NUL characters.")
        return cls(name=parts[-1], schema=parts[0] if len(parts) == 2 else None)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


# -- the public values: a database, and the rare knobs of a write and of its commit -------
Properties = Mapping[str, object]


@dataclass(frozen=True)
class Database:
    """One database and its journal: everything about reaching it. Every entry point takes
    one (`write_xa`, `transaction`, `tx.write`, `foreach_batch`, `recover`), or a JDBC URL
    string, which stands for `Database(url)`. The password never shows in repr or messages.

    Args:
        url: a JDBC URL (`jdbc:postgresql://...`, `jdbc:mariadb://...`, `jdbc:mysql://...`).
        user, password: the login (or `?user=...&password=...` in the URL; a login before
            the host, `app:pw@host`, is refused: neither JDBC driver reads it there).
        properties: further JDBC connection properties.
        jars: the JDBC driver's jars; None finds them on this machine.
        dialect, xa_datasource: for another JDBC driver, its dialect ("postgres",
            "mysql" or "generic") and its XADataSource class.
        journal_schema: the schema of xasink's bookkeeping tables (the login's default).
        connect_timeout: seconds to connect.
        network_timeout: seconds to wait for any answer; above any lock wait, since a
            staged apply is bounded by TCP keepalive, not by it.
        session_init: a statement (or several) run on every connection a write opens,
            before anything else (Spark JDBC's `sessionInitStatement`): `SET ROLE ...`,
            `SET search_path ...`. xasink's own session settings follow it.
    """

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    properties: Properties = field(default_factory=dict)
    jars: Sequence[str] | None = None
    dialect: str | None = None
    xa_datasource: str | None = None
    journal_schema: str | None = None
    connect_timeout: int = defaults.CONNECT_TIMEOUT
    network_timeout: float = defaults.NETWORK_TIMEOUT
    session_init: str | Sequence[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ConfigurationError(
                "A database is a JDBC URL string (jdbc:postgresql://host/db) or "
                f"xasink.Database(url, ...); got {type(self.url).__name__}."
            )
        if has_login(self.url):  # the message as any redaction leaves it: shown whole
            raise ConfigurationError(
                f"{mask_url(self.url)} names a login before its host (user@host or "
                "user:***@host, the libpq habit), which neither pgjdbc nor MariaDB Connector/J "
                "reads: each takes it for part of the host name, and quotes it in its errors. "
                "Give the login apart: Database(url, user, password) in Python, the user and "
                "password options of format('xasink'), --user and --password-env VAR on the "
                "command line."
            )
        for name in ("connect_timeout", "network_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be a number of seconds above 0.")
        # Immutable: the caller's dict and list may change after the value is made.
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties or {})))
        jars = self.jars
        object.__setattr__(
            self, "jars", None if jars is None else tuple([jars] if isinstance(jars, str) else jars)
        )
        object.__setattr__(self, "session_init", _statements(self.session_init))

    def __hash__(self) -> int:  # equal values hash alike; `properties` is a mapping
        return hash((self.url, self.user, self.dialect, self.journal_schema))

    def __reduce__(self) -> tuple[type[Database], tuple[object, ...]]:
        """Pickled as its fields (a read-only mapping does not pickle): a foreachBatch
        function that holds it travels to a Spark Connect server."""
        values = (getattr(self, f.name) for f in fields(self))
        return Database, tuple(dict(v) if isinstance(v, Mapping) else v for v in values)

    @classmethod
    def of(cls, database: Database | str) -> Database:
        """`database` itself, or a URL string as a Database of its own."""
        return database if isinstance(database, Database) else cls(database)

    def __repr__(self) -> str:
        shown = [f"url={mask_url(self.url)!r}", f"user={self.user!r}"]
        if self.password:
            shown.append(f"password={MASK!r}")
        shown += [f"{k}={v!r}" for k, v in self._rest() if v]
        return f"Database({', '.join(shown)})"

    def _rest(self) -> list[tuple[str, object]]:
        props = {k: MASK if SECRET_KEY.search(str(k)) else v for k, v in self.properties.items()}
        return [
            ("properties", props),
            ("jars", self.jars),
            ("dialect", self.dialect),
            ("xa_datasource", self.xa_datasource),
            ("journal_schema", self.journal_schema),
        ]


def _statements(given: str | Sequence[str] | None) -> tuple[str, ...]:
    """`session_init` as a tuple of statements, each a non-empty string."""
    statements = (given,) if isinstance(given, str) else tuple(given or ())
    if not all(isinstance(s, str) and s.strip() and "\x00" not in s for s in statements):
        raise ConfigurationError(
            "session_init takes a SQL statement, or a list of them, each a non-empty string; "
            f"got {given!r}."
        )
    return statements


@dataclass(frozen=True)
class WriterProperties:
    """How a write loads its rows: rarely changed (delta-rs groups the same way).

    Args:
        batch_size: rows per JDBC batch when rows go through batched INSERTs.
        bulk: use the dialect's bulk loader (COPY, LOAD DATA LOCAL) where it can.
        max_branches: "auto" (about twice Spark's parallelism, or one branch written by the
            driver for a frame Spark estimates at most `driver_write_bytes`), a number, or
            None for one branch per partition.
        driver_write_bytes: the driver-written frame's size limit; 0 turns it off.
    """

    batch_size: int = defaults.BATCH_SIZE
    bulk: bool = True
    max_branches: int | Literal["auto"] | None = "auto"
    driver_write_bytes: int = defaults.DRIVER_WRITE_BYTES

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigurationError("batch_size must be at least 1.")
        if not isinstance(self.driver_write_bytes, int) or self.driver_write_bytes < 0:
            raise ConfigurationError("driver_write_bytes must be a whole number, 0 or above.")


@dataclass(frozen=True)
class CommitProperties:
    """How a job commits and recovers: rarely changed.

    Args:
        retries, parallelism: phase 2's retries of a transiently failed operation (after
            its first attempt), and its parallel connections.
        recover_first, grace: resolve what earlier jobs left on the table first, taking a
            job's owner for dead after `grace` seconds of silence.
        heartbeat_interval: seconds between the job's heartbeats.
        lock_wait_timeout: the longest any bookkeeping or apply statement waits for a lock.
    """

    retries: int = defaults.COMMIT_RETRIES
    parallelism: int = defaults.COMMIT_PARALLELISM
    recover_first: bool = True
    grace: float = defaults.GRACE
    heartbeat_interval: float = defaults.HEARTBEAT_INTERVAL
    lock_wait_timeout: float = defaults.LOCK_WAIT

    def __post_init__(self) -> None:
        if not self.heartbeat_interval > 0:
            raise ConfigurationError("heartbeat_interval must be a number of seconds above 0.")
        if not self.grace >= 0 or not self.lock_wait_timeout > 0:
            raise ConfigurationError("grace must be 0 or above, lock_wait_timeout above 0.")
        if self.retries < 0 or self.parallelism < 1:
            raise ConfigurationError("retries must be 0 or more, parallelism 1 or more.")


class WriteOptions(TypedDict, total=False):
    """How one write changes its table: the keywords of `write_xa`, `tx.write` and
    `foreach_batch`, written once here.

    mode: "append" (the default) inserts; "overwrite" replaces the contents; "upsert"
        inserts or updates by `key`; "merge" applies change rows (`op`, `op_values`). The
        last three stage the rows and change the table in one transaction after phase 2.
    key: the key columns of upsert and merge (the primary key of a created table).
    op: merge's column saying insert/update/delete; `op_values` maps its spellings.
    order: the column whose highest value per key wins (upsert, merge).
    create: "if_missing" (the default) creates the table from the DataFrame's schema;
        "never" refuses a missing table.
    create_table_options, create_table_column_types: for a table the write creates (Spark
        JDBC's createTableOptions, createTableColumnTypes): DDL after its column list
        ("WITH (fillfactor=70)", "ENGINE=InnoDB ..."), and column -> type to use instead
        of the mapped one ({"name": "VARCHAR(64)"}). Written into the DDL as given.
    schema_mode: "merge" adds the DataFrame's columns that the table lacks, as nullable
        columns of the types a created table would get (`create_table_column_types`
        first), before the write (delta-rs's schema_mode="merge"); None (the default)
        refuses such a column. Nothing is ever dropped, narrowed or retyped.
    writer_properties: how the rows load (`WriterProperties`).
    replace_where: with mode="overwrite", a SQL condition on the table's columns: only the
        rows it selects are replaced (Delta's replaceWhere); a row of the DataFrame outside
        it is refused before anything is written.
    pre_sql, post_sql: a SQL statement, or a list of them, run inside the transaction that
        applies the rows, before and after it: they commit or roll back with the rows.
    """

    mode: defaults.Mode
    key: str | Sequence[str] | None
    op: str | None
    order: str | None
    op_values: Mapping[str, str | Sequence[str]] | None
    create: defaults.Create
    create_table_options: str | None
    create_table_column_types: Mapping[str, str] | None
    schema_mode: defaults.SchemaMode | None
    writer_properties: WriterProperties | None
    replace_where: str | None
    pre_sql: str | Sequence[str] | None
    post_sql: str | Sequence[str] | None


def write_options(call: str, given: Mapping[str, object]) -> WriteOptions:
    """`given` as WriteOptions, or the TypeError Python gives for an unknown keyword."""
    unknown = sorted(set(given) - set(WriteOptions.__annotations__))
    if unknown:
        raise TypeError(
            f"{call}() got an unexpected keyword argument {unknown[0]!r}; a write takes "
            f"{', '.join(WriteOptions.__annotations__)} (see xasink.WriteOptions)."
        )
    return cast(WriteOptions, dict(given))
