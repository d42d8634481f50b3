"""xasink: write a PySpark DataFrame into PostgreSQL or MySQL/MariaDB exactly once.

from xasink import Database, write_xa, transaction
db = Database("jdbc:postgresql://db:5432/app", user="app", password=pw)
result = write_xa(df, db, "events")
write_xa(df, db, "users", mode="upsert", key=["id"])
with transaction(db) as tx:   # several tables, one decision
    tx.write(orders, "orders")
    tx.write(items, "order_items", mode="upsert", key="id")
"""

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
from .operations import recover
from .protocol.actions import BranchAction, RecoveryReport
from .spark.streaming import foreach_batch
from .spark.transaction import TableWrite, Transaction, TransactionResult
from .spark.write import WriteResult, transaction, write_xa
from .spec import CommitProperties, Database, WriteOptions, WriterProperties
from .xid import FORMAT_ID, BranchId, Xid

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
