"""`make test-versions`: the smoke of every public path (tests/test_versions.py) under each
PySpark minor release xasink supports, each in a virtual environment of its own.

Usage: python -m tests.versions [MINOR,...] (default: every one of :data:`RELEASES`).

Each release is paired with one Python, so that between them the runs cover every Python
xasink supports, and pip resolves the rest (pyarrow, numpy, pandas) as it would for a user of
that pair. An environment is made once, in ``~/.cache/xasink/versions/pyspark-<release>-py<X.Y>``,
and xasink is installed into it editable from this checkout on every run. Its Python comes
from pyenv, else ``pythonX.Y`` on ``PATH``, else uv (``uv python install``). Then pytest runs
twice in it, as in `make test`: the classic tests, then the Spark Connect client's in a
process of their own. The last lines are one per release: its result and its time.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xasink" / "versions"


@dataclass(frozen=True)
class Release:
    minor: str
    pyspark: str
    python: str

    @property
    def connect(self) -> bool:
        """pip's pyspark ships a Spark Connect server from 4.0 on (3.5's is a Maven package)."""
        return not self.minor.startswith("3.")

    @property
    def venv(self) -> Path:
        return CACHE / f"pyspark-{self.pyspark}-py{self.python}"


#: The newest release of each minor version, and the Python it is tested with.
RELEASES = {
    r.minor: r
    for r in (
        Release("3.5", "3.5.9", "3.11"),
        Release("4.0", "4.0.5", "3.12"),
        Release("4.1", "4.1.4", "3.13"),
        Release("4.2", "4.2.1", "3.10"),
        Release("4.3", "4.3.0", "3.11"),
    )
}


def _works(python: str, version: str) -> bool:
    """Whether `python` runs and is Python `version` (a pyenv shim of another one fails)."""
    try:
        out = subprocess.run(
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError:
        return False
    return out.returncode == 0 and out.stdout.strip() == version


def find_python(version: str) -> str:
    """An interpreter of Python `version` (X.Y): pyenv's, one on PATH, or uv's."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    installed = sorted(
        glob.glob(str(pyenv / "versions" / f"{version}.*" / "bin" / f"python{version}")),
        key=lambda p: [int(n) for n in Path(p).parts[-3].split(".") if n.isdigit()],
    )
    candidates = [*reversed(installed), shutil.which(f"python{version}") or ""]
    uv = shutil.which("uv")
    for python in filter(None, candidates):
        if _works(python, version):
            return python
    if uv:
        subprocess.run([uv, "python", "install", version], check=True)
        found = subprocess.run(
            [uv, "python", "find", version], capture_output=True, text=True, check=True
        )
        if _works(found.stdout.strip(), version):
            return found.stdout.strip()
    raise SystemExit(
        f"no Python {version} found: install it with pyenv (pyenv install {version}) or uv "
        f"(pip install uv; uv python install {version}), or put python{version} on PATH"
    )


def environment(release: Release) -> dict[str, str]:
    """The variables a run in `release`'s environment sees: its bin first on PATH (Spark's
    workers run `python3` from there too), nothing of this process's Python settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    bin_dir = release.venv / "bin"
    env.update(
        VIRTUAL_ENV=str(release.venv),
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYSPARK_PYTHON=str(bin_dir / "python"),
        PYSPARK_DRIVER_PYTHON=str(bin_dir / "python"),
    )
    return env


def prepare(release: Release) -> None:
    """Make `release`'s environment if missing; install this checkout into it, editable."""
    python = release.venv / "bin" / "python"
    if not python.exists():
        release.venv.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([find_python(release.python), "-m", "venv", str(release.venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-U", "pip"], check=True)
    extras, spark = ("test,connect", "pyspark[connect]") if release.connect else ("test", "pyspark")
    pip = [str(python), "-m", "pip", "install", "-qq", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "-e", f"{REPO}[{extras}]", f"{spark}=={release.pyspark}"],
        env=environment(release),
        check=True,
    )


def installed(release: Release) -> str:
    """The versions a run used: Python, pyspark, pyarrow, numpy, pandas."""
    code = (
        "import sys, pyspark, pyarrow, numpy, pandas; "
        "print('Python %d.%d.%d' % sys.version_info[:3], 'pyspark', pyspark.__version__, "
        "'pyarrow', pyarrow.__version__, 'numpy', numpy.__version__, 'pandas', pandas.__version__)"
    )
    python = str(release.venv / "bin" / "python")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run(release: Release) -> tuple[bool, float]:
    """The smoke in `release`'s environment: the classic tests, then Connect's. Whether
    both passed, and their time."""
    env = {**environment(release), "XASINK_TEST_VERSIONS": "1", "XASINK_TEST_REQUIRE_SERVERS": "1"}
    pytest = [str(release.venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    runs = [
        [*pytest, "tests/test_versions.py", "-m", "not connect_client"],
        [*pytest, "tests/test_versions.py", "-m", "connect_client"],  # skipped where none
    ]
    start = time.monotonic()
    ok = all([subprocess.run(argv, cwd=REPO, env=env).returncode == 0 for argv in runs])
    return ok, time.monotonic() - start


def main(argv: list[str]) -> int:
    wanted = [v.strip() for v in ",".join(argv).split(",") if v.strip()] or list(RELEASES)
    unknown = [v for v in wanted if v not in RELEASES]
    if unknown:
        raise SystemExit(f"unknown version(s) {unknown}; known: {', '.join(RELEASES)}")
    results = []
    for minor in wanted:
        release = RELEASES[minor]
        print(f"== PySpark {release.pyspark} on Python {release.python}", flush=True)
        prepare(release)
        versions = installed(release)
        print(versions, flush=True)
        ok, seconds = run(release)
        results.append(f"{minor}: {'passed' if ok else 'FAILED'} in {seconds:.0f} s ({versions})")
    print("\n".join(["test-versions:", *results]))
    return 0 if all(" passed " in line for line in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
