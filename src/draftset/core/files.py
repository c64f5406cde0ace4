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


def cannot_create(path: Path, what: str) -> str | None:
    """Why nothing can be created at ``path``, as the end of a sentence about it (" is under
    a file (P), not a folder" / ": cannot create WHAT in P"), from its nearest existing
    parent P; None when it can be. Shared by build's ``--out`` folder check (``what``:
    "folders") and generate's ``--out`` file check ("files")."""
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                return f" is under a file ({parent}), not a folder"
            if not os.access(parent, os.W_OK | os.X_OK):
                return f": cannot create {what} in {parent}"
            return None
    return None
