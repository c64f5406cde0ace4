"""The files a command writes about a set (``verify --json FILE``, ``report -o FILE``): what
`verify` recognises as its own result, and the check of the place, run before any work and
again just before the file is replaced (`core.files.output_file_problem`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from draftset.core.errors import UsageError
from draftset.core.files import output_file_problem

VERIFY_JSON_KIND = "draftset-verify-json/"
VERIFY_JSON_FORMAT = VERIFY_JSON_KIND + "1"
"""The ``format`` of what ``verify --json FILE`` writes: how `verify` knows a file it may
replace (any ``draftset-verify-json/<n>``; a file written before the key: exactly the keys
``dir``, ``passed``, ``checks``)."""
_JSON_SNIFF_LIMIT = 64 << 20  # a larger file is recognised by its opening line alone


def is_verify_json(path: Path) -> bool:
    """Whether ``path`` holds what ``verify --json`` writes (`VerifyResult.to_json`)."""
    try:
        with open(path, "rb") as f:
            text = f.read(_JSON_SNIFF_LIMIT + 1)
    except OSError:
        return False
    if len(text) > _JSON_SNIFF_LIMIT:
        return text.startswith(f'{{\n  "format": "{VERIFY_JSON_KIND}'.encode())
    try:
        data = json.loads(text)
    except ValueError:
        return False
    if not isinstance(data, dict):
        return False
    if str(data.get("format", "")).startswith(VERIFY_JSON_KIND):
        return True
    return (
        set(data) == {"dir", "passed", "checks"}
        and isinstance(data["passed"], bool)
        and isinstance(data["checks"], list)
    )


def set_sources(dir: Path) -> list[str]:
    """The source files and folders the set's manifest names (absolute paths; none when the
    manifest cannot be read: opening the set then says why)."""
    try:
        manifest = json.loads((Path(dir) / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    found: list[str] = []
    inputs = manifest.get("inputs") if isinstance(manifest, dict) else None
    for inp in inputs if isinstance(inputs, list) else []:
        if not isinstance(inp, dict):
            continue
        files = inp.get("files") if isinstance(inp.get("files"), list) else []
        for p in [inp.get("path"), *(f.get("path") for f in files if isinstance(f, dict))]:
            if isinstance(p, str) and os.path.isabs(p) and p not in found:
                found.append(p)
    return found


def output_file_check(
    dir: Path,
    path: Path,
    flag: str,
    what: str,
    ours: Callable[[Path], bool],
    error: type[UsageError],
    may_write: Path | None = None,
    read_as_input: bool = True,
) -> Callable[[], None]:
    """The check of a file a command writes about the set ``dir`` (`core.files.
    output_file_problem`), run now, before any work, and returned to be repeated just before
    the file is replaced: it raises ``error`` (exit 2) naming the path and why. A folder
    without a manifest is not checked now: opening it as a set refuses it first, before any
    file is written."""
    sources = set_sources(dir)

    def check() -> None:
        problem = output_file_problem(
            path,
            flag,
            what=what,
            ours=ours,
            set_dir=dir,
            set_may_write=may_write,
            sources=sources,
            read_as_input=read_as_input,
        )
        if problem:
            raise error(problem)

    if (Path(dir) / "manifest.json").is_file():
        check()
    return check
