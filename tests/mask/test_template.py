"""The fast render path equals transformers' public apply_chat_template, output and errors."""

from __future__ import annotations

import pytest
from conftest import llama32_tokenizer_dir, qwen3_tokenizer_dir, shared_data_dir, trl_template
from test_render import CASES, TOOLS

from draftset.core.records import Conversation, PromptOnly
from draftset.mask.template import ChatTemplate, TemplateSpec, TokenizerError
from draftset.sources.normalize import normalize
from draftset.sources.read import Source, iter_raw_rows, list_files

SETUPS = [
    ("qwen3", "qwen2_5", {}),
    ("qwen3", "qwen3", {}),
    ("qwen3", "qwen3_6", {}),
    ("qwen3", "qwen3_6", {"enable_thinking": False}),
    ("qwen3", "gptoss", {}),
    ("llama", "llama3_1", {}),
]
_CACHE: dict = {}


def template(tok: str, name: str, kwargs: dict) -> ChatTemplate:
    key = (tok, name, tuple(kwargs.items()))
    if key not in _CACHE:
        d = qwen3_tokenizer_dir() if tok == "qwen3" else llama32_tokenizer_dir()
        spec = TemplateSpec(
            str(d),
            trl_template(name).read_text(),
            dict(kwargs),
            ("<|im_end|>",) if tok == "qwen3" else (),
        )
        _CACHE[key] = ChatTemplate(spec)
    return _CACHE[key]


def outcome(fn, *args, **kw):
    try:
        return ("ok", fn(*args, **kw))
    except Exception as exc:  # the error message must be the same too
        return ("error", f"{type(exc).__name__}: {exc}")


def assert_same(t: ChatTemplate, messages, tools, row_kwargs=None):
    for k in range(1, len(messages) + 1):
        for gen in (False, True):
            fast = outcome(t.render, messages[:k], tools, gen, row_kwargs)
            ref = outcome(t.render_reference, messages[:k], tools, gen, row_kwargs)
            assert fast == ref, (k, gen)


@pytest.mark.parametrize(
    ("tok", "name", "kwargs"), SETUPS, ids=[f"{s[1]}{'-nothink' if s[2] else ''}" for s in SETUPS]
)
def test_fast_render_equals_reference_on_golden_cases(tok, name, kwargs):
    t = template(tok, name, kwargs)
    assert t._compiled is not None
    for messages, tools in CASES.values():
        assert_same(t, messages, tools)
    assert_same(t, CASES["tools"][0], TOOLS, row_kwargs={"enable_thinking": False})


@pytest.mark.parametrize(
    ("tok", "name", "kwargs"), SETUPS[1:3] + SETUPS[5:], ids=["qwen3", "qwen3_6", "llama3_1"]
)
def test_fast_render_equals_reference_on_shared_samples(tok, name, kwargs):
    data = shared_data_dir()
    if data is None:
        pytest.skip("../shared/data is absent (set DRAFTSET_SHARED_DATA to run this test)")
    t = template(tok, name, kwargs)
    checked = 0
    for sub in ("openai_messages", "sharegpt", "tool_calling", "reasoning", "multilingual"):
        for path in list_files(data / sub):
            src = Source(path.name, path)
            for raw in iter_raw_rows(src):
                item = normalize(raw) if raw.reject is None else raw.reject
                if isinstance(item, Conversation | PromptOnly) and raw.row % 7 == 0:
                    assert_same(t, item.messages[:6], item.tools)
                    checked += 1
    assert checked > 100


def test_missing_template_is_a_usage_error():
    with pytest.raises(TokenizerError, match="no chat template"):
        ChatTemplate(TemplateSpec(str(llama32_tokenizer_dir())))


def test_a_missing_template_beside_a_processors_chat_template_json_names_it(tmp_path):
    """A folder whose template is in ``chat_template.json`` (a processor's, as multimodal models
    ship it; the tokenizer does not read it) said only "has no chat template; pass
    --chat-template FILE", with the template a file away."""
    import shutil

    folder = tmp_path / "tok"
    shutil.copytree(llama32_tokenizer_dir(), folder)
    (folder / "chat_template.json").write_text('{"chat_template": "{{ 1 }}"}', encoding="utf-8")
    with pytest.raises(TokenizerError) as info:
        ChatTemplate(TemplateSpec(str(folder)))
    assert str(info.value) == (
        f"tokenizer {str(folder)!r} has no chat template; pass --chat-template FILE (its"
        " chat_template.json holds a processor's template: save its chat_template value as a"
        " .jinja file and give that)"
    )


@pytest.mark.parametrize(
    ("tok", "name", "kwargs"), SETUPS, ids=[s[1] + str(bool(s[2])) for s in SETUPS]
)
def test_worker_renderer_from_kit_plans_and_encodes_identically(tok, name, kwargs):
    """Workers rebuild the renderer from a pickled kit; their rows must be the same rows."""
    import pickle

    from draftset.mask.encode import encode_plans
    from draftset.mask.render import plan_conversation
    from draftset.mask.template import Renderer

    full = template(tok, name, kwargs)
    light = Renderer.from_kit(pickle.loads(pickle.dumps(full.kit())))
    assert light is not None and light.eot_ids == full.eot_ids
    for case, (messages, tools) in CASES.items():
        for mode in ("all", "each"):
            conv = Conversation(case, "s", 0, messages, tools)
            a, b = plan_conversation(full, conv, mode), plan_conversation(light, conv, mode)
            assert [r.segments for r in a.rows] == [r.segments for r in b.rows]
            assert [(r.reason, r.message) for r in a.rejects] == [
                (r.reason, r.message) for r in b.rejects
            ]
            ea, eb = encode_plans(full.backend, a.rows), encode_plans(light.backend, b.rows)
            assert all(
                (x[0] == y[0]).all() and (x[1] == y[1]).all() for x, y in zip(ea, eb, strict=True)
            )


def test_encode_batch_fast_gives_the_same_ids_as_encode_batch():
    """encode.py uses encode_batch_fast (no offsets): it must not change a single id."""
    texts = []
    for tok, name, kwargs in SETUPS:
        t = template(tok, name, kwargs)
        for messages, tools in CASES.values():
            texts.append((t, t.render(messages, tools)))
    texts += [
        (template("qwen3", "qwen3", {}), x)
        for x in ("", " ", "\r\n\tx", "a" * 5000, "日本語🌸\u2028")
    ]
    data = shared_data_dir()
    if data is not None:
        qwen = template("qwen3", "qwen3", {})
        for path in list_files(data / "openai_messages")[:3]:
            for raw in iter_raw_rows(Source(path.name, path)):
                item = normalize(raw) if raw.reject is None else None
                if isinstance(item, Conversation):
                    texts.append((qwen, qwen.render(item.messages, item.tools)))
    for t, text in texts:
        slow = t.backend.encode_batch([text], add_special_tokens=False)[0].ids
        fast = t.backend.encode_batch_fast([text], add_special_tokens=False)[0].ids
        assert slow == fast
    assert len(texts) > 50


def test_without_the_compiled_helper_render_falls_back_to_apply_chat_template():
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), trl_template("qwen3_6").read_text())
    slow = ChatTemplate(spec, fast=False)
    assert slow._compiled is None
    messages, tools = CASES["tools"]
    assert slow.render(messages, tools) == template("qwen3", "qwen3_6", {}).render(messages, tools)


def test_missing_tokenizer_offline_names_the_variable(monkeypatch, tmp_path):
    """A tokenizer name that is no folder needs the hub: refused with the variable that took
    it offline (huggingface_hub's rule: TRANSFORMERS_OFFLINE counts too), as a usage error."""
    import pytest

    from draftset.mask.template import TokenizerError, resolve_tokenizer_path

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "on")
    monkeypatch.chdir(tmp_path)  # a relative name that could be a hub id (an absolute path
    # cannot be one: it is "tokenizer folder not found" with the hub hint, offline or not)
    with pytest.raises(TokenizerError, match="TRANSFORMERS_OFFLINE is set") as caught:
        resolve_tokenizer_path("no-such-tokenizer")
    assert caught.value.exit_code == 2


@pytest.mark.parametrize(
    ("engine", "want"),
    [
        (  # vLLM sets `reasoning` after the message's keys, over one of its own
            "vllm",
            [
                {"role": "assistant", "reasoning": "r", "reasoning_content": "r"},
                {"role": "user", "content": "q"},
            ],
        ),
        (  # transformers adds `thinking` first; the message's own one stands
            "transformers",
            [
                {"thinking": "own", "role": "assistant", "reasoning_content": "r"},
                {"role": "user", "content": "q"},
            ],
        ),
    ],
)
def test_served_messages_alias_reasoning_as_each_engine_does(engine, want):
    """What each engine hands a template, key order included (a template may loop over a
    message's items): pinned across the fold of its two comprehensions into one."""
    from types import SimpleNamespace

    messages = [
        {"role": "assistant", "reasoning": "own", "reasoning_content": "r"},
        {"role": "user", "content": "q"},
    ]
    if engine == "transformers":
        messages[0] = {"role": "assistant", "thinking": "own", "reasoning_content": "r"}
    got = ChatTemplate.served_messages(SimpleNamespace(serving_engine=engine), messages)  # type: ignore[arg-type]
    assert [list(m.items()) for m in got] == [list(m.items()) for m in want]
    assert got[1] is messages[1]  # a message without reasoning is handed as it is
