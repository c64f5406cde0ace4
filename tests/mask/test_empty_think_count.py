"""`empty_think_rows` counts rows whose own supervised text holds the empty think block.

It counted every written row without reasoning under a template that trains such blocks (a
per-template probe): the OpenAI cookbook's row of a system and an assistant message, no user,
is trained by Qwen3's template as `You're great!<|im_end|>` (no think block: there is no user
turn for the block to follow), yet the note said 4 rows "trained as empty think blocks" of 3.
"""

from __future__ import annotations

import json

from conftest import qwen3_tokenizer_dir

from draftset.config.options import BuildOptions
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def test_only_rows_that_train_the_block_are_counted(tmp_path):
    rows = [
        {
            "id": "bare",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello there."},
            ],
        },
        {
            "id": "no_user",
            "messages": [
                {"role": "system", "content": "Be kind."},
                {"role": "assistant", "content": "You're great!"},
            ],
        },
    ]
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = run_build(
        BuildOptions([Source("r", src)], str(qwen3_tokenizer_dir()), tmp_path / "o", workers=1)
    ).out
    total = json.loads((out / "manifest.json").read_text())["counts"]["total"]
    assert total["written"] == 2
    assert total["empty_think_rows"] == 1  # "bare" only
