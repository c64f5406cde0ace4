"""The command line is its own layer (tests/test_layering.py holds that no stage imports it): the
console script's module stays lean for the spawned children, and a build's helper process starts
before the option schema loads."""

from __future__ import annotations

import ast
from pathlib import Path

import draftset

PACKAGE = Path(draftset.__file__).parent


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
        "def seen(self, *args, **kwargs):\n"
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
