"""What differs between databases: quoting, connection setup, preflight, journal DDL."""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import ConfigurationError
from ..runtime.jdbc import JdbcConnection, execute, query, sql_error_code, sql_state
from ..runtime.jvm import jclass
from ..spec import ConnectionSpec, TableRef
from ..xid import Xid

_HOST_PORT = re.compile(
    r"^jdbc:[a-z0-9:]+://(?:[^@/]*@)?\[?([^/\]?;,]+?)\]?(?::(\d+))?(?:[/?;,]|$)"
)


def advisory_key(name: str) -> int:
    """A lock name as a positive 63-bit number (PostgreSQL's advisory locks take one;
    MySQL's lock names are at most 64 characters)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


@dataclass(frozen=True)
class TableIndex:
    """A secondary index of a journal table, named `<table>_<label>_idx`. With `present`,
    it holds only the rows whose column `present` is not NULL (what a lookup of those few
    rows among a long history needs): a partial index where the server has them, else the
    key followed by a one-character prefix of that column, whose NULLs a range skips."""

    label: str
    columns: tuple[str, ...]
    present: str | None = None

    def name(self, table_name: str) -> str:
        return f"{table_name}_{self.label}_idx"


class Dialect:
    """What every dialect shares; each server's subclass (postgres, mysql, generic) is named."""

    name: ClassVar[str] = "base"
    jar_kinds: ClassVar[tuple[str, ...]] = ()
    datasource_classes: ClassVar[tuple[str, ...]] = ()
    #: The java.sql.Driver of each XADataSource class: it declares the connection properties.
    driver_classes: ClassVar[Mapping[str, str]] = {}
    default_port: ClassVar[int | None] = None
    quote_char: ClassVar[str] = '"'
    text_type: ClassVar[str] = "VARCHAR(1000)"
    long_text_type: ClassVar[str] = "VARCHAR(8000)"
    timestamp_type: ClassVar[str] = "TIMESTAMP"
    now_sql: ClassVar[str] = "CURRENT_TIMESTAMP"
    #: Whether a connection may open a new branch after preparing one (MariaDB: no, 1399).
    reuse_after_prepare: ClassVar[bool] = False
    #: Whether bulk loads into a table without a unique key contend (InnoDB's hidden row id).
    one_stream_without_key: ClassVar[bool] = False
    #: The schema a session's temporary tables live in (None: the table's own, as MySQL
    #: keeps them; PostgreSQL's `pg_temp` alias names the session's temporary schema).
    temporary_schema: ClassVar[str | None] = None
    #: How a temporary table is dropped without ending the transaction (MySQL commits on a
    #: plain DROP TABLE; DROP TEMPORARY TABLE does not).
    drop_temporary: ClassVar[str] = "DROP TABLE"
    #: A one-branch staged job may stage in a temporary table (else: the two-phase path).
    temporary_tables: ClassVar[bool] = False
    #: A query of the schema a table named without one lives in (None: unknown).
    current_schema_sql: ClassVar[str | None] = None
    #: Whether overwrite, upsert and merge (staging, an upsert, a joined DELETE, an apply
    #: lock) can run here, and schema_mode='merge' (`driver.preflight` refuses them else).
    stages: ClassVar[bool] = True
    evolves: ClassVar[bool] = True
    #: `Database(properties=...)` go to the data source's setters, not the URL (`beans`).
    bean_properties: ClassVar[bool] = False
    #: The JDBC driver's connection property naming the CA file TLS trusts (None: unknown).
    tls_ca_property: ClassVar[str | None] = None
    #: Whether `lock_session` locks (else two first writers of a journal race: `schema`).
    session_locks: ClassVar[bool] = False

    # -- identifiers -----------------------------------------------------------------
    def quote(self, identifier: str) -> str:
        """Quote one identifier by doubling the quote character; NUL is refused."""
        if "\x00" in identifier:
            raise ConfigurationError("Identifiers cannot contain NUL characters.")
        q = self.quote_char
        return q + identifier.replace(q, q + q) + q

    def qualified(self, table: TableRef) -> str:
        if table.schema:
            return f"{self.quote(table.schema)}.{self.quote(table.name)}"
        return self.quote(table.name)

    def column_key(self, column: str) -> str:
        """How the database compares column names (exact, once quoted)."""
        return column

    # -- connecting ------------------------------------------------------------------
    def host_port(self, url: str) -> tuple[str, int] | None:
        """Where the URL points, for a fast reachability check (None if unknown)."""
        match = _HOST_PORT.match(url)
        if not match or "=" in match.group(1):  # e.g. MySQL's address=(host=h)(port=p)
            return None
        port = match.group(2) or self.default_port
        return (match.group(1), int(port)) if port else None

    def datasource_url(self, spec: ConnectionSpec, datasource_class: str) -> str:
        """The URL to hand the XADataSource, with connection properties appended."""
        return spec.url

    def new_datasource(self, spec: ConnectionSpec, datasource_class: str) -> Any:
        ds = jclass(datasource_class)()
        url = self.datasource_url(spec, datasource_class)
        for setter in ("setURL", "setUrl"):
            if hasattr(ds, setter):
                getattr(ds, setter)(url)
                break
        else:
            raise ConfigurationError(
                f"{datasource_class} has no setURL/setUrl; name an XADataSource that takes a URL."
            )
        if spec.user is not None:
            ds.setUser(spec.user)
        if spec.password is not None:
            ds.setPassword(spec.password)
        return ds

    def branch_properties(self) -> tuple[tuple[str, str], ...]:
        """Connection properties only the executors' branch connections need."""
        return ()

    def session_sql(self) -> list[str]:
        """Statements run on every new connection, before any branch starts.

        PostgreSQL and MySQL/MariaDB sessions also fix READ COMMITTED: the protocol's
        transactions read, then wait for a lock (the apply lock, a job or mark row), then
        write rows that may have changed meanwhile (another apply, a heartbeat). At
        READ COMMITTED each statement reads the latest committed rows; under a snapshot
        (PostgreSQL's REPEATABLE READ, MariaDB's innodb_snapshot_isolation, ON by default
        from 11.6.2) that write fails, and the transaction with it (40001, 1020)."""
        return []

    def login_hint(self, message: str) -> str | None:
        """What to change when the driver refused to log in with `message`, or None."""
        return None

    # -- loading ---------------------------------------------------------------------
    def bulk_problem(self, conn: JdbcConnection) -> str | None:
        """Why the bulk loader cannot run against this server, or None."""
        return None

    # -- preflight -------------------------------------------------------------------
    def check_server(self, conn: JdbcConnection, branches: int, user: str | None) -> None:
        """Raise PreflightError when the server cannot hold `branches` prepared branches."""

    def temporary_stage_refusal(
        self, conn: JdbcConnection, schema: str | None, user: str | None
    ) -> tuple[str, str] | None:
        """(why, what would let it) when this login cannot create a temporary table in
        `schema` inside a transaction, as a single-branch staged job does; None: it can."""
        return None

    def describe_columns_sql(self, table: TableRef) -> tuple[str | None, tuple[str | None, ...]]:
        """A query of (name, full SQL type, nullable, has default) per column; None: unknown."""
        return None, ()

    def unique_keys_sql(self, table: TableRef) -> tuple[str, tuple[str | None, ...]]:
        """A query of (index name, column name) for the primary key and unique indexes."""
        raise ConfigurationError(
            f"The {self.name} dialect cannot read unique keys; upsert and merge need the "
            "postgres or mysql dialect."
        )

    def lock_wait_sql(self, seconds: int) -> tuple[str | None, str | None]:
        """Statements that bound, then restore, how long this session waits for a lock."""
        return None, None

    def table_identity(self, conn: JdbcConnection, table: TableRef) -> TableRef | None:
        """The table `table` names, as the server resolves it (schema and name as the
        catalog spells them): one table has one identity however it is spelled, which
        keys its apply lock and the journal's `target_table`. None: not found or unknown."""
        return None

    def foreign_keys_sql(self, tables: Sequence[TableRef]) -> tuple[str, tuple[str, ...]] | None:
        """A query of the foreign keys whose child is one of `tables` (as `table_identity`
        names them): rows of (child schema, child, parent schema, parent). None: this
        dialect cannot tell (a transaction then applies in the order of its writes)."""
        return None

    def self_references_sql(self, table: TableRef) -> tuple[str, tuple[str | None, ...]] | None:
        """A query of the foreign keys of `table` that reference `table` itself, where the
        server checks them row by row (InnoDB): rows of (constraint, column, referenced
        column, the column takes NULL), in key order. None: checked per statement, as
        PostgreSQL does, so that no order within a statement matters."""
        return None

    def reopens_temporary(self, conn: JdbcConnection) -> bool:
        """Whether one statement may name a temporary table more than once."""
        return True

    def update_joined(
        self, target: str, alias: str, source: str, on: str, where: str, assignments: str
    ) -> str:
        """UPDATE the rows of `target` (named `alias`) that join `source`, as `delete_joined`
        deletes them."""
        raise ConfigurationError(f"The {self.name} dialect has no joined UPDATE.")

    def types_lock_sql(self, table: TableRef) -> str | None:
        """A statement that keeps the table's column types as they are until the caller's
        transaction ends (None: this dialect has none)."""
        return None

    def locked_column_types(self, conn: JdbcConnection, table: TableRef) -> dict[str, str] | None:
        """The table's columns as they are now (name → full SQL type, lowercased as
        `describe_columns_sql` gives it), read inside the caller's transaction under
        `types_lock_sql`'s lock, so they hold until it ends. None: this dialect cannot tell."""
        lock = self.types_lock_sql(table)
        sql, params = self.describe_columns_sql(table)
        if lock is None or sql is None:
            return None
        execute(conn, lock)
        return {str(r[0]): str(r[1]).lower() for r in query(conn, sql, params)}

    @contextlib.contextmanager
    def waits_bounded(self, conn: JdbcConnection, seconds: int, restore: float) -> Iterator[None]:
        """Lock waits bounded to `seconds` for the block, then to `restore` again (the
        session's own bound, as `sessions.bind_lock_wait` set it)."""
        bound, _ = self.lock_wait_sql(seconds)
        back, _ = self.lock_wait_sql(max(1, int(restore)))
        if bound:
            execute(conn, bound)
        try:
            yield
        finally:
            if back:
                execute(conn, back)

    def lock_apply(self, conn: JdbcConnection, key: str, seconds: int) -> None:
        """Take the lock that serialises staged applies into one table (`key` names it),
        until the transaction ends (`unlock_apply` where the lock is the session's)."""

    def unlock_apply(self, conn: JdbcConnection, key: str) -> None:
        """Release `lock_apply`'s lock if it outlives the transaction."""

    def try_lock_apply(self, conn: JdbcConnection, key: str) -> bool:
        """`lock_apply`'s lock without waiting: False when another session holds it."""
        return True

    def lock_session(self, conn: JdbcConnection, name: str, seconds: int) -> bool:
        """Take the session's lock `name` (held through commits, until `unlock_session`);
        False: another session held it for `seconds`. Without such locks: True at once."""
        return True

    def unlock_session(self, conn: JdbcConnection, name: str) -> None:
        """Release `lock_session`'s lock."""

    @contextlib.contextmanager
    def session_locked(self, conn: JdbcConnection, name: str, seconds: int) -> Iterator[bool]:
        """`lock_session` for the block, which learns whether it got the lock (False: another
        session held it for `seconds`); released after it, never hiding how the block ended
        (a broken session drops its locks anyway)."""
        try:
            got = self.lock_session(conn, name, seconds)
        except Exception as exc:
            if not self.is_lock_timeout(exc):
                raise
            got = False
        try:
            yield got
        finally:
            if got:
                with contextlib.suppress(Exception):
                    self.unlock_session(conn, name)

    def upsert_clause(
        self, key: Sequence[str], others: Sequence[str], newer: str | None = None, target: str = ""
    ) -> str:
        """What follows `INSERT ... SELECT ... s` so that a row for an existing key updates
        it; with `newer` (the order column, one of `others`), only a stored row whose
        order is lower or NULL (the INSERT names `target` as `upsert_target` says)."""
        raise ConfigurationError(
            f"The {self.name} dialect has no upsert statement; mode='upsert' and mode='merge' "
            "need the postgres or mysql dialect."
        )

    def delete_joined(self, target: str, alias: str, source: str, on: str, where: str) -> str:
        """DELETE the rows of `target` (named `alias`) that join `source` `on` a condition,
        where `where` holds: driven from the source, reaching the target by its key."""
        raise ConfigurationError(f"The {self.name} dialect has no joined DELETE.")

    def upsert_target(self, target: str) -> str:
        """How an upsert with `newer` names its target, so the condition can name the
        stored row."""
        return target

    def estimated_rows(
        self, conn: JdbcConnection, table: str, schema: str | None, name: str
    ) -> int | None:
        """The server's estimate of `table`'s rows (bare name `name`); None: no statistics."""
        raise ConfigurationError(f"The {self.name} dialect has no row estimate.")

    def limit_sql(self, rows: int) -> str:
        """The clause that ends a query to keep its first `rows` rows."""
        raise ConfigurationError(f"The {self.name} dialect has no LIMIT clause.")

    def delete_some_sql(self, table: str, where: str, rows: int) -> str:
        """A DELETE of at most `rows` of the rows of `table` where `where` holds."""
        raise ConfigurationError(f"The {self.name} dialect has no bounded DELETE.")

    def collation_problem(
        self, conn: JdbcConnection, table: TableRef, column: str, sql_type: str
    ) -> str | None:
        """Why the string column `column` of `table` (of `sql_type`) compares some
        different strings as equal, by its collation; None: it never does, or unknown."""
        return None

    def keyable(self, sql_type: str) -> bool:
        """Whether a primary key can hold a column of `sql_type` whole."""
        return True

    def grantee(self, conn: JdbcConnection, user: str | None) -> str:
        """This login (`user`) as a GRANT names it."""
        return self.quote(user) if user else "<the writing user>"

    def create_grant(self, schema: str, grantee: str) -> str:
        """The GRANT that lets `grantee` (as `grantee` names it) create tables in `schema`."""
        return f"GRANT CREATE ON SCHEMA {self.quote(schema)} TO {grantee}"

    def writer_grants(
        self, conn: JdbcConnection, schema: str, tables: list[str], login: str | None
    ) -> dict[str, list[str]]:
        """The GRANTs `login` (None: this connection's) needs on the journal's `tables`
        (quoted) in `schema`, by the writes that need them (`grants`' groups)."""
        return {}

    def index_names(self, conn: JdbcConnection, table: TableRef) -> set[str] | None:
        """The names of the table's indexes, lowercased (None: this dialect cannot tell)."""
        return None

    def age_sql(self, column: str) -> str | None:
        """Seconds since the timestamp `column`, on the database's clock; None: unknown."""
        return None

    def ago_sql(self, seconds: float) -> str:
        """The database clock's time `seconds` ago (as the journal's timestamps hold it),
        for a range an index can serve where an age computed per row cannot."""
        return f"CURRENT_TIMESTAMP - INTERVAL '{float(seconds):.6f}' SECOND"

    def prepared_ages_sql(self) -> str | None:
        """A query of (gid, seconds since PREPARE) for this database's prepared transactions;
        None when the server does not say when a transaction was prepared."""
        return None

    def prepared_xids(self, conn: JdbcConnection, format_id: int) -> list[Xid] | None:
        """The prepared transactions with `format_id` the server lists where XA RECOVER on
        this database would, read on an ordinary connection; None: this dialect cannot."""
        return None

    def prepared_count(self, conn: JdbcConnection, format_id: int) -> int | None:
        """How many prepared transactions with `format_id` the server lists where XA
        RECOVER on this database would, read on an ordinary connection; None: this dialect
        cannot tell (recovery then scans in full)."""
        return None

    # -- classifying errors ----------------------------------------------------------
    def is_missing_table(self, exc: BaseException) -> bool:
        """The statement failed because a table does not exist (and for no other reason)."""
        return sql_state(exc) in ("42P01", "42S02") or sql_error_code(exc) == 1146

    def is_existing_table(self, exc: BaseException) -> bool:
        """CREATE TABLE failed because the table exists (readable by this login or not)."""
        return sql_state(exc) in ("42P07", "42S01") or sql_error_code(exc) == 1050

    def is_lock_timeout(self, exc: BaseException) -> bool:
        """The statement gave up waiting for a lock another transaction holds."""
        return sql_state(exc) == "55P03" or sql_error_code(exc) in (1205, 3572)

    # -- journal DDL -----------------------------------------------------------------
    def ascii_id_type(self, length: int) -> str:
        """A column type for printable ASCII ids that compares them byte for byte."""
        return f"VARCHAR({length})"

    def create_table_sql(
        self, table: str, name: str, columns: str, indexes: Sequence[TableIndex] = ()
    ) -> list[str]:
        """CREATE TABLE IF NOT EXISTS `table` (its bare name `name`) with its secondary
        `indexes`."""
        return [f"CREATE TABLE IF NOT EXISTS {table} ({columns})"] + [
            sql for index in indexes if (sql := self.create_index_sql(table, name, index))
        ]

    def create_index_sql(self, table: str, name: str, index: TableIndex) -> str | None:
        """CREATE INDEX for `index` of `table` (bare name `name`), a no-op if it exists;
        None where this server cannot hold it (a partial index, here: lookups then read
        more rows, with the same results)."""
        if index.present is not None:
            return None
        return (
            f"CREATE INDEX IF NOT EXISTS {self.quote(index.name(name))} "
            f"ON {table} ({', '.join(index.columns)})"
        )

    def drop_index(self, conn: JdbcConnection, table: str, name: str) -> None:
        """Drop `table`'s index `name` if it has one (an earlier layout's)."""
        execute(conn, f"DROP INDEX IF EXISTS {self.quote(name)}")

    def nullable_sql(self, table: TableRef, column: str, sql_type: str) -> str:
        """The ALTER that lets rows leave out `column` (of type `sql_type`) of `table`."""
        column = self.quote(column)
        return f"ALTER TABLE {self.qualified(table)} ALTER COLUMN {column} DROP NOT NULL"

    def add_column(self, conn: JdbcConnection, table: str, column: str) -> None:
        """Add `column` (its name and type) to `table` unless it has it."""
        execute(conn, f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column}")

    def is_duplicate_index(self, exc: BaseException) -> bool:
        """CREATE INDEX failed because the index exists (servers without IF NOT EXISTS)."""
        return sql_error_code(exc) == 1061
