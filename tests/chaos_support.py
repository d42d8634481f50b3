"""Helpers of the chaos suite (tests/test_chaos.py): seeding, the tally, a TCP proxy that can
cut connections, warm driver processes that can be SIGKILLed at any moment, and the
independent all-or-nothing checks (psycopg / pymysql only, never through xasink).

The default run is a seeded CI subset; ``XASINK_CHAOS_FULL=1`` selects the full run.
``XASINK_CHAOS_SEED`` replays a run (the seed is printed by every test).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from servers import DbServer
from support import (
    TESTS,
    Contents,
    WatchedDriver,
    contents,
    mode_rows,
    old_contents,
    stage_tables,
    xasink_prepared,
)

FULL = os.environ.get("XASINK_CHAOS_FULL", "").strip() not in ("", "0")
SEED = int(os.environ.get("XASINK_CHAOS_SEED") or int(time.time()) % 1_000_000)
RESULTS = Path(
    os.environ.get("XASINK_CHAOS_RESULTS")
    or TESTS.parent / ".pytest_cache" / "xasink-chaos" / "results.jsonl"
)

#: Sizes of the full run and of the CI subset.
KILLS = int(os.environ.get("XASINK_CHAOS_KILLS") or (100 if FULL else 2))
RACE_SECONDS = float(os.environ.get("XASINK_CHAOS_RACE_SECONDS") or (150 if FULL else 20))
CUTS = int(os.environ.get("XASINK_CHAOS_CUTS") or (15 if FULL else 2))
SOAK_SECONDS = float(os.environ.get("XASINK_CHAOS_SOAK_SECONDS") or (180 if FULL else 20))
#: No single job may take longer than this (a hang or a deadlock fails the test).
JOB_TIMEOUT = 180.0
MODES = ("append", "upsert", "overwrite")


def rng(name: str) -> random.Random:
    """A random source per test, derived from the run's seed (printed, so it can be replayed)."""
    print(f"\nxasink chaos {name}: XASINK_CHAOS_SEED={SEED}", flush=True)
    return random.Random(f"{SEED}:{name}")


# -- the tally ---------------------------------------------------------------------------


def record(fault: str, db: DbServer, outcome: str, branches_left: int, **detail: Any) -> None:
    """One run's result for the `make chaos` table. `outcome` is old, new or MIXED."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    row = {"fault": fault, "db": db.kind, "outcome": outcome, "branches_left": branches_left}
    with open(RESULTS, "a") as fh:
        fh.write(json.dumps({**row, **detail}, default=str) + "\n")


# -- independent checks ------------------------------------------------------------------


def outcome_of(db: DbServer, table: str, old: Contents, new: Contents) -> str:
    """'old' or 'new' when the table holds exactly one of them, else 'MIXED'."""
    got = contents(db, table)
    if got == old:
        return "old"
    if got == new:
        return "new"
    return "MIXED"


def describe_mix(db: DbServer, table: str, old: Contents, new: Contents) -> str:
    got = contents(db, table)
    return (
        f"{table}: {len(got)} rows; {len(set(got) - set(old) - set(new))} unknown ids, "
        f"{sum(1 for k, v in got.items() if old.get(k) != v)} differ from old, "
        f"{sum(1 for k, v in got.items() if new.get(k) != v)} differ from new, "
        f"missing from new {sorted(set(new) - set(got))[:10]}"
    )


def leftovers(db: DbServer) -> tuple[list[str], list[str]]:
    """(xasink's prepared branches, staging tables) still in the database."""
    return xasink_prepared(db), stage_tables(db)


def case(mode: str) -> tuple[Contents, Contents]:
    """(old, new) exact contents of a seeded table for `mode` (support.mode_rows)."""
    return old_contents(), mode_rows(mode)[3]


#: Messages that say, in so many words, that the job left the target unchanged.
NOTHING_WRITTEN = ("unchanged", "nothing was written", "nothing was committed")


def promised(exc: BaseException | None) -> str:
    """What the job's own report promises: 'new' (returned), 'old' (an error saying nothing
    was written), or 'either' (the decision is unknown: recovery settles it)."""
    from xasink.errors import (
        CommitError,
        DecisionUnknownError,
        InputDataError,
        JobAbortedError,
        LostBranchError,
        PreflightError,
        XasinkError,
    )

    if exc is None:
        return "new"
    if not isinstance(exc, XasinkError):
        return f"not-an-xasink-error ({type(exc).__name__})"
    if isinstance(exc, LostBranchError):
        return "lost"  # never expected without an administrator: the caller fails on it
    text = str(exc).lower()
    # These classes, and these words, say that nothing was written (errors.py).
    if isinstance(exc, PreflightError | InputDataError | JobAbortedError) or any(
        words in text for words in NOTHING_WRITTEN
    ):
        return "old"
    if isinstance(exc, CommitError) and not isinstance(exc, DecisionUnknownError):
        return "new"  # the decision is recorded: recovery must finish it
    return "either"  # the decision is unknown, or a failure that does not say: all or nothing


def promise_of_line(line: str | None) -> str:
    """A driver process's last line -> what it promised (see `promised`)."""
    import xasink.errors as errors
    from xasink.errors import XasinkError

    if line is None:
        return "either"  # killed before it reported anything
    if line.startswith("RESULT "):
        return "new"
    name, _, message = line[len("ERROR ") :].partition(": ")
    cls = getattr(errors, name, None)
    if not (isinstance(cls, type) and issubclass(cls, XasinkError)):
        return f"not-an-xasink-error ({line[:300]})"
    return promised(cls(message) if cls is not errors.LostBranchError else cls(message, []))


# -- a TCP proxy whose connections can be cut --------------------------------------------


class TcpProxy:
    """Forwards 127.0.0.1:<port> to 127.0.0.1:<target_port>, one thread per direction.

    `cut()` resets every open connection (RST, like a dead link), and with `refuse_for`
    also refuses new ones for that many seconds."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._refuse_until = 0.0
        self._stopped = threading.Event()
        self.cuts = 0
        self._thread = threading.Thread(target=self._accept, name="tcp-proxy", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            if time.monotonic() < self._refuse_until:
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._open.update((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        """Copy both directions until either side closes or the pair is cut."""
        pair = {a: b, b: a}
        try:
            while not self._stopped.is_set():
                ready, _, _ = select.select([a, b], [], [], 0.5)
                for src in ready:
                    data = src.recv(65536)
                    if not data:
                        return
                    pair[src].sendall(data)
        except (OSError, ValueError):
            return
        finally:
            for s in (a, b):
                with self._lock:
                    self._open.discard(s)
                with contextlib.suppress(OSError):
                    s.close()

    def cut(self, refuse_for: float = 0.0) -> int:
        """Reset every open connection (both ends); returns how many pairs were cut."""
        with self._lock:
            self._refuse_until = time.monotonic() + refuse_for
            victims = list(self._open)
            self._open.clear()
        for s in victims:
            _reset(s)
        self.cuts += 1
        return len(victims) // 2

    def close(self) -> None:
        self._stopped.set()
        self._listener.close()
        self.cut()
        self._thread.join(timeout=5)


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a broken network path looks to both ends."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@contextlib.contextmanager
def proxied(db: DbServer) -> Iterator[tuple[DbServer, TcpProxy]]:
    """(the server as seen through a fresh proxy, the proxy)."""
    import dataclasses

    proxy = TcpProxy(db.port)
    try:
        yield dataclasses.replace(db, port=proxy.port), proxy
    finally:
        proxy.close()


# -- a long-lived driver host whose forked write_xa drivers are SIGKILLed ---------------


class DriverHost(WatchedDriver):
    """tests/chaos_driver.py in its own process group: one Spark for many jobs, each job's
    xasink driver a forked child that is SIGKILLed at the requested moment (see there)."""

    def __init__(self, db: DbServer) -> None:
        args = [db.jdbc_url, db.user]
        super().__init__("chaos_driver.py", args, db.password, {}, stdin=subprocess.PIPE)
        self._await(lambda ln: ln.startswith("READY"), 240)

    def _await(self, match: Any, timeout: float, start: int = 0) -> str:
        line = self.line_from(start, match, timeout)
        assert line is not None, "driver host stuck or dead: " + self.tail()
        return line

    def run(self, table: str, mode: str, partitions: int, delay: float) -> dict[str, Any]:
        """One job, its driver SIGKILLed after `delay` s unless it ended; its report."""
        start = len(self.output)
        assert self.proc.stdin is not None
        job = {"table": table, "mode": mode, "partitions": partitions, "delay": delay}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self._await(lambda ln: ln.startswith("DONE "), delay + 240, start)
        self.assert_no_secret()
        return dict(json.loads(line[len("DONE ") :]))

    def close(self) -> None:
        self.kill()
