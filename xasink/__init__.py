"""xasink: write a PySpark DataFrame into PostgreSQL or MySQL/MariaDB exactly once.

from xasink import write_xa, recover
result = write_xa(df, "jdbc:postgresql://db:5432/app", "events", user="app", password=pw)
write_xa(df, url, "users", mode="upsert", key=["id"], user="app", password=pw)
"""

from collections.abc import Mapping, Sequence

from . import defaults
from .errors import (
    CommitError,
    ConfigurationError,
    DecisionUnknownError,
    DriverNotFoundError,
    InputDataError,
    JobAbortedError,
    JournalError,
    LostBranchError,
    PreflightError,
    SchemaMismatchError,
    SinkConflictError,
    UnsupportedTypeError,
    WriteError,
    XaError,
    XasinkError,
)
from .protocol import admin
from .protocol.actions import BranchAction, RecoveryReport
from .spark.streaming import foreach_batch
from .spark.write import WriteResult, write_xa
from .target.staging import STAGED_APPLY
from .xid import FORMAT_ID, BranchId, Xid

__version__ = "0.1.0"


def recover(
    url: str,
    *,
    user: str | None = None,
    password: str | None = None,
    table: str | Sequence[str] | None = None,
    job: str | None = None,
    grace: float = defaults.GRACE,
    dry_run: bool = False,
    properties: Mapping[str, object] | None = None,
    jars: Sequence[str] | None = None,
    dialect: str | None = None,
    xa_datasource: str | None = None,
    journal_schema: str | None = None,
    connect_timeout: int = defaults.CONNECT_TIMEOUT,
    network_timeout: float = defaults.NETWORK_TIMEOUT,
    lock_wait_timeout: float = defaults.LOCK_WAIT,
    presume_abort_tag: str | None = None,
) -> RecoveryReport:
    """Resolve xasink's in-doubt branches in this database; see
    :mod:`xasink.protocol.recovery`.

    Without a journal nothing is touched, unless `presume_abort_tag` names the tag whose
    prepared branches are to be rolled back (once older than `grace`, where the server
    tells a branch's age)."""
    return admin.recover(
        url,
        staged=STAGED_APPLY,
        user=user,
        password=password,
        table=table,
        job=job,
        grace=grace,
        dry_run=dry_run,
        properties=properties,
        jars=jars,
        dialect=dialect,
        xa_datasource=xa_datasource,
        journal_schema=journal_schema,
        connect_timeout=connect_timeout,
        network_timeout=network_timeout,
        lock_wait_timeout=lock_wait_timeout,
        presume_abort_tag=presume_abort_tag,
    )


__all__ = [
    "FORMAT_ID",
    "BranchAction",
    "BranchId",
    "CommitError",
    "ConfigurationError",
    "DecisionUnknownError",
    "DriverNotFoundError",
    "InputDataError",
    "JobAbortedError",
    "JournalError",
    "LostBranchError",
    "PreflightError",
    "RecoveryReport",
    "SchemaMismatchError",
    "SinkConflictError",
    "UnsupportedTypeError",
    "WriteError",
    "WriteResult",
    "XaError",
    "XasinkError",
    "Xid",
    "foreach_batch",
    "recover",
    "write_xa",
]
