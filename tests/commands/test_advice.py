"""A check that only advises in `build` (DFlash drafter fitness) is printed as advice.

`build` exits 0 on a set whose only failing fast check is `drafter_fitness` (a short-answer
set can still train EAGLE-3). It used to print that check as `FAIL` and end with `verify
failed: drafter_fitness` while exiting 0: a newcomer could not tell which was true. Then build
said "verify passed" and a later `verify` of the same set failed (exit 1) on that check: the
same set now has one verdict everywhere, the check advice in `verify` too (docs/verify.md).
"""

from __future__ import annotations

import json

from conftest import qwen3_tokenizer_dir

from draftset.cli import main


def test_build_prints_an_advisory_check_as_advice_and_exits_0(tmp_path, capsys):
    src = tmp_path / "short.jsonl"
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
    src.write_text(json.dumps(row) + "\n", encoding="utf-8")
    argv = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--eot-token"]
    argv += ["<|im_end|>", "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "WARN drafter_fitness" in out
    assert "FAIL" not in out and "verify failed" not in out
    assert "verify passed" in out and "advice above: drafter_fitness" in out
    # verify gives the same verdict: advice, exit 0
    for fast in (["--fast"], []):
        assert main(["verify", str(tmp_path / "out"), *fast]) == 0
        out = capsys.readouterr().out
        assert "WARN drafter_fitness" in out and "verify failed" not in out
        assert "verify passed" in out and "advice above: drafter_fitness" in out
    record = json.loads((tmp_path / "out" / "verify.json").read_text())
    assert record["passed"] is True
