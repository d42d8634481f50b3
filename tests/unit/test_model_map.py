"""model/README.md maps every step of the Promela model to the code that does it. Each
name it gives must exist in xasink/, so that a rename or a move cannot leave the model
describing code that is gone.

Names are written as `module.name`, `Class.member`, `name` or `path/to/module.py`; a trailing
call (`name(...)`) is ignored. A backticked text with a space in it is SQL or prose, not a
name; Spark's, the servers' and the journal's own names are listed in EXTERNAL."""

from __future__ import annotations

import ast
import builtins
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "xasink"
MAP = ROOT / "model" / "README.md"
#: Names of Spark, JDBC and the servers that the map mentions beside xasink's own.
EXTERNAL = {
    "mapInArrow",  # Spark
    "foreachBatch",
    "sql.streaming.queryId",
    "xasink_sinks.query_id",  # journal columns
    "finished_at",
    "decided_at",
    "finally",  # Python
}


@cache
def index() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str]]:
    """(module basename or dotted path → its top-level names, class → its members, every
    top-level name)."""
    modules: dict[str, set[str]] = {}
    classes: dict[str, set[str]] = {}
    everything: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names: set[str] = set()
        for node in tree.body:
            for name in _defined(node):
                names.add(name)
            if isinstance(node, ast.ClassDef):
                members = classes.setdefault(node.name, set())
                for item in node.body:
                    members.update(_defined(item))
        dotted = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for key in {path.stem, dotted}:
            modules.setdefault(key, set()).update(names)
        everything |= names
    return modules, classes, everything


def _defined(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def mapped_names() -> list[str]:
    """Every backticked name in the code column of the map's tables (those whose header
    reads "model step | code")."""
    found: list[str] = []
    in_map = False
    for line in MAP.read_text().splitlines():
        if not line.startswith("|"):
            in_map = False
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if [c.lower() for c in cells] == ["model step", "code"]:
            in_map = True
        elif in_map and not line.startswith("|---"):
            found += re.findall(r"`([^`]+)`", cells[-1])
    return found


def resolves(token: str) -> bool:
    name = re.sub(r"\(.*$", "", token).strip()
    if token in EXTERNAL or name in EXTERNAL or " " in name or name in vars(builtins):
        return True
    if name.endswith(".py"):
        return (PACKAGE / name).is_file()
    modules, classes, everything = index()
    if "." not in name:
        return name in everything or any(name in m for m in classes.values())
    owner, member = name.rsplit(".", 1)
    if owner in classes:
        return member in classes[owner]
    return member in modules.get(owner, set())


def test_the_map_names_code() -> None:
    assert len(mapped_names()) > 30, "the map's section heading or layout changed"


@pytest.mark.parametrize("token", sorted(set(mapped_names())))
def test_every_mapped_name_exists(token: str) -> None:
    assert resolves(token), f"model/README.md names `{token}`, which xasink/ does not define"


def test_the_model_script_parses_and_names_a_model_for_every_configuration():
    """`sh -n`: a quote inside a configuration's text once broke `make model` whole."""
    import subprocess

    script = ROOT / "model" / "check.sh"
    parsed = subprocess.run(["sh", "-n", str(script)], capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    text = script.read_text()
    for block in ("CONFIGS='", "MUTANTS='"):
        body = text.split(block, 1)[1].split("'", 1)[0]
        for line in filter(None, body.splitlines()):
            name = line.split("|", 1)[0].strip()
            assert len(line.split("|")) >= 2, f"{block}: {line}"
            assert name, f"{block}: {line}"
