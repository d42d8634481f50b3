"""An XADataSource configured by its JavaBean properties, for drivers whose data source
takes no URL (Apache Derby's client, DB2's, SQL Server's take `serverName`, `portNumber`
and `databaseName`, the standard properties of JDBC 4.3 §9.6.1)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..errors import ConfigurationError

#: jdbc:<subprotocol>://host[:port][/database][;k=v...|?k=v&...]
_URL = re.compile(
    r"^jdbc:[A-Za-z0-9:]+://(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^/:;?\[]+))(?::(?P<port>\d+))?"
    r"(?:/(?P<database>[^;?]*))?(?P<rest>[;?].*)?$"
)
#: Derby's client data source takes the URL's attributes (`create=true`) in one property.
_ATTRIBUTES_SETTER = "setConnectionAttributes"


def url_parts(url: str) -> tuple[str, int | None, str | None, list[tuple[str, str]]]:
    """(host, port, database, attributes) of a `jdbc:sub://host:port/db;k=v` URL."""
    match = _URL.match(url)
    if match is None:
        raise ConfigurationError(
            "The data source takes no URL, and xasink reads host, port and database only "
            "from a URL shaped jdbc:<driver>://host:port/database;key=value. Give one so."
        )
    attributes = []
    for position, item in enumerate(_attribute_items(match.group("rest") or ""), 1):
        key, sep, value = item.partition("=")
        if not sep or not key:
            # Its position only: the text may be part of a password.
            raise ConfigurationError(
                f"The URL's attribute number {position} is not key=value; write each "
                "attribute as key=value."
            )
        attributes.append((key, value))
    port = match.group("port")
    host = match.group("v6") or match.group("host")
    return host, int(port) if port else None, match.group("database"), attributes


def _attribute_items(rest: str) -> list[str]:
    """The attributes after the database: Derby's `;k=v;k=v` split at `;` alone (as Derby
    does: a value may hold `&`), a `?k=v&k=v` query at `&`."""
    if rest.startswith("?"):
        return [item for item in rest[1:].split("&") if item]
    return [item for item in rest.lstrip(";").split(";") if item]


def configure(datasource: Any, url: str, properties: Iterable[tuple[str, str]]) -> None:
    """Set `datasource`'s serverName, portNumber and databaseName from `url`, then each of
    the URL's attributes and `properties` (`set_properties`)."""
    host, port, database, attributes = url_parts(url)
    setters = _setters(datasource)
    _set(datasource, setters, "serverName", host)
    if port is not None:
        _set(datasource, setters, "portNumber", port)
    if database:
        _set(datasource, setters, "databaseName", database)
    set_properties(datasource, [*attributes, *properties])


def set_properties(datasource: Any, properties: Iterable[tuple[str, str]]) -> None:
    """Set each of `properties` through the setter of its name (any case). What has no
    setter goes to Derby's `connectionAttributes` where the class has it; else it is
    refused: a data source would never read it."""
    setters = _setters(datasource)
    leftover = [
        f"{key}={value}"
        for key, value in properties
        if not _set(datasource, setters, key, value, required=False)
    ]
    if not leftover:
        return
    if _ATTRIBUTES_SETTER in setters.values():
        getattr(datasource, _ATTRIBUTES_SETTER)(";".join(leftover))
        return
    names = ", ".join(item.split("=", 1)[0] for item in leftover)
    raise ConfigurationError(
        f"{type(datasource).__name__} has no property {names}. Name the data source's own "
        "JavaBean properties (its setX methods) in the URL or Database(properties=...)."
    )


def _setters(datasource: Any) -> dict[str, str]:
    return {name.lower(): name for name in dir(datasource) if name.startswith("set")}


def _set(
    datasource: Any, setters: dict[str, str], name: str, value: object, *, required: bool = True
) -> bool:
    setter = setters.get(f"set{name}".lower())
    if setter is None:
        if required:
            raise ConfigurationError(
                f"{type(datasource).__name__} has neither setURL nor set{name[0].upper()}"
                f"{name[1:]}; name an XADataSource configured by a URL or by the standard "
                "serverName, portNumber and databaseName properties."
            )
        return False
    method = getattr(datasource, setter)
    text = str(value)
    for candidate in _typed(text):
        try:
            method(candidate)
            return True
        except TypeError:
            continue
    raise ConfigurationError(  # never the value: it may be a password
        f"{type(datasource).__name__}.{setter} takes neither text, a number nor true/false."
    )


def _typed(text: str) -> list[object]:
    """The values a setter may take for `text`: a string, a number, a flag."""
    candidates: list[object] = [text]
    if re.fullmatch(r"-?\d+", text):
        candidates.append(int(text))
    if text.lower() in ("true", "false"):
        candidates.append(text.lower() == "true")
    return candidates
