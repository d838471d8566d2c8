"""Import graph of ``services/rocket``: cycles and layer rules, read from the source with ``ast``.

Every ``import`` / ``from ... import`` statement counts, wherever it stands: at module
level, under ``if TYPE_CHECKING:``, or inside a function (a deferred import hides a
cycle from the interpreter, not from the reader). ``from package import name`` is an
edge to ``package.name`` when that is a module, else to the package. Edges go to the
named module only, not to the packages above it (as import-linter and pydeps count).

Run as a script to print the graph's cycles: ``python tests/unit/test_import_cycles.py``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"
PACKAGE = "rocket"

def module_files(root: Path = SERVICES, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """``{dotted module name: (file, is a package __init__)}`` for every ``.py`` under ``root/package``."""
    out: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts.pop()
        out[".".join(parts)] = (path, is_pkg)
    return out


def _targets(node: ast.AST, package: str, modules: dict[str, tuple[Path, bool]]) -> Iterable[str]:
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parts = package.split(".")
            parts = parts[: len(parts) - node.level + 1]
            base = ".".join(parts + ([node.module] if node.module else []))
        for alias in node.names:
            full = f"{base}.{alias.name}"
            yield full if full in modules else base


def import_graph(root: Path = SERVICES, package: str = PACKAGE) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``; see the module doc for what counts."""
    modules = module_files(root, package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, (path, is_pkg) in modules.items():
        pkg = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, pkg, modules):
                while target and target not in modules:  # a name inside a module: that module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (each sorted), sorted (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        # iterative Tarjan: (node, iterator over its successors)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, successors = work[-1]
            advanced = False
            for w in successors:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def _in(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_graph_sees_type_checking_and_deferred_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.sub import c\n    return c\n")
    (pkg / "sub" / "c.py").write_text("from ..a import thing\n")
    (pkg / "d.py").write_text("import pkg.sub\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.a"] == {"pkg.b"}
    assert graph["pkg.b"] == {"pkg.sub.c"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert graph["pkg.d"] == {"pkg.sub"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c"]]


def test_store_and_replication_depend_on_no_upper_layer() -> None:
    """The store (``store/ha`` included) imports only itself, ``rocket.message``, ``rocket.remoting``,
    the wire models of ``rocket.protocol`` and the process helpers of ``rocket.runtime`` (RocketMQ's
    ``store`` module sits below ``broker``); replication gets the broker through ``rocket.store.ha.host``."""
    allowed = ("rocket.store", "rocket.message", "rocket.remoting", "rocket.protocol", "rocket.runtime")
    bad = {f"{m} -> {t}" for m, targets in import_graph().items() if _in(m, ("rocket.store",))
           for t in targets if not _in(t, allowed)}
    assert sorted(bad) == []


def test_analytics_uses_the_client_public_api_only() -> None:
    """The Spark source reads through ``rocket.client``'s public names, not its private modules'
    internals: no ``._name`` attribute of an object of another module."""
    offenders = []
    for path in sorted((SERVICES / PACKAGE / "analytics").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                offenders.append(f"{path.relative_to(SERVICES)}:{node.lineno} .{node.attr}")
    assert offenders == []


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert found == [], f"import cycles: {found}"


@pytest.mark.parametrize(
    ("layer", "allowed"),
    [
        # the wire models sit at the bottom: they import nothing else of ours
        ("rocket.protocol", ("rocket.protocol",)),
        # the remoting layer knows frames and codes, nothing of NameServer, broker or client
        ("rocket.remoting", ("rocket.remoting", "rocket.protocol")),
        # the client library runs without the servers and without the embedded cluster (rocket.local)
        ("rocket.client", ("rocket.client", "rocket.protocol", "rocket.remoting", "rocket.message", "rocket.runtime",
                           "rocket.percentiles", "rocket.auth")),
        # the NameServer knows nothing of brokers' code; it may host a controller (RocketMQ's namesrv
        # module depends on its controller module for enableControllerInNamesrv)
        ("rocket.nameserver", ("rocket.nameserver", "rocket.protocol", "rocket.remoting", "rocket.runtime",
                               "rocket.controller", "rocket.auth")),
        # users, policies and signatures (ACL) are shared by clients, NameServers, brokers and controllers
        ("rocket.auth", ("rocket.auth", "rocket.protocol", "rocket.remoting")),
        # the controller knows nothing of brokers', NameServers' or clients' code (it checks and signs with rocket.auth)
        ("rocket.controller", ("rocket.controller", "rocket.protocol", "rocket.remoting", "rocket.runtime",
                               "rocket.auth")),
    ],
)
def test_layers_import_only_below(layer: str, allowed: tuple[str, ...]) -> None:
    bad = {f"{m} -> {t}" for m, targets in import_graph().items() if _in(m, (layer,))
           for t in targets if not _in(t, allowed)}
    assert sorted(bad) == []


if __name__ == "__main__":
    for component in cycles(import_graph()):
        print(f"{len(component)} modules: {' '.join(component)}")
    sys.exit(0)
