"""Each preset on a small local file shaped like the real set -> exact normalized messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from draftset.core import reasons
from draftset.core.records import Conversation, RawRow, Reject
from draftset.sources.normalize import normalize
from draftset.sources.presets import (
    PRESETS,
    UnknownPresetError,
    apply_preset,
    normalize_with_preset,
    split_thought_markers,
    transform_raw,
)
from draftset.sources.read import Source, iter_raw_rows

DATA = Path(__file__).parents[1] / "data" / "presets"


def _load(name: str, file: str) -> list[Any]:
    preset = apply_preset(name)
    return [
        normalize_with_preset(preset, raw)
        for raw in iter_raw_rows(Source(preset.name, DATA / file))
    ]


def _msgs(item: Any) -> list[dict[str, Any]]:
    assert isinstance(item, Conversation), item
    return item.messages


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": args}}


def test_every_preset_has_a_valid_format_and_a_hub_id() -> None:
    for p in PRESETS.values():
        assert p.hub_id is None or p.hub_id.count("/") == 1
        assert p.description


def test_unknown_preset_lists_known_names() -> None:
    with pytest.raises(KeyError) as err:
        apply_preset("open-orca-typo")
    assert isinstance(err.value, UnknownPresetError)
    assert "openorca" in str(err.value) and "xlam-function-calling-60k" in str(err.value)


def test_a_misspelled_preset_names_the_close_one() -> None:
    """``preset: skythough`` or ``open-orca`` listed all 15 names and left the user to spot the
    one meant; a recipe's misspelled key says "did you mean"."""
    for typo, meant in (
        ("skythough", "skythought"),
        ("open-orca", "openorca"),
        ("hermes-fc", "hermes"),
    ):
        with pytest.raises(UnknownPresetError) as err:
            apply_preset(typo)
        assert f"did you mean {meant!r}?" in str(err.value), str(err.value)
        assert "known presets: codealpaca" in str(err.value)


def test_aliases_resolve() -> None:
    assert apply_preset("vicuna").name == "sharegpt"
    assert apply_preset("Magicoder").name == "magicoder-evol-instruct"
    assert apply_preset("ultrachat_200k").name == "ultrachat-200k"


def test_openorca() -> None:
    a, b = _load("openorca", "openorca.jsonl")
    assert a.id == "niv.242684"
    assert _msgs(a) == [
        {
            "role": "system",
            "content": "You are an AI assistant. User will you give you a task. Your goal is "
            "to complete the task as faithfully as you can.",
        },
        {"role": "user", "content": "Translate to French: The museum opens at nine."},
        {"role": "assistant", "content": "Le musée ouvre à neuf heures."},
    ]
    assert _msgs(b) == [  # empty system_prompt: no system turn
        {"role": "user", "content": "What is the capital of Australia?"},
        {"role": "assistant", "content": "The capital of Australia is Canberra."},
    ]


def test_evol_codealpaca_and_codealpaca() -> None:
    (a,) = _load("evol-codealpaca", "evol_codealpaca.jsonl")
    assert _msgs(a)[0]["content"].startswith("Write a Python function")
    assert _msgs(a)[1]["content"].startswith("```python\ndef fib(n):")
    first, second = _load("codealpaca", "codealpaca.json")
    assert _msgs(first) == [
        {"role": "user", "content": "Create a function to reverse a string."},
        {"role": "assistant", "content": "def reverse(s):\n    return s[::-1]"},
    ]
    assert _msgs(second)[0] == {
        "role": "user",
        "content": "Sort the given list in ascending order.\n\n[3, 1, 2]",
    }


def test_magicoder() -> None:
    (evol,) = _load("magicoder-evol-instruct", "magicoder_evol_instruct.jsonl")
    assert _msgs(evol)[1] == {
        "role": "assistant",
        "content": "squares = [x * x for x in range(10)]",
    }
    (oss,) = _load("magicoder-oss-instruct", "magicoder_oss_instruct.jsonl")
    assert _msgs(oss) == [
        {
            "role": "user",
            "content": "You are given a function `add`. Write tests for it using pytest.",
        },
        {
            "role": "assistant",
            "content": "```python\ndef test_add():\n    assert add(1, 2) == 3\n```",
        },
    ]


def test_ultrachat_does_not_double_the_prompt() -> None:
    (a,) = _load("ultrachat-200k", "ultrachat_200k.jsonl")
    assert a.id == "8f2c0a1e5b"
    assert [m["role"] for m in _msgs(a)] == ["user", "assistant", "user", "assistant"]
    assert _msgs(a)[0] == {"role": "user", "content": "How do bees make honey?"}


def test_sharegpt_vicuna() -> None:
    a, b = _load("sharegpt", "sharegpt_vicuna.json")
    assert a.id == "QWJhYvA_0"
    assert _msgs(a)[0] == {
        "role": "user",
        "content": "Summarize the plot of Hamlet in one sentence.",
    }
    assert _msgs(b) == [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]


def test_nemotron_post_training() -> None:
    on, off, tool = _load("nemotron-post-training", "nemotron_post_training_v1.jsonl")
    assert on.id == "b1c2d3e4-0001"
    assert _msgs(on) == [
        {"role": "system", "content": ""},
        {"role": "user", "content": "What is 12 * 13?"},
        {
            "role": "assistant",
            "content": "12 × 13 = 156.",
            "reasoning_content": "12 * 13 = 12 * 10 + 12 * 3 = 120 + 36 = 156.",
        },
    ]
    assert on.meta["metadata"] == {
        "expected_answer": "156",
        "source": "synthetic",
        "thinking": "on",
    }
    assert _msgs(off)[-1] == {"role": "assistant", "content": "¡Hola!"}
    assert off.meta["metadata"]["thinking"] == "off"
    assert _msgs(tool)[-1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "call_1", **_call("get_weather", {"city": "Paris"})}],
    }
    assert tool.tools is not None and tool.tools[0]["function"]["name"] == "get_weather"
    assert "tools" not in tool.meta["metadata"]


def test_llama_nemotron_post_training() -> None:
    on, off, legacy = _load("llama-nemotron-post-training", "llama_nemotron_post_training.jsonl")
    assert _msgs(on) == [
        {"role": "system", "content": "detailed thinking on"},
        {"role": "user", "content": "Can you explain the Pythagorean theorem?"},
        {
            "role": "assistant",
            "content": "In a right triangle, a² + b² = c², where c is the hypotenuse.",
            "reasoning_content": "The user wants the statement and the variables.",
        },
    ]
    assert off.meta["metadata"] == {"thinking": "off"}
    assert _msgs(legacy) == [  # input as a Llama-3 rendered string, output with <|eot_id|>
        {"role": "system", "content": "detailed thinking off"},
        {"role": "user", "content": "Write hello world in C."},
        {"role": "assistant", "content": 'printf("hello world\\n");'},
    ]


def test_openthoughts_markers() -> None:
    done, cut = _load("openthoughts", "openthoughts.jsonl")
    assert _msgs(done)[0]["role"] == "system"
    assert _msgs(done)[-1] == {
        "role": "assistant",
        "content": "7 + 5 = \\boxed{12}",
        "reasoning_content": "Okay, 7 + 5: 7 + 3 = 10, plus 2 is 12.",
    }
    assert _msgs(cut)[-1] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Let me check divisibility by 7: 7 * 13 = 91, so",
    }
    assert cut.meta["metadata"] == {"reasoning_unterminated": True}


def test_split_thought_markers_leaves_plain_text() -> None:
    assert split_thought_markers("just an answer") == ("just an answer", None, False)
    text = "<|begin_of_thought|>\n\nR\n\n<|end_of_thought|>\n\nS"  # no solution markers
    assert split_thought_markers(text) == ("S", "R", False)


def test_hermes_function_calling() -> None:
    full, no_tools_column = _load("hermes-function-calling", "hermes_function_calling.jsonl")
    assert full.id == "85f6c398-69c7-4df2-aed1-29d614a93a26"
    aapl = '{"name": "get_stock_price", "content": {"symbol": "AAPL", "price": 189.5}}'
    msft = '{"name": "get_stock_price", "content": {"symbol": "MSFT", "price": 411.2}}'
    assert _msgs(full) == [  # the <tools> system prompt is dropped: tools go to the template
        {"role": "user", "content": "What are AAPL and MSFT trading at?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("get_stock_price", {"symbol": "AAPL"}),
                _call("get_stock_price", {"symbol": "MSFT"}),
            ],
        },
        {"role": "tool", "content": aapl, "name": "get_stock_price"},
        {"role": "tool", "content": msft, "name": "get_stock_price"},
        {"role": "assistant", "content": "AAPL is at $189.50 and MSFT at $411.20."},
    ]
    assert full.tools is not None and full.tools[0]["function"]["name"] == "get_stock_price"
    # tools parsed from the system prompt; a single-quoted (Python-literal) call still reads
    assert no_tools_column.tools == full.tools
    assert _msgs(no_tools_column)[-1] == {
        "role": "assistant",
        "content": "Let me look that up.",
        "tool_calls": [_call("get_stock_price", {"symbol": "NVDA"})],
    }


def test_glaive_raw_text() -> None:
    call, plain = _load("glaive-function-calling-v2", "glaive_function_calling_v2.jsonl")
    assert _msgs(call) == [
        {
            "role": "system",
            "content": "You are a helpful assistant with access to the following functions. "
            "Use them if required -",
        },
        {
            "role": "user",
            "content": "Hi, I want to know my BMI. I weigh 70 kg and I am 1.75 m tall.",
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("calculate_bmi", {"weight": 70, "height": 1.75})],
        },
        {"role": "tool", "content": '{"bmi": 22.86}'},
        {"role": "assistant", "content": "Your BMI is 22.86, which is in the healthy range."},
    ]
    assert call.tools is not None
    assert call.tools[0] == {
        "type": "function",
        "function": json.loads(
            '{"name": "calculate_bmi", "description": "Calculate the Body Mass Index", '
            '"parameters": {"type": "object", "properties": {"weight": {"type": "number", '
            '"description": "Weight in kilograms"}, "height": {"type": "number", '
            '"description": "Height in meters"}}, "required": ["weight", "height"]}}'
        ),
    }
    assert plain.tools is None
    assert _msgs(plain)[1:] == [
        {"role": "user", "content": "Give me a synonym for happy."},
        {"role": "assistant", "content": "Joyful."},
    ]


def test_glaive_llamafactory_shape_passes_through() -> None:
    (row,) = _load("glaive", "glaive_llamafactory.json")
    assert _msgs(row) == [
        {"role": "user", "content": "Convert 100 USD to EUR."},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("convert_currency", {"amount": 100, "from": "USD", "to": "EUR"})],
        },
        {"role": "tool", "content": '{"converted_amount": 92.1}'},
        {"role": "assistant", "content": "100 USD is about 92.10 EUR."},
    ]


def test_xlam() -> None:
    (row,) = _load("xlam-function-calling-60k", "xlam_function_calling_60k.json")
    assert row.id == "0"
    assert _msgs(row) == [
        {"role": "user", "content": "Where can I find live giveaways for beta access and games?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                _call("live_giveaways_by_type", {"type": "beta"}),
                _call("live_giveaways_by_type", {"type": "game"}),
            ],
        },
    ]
    assert row.tools is not None
    assert row.tools[0]["function"]["name"] == "live_giveaways_by_type"


def test_bad_rows_become_rejects_not_errors() -> None:
    preset = apply_preset("xlam")
    raw = RawRow("x", 4, {"id": 7, "query": "q", "answers": "[{not json"})
    out = normalize_with_preset(preset, raw)
    assert isinstance(out, Reject)
    assert out.reason == reasons.INVALID_TOOL_CALL and out.id == "7" and out.row == 4
    missing = transform_raw(apply_preset("glaive"), RawRow("g", 0, {"chat": 3}))
    assert isinstance(missing, Reject) and missing.reason == reasons.UNKNOWN_FORMAT
    unreadable = RawRow("x", 1, None, Reject("x", 1, None, reasons.INVALID_JSON, "bad"))
    assert normalize_with_preset(preset, unreadable) is unreadable.reject


def test_transform_does_not_mutate_the_input_row() -> None:
    data = json.loads((DATA / "openthoughts.jsonl").read_text(encoding="utf-8").splitlines()[0])
    before = json.dumps(data, sort_keys=True)
    out = transform_raw(apply_preset("openthoughts"), RawRow("o", 0, data))
    assert json.dumps(data, sort_keys=True) == before
    assert isinstance(out, RawRow)
    assert isinstance(normalize(out, "sharegpt"), Conversation)


# Fixtures from the shared samples (Apache-2.0), cut small:
# - skythought_amc23.jsonl: rows idx 1 and 19 of NovaSky-AI/SkyThought@6840eb7df638
#   .../Sky-T1-math-reflection-0.5-32B/amc23_eval/.../test_Sky-T1_-1_seed0_t0.0_s0_e-1.jsonl as
#   they are; row idx 30 with its generation cut at 1,200 characters (as 3 of the file's 40
#   generations end: before <|end_of_thought|>) and its pred / score set to a failed grade.
# - toolbench_G1_answer.json: OpenBMB/ToolBench@d56fdd89faf8
#   data_example/answer/G1_answer/10_ChatGPT_DFS_woFilter_w2.json with `answer_generation`,
#   `win` and `forward_args` as they are, the search `tree` cut to its root and
#   `compare_candidates` emptied.


def test_skythought_eval_dump() -> None:
    full, second, cut = _load("skythought", "skythought_amc23.jsonl")
    assert full.id == "1" and isinstance(full, Conversation)
    user, answer = _msgs(full)
    assert user["role"] == "user" and user["content"].startswith("Positive real numbers $x$")
    assert answer["reasoning_content"].startswith("So I've got this problem here")
    assert answer["content"].endswith("\\boxed{36}\n\\]")  # the solution, markers removed
    assert "<|" not in answer["content"] + answer["reasoning_content"]
    # the grading columns are metadata, never trained (and not "unread")
    assert full.meta["metadata"]["gt"] == "36" and full.meta["metadata"]["score"] == [True]
    assert "unread_fields" not in full.meta
    assert _msgs(second)[1]["reasoning_content"]
    # a generation cut before <|end_of_thought|>: all reasoning, flagged
    assert _msgs(cut)[1]["content"] == "" and cut.meta["metadata"]["reasoning_unterminated"]


def test_skythought_without_the_preset_says_the_trace_was_not_read() -> None:
    """Read as a prompt (`question`), the trace in `code` used to vanish silently and the row
    was re-answered; the row now names the text fields its shape did not read."""
    src = Source("sky", DATA / "skythought_amc23.jsonl")
    rows = [normalize(raw) for raw in iter_raw_rows(src)]
    assert all(type(r).__name__ == "PromptOnly" for r in rows)
    assert [r.meta["unread_fields"] for r in rows] == [
        ("gt", "code", "pred"),
        ("gt", "code", "pred"),
        ("gt", "code"),  # its pred is [""]: no text
    ]
    assert "score" not in rows[0].meta["unread_fields"]  # booleans are not text


def test_toolbench_answer_tree() -> None:
    (row,) = _load("toolbench", "toolbench_G1_answer.json")
    msgs = _msgs(row)
    assert [m["role"] for m in msgs] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert msgs[0]["content"].startswith("You are AutoGPT")
    assert msgs[2]["tool_calls"] == [_call("transitaires_for_transitaires", {})]
    assert msgs[3]["name"] == "transitaires_for_transitaires"
    finish = msgs[-1]["tool_calls"][0]["function"]
    assert finish["name"] == "Finish" and finish["arguments"]["return_type"] == "give_answer"
    assert row.tools is not None
    assert [t["function"]["name"] for t in row.tools] == [
        "transitaire_for_transitaires",
        "transitaires_for_transitaires",
        "Finish",
    ]
    assert row.meta["metadata"]["finish_type"] == "give_answer"
    assert "unread_fields" not in row.meta


def test_an_unknown_shape_names_the_preset_whose_layout_it_is() -> None:
    from draftset.sources.presets import source_normalizer

    src = Source("tb", DATA / "toolbench_G1_answer.json")
    (raw,) = iter_raw_rows(src)
    item = source_normalizer(src)(raw)
    assert isinstance(item, Reject) and item.reason == reasons.UNKNOWN_FORMAT
    assert "preset 'toolbench'" in item.message and "preset: toolbench" in item.message
    # a prefix that is not one of the last chain's: another branch, refused
    data = json.loads((DATA / "toolbench_G1_answer.json").read_text())
    data["answer_generation"]["train_messages"][0][1]["content"] = "another task"
    bad = normalize_with_preset(apply_preset("toolbench"), RawRow("tb", 0, data))
    assert isinstance(bad, Reject) and "not a prefix" in bad.message


@pytest.mark.parametrize(
    ("name", "data"),
    [
        (
            "hermes-function-calling",
            {
                "conversations": [
                    {"from": "human", "value": "Weather?"},
                    {
                        "from": "gpt",
                        "value": '<tool_call>\n{"name": "f", "arguments": {"city": "\\ud83d"}}'
                        "\n</tool_call>",
                    },
                    {"from": "tool", "value": "sunny"},
                    {"from": "gpt", "value": "Sunny."},
                ]
            },
        ),
        (
            "glaive",
            {
                "system": "SYSTEM: You have functions.",
                "chat": 'USER: Weather?\n\n\nASSISTANT: <functioncall> {"name": "f",'
                ' "arguments": \'{"city": "\\ud83d"}\'} <|endoftext|>\n\n\nFUNCTION RESPONSE:'
                ' {"t": 1}\n\n\nASSISTANT: Sunny. <|endoftext|>',
            },
        ),
        (
            "hermes",
            {
                "conversations": [
                    {"from": "human", "value": "Weather?"},
                    {
                        "from": "gpt",
                        "value": "<tool_call>\n{'name': 'f', 'arguments': {'city': '\\ud83d'}}"
                        "\n</tool_call>",
                    },
                    {"from": "tool", "value": "sunny"},
                    {"from": "gpt", "value": "Sunny."},
                ]
            },
        ),
    ],
    ids=["hermes_tool_call", "glaive_functioncall", "hermes_python_literal"],
)
def test_lone_surrogate_in_a_presets_json_text_is_invalid_utf8(name: str, data: dict) -> None:
    """A call's JSON text in a preset's own markup, parsed by the preset: a lone surrogate
    escape there stopped the whole build at the batch encode (TypeError); the row's
    `invalid_utf8` now, as anywhere in a row."""
    out = normalize_with_preset(apply_preset(name), RawRow("src", 0, data))
    assert isinstance(out, Reject), out
    assert out.reason == reasons.INVALID_UTF8, out.message
