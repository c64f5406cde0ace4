"""A tokenizer whose own chat template is a named set (``default`` + ``tool_use``: Hermes-2-Pro,
Hermes-3, Command-R): the server renders a request with tools by ``tool_use``.

vLLM 0.33 (`renderers/hf.py` `resolve_chat_template`: ``tokenizer.get_chat_template(None,
tools=tools)``) and transformers' own `apply_chat_template` pick ``tool_use`` when the request
has tools and ``default`` otherwise. Before session 31 draftset rendered a whole set by the
``default``: a row with tools held a prompt without the tools block, the server's held it
(measured against `vllm launch render` 0.33.0: "context differs from the server's prompt at
token 1", row 15 tokens, server 153); sessions 31-32 rejected such rows `template_error`. Now
one set holds both: each row is rendered by the template its request is served by, the
manifest records both, and verify works out each row's template on its own (transformers'
``get_chat_template``). Against a real vLLM render server: tests/checks/test_render_server.py
(``hermes3``).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

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
def test_a_row_with_tools_is_rendered_by_tool_use_beside_rows_by_default(
    named: Path, mode: str, tmp_path: Path
) -> None:
    """One set holds both: the row with tools rendered by ``tool_use`` (its tools block), the
    row without by ``default``; the manifest records both templates; verify passes it."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "set"
    built = api.build(
        sources=[str(src)], tokenizer=str(named), turns=mode, out=str(out), progress=False
    )
    assert built.ok
    assert not (out / "rejects.jsonl").read_text().strip()
    folder = open_output(out)
    ids = [i.partition("#")[0] for i in folder.ids()]
    assert sorted(ids) == ["no_tools", "tools_plain_answer"]
    t = ChatTemplate(TemplateSpec(str(named)))
    texts = {ids[i]: t.decode(list(folder.row(i)["input_ids"])) for i in range(len(ids))}
    assert "# Tools" in texts["tools_plain_answer"] and "get_weather" in texts["tools_plain_answer"]
    assert texts["no_tools"].startswith("<|im_start|>user\nWhat is 3+3?<|im_end|>\n")
    template = json.loads((out / "manifest.json").read_text())["template"]
    tool_use = trl_template("qwen3").read_text()
    assert template["text"] == PLAIN
    assert template["tool_use"] == {
        "text": tool_use,
        "sha256": hashlib.sha256(tool_use.encode()).hexdigest(),
    }
    # the row with tools, no reasoning: Qwen3's tool_use trains an empty think block (counted
    # by its own probe; the default's said none), the plain default none
    counts = json.loads((out / "manifest.json").read_text())["counts"]["per_source"]["rows"]
    assert counts["empty_think_rows"] == 1
    result = api.verify(out, speculators=False)
    assert result.ok, [c.summary for c in result.checks if c.failed]
    summary = next(c for c in result.checks if c.name == "template").summary
    assert "'tool_use'" in summary


def test_a_worker_renderer_renders_tools_by_tool_use_too(named: Path) -> None:
    t = ChatTemplate(TemplateSpec(str(named)))
    worker = Renderer.from_kit(t.kit())
    assert worker is not None and worker.tool_use is not None
    messages = ROWS[0]["messages"][:1]
    for r in (t, worker):
        assert r.for_tools(None) is r
        served = r.for_tools([WEATHER_TOOL])
        assert served is r.tool_use
        assert "# Tools" in served.render(messages, [WEATHER_TOOL], True)
        assert r.render(messages, None, True) == (
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
        )
        with pytest.raises(ValueError, match="'tool_use'"):  # the default never renders tools
            r.render(messages, [WEATHER_TOOL], True)


def test_tools_given_is_vllms_rule(named: Path, tmp_path: Path) -> None:
    """ "Tools given" is transformers' ``tools is not None``, which vLLM passes a request's
    ``tools`` as: a row's ``tools: []``, ``null`` or ``""`` is read as no tools, and no request
    draftset sends (generate, verify --render-server) holds an empty list: ``default``."""
    t = ChatTemplate(TemplateSpec(str(named)))
    assert t.tokenizer.get_chat_template(None, tools=[]) == t.tool_use.template_text
    rows = [
        {
            "id": f"empty_{k}",
            "tools": v,
            "messages": [
                {"role": "user", "content": f"What is {n}+{n}?"},
                {"role": "assistant", "content": f"{2 * n}."},
            ],
        }
        for n, (k, v) in enumerate(
            (("list", []), ("null", None), ("text", ""), ("text_list", "[]"))
        )
    ]
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "set"
    assert api.build(sources=[str(src)], tokenizer=str(named), out=str(out), progress=False).ok
    folder = open_output(out)
    assert len(folder.ids()) == 4
    for i in range(4):
        assert "# Tools" not in t.decode(list(folder.row(i)["input_ids"]))
    assert api.verify(out, speculators=False).ok


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
    tool_use = trl_template("qwen3").read_text()
    digest = hashlib.sha256(tool_use.encode()).hexdigest()
    manifest["template"]["tool_use"] = {"text": tool_use, "sha256": digest}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    result = api.verify(out, speculators=False)
    failed = {c.name for c in result.checks if c.failed}
    assert not result.ok
    assert "template" not in failed, "the text is the tokenizer's own default: not the cause"
    assert failed & {"mask_fidelity", "row_identity", "accounting"}, failed
    # and without the record, the template check says the set predates both templates
    del manifest["template"]["tool_use"]
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    template = next(c for c in api.verify(out, speculators=False).checks if c.name == "template")
    assert template.failed and "'tool_use' template is not in the manifest" in template.summary


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
    assert t.tool_use is not None
    assert "# Tools" in t.for_tools([WEATHER_TOOL]).render(
        ROWS[0]["messages"][:1], [{**WEATHER_TOOL}], True
    )
    # one template: rows with tools are rendered by it, as the server does (another folder:
    # transformers may keep a folder's template listing for the process once it has read it)
    alone = tmp_path / "alone"
    shutil.copytree(folder, alone)
    (alone / "additional_chat_templates" / "tool_use.jinja").unlink()
    plain = ChatTemplate(TemplateSpec(str(alone)))
    assert plain.tool_use is None


def test_a_kwarg_only_tool_use_reads_is_not_noted_as_unread(
    named: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rows with tools are rendered by ``tool_use``: a ``--template-kwargs`` key it reads
    (Qwen3's ``enable_thinking``, which the plain ``default`` never reads) changes them, and
    was noted "changes nothing" when only the ``default``'s variables were asked."""
    from draftset.cli import main

    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    argv = ["build", str(src), "--tokenizer", str(named), "--out", str(tmp_path / "o")]
    argv += ["--workers", "1", "--no-progress"]
    assert main([*argv, "--template-kwargs", '{"enable_thinking": false}']) == 0
    assert "reads no variable" not in capsys.readouterr().out
    assert main([*argv, "--overwrite", "--template-kwargs", '{"enable_thinkng": false}']) == 0
    assert "reads no variable" in " ".join(capsys.readouterr().out.split())


def test_verify_fails_a_set_that_rendered_a_row_without_tools_by_tool_use(
    named: Path, tmp_path: Path
) -> None:
    """The other way round: every row rendered by ``tool_use`` (built with it as
    --chat-template), the manifest then saying the tokenizer's own named set: the row without
    tools is not what a server renders (its ``default``), and verify, which asks transformers
    which template serves each row, fails it; the row with tools passes."""
    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "set"
    api.build(
        sources=[str(src)],
        tokenizer=str(named),
        chat_template=str(trl_template("qwen3")),
        out=str(out),
        progress=False,
    )
    manifest = json.loads((out / "manifest.json").read_text())
    tool_use = manifest["template"]
    manifest["template"] = {
        **tool_use,
        "text": PLAIN,
        "sha256": hashlib.sha256(PLAIN.encode()).hexdigest(),
        "tool_use": {"text": tool_use["text"], "sha256": tool_use["sha256"]},
    }
    manifest["options"]["chat_template_path"] = None
    manifest["options"]["chat_template_path_as_given"] = None
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    result = api.verify(out, speculators=False)
    mask = next(c for c in result.checks if c.name == "mask_fidelity")
    assert not result.ok
    assert next(c for c in result.checks if c.name == "template").status == "pass"
    assert mask.failed and set(mask.examples) == {"no_tools"}, (mask.summary, mask.examples)


def test_a_named_sets_kit_holds_the_tokenizer_once(named: Path) -> None:
    """Both kits of a named set carry one tokenizer text (pickled to each worker once, ~11 MB
    for Qwen3's, not twice), and a worker builds one tokenizer for both renderers."""
    import pickle

    t = ChatTemplate(TemplateSpec(str(named)))
    kit = t.kit()
    assert kit.tool_use is not None and kit.tool_use.tokenizer_json is kit.tokenizer_json
    assert len(pickle.dumps(kit)) < 1.5 * len(kit.tokenizer_json.encode())
    worker = Renderer.from_kit(kit)
    assert worker is not None and worker.tool_use is not None
    assert worker.tool_use.backend is worker.backend


def test_run_asks_the_empty_think_probe_of_the_template_a_row_is_served_by(
    named: Path, tmp_path: Path
) -> None:
    """`run` (``regenerate: missing_reasoning``) re-answers a row without reasoning when its
    template trains an empty think block: a row with tools is served by ``tool_use`` (Qwen3's,
    which does), the one without by the plain ``default`` (which does not). Only the default
    was asked: the row with tools was never sent. verify re-derives the same choice."""
    from draftset.api import run_options
    from draftset.checks.mask import load_template, served_template
    from draftset.checks.records import RowStepCounts, _run_sends
    from draftset.core.records import Conversation
    from draftset.pipeline.run_select import select_rows

    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        json.dumps(
            {
                "tokenizer": str(named),
                "out": str(tmp_path / "out"),
                "sources": [{"path": str(src)}],
                "generate": {
                    "endpoints": ["http://127.0.0.1:9"],
                    "thinking": "off",
                    "regenerate": "missing_reasoning",
                },
            }
        )
    )
    work = tmp_path / "work"
    work.mkdir()
    select_rows(run_options(recipe), work, print)
    queued = [json.loads(x)["id"] for x in (work / "queue.jsonl").read_text().splitlines()]
    assert queued == ["tools_plain_answer"]
    # verify's own rule, asked of the source rows with the set's manifest
    manifest = {"tokenizer": {"path": str(named)}, "template": {"text": PLAIN}, "options": {}}
    tmpl = load_template(manifest, None)
    recount = RowStepCounts(tmpl, manifest, (), None)
    out = SimpleNamespace(options={}, manifest=manifest)
    sent = []
    for r in ROWS:
        row = Conversation(r["id"], "rows", 0, r["messages"], r.get("tools"))
        probe = recount.probe_of(served_template(tmpl, row.tools))
        if _run_sends(out, row, "missing_reasoning", probe):  # type: ignore[arg-type]
            sent.append(row.id)
    assert sent == queued


def test_verify_of_a_run_set_asks_the_probe_of_the_rows_template(
    named: Path, tmp_path: Path
) -> None:
    """verify re-derives which rows `run` sends by the same rule: the row with tools, answered
    again under ``regenerate: missing_reasoning`` (its ``tool_use`` trains an empty think
    block), passes; verify asked the ``default``'s probe and said "a row run does not send"."""
    from draftset.checks.verify import run_verify
    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    src = tmp_path / "rows.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    work = tmp_path / "work"
    work.mkdir()
    answer = {
        **ROWS[0],
        "messages": [ROWS[0]["messages"][0], {"role": "assistant", "content": "Four."}],
        "metadata": {"model": "m", "finish_reason": "stop", "answers": 1},
    }
    (work / "answers.jsonl").write_text(json.dumps(answer) + "\n")
    (work / "answers.errors.jsonl").write_text("")
    (work / "too_long.jsonl").write_text("")
    opts = BuildOptions(
        [Source("rows", src)],
        str(named),
        tmp_path / "out",
        workers=1,
        max_length=512,
        overlay=[
            str(work / n) for n in ("answers.jsonl", "answers.errors.jsonl", "too_long.jsonl")
        ],
        run_info={"work": str(work), "model": "m", "regenerate": "missing_reasoning"},
    )
    out = run_build(opts).out
    results = run_verify(out, speculators=False, record=False)
    failed = {r.name: r.details.get("messages") for r in results if r.failed}
    failed.pop("drafter_fitness", None)
    assert failed == {}
