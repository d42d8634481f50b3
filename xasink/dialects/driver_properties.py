"""A JDBC driver's connection properties, as xasink checks a user's: the names its
`getPropertyInfo` declares, plus the aliases it reads without declaring them, and the
nearest of them to a misspelt one, never one that turns certificate checks off."""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

from .base import Dialect

#: Properties a driver reads that would weaken TLS: never offered for a misspelt name.
_WEAKENS = re.compile(
    r"(?i)^(trustservercertificate|disablesslhostnameverification|verifyservercertificate"
    r"|sslfactory|allowpublickeyretrieval)$"
)
#: A name about TLS or its stores: its nearest name is a driver's property, never an
#: option of xasink's (`sslmode` is not `mode`).
TLS_LIKE = re.compile(r"(?i)ssl|tls|trust|cert|keystore|truststore")


#: Connection properties a dialect's driver reads though its getPropertyInfo does not
#: declare them. MariaDB Connector/J 2.x's OptionUtils maps these older spellings to
#: declared names; 3.x reads the legacy TLS ones (Configuration.handleLegacySslSettings).
ALIASES: dict[str, tuple[str, ...]] = {
    "mysql": (
        "useSSL",
        "useSsl",
        "createDB",
        "profileSQL",
        "enabledSSLCipherSuites",
        "trustCertificateKeyStoreUrl",
        "trustCertificateKeyStorePassword",
        "trustCertificateKeyStoreType",
        "clientCertificateKeyStoreUrl",
        "clientCertificateKeyStorePassword",
        "clientCertificateKeyStoreType",
        "trustServerCertificate",
        "disableSslHostnameVerification",
    ),
}


def known(dialect: Dialect, declared: Sequence[str]) -> tuple[str, ...]:
    """The properties a driver reads: `declared`, and the dialect's undeclared aliases
    (none when it declares nothing: then nothing is checked)."""
    return (*declared, *ALIASES.get(dialect.name, ())) if declared else ()


def offered(names: Sequence[str]) -> list[str]:
    """`names` that may be offered for a misspelt one: none that weakens TLS."""
    return [n for n in names if not _WEAKENS.match(n)]


def nearest_property(name: str, names: Sequence[str]) -> str | None:
    """The name among `names` nearest `name` (case-insensitively), in its spelling; never
    one that weakens TLS."""
    offered_ = {n.lower(): n for n in offered(names)}
    found = difflib.get_close_matches(name.lower(), list(offered_), n=1, cutoff=0.6)
    return offered_[found[0]] if found else None


__all__ = ["TLS_LIKE", "known", "nearest_property", "offered"]
