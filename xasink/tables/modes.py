"""The write modes and their options, checked against the DataFrame before anything runs:
append inserts; overwrite, upsert and merge stage the rows and apply them in one
transaction (see staging). Merge reads change rows, in the spellings of common change feeds
or the caller's own."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypeGuard, get_args

from ..defaults import Mode
from ..errors import ConfigurationError
from .user_sql import check_actions, check_predicate

APPEND: Final = "append"
OVERWRITE: Final = "overwrite"
UPSERT: Final = "upsert"
MERGE: Final = "merge"
MODES: tuple[Mode, ...] = get_args(Mode)
#: The staging table's names for the `op` and `order` columns (never written to the target).
OP_COLUMN, ORDER_COLUMN = "xasink_op", "xasink_order"
#: Without `op_values`, merge knows the common change-feed spellings, case-insensitively:
#: plain words, Debezium's c/u/d/r (r: a snapshot read), I/U/D, and Delta's change data feed
#: (whose update_preimage rows are skipped: the postimage carries the change).
CDC_OP_VALUES: Mapping[str, Sequence[str]] = {
    "insert": ("insert", "c", "r", "i"),
    "update": ("update", "u", "update_postimage"),
    "delete": ("delete", "d"),
    "skip": ("update_preimage",),
}
_OP_KINDS = ("insert", "update", "delete", "skip")


def _is_mode(mode: str) -> TypeGuard[Mode]:
    return mode in MODES


@dataclass(frozen=True)
class ModeOptions:
    """The caller's choice of mode, validated against the DataFrame's columns."""

    mode: Mode = APPEND
    key: tuple[str, ...] = ()
    op: str | None = None
    order: str | None = None
    #: (value, is_delete) for every accepted op value.
    op_values: tuple[tuple[str, bool], ...] = ()
    #: Op values compared lower-cased (the built-in spellings), and the ones to skip.
    op_fold: bool = False
    op_skip: tuple[str, ...] = ()
    #: An append loaded into a staging table and applied with the job's other staged
    #: writes (a transaction's, so that all its tables change at once).
    stage_append: bool = False
    #: The target stores the `order` column (or will: a table xasink creates has it): it
    #: is written like any other column, and a change applies only when it is newer than
    #: the stored row (`with_table` says from the table's columns).
    order_stored: bool = True
    #: Overwrite only the rows this SQL condition selects (`replace_where`); None: all.
    replace_where: str | None = None
    #: Statements run in the apply's transaction, before its statements and after them.
    pre_sql: tuple[str, ...] = ()
    post_sql: tuple[str, ...] = ()

    @classmethod
    def build(
        cls,
        mode: str,
        key: str | Sequence[str] | None,
        op: str | None,
        order: str | None,
        op_values: Mapping[str, str | Sequence[str]] | None,
        frame_columns: Sequence[str],
        replace_where: str | None = None,
        pre_sql: str | Sequence[str] | None = None,
        post_sql: str | Sequence[str] | None = None,
    ) -> ModeOptions:
        keys = (key,) if isinstance(key, str) else tuple(key or ())
        checked = check_mode(mode, keys, op, order, op_values)
        sql = _user_sql(checked, replace_where, pre_sql, post_sql)
        steering = [c for c in (op, order) if c]
        if (
            len(set(keys)) != len(keys)
            or set(keys) & set(steering)
            or len(set(steering)) < len(steering)
        ):
            raise ConfigurationError("key, op and order must name different columns.")
        missing = [c for c in (*keys, *steering) if c not in frame_columns]
        if missing:
            raise ConfigurationError(
                f"The DataFrame has no column(s) {', '.join(map(repr, missing))}; it has "
                f"{', '.join(frame_columns)}."
            )
        if checked != MERGE:
            return replace(cls(checked, keys, op, order), **sql)
        values, skip = _op_values(CDC_OP_VALUES if op_values is None else op_values)
        return replace(cls(checked, keys, op, order, values, op_values is None, skip), **sql)

    @property
    def staged(self) -> bool:
        return self.mode != APPEND or self.stage_append

    @property
    def actions(self) -> bool:
        """The write runs statements of its own in its apply (`pre_sql`, `post_sql`): an
        append with them is staged, to have an apply transaction."""
        return bool(self.pre_sql or self.post_sql)

    @property
    def deletes(self) -> bool:
        """The write may delete the table's rows (overwrite's, a merge's deletes)."""
        return self.mode in (OVERWRITE, MERGE)

    @property
    def routed(self) -> bool:
        """Rows of one key must share a branch (and so a duplicate check is complete)."""
        return self.mode in (UPSERT, MERGE)

    def written(self, frame_columns: Sequence[str]) -> list[str]:
        """The DataFrame columns written to the target, in DataFrame order: all but `op`,
        and but `order` when the table does not store it."""
        kept = {self.order} if self.order_stored else set()
        return [c for c in frame_columns if c not in self.steering or c in kept]

    def with_table(self, stored: Callable[[str], bool]) -> ModeOptions:
        """These options for a table: `stored(name)` says whether it has a column."""
        if self.order is None or stored(self.order) == self.order_stored:
            return self
        return replace(self, order_stored=not self.order_stored)

    @property
    def steering(self) -> tuple[str, ...]:
        """The DataFrame columns that steer the write (the staging table has each as a
        column of its own; the target never has `op`)."""
        return tuple(c for c in (self.op, self.order) if c)


def check_mode(
    mode: str,
    key: str | Sequence[str] | None,
    op: str | None,
    order: str | None,
    op_values: Mapping[str, str | Sequence[str]] | None,
) -> Mode:
    """`mode`, refused when it is not one, lacks what it needs (docs/modes.md's table), or
    is given what it does not use: an `op` or `order` it would ignore is a forgotten mode.
    (A key of append or overwrite is the primary key of a table they create: the table
    decides, at preflight.)"""
    if not _is_mode(mode):
        raise ConfigurationError(f"mode must be one of {', '.join(MODES)}; got {mode!r}.")
    if mode in (UPSERT, MERGE) and not key:
        raise ConfigurationError(
            f"mode={mode!r} needs key=[...]: the column(s) that identify a row."
        )
    if mode == MERGE and not op:
        raise ConfigurationError(
            "mode='merge' needs op='<column>': the column saying insert, update or delete."
        )
    if mode != MERGE and (op or op_values):
        raise ConfigurationError(
            f"op and op_values apply to mode='merge' only (change rows), not to "
            f"mode={mode!r}: did you mean mode='merge'?"
        )
    if order and mode not in (UPSERT, MERGE):
        raise ConfigurationError(
            f"order applies to mode='upsert' and mode='merge' only (the newest row per "
            f"key wins), not to mode={mode!r}: did you mean mode='upsert'?"
        )
    return mode


def _user_sql(
    mode: str,
    replace_where: str | None,
    pre_sql: str | Sequence[str] | None,
    post_sql: str | Sequence[str] | None,
) -> dict[str, Any]:
    """The SQL of the write's own (`user_sql`), checked as far as it can be without the
    server (preflight checks the rest)."""
    if replace_where is not None and mode != OVERWRITE:
        raise ConfigurationError(
            f"replace_where applies to mode='overwrite' only (it says which rows the "
            f"overwrite replaces), not to mode={mode!r}: did you mean mode='overwrite'?"
        )
    checked: dict[str, Any] = {
        "replace_where": None if replace_where is None else check_predicate(replace_where),
        "pre_sql": check_actions("pre_sql", pre_sql),
        "post_sql": check_actions("post_sql", post_sql),
    }
    if mode == APPEND and (checked["pre_sql"] or checked["post_sql"]):
        checked["stage_append"] = True  # an apply transaction to run them in
    return checked


def _op_values(
    mapping: Mapping[str, str | Sequence[str]],
) -> tuple[tuple[tuple[str, bool], ...], tuple[str, ...]]:
    """((value, is_delete) per applied value, skipped values) of an op_values mapping."""
    unknown = set(mapping) - set(_OP_KINDS)
    if unknown or "delete" not in mapping:
        raise ConfigurationError(
            "op_values maps 'insert', 'update' and 'delete' (and optionally 'skip') to the op "
            f"column's values, e.g. {{'insert': 'c', 'update': 'u', 'delete': 'd'}}; got "
            f"{dict(mapping)!r}."
        )
    kinds: dict[str, str] = {}
    for kind, values in mapping.items():
        for value in (values,) if isinstance(values, str) else tuple(values):
            earlier = kinds.setdefault(str(value), kind)
            if earlier != kind and {earlier, kind} & {"delete", "skip"}:
                raise ConfigurationError(
                    f"op value {value!r} cannot mean both {earlier} and {kind}."
                )
    applied = tuple(sorted((v, k == "delete") for v, k in kinds.items() if k != "skip"))
    if not any(is_delete for _, is_delete in applied):
        raise ConfigurationError(
            f"op_values['delete'] needs at least one value (the op column's value for a "
            f"deleted row); got {dict(mapping)!r}."
        )
    return applied, tuple(sorted(v for v, k in kinds.items() if k == "skip"))
