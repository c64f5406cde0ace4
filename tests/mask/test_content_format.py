"""Content as vLLM hands it to the template: strings, or lists of parts (its content format).

vLLM 0.33 reads the template's syntax tree: one that loops over a message's content gets every
content as a list of parts (`""` as one empty part, no content as none), any other strings.
Templates that render a one-part list unlike the string made every such row differ from the
served prompt (outside probe, session 26): Gemma-4 trims a system part and writes a space after
it, Qwen3-VL writes a newline before the calls of an answer whose content is one empty part.
And vLLM refuses a call without an id, so a client gives one and pairs its result: Gemma-4
names a result by its call's id (`None == None` named every result after the last call).
tests/checks/test_render_server.py holds all of it against vLLM itself.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir, trl_template
from content_formats import EDGE_TEMPLATES
from families import FAMILIES, make_tokenizer, rows_text
from families import served_text as served
from rows import build_rows

from draftset.checks.verify import run_verify
from draftset.core.records import NO_CONTENT, RawRow
from draftset.mask.content_format import content_format
from draftset.sources.normalize import normalize

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {**WEATHER, "function": {**WEATHER["function"], "name": "get_time"}}


def call(name: str, **extra) -> dict:
    return {
        "type": "function",
        "function": {"name": name, "arguments": '{"city": "Paris"}'},
        **extra,
    }


def parts(text: str) -> list[dict]:
    return [{"type": "text", "text": text}]


@pytest.mark.parametrize("name", sorted(EDGE_TEMPLATES))
def test_the_walk_finds_what_vllms_finds(name):
    text, want = EDGE_TEMPLATES[name]
    assert content_format(text) == want


def test_the_normalizer_remembers_which_messages_had_no_content():
    rows = {
        "null": {"role": "assistant", "content": None, "tool_calls": [call("get_weather")]},
        "absent": {"role": "assistant", "tool_calls": [call("get_weather")]},
        "no_parts": {"role": "assistant", "content": [], "tool_calls": [call("get_weather")]},
        "empty": {"role": "assistant", "content": "", "tool_calls": [call("get_weather")]},
    }
    for kind, answer in rows.items():
        conv = normalize(RawRow("s", 0, {"messages": [{"role": "user", "content": "q"}, answer]}))
        assert conv.messages[1]["content"] == ""
        assert (conv.meta.get(NO_CONTENT) or {}) == ({} if kind == "empty" else {1: True}), kind
    shifted = normalize(
        RawRow(
            "s", 0, {"system": "Top.", "messages": [{"role": "user", "content": "q"}, rows["null"]]}
        )
    )
    assert shifted.meta[NO_CONTENT] == {2: True}  # after the inserted system message


def test_qwen3_vl_answers_given_as_empty_and_as_no_content_render_as_vllm_renders(tmp_path):
    tok, template = qwen3_tokenizer_dir(), trl_template("qwen3_vl")
    convs = {
        kind: [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": content, "tool_calls": [call("get_weather", id="c1")]},
        ]
        for kind, content in (("empty", ""), ("null", None))
    }
    rows = [{"id": k, "messages": m, "tools": [WEATHER]} for k, m in convs.items()]
    out = build_rows(tmp_path / "vl", rows, tok, template, dedup="none")  # equal but for null
    got = rows_text(out, tok)
    args = {"city": "Paris"}
    call_obj = {
        "id": "c1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": args},
    }
    for kind, content in (("empty", parts("")), ("null", [])):
        messages = [
            {"role": "user", "content": parts("Weather in Paris?")},
            {"role": "assistant", "content": content, "tool_calls": [call_obj]},
        ]
        want = served(template, tok, messages, [WEATHER])
        assert got[kind] == want, kind
    assert "assistant\n\n<tool_call>" in got["empty"] and "assistant\n<tool_call>" in got["null"]
    assert not any(c.failed for c in run_verify(out, speculators=False))


@pytest.fixture(scope="module")
def gemma4_tokenizer(tmp_path_factory) -> Path:
    return make_tokenizer(FAMILIES["gemma4"], tmp_path_factory.mktemp("gemma4"))


def test_gemma4_reads_a_system_prompt_as_a_part(tmp_path, gemma4_tokenizer):
    tok, template = gemma4_tokenizer, trl_template("gemma4_v5")
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    out = build_rows(tmp_path / "g4", [{"id": "sys", "messages": messages}], tok, template)
    want = served(template, tok, [{**m, "content": parts(m["content"])} for m in messages])
    assert rows_text(out, tok)["sys"] == want
    assert "You are terse. " in want  # the part is trimmed and followed by a space
    # another engine keeps the row's strings (SGLang and transformers pass them as given)
    other = build_rows(
        tmp_path / "g4t",
        [{"id": "sys", "messages": messages}],
        tok,
        template,
        serving_engine="transformers",
    )
    assert rows_text(other, tok)["sys"] == served(template, tok, messages)


def test_gemma4_names_each_result_by_the_call_a_client_pairs_it_with(tmp_path, gemma4_tokenizer):
    tok, template = gemma4_tokenizer, trl_template("gemma4_v5")
    messages = [
        {"role": "user", "content": "Weather and time in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call("get_weather"), call("get_time")],
        },
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "14:05"},
        {"role": "assistant", "content": "Sunny; 14:05."},
    ]
    out = build_rows(
        tmp_path / "ids",
        [{"id": "calls", "messages": messages, "tools": [WEATHER, TIME]}],
        tok,
        template,
    )
    text = rows_text(out, tok)["calls"]
    # calls get ids call_<message>_<call>, results the ids in order, as verify's requests carry
    args = {"city": "Paris"}
    sent = [
        {"role": "user", "content": parts(messages[0]["content"])},
        {
            "role": "assistant",
            "content": [],
            "tool_calls": [
                {
                    "id": "call_1_0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": args},
                },
                {
                    "id": "call_1_1",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": args},
                },
            ],
        },
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1_0"},
        {"role": "tool", "content": "14:05", "tool_call_id": "call_1_1"},
        {"role": "assistant", "content": parts("Sunny; 14:05.")},
    ]
    assert text == served(template, tok, sent, [WEATHER, TIME])
    assert "response:get_weather" in text and "response:get_time" in text
