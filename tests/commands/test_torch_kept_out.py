"""The command line keeps an installed torch out of its own process where it needs a tokenizer
at most (`cli.TORCH_KEPT_OUT`): transformers imports torch with `AutoTokenizer` whenever it
finds it (~1.3 CPU-s, ~210 MB), and a set needs none. Before, ``draftset build --workers 1``
(the template loaded in the main process) and ``draftset report`` (token_freq.pt read with
``torch.load``) imported it. verify keeps it: speculators' reader and loader are its referees.

(A broken torch's import attempts are counted in tests/pipeline/test_broken_torch.py; the API
keeps torch visible: tests/test_api.py.)
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
from conftest import REPO, qwen3_tokenizer_dir
from rows import chats, write_jsonl

from draftset.cli import COMMANDS, TORCH_KEPT_OUT

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None, reason="torch is not installed here"
)

TORCH_IMPORTED = re.compile(r"^import time:.*\|\s+torch\.\w", re.M)
"""``python -X importtime``'s line for a module of torch's own (``torch._C``, ...): only a real
import loads them (an import tried while torch is kept out logs a line for ``torch`` alone)."""


def _imports_torch(*args: str) -> bool:
    """Whether ``python -m draftset ARGS`` (the program, as the console script runs it)
    imports torch; it must succeed."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "draftset", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return TORCH_IMPORTED.search(done.stderr) is not None


def test_build_with_one_worker_report_and_show_never_import_torch_verify_does(tmp_path):
    out = tmp_path / "out"
    tok = str(qwen3_tokenizer_dir())
    src = write_jsonl(
        tmp_path / "a.jsonl", chats(1, answer="Air scatters blue light more than red.")
    )
    build = ["build", str(src), "--tokenizer", tok, "--out", str(out)]
    assert not _imports_torch(*build, "--workers", "1", "--no-progress")
    assert (out / "token_freq.pt").is_file()  # written all the same (output.pt_file)
    assert not _imports_torch("report", str(out))
    assert not _imports_torch("show", str(out), "--row", "0")
    # verify reads token_freq.pt as speculators does, with torch.load: it keeps torch
    assert _imports_torch("verify", str(out), "--fast")


def test_only_commands_that_need_no_torch_keep_it_out():
    """verify (torch.load, speculators' loader) and run (it ends in that verify) need torch:
    hidden there, speculators' check would skip saying "torch is not installed"."""
    assert TORCH_KEPT_OUT.issubset(COMMANDS)
    assert not TORCH_KEPT_OUT & {"verify", "run"}
