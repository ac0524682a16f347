"""No import cycles anywhere in the package (issue 14: layers import only downwards).

The graph is built from the source with ``ast``: an edge for every import a
module runs when it is imported (module level, class bodies, ``if`` and
``try`` blocks; not function bodies, and not ``if TYPE_CHECKING:``). A hot
path chosen at import time (``_accel.load("codec")``) counts as importing
both twins, ``rvasync.fallback.<name>`` and ``rvasync_native.<name>``; the
Cython twins' top-level imports are read from the ``.pyx`` text. An import of
a submodule does not count as importing its package's ``__init__`` (that
would put every package in a cycle with its own modules).

Any cycle (strongly connected component) fails the test, at import time and
also counting imports inside functions (which only close the cycle later, at
the first call). Run this file as a script to print the cycles it finds.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("rvasync", "rvasync_native")

# The data layer (architecture.md, layer 1): messages, field types, the codec
# and its twins, subject syntax, and the leaves they stand on.
DATA_LAYER = frozenset(
    {
        "rvasync._accel",
        "rvasync._wire",
        "rvasync.advmsg",
        "rvasync.codec",
        "rvasync.errors",
        "rvasync.fallback.codec",
        "rvasync.fallback.subjects",
        "rvasync.fieldtypes",
        "rvasync.message",
        "rvasync.rvdatetime",
        "rvasync.subjects",
        "rvasync_native.codec",
        "rvasync_native.subjects",
    }
)
CHECKED_PREFIXES = ("rvasync.protocol",)

_PYX_IMPORT = re.compile(r"^(?:from\s+([\w.]+)\s+import\s+(.+)|import\s+([\w., ]+))$")
_HOT_PATH_LOAD = re.compile(r"""\bload\(\s*["'](\w+)["']\s*\)""")


def module_files() -> dict[str, Path]:
    """Dotted module name -> source file, for every module of the packages."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*")):
            if path.suffix not in (".py", ".pyx") or "build" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if path.suffix == ".py" or name not in found:
                found[name] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt], deferred: bool = False) -> list[ast.AST]:
    """Statements run when the module is imported (not TYPE_CHECKING blocks).

    ``deferred`` adds function bodies: imports put off until a call, which
    still tie the two modules together (the usual way to hide a cycle).
    """
    out: list[ast.AST] = []
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if deferred:
                out.extend(_import_time_nodes(node.body, deferred))
            continue
        if isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                out.extend(_import_time_nodes(node.body, deferred))
            out.extend(_import_time_nodes(node.orelse, deferred))
            continue
        if isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                out.extend(_import_time_nodes(block, deferred))
            for handler in node.handlers:
                out.extend(_import_time_nodes(handler.body, deferred))
            continue
        if isinstance(node, ast.ClassDef | ast.With):
            out.extend(_import_time_nodes(node.body, deferred))
            continue
        out.append(node)
    return out


def _resolve(target: str, names: list[str], modules: dict[str, Path]) -> set[str]:
    """Modules an import of ``names`` from ``target`` runs (submodules when they are modules)."""
    found: set[str] = set()
    for name in names:
        sub = f"{target}.{name}"
        if sub in modules:
            found.add(sub)
        elif target in modules:
            found.add(target)
    if not names and target in modules:
        found.add(target)
    if not found:
        # ``import a.b.c`` of a module outside the packages, or a name we do not know.
        parts = target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            found.add(".".join(parts))
    return found


def _hot_path_twins(name: str, modules: dict[str, Path]) -> set[str]:
    return {m for m in (f"rvasync.fallback.{name}", f"rvasync_native.{name}") if m in modules}


def imports_of(
    module: str, path: Path, modules: dict[str, Path], deferred: bool = False
) -> set[str]:
    text = path.read_text(encoding="utf-8")
    edges: set[str] = set()
    if path.suffix == ".pyx":
        for line in text.splitlines():
            match = _PYX_IMPORT.match(line.strip()) if not line[:1].isspace() else None
            if match is None or "cimport" in line:
                continue
            if match.group(1):
                names = [n.strip().split(" ")[0] for n in match.group(2).strip("()").split(",")]
                edges |= _resolve(match.group(1), [n for n in names if n], modules)
            else:
                for target in match.group(3).split(","):
                    edges |= _resolve(target.strip().split(" ")[0], [], modules)
        return edges - {module}
    tree = ast.parse(text, filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    uses_accel = False
    for node in _import_time_nodes(tree.body, deferred):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Import):
                for alias in sub.names:
                    edges |= _resolve(alias.name, [], modules)
            elif isinstance(sub, ast.ImportFrom):
                if sub.level:
                    base = package.split(".")
                    base = base[: len(base) - (sub.level - 1)]
                    target = ".".join(base + ([sub.module] if sub.module else []))
                else:
                    target = sub.module or ""
                if target == "rvasync._accel":
                    uses_accel = True
                edges |= _resolve(target, [a.name for a in sub.names], modules)
    if uses_accel:
        # A hot path picked at import time imports one of its twins: count both.
        for node in _import_time_nodes(tree.body, deferred):
            for match in _HOT_PATH_LOAD.finditer(ast.unparse(node)):
                edges |= _hot_path_twins(match.group(1), modules)
    return edges - {module}


def import_graph(deferred: bool = False) -> dict[str, set[str]]:
    """Module -> modules it imports; ``deferred`` adds imports inside functions."""
    modules = module_files()
    return {name: imports_of(name, path, modules, deferred) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def _checked(module: str) -> bool:
    """Every module of the package is held to the rule (the data layer and the
    protocol cores were first; the drivers followed once they were reshaped)."""
    return module.startswith(PACKAGES)


def _describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a] & members)]
    return f"{len(component)} modules: " + "; ".join(edges)


def test_graph_sees_the_data_layer():
    graph = import_graph()
    assert "rvasync.fieldtypes" in graph["rvasync.message"]
    assert {"rvasync.fallback.codec", "rvasync_native.codec"} <= graph["rvasync.codec"]
    assert "rvasync.protocol.ft.member" in graph["rvasync.protocol.ft"]


def _report(deferred: bool) -> list[str]:
    """Print the cycles outside the checked modules; return those touching them."""
    graph = import_graph(deferred)
    found = cycles(graph)
    bad = [c for c in found if any(_checked(m) for m in c)]
    elsewhere = [c for c in found if c not in bad]
    kind = "counting imports inside functions" if deferred else "at import time"
    if elsewhere:
        print(f"\nimport cycles {kind}, outside the data layer and protocol/ ({len(elsewhere)}):")
        for component in elsewhere:
            print("  " + _describe(component, graph))
    return [_describe(c, graph) for c in bad]


def test_no_import_time_cycles():
    bad = _report(deferred=False)
    assert not bad, "import cycles:\n" + "\n".join(bad)


def test_no_cycles_hidden_in_functions():
    # A function-level import closes the cycle when first called instead of at
    # import time; in these layers dependencies go one way only.
    bad = _report(deferred=True)
    assert not bad, "import cycles through imports inside functions:\n" + "\n".join(bad)


if __name__ == "__main__":
    for deferred in (False, True):
        graph = import_graph(deferred)
        print("counting imports inside functions:" if deferred else "at import time:")
        for component in cycles(graph):
            mark = "FAIL" if any(_checked(m) for m in component) else "info"
            print(f"  [{mark}] {_describe(component, graph)}")
    sys.exit(0)
