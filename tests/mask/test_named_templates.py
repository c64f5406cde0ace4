"""A tokenizer whose own chat template is a named set (``default`` + ``tool_use``: Hermes-2-Pro,
Hermes-3, Command-R): the server renders a request with tools by ``tool_use``.

vLLM 0.33 (`renderers/hf.py` `resolve_chat_template`: ``tokenizer.get_chat_template(None,
tools=tools)``) and transformers' own `apply_chat_template` pick ``tool_use`` when the request
has tools and ``default`` otherwise. draftset renders a set with one template, the ``default``:
a row with tools then held a prompt without the tools block, the server's held it (measured
against `vllm launch render` 0.33.0: "context differs from the server's prompt at token 1",
row 15 tokens, server 153), and every tool-call turn was rejected `template_drops_content`.
Such a row is now rejected `template_error`, saying why and what to pass; rows without tools,
which the server renders by ``default``, are built as before.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import qwen3_tokenizer_dir, trl_template
from rows import WEATHER_TOOL

from draftset import api
from draftset.mask.template import ChatTemplate, Renderer, TemplateSpec
from draftset.output.readback import open_output

PLAIN = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' +"
    " message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
ROWS = [
    {
        "id": "tools_plain_answer",
        "tools": [WEATHER_TOOL],
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
        ],
    },
    {
        "id": "no_tools",
        "messages": [
            {"role": "user", "content": "What is 3+3?"},
            {"role": "assistant", "content": "6."},
        ],
    },
]


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Qwen3's real tokenizer files with a named template set: a plain ChatML ``default``
    (no tools block) and Qwen3's template as ``tool_use``."""
    folder = tmp_path_factory.mktemp("named")
    for f in qwen3_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": PLAIN},
        {"name": "tool_use", "template": trl_template("qwen3").read_text()},
    ]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def test_the_server_renders_a_request_with_tools_by_tool_use(named: Path) -> None:
    """The premise, on transformers' public path (what vLLM's resolve_chat_template calls)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(named))
    messages = ROWS[0]["messages"][:1]
    with_tools = tok.apply_chat_template(messages, tools=[WEATHER_TOOL], tokenize=False)
    without = tok.apply_chat_template(messages, tokenize=False)
    assert "# Tools" in with_tools
    assert without == "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"


@pytest.mark.parametrize("mode", ["all", "each"])
def test_a_row_with_tools_is_rejected_not_rendered_by_default(
    named: Path, mode: str, tmp_path: Path
) -> None:
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "set"
    built = api.build(
        sources=[str(src)], tokenizer=str(named), turns=mode, out=str(out), progress=False
    )
    assert built.ok
    rejects = [json.loads(line) for line in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(r["id"].partition("#")[0], r["reason"]) for r in rejects] == [
        ("tools_plain_answer", "template_error")
    ]
    assert "'tool_use'" in rejects[0]["message"]
    assert "--chat-template" in rejects[0]["message"]
    assert len(open_output(out).ids()) == 1
    result = api.verify(out, speculators=False)
    assert result.ok, [c.summary for c in result.checks if c.failed]


def test_a_worker_renderer_rejects_it_too(named: Path) -> None:
    t = ChatTemplate(TemplateSpec(str(named)))
    worker = Renderer.from_kit(t.kit())
    assert worker is not None
    messages = ROWS[0]["messages"][:1]
    for r in (t, worker):
        with pytest.raises(ValueError, match="'tool_use'"):
            r.render(messages, [WEATHER_TOOL], True)
        assert r.render(messages, None, True).endswith("<|im_start|>assistant\n")


def test_a_template_given_is_used_for_every_row(named: Path, tmp_path: Path) -> None:
    """--chat-template (the server started with it too) renders every row, tools or not."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "set"
    built = api.build(
        sources=[str(src)],
        tokenizer=str(named),
        chat_template=str(trl_template("qwen3")),
        out=str(out),
        progress=False,
    )
    assert built.ok
    assert len(open_output(out).ids()) == 2


def test_verify_fails_a_set_that_rendered_a_row_with_tools_by_default(
    named: Path, tmp_path: Path
) -> None:
    """verify works the rule out on its own (the manifest names no --chat-template): a set as
    the build before the rule wrote it, the row with tools rendered by ``default``, fails. Made
    here by building with the ``default`` text given as --chat-template, then recording no
    --chat-template, as that build did."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    plain = tmp_path / "default.jinja"
    plain.write_text(PLAIN)
    out = tmp_path / "set"
    api.build(
        sources=[str(src)],
        tokenizer=str(named),
        chat_template=str(plain),
        out=str(out),
        progress=False,
    )
    assert len(open_output(out).ids()) == 2
    assert api.verify(out, speculators=False).ok  # right for a server given this file
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["options"]["chat_template_path"] = None
    manifest["options"]["chat_template_path_as_given"] = None
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    result = api.verify(out, speculators=False)
    failed = {c.name for c in result.checks if c.failed}
    assert not result.ok
    assert "template" not in failed, "the text is the tokenizer's own default: not the cause"
    assert failed & {"mask_fidelity", "row_identity", "accounting"}, failed


def test_additional_chat_templates_are_named_templates_too(tmp_path: Path) -> None:
    """The newer layout (chat_template.jinja + additional_chat_templates/tool_use.jinja) loads
    as the same named set; vLLM 0.33 renders a request with tools by it (measured)."""
    folder = tmp_path / "tok"
    (folder / "additional_chat_templates").mkdir(parents=True)
    for f in qwen3_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, folder / f.name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(PLAIN)
    tool_use = folder / "additional_chat_templates" / "tool_use.jinja"
    tool_use.write_text(trl_template("qwen3").read_text())
    t = ChatTemplate(TemplateSpec(str(folder)))
    with pytest.raises(ValueError, match="'tool_use'"):
        t.render(ROWS[0]["messages"][:1], [WEATHER_TOOL], True)
    # one template: rows with tools are rendered by it, as the server does (another folder:
    # transformers may keep a folder's template listing for the process once it has read it)
    alone = tmp_path / "alone"
    shutil.copytree(folder, alone)
    (alone / "additional_chat_templates" / "tool_use.jinja").unlink()
    plain = ChatTemplate(TemplateSpec(str(alone)))
    assert not plain.named_tool_use
