"""Small file helpers every stage shares."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json_atomic(path: Path, data: Any, indent: int = 2, tmp: Path | None = None) -> None:
    """``data`` as JSON at ``path``, all or nothing: written to a temporary file beside it
    (``PATH.tmp`` unless ``tmp`` names another), flushed to disk, then renamed over it. A crash
    leaves the old file or the new one, never half of one; an error leaves no temporary file."""
    tmp = tmp or path.with_name(path.name + ".tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(json.dumps(data, indent=indent, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def blocking_parent(path: Path) -> tuple[str, Path] | None:
    """What keeps anything from being created at ``path``: ``("file", P)`` when its nearest
    existing parent P is a file, ``("unwritable", P)`` when P is a folder it may not write;
    None when it can be created. Shared by build's ``--out`` folder check and generate's
    ``--out`` file check, each saying it in its own words."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return "file", parent
            if not os.access(parent, os.W_OK | os.X_OK):
                return "unwritable", parent
            return None
    return None
