"""The unit layer's own guard (tests/unit/conftest.py): no network, no jars from the
environment, no JVM."""

from __future__ import annotations

import os
import socket
import sys

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


def test_no_jvm_runs():
    jpype = sys.modules.get("jpype")
    assert jpype is None or not jpype.isJVMStarted()
