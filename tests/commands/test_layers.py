"""The command line is its own layer: no stage module imports argparse, the CLI, the commands
or the API (they did: `checks/verify.py` imported `draftset.api` at its top, and five stage
modules carried their command's parser, handler and `main`)."""

from __future__ import annotations

import ast
from pathlib import Path

import draftset

PACKAGE = Path(draftset.__file__).parent
TOP = {"cli.py", "api.py", "__init__.py"}  # the layers above the stages (and the lazy facade)
FORBIDDEN = ("argparse", "draftset.cli", "draftset.commands", "draftset.api")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "draftset":  # `from draftset import api`
                names.update(f"draftset.{alias.name}" for alias in node.names)
    return names


def _stage_modules() -> list[Path]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] == "commands" or str(rel) in TOP:
            continue
        if rel.parts[0] == "testing":  # the demo's stand-in server: a script of its own
            continue
        out.append(path)
    return out


def test_no_stage_module_imports_the_command_layer_or_the_api() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(
            name for name in _imports(path) if name.startswith(FORBIDDEN)
        )
        for path in _stage_modules()
    }
    offenders = {k: v for k, v in offenders.items() if v}
    assert offenders == {}
    assert len(_stage_modules()) > 50  # the walk saw the package


def test_the_cli_imports_no_stage_at_its_top() -> None:
    """Every spawned worker re-imports the console script's module: `cli` imports only
    `core.errors` at its top, the commands when it runs."""
    tree = ast.parse((PACKAGE / "cli.py").read_text(encoding="utf-8"))
    top = {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
    assert {m for m in top if m.startswith("draftset")} == {"draftset.core.errors"}
