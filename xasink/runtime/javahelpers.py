"""xasink's own Java helpers, shipped as source and compiled once, on first use.

The JDK's compiler (javax.tools) builds them into a per-version cache folder; where there is
no compiler (a JRE only), callers fall back to pure-JDBC code. No jar is shipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jpype

log = logging.getLogger("xasink")

CACHE_ENV = "XASINK_CACHE_DIR"
_SOURCES = Path(__file__).parent / "java"
_loaded: dict[str, Any] = {}


def _cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "xasink"


def _compile(source: Path, target: Path) -> bool:
    """Compile `source` into `target` (atomically: concurrent workers may race)."""
    compiler = jpype.JClass("javax.tools.ToolProvider").getSystemJavaCompiler()
    if compiler is None:
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        args = jpype.JArray(jpype.JString)(["-d", str(staging), "-nowarn", str(source)])
        if int(compiler.run(None, None, None, args)) != 0:
            return False
        with contextlib.suppress(OSError):  # another worker won the race: theirs is equal
            os.replace(staging, target)
        return target.is_dir()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def helper_class(name: str) -> Any | None:
    """The compiled helper class `xasink.<name>`, or None when it cannot be built here."""
    if name in _loaded:
        return _loaded[name]
    source = _SOURCES / f"{name}.java"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    classes = _cache_root() / f"{name}-{digest}"
    found = None
    try:
        if classes.is_dir() or _compile(source, classes):
            url = jpype.JClass("java.net.URL")
            loader = jpype.JClass("java.net.URLClassLoader")(
                jpype.JArray(url)([url(classes.resolve().as_uri() + "/")]),
                jpype.JClass("java.lang.ClassLoader").getSystemClassLoader(),
            )
            found = jpype.JClass(f"xasink.{name}", loader=loader)
    except (OSError, jpype.JException, TypeError) as exc:
        log.info("xasink: Java helper %s unavailable (%s); using the plain JDBC path", name, exc)
    _loaded[name] = found
    return found
