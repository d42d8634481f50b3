"""Pick the dialect for a JDBC URL."""

from __future__ import annotations

from ..errors import ConfigurationError
from .base import Dialect
from .generic import GenericDialect
from .mysql import MySQLDialect
from .postgres import PostgresDialect

DIALECTS: dict[str, type[Dialect]] = {
    "postgres": PostgresDialect,
    "mysql": MySQLDialect,
    "generic": GenericDialect,
}

_SCHEMES = {"jdbc:postgresql:": "postgres", "jdbc:mysql:": "mysql", "jdbc:mariadb:": "mysql"}


def dialect_name_for(
    url: str, explicit: str | None = None, xa_datasource: str | None = None
) -> str:
    """The dialect named by the caller, else the URL's scheme, else generic (needs a class)."""
    if explicit:
        if explicit not in DIALECTS:
            raise ConfigurationError(
                f"Unknown dialect {explicit!r}; choose one of {', '.join(DIALECTS)}."
            )
        return explicit
    if not url.startswith("jdbc:"):
        raise ConfigurationError(
            "The URL must be a JDBC URL such as jdbc:postgresql://host:5432/db or "
            "jdbc:mysql://host:3306/db."
        )
    for scheme, name in _SCHEMES.items():
        if url.startswith(scheme):
            return name
    if xa_datasource:
        return "generic"
    raise ConfigurationError(
        "xasink knows jdbc:postgresql:, jdbc:mysql: and jdbc:mariadb: URLs. For another "
        "XA-capable driver, give Database(url, xa_datasource='com.vendor.XADataSourceClass', "
        "jars=[...])."
    )


def get_dialect(name: str) -> Dialect:
    return DIALECTS[name]()


__all__ = ["DIALECTS", "Dialect", "dialect_name_for", "get_dialect"]
