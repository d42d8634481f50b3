"""The interpreter's exit waits for xasink's calls still running on other threads: a thread
inside JPype's frames must not be ended by finalization (xasink.runtime.shutdown)."""

from __future__ import annotations

import threading

import xasink
from xasink import operations
from xasink.runtime.shutdown import writes_in_progress


def test_a_recovery_on_another_thread_is_waited_for_at_exit(monkeypatch):
    entered, release = threading.Event(), threading.Event()

    def recovering(*args: object, **kwargs: object) -> None:  # stands for the JDBC work
        entered.set()
        release.wait(10)

    monkeypatch.setattr(operations, "make_spec", lambda url, **kwargs: url)
    monkeypatch.setattr(operations.admin, "recover", recovering)
    worker = threading.Thread(target=xasink.recover, args=("jdbc:postgresql://h/db",))
    worker.start()
    try:
        assert entered.wait(10)
        assert writes_in_progress() == 1
    finally:
        release.set()
        worker.join(10)
    assert writes_in_progress() == 0
