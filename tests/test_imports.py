"""The library's import graph (issue: one shape for every chapter): no import cycles anywhere in `rlib` and
`kernels`, counting imports inside functions too, and no arrow from `kernels` back up into `rlib`."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rlib", "kernels")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` names or lies in (`rlib.x.f` -> `rlib.x`)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: never executed, no cycle at run time)."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return skipped


def import_graph() -> nx.DiGraph:
    """module -> every rlib/kernels module it imports (at any level of the file, relative imports resolved; imports
    for type checking only left out)."""
    known = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            for target in targets:
                if target.split(".")[0] in PACKAGES:
                    resolved = _resolve(target, known)
                    if resolved and resolved != module and not module.startswith(resolved + "."):
                        graph.add_edge(module, resolved)
    return graph


def test_the_graph_sees_real_imports():
    graph = import_graph()
    assert graph.has_edge("rlib.relaxed.experiments", "rlib.relax")
    assert graph.has_edge("rlib.serving.looped", "rlib.serving.rows")
    assert graph.number_of_edges() > 200


def test_no_import_cycles():
    cycles = sorted(sorted(c) for c in nx.simple_cycles(import_graph()))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles[:10])


def test_kernels_import_nothing_from_rlib():
    graph = import_graph()
    arrows = sorted((a, b) for a, b in graph.edges if a.startswith("kernels") and b.startswith("rlib"))
    assert not arrows, f"kernels must stay standalone; these import rlib: {arrows}"


@pytest.mark.parametrize("chapter", ["basemodels", "recursive", "relaxed", "mor", "recurrent", "layerskip"])
def test_no_chapter_imports_another_chapters_private_names(chapter):
    """A chapter may use another chapter's public functions (chapter 02 uses chapter 01's teacher), never its
    underscored names."""
    offenders = []
    for path in sorted((ROOT / "rlib" / chapter).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlib."):
                other = node.module.split(".")[1]
                if other != chapter and any(a.name.startswith("_") for a in node.names):
                    offenders.append(f"{path.name}: from {node.module} import {[a.name for a in node.names]}")
            private = isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
            if private and isinstance(node.value, ast.Name) and node.value.id in ("ch01", "recursive", "relaxed"):
                offenders.append(f"{path.name}: {node.value.id}.{node.attr}")
    assert not offenders, offenders
