"""Template options vLLM does not give the template: a ``null`` or ``"auto"`` value.

vLLM 0.33 merges every chat request's ``chat_template_kwargs`` over its defaults with
``renderers/params.py`` ``merge_kwargs``, whose ``unset_values`` are ``(None, "auto")``: such a
key is dropped and the template sees the name undefined. A template that tells "defined" from
"undefined" renders otherwise: GLM-4.7-Flash keeps history reasoning for ``clear_thinking is
defined and not clear_thinking``, so ``{"clear_thinking": null}`` kept it in the set while vLLM's
prompt (measured against ``vllm launch render`` 0.33.0) clears it, and every later turn's context
differed ("context differs from the server's prompt"). Under ``serving_engine: vllm`` draftset
drops those values too (build and verify); `transformers` gives them as sent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir
from real_families import REAL_FAMILIES
from rows import write_jsonl

from draftset import api

MODE_TEMPLATE = (
    "{%- if mode is defined %}<|im_start|>system\nmode={{ mode }}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HELLO = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello there."}]
REASONING = [
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4.", "reasoning_content": "Two plus two."},
    {"role": "user", "content": "And 3+3?"},
    {"role": "assistant", "content": "6.", "reasoning_content": "Three plus three."},
]


def _build(tmp: Path, rows: list[dict], tokenizer: Path, kwargs: dict, **options) -> list[dict]:
    out = tmp / "out"
    built = api.build(
        sources=[str(write_jsonl(tmp / "rows.jsonl", rows))],
        tokenizer=str(tokenizer),
        template_kwargs=kwargs,
        out=str(out),
        workers=1,
        progress=False,
        overwrite=True,
        **options,
    )
    assert built.ok
    assert api.verify(out, speculators=False).ok
    return [built.row(i) for i in range(built.rows)]


def _texts(rows: list[dict], tokenizer: Path) -> list[str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    return [tok.decode(list(r["input_ids"]), skip_special_tokens=False) for r in rows]


@pytest.mark.parametrize("value", [None, "auto"])
def test_an_unset_value_is_no_template_option_under_vllm(tmp_path: Path, value: object) -> None:
    tok = qwen3_tokenizer_dir()
    template = tmp_path / "mode.jinja"
    template.write_text(MODE_TEMPLATE)
    rows = [{"id": "a", "messages": HELLO}]
    given = _texts(_build(tmp_path, rows, tok, {"mode": value}, chat_template=str(template)), tok)
    assert given == [
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello there.<|im_end|>\n"
    ]
    named = _texts(_build(tmp_path, rows, tok, {"mode": "x"}, chat_template=str(template)), tok)
    assert named[0].startswith("<|im_start|>system\nmode=x<|im_end|>\n")


def test_transformers_gives_an_unset_value_as_sent(tmp_path: Path) -> None:
    tok = qwen3_tokenizer_dir()
    template = tmp_path / "mode.jinja"
    template.write_text(MODE_TEMPLATE)
    rows = [{"id": "a", "messages": HELLO}]
    texts = _texts(
        _build(
            tmp_path,
            rows,
            tok,
            {"mode": None},
            chat_template=str(template),
            serving_engine="transformers",
        ),
        tok,
    )
    assert texts[0].startswith("<|im_start|>system\nmode=None<|im_end|>\n")


def test_glm_clear_thinking_null_clears_history_reasoning_as_vllm_does(tmp_path: Path) -> None:
    """The render-server referee's finding (GLM-4.7-Flash's real files and template)."""
    tok = REAL_FAMILIES["glm4_7"].folder()
    rows = [{"id": "r", "messages": REASONING}]
    think = {"enable_thinking": True}
    null = _texts(_build(tmp_path, rows, tok, {**think, "clear_thinking": None}), tok)
    unset = _texts(_build(tmp_path, rows, tok, think), tok)
    kept = _texts(_build(tmp_path, rows, tok, {**think, "clear_thinking": False}), tok)
    assert null == unset
    assert "<think>Two plus two.</think>" not in null[0]  # cleared from the history turn
    assert "<think>Two plus two.</think>" in kept[0]


def test_verify_fails_a_set_rendered_with_the_null_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify renders by the rule on its own (its reference path): a set whose build gave the
    template the null option (the build's merge switched back to before) fails it."""
    from draftset.mask.template import Renderer

    def as_before(self: Renderer, row_kwargs: dict | None) -> dict:
        return self._base_kwargs if not row_kwargs else {**self._base_kwargs, **row_kwargs}

    tok = REAL_FAMILIES["glm4_7"].folder()
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps({"id": "r", "messages": REASONING}) + "\n")
    out = tmp_path / "out"
    with monkeypatch.context() as m:
        m.setattr(Renderer, "_kwargs", as_before, raising=False)
        built = api.build(
            sources=[str(src)],
            tokenizer=str(tok),
            template_kwargs={"enable_thinking": True, "clear_thinking": None},
            out=str(out),
            workers=1,
            progress=False,
        )
    assert built.ok
    assert "<think>Two plus two.</think>" in _texts([built.row(0)], tok)[0]
    result = api.verify(out, speculators=False)
    assert not result.ok
    assert [c.name for c in result.checks if c.failed] == ["mask_fidelity"]


def test_the_empty_think_probe_leaves_a_null_option_out_as_vllm_does() -> None:
    """The probe that says whether a row's template trains an empty think block (build's
    notes, `run`'s `missing_reasoning`) merges the row's recorded options as the engine gives
    them: ``{"think": null}`` is no option under vLLM (the template thinks), a None under
    transformers (it does not)."""
    from draftset.mask.hygiene import EmptyThinkProbe

    template = (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and think is not defined %}<think>\n"
        "{{ m.reasoning_content or '' }}\n</think>\n\n{% endif %}"
        "{{ m.content }}<|im_end|>\n{% endfor %}"
        "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    row = json.dumps({"think": None})
    vllm = EmptyThinkProbe(template, {}, serving_engine="vllm")
    plain = EmptyThinkProbe(template, {}, serving_engine="transformers")
    assert vllm.wrapper() == plain.wrapper() == "<think>\n\n</think>\n\n"
    assert vllm.wrapper(row) == "<think>\n\n</think>\n\n"
    assert plain.wrapper(row) == ""
