"""No package imports itself in a circle: for each package, the graph of its src/ modules'
imports (every import statement, at any depth, lazy ones included: a lazy import hides a cycle,
it does not remove it) has no cycle. Read from the AST, so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGES = sorted((Path(__file__).resolve().parents[1] / "packages").glob("*/src/*"))
GENERATED = "proto"
"""protoc's modules import each other by design and are checked by test_proto_fresh."""
KNOWN_CYCLES: set[tuple[str, str]] = set()
"""Import edges of known cycles, each with what removes it. Delete an entry when its cycle goes;
the test below fails once an entry's import no longer exists, so none rots."""


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, name: str, files: set[str]) -> set[str]:
    """Modules among ``files`` that the file at ``path`` (module ``name``) imports.
    ``from pkg import x`` imports module ``pkg.x`` when there is one, else package ``pkg``."""
    out: set[str] = set()
    here = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                anchor = parts[: len(parts) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in files else base)
    return (out & files) - {name}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    src = package_dir.parent
    files = {
        module_name(p, src): p
        for p in package_dir.rglob("*.py")
        if GENERATED not in p.relative_to(package_dir).parts[:-1]
    }
    return {name: imports_of(path, name, set(files)) for name, path in files.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize("package_dir", PACKAGES, ids=[p.name for p in PACKAGES])
def test_package_has_no_import_cycle(package_dir: Path) -> None:
    graph = import_graph(package_dir)
    for src, dst in KNOWN_CYCLES:
        graph.get(src, set()).discard(dst)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_known_cycles_still_exist() -> None:
    graphs = {}
    for package_dir in PACKAGES:
        graphs.update(import_graph(package_dir))
    gone = {(a, b) for a, b in KNOWN_CYCLES if b not in graphs.get(a, set())}
    assert not gone, f"delete {sorted(gone)} from KNOWN_CYCLES: the import is gone"


def test_the_checker_finds_a_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "demo"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from demo import a\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert find_cycle(import_graph(pkg)) == ["demo.a", "demo.b", "demo.a"]
