"""A ``~USER/...`` path of a user who does not exist is one line, exit 2.

``Path.expanduser`` raises ``RuntimeError("Could not determine home directory.")`` for it: a
15-line traceback, exit 1, from `build` (a source, ``--out``, ``--tokenizer``), `verify`,
`generate` and a recipe's paths.
"""

from __future__ import annotations

import json

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.cli import main

NOBODY = "~nosuchuser-draftset-x"
CHAT = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["build", f"{NOBODY}/a.jsonl", "--tokenizer", "{tok}", "--out", "o"], "source"),
        (["build", "{src}", "--tokenizer", "{tok}", "--out", f"{NOBODY}/o"], "--out"),
        (["build", "{src}", "--tokenizer", f"{NOBODY}/tok", "--out", "o"], "--tokenizer"),
        (["verify", f"{NOBODY}/o"], "DIR"),
        (["report", f"{NOBODY}/o"], "DIR"),
        (["show", f"{NOBODY}/o", "--row", "0"], "DIR"),
        (
            ["generate", f"{NOBODY}/a.jsonl", "--endpoint", "http://127.0.0.1:9/v1", "--out", "g"],
            "source",
        ),
        (["build", "{recipe}"], "recipe key out:"),
    ],
)
def test_a_home_folder_of_no_user_is_one_line(tmp_path, monkeypatch, capsys, args, flag):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(CHAT) + "\n")
    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"tokenizer: {qwen3_tokenizer_dir()}\nout: {NOBODY}/o\nsources: [a.jsonl]\n")
    subs = {"{src}": str(src), "{tok}": str(qwen3_tokenizer_dir()), "{recipe}": str(recipe)}
    assert main([subs.get(a, a) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    user = NOBODY[1:]
    assert f"{flag} {NOBODY}/" in err[0] and f"there is no user {user!r}" in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.jsonl", "r.yaml"]
