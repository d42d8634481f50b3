"""Test-only: the bookkeeping statements this process sends, with their parameters, so
that the test suite can ask the server how it runs each one (EXPLAIN) on a journal with a
long history. With nothing recording, `seen` costs one test of an empty list."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

Statement = tuple[str, tuple[Any, ...]]
_recorders: list[list[Statement]] = []


@contextmanager
def recorded() -> Iterator[list[Statement]]:
    """The statements sent inside the block, in order (every thread of this process)."""
    seen: list[Statement] = []
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def seen(sql: str, params: Sequence[Any] = ()) -> None:
    for recorder in _recorders:
        recorder.append((sql, tuple(params)))


__all__ = ["Statement", "recorded", "seen"]
