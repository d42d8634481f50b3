"""The install a user makes: the wheel, built from this checkout, in a fresh virtual
environment that cannot see the checkout, with its dependencies from the package index.
From there `format("xasink")` (no registration call), `write_xa` and `xasink recover` run,
in a classic session and against a Connect server started from that environment. Then an
ordinary editable install (`pip install -e .`, no compatibility mode) finds the format too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import DbServer
from spark_servers import connect_server
from support import ids_in, xasink_prepared

REPO = Path(__file__).resolve().parent.parent
#: A fresh environment and its downloads take minutes: `make test-install` runs this file.
pytestmark = pytest.mark.skipif(
    os.environ.get("XASINK_TEST_INSTALL", "").strip() in ("", "0"),
    reason="the install test runs with make test-install (XASINK_TEST_INSTALL=1)",
)
SCRIPT = Path(__file__).with_name("installed") / "user_script.py"


class Venv:
    """A virtual environment of its own: nothing of the test process leaks into it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = str(root / "bin" / "python")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.env["VIRTUAL_ENV"] = str(root)
        self.env["PATH"] = f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"

    def run(self, *argv: str, timeout: float = 600, status: int = 0, **env: str) -> str:
        done = subprocess.run(
            list(argv),
            env={**self.env, **env},
            cwd=self.root,  # not the checkout: its folders must not be importable
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
        )
        assert done.returncode == status, (
            f"{argv} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout

    def pip(self, *args: str) -> str:
        return self.run(self.python, "-m", "pip", "-q", "--disable-pip-version-check", *args)

    @property
    def spark_home(self) -> Path:
        out = self.run(
            self.python, "-c", "import pyspark, os; print(os.path.dirname(pyspark.__file__))"
        )
        return Path(out.strip())


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Venv]:
    work = tmp_path_factory.mktemp("install")
    source = work / "source"  # the checkout's own files: no build leftovers, no caches
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (f.decode() for f in files)):
        if not (REPO / name).is_file():  # deleted, not yet committed
            continue
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
    env = Venv(work / "venv")
    env.pip("wheel", "--no-deps", "-w", str(work / "dist"), str(source))
    (wheel,) = (work / "dist").glob("xasink-*.whl")
    env.pip("install", f"{wheel}[connect]")
    env.source = source  # type: ignore[attr-defined]
    yield env


def _login(db: DbServer) -> dict[str, str]:
    return {"XASINK_URL": db.jdbc_url, "XASINK_USER": db.user, "XASINK_PASSWORD": db.password}


def _check_writes(out: str, db: DbServer, prefix: str, site: str, small_by: str) -> None:
    """`small_by`: who writes the small frame, the "driver" in one local transaction (classic
    Spark) or the "tasks" (Spark Connect: no size estimate, no collect into the client)."""
    assert f"xasink from {site}" in out, out
    assert f"wrote {prefix}_format 300 tasks" in out, out
    assert f"wrote {prefix}_write_xa 300 {small_by}" in out, out
    for name in (f"{prefix}_format", f"{prefix}_write_xa"):
        assert ids_in(db, name) == list(range(300))
    assert db.prepared_transactions() == []


def test_the_wheel_writes_and_recovers_in_a_fresh_environment(venv, postgres):
    site = venv.run(venv.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    prefix = f"wheel_{uuid.uuid4().hex[:6]}"
    # Two writes, then a third, two-phase, whose driver dies between PREPARE and its
    # decision: status 17 is the fault's exit, and the branches its tasks prepared are left.
    out = venv.run(
        venv.python, str(SCRIPT), "classic", prefix, "die", status=17, **_login(postgres)
    )
    assert xasink_prepared(postgres), "the third write left no prepared branch"
    recovered = venv.run(
        "xasink", "recover", "--url", postgres.jdbc_url, "--user", postgres.user,
        "--password-env", "XASINK_PASSWORD", "--grace", "0", **_login(postgres),
    )  # fmt: skip
    assert "action=rollback" in recovered, recovered
    _check_writes(out, postgres, prefix, str(Path(site.strip(), "xasink")), "driver")

    with connect_server(python=venv.python, spark_home=venv.spark_home, env=venv.env) as url:
        prefix = f"connect_{uuid.uuid4().hex[:6]}"
        out = venv.run(venv.python, str(SCRIPT), url, prefix, **_login(postgres))
    _check_writes(out, postgres, prefix, str(Path(site.strip(), "xasink")), "tasks")


def test_an_editable_install_finds_the_format(venv):
    """Spark's own scan for `pyspark_*` modules (the code its lookup worker runs on the first
    `format(...)` of a session) finds the source in an ordinary editable install."""
    venv.pip("uninstall", "-y", "xasink")
    venv.pip("install", "--no-deps", "-e", str(venv.source))
    found = venv.run(venv.python, "-c", SPARK_SCAN)
    assert found.split() == ["xasink", str(venv.source / "xasink")], found


#: Runs Spark's lookup worker over in-memory streams and prints the sources it registers.
SPARK_SCAN = """
import io, os, struct
from pyspark.serializers import CPickleSerializer
from pyspark.sql.worker import lookup_data_sources as lookup
out = io.BytesIO()
lookup._main(io.BytesIO(), out)
data = io.BytesIO(out.getvalue())
count = struct.unpack("!i", data.read(4))[0]
for _ in range(count):
    name = data.read(struct.unpack("!i", data.read(4))[0]).decode()
    source = CPickleSerializer().loads(data.read(struct.unpack("!i", data.read(4))[0]))
    if name == "xasink":
        import xasink
        print(name, os.path.dirname(xasink.__file__))
"""
