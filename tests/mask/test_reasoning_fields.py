"""Reasoning as vLLM hands it to a chat template (docs/semantics.md, "How messages are given to
the template").

vLLM 0.33 gives an assistant message's reasoning to the template as ``reasoning`` and
``reasoning_content`` (`parse_chat_message_content`) and never as ``thinking``: it pins
transformers < 5.21, whose `apply_chat_template` does not alias reasoning fields. transformers
5.21+ (draftset's own renders) adds ``thinking`` beside ``reasoning_content``. A template that
reads ``message.thinking`` alone (trl's ``lfm2_2_5.jinja``, LFM2.5's template) therefore renders
the reasoning in draftset's rows but not in vLLM's prompt: measured against `vllm launch render`
0.33.0 (session 28), a reasoning answer's generation was ``<think>Small number.</think>7
<|im_end|>`` in the set and ``7<|im_end|>`` at the server, and the prompt after a reasoning tool
call held ``<think>Need the tool.</think>`` only in the set (`verify --render-server` failed
them, mask fidelity passed them).
"""

from __future__ import annotations

from pathlib import Path

from conftest import qwen3_tokenizer_dir, trl_template
from rows import build_rows, read_rows, supervised_text

from draftset.checks.fast import failing
from draftset.checks.verify import run_verify
from draftset.mask.template import ChatTemplate, TemplateSpec

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Pisa"}'},
}
ROWS = [
    {
        "id": "answer",
        "messages": [
            {"role": "user", "content": "Pick a number."},
            {"role": "assistant", "content": "7", "reasoning_content": "Small number."},
        ],
    },
    {
        "id": "loop",
        "tools": [WEATHER],
        "messages": [
            {"role": "user", "content": "Weather in Pisa?"},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "Need the tool.",
                "tool_calls": [CALL],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "hot"},
            {"role": "assistant", "content": "Hot."},
        ],
    },
]
# what vLLM 0.33.0 rendered for these rows (its render endpoint, Qwen3.5's files, LFM2.5's
# template): no think block anywhere
SERVED = {
    "answer#0": ["7<|im_end|>"],
    "loop#0": ["<|tool_call_start|>[get_weather(city='Pisa')]<|tool_call_end|><|im_end|>"],
    "loop#1": ["Hot.<|im_end|>"],
}


def _set(tmp_path: Path, engine: str) -> tuple[Path, dict[str, dict]]:
    out = build_rows(
        tmp_path / engine,
        ROWS,
        qwen3_tokenizer_dir(),
        trl_template("lfm2_2_5"),
        turns="each",
        serving_engine=engine,
    )
    return out, {r["id"]: r for r in read_rows(out)}


def test_a_template_reading_thinking_gets_no_reasoning_under_vllm(tmp_path: Path) -> None:
    out, rows = _set(tmp_path, "vllm")
    tok = qwen3_tokenizer_dir()
    assert {rid: supervised_text(row, tok) for rid, row in rows.items()} == SERVED
    from tokenizers import Tokenizer

    decode = Tokenizer.from_file(str(tok / "tokenizer.json")).decode
    assert "<think>" not in decode(rows["loop#1"]["input_ids"], skip_special_tokens=False)
    assert not failing(run_verify(out, speculators=False))


def test_transformers_serve_still_gets_thinking(tmp_path: Path) -> None:
    """`transformers serve` renders with draftset's transformers, which aliases ``thinking``."""
    out, rows = _set(tmp_path, "transformers")
    tok = qwen3_tokenizer_dir()
    assert supervised_text(rows["answer#0"], tok) == ["<think>Small number.</think>7<|im_end|>"]
    assert not failing(run_verify(out, speculators=False))


PROBE = (
    "{% for m in messages %}{{ m.role }}:[{{ m.reasoning }}][{{ m.thinking is defined }}]"
    "[{{ m.reasoning_content }}]{{ m.content }}\n{% endfor %}"
)


def test_the_fields_a_template_sees_are_the_engines() -> None:
    """vLLM 0.33.0's render of this probe template (measured): ``assistant:[R][False][R]A``."""
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A", "reasoning_content": "R"},
    ]
    for engine, want in [
        ("vllm", "user:[][False][]Q\nassistant:[R][False][R]A\n"),
        ("transformers", "user:[][False][]Q\nassistant:[][True][R]A\n"),
    ]:
        spec = TemplateSpec(str(qwen3_tokenizer_dir()), PROBE, serving_engine=engine)
        fast, full = ChatTemplate(spec), ChatTemplate(spec, fast=False)
        assert fast.render(messages) == want, engine
        assert full.render_reference(messages) == want, engine
