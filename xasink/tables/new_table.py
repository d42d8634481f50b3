"""What a table xasink creates takes beyond the DataFrame's schema: Spark JDBC's
createTableOptions (DDL after the column list: `WITH (fillfactor=70)`, `ENGINE=InnoDB ...`)
and createTableColumnTypes (a column's type instead of the mapped one: `VARCHAR(64)`).

Both are DDL fragments by nature, written into the CREATE TABLE as given, as Spark writes
them. So each is checked to stay a fragment of that one statement: no statement separator,
no comment, balanced quotes and parentheses; and a column type is words and whole numbers
only (no quote, no DEFAULT, NOT NULL or constraint: the DataFrame and `key` decide those)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ConfigurationError

#: The names of the two settings: write_xa's keywords, or format("xasink")'s options.
KEYWORDS = ("create_table_options", "create_table_column_types")
OPTIONS = ("createTableOptions", "createTableColumnTypes")

#: What would end the CREATE TABLE statement, or hide the rest of it.
_OUTSIDE = (";", "--", "/*", "*/", "#", "\\", "\x00")
_WORD = r"[A-Za-z_][A-Za-z0-9_]*"
_SIZE = r"\s*\(\s*\d+(?:\s*,\s*\d+)*\s*\)"
#: A column type: words, each with its whole-number sizes, then PostgreSQL's array brackets.
_TYPE = re.compile(rf"{_WORD}(?:{_SIZE})?(?:\s+{_WORD}(?:{_SIZE})?)*(?:\s*\[\s*\])*")
#: Words that make a column definition more than a type.
_NOT_TYPE = re.compile(
    r"\b(default|not|null|primary|key|unique|references|check|constraint|generated|as|"
    r"auto_increment|comment|identity|on|invisible|serial)\b",
    re.IGNORECASE,
)
_QUOTES = "'\"`"


@dataclass(frozen=True)
class NewTable:
    """The column types and table options of a table xasink creates (none: the mapping of
    types.md and no options)."""

    #: (DataFrame column, its type), in the order given.
    column_types: tuple[tuple[str, str], ...] = ()
    #: DDL after the CREATE TABLE's column list ("" for none).
    options: str = ""

    @classmethod
    def build(
        cls,
        options: str | None,
        column_types: Mapping[str, str] | str | None,
        columns: Sequence[str],
        create: str,
        names: tuple[str, str] = KEYWORDS,
        evolving: bool = False,
    ) -> NewTable:
        """Checked against the columns the created table gets (`columns`); `names` spell
        the two settings in messages. `evolving` (schema_mode='merge'): the column types
        also type the columns the write adds to an existing table."""
        text = _fragment(names[0], options)
        types = _column_types(names[1], column_types, columns)
        if (text or (types and not evolving)) and create == "never":
            given = names[0] if text else names[1]
            also = "" if text else ", or let it add columns (schema_mode='merge')"
            raise ConfigurationError(
                f"{given} shapes a table xasink creates, and create='never' creates none: "
                f"drop it, or let the write create the table (create='if_missing'){also}."
            )
        return cls(types, text)

    def type_of(self, column: str) -> str | None:
        """The type given for `column`, or None (the mapped type)."""
        return dict(self.column_types).get(column)

    def __bool__(self) -> bool:
        return bool(self.column_types or self.options)


#: Words after a column list that make MySQL fill the new table (CREATE TABLE ... SELECT,
#: ... TABLE t, ... VALUES): rows that no job of xasink's wrote.
_ROWS = re.compile(r"(?i)\b(select|table|values)\b")


def _fragment(name: str, text: str | None) -> str:
    """`text` checked to stay inside one statement (see the module's docstring)."""
    if text is None:
        return ""
    if not isinstance(text, str):
        raise ConfigurationError(f"{name} takes DDL text, e.g. 'WITH (fillfactor=70)'.")
    for bad in _OUTSIDE:
        if bad in text:
            raise ConfigurationError(
                f"{name} cannot hold {bad!r} (DDL written as given: one statement, no "
                f"comments); got {text!r}."
            )
    depth, quote, bare = 0, "", []
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in _QUOTES:
            quote = char
        else:
            bare.append(char)
            if char in "()":
                depth += 1 if char == "(" else -1
                if depth < 0:
                    break
    if depth or quote:
        raise ConfigurationError(f"{name} has unbalanced parentheses or quotes; got {text!r}.")
    rows = _ROWS.search("".join(bare))
    if rows:
        raise ConfigurationError(
            f"{name} cannot hold {rows.group(0)!r}: MySQL would fill the new table from it "
            f"(CREATE TABLE ... SELECT), outside the write; got {text!r}."
        )
    return text.strip()


def _column_types(
    name: str, given: Mapping[str, str] | str | None, columns: Sequence[str]
) -> tuple[tuple[str, str], ...]:
    pairs = _pairs(name, given) if isinstance(given, str) else list((given or {}).items())
    folded = {c.lower(): c for c in columns}
    chosen: dict[str, str] = {}
    for column, sql_type in pairs:
        spelled = folded.get(str(column).lower())
        if spelled is None:
            near = difflib.get_close_matches(str(column).lower(), list(folded), n=1)
            hint = f": did you mean {folded[near[0]]!r}?" if near else "."
            raise ConfigurationError(
                f"{name} names no column {column!r} of the created table (it gets "
                f"{', '.join(columns)}){hint}"
            )
        if spelled in chosen:
            raise ConfigurationError(f"{name} names column {spelled!r} twice.")
        chosen[spelled] = _column_type(name, spelled, sql_type)
    return tuple(chosen.items())


def _column_type(name: str, column: str, sql_type: object) -> str:
    text = sql_type.strip() if isinstance(sql_type, str) else ""
    if not _TYPE.fullmatch(text) or _NOT_TYPE.search(text):
        raise ConfigurationError(
            f"{name}[{column!r}] takes a column type only, made of words and whole numbers "
            f"(VARCHAR(64), DECIMAL(12,2), timestamp(6) with time zone); got {sql_type!r}. "
            "NOT NULL and the primary key come from the DataFrame and key=; anything more, "
            "ALTER TABLE once the table is made."
        )
    return text


def top_level_items(text: str) -> list[str]:
    """`text` split at the commas outside parentheses (quotes already taken out)."""
    items, depth, start = [], 0, 0
    for at, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:at])
            start = at + 1
    items.append(text[start:])
    return items


def _pairs(name: str, text: str) -> list[tuple[str, str]]:
    """Spark's spelling, 'column TYPE, column TYPE': (column, type) pairs, split at the
    commas outside parentheses; a column may be `quoted` with backticks."""
    _fragment(name, text)
    pairs = []
    for item in top_level_items(text):
        found = re.fullmatch(r"\s*(`(?:[^`]|``)+`|[^\s`]+)\s+(\S.*?)\s*", item, re.S)
        if found is None:
            raise ConfigurationError(
                f"{name} takes 'column TYPE, column TYPE, ...', e.g. 'name VARCHAR(64), "
                f"amount DECIMAL(12,2)'; got {text!r}."
            )
        column = found.group(1)
        if column.startswith("`"):
            column = column[1:-1].replace("``", "`")
        pairs.append((column, found.group(2)))
    return pairs


__all__ = ["KEYWORDS", "OPTIONS", "NewTable"]
