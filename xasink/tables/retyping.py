"""The target's column types at apply time against those its staging table was built for.

A staging table is typed from a description of the target read before the job's rows were
loaded (and, by write_xa and format("xasink"), possibly remembered for a while). If a
column's type changes in between, `INSERT ... SELECT` from the stage casts each value to
the new type, and both databases round or truncate without an error (double precision to
bigint, timestamptz to date). So the apply transaction reads the target's types again,
under a lock that keeps them until it commits, and refuses any change that could alter a
value; a widening that keeps every value (int to bigint, varchar(10) to varchar(20)) goes
ahead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ..dialects import Dialect
from ..errors import SchemaMismatchError
from ..runtime.jdbc import JdbcConnection
from ..spec import TableRef

#: Integer types, narrowest first: a column may move right along its chain.
_INTEGERS = {
    "postgres": ("smallint", "integer", "bigint"),
    "mysql": ("tinyint", "smallint", "mediumint", "int", "bigint"),
}
#: Types that hold every value of the key exactly (besides a wider integer), when declared
#: without arguments: double(5,1) rounds what a float holds.
_WIDER = {
    ("postgres", "real"): ("double precision",),
    ("mysql", "float"): ("double",),
}
_TEXT = {
    "postgres": ("character varying", "text"),
    "mysql": ("varchar", "tinytext", "text", "mediumtext", "longtext"),
}
#: The most bytes a MySQL TEXT type holds (its limit is in bytes, a VARCHAR's in characters).
_MYSQL_TEXT_BYTES = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 2**32 - 1}
#: The most bytes one character takes in a MySQL character set; one not listed is unsure.
_MYSQL_CHAR_BYTES = {
    "ascii": 1,
    "binary": 1,
    "latin1": 1,
    "latin2": 1,
    "utf8": 3,
    "utf8mb3": 3,
    "utf8mb4": 4,
    "ucs2": 2,
    "utf16": 4,
    "utf16le": 4,
    "utf32": 4,
}
#: Where a MySQL type's attributes begin (after its base name and length).
_ATTRIBUTES = (" unsigned", " zerofill", " character set ")


class ChangedTypesError(SchemaMismatchError):
    """The target's column types changed after its staging table was built; nothing of
    the job was applied."""


def check_types(
    conn: JdbcConnection,
    dialect: Dialect,
    target: TableRef,
    columns: Sequence[str],
    types: Sequence[str],
) -> None:
    """Raise ChangedTypesError unless every written column still has its planned type or
    one that holds all of its values. Locks the target's definition until the caller's
    transaction ends (`Dialect.locked_column_types`). A plan without types (written by an
    older version) is not checked."""
    if not types:
        return
    now = dialect.locked_column_types(conn, target)
    if now is None:
        return
    current = {dialect.column_key(name): sql_type for name, sql_type in now.items()}
    changes = []
    for name, planned in zip(columns, types, strict=True):
        found = current.get(dialect.column_key(name))
        if found is None:
            continue  # a dropped column fails the apply itself, which leaves it to a person
        if dialect.name == "postgres" and " collate " not in planned.lower():
            found = found.split(" collate ")[0]  # planned before collations were described
        if not keeps_values(dialect.name, planned, found):
            changes.append(f"{name!r} {planned} -> {found}")
    if changes:
        raise ChangedTypesError(
            f"{target} changed after this job's rows were staged: column(s) "
            f"{'; '.join(changes[:5])}. Applying them would convert (round or truncate) "
            "values, so nothing was applied"
        )


def keeps_values(dialect_name: str, old: str, new: str) -> bool:
    """Whether column type `new` stores every value of `old` unchanged (same spelling,
    or a known widening; anything unsure is no)."""
    old, new = normal_type(dialect_name, old), normal_type(dialect_name, new)
    if old == new:
        return True
    (base_a, args_a, rest_a), (base_b, args_b, rest_b) = type_parts(old), type_parts(new)
    chain = _INTEGERS.get(dialect_name, ())
    if base_a in chain and base_b in chain:
        unsigned_a, unsigned_b = "unsigned" in rest_a, "unsigned" in rest_b
        step = chain.index(base_b) - chain.index(base_a)
        if unsigned_a == unsigned_b:
            return step >= 0
        return unsigned_a and not unsigned_b and step > 0  # unsigned into a wider signed
    if base_b in _WIDER.get((dialect_name, base_a), ()):
        return not args_b and rest_a == rest_b
    if base_a in ("numeric", "decimal") and base_a == base_b and rest_a == rest_b:
        if not args_b:
            return dialect_name == "postgres"  # unconstrained numeric keeps any value
        if not args_a:
            return False
        p_a, s_a = [*args_a, 0][:2]
        p_b, s_b = [*args_b, 0][:2]
        return s_b >= s_a and p_b - s_b >= p_a - s_a
    texts = _TEXT.get(dialect_name, ())
    if base_a in texts and base_b in texts and rest_a == rest_b:
        if dialect_name == "mysql":
            return _mysql_text_keeps((base_a, args_a), (base_b, args_b), rest_a)
        return _text_length(base_b, args_b) >= _text_length(base_a, args_a)
    return False


def normal_type(dialect_name: str, sql_type: str) -> str:
    text = " ".join(sql_type.lower().split())
    if dialect_name == "mysql":  # display widths of integers do not limit values
        text = re.sub(r"^(tinyint|smallint|mediumint|int|bigint)\(\d+\)", r"\1", text)
    return text


def type_parts(sql_type: str) -> tuple[str, list[int], str]:
    """("numeric", [10, 2], "") from "numeric(10,2)"; ("int", [], "unsigned") from "int
    unsigned"; ("timestamp", [3], "with time zone") from "timestamp(3) with time zone"."""
    cut = min([i for i in (sql_type.find(m) for m in _ATTRIBUTES) if i >= 0] or [len(sql_type)])
    head, rest = sql_type[:cut], sql_type[cut:]
    args: list[int] = []
    if "(" in head and ")" in head:
        inside = head[head.index("(") + 1 : head.index(")")]
        rest = head[head.index(")") + 1 :] + rest
        head = head[: head.index("(")]
        try:
            args = [int(a) for a in inside.replace(" ", "").split(",") if a]
        except ValueError:
            args = [-1]  # enum('a','b') and the like: compared only by spelling
    return head.strip(), args, rest.strip()


def _text_length(base: str, args: list[int]) -> float:
    """PostgreSQL: characters (text and an unbounded varchar hold any number)."""
    if base == "text" or not args:
        return float("inf")
    return args[0]


def _mysql_text_keeps(old: tuple[str, list[int]], new: tuple[str, list[int]], rest: str) -> bool:
    """VARCHAR(n) holds n characters, a TEXT type a number of bytes: a TEXT fits a VARCHAR
    only if every byte may be a character (ASCII), and a VARCHAR fits a TEXT only if n of
    its charset's widest characters do."""
    (base_a, args_a), (base_b, args_b) = old, new
    if any(base == "varchar" and len(args) != 1 for base, args in (old, new)):
        return False
    if base_a == "varchar" and base_b == "varchar":
        return args_b[0] >= args_a[0]
    if base_b == "varchar":
        return args_b[0] >= _MYSQL_TEXT_BYTES[base_a]
    if base_a == "varchar":
        found = re.search(r"character set (\w+)", rest)
        width = _MYSQL_CHAR_BYTES.get(found.group(1)) if found else None
        return width is not None and args_a[0] * width <= _MYSQL_TEXT_BYTES[base_b]
    return _MYSQL_TEXT_BYTES[base_b] >= _MYSQL_TEXT_BYTES[base_a]
