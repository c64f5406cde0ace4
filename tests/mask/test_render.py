"""Golden mask tests: real tokenizers, real chat templates (trl wheel), the contract of issue #2.

Each expected value below was derived by hand from the template source and the rule
G = render(0..j)[len(render(0..j-1, gen)):] up to the end-of-turn token. They are the contract:
a change in them is a change in semantics.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, trl_template

from draftset.core.records import Conversation
from draftset.mask.encode import encode_plans
from draftset.mask.render import plan_conversation
from draftset.mask.template import ChatTemplate, TemplateSpec

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def U(c):
    return {"role": "user", "content": c}


def A(c, **k):
    return {"role": "assistant", "content": c, **k}


CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CASES = {
    "single": ([U("What is 2+2?"), A("4")], None),
    "multi": ([U("Hi"), A("Hello!"), U("Name a color."), A("Blue.")], None),
    "system": ([{"role": "system", "content": "You are terse."}, U("Hi"), A("Hey.")], None),
    "tools": (
        [
            U("Weather in Paris?"),
            A("", tool_calls=[CALL]),
            {"role": "tool", "content": '{"temp": 21}'},
            A("It is 21C."),
        ],
        TOOLS,
    ),
    "reasoning_last": ([U("2+2?"), A("4", reasoning_content="Add two and two.")], None),
    "reasoning_history": (
        [
            U("2+2?"),
            A("4", reasoning_content="Add."),
            U("3+3?"),
            A("6", reasoning_content="Add again."),
        ],
        None,
    ),
    "unicode": ([U("你好 👋🏽 Ünïcödé?"), A("こんにちは 🌸 — ça va")], None),
    "empty_content": ([U("Say nothing"), A(""), U("Now say hi"), A("hi")], None),
}

HD = "history_render_differs"
NG = "not_generable"
PH = "placeholder_answer"
E = "<think>\n\n</think>\n\n"  # the empty thinking block Qwen3 writes into a final answer
# (expected supervised runs, context-only turns by reason)
GOLDEN = {
    ("qwen3", "qwen2_5", False): {
        "single": (["4<|im_end|>"], {}),
        "multi": (["Hello!<|im_end|>", "Blue.<|im_end|>"], {}),
        "system": (["Hey.<|im_end|>"], {}),
        "tools": (
            [
                '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                "</tool_call><|im_end|>",
                "It is 21C.<|im_end|>",
            ],
            {},
        ),
        "reasoning_last": (["4<|im_end|>"], {}),  # Qwen2.5 never renders reasoning
        "reasoning_history": (["4<|im_end|>", "6<|im_end|>"], {}),
        "unicode": (["こんにちは 🌸 — ça va<|im_end|>"], {}),
        "empty_content": (["hi<|im_end|>"], {PH: 1}),
    },
    ("qwen3", "qwen3", False): {
        "single": ([E + "4<|im_end|>"], {}),
        "multi": ([E + "Blue.<|im_end|>"], {HD: 1}),
        "system": ([E + "Hey.<|im_end|>"], {}),
        # the tool-call turn is generated with an empty think block, which history drops
        "tools": ([E + "It is 21C.<|im_end|>"], {HD: 1}),
        "reasoning_last": (["<think>\nAdd two and two.\n</think>\n\n4<|im_end|>"], {}),
        "reasoning_history": (["<think>\nAdd again.\n</think>\n\n6<|im_end|>"], {HD: 1}),
        "unicode": ([E + "こんにちは 🌸 — ça va<|im_end|>"], {}),
        "empty_content": ([E + "hi<|im_end|>"], {PH: 1}),
    },
    ("qwen3", "qwen3", True): {
        "single": (["4<|im_end|>"], {}),
        "multi": (["Blue.<|im_end|>"], {HD: 1}),
        "system": (["Hey.<|im_end|>"], {}),
        "tools": (["It is 21C.<|im_end|>"], {HD: 1}),
        "reasoning_last": ([], {NG: 1}),  # recorded reasoning cannot come out with thinking off
        "reasoning_history": ([], {NG: 2}),
        "unicode": (["こんにちは 🌸 — ça va<|im_end|>"], {}),
        "empty_content": (["hi<|im_end|>"], {PH: 1}),
    },
    ("qwen3", "qwen3_6", False): {
        # the generation prompt pre-fills "<think>\n": the model writes from there on
        "single": (["\n</think>\n\n4<|im_end|>"], {}),
        "multi": (["\n</think>\n\nBlue.<|im_end|>"], {HD: 1}),
        "system": (["\n</think>\n\nHey.<|im_end|>"], {}),
        "tools": (
            [
                "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                "</parameter>\n</function>\n</tool_call><|im_end|>",
                "\n</think>\n\nIt is 21C.<|im_end|>",
            ],
            {},
        ),
        "reasoning_last": (["Add two and two.\n</think>\n\n4<|im_end|>"], {}),
        "reasoning_history": (["Add again.\n</think>\n\n6<|im_end|>"], {HD: 1}),
        "unicode": (["\n</think>\n\nこんにちは 🌸 — ça va<|im_end|>"], {}),
        "empty_content": (["\n</think>\n\nhi<|im_end|>"], {PH: 1}),
    },
    ("qwen3", "qwen3_6", True): {
        "single": (["4<|im_end|>"], {}),
        "multi": (["Blue.<|im_end|>"], {HD: 1}),
        "system": (["Hey.<|im_end|>"], {}),
        "tools": (
            [
                "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                "</function>\n</tool_call><|im_end|>",
                "It is 21C.<|im_end|>",
            ],
            {},
        ),
        "reasoning_last": ([], {NG: 1}),
        "reasoning_history": ([], {NG: 2}),
        "unicode": (["こんにちは 🌸 — ça va<|im_end|>"], {}),
        "empty_content": (["hi<|im_end|>"], {PH: 1}),
    },
    ("llama", "llama3_1", False): {
        "single": (["4<|eot_id|>"], {}),
        "multi": (["Hello!<|eot_id|>", "Blue.<|eot_id|>"], {}),
        "system": (["Hey.<|eot_id|>"], {}),
        "tools": (
            [
                '{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
                "It is 21C.<|eot_id|>",
            ],
            {},
        ),
        "reasoning_last": (["4<|eot_id|>"], {}),
        "reasoning_history": (["4<|eot_id|>", "6<|eot_id|>"], {}),
        "unicode": (["こんにちは 🌸 — ça va<|eot_id|>"], {}),
        "empty_content": (["hi<|eot_id|>"], {PH: 1}),
    },
}

_TEMPLATES: dict = {}


def template(tok: str, name: str, nothink: bool) -> ChatTemplate:
    key = (tok, name, nothink)
    if key not in _TEMPLATES:
        d = qwen3_tokenizer_dir() if tok == "qwen3" else llama32_tokenizer_dir()
        kwargs = {"enable_thinking": False} if nothink else {}
        _TEMPLATES[key] = ChatTemplate(TemplateSpec(str(d), trl_template(name).read_text(), kwargs))
    return _TEMPLATES[key]


def supervised_runs(tmpl: ChatTemplate, ids: np.ndarray, mask: np.ndarray) -> list[str]:
    """Decode each maximal run of supervised tokens (an independent view of the mask)."""
    runs, cur = [], []
    for i, m in zip(ids.tolist(), mask.tolist(), strict=True):
        if m:
            cur.append(i)
        elif cur:
            runs.append(cur)
            cur = []
    if cur:
        runs.append(cur)
    return [tmpl.tokenizer.decode(r, skip_special_tokens=False) for r in runs]


PARAMS = [(key, case) for key in GOLDEN for case in CASES]


# Turns the text-level rule supervises but the token-level rule makes context: Qwen3.6 with
# thinking on writes the tool call's empty think block as "<think>\n" (prompt) + "\n</think>"
# (model); the final turn's served prompt tokenizes it "<think>", "\n\n", "</think>"
# (docs/semantics.md, "Tokens before a turn"). Thinking off pre-fills the whole block: no edge.
TOKENS_DIFFER = {
    (("qwen3", "qwen3_6", False), "tools"): ["\n</think>\n\nIt is 21C.<|im_end|>"],
}


@pytest.mark.parametrize(
    ("key", "case"), PARAMS, ids=[f"{k[1]}{'-nothink' if k[2] else ''}-{c}" for k, c in PARAMS]
)
def test_golden_masks(key, case):
    tmpl = template(*key)
    messages, tools = CASES[case]
    expected_runs, expected_context = GOLDEN[key][case]
    plan = plan_conversation(tmpl, Conversation("x", "s", 0, messages, tools), "all")
    assert dict(plan.context_turns) == expected_context
    if not expected_runs:
        assert [r.reason for r in plan.rejects] == ["no_supervised_turn"]
        assert plan.rows == []
        return
    assert plan.rejects == []
    (row,) = plan.rows
    # text level: supervised segments are exactly the generations
    assert [s for s, sup in row.segments if sup] == expected_runs
    # the segments rebuild the template's own full render
    assert "".join(s for s, _ in row.segments) == tmpl.render(messages, tools)
    # token level: decoding the masked runs gives the same generations back, except turns
    # whose served prompt tokenizes the history differently (history_tokens_differ)
    ((ids, mask),) = encode_plans(tmpl.backend, [row])
    demoted = TOKENS_DIFFER.get((key, case), [])
    assert supervised_runs(tmpl, ids, mask) == [r for r in expected_runs if r not in demoted]
    assert row.tokens_differ == len(demoted)
    # every supervised run ends with an end-of-turn token id
    ends = [i for i in range(len(mask)) if mask[i] and (i + 1 == len(mask) or not mask[i + 1])]
    assert all(int(ids[i]) in tmpl.eot_ids for i in ends)


def test_segments_never_straddle_the_prefill_edge():
    """Qwen3.6 pre-fills '<think>\\n'; the generation starts '\\n</think>' as its own token."""
    tmpl = template("qwen3", "qwen3_6", False)
    plan = plan_conversation(tmpl, Conversation("x", "s", 0, CASES["single"][0]), "all")
    ((ids, mask),) = encode_plans(tmpl.backend, plan.rows)
    first = int(np.argmax(mask))
    assert tmpl.tokenizer.convert_ids_to_tokens(int(ids[first - 1])) == "Ċ"  # prompt ends "\n"
    assert tmpl.tokenizer.convert_ids_to_tokens(int(ids[first])) == "Ċ"  # generation starts "\n"
    joint = tmpl.backend.encode(
        "".join(s for s, _ in plan.rows[0].segments), add_special_tokens=False
    ).ids
    assert joint != ids.tolist()  # one joint encoding would merge "\n\n" into one token


def test_each_mode_supervises_every_turn_in_its_own_row():
    tmpl = template("qwen3", "qwen3", False)
    messages, _ = CASES["reasoning_history"]
    plan = plan_conversation(tmpl, Conversation("c1", "s", 3, messages), "each")
    assert [r.id for r in plan.rows] == ["c1#0", "c1#1"]
    assert [[s for s, sup in r.segments if sup] for r in plan.rows] == [
        ["<think>\nAdd.\n</think>\n\n4<|im_end|>"],
        ["<think>\nAdd again.\n</think>\n\n6<|im_end|>"],
    ]
    # each row is exactly the render the server sees at that step
    assert "".join(s for s, _ in plan.rows[0].segments) == tmpl.render(messages[:2])


def test_last_mode_supervises_only_the_final_turn():
    tmpl = template("llama", "llama3_1", False)
    messages, _ = CASES["multi"]
    plan = plan_conversation(tmpl, Conversation("c", "s", 0, messages), "last")
    assert dict(plan.context_turns) == {"not_last_turn": 1}
    assert [s for s, sup in plan.rows[0].segments if sup] == ["Blue.<|eot_id|>"]


def test_trailing_user_turn_is_trimmed_and_counted():
    tmpl = template("qwen3", "qwen2_5", False)
    plan = plan_conversation(
        tmpl, Conversation("c", "s", 0, [U("a"), A("b"), U("dangling")]), "all"
    )
    assert plan.trailing_turns_trimmed == 1
    assert "dangling" not in "".join(s for s, _ in plan.rows[0].segments)


def test_template_error_rejects_the_conversation_with_its_own_message():
    tmpl = template("qwen3", "qwen3_6", False)
    # no user turn at all: Qwen3.6 raises "No user query found in messages."
    plan = plan_conversation(
        tmpl, Conversation("c", "s", 0, [{"role": "system", "content": "x"}, A("y")]), "all"
    )
    assert [(r.reason, r.message) for r in plan.rejects] == [
        ("template_error", "No user query found in messages.")
    ]


def test_each_mode_rejects_only_the_failing_turn():
    tmpl = template("qwen3", "qwen3_6", False)
    # the first answer has no user query before it (template raises), the second one has
    msgs = [{"role": "system", "content": "x"}, A("early"), U("question"), A("answer")]
    plan = plan_conversation(tmpl, Conversation("c", "s", 0, msgs), "each")
    assert [r.id for r in plan.rejects] == ["c#0"]
    assert [r.id for r in plan.rows] == ["c#1"]


def test_eot_tokens_are_read_from_generation_config():
    """The stops are the model's generation_config.json eos_token_id (+ EOS), not a probe:
    Llama-3.x's lists <|eom_id|>, which no probe of a plain answer finds."""
    assert template("qwen3", "qwen3_6", False).eot_tokens == ("<|im_end|>", "<|endoftext|>")
    assert template("llama", "llama3_1", False).eot_tokens == (
        "<|end_of_text|>",
        "<|eom_id|>",
        "<|eot_id|>",
    )


def test_generation_tags_are_cross_checked_not_trusted():
    """Templates with {% generation %} tags: the prefix rule decides, the tags are compared."""
    llama = ChatTemplate(
        TemplateSpec(str(llama32_tokenizer_dir()), trl_template("llama3_training").read_text())
    )
    qwen = ChatTemplate(
        TemplateSpec(str(qwen3_tokenizer_dir()), trl_template("qwen2_5_training").read_text())
    )
    messages = CASES["multi"][0]
    # Llama-3 training tags mark exactly the generations
    plan = plan_conversation(llama, Conversation("x", "s", 0, messages))
    assert (plan.generation_tags_agree, plan.generation_tags_disagree) == (1, 0)
    # Qwen2.5 training tags also cover the newline before the answer and after <|im_end|>,
    # tokens the model never generates: counted as disagreement, masks follow serving
    text, spans = qwen.generation_tag_spans(messages, None)
    assert [text[a:b] for a, b in spans] == ["\nHello!<|im_end|>\n", "\nBlue.<|im_end|>\n"]
    plan = plan_conversation(qwen, Conversation("x", "s", 0, messages))
    assert (plan.generation_tags_agree, plan.generation_tags_disagree) == (0, 1)
    assert [s for s, sup in plan.rows[0].segments if sup] == ["Hello!<|im_end|>", "Blue.<|im_end|>"]
    # templates without tags are not cross-checked
    plain = template("qwen3", "qwen2_5", False)
    plan = plan_conversation(plain, Conversation("x", "s", 0, messages))
    assert (plan.generation_tags_agree, plan.generation_tags_disagree) == (0, 0)
