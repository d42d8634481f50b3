"""A short per-process memory of the preflight checks that passed (write_xa's, and
format("xasink")'s planner's), so that many small calls do not repeat the same server,
table and journal round trips.

Why skipping them for a while is safe:

* An entry only spares a *read* made before any branch opens. Nothing that decides a
  commit is ever cached: the journal's tag, the job rows, the XA RECOVER listing, the
  markers and the decision are read from the database on every call.
* Without the cache, the same facts can already change between the check and the load
  (nothing is locked in between). The cache widens that window to at most `ttl` seconds.
  So nothing that decides how values are encoded trusts a description: the one load whose
  bytes depend on the column types (PostgreSQL's binary COPY) reads them again inside its
  branch, under a lock that holds them until the branch ends (loaders/pg_copy.py); every
  other load is typed by the server. A staging table is typed from the description, so a
  staged apply reads the target's column types again in its own transaction, under a lock
  held until it commits, and refuses a change that could alter a value
  (tables/retyping.py). Constraints and limits are enforced by the database when the rows
  arrive, so such a change fails the job (rolled back, or a staged job aborted).
* The table's identity (the name the server resolves the spelling to) is remembered with
  its description: the job then names that table explicitly, so its apply lock, its
  journal row and the table it writes always agree.
* A remembered description may only let a write on: when it would refuse the frame (a
  column it does not know), preflight reads the table again and refuses only on that.
  Schema evolution (`schema_mode="merge"`) adds columns only after such a fresh read, and
  remembers the table as read after its ALTER: a stream's next batch sees the new columns.
* Every failed call forgets all entries of its connection, and the next call checks
  again, with preflight's own message for what is wrong.
* The journal entry is keyed by the journal's stored tag: a journal dropped and made
  again (a new tag) is checked again at once.

format("xasink") uses it too, in the planner that serves batch after batch; its tasks and
`commit()` fail in other processes, which cannot make it forget the entries, so there a
stale entry lives its full `ttl`: safe for the reasons above (a refusal is never the
cache's, and what the server refuses fails the job with the server's reason).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..spec import ConnectionSpec

T = TypeVar("T")

#: How long an entry lives, in seconds.
DEFAULT_TTL = 60.0


@dataclass(frozen=True)
class _Entry(Generic[T]):
    value: T
    expires: float


class CheckCache:
    """Values keyed by (connection, what, ...), each forgotten after `ttl` seconds or
    when a call on that connection fails."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self.ttl, self._clock = ttl, clock
        self._entries: dict[tuple[ConnectionSpec, Hashable], _Entry[object]] = {}
        self._lock = threading.Lock()

    def get(self, spec: ConnectionSpec, key: Hashable) -> object | None:
        """The live value, or None (missing or expired)."""
        with self._lock:
            entry = self._entries.get((spec, key))
            if entry is None:
                return None
            if entry.expires <= self._clock():
                del self._entries[(spec, key)]
                return None
            return entry.value

    def put(self, spec: ConnectionSpec, key: Hashable, value: object) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            self._entries[(spec, key)] = _Entry(value, self._clock() + self.ttl)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def forget(self, spec: ConnectionSpec) -> None:
        """Drop every entry of this connection."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == spec]:
                del self._entries[key]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    @contextlib.contextmanager
    def forgotten_on_failure(self, spec: ConnectionSpec) -> Iterator[None]:
        """Forget this connection's entries if the block raises (then re-raise)."""
        try:
            yield
        except BaseException:
            self.forget(spec)
            raise


#: The process's cache, used by write_xa and format("xasink")'s planner.
CHECKS = CheckCache()
#: Remembers nothing: every check runs (the default, e.g. for `xasink` commands and tests).
UNCACHED = CheckCache(ttl=0)
