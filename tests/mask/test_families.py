"""Every model family trl ships a chat template for (issue 11): build and verify agree, and every
written row equals an independent render (`apply_chat_template` + the family's stop tokens).

Tokenizers are made once per session (tests/families.py: the Qwen3 / Llama-3.2 tokenizer plus
the family's special tokens and a generation_config.json with its real stop ids).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from families import (
    CONVERSATIONS,
    FAMILIES,
    SERVING_DATA,
    family_of,
    make_tokenizer,
    run_template,
    template_names,
    templates_dir,
    tokenizers_loaded_once,
)

from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.core import reasons, rules
from draftset.core.records import RawRow
from draftset.mask.encode import encode_plans
from draftset.mask.render import plan_conversation
from draftset.mask.sandbox import MemoSandbox
from draftset.mask.template import (
    ChatTemplate,
    TemplateSpec,
    as_content_parts,
    probe_content_parts,
    probe_shape,
)
from draftset.pipeline.build import run_build
from draftset.sources.normalize import normalize
from draftset.sources.read import Source


@pytest.fixture(scope="session")
def family_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("families")


@pytest.fixture(scope="session")
def tokdirs(family_root: Path) -> dict[str, Path]:
    return {name: make_tokenizer(fam, family_root / "tok") for name, fam in FAMILIES.items()}


@pytest.fixture(scope="session", autouse=True)
def _load_once():
    with tokenizers_loaded_once():
        yield


_TEMPLATES: dict[str, ChatTemplate] = {}


def template(name: str, tokdirs: dict[str, Path], **kwargs) -> ChatTemplate:
    key = f"{name}{sorted(kwargs.items())}"
    if key not in _TEMPLATES:
        text = (templates_dir() / f"{name}.jinja").read_text()
        spec = TemplateSpec(str(tokdirs[family_of(name).name]), text, kwargs)
        _TEMPLATES[key] = ChatTemplate(spec)
    return _TEMPLATES[key]


def conv(messages, tools=None, cid="c"):
    data = {"id": cid, "messages": messages, **({"tools": tools} if tools else {})}
    return normalize(RawRow("s", 0, data))


def supervised(t: ChatTemplate, item, mode="all"):
    """(supervised texts, context reasons, reject reasons) of one conversation."""
    plan = plan_conversation(t, item, mode)
    runs = []
    for (ids, mask), _row in zip(encode_plans(t.backend, plan.rows), plan.rows, strict=True):
        pos = 0
        while pos < len(ids):
            end = pos
            while end < len(ids) and mask[end] == mask[pos]:
                end += 1
            if mask[pos]:
                runs.append(t.decode([int(i) for i in ids[pos:end]]))
            pos = end
    return runs, dict(plan.context_turns), [r.reason for r in plan.rejects]


def _build(tmp_path, name, tokdirs, rows, workers=1):
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_build(
        BuildOptions(
            sources=[Source("s", src)],
            tokenizer=str(tokdirs[family_of(name).name]),
            out=tmp_path / f"{name}-out",
            chat_template_path=str(templates_dir() / f"{name}.jinja"),
            workers=workers,
            dedup="none",
        )
    )


# --- every template in the wheel -----------------------------------------------------------------
def test_the_sweep_reads_the_template_list_from_the_wheel():
    names = template_names()
    assert len(names) >= 72 and "gptoss" in names and "smolvlm" in names
    for name in names:  # every template has a family with stop tokens (a new one fails here)
        assert family_of(name).stop


@pytest.mark.parametrize("name", template_names())
def test_build_and_verify_agree_and_rows_equal_an_independent_render(name, tokdirs, family_root):
    res = run_template(name, tokdirs[family_of(name).name], family_root)
    assert res.error is None, res.error
    assert res.verify_failed == [], res.verify_failed
    assert res.wrong == [], f"rows differing from apply_chat_template: {res.wrong}"
    assert res.missing == [], (
        f"rows the independent render expects but build did not write: {res.missing}"
    )
    assert res.exact == res.written == res.expected


def test_probes_on_the_fast_path_equal_the_public_path(tokdirs):
    """Build probes through the compiled template, verify through apply_chat_template; on
    vLLM's template path content is parts exactly where vLLM itself reads the template as
    "openai" content (recorded from vLLM: tests/data/serving/content_formats.json)."""
    formats = json.loads((SERVING_DATA / "content_formats.json").read_text())["formats"]
    shapes = {}
    for name in template_names():
        t = template(name, tokdirs)
        public = probe_shape(t.render_reference, t.template_text, t.serving_engine, t.harmony)
        fast = (t.content_parts, t.renders_reasoning, t.string_arguments, t.part_lists)
        assert fast == public, name
        assert t.content_parts == t.part_lists == (formats[name] == "openai"), name
        shapes[name] = fast
    assert shapes["qwen3"][1] and not shapes["qwen2_5"][1]
    # they read `message.thinking` alone, which vLLM 0.33 never gives (transformers < 5.21)
    assert not shapes["gptoss"][1] and not shapes["lfm2_2_5"][1]
    assert not shapes["deepseek_r1_distill_training"][1]


def test_other_engines_probe_which_templates_read_only_parts(tokdirs):
    """Off vLLM's template path (`transformers`) the content shape is probed: only the
    templates that render a string as nothing get parts."""
    parts = set()
    for name in template_names():
        text = (templates_dir() / f"{name}.jinja").read_text()
        spec = TemplateSpec(str(tokdirs[family_of(name).name]), text, serving_engine="transformers")
        t = ChatTemplate(spec)
        assert t.content_parts == probe_content_parts(t.render_reference), name
        if t.content_parts:
            parts.add(name)
    assert parts == {
        "idefics3", "idefics3_training", "llava_next", "llava_next_training",
        "smolvlm", "smolvlm_training",
    }  # fmt: skip


def _outcome(render, *args):
    try:
        return ("ok", render(*args))
    except Exception as exc:  # the error must be the same too
        return ("error", f"{type(exc).__name__}: {exc}")


def test_draftsets_sandbox_renders_like_apply_chat_template_on_every_template(tokdirs):
    """draftset.mask.sandbox's memoizing environment (what build renders with) gives exactly
    `apply_chat_template`'s text or error, for every prefix of every conversation here and of
    the golden cases, with and without the generation prompt, on every trl template."""
    from test_render import CASES

    convs = [(c["messages"], c.get("tools")) for c in CONVERSATIONS.values()]
    convs += list(CASES.values())
    used = 0
    for name in template_names():
        t = template(name, tokdirs)
        assert type(t._compiled.environment) is MemoSandbox, name
        for messages, tools in convs:
            shown = as_content_parts(messages) if t.content_parts else messages
            for k in range(1, len(shown) + 1):
                for gen in (False, True):
                    args = (shown[:k], tools, gen)
                    want = _outcome(t.render_reference, *args)
                    assert _outcome(t.render, *args) == want, (name, k, gen)
        used += bool(t._compiled.environment._memo)  # some read no attribute at all
    assert used > 50


def test_workers_render_like_the_main_process(tmp_path, tokdirs):
    """The kit carries the probed message shape to worker processes."""
    rows = [{"id": k, **c} for k, c in CONVERSATIONS.items()]
    one = _build(tmp_path / "one", "smolvlm", tokdirs, rows)
    two = _build(tmp_path / "two", "smolvlm", tokdirs, rows, workers=2)
    for name in ("token_freq.npy", "rejects.jsonl"):
        assert (one.out / name).read_bytes() == (two.out / name).read_bytes()
    assert one.manifest["totals"] == two.manifest["totals"]
    assert one.manifest["totals"]["rows"] == 7


# --- the rules, one by one -----------------------------------------------------------------------
def test_stop_tokens_come_from_generation_config_before_any_probe(tokdirs):
    t = template("gptoss", tokdirs)
    assert t.eot_tokens == ("<|return|>", "<|endoftext|>", "<|call|>")  # never the probed <|end|>
    c = template("cohere2", tokdirs)
    assert c.eot_tokens == ("<|END_OF_TURN_TOKEN|>",)  # not the probed <|END_RESPONSE|>


def test_bad_generation_config_is_a_usage_error(tokdirs, tmp_path):
    import shutil

    from draftset.mask.template import TokenizerError

    d = tmp_path / "tok"
    shutil.copytree(tokdirs["qwen"], d)
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [10**9]}))
    with pytest.raises(TokenizerError, match="eos_token_id"):
        ChatTemplate(TemplateSpec(str(d), (templates_dir() / "qwen3.jinja").read_text()))


def test_verify_derives_stop_tokens_itself_not_from_the_manifest(tmp_path, tokdirs):
    rows = [{"id": "r", **CONVERSATIONS["multi_turn"]}]
    res = _build(tmp_path, "cohere2", tokdirs, rows)
    manifest_path = res.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["template"]["eot_tokens"] == ["<|END_OF_TURN_TOKEN|>"]
    assert all(not c.failed for c in run_verify(res.out, speculators=False))
    # a manifest claiming the old probe's stop token no longer fools verify
    manifest["template"]["eot_tokens"] = ["<|END_RESPONSE|>"]
    manifest_path.write_text(json.dumps(manifest))
    failed = {c.name for c in run_verify(res.out, speculators=False) if c.failed}
    assert "tokenizer" in failed


@pytest.mark.parametrize("mode", ["all", "each"])
def test_a_first_assistant_turn_is_context_and_the_rest_is_kept(tokdirs, mode):
    t = template("qwen3", tokdirs)
    item = conv(CONVERSATIONS["assistant_first"]["messages"])
    runs, context, rejects = supervised(t, item, mode)
    assert runs == ["<think>\n\n</think>\n\nBlue.<|im_end|>"]
    assert context == {reasons.TURN_NO_PROMPT: 1}
    assert rejects == []


def test_inline_reasoning_moves_only_where_the_template_renders_reasoning(tokdirs):
    item = conv(CONVERSATIONS["inline_think"]["messages"])
    assert item.messages[1]["reasoning_content"] == "Add three and three."  # normalized
    # Qwen2.5 renders no reasoning_content: the content is rendered exactly as written
    runs, _, _ = supervised(template("qwen2_5", tokdirs), item)
    assert runs == ["<think>\nAdd three and three.\n</think>\n\n6<|im_end|>"]
    # Qwen3 renders it before the answer: moved (and the same text either way)
    runs, _, _ = supervised(template("qwen3", tokdirs), item)
    assert runs == ["<think>\nAdd three and three.\n</think>\n\n6<|im_end|>"]
    # DeepSeek-R1 distill (training) reads reasoning only from content: left there, generable
    runs, context, _ = supervised(template("deepseek_r1_distill_training", tokdirs), item)
    assert runs == ["Add three and three.\n</think>\n\n6<｜end▁of▁sentence｜>"]
    assert context == {}


def test_whitespace_reasoning_is_no_reasoning_for_build_and_verify(tokdirs):
    msg = {"role": "assistant", "content": "OK", "reasoning_content": " \n"}
    assert rules.is_placeholder_answer(msg)
    item = conv([{"role": "user", "content": "Hi"}, msg, {"role": "user", "content": "x"},
                 {"role": "assistant", "content": "Done.", "reasoning_content": "\n"}])  # fmt: skip
    runs, context, _ = supervised(template("qwen3", tokdirs), item)
    assert context == {reasons.TURN_PLACEHOLDER: 1}
    assert runs == ["<think>\n\n</think>\n\nDone.<|im_end|>"]


def test_list_content_templates_get_parts(tokdirs):
    t = template("smolvlm", tokdirs)
    assert t.content_parts
    runs, _, rejects = supervised(t, conv(CONVERSATIONS["multi_turn"]["messages"]))
    assert runs == [" Hello!<end_of_utterance>", " Apple.<end_of_utterance>"]
    assert rejects == []


_DROPPING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role != 'assistant' %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_that_drops_the_answer_text_rejects_the_row(tmp_path, tokdirs):
    f = tmp_path / "dropping.jinja"
    f.write_text(_DROPPING)
    src = tmp_path / "d.jsonl"
    rows = [{"id": "r", **CONVERSATIONS["multi_turn"]}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept = tmp_path / "kept.jsonl"  # one written row, so there is a set for verify to check
    ids = [*range(100, 140), 151645]  # an answer that ends with <|im_end|>
    kept.write_text(
        json.dumps({"id": "t", "input_ids": ids, "loss_mask": [0] * 4 + [1] * 37}) + "\n"
    )
    res = run_build(
        BuildOptions(
            sources=[Source("s", src), Source("kept", kept)],
            tokenizer=str(tokdirs["qwen"]),
            out=tmp_path / "out",
            chat_template_path=str(f),
            workers=1,
            dedup="none",
        )
    )
    assert dict(res.accounting.total().rejected) == {reasons.TEMPLATE_DROPS_CONTENT: 1}
    failed = [f"{c.name}: {c.summary}" for c in run_verify(res.out, speculators=False) if c.failed]
    assert failed == []


def test_templates_without_an_end_of_turn_token_are_named_once_per_run(tmp_path, tokdirs):
    """A template that writes no stop token anywhere, not even with the next turn."""
    plain = tmp_path / "plain.jinja"
    plain.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    rows = [{"id": f"r{i}", **CONVERSATIONS["multi_turn"]} for i in range(3)]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run_build(
        BuildOptions(
            sources=[Source("s", src)],
            tokenizer=str(tokdirs["qwen"]),
            out=tmp_path / "out",
            chat_template_path=str(plain),
            workers=1,
            dedup="none",
        )
    )
    notes = [n for n in res.notes if "writes none of the stop tokens" in n]
    assert len(notes) == 1
    assert notes[0].startswith("6 assistant turns") and "plain.jinja" in notes[0]


def test_glm_answers_end_with_the_next_header_the_model_emits(tokdirs):
    """GLM-4.5's template writes no stop after an answer; the model ends it by emitting the
    next header (<|user|>, <|observation|> after a tool call), a stop token of its
    generation_config.json: supervised through it, also after the last answer."""
    t = template("glm4moe", tokdirs)
    runs, context, rejects = supervised(t, conv(CONVERSATIONS["multi_turn"]["messages"]))
    assert not rejects and not context
    assert runs == ["\n<think></think>\nHello!<|user|>", "\n<think></think>\nApple.<|user|>"]


# --- golden: hand-checked supervised text per family ---------------------------------------------
# Each value was read off the template source: what the server sends (P, with the generation
# prompt) is context; what the model writes after it, up to and including the first token its
# generation_config.json stops on, is supervised.
GOLDEN = {
    # harmony: analysis and final channel are one generation; <|end|> inside it is no stop
    ("gptoss", "reasoning"): [
        "<|channel|>analysis<|message|>Add two and two.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>4<|return|>"
    ],
    ("gptoss", "tool_call"): [
        ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
        "<|channel|>final<|message|>It is 21C.<|return|>",
    ],
    # a history answer is re-rendered with <|end|> instead of <|return|>: context only
    ("gptoss", "multi_turn"): ["<|channel|>final<|message|>Apple.<|return|>"],
    # the prompt pre-fills "<think>\n"; reasoning stays in content and is generated after it
    ("deepseek_r1_distill_training", "inline_think"): [
        "Add three and three.\n</think>\n\n6<｜end▁of▁sentence｜>"
    ],
    ("phi3", "multi_turn"): ["Hello!<|end|>", "Apple.<|end|>"],
    ("phi3", "assistant_first"): ["Blue.<|end|>"],
    ("gemma3", "multi_turn"): ["Hello!<end_of_turn>", "Apple.<end_of_turn>"],
    ("gemma3", "system"): ["Hey there.<end_of_turn>"],
    # <|END_RESPONSE|> is generated; the server stops on <|END_OF_TURN_TOKEN|>
    ("cohere2", "multi_turn"): [
        "Hello!<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
        "Apple.<|END_RESPONSE|><|END_OF_TURN_TOKEN|>",
    ],
    # thinking on: the prompt pre-fills "<think>\n"
    ("nemotron_3_nano", "reasoning"): ["Add two and two.\n</think>\n4<|im_end|>"],
    ("nemotron_3_nano", "inline_think"): ["Add three and three.\n</think>\n6<|im_end|>"],
}


@pytest.mark.parametrize(("name", "case"), sorted(GOLDEN), ids=lambda v: str(v))
def test_golden_supervised_text(name, case, tokdirs):
    c = CONVERSATIONS[case]
    tmpl = template(name, tokdirs)
    if name == "gptoss":  # its template reads `thinking`, which only transformers 5.21+ gives:
        # the template as `transformers serve` renders it (vLLM renders gpt-oss with harmony,
        # tests/mask/test_harmony.py; its template path gives no `thinking`, below)
        text = (templates_dir() / f"{name}.jinja").read_text()
        spec = TemplateSpec(str(tokdirs["gptoss"]), text, serving_engine="transformers")
        tmpl = ChatTemplate(spec)
    runs, _, rejects = supervised(tmpl, conv(c["messages"], c.get("tools")))
    assert rejects == []
    assert runs == GOLDEN[(name, case)]


def test_golden_rejections(tokdirs):
    """Where a family cannot supervise a conversation, the reason is the template's own."""
    c = CONVERSATIONS["tool_call"]
    _, _, rejects = supervised(template("phi3", tokdirs), conv(c["messages"], c.get("tools")))
    assert rejects == [reasons.TEMPLATE_DROPS_CONTENT]  # Phi-3 renders no tool calls
    _, _, rejects = supervised(template("gemma3", tokdirs), conv(c["messages"], c.get("tools")))
    assert rejects == [reasons.TEMPLATE_ERROR]  # Gemma-3 raises on the tool role
    # Nemotron-3 with thinking on: an answer without reasoning was not generated that way
    _, context, _ = supervised(
        template("nemotron_3_nano", tokdirs), conv(CONVERSATIONS["multi_turn"]["messages"])
    )
    assert context == {reasons.TURN_NOT_GENERABLE: 2}
