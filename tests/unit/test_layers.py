"""The folders are the architecture: each package of xasink/ imports only from the layers
below it, no module imports another in a loop, and no import of xasink's own code hides in a
function body. CONTRIBUTING.md draws the same layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "xasink"

#: Lower layers first; a module may import its own part and any part of a lower layer.
LAYERS: list[set[str]] = [
    {"errors", "xid", "defaults", "masking"},
    {"spec", "_testing"},  # test hooks the runtime calls (faults, the statements sent)
    {"runtime"},
    {"dialects"},
    {"protocol", "tables"},  # the commit protocol and the table: neither knows the other
    {"loaders", "operations"},
    {"executor"},
    {"driver"},
    {"spark"},
    {"rendering"},  # what the command line prints, beyond a line
    {"cli"},
    {"__init__", "__main__"},
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}
#: Parts that must not import pyspark at all.
SPARK_FREE = {
    "protocol",
    "driver",
    "executor",
    "loaders",
    "dialects",
    "runtime",
    "spec",
    "rendering",
    "cli",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["xasink", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__" and len(parts) > 2:
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def part_of(module: str) -> str:
    return module.split(".")[1] if "." in module else "__init__"


def imports(module: str, path: Path, typing: bool = False) -> list[tuple[str, bool, int]]:
    """(imported module, whether inside a function, line) for every import of `module`;
    with `typing`, those under `if TYPE_CHECKING:` too."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    in_function: set[int] = set()
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function |= {id(n) for n in ast.walk(node)}
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            typing_only |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:  # annotations only: no edge at run time
            continue
        deferred = id(node) in in_function
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target]
            if node.module is None or target in modules():
                known = modules()
                targets = [
                    f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in known
                ]
                targets = targets or [target]
            found += [(t, deferred, node.lineno) for t in targets]
        elif isinstance(node, ast.Import):
            found += [(a.name, deferred, node.lineno) for a in node.names]
    return found


def own(target: str) -> bool:
    return target == "xasink" or target.startswith("xasink.")


def test_no_part_imports_a_higher_layer_or_a_peer() -> None:
    wrong = []
    for module, path in modules().items():
        mine = part_of(module)
        for target, _, line in imports(module, path):
            if not own(target) or target == "xasink":
                continue
            theirs = part_of(target)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {target}")
    assert wrong == []


def test_no_import_of_xasink_hides_in_a_function() -> None:
    hidden = [
        f"{path.relative_to(PACKAGE)}:{line} imports {target}"
        for module, path in modules().items()
        for target, deferred, line in imports(module, path)
        if deferred and own(target)
    ]
    assert hidden == []


#: The one exception to the rule above, each explicit and narrow: the places that import
#: xasink's code by name when it is first used (`importlib`), and the table of names each
#: keeps. `import xasink` defers the modules that bring Spark, pandas and Arrow (PEP 562
#: `__getattr__`, `_LAZY`); the command line imports a command's code once the command is
#: known (`COMMANDS`), so `xasink --help` starts no JVM and `check` loads no frame library.
DEFERRED = {"xasink.__init__": "_LAZY", "xasink.cli": "COMMANDS"}


def declared(module: str, name: str) -> list[str]:
    """The module names that `module`'s table `name` (a dict literal) lists."""
    tree = ast.parse(modules()[module].read_text())
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if isinstance(target, ast.Name) and target.id == name and node.value is not None:
            table = ast.literal_eval(node.value)
            return sorted(set(table.values()))
    return []


def test_imports_by_name_are_only_the_declared_ones() -> None:
    by_name = set()
    for module, path in modules().items():
        for target, _, _ in imports(module, path):
            if target == "importlib" or target.startswith("importlib."):
                by_name.add(module)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__import__":
                by_name.add(module)
    assert sorted(by_name) == sorted(DEFERRED)
    wrong = []
    for module, table in DEFERRED.items():
        targets = declared(module, table)
        assert targets, f"{module} declares no {table}"
        for target in targets:
            if target not in modules():
                wrong.append(f"{module}.{table} names {target}, which does not exist")
            elif (
                part_of(target) != part_of(module)
                and RANK[part_of(target)] >= RANK[part_of(module)]
            ):
                wrong.append(f"{module}.{table} names {target}, of a higher layer")
    assert wrong == []


@pytest.mark.parametrize("part", sorted(SPARK_FREE))
def test_only_the_spark_layer_and_the_table_types_import_pyspark(part: str) -> None:
    users = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for module, path in modules().items()
        if part_of(module) == part
        for target, _, line in imports(module, path)
        if target == "pyspark" or target.startswith("pyspark.")
    ]
    assert users == []


def test_no_module_imports_itself_in_a_loop() -> None:
    """Annotations' imports count too: a loop hidden under TYPE_CHECKING is still two modules
    that cannot be read, or moved, one without the other."""
    graph = {
        module: {
            t for t, _, _ in imports(module, path, typing=True) if t in modules() and t != module
        }
        for module, path in modules().items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert loops == []


#: A module a reader takes in at one sitting, and a function that fits on a screen.
MODULE_LINES, FUNCTION_LINES = 420, 80


@pytest.mark.parametrize("folder", [PACKAGE, PACKAGE.parent / "benchmarks"], ids=lambda p: p.name)
def test_modules_and_functions_stay_small(folder: Path) -> None:
    """Function sizes leave out the docstring: a public function's argument docs are the
    point, not a smell. The benchmark harness keeps the product's sizes."""
    large = []
    for path in folder.rglob("*.py"):
        source = path.read_text()
        name = path.relative_to(folder)
        if len(source.splitlines()) > MODULE_LINES:
            large.append(f"{name}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                size = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                doc = node.body[0]
                if isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                    size -= doc.end_lineno - doc.lineno + 1  # type: ignore[operator]
                if size > FUNCTION_LINES:
                    large.append(f"{name}:{node.lineno} {node.name}: {size} lines")
    assert large == []
