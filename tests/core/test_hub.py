"""The one offline check (`core.hub.hub_offline`) follows huggingface_hub's own rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO, qwen3_tokenizer_dir

from draftset.cli import main
from draftset.core.hub import hub_offline

VALUES = ["1", "ON", "on", "yes", "True", "TRUE", "0", "", "no", "false", "off"]


def test_hub_offline_agrees_with_huggingface_hub():
    """huggingface_hub reads the variables once at import: ask a fresh process per setting."""
    code = (
        "import importlib, json, os, sys\n"
        "import huggingface_hub.constants as c\n"
        "from draftset.core.hub import hub_offline\n"
        "out = []\n"
        "for var in ('HF_HUB_OFFLINE', 'TRANSFORMERS_OFFLINE'):\n"
        "    for v in json.loads(sys.argv[1]):\n"
        "        os.environ.pop('HF_HUB_OFFLINE', None)\n"
        "        os.environ.pop('TRANSFORMERS_OFFLINE', None)\n"
        "        os.environ[var] = v\n"
        "        importlib.reload(c)\n"
        "        out.append([var, v, c.is_offline_mode(), hub_offline()])\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(VALUES)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len(rows) == 2 * len(VALUES)
    for var, value, theirs, ours in rows:
        assert ours == (var if theirs else None), (var, value)


def test_hub_offline_is_read_at_call_time(monkeypatch):
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    assert hub_offline() is None  # HF_HUB_OFFLINE=0 decides, as in huggingface_hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "on")
    assert hub_offline() == "HF_HUB_OFFLINE"


def test_hub_source_under_transformers_offline_is_one_clear_line(tmp_path, capsys, monkeypatch):
    """TRANSFORMERS_OFFLINE alone makes huggingface_hub offline: refused before any work."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    argv = ["build", "hf:Open-Orca/OpenOrca", "--preset", "openorca", "--out", str(tmp_path / "o")]
    assert main([*argv, "--tokenizer", str(qwen3_tokenizer_dir()), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    import datasets

    assert err == [
        "draftset: error: hf:Open-Orca/OpenOrca: a hub dataset needs the network, and"
        f" TRANSFORMERS_OFFLINE is set (the datasets cache, {datasets.config.HF_DATASETS_CACHE},"
        " does not hold it)"
    ]
    assert not (tmp_path / "o").exists()
