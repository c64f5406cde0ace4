"""Whether the Hugging Face hub may be used: the one offline check of draftset.

The same rule as huggingface_hub's (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1, ON,
YES or TRUE, any case), read at call time rather than once at import, so a tokenizer name or a
``hf:`` source that would need the network is refused with one line before any work instead of
failing deep inside a download. Also where a folder of the hub's cache keeps its revisions
(`cache_revisions`). No imports beyond the standard library.
"""

from __future__ import annotations

import os
from pathlib import Path

_TRUE = frozenset({"1", "ON", "YES", "TRUE"})


def hub_offline() -> str | None:
    """The variable that puts the hub offline (huggingface_hub's offline mode), or None."""
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(var)
        if value:  # the first one set decides, as in huggingface_hub (HF_HUB_OFFLINE=0 wins)
            return var if value.upper() in _TRUE else None
    return None


def cache_revisions(folder: Path) -> tuple[list[str], str, bool] | None:
    """A hub cache folder's revisions (``models--X--Y`` / ``datasets--X--Y``: ``blobs/`` and a
    folder per downloaded revision under ``snapshots/``), the one to name (``refs/main``'s, else
    the last by name) and whether ``refs/main`` named it; None when ``folder`` is no such folder
    or lists no revision."""
    snapshots = folder / "snapshots"
    if not snapshots.is_dir() or not (folder / "blobs").is_dir():
        return None
    try:
        revisions = sorted(e.name for e in os.scandir(snapshots) if e.is_dir())
    except OSError:  # a folder that cannot be listed
        return None
    if not revisions:
        return None
    try:
        main = (folder / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    return (revisions, main, True) if main in revisions else (revisions, revisions[-1], False)


def hub_cache_root() -> Path:
    """The hub cache folder, as huggingface_hub finds it: ``HF_HUB_CACHE`` (or the older
    ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME/hub``, else ``XDG_CACHE_HOME/huggingface/hub``,
    else ``~/.cache/huggingface/hub``; read at call time."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if value := os.environ.get(var):
            return Path(value).expanduser()
    if home := os.environ.get("HF_HOME"):
        return Path(home).expanduser() / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(cache).expanduser() / "huggingface" / "hub"


def cached_model_folder(repo_id: str) -> Path | None:
    """The hub cache's folder of model ``repo_id``'s ``main`` revision (``refs/main``'s
    snapshot), or None when the cache does not hold it: offline, transformers reads a hub id
    from there, so it needs no network (draftset refused every hub id offline)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/")):
        return None
    folder = hub_cache_root() / ("models--" + repo_id.replace("/", "--"))
    found = cache_revisions(folder)
    if found is None or not found[2]:  # no refs/main: which revision transformers reads is unsure
        return None
    snapshot = folder / "snapshots" / found[1]
    return snapshot if snapshot.is_dir() else None
