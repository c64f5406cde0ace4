"""The mask rules build and verify share (`core/rules.py`), asked directly: each decides a
turn's or a row's fate before or after a render, the same way on both sides. The builds and
verifies that use them are tested beside the row step (tests/mask/).
"""

from __future__ import annotations

from draftset.core import rules


def U(c):
    return {"role": "user", "content": c}


def A(c, **k):
    return {"role": "assistant", "content": c, **k}


def call(arguments, name="echo"):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def test_cut_off_rule_reads_the_row_and_its_metadata():
    msgs = [U("a"), A("b"), U("c"), A("d")]
    assert rules.cut_off_answers(msgs, {}) == frozenset()
    assert rules.cut_off_answers(msgs, {"metadata": {"truncated": True}}) == {3}
    assert rules.cut_off_answers(msgs, {"metadata": {"reasoning_unterminated": True}}) == {3}
    assert rules.cut_off_answers(msgs, {"metadata": {"truncated": "yes"}}) == frozenset()
    assert rules.cut_off_answers(msgs, {"reasoning_unterminated": {1: True}}) == {1}


def test_the_rule_reads_the_parts_and_still_catches_a_drop():
    msg = A("Red.\nGreen.")
    parts = ["Red.", "Green."]
    assert not rules.drops_content(msg, "Red.Green.<|im_end|>", parts)
    assert not rules.drops_content(msg, "Red.\n\nGreen.</s>", parts)
    assert not rules.drops_content(msg, "Red.\nGreen.<|im_end|>")
    # a render without the parts, or with them out of order, dropped the answer
    assert rules.drops_content(msg, "<|im_end|>", parts)
    assert rules.drops_content(msg, "Green.Red.<|im_end|>", parts)
    assert rules.drops_content(msg, "Red.Green.<|im_end|>")  # the string was given: joined
    # the reject line says what is missing (session 29)
    assert rules.dropped_content(msg, "<|im_end|>", parts) == "its text"
    call = {"function": {"name": "get_weather", "arguments": "{}"}}
    assert rules.dropped_content(A("", tool_calls=[call]), "<|eot_id|>") == (
        "its call to 'get_weather'"
    )


def test_a_tool_name_the_answer_mentions_is_no_call():
    """The template dropped the call, but the answer's text named the tool ("I will use
    get_weather for that."): the name check found it there and the turn was trained as ending
    where the model had called the tool (DeepSeek-V3, Gemma-3; a real ToolBench row under
    Llama-3.1; a gpt-oss message of two calls whose reasoning named the tool twice)."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {}}}
    msg = A("I will use get_weather for that.", tool_calls=[call])
    assert rules.drops_content(msg, "I will use get_weather for that.<eos>")
    rendered = "I will use get_weather for that.<call>get_weather {}</call><eos>"
    assert not rules.drops_content(msg, rendered)
    two = A("", tool_calls=[call, call], reasoning_content="Call get_weather twice.")
    once = "<think>Call get_weather twice.</think>to=functions.get_weather {}<|call|>"
    assert rules.drops_content(two, once)


def test_special_token_rule_looks_into_tool_calls_only_of_answers():
    pattern = rules.special_token_pattern({"<|im_end|>"})
    answer = A("", tool_calls=[call({"a": ["x", {"b": "<|im_end|>"}]})])
    assert rules.special_token_in_answer([U("q"), answer], pattern) == (
        1,
        "tool_calls[0].function.arguments",
        "<|im_end|>",
    )
    assert rules.special_token_in_answer(
        [U("q"), A("", tool_calls=[call({}, "<|im_end|>")])], pattern
    ) == (
        1,
        "tool_calls[0].function.name",
        "<|im_end|>",
    )
    # a user or tool message is tokenized by the server as the prompt: not concerned
    assert rules.special_token_in_answer([U("<|im_end|>"), A("fine")], pattern) is None
