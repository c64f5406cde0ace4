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


def test_build_starts_its_helper_before_the_schema_loads(tmp_path: Path) -> None:
    """`draftset build` starts its helper process before it builds its parser: the option
    schema's imports (pydantic) would otherwise delay the template load by as much."""
    import subprocess
    import sys

    src = tmp_path / "in.jsonl"
    src.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    script = (
        "import sys\n"
        "import draftset.engine.helper as h\n"
        "def seen(self):\n"
        "    print('pydantic' in sys.modules, 'draftset.config.schema' in sys.modules)\n"
        "    raise SystemExit(0)\n"
        "h.Sidecar.__init__ = seen\n"
        "from draftset.cli import main\n"
        f"main(['build', {str(src)!r}, '--out', 'o', '--tokenizer', 't', '--workers', '2'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.stdout.split() == ["False", "False"], out


def test_the_early_parse_reads_the_schemas_flags() -> None:
    """`commands.common.build_helper_ahead` reads --workers and --engine itself (before the
    schema loads): the flags must be the ones `BuildArgs` declares."""
    from draftset.config.fields import flag_of
    from draftset.config.schema import BuildArgs

    text = (PACKAGE / "commands" / "common.py").read_text(encoding="utf-8")
    for name in ("workers", "engine"):
        assert f'early.add_argument("{flag_of(BuildArgs, name)}"' in text
