"""A ``--tokenizer`` that cannot be the set's is refused (exit 2) by `report` and `verify
--fast` as by `show` and the full `verify`.

`report --tokenizer` of another model, of a missing folder or of a data file wrote its page
with "Cannot decode rows: ..." and exited 0; `verify --fast --tokenizer /nonexist` ignored the
argument and passed; `show --tokenizer /nonexist` said "pass --tokenizer FOLDER" to one who did.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import built_set, llama32_tokenizer_dir, qwen3_tokenizer_dir

from draftset.cli import main

CHAT = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return built_set(tmp_path_factory.mktemp("tok"), [CHAT])


def cases(folder: Path) -> list[tuple[str, str]]:
    data = folder.parent / "a.jsonl"
    return [
        (str(llama32_tokenizer_dir()), "is not the tokenizer this set was built with: it has"),
        (str(folder.parent / "nosuch"), "tokenizer folder not found: "),
        (str(data), f"tokenizer path is not a folder: {data}"),
    ]


@pytest.mark.parametrize("case", [0, 1, 2])
@pytest.mark.parametrize(
    "command", [["report", "-o", "{tmp}/r.html"], ["verify", "--fast"], ["show", "--row", "0"]]
)
def test_a_tokenizer_that_cannot_be_the_sets_is_refused(folder, tmp_path, capsys, command, case):
    tokenizer, needle = cases(folder)[case]
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([args[0], str(folder), *args[1:], "--tokenizer", tokenizer]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err
    assert "pass --tokenizer" not in err[0], err
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    "command", [["report", "-o", "{tmp}/r.html"], ["verify", "--fast"], ["show", "--row", "0"]]
)
def test_the_sets_own_tokenizer_is_taken(folder, tmp_path, capsys, command):
    args = [a.replace("{tmp}", str(tmp_path)) for a in command]
    assert main([args[0], str(folder), *args[1:], "--tokenizer", str(qwen3_tokenizer_dir())]) == 0
    if command[0] == "report":
        assert "Cannot decode rows" not in (tmp_path / "r.html").read_text()
