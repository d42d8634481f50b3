"""Checks that run before any row is written; each failure says how to fix it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..dialects import Dialect
from ..errors import PreflightError, SchemaMismatchError
from ..masking import Redactor
from ..runtime.jdbc import java_message
from ..spec import TableRef

MIN_PYSPARK_MEMORY_MB = 2048
PYSPARK_MEMORY = "spark.executor.pyspark.memory"


def table_columns(conn: Any, dialect: Dialect, table: TableRef, redact: Redactor) -> dict[str, str]:
    """The table's columns (name → the database's type name), or a PreflightError."""
    try:
        statement = conn.prepareStatement(f"SELECT * FROM {dialect.qualified(table)} WHERE 1=0")
        try:
            meta = statement.executeQuery().getMetaData()
            return {
                str(meta.getColumnName(i)): str(meta.getColumnTypeName(i)).lower()
                for i in range(1, int(meta.getColumnCount()) + 1)
            }
        finally:
            statement.close()
    except Exception as exc:
        raise PreflightError(
            f"Target table {table} does not exist or cannot be read: "
            f"{redact(java_message(exc))}. Create it first (or check the schema, the name's "
            "case, and the user's privileges)."
        ) from None


def match_columns(
    dialect: Dialect, table: TableRef, frame_columns: Sequence[str], table_columns: Sequence[str]
) -> tuple[str, ...]:
    """The table's own spelling of each DataFrame column; names every missing one."""
    exact = {dialect.column_key(c): c for c in table_columns}
    folded: dict[str, list[str]] = {}
    for column in table_columns:
        folded.setdefault(column.lower(), []).append(column)
    matched, missing = [], []
    for column in frame_columns:
        name = exact.get(dialect.column_key(column))
        if name is None and len(folded.get(column.lower(), [])) == 1:
            name = folded[column.lower()][0]
        if name is None:
            missing.append(column)
        else:
            matched.append(name)
    if missing:
        raise SchemaMismatchError(
            f"Table {table} has no column(s) {', '.join(repr(c) for c in missing)} that the "
            f"DataFrame writes. Table columns: {', '.join(table_columns)}. Add the columns to "
            "the table, or select/rename DataFrame columns to match."
        )
    return tuple(matched)


def _megabytes(size: str) -> float | None:
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)b?\s*", size.lower())
    if not match:
        return None
    scale = {"": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 2**20}[match.group(2)]
    return float(match.group(1)) * scale


def check_spark_conf(conf: dict[str, str]) -> None:
    """`spark.executor.pyspark.memory` caps the worker's address space; a JVM needs room."""
    value = conf.get(PYSPARK_MEMORY)
    size = _megabytes(value) if value else None
    if size is not None and size < MIN_PYSPARK_MEMORY_MB:
        raise PreflightError(
            f"spark.executor.pyspark.memory is {value}: it limits each Python worker's address "
            "space, and the JVM that xasink starts inside the worker cannot start under "
            f"{MIN_PYSPARK_MEMORY_MB // 1024}g. Raise it to at least "
            f"{MIN_PYSPARK_MEMORY_MB // 1024}g, or unset it."
        )
