"""xasink: write a PySpark DataFrame into PostgreSQL or MySQL/MariaDB exactly once.

from xasink import Database, write_xa, transaction
db = Database("jdbc:postgresql://db:5432/app", user="app", password=pw)
result = write_xa(df, db, "events")
write_xa(df, db, "users", mode="upsert", key=["id"])
with transaction(db) as tx:   # several tables, one decision
    tx.write(orders, "orders")
    tx.write(items, "order_items", mode="upsert", key="id")
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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
from .spec import CommitProperties, Database, WriteOptions, WriterProperties
from .xid import FORMAT_ID, BranchId, Xid

if TYPE_CHECKING:  # what `_LAZY` imports on first use, for type checkers
    from .operations import recover
    from .protocol.actions import BranchAction, RecoveryReport
    from .spark.streaming import foreach_batch
    from .spark.transaction import TableWrite, Transaction, TransactionResult
    from .spark.write import WriteResult, transaction, write_xa

#: The public names whose modules bring Spark, pandas, Arrow or the JVM's bridge (seconds
#: to import), each imported when first asked for (PEP 562): `import xasink`, and the
#: `xasink` command, which reads no frame, start at once.
_LAZY = {
    "recover": "xasink.operations",
    "BranchAction": "xasink.protocol.actions",
    "RecoveryReport": "xasink.protocol.actions",
    "foreach_batch": "xasink.spark.streaming",
    "TableWrite": "xasink.spark.transaction",
    "Transaction": "xasink.spark.transaction",
    "TransactionResult": "xasink.spark.transaction",
    "WriteResult": "xasink.spark.write",
    "transaction": "xasink.spark.write",
    "write_xa": "xasink.spark.write",
}


def __getattr__(name: str) -> object:
    """A name of `_LAZY`, imported now and kept (later lookups find it at once)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "FORMAT_ID",
    "BranchAction",
    "BranchId",
    "CommitError",
    "CommitProperties",
    "ConfigurationError",
    "Database",
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
    "TableWrite",
    "Transaction",
    "TransactionResult",
    "UnsupportedTypeError",
    "WriteError",
    "WriteOptions",
    "WriteResult",
    "WriterProperties",
    "XaError",
    "XasinkError",
    "Xid",
    "foreach_batch",
    "recover",
    "transaction",
    "write_xa",
]
