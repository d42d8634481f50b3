"""xasink: write a PySpark DataFrame into PostgreSQL or MySQL/MariaDB exactly once.

from xasink import write_xa, recover
result = write_xa(df, "jdbc:postgresql://db:5432/app", "events", user="app", password=pw)
write_xa(df, url, "users", mode="upsert", key=["id"], user="app", password=pw)
with transaction(url, user="app", password=pw) as tx:   # several tables, one decision
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
from .xid import FORMAT_ID, BranchId, Xid

__version__ = "0.1.0"

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
    "TableWrite",
    "Transaction",
    "TransactionResult",
    "UnsupportedTypeError",
    "WriteError",
    "WriteResult",
    "XaError",
    "XasinkError",
    "Xid",
    "foreach_batch",
    "recover",
    "transaction",
    "write_xa",
]
