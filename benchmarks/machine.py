"""The machine description stored with every result: numbers mean little without it."""

from __future__ import annotations

import hashlib
import os
import platform
import re
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from .databases import Database

_REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or None
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else None


def memory_bytes() -> int | None:
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return None
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else None


def load_average() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def java_version() -> str | None:
    """First line of ``java -version`` (what Spark's JVM and JPype use unless JAVA_HOME says)."""
    java = Path(os.environ["JAVA_HOME"], "bin", "java") if "JAVA_HOME" in os.environ else "java"
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().splitlines()[0] if out.strip() else None


def jar_version(path: str) -> str | None:
    """Implementation-Version or Bundle-Version from the jar's manifest."""
    try:
        with zipfile.ZipFile(path) as jar:
            manifest = jar.read("META-INF/MANIFEST.MF").decode("utf-8", "replace")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for key in ("Implementation-Version", "Bundle-Version"):
        match = re.search(rf"^{key}:\s*(\S+)", manifest, re.MULTILINE)
        if match:
            return match.group(1)
    return None


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_revision() -> dict[str, Any]:
    """Which xasink was measured: the commit, and whether the work tree had changes."""

    def git(*args: str, strip: bool = True) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        return done.stdout.strip() if strip else done.stdout

    status = git("status", "--porcelain", "--", "xasink", strip=False)
    return {
        "commit": git("rev-parse", "HEAD"),
        "uncommitted_xasink_changes": status.splitlines() if status is not None else None,
    }


def shown_path(path: Path, outside: str = "an export") -> str:
    """`path` relative to the checkout (`outside` elsewhere): the machine's own paths stay
    out of the results."""
    resolved = path.resolve()
    return str(resolved.relative_to(_REPO)) if resolved.is_relative_to(_REPO) else outside


def shown_command(argv: Sequence[str]) -> list[str]:
    """`argv` with its output folder relative to the checkout, or named as outside it (a
    temporary folder): the machine's own paths stay out of the results."""

    def folder(text: str) -> str:
        return shown_path(Path(text), "<a folder outside the checkout>")

    shown: list[str] = []
    for i, arg in enumerate(argv):
        if i and argv[i - 1] == "--output-dir":
            shown.append(folder(arg))
        elif arg.startswith("--output-dir="):
            shown.append("--output-dir=" + folder(arg.partition("=")[2]))
        else:
            shown.append(arg)
    return shown


def source_digest(package: Path) -> str:
    """SHA-256 over the package's .py files: pins the code measured when the tree is dirty."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def describe(
    spark: SparkSession, databases: Sequence[Database], jars: dict[str, str]
) -> dict[str, Any]:
    import xasink

    return {
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": memory_bytes(),
        "load_average_at_start": load_average(),
        "python": sys.version.split()[0],
        "java": java_version(),
        "spark": spark.version,
        "spark_master": spark.sparkContext.master,
        "pyspark": package_version("pyspark"),
        "pyarrow": package_version("pyarrow"),
        "jpype1": package_version("JPype1"),
        "psycopg": package_version("psycopg"),
        "pymysql": package_version("PyMySQL"),
        "xasink": {
            "version": xasink.__version__,
            "path": shown_path(Path(xasink.__file__).parent),
            "source_sha256": source_digest(Path(xasink.__file__).parent),
        }
        | git_revision(),
        "driver_jars": {kind: {"path": p, "version": jar_version(p)} for kind, p in jars.items()},
        "databases": {
            db.kind: {
                "version": db.version(),
                "source": db.server.source,
                "settings": db.describe_settings(),
            }
            for db in databases
        },
    }


#: Written next to an exported xasink/ (`git rev-parse HEAD > DIR/XASINK_COMMIT`): which
#: commit the export is of.
EXPORT_STAMP = "XASINK_COMMIT"


def measured_xasink() -> dict[str, Any]:
    """Which xasink ran: its path (an export of another commit, if PYTHONPATH said so, with
    that commit from its stamp), a digest of its sources, and the checkout's commit and
    uncommitted xasink/ changes."""
    import xasink

    package = Path(xasink.__file__).parent
    info = {"path": shown_path(package), "source_sha256": source_digest(package)}
    stamp = package.parent / EXPORT_STAMP
    if stamp.is_file():  # README: "Measuring another commit's xasink"
        info["exported_commit"] = stamp.read_text().strip()
    return info | {f"checkout_{k}": v for k, v in git_revision().items()}


def xasink_line(report: dict[str, Any]) -> str:
    """Which xasink the figures are of, for the markdown."""
    measured = report.get("xasink")
    if not measured:
        return ""
    digest = measured["source_sha256"][:12]
    if measured.get("exported_commit"):
        what = f"an export of commit {measured['exported_commit'][:12]}"
    else:
        commit = (measured.get("checkout_commit") or "?")[:12]
        dirty = measured.get("checkout_uncommitted_xasink_changes")
        what = f"the checkout at {commit}" + (" with uncommitted xasink/ changes" if dirty else "")
    return f"xasink measured: {what} ({measured['path']}, sources sha256 {digest})."
