"""Layering: no module touches another object's private attributes.

Every module under ``rvasync/`` is parsed with :mod:`ast`; an attribute access
``X._name`` is a violation unless ``X`` is ``self``, ``cls``, ``super()`` or a
module (``rvasync._accel.load``, ``from rvasync import _accel``): reaching
into another object's ``_private`` state couples two classes through
something neither documents. Same-class access is not a violation: in a
method, ``X`` may be another instance of the method's own class, when the
method's source shows it (a parameter annotated with the class, one past an
``if not isinstance(x, Class): return`` guard, or a local made only by
``Class(...)`` / ``object.__new__(Class)``; see ``_instances_of_own_class``).
Drivers built on transports (docs: "Drivers built on transports ... use the
transports' documented methods, never their private attributes") get none at
all; see the driver-facing methods of ``BaseTransport``, ``Listener``,
``Queue`` and ``Message``.

Dunder names (``__class__``) are not private. ``getattr(x, "_name")`` is not
caught here: don't.

Private modules are the same rule one level up: a module whose name starts
with ``_`` (``rvasync/ftdriver/_serial.py``) belongs to its package, which
includes the package's subpackages; no other package imports it. What two
packages share lives in a public module (``rvasync/driverkit/`` holds what
the drivers share). ``rvasync``'s own private modules (``rvasync._logging``)
belong to the whole library.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "rvasync"

#: Directories (relative to rvasync/) where no violation is allowed at all. The
#: driver kit (driverkit/) sits at the driver layer, below the drivers built on it.
STRICT = ("cmdriver/", "driverkit/", "ftdriver/", "ropsdriver/", "protocol/rops/", "vcdriver/")

#: Today's violations outside the strict directories: file (relative to
#: rvasync/) -> the private attribute names it still reaches for on other
#: objects. THIS LIST MUST ONLY SHRINK: fix a violation by giving the owner a
#: documented method, then remove its name here; never add a name or a file
#: (a new need is a new documented method). Recorded 2026-11-24, issue 14.
ALLOWLIST: dict[str, frozenset[str]] = {
    # The pure codec twin builds and reads Message storage directly.
    "fallback/codec.py": frozenset({"_fields", "_from_wire", "_ids", "_shared", "_wire"}),
    # The pure msgbuild twin is Message.delivery_copy's body: it fills the copy's storage.
    "fallback/msgbuild.py": frozenset({"_fields", "_ids", "_shared"}),
    "fallback/rmframe.py": frozenset({"_header"}),
    # Queue and QueueGroup (one module) wake and rearrange each other.
    "queues.py": frozenset({"_arrange", "_forget", "_groups", "_notify", "_wake", "_watched"}),
    "rvdatetime.py": frozenset({"_microseconds", "_seconds"}),
    "spark/capture.py": frozenset({"_fields"}),
    # process.py sets msg._shared inline (what Message.share does) because a
    # call per message is what its send path cannot afford.
    "transport/process.py": frozenset({"_shared"}),
}


#: Imports of another package's private module still made: file (relative to
#: rvasync/) -> the private modules it imports. THIS LIST MUST ONLY SHRINK:
#: make the module public (or move what is shared to rvasync/driverkit/) and
#: remove the entry; never add one. Emptied 2026-12, issue 36 (the group
#: channel and deadline timer left ftdriver for rvasync/driverkit/).
PRIVATE_IMPORT_ALLOWLIST: dict[str, frozenset[str]] = {}


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved against ``package``."""
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return base


def _module_names(tree: ast.AST, package: str) -> dict[str, str]:
    """Names bound to modules by the module's imports: local name -> dotted module."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            for alias in node.names:
                dotted = f"{base}.{alias.name}"
                if _is_module(dotted):
                    names[alias.asname or alias.name] = dotted
    return names


def _dotted(node: ast.expr, modules: dict[str, str]) -> str | None:
    """``node`` as a dotted module path when it names a module, else None."""
    if isinstance(node, ast.Name):
        return modules.get(node.id)
    if isinstance(node, ast.Attribute):
        parent = _dotted(node.value, modules)
        if parent is not None and _is_module(f"{parent}.{node.attr}"):
            return f"{parent}.{node.attr}"
    return None


def _owner_is_allowed(value: ast.expr, modules: dict[str, str]) -> bool:
    if isinstance(value, ast.Name) and value.id in ("self", "cls"):
        return True
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "super"
    ):
        return True
    return _dotted(value, modules) is not None


def _new_aliases(tree: ast.Module) -> frozenset[str]:
    """Module-level names bound to ``object.__new__`` (``_new = object.__new__``)."""
    return frozenset(
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and _is_object_new(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    )


def _is_object_new(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "__new__"
        and isinstance(node.value, ast.Name)
        and node.value.id == "object"
    )


def _is_name(node: ast.expr | None, name: str) -> bool:
    """``node`` is ``name`` or its string annotation ``"name"``."""
    if isinstance(node, ast.Name):
        return node.id == name
    return isinstance(node, ast.Constant) and node.value == name


def _makes(value: ast.expr, cls: str, new_aliases: frozenset[str]) -> bool:
    """``value`` makes an instance of ``cls``: ``cls(...)``, ``object.__new__(cls)`` or an alias."""
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if _is_name(func, cls) and isinstance(func, ast.Name):
        return True
    allocates = _is_object_new(func) or (isinstance(func, ast.Name) and func.id in new_aliases)
    return allocates and bool(value.args) and _is_name(value.args[0], cls)


def _parameters(args: ast.arguments) -> list[ast.arg]:
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    return every + [arg for arg in (args.vararg, args.kwarg) if arg is not None]


def _bindings(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[ast.AST]]:
    """Every statement or node in ``func`` (nested scopes included) that binds a name."""
    bound: dict[str, list[ast.AST]] = {}
    for node in ast.walk(func):
        names: list[str] = []
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names = [node.id]
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names = [node.name]
        elif isinstance(node, ast.alias):
            names = [(node.asname or node.name).split(".")[0]]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names = [node.name] if node is not func else []
        for name in names:
            bound.setdefault(name, []).append(node)
    return bound


def _guarded(stmt: ast.stmt, cls: str) -> str | None:
    """The name ``stmt`` checks, when it is ``if not isinstance(name, cls): return/raise``."""
    if not (isinstance(stmt, ast.If) and not stmt.orelse):
        return None
    if not isinstance(stmt.body[-1], ast.Return | ast.Raise):
        return None
    test = stmt.test
    if not (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)):
        return None
    call = test.operand
    if (
        isinstance(call, ast.Call)
        and _is_name(call.func, "isinstance")
        and len(call.args) == 2
        and isinstance(call.args[0], ast.Name)
        and _is_name(call.args[1], cls)
    ):
        return call.args[0].id
    return None


def _instances_of_own_class(
    func: ast.FunctionDef | ast.AsyncFunctionDef, cls: str, new_aliases: frozenset[str]
) -> dict[str, int]:
    """Names that hold an instance of ``cls`` in its method ``func``: name -> first line.

    Same-class access: a class may read the private state of another instance
    of itself (equality, copies), as it reads its own. Such a name is one the
    method never rebinds otherwise and which is
    * a parameter annotated with the class (``other: Message``), or
    * a parameter after a top-level guard ``if not isinstance(other, Message):
      return ...`` (from the line after the guard), or
    * a local every assignment of which makes an instance of the class
      (``clone = Message(...)``, ``clone = object.__new__(Message)`` or a
      module alias of ``object.__new__``).
    """
    bound = _bindings(func)
    found: dict[str, int] = {}
    parameters = {arg.arg: arg for arg in _parameters(func.args)}
    for name, arg in parameters.items():
        if name not in bound and _is_name(arg.annotation, cls):
            found[name] = func.lineno
    for stmt in func.body:
        name = _guarded(stmt, cls)
        if name is not None and name in parameters and name not in bound and name not in found:
            found[name] = (stmt.end_lineno or stmt.lineno) + 1
    for name, nodes in bound.items():
        if name in parameters:
            continue
        made = []
        for node in nodes:
            parent = _assignment_of(func, node)
            if parent is None or not _makes(parent.value, cls, new_aliases):
                break
            made.append(parent.lineno)
        else:
            found[name] = min(made)
    return found


def _assignment_of(func: ast.AST, target: ast.AST) -> ast.Assign | None:
    """The plain ``name = value`` statement in ``func`` whose only target is ``target``."""
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and node.targets[0] is target:
            return node
    return None


class _PrivateAccesses(ast.NodeVisitor):
    def __init__(self, modules: dict[str, str], new_aliases: frozenset[str]) -> None:
        self.modules = modules
        self.new_aliases = new_aliases
        self.found: list[tuple[int, str]] = []
        # Names holding an instance of the enclosing class in this method: name -> from line.
        self.own: dict[str, int] = {}

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        outer = self.own
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                self.own = _instances_of_own_class(child, node.name, self.new_aliases)
                self.generic_visit(child)  # a method: its parameters are the names found
            else:
                self.own = {}
                self.visit(child)
        self.own = outer

    def _visit_scope(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        # A nested function's own parameters hide the method's names.
        outer = self.own
        hidden = {arg.arg for arg in _parameters(node.args)}
        self.own = {name: line for name, line in outer.items() if name not in hidden}
        self.generic_visit(node)
        self.own = outer

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_scope(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._visit_scope(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_scope(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        owner = node.value
        if (
            name.startswith("_")
            and not (name.startswith("__") and name.endswith("__"))
            and not _owner_is_allowed(owner, self.modules)
            and not (
                isinstance(owner, ast.Name)
                and owner.id in self.own
                and node.lineno >= self.own[owner.id]
            )
        ):
            self.found.append((node.lineno, name))
        self.generic_visit(node)


def private_accesses(source: str, package: str = "rvasync") -> list[tuple[int, str]]:
    """(line, attribute) of every access to another object's private attribute in ``source``.

    Not counted: accesses on ``self``, ``cls``, ``super()``, a module, or (in a
    method) another instance of the method's own class (see
    :func:`_instances_of_own_class`).
    """
    tree = ast.parse(source)
    scanner = _PrivateAccesses(_module_names(tree, package), _new_aliases(tree))
    scanner.visit(tree)
    return sorted(scanner.found)


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _scan(
    check: Callable[[str, str], list[tuple[int, str]]] | None = None,
) -> dict[str, list[tuple[int, str]]]:
    """``check(source, package)`` (default :func:`private_accesses`) of every module, by file."""
    check = check or private_accesses
    result = {}
    for path in _modules():
        relative = path.relative_to(PACKAGE).as_posix()
        package = ".".join(["rvasync", *path.relative_to(PACKAGE).parent.parts])
        found = check(path.read_text(encoding="utf-8"), package)
        if found:
            result[relative] = found
    return result


def test_no_module_reaches_into_another_objects_private_attributes():
    problems = []
    for relative, found in _scan().items():
        strict = relative.startswith(STRICT)
        allowed = frozenset() if strict else ALLOWLIST.get(relative, frozenset())
        for line, name in found:
            if name not in allowed:
                problems.append(f"rvasync/{relative}:{line}: .{name}")
    assert not problems, (
        "access to another object's private attribute (give its class a documented "
        "method instead; see tests/test_layering.py):\n  " + "\n  ".join(problems)
    )


def test_strict_directories_have_no_allowlist_entries():
    assert not [path for path in ALLOWLIST if path.startswith(STRICT)]


def test_allowlisted_files_exist():
    missing = [path for path in ALLOWLIST if not (PACKAGE / path).is_file()]
    assert not missing, f"allowlist names files that are gone (remove them): {missing}"


def test_allowlist_names_only_accesses_still_made():
    # The list can only shrink: a name a file no longer reaches for (or a file
    # with no violation left) must leave the list with the fix, so it cannot
    # come back unnoticed.
    found = _scan()
    stale = {}
    for path, names in ALLOWLIST.items():
        gone = names - {name for _, name in found.get(path, ())}
        if gone:
            stale[path] = sorted(gone)
    assert not stale, f"allowlist entries no longer needed (remove them): {stale}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(transport):\n    transport._route(1)\n", [(2, "_route")]),
        ("class A:\n    def f(self, other):\n        return other._x + self._y\n", [(3, "_x")]),
        ("def f(msg):\n    return msg.listener._taken(msg)\n", [(2, "_taken")]),
        ("class A(B):\n    def f(self):\n        return super()._route(self._x)\n", []),
        ("class A:\n    @classmethod\n    def f(cls):\n        return cls._registry\n", []),
        ("import rvasync._accel\nrvasync._accel.load('x')\n", []),
        ("from rvasync import _accel\n_accel.load('x')\n", []),
        ("import rvasync as rv\nrv._accel.load('x')\n", []),
        ("from rvasync.message import Message\nMessage._delivery_copy\n", [(2, "_delivery_copy")]),
        ("def f(x):\n    return x.__class__, x.public\n", []),
        # Same-class access: a method reading another instance of its own class.
        ("class A:\n    def f(self, other: A):\n        return other._x\n", []),
        ("class A:\n    def f(self, other: 'A'):\n        return other._x\n", []),
        (
            "class A:\n    def __eq__(self, other):\n        if not isinstance(other, A):\n"
            "            return NotImplemented\n        return other._x\n",
            [],
        ),
        (
            "_new = object.__new__\nclass A:\n    def copy(self):\n        clone = _new(A)\n"
            "        clone._x = self._x\n        return clone\n",
            [],
        ),
        ("class A:\n    def f(self):\n        a = A()\n        return a._x\n", []),
        # ... and what stays a violation: another class, or a name not known to hold one.
        (
            "class A:\n    pass\nclass B:\n    def f(self, other: A):\n        return other._x\n",
            [(5, "_x")],
        ),
        ("class A:\n    pass\ndef f(other: A):\n    return other._x\n", [(4, "_x")]),
        ("class A:\n    def f(self, other: A | None):\n        return other._x\n", [(3, "_x")]),
        (
            "class A:\n    def f(self, other: A):\n        other = g()\n        return other._x\n",
            [(4, "_x")],
        ),
        (
            "class A:\n    def f(self, other: A):\n        return lambda other: other._x\n",
            [(3, "_x")],
        ),
        (
            "class A:\n    def __eq__(self, other):\n        if not isinstance(other, B):\n"
            "            return NotImplemented\n        return other._x\n",
            [(5, "_x")],
        ),
        (
            "class A:\n    def __eq__(self, other):\n        y = other._x\n"
            "        if not isinstance(other, A):\n            return NotImplemented\n"
            "        return y\n",
            [(3, "_x")],
        ),
        (
            "class A:\n    def f(self):\n        clone = object.__new__(B)\n"
            "        return clone._x\n",
            [(4, "_x")],
        ),
        (
            "class A:\n    def f(self, g):\n        clone = A()\n        if g:\n"
            "            clone = g()\n        return clone._x\n",
            [(6, "_x")],
        ),
        (
            "class A:\n    def f(self, peers):\n        for a in peers:\n"
            "            a = A()\n        return a._x\n",
            [(5, "_x")],
        ),
    ],
)
def test_the_check_finds_what_it_should(source, expected):
    assert private_accesses(source) == expected


def _imported_modules(tree: ast.AST, package: str) -> list[tuple[int, str]]:
    """(line, dotted module) of every module ``tree``'s imports name, relative ones resolved."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            found.append((node.lineno, base))
            found += [
                (node.lineno, f"{base}.{alias.name}")
                for alias in node.names
                if _is_module(f"{base}.{alias.name}")
            ]
    return found


def _private_owner(dotted: str) -> str | None:
    """The package a private module belongs to (``a.b`` for ``a.b._c.d``), or None."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:i])
    return None


def private_module_imports(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in ``source`` of a private module of another package.

    ``package`` is the importing module's package; a private module may be
    imported from its own package and the packages inside it.
    """
    found = []
    for line, dotted in _imported_modules(ast.parse(source), package):
        owner = _private_owner(dotted)
        if owner is None or not owner.startswith("rvasync"):
            continue
        if package != owner and not package.startswith(owner + "."):
            found.append((line, dotted))
    return sorted(set(found))


def test_no_module_imports_another_packages_private_module():
    problems = []
    for relative, found in _scan(private_module_imports).items():
        allowed = PRIVATE_IMPORT_ALLOWLIST.get(relative, frozenset())
        problems += [f"rvasync/{relative}:{line}: {m}" for line, m in found if m not in allowed]
    assert not problems, (
        "import of another package's private module (make it public, or move what is "
        "shared to rvasync/driverkit/; see tests/test_layering.py):\n  " + "\n  ".join(problems)
    )


def test_private_import_allowlist_names_only_imports_still_made():
    found = _scan(private_module_imports)
    stale = {
        path: sorted(names - {m for _, m in found.get(path, ())})
        for path, names in PRIVATE_IMPORT_ALLOWLIST.items()
        if names - {m for _, m in found.get(path, ())}
    }
    assert not stale, f"private-import allowlist entries no longer needed (remove them): {stale}"


_SERIAL = "rvasync.ftdriver._serial"


@pytest.mark.parametrize(
    ("source", "package", "expected"),
    [
        (f"from {_SERIAL} import S\n", "rvasync.ftdriver", []),
        (f"from {_SERIAL} import S\n", "rvasync.cmqdriver", [(1, _SERIAL)]),
        (f"import {_SERIAL}\n", "rvasync.vcdriver", [(1, _SERIAL)]),
        ("from rvasync.ftdriver import _serial\n", "rvasync.cmqdriver", [(1, _SERIAL)]),
        ("from ..ftdriver import _serial\n", "rvasync.cmqdriver", [(1, _SERIAL)]),
        ("from . import _serial\n", "rvasync.ftdriver", []),
        ("from rvasync._logging import stderr_logger\n", "rvasync.cmqdriver", []),
        ("from rvasync import _accel\n", "rvasync.protocol.cm", []),
        ("from rvasync.driverkit.channel import GroupChannel\n", "rvasync.cmqdriver", []),
        ("from rvasync.transport._x import y\n", "rvasync.transport.sub", []),
        ("import asyncio._private_thing\n", "rvasync.cmqdriver", []),
    ],
)
def test_the_private_import_check_finds_what_it_should(source, package, expected):
    assert private_module_imports(source, package) == expected


def test_importing_rvasync_changes_no_other_modules_behaviour():
    # The queues' limit-exceeded reporter stays the default until a process
    # transport is made (the documented registration point), and a reporter
    # the program installed first is kept then.
    script = """
import asyncio
import rvasync as rv
from rvasync import queues
from rvasync.transport import process

assert queues.set_limit_exceeded_reporter(None) is queues.log_limit_exceeded

def mine(queue):
    pass

async def main():
    queues.set_limit_exceeded_reporter(mine)
    rv.process_transport()
    assert queues.set_limit_exceeded_reporter(None) is mine
    # With the default back, the next process transport made installs its reporter.
    another = process.ProcessTransport(asyncio.get_running_loop())
    assert queues.set_limit_exceeded_reporter(None) is process.report_limit_exceeded
    another._shutdown()

asyncio.run(main())
print("ok")
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
