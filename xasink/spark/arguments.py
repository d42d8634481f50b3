"""The entry points' arguments, checked before anything connects or looks for a jar: a value
of the wrong kind is a TypeError that says what was given and what goes there, instead of
an AttributeError from deep inside (a pandas frame, a dict of properties, swapped
arguments)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame

from ..spec import CommitProperties, Database, WriteOptions, WriterProperties

#: The kinds of a write's properties, by keyword (delta-rs's write_deltalake takes its
#: WriterProperties and CommitProperties as instances only, and so does xasink).
_PROPERTIES: dict[str, type] = {
    "writer_properties": WriterProperties,
    "commit_properties": CommitProperties,
}


def check_write(
    call: str,
    df: object,
    table: object,
    options: WriteOptions,
    commit_properties: object = None,
) -> None:
    """One write's DataFrame, table and properties (`call` names the entry point as the
    user wrote it, e.g. "write_xa(df, database, table)")."""
    check_table(call, table)
    check_properties(call, commit_properties=commit_properties, **options)
    if isinstance(df, DataFrame):
        return
    module = type(df).__module__
    if module.startswith("pyspark.pandas"):
        got = "a pandas-on-Spark DataFrame: pass psdf.to_spark() instead"
    elif module.startswith("pandas") and type(df).__name__ == "DataFrame":
        got = "a pandas DataFrame: pass spark.createDataFrame(pdf) instead"
    else:
        got = _kind(df)
    raise TypeError(f"{call} takes a PySpark DataFrame; got {got}.")


def check_database(call: str, database: object, table: object = "") -> None:
    """A table where the database goes and a database (or URL) where the table goes: the
    two are swapped. (Database.of refuses any other value that is not a database.)"""
    given = isinstance(database, Database) or _is_url(database)
    if not given and (isinstance(table, Database) or _is_url(table)):
        got = repr(database) if isinstance(database, str) else None  # a table's name
        raise TypeError(
            f"{call} takes the database before the table: got "
            f"{'the table name ' + got if got else _kind(database)} where the database goes "
            f"and {'a JDBC URL' if _is_url(table) else 'a Database'} where the table goes. "
            "Swap them."
        )


def check_table(call: str, table: object) -> None:
    if isinstance(table, str) or (
        isinstance(table, Sequence) and all(isinstance(part, str) for part in table)
    ):
        return  # its shape is TableRef.parse's to check
    raise TypeError(
        f"{call} takes the table as 'name', 'schema.name' or ('schema', 'name'); got "
        f"{_kind(table)}."
    )


def check_properties(call: str, **given: object) -> None:
    """writer_properties and commit_properties are instances of their classes (or None):
    a dict is refused with the call that builds it from the same keywords."""
    for name, kind in _PROPERTIES.items():
        value = given.get(name)
        if value is None or isinstance(value, kind):
            continue
        if isinstance(value, Mapping):
            fields = ", ".join(f"{k}={v!r}" for k, v in value.items())
            got = f"a {type(value).__name__}: pass {name}=xasink.{kind.__name__}({fields})"
        else:
            got = _kind(value)
        raise TypeError(f"{call} takes {name} as a xasink.{kind.__name__}; got {got}.")


def _is_url(value: object) -> bool:
    return isinstance(value, str) and value.lower().startswith("jdbc:")


def _kind(value: object) -> str:
    """What a value is, without its contents (it may hold a secret)."""
    name = type(value).__name__
    return "None" if value is None else f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


__all__ = ["check_database", "check_properties", "check_table", "check_write"]
