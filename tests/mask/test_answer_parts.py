"""An answer given as several text parts is supervised as the template renders its parts.

vLLM gives a template that loops over a message's parts (Qwen3.5/3.6, Gemma-3, Mistral) the
parts as sent (docs/semantics.md, "How messages are given to the template"); such templates
join them their own way (Qwen3.6: ``Red.Green.``, Mistral: ``Red.\\n\\nGreen.``). The
`template_drops_content` rule looked for the parts joined with a newline, which none of these
renders holds, and rejected every such answer (found by an outside probe on real tokenizers of
six families; the rows were lost).
"""

from __future__ import annotations

from conftest import qwen3_tokenizer_dir, trl_template
from rows import assistant, build_rows, read_rows, rejects_by_id, supervised_text, user

from draftset.checks.fast import failing
from draftset.checks.verify import run_verify

PARTS = [{"type": "text", "text": "Red."}, {"type": "text", "text": "Green."}]
ROWS = [
    {"id": "parts", "messages": [user("Colors?"), {"role": "assistant", "content": PARTS}]},
    {"id": "plain", "messages": [user("Color?"), assistant("Blue.")]},
]


def supervised(row: dict) -> list[str]:
    return supervised_text(row, qwen3_tokenizer_dir())


def test_an_answer_of_parts_trains_as_a_parts_reading_template_renders_it(tmp_path):
    for turns in ("all", "each"):
        out = build_rows(
            tmp_path / turns,
            ROWS,
            qwen3_tokenizer_dir(),
            trl_template("qwen3_6"),
            turns=turns,
            template_kwargs={"enable_thinking": False},
        )
        rows = {r["id"].split("#")[0]: r for r in read_rows(out)}
        assert "parts" not in rejects_by_id(out) if (out / "rejects.jsonl").exists() else True
        # Qwen3.6 loops over the parts and writes them one after the other
        assert supervised(rows["parts"]) == ["Red.Green.<|im_end|>"]
        assert not failing(run_verify(out, speculators=False))
