"""The peers: their virtual environments (created on first use) and how each is called.

Each peer lives in its own venv under the bench cache folder, never in the project's venv,
and is called as an installed package from a small driver script (bench/drivers/), in its own
process. Install recipes follow ../shared/peers/NOTES.md: plain ``torch`` is never installed
(``torch==2.13.0`` resolves to a local CPU wheel), the peers themselves go in with ``--no-deps``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "draftset-bench"
VENVS = CACHE / "venvs"
DRIVERS = Path(__file__).resolve().parent / "drivers"


@dataclass(frozen=True)
class Peer:
    name: str
    version: str
    deps: tuple[str, ...]  # installed with their dependencies
    no_deps: tuple[str, ...]  # installed with --no-deps

    @property
    def venv(self) -> Path:
        return VENVS / f"{self.name}-{self.version}"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def recipe(self) -> str:
        return json.dumps({"deps": self.deps, "no_deps": self.no_deps})


SPECULATORS = Peer(
    "speculators",
    "0.7.0.2",
    deps=("torch==2.13.0", "transformers==5.14.1", "tokenizers==0.22.2", "datasets==5.0.1"),
    no_deps=("speculators==0.7.0.2", "openai", "httpx2", "sniffio", "tqdm==4.70.0"),
)
SPECFORGE = Peer(
    "specforge",
    "0.2.0",
    deps=("torch==2.13.0", "transformers==5.8.1", "tokenizers==0.22.2", "datasets==5.0.1"),
    no_deps=("specforge==0.2.0",),
)
PEERS = {p.name: p for p in (SPECULATORS, SPECFORGE)}


def ensure_venv(peer: Peer, log=print) -> Path:
    """Create the peer's venv once; a marker holding the install recipe makes this idempotent."""
    marker = peer.venv / ".draftset-bench-installed"
    if marker.exists() and marker.read_text() == peer.recipe() and peer.python.exists():
        return peer.python
    log(f"installing {peer.name} {peer.version} into {peer.venv} (once)")
    peer.venv.parent.mkdir(parents=True, exist_ok=True)
    if not peer.python.exists():
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(peer.venv)], check=True)
    pip = [str(peer.python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, *peer.deps], check=True)
    subprocess.run([*pip, "--no-deps", *peer.no_deps], check=True)
    marker.write_text(peer.recipe())
    return peer.python
