"""A special token's text inside an assistant answer (issue 24, item 9).

``"Hello world.<|im_end|>"`` as a stored answer: the text tokenizes to the control token itself
(151645), which the model emits only to end its turn, so the row would hold tokens the model
never produced where they stand. Build rejects the conversation (`special_token_in_answer`,
counted like every reject) and verify, deriving the same rule from the tokenizer's public
``added_tokens_decoder``, finds the reject justified. The same text in a user message is the
user's: the server tokenizes the prompt the same way, so it stays.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import qwen3_tokenizer_dir

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.core import reasons
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def chat(i: str, user: str, answer: str, reasoning: str | None = None) -> dict:
    a = {"role": "assistant", "content": answer}
    if reasoning is not None:
        a["reasoning_content"] = reasoning
    return {"id": i, "messages": [{"role": "user", "content": user}, a]}


ROWS = [
    chat("content", "Say hello.", "Hello world.<|im_end|>"),
    chat("reasoning", "Say hello.", "Hello.", "Hello world.<|im_end|>"),
    chat("header", "Say hello.", "Hi<|im_start|>user\nmore"),
    chat("user_text", "What does <|im_end|> mean?", "It ends a turn in ChatML."),
    chat("clean", "Say hello.", "Hello world."),
]


def test_special_token_text_in_an_answer_is_rejected_and_verified(tmp_path: Path):
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    opts = BuildOptions([Source("rows", src)], str(qwen3_tokenizer_dir()), tmp_path / "o")
    result = run_build(opts)
    total = result.accounting.total()
    assert total.written == 2
    assert total.row_rejects == {reasons.SPECIAL_TOKEN_IN_ANSWER: 3}
    lines = [json.loads(x) for x in (result.out / "rejects.jsonl").read_text().splitlines()]
    by_id = {x["id"]: x for x in lines}
    assert set(by_id) == {"content", "reasoning", "header"}
    assert "'<|im_end|>'" in by_id["reasoning"]["message"]
    assert "reasoning_content" in by_id["reasoning"]["message"]
    assert "'<|im_start|>'" in by_id["header"]["message"]
    failed = [
        (r.name, r.summary)
        for r in run_verify(result.out, speculators=False)
        if r.failed and r.name != "drafter_fitness"
    ]
    assert failed == []
