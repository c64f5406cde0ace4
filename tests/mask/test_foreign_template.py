"""A ``--chat-template`` of another model family than the tokenizer's is one usage line (exit 2)
when the template loads, with nothing written (it was found only after every row was rejected
``no_end_of_turn``: exit 1); and no template of the real suite is refused with its own tokenizer
(trl's templates with their families' tokenizers, tests/families.py; the real families' own
templates given as files, tests/real_families.py), GLM-4.5's (no stop after an answer) and
gpt-oss's (harmony) among them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from draftset.cli import main
from draftset.mask.template import (
    ChatTemplate,
    TemplateSpec,
    TokenizerError,
    refuse_foreign_template,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import families as F
from conftest import llama32_tokenizer_dir, qwen3_bundled_dir, qwen3_tokenizer_dir, trl_template
from real_families import REAL_FAMILIES

ROW = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}


def _load(tokenizer: Path, template: Path, engine: str = "vllm", eot: tuple[str, ...] = ()):
    spec = TemplateSpec(
        str(tokenizer),
        chat_template=template.read_text(),
        origin=template.name,
        serving_engine=engine,
        eot_tokens=eot,
    )
    refuse_foreign_template(ChatTemplate(spec))  # what the build's load runs (describe_template)


def test_build_with_another_familys_template_is_one_line_exit_2(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text(json.dumps(ROW) + "\n")
    out = tmp_path / "out"
    args = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir())]
    args += ["--chat-template", str(trl_template("llama3_2")), "--out", str(out), "--workers", "1"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "llama3_2.jinja is for another model family than tokenizer" in err
    assert "'<|eot_id|>'" in err and "<|im_end|>" in err  # what it writes, what it stops on
    assert not out.exists()


@pytest.mark.parametrize(
    ("template", "tokenizer", "engine", "shown"),
    [
        ("llama3_2", "qwen3", "vllm", "<|start_header_id|>"),
        ("qwen3", "llama32", "vllm", "<|im_start|>"),
        ("gemma3", "qwen3", "vllm", "<start_of_turn>"),
        ("gemma", "llama32", "vllm", "<start_of_turn>"),  # the tokenizer's BOS written aside
        ("gemma4", "qwen3", "vllm", "<|turn>"),
        ("deepseekv3", "qwen3", "vllm", "<｜User｜>"),
        ("gptoss", "qwen3", "transformers", "<|start|>"),
    ],
)
def test_cross_family_pairs_are_refused(template, tokenizer, engine, shown):
    folder = qwen3_tokenizer_dir() if tokenizer == "qwen3" else llama32_tokenizer_dir()
    with pytest.raises(TokenizerError, match="another model family") as exc:
        _load(folder, trl_template(template), engine)
    assert repr(shown) in str(exc.value)


def test_an_eot_token_the_template_writes_is_a_stop(tmp_path):
    # no generation_config.json: the stop is given with --eot-token; ChatML's own tokens
    _load(qwen3_bundled_dir(), trl_template("qwen3"), eot=("<|im_end|>",))


def test_no_template_of_trls_suite_is_refused_with_its_familys_tokenizer(tmp_path):
    refused = []
    with F.tokenizers_loaded_once():
        folders: dict[str, Path] = {}
        for name in F.template_names():
            fam = F.family_of(name)
            if fam.name not in folders:
                folders[fam.name] = F.make_tokenizer(fam, tmp_path)
            # gpt-oss's under vLLM is harmony (never checked): its template as transformers
            # serves it is
            engines = ("vllm", "transformers") if name.startswith("gptoss") else ("vllm",)
            for engine in engines:
                try:
                    _load(folders[fam.name], F.templates_dir() / f"{name}.jinja", engine)
                except TokenizerError as exc:
                    if "another model family" in str(exc):
                        refused.append(f"{name} ({engine}): {exc}")
    assert not refused, refused
    assert len(F.template_names()) >= 70  # the whole suite was tried


def _own_template_file(name: str, folder: Path, root: Path) -> Path:
    fam = REAL_FAMILIES[name]
    if (f := fam.template_file()) is not None:
        return f
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    text = cfg["chat_template"]
    if isinstance(text, list):  # named templates: the default one
        text = {t["name"]: t["template"] for t in text}["default"]
    f = root / f"{name}.jinja"
    f.write_text(text)
    return f


@pytest.mark.parametrize("name", sorted(REAL_FAMILIES))
def test_no_real_family_is_refused_with_its_own_template_as_a_file(name, tmp_path):
    fam = REAL_FAMILIES[name]
    folder = fam.folder()
    template = _own_template_file(name, folder, tmp_path)
    for engine in dict.fromkeys(("vllm", "transformers", fam.serving_engine or "vllm")):
        _load(folder, template, engine)  # raises on a refusal


def test_a_template_writing_no_special_token_builds_prompts(tmp_path):
    """A plain template writes no stop (and no token of another family): prompt-only rows
    need none, so it is not refused."""
    plain = tmp_path / "plain.jinja"
    plain.write_text(
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}"
    )
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"prompt": "hi"}) + "\n")
    out = tmp_path / "out"
    args = ["build", str(src), "--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out)]
    assert main([*args, "--chat-template", str(plain), "--workers", "1"]) == 0
    assert len((out / "prompts.jsonl").read_text().splitlines()) == 1
