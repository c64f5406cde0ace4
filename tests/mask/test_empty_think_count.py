"""`empty_think_rows` counts rows whose own supervised text holds the empty think block.

It counted every written row without reasoning under a template that trains such blocks (a
per-template probe): the OpenAI cookbook's row of a system and an assistant message, no user,
is trained by Qwen3's template as `You're great!<|im_end|>` (no think block: there is no user
turn for the block to follow), yet the note said 4 rows "trained as empty think blocks" of 3.
"""

from __future__ import annotations

import json

from conftest import qwen3_tokenizer_dir
from rows import assistant, build_rows, user


def test_only_rows_that_train_the_block_are_counted(tmp_path):
    rows = [
        {"id": "bare", "messages": [user("Hi"), assistant("Hello there.")]},
        {
            "id": "no_user",
            "messages": [{"role": "system", "content": "Be kind."}, assistant("Yes.")],
        },
    ]
    out = build_rows(tmp_path / "r", rows, qwen3_tokenizer_dir())
    total = json.loads((out / "manifest.json").read_text())["counts"]["total"]
    assert total["written"] == 2
    assert total["empty_think_rows"] == 1  # "bare" only
