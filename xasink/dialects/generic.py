"""Any XA-capable JDBC driver: the caller names its XADataSource class."""

from __future__ import annotations

from .base import Dialect


class GenericDialect(Dialect):
    """ANSI quoting, setter-configured data source, batched inserts."""
