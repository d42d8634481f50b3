"""Every call of xasink's public API the harness makes, in one place.

Each one reaches a benchmark server (`databases.Database`) with its application user's
login, as a user's own call would; the keywords beyond the login are passed on as they are.
The contenders, the breakdowns and the history workload all call these, so the way xasink
is called, and the way it is told the login, is written once. xasink is imported inside
each function: `python -m benchmarks --help` and the unit tests need no JVM.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from xasink import Database as XasinkDatabase
    from xasink import RecoveryReport, Transaction, WriteResult

    from .databases import Database


def database(db: Database, url: str | None = None, **fields: Any) -> XasinkDatabase:
    """`db` as xasink's `Database`, with its application user's login (`url`: another URL
    of the server; `fields`: more of the Database's fields, e.g. `journal_schema`)."""
    from xasink import Database as XasinkDatabase

    s = db.server
    return XasinkDatabase(url or db.jdbc_url, user=s.user, password=s.password, **fields)


def grouped(writer: Mapping[str, Any] | None, commit: Mapping[str, Any] | None) -> dict[str, Any]:
    """`writer` and `commit` fields as write_xa's `writer_properties` and
    `commit_properties` (built here, so that a contender list needs no import of xasink)."""
    from xasink import CommitProperties, WriterProperties

    made: dict[str, Any] = {}
    if writer:
        made["writer_properties"] = WriterProperties(**writer)
    if commit:
        made["commit_properties"] = CommitProperties(**commit)
    return made


def write_xa(db: Database, df: DataFrame, table: str, **options: Any) -> WriteResult:
    """`xasink.write_xa` of `df` into `table` on `db`, with `options` beside the defaults;
    of them, `url` and `journal_schema` go to the Database, and `writer`'s fields to the
    WriterProperties.

    `url` replaces `db.jdbc_url` (the `stages` and `memory` breakdowns give the server's
    own, `jdbc:mariadb:` on MariaDB)."""
    from xasink import write_xa as xasink_write_xa

    url, schema = options.pop("url", None), options.pop("journal_schema", None)
    target = database(db, url, journal_schema=schema)
    return xasink_write_xa(
        df, target, table, **grouped(options.pop("writer", None), None), **options
    )


def transaction(db: Database, **options: Any) -> AbstractContextManager[Transaction]:
    """`xasink.transaction` on `db` (use it as a `with` block), with `options`."""
    from xasink import transaction as xasink_transaction

    return xasink_transaction(database(db), **options)


def recover(db: Database, journal_schema: str | None = None, **options: Any) -> RecoveryReport:
    """`xasink.recover` on `db`, with `options` (a table, a grace)."""
    from xasink import recover as xasink_recover

    return xasink_recover(database(db, journal_schema=journal_schema), **options)


def recovered(db: Database, **options: Any) -> dict[str, Any]:
    """`recover`, with no grace: what a failed write left in doubt, resolved; what it did."""
    report = recover(db, grace=0, **options)
    return {"actions": [a.line() for a in report.actions], "ok": report.ok}


def foreach_batch(db: Database, table: str, **options: Any) -> Callable[[DataFrame, int], None]:
    """`xasink.foreach_batch` into `table` on `db`: a `foreachBatch` function."""
    from xasink import foreach_batch as xasink_foreach_batch

    return xasink_foreach_batch(database(db), table, **options)


def format_options(db: Database, table: str) -> dict[str, str]:
    """`format("xasink")`'s options that reach `table` on `db`, as Spark's JDBC names them."""
    return {
        "url": db.jdbc_url,
        "dbtable": table,
        "user": db.server.user,
        "password": db.server.password,
    }


def command_login(db: Database, password_env: str) -> list[str]:
    """The `xasink` command's arguments that reach `db`, the password read from
    `password_env` (never on the command line)."""
    return ["--url", db.jdbc_url, "--user", db.server.user, "--password-env", password_env]
