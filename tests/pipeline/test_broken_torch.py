"""A torch that is installed but fails to import (a missing or mismatched shared library): the
set needs no torch, so a build works the same at every worker count and writes token_freq.pt
all the same (`output.pt_file`); verify reads it with draftset's own reader then.

Before: ``--workers 1`` stopped loading the tokenizer (transformers imports torch whenever it
finds it), ``--workers 2`` said "torch is not installed" for an ImportError and printed a
traceback for an OSError; until session 34, token_freq.pt was skipped ("torch failed to
import") and a build with workers imported torch for it in the helper; until session 35, a
``--workers 1`` build tried the import in its own process (`cli.TORCH_KEPT_OUT` now keeps it
out).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, qwen3_tokenizer_dir

ERRORS = {
    "ImportError": "libtorch_cpu.so: cannot open shared object file: No such file or directory",
    "OSError": "libc10.so: undefined symbol: _ZN3c10",
}


def _broken_torch(root: Path, error: str) -> Path:
    """A folder holding a ``torch`` package whose import raises ``error`` (first on the path,
    it stands for the installed one; transformers still finds torch's metadata)."""
    pkg = root / "broken" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "import os\n"  # each import tried leaves its process id in imports.txt beside it
        "with open(os.path.join(os.path.dirname(__file__), 'imports.txt'), 'a') as f:\n"
        "    f.write(str(os.getpid()) + '\\n')\n"
        f"raise {error}({ERRORS[error]!r} + '\\nsecond line')\n"
    )
    return pkg.parent


def _imports_tried(broken: Path) -> list[str]:
    """Process ids of the imports of torch tried since the last call (and forget them)."""
    log = broken / "torch" / "imports.txt"
    if not log.exists():
        return []
    pids = log.read_text().split()
    log.unlink()
    return pids


def _draftset(args: list[str], broken: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(broken), str(REPO / "src")]),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "draftset", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_chat(tmp_path):
    src = tmp_path / "a.jsonl"
    row = {
        "id": "a",
        "messages": [
            {"role": "user", "content": "Why is the sky blue?"},
            {"role": "assistant", "content": "Air scatters blue sunlight more than red light."},
        ],
    }
    src.write_text(json.dumps(row) + "\n")
    return src


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("error", list(ERRORS))
def test_a_broken_torch_builds_alike_at_every_worker_count(tmp_path, workers, error):
    broken = _broken_torch(tmp_path, error)
    src = _one_chat(tmp_path)
    out = tmp_path / "out"
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    done = _draftset([*argv, "--workers", str(workers), "--no-progress"], broken)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "token_freq.pt" not in said, said  # no note: it was written
    assert "Traceback" not in said and "not installed" not in said
    # nothing tries torch: the helper loads the template with torch kept out, and with one
    # worker the command line keeps it out of its own process (`cli.TORCH_KEPT_OUT`)
    assert _imports_tried(broken) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["token_freq_pt"] == {"written": True, "reason": None}
    # verify, where torch is as broken: token_freq.pt read and compared without it
    done = _draftset(["verify", str(out), "--fast"], broken)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS token_freq" in done.stdout and "not compared" not in done.stdout, done.stdout
    npy = np.load(out / "token_freq.npy")
    expected = {int(i): int(npy[i]) for i in np.nonzero(npy)[0]}
    if importlib.util.find_spec("torch") is not None:  # the real one, here: speculators' reader
        import torch

        assert torch.load(out / "token_freq.pt", weights_only=True) == expected


def test_a_full_verify_under_a_broken_torch_passes_a_right_set(tmp_path):
    """The tokenizer loads without torch (the tokenizer and mask checks run); speculators'
    loader needs torch, so its check is a skip saying why, not a failure of the set."""
    broken = _broken_torch(tmp_path, "OSError")
    src = _one_chat(tmp_path)
    out = tmp_path / "out"
    tok = str(qwen3_tokenizer_dir())
    argv = ["build", str(src), "--tokenizer", tok, "--out", str(out), "--workers", "1"]
    assert _draftset([*argv, "--no-progress"], broken).returncode == 0
    done = _draftset(["verify", str(out)], broken)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS tokenizer" in done.stdout and "PASS mask_fidelity" in done.stdout
    if importlib.util.find_spec("speculators") is not None:
        assert (
            "SKIP speculators_load: skipped: speculators needs torch (torch failed to import:"
            f" OSError: {ERRORS['OSError']})" in done.stdout
        ), done.stdout
