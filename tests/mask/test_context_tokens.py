"""The token-level context rule (docs/semantics.md, "Turn modes"): in `all` mode a turn is
supervised only when the row's tokens before it are the tokens a server feeds the model for that
turn, ``tokenizer(render(messages[:j], add_generation_prompt=True))`` — not just the same text.

The case (issue 24, item 2): Qwen3.6 with thinking on, a tool loop whose first call has empty
reasoning. The model generates that turn after the pre-filled ``<think>\\n`` as ``\\n</think>``:
the row holds ``<think>``, ``\\n``, ``\\n``, ``</think>`` (151667, 198, 198, 151668), while the
next turn's prompt, tokenized in one piece as a server does, holds ``<think>``, ``\\n\\n``,
``</think>`` (151667, 271, 151668). Supervising the next turn would train it on a context the
model never sees.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import qwen3_tokenizer_dir, trl_template

from draftset.config.options import BuildOptions
from draftset.core import reasons
from draftset.core.records import Conversation
from draftset.mask.step import count_results
from draftset.mask.template import ChatTemplate, TemplateSpec, describe_template
from draftset.output.readback import supervised_runs
from draftset.pipeline.build import mask_config

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
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}


def tool_loop(first_reasoning: str | None) -> list[dict]:
    call = {"role": "assistant", "content": "", "tool_calls": [CALL]}
    if first_reasoning:
        call["reasoning_content"] = first_reasoning
    return [
        {"role": "user", "content": "Weather in Paris?"},
        call,
        {"role": "tool", "content": '{"temp": 21}'},
        {"role": "assistant", "content": "It is 21C.", "reasoning_content": "The tool said 21."},
    ]


@pytest.fixture(scope="module")
def qwen36() -> ChatTemplate:
    text = trl_template("qwen3_6").read_text()
    return ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), text, {}, ()))


def build(template: ChatTemplate, mode: str, messages: list[dict]):
    spec = template.spec
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None, turns=mode)  # type: ignore[arg-type]
    step = mask_config(opts, spec, describe_template(template)).build(template)
    return step([Conversation("c", "s", 0, messages, TOOLS)])[0]


def served_prompt(template: ChatTemplate, messages: list[dict], j: int) -> list[int]:
    """What vLLM feeds the model for turn j: the prompt text tokenized in one piece."""
    text = template.tokenizer.apply_chat_template(
        messages[:j],
        tools=TOOLS,
        chat_template=template.template_text,
        add_generation_prompt=True,
        tokenize=False,
    )
    return template.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_history_with_retokenized_empty_think_is_context(qwen36):
    msgs = tool_loop(None)
    res = build(qwen36, "all", msgs)
    (row,) = res.rows
    ids, mask = row.input_ids.tolist(), row.loss_mask.tolist()
    runs = supervised_runs(row.loss_mask)
    # the first call is supervised as generated: <think>\n (prompt) then \n</think> (model)
    assert len(runs) == 1
    s, _ = runs[0]
    assert ids[s - 2 : s + 2] == [151667, 198, 198, 151668]
    # the final turn's served prompt differs from the row's tokens: not supervised
    assert served_prompt(qwen36, msgs, 3)[s - 2 : s + 1] == [151667, 271, 151668]
    assert sum(mask) == runs[0][1] - runs[0][0]
    stats = res.plan_stats
    assert stats.context_turns[reasons.TURN_HISTORY_TOKENS_DIFFER] == 1
    c = count_results([res])["s"]
    assert c.context_turns[reasons.TURN_HISTORY_TOKENS_DIFFER] == 1
    assert c.supervised_turns == 1


def test_every_supervised_turn_sees_the_served_prompt_tokens(qwen36):
    """With reasoning in the call, history and generation tokenize alike: both supervised,
    and every run's preceding tokens are exactly the served prompt."""
    msgs = tool_loop("Look it up.")
    res = build(qwen36, "all", msgs)
    (row,) = res.rows
    ids = row.input_ids.tolist()
    runs = supervised_runs(row.loss_mask)
    assert len(runs) == 2
    for (s, _), j in zip(runs, (1, 3), strict=True):
        assert ids[:s] == served_prompt(qwen36, msgs, j)
    assert not res.plan_stats.context_turns


@pytest.mark.parametrize("mode", ["each", "last"])
def test_each_and_last_rows_start_from_the_served_prompt(qwen36, mode):
    """`each` renders each turn's own row and `last` supervises one turn after one context
    segment: both already hold the served prompt's tokens, and nothing is demoted."""
    msgs = tool_loop(None)
    res = build(qwen36, mode, msgs)
    turns = (1, 3) if mode == "each" else (3,)
    assert len(res.rows) == len(turns)
    for row, j in zip(res.rows, turns, strict=True):
        ((s, _),) = supervised_runs(row.loss_mask)
        assert row.input_ids.tolist()[:s] == served_prompt(qwen36, msgs, j)
    assert reasons.TURN_HISTORY_TOKENS_DIFFER not in res.plan_stats.context_turns


def varied() -> list[list[dict]]:
    """Multi-turn conversations whose later turns are judged: tool loops with and without
    reasoning, text that merges across edges (CJK, emoji, spaces, newlines)."""
    out = [tool_loop(None), tool_loop("Look it up.")]
    for answer in ("Blue.", " spaced ", "\n\nnewlines\n", "日本語の答え。", "🙂🙂 ok", ""):
        call = {"role": "assistant", "content": answer, "tool_calls": [CALL]}
        out.append(
            [
                {"role": "user", "content": "Q1 日本"},
                call,
                {"role": "tool", "content": "r1"},
                {"role": "assistant", "content": answer or "x", "tool_calls": [CALL]},
                {"role": "tool", "content": "r2 🙂"},
                {"role": "assistant", "content": f"final {answer}", "reasoning_content": "ok"},
            ]
        )
    return out


@pytest.mark.parametrize("template", ["qwen3_6", "qwen3"])
def test_judging_from_the_last_added_token_equals_tokenizing_whole_prompts(template, monkeypatch):
    """The fast path tokenizes a prompt only after the last added token before the previous
    turn; it must give exactly the rows and counts of tokenizing every prompt whole."""
    from draftset.mask import encode

    t = ChatTemplate(
        TemplateSpec(str(qwen3_tokenizer_dir()), trl_template(template).read_text(), {}, ())
    )
    assert encode._added_token_split(t.backend) is not None
    batch = [Conversation(f"c{i}", "s", i, m, TOOLS) for i, m in enumerate(varied())]

    def run():
        spec = t.spec
        opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
        step = mask_config(opts, spec, describe_template(t)).build(t)
        res = step(list(batch))
        rows = [(r.input_ids.tolist(), r.loss_mask.tolist()) for x in res for r in x.rows]
        return rows, count_results(res)["s"].context_turns

    fast = run()
    monkeypatch.setattr(encode, "_added_token_split", lambda backend: None)
    assert run() == fast
    for (ids, mask), msgs in zip(fast[0], varied(), strict=True):
        for s, _ in supervised_runs(np.asarray(mask)):
            j = next(
                j
                for j in range(1, len(msgs))
                if msgs[j]["role"] == "assistant" and len(served_prompt(t, msgs, j)) == s
            )
            assert ids[:s] == served_prompt(t, msgs, j)
