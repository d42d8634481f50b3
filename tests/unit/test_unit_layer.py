"""The unit layer's own guard (tests/unit/conftest.py): no network, no jars from the
environment, no JVM."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from xasink.runtime.jars import JARS_ENV


def test_tcp_connections_are_refused():
    with pytest.raises(AssertionError, match=r"^unit tests open no network connection"):
        socket.create_connection(("127.0.0.1", 5432), timeout=1)


def test_unix_sockets_still_connect(tmp_path):
    path = str(tmp_path / "s")
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as client:
        server.bind(path)
        server.listen(1)
        client.connect(path)
        peer, _ = server.accept()
        with peer:
            client.sendall(b"x")
            assert peer.recv(1) == b"x"


def test_no_jar_list_leaks_in_from_the_environment():
    assert JARS_ENV not in os.environ


def test_no_jvm_runs_unless_a_server_test_started_it_earlier_in_this_process():
    jpype = sys.modules.get("jpype")
    unit = Path(__file__).parent
    files = [Path(getattr(m, "__file__", None) or unit) for m in list(sys.modules.values())]
    if any(f.parent == unit.parent and f.name.startswith("test_") for f in files):
        pytest.skip("server tests ran in this process before (make test): they start a JVM")
    assert jpype is None or not jpype.isJVMStarted()
