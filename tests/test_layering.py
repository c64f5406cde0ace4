"""The import graph between draftset's folders: no cycle, the stages never import the command
layer, arrows point down the declared layers, and every import hidden in a function says why.

Read from the source with `ast` (nothing is imported), so a new backwards arrow or an
undocumented lazy import fails here, naming the file and line, before a reader meets it.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "draftset"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("core",),  # records, reasons, defaults, counters: imports nothing of draftset
    ("console",),  # progress bars and safe terminal text, shared by every job
    ("sources",),  # files -> raw rows -> normalized rows
    ("select", "mask"),  # the stream step on the driver; the row step in the workers
    ("output",),  # writers of EncodedRows, readback
    ("engine",),  # where the row step runs: inline, pool, ray
    ("config",),  # options and recipes, built from the stages' types
    ("checks", "generation"),  # verify; answering prompts
    ("review",),  # show and report read a set and its checks
    ("pipeline",),  # the build and run jobs
    ("api",),
    ("commands",),
    ("cli",),
    ("__main__",),  # `python -m draftset`: the command line
    ("draftset",),  # the package root: `from draftset import build` loads the API
)
"""Lower first. An import may point only to an earlier layer; folders in one layer do not import
each other (that counts as a backwards arrow too)."""

MAX_BACKWARDS = 1
"""Backwards arrows allowed, each a (from, to) pair of folders."""

STAGES = (
    "core",
    "config",
    "sources",
    "select",
    "mask",
    "output",
    "engine",
    "checks",
    "generation",
    "review",
    "pipeline",
)
COMMAND_LAYER = ("cli", "commands", "api", "__main__")

LAZY_REASON = re.compile(r"#\s*lazy:\s*\S")


@dataclass(frozen=True)
class Import:
    source: str  # the importing folder (or top module: `cli`, `api`, `console`, `draftset`)
    target: str  # the imported one
    file: str  # relative to src/draftset
    line: int
    kind: str  # "top" (runs on import), "lazy" (inside a function), "type" (TYPE_CHECKING)


def unit_of(rel: Path) -> str:
    """The folder a module belongs to; a module at the package top is its own unit."""
    if len(rel.parts) > 1:
        return rel.parts[0]
    return "draftset" if rel.name == "__init__.py" else rel.stem


def _targets(node: ast.Import | ast.ImportFrom, rel: Path) -> list[str]:
    """The draftset units an import statement loads."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:  # relative: resolve against the importing module's package
            base = list(rel.parts[:-1])[: len(rel.parts) - node.level]
            module = ".".join(["draftset", *base, *([node.module] if node.module else [])])
        else:
            module = node.module or ""
        names = [f"draftset.{a.name}" for a in node.names] if module == "draftset" else [module]
    units = []
    for name in names:
        parts = name.split(".")
        if parts[0] != "draftset":
            continue
        if len(parts) == 1:
            units.append("draftset")
            continue
        sub = parts[1]
        units.append(
            sub if (PACKAGE / sub).is_dir() else ("draftset" if sub.startswith("__") else sub)
        )
    return units


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, kind: str, found: list[tuple[ast.Import | ast.ImportFrom, str]]) -> None:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            found.append((child, kind))
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            _walk(child, "lazy", found)
        elif isinstance(child, ast.If) and _is_type_checking(child.test) and kind == "top":
            for stmt in child.body:
                _walk(ast.Module(body=[stmt], type_ignores=[]), "type", found)
            for stmt in child.orelse:
                _walk(ast.Module(body=[stmt], type_ignores=[]), kind, found)
        else:
            _walk(child, kind, found)


def module_imports() -> tuple[list[Import], dict[str, list[str]]]:
    """Every import between two units, and each file's source lines."""
    imports: list[Import] = []
    lines: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        text = path.read_text(encoding="utf-8")
        lines[str(rel)] = text.splitlines()
        found: list[tuple[ast.Import | ast.ImportFrom, str]] = []
        _walk(ast.parse(text, str(rel)), "top", found)
        source = unit_of(rel)
        for node, kind in found:
            for target in _targets(node, rel):
                imports.append(Import(source, target, str(rel), node.lineno, kind))
    return imports, lines


IMPORTS, LINES = module_imports()
EDGES = [i for i in IMPORTS if i.source != i.target]


def _where(imports: list[Import]) -> str:
    return "\n".join(f"  {i.file}:{i.line} ({i.kind}) {i.source} -> {i.target}" for i in imports)


def test_the_graph_was_read():
    """Guards the guard: an empty graph would pass every test below."""
    assert {i.source for i in EDGES} >= {"mask", "pipeline", "checks", "engine"}
    assert any(i.kind == "lazy" for i in IMPORTS) and any(i.kind == "type" for i in IMPORTS)
    known = {u for layer in LAYERS for u in layer}
    unknown = sorted(({i.source for i in EDGES} | {i.target for i in EDGES}) - known)
    assert not unknown, f"folders missing from LAYERS: {unknown}"


def _cycle(edges: list[Import]) -> list[str] | None:
    graph: dict[str, set[str]] = defaultdict(set)
    for e in edges:
        graph[e.source].add(e.target)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


@pytest.mark.parametrize("kinds", [("top",), ("top", "lazy", "type")], ids=["top", "all"])
def test_no_import_cycle_between_folders(kinds):
    """A cycle through top-level imports breaks on import order; one through lazy or
    type-only imports still means neither folder can be read without the other."""
    edges = [e for e in EDGES if e.kind in kinds]
    cycle = _cycle(edges)
    if cycle:
        pairs = set(itertools.pairwise(cycle))
        shown = [e for e in edges if (e.source, e.target) in pairs]
        pytest.fail(f"import cycle {' -> '.join(cycle)}:\n{_where(shown)}")


@pytest.mark.parametrize("stage", STAGES)
def test_stages_never_import_the_command_layer(stage):
    """Every command goes CLI -> API -> stages; a stage importing upwards makes the cycle."""
    wrong = [e for e in EDGES if e.source == stage and e.target in COMMAND_LAYER]
    assert not wrong, f"{stage} imports the command layer:\n{_where(wrong)}"


def _rank(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def test_at_most_one_backwards_arrow():
    backwards = [e for e in EDGES if _rank(e.target) >= _rank(e.source)]
    pairs = sorted({(e.source, e.target) for e in backwards})
    assert len(pairs) <= MAX_BACKWARDS, (
        f"{len(pairs)} backwards arrows against LAYERS {pairs}:\n{_where(backwards)}"
    )


def _says_why(imp: Import) -> bool:
    """A ``# lazy: <reason>`` comment on the import's lines, on the line just above, or in the
    comment lines just above."""
    lines = LINES[imp.file]
    i = imp.line - 1
    if LAZY_REASON.search(lines[i]):
        return True
    j = i + 1  # the rest of a parenthesised import
    while j < len(lines) and "(" in lines[i] and ")" not in lines[j - 1]:
        if LAZY_REASON.search(lines[j]):
            return True
        j += 1
    if i > 0 and LAZY_REASON.search(lines[i - 1]):  # e.g. ``try:  # lazy: ...``
        return True
    k = i - 1
    while k >= 0 and lines[k].strip().startswith("#"):
        if LAZY_REASON.search(lines[k]):
            return True
        k -= 1
    return False


def _every_lazy_import() -> list[Import]:
    """Every import inside a function, draftset's or not (a hidden third-party import hides
    a start-up cost the same way)."""
    found: list[Import] = []
    for file, lines in LINES.items():
        tree = ast.parse("\n".join(lines))
        nodes: list[tuple[ast.Import | ast.ImportFrom, str]] = []
        _walk(tree, "top", nodes)
        rel = Path(file)
        found += [
            Import(unit_of(rel), "", file, node.lineno, kind)
            for node, kind in nodes
            if kind == "lazy"
        ]
    return found


_ALL_LAZY = _every_lazy_import()


@pytest.mark.parametrize("file", sorted({i.file for i in _ALL_LAZY}))
def test_every_lazy_import_says_why(file):
    """An import inside a function hides an edge of the graph: it stays only with a reason
    (a measured start-up cost, a process that must not load it), written beside it."""
    silent = [i for i in [i for i in _ALL_LAZY if i.file == file] if not _says_why(i)]
    shown = "\n".join(f"  {i.file}:{i.line}: {LINES[i.file][i.line - 1].strip()}" for i in silent)
    assert not silent, f"lazy imports without a `# lazy: <reason>` comment:\n{shown}"
