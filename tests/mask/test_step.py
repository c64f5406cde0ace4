"""The row step notes the facts the summary counts before it drops a row's texts, so whoever
runs a batch can count it (`mask.step.count_results`) without the driver's copy of the row."""

from __future__ import annotations

import pytest
from conftest import qwen3_tokenizer_dir

from draftset.config.options import BuildOptions
from draftset.core import reasons
from draftset.core.records import Conversation
from draftset.mask.step import count_results
from draftset.mask.template import ChatTemplate, TemplateSpec, describe_template
from draftset.pipeline.build import mask_config


def chat(i: int, answer: str, reasoning: str | None = None) -> Conversation:
    msg = {"role": "assistant", "content": answer}
    if reasoning:
        msg["reasoning_content"] = reasoning
    return Conversation(f"c{i}", "s", i, [{"role": "user", "content": f"Question {i}?"}, msg])


@pytest.fixture(scope="module")
def qwen3() -> ChatTemplate:
    return ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ()))


def make_step(template: ChatTemplate, template_kwargs: dict):
    spec = TemplateSpec(template.spec.tokenizer, None, template_kwargs, ())
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    return mask_config(opts, spec, describe_template(template)).build(template)


def test_step_notes_placeholder_and_empty_think_rows(qwen3):
    batch = [chat(0, "OK."), chat(1, "Paris."), chat(2, "Paris.", "The capital is Paris.")]
    results = make_step(qwen3, {})(batch)
    assert [(r.placeholder_only, r.empty_think) for r in results] == [
        (True, False),  # every answer a placeholder: rejected, counted for `run` to answer
        (False, True),  # no reasoning under Qwen3's thinking template: an empty think block
        (False, False),
    ]
    assert [r.reason for r in results[0].rejects] == [reasons.NO_SUPERVISED_TURN]
    assert all(r.item.messages == [] for r in results)  # texts dropped, facts kept
    c = count_results(results)["s"]
    assert (c.placeholder_rows, c.empty_think_rows, c.written) == (1, 1, 2)


def test_declared_thinking_off_is_not_an_empty_think_row(qwen3):
    results = make_step(qwen3, {"enable_thinking": False})([chat(1, "Paris.")])
    assert results[0].rows and not results[0].empty_think
