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
from draftset.core import reasons

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


def test_the_rule_reads_the_parts_and_still_catches_a_drop():
    msg = assistant("Red.\nGreen.")
    parts = ["Red.", "Green."]
    assert not reasons.drops_content(msg, "Red.Green.<|im_end|>", parts)
    assert not reasons.drops_content(msg, "Red.\n\nGreen.</s>", parts)
    assert not reasons.drops_content(msg, "Red.\nGreen.<|im_end|>")
    # a render without the parts, or with them out of order, dropped the answer
    assert reasons.drops_content(msg, "<|im_end|>", parts)
    assert reasons.drops_content(msg, "Green.Red.<|im_end|>", parts)
    assert reasons.drops_content(msg, "Red.Green.<|im_end|>")  # the string was given: joined
    # the reject line says what is missing (session 29)
    assert reasons.dropped_content(msg, "<|im_end|>", parts) == "its text"
    call = {"function": {"name": "get_weather", "arguments": "{}"}}
    assert reasons.dropped_content(assistant("", tool_calls=[call]), "<|eot_id|>") == (
        "its call to 'get_weather'"
    )


def test_a_tool_name_the_answer_mentions_is_no_call():
    """The template dropped the call, but the answer's text named the tool ("I will use
    get_weather for that."): the name check found it there and the turn was trained as ending
    where the model had called the tool (DeepSeek-V3, Gemma-3; a real ToolBench row under
    Llama-3.1; a gpt-oss message of two calls whose reasoning named the tool twice)."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {}}}
    msg = assistant("I will use get_weather for that.", tool_calls=[call])
    assert reasons.drops_content(msg, "I will use get_weather for that.<eos>")
    rendered = "I will use get_weather for that.<call>get_weather {}</call><eos>"
    assert not reasons.drops_content(msg, rendered)
    two = assistant("", tool_calls=[call, call], reasoning_content="Call get_weather twice.")
    once = "<think>Call get_weather twice.</think>to=functions.get_weather {}<|call|>"
    assert reasons.drops_content(two, once)
