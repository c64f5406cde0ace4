"""Content as SGLang hands it to the template (`serving_engine: sglang`).

SGLang's Jinja path (`serving_chat._apply_jinja_template`, `parser/jinja_template_utils.py`;
read from its source, not run here: SGLang needs a GPU) is not vLLM's: its content-format
detection (adapted from an older vLLM) says "openai" when the template's text names a medium
anywhere or a loop iterates ``message``/``msg``/``m``'s content; a string content stays a
string either way; a message's several text parts are joined by a *space* for a "string"
template (`process_content_for_template_format`) and a tool result's by a space always
(`normalize_tool_content`); a part whose type is not ``text`` fails its request model (HTTP 400).
Before, draftset gave SGLang rows vLLM's newline join (`Red.\\nGreen.` where SGLang renders
`Red. Green.`) and one-part lists to templates that only read parts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir, trl_template
from families import rows_text
from families import served_text as served
from rows import build_rows, rejects_by_id

from draftset.checks.verify import run_verify
from draftset.core import reasons
from draftset.mask.content_format import sglang_content_format
from draftset.mask.serving import prepare_tools
from draftset.output.readback import open_output


def parts(*texts: str) -> list[dict]:
    return [{"type": "text", "text": t} for t in texts]


LOOP_MESSAGE = (
    "{% for message in messages %}{% for c in message['content'] %}{{ c.text }}"
    "{% endfor %}{% endfor %}"
)
LOOP_MSG_FILTERED = (
    "{% for msg in messages %}{% for c in msg.content | list %}{{ c.text }}{% endfor %}{% endfor %}"
)
LOOP_BOUND_NAME = (  # vLLM follows the name bound to the content; SGLang does not
    "{% for message in messages %}{% set content = message.content %}"
    "{% for c in content %}{{ c.text }}{% endfor %}{% endfor %}"
)
MEDIUM_IN_COMMENT = "{# no vision here #}{% for m in messages %}{{ m.content }}{% endfor %}"
PLAIN = "{% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.mark.parametrize(
    ("template", "want"),
    [
        (PLAIN, "string"),
        (LOOP_MESSAGE, "openai"),
        (LOOP_MSG_FILTERED, "openai"),
        (LOOP_BOUND_NAME, "string"),
        (MEDIUM_IN_COMMENT, "openai"),
        ("{% for m in messages %}{{ m.content }", "string"),  # does not parse: the default
    ],
)
def test_sglangs_walk(template: str, want: str) -> None:
    assert sglang_content_format(template) == want


def test_sglangs_walk_on_real_templates() -> None:
    assert sglang_content_format(trl_template("qwen3").read_text()) == "string"
    assert sglang_content_format(trl_template("qwen3_6").read_text()) == "openai"
    # a word in a comment is enough for SGLang (its shortcut), not for vLLM
    assert sglang_content_format(trl_template("qwen3_instruct_2507_training").read_text()) == (
        "openai"
    )


TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
# long enough for a DFlash block (verify's drafter_fitness check)
ANSWER = "Rainy and cold in Oslo today: take a coat, an umbrella and warm boots before you go out."
CALL = {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}


def conversation() -> list[dict]:
    return [
        {"role": "user", "content": parts("Red.", "Green.")},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": parts("rain", "cold")},
        {"role": "assistant", "content": ANSWER},
    ]


def test_a_string_template_gets_parts_joined_by_a_space(tmp_path: Path) -> None:
    tok, template = qwen3_tokenizer_dir(), trl_template("qwen3")
    row = {"id": "r", "messages": conversation(), "tools": [TOOL]}
    out = build_rows(tmp_path / "s", [row], tok, template, serving_engine="sglang")
    call = {**CALL, "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
    want = served(
        template,
        tok,
        [
            {"role": "user", "content": "Red. Green."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "rain cold"},
            {"role": "assistant", "content": ANSWER},
        ],
        prepare_tools(
            [TOOL], "sglang"
        ),  # tools as SGLang gives them (tests/checks/test_serving.py)
    )
    assert rows_text(out, tok)["r"] == want
    assert not any(c.failed for c in run_verify(out, speculators=False))


def test_an_openai_template_gets_parts_as_sent_and_strings_as_strings(tmp_path: Path) -> None:
    tok, template = qwen3_tokenizer_dir(), trl_template("qwen3_6")
    row = {"id": "r", "messages": conversation(), "tools": [TOOL]}
    out = build_rows(
        tmp_path / "o",
        [row],
        tok,
        template,
        serving_engine="sglang",
        template_kwargs={"enable_thinking": False},
    )
    call = {**CALL, "function": {"name": "weather", "arguments": {"city": "Oslo"}}}
    want = served(
        template,
        tok,
        [
            {"role": "user", "content": parts("Red.", "Green.")},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "rain cold"},  # a tool result's parts: joined
            {"role": "assistant", "content": ANSWER},
        ],
        prepare_tools([TOOL], "sglang"),
        enable_thinking=False,
    )
    assert rows_text(out, tok)["r"] == want
    assert not any(c.failed for c in run_verify(out, speculators=False))


def test_a_part_that_is_not_text_is_refused_as_sglang_refuses_it(tmp_path: Path) -> None:
    messages = [
        {"role": "user", "content": [{"type": "input_text", "text": "Hi."}]},
        {"role": "assistant", "content": "Hello."},
    ]
    fine = [
        {"role": "user", "content": parts("Red.", "Green.")},
        {"role": "assistant", "content": ANSWER},
    ]
    tok, template = qwen3_tokenizer_dir(), trl_template("qwen3")
    rows = [{"id": "x", "messages": messages}, {"id": "ok", "messages": fine}]
    out = build_rows(tmp_path / "x", rows, tok, template, serving_engine="sglang")
    assert list(open_output(out).ids()) == ["ok"]
    rejected = rejects_by_id(out)
    assert rejected["x"]["reason"] == reasons.UNSUPPORTED_CONTENT
    assert "input_text" in rejected["x"]["message"]
    assert not any(c.failed for c in run_verify(out, speculators=False))
    # vLLM reads such a part as text: the row is built there
    kept = build_rows(tmp_path / "v", [{"id": "x", "messages": messages}], tok, template)
    assert list(open_output(kept).ids()) == ["x"]
