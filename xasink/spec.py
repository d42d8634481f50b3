"""What to connect to and where to write: the picklable spec shipped to every executor."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from . import defaults
from .errors import ConfigurationError
from .masking import Redactor, mask_url


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
        return Redactor([self.password])

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
