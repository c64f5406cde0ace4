"""Models vLLM serves without their chat template (its own encoder), named in the build's notes.

vLLM 0.33's ``--tokenizer-mode auto`` picks mistral-common for a Mistral repo (weights as
``consolidated*.safetensors`` beside ``tekken.json`` or ``tokenizer.model.v*``) and a model's
own encoder for some architectures (``DeepseekV32ForCausalLM`` -> ``deepseek_v32``, ...): the
served prompt is then not the chat template's render that draftset derives rows from. gpt-oss
(harmony) draftset renders as vLLM does; for these it says so instead of staying silent.
"""

from __future__ import annotations

import json
from pathlib import Path

from draftset.mask.serving import vllm_own_encoder


def folder(tmp: Path, files: dict[str, str]) -> Path:
    tmp.mkdir()
    for name, text in files.items():
        (tmp / name).write_text(text)
    return tmp


def test_the_modes_vllm_picks_in_auto(tmp_path):
    arch = lambda a: json.dumps({"architectures": [a]})  # noqa: E731
    mistral = folder(tmp_path / "m", {"tekken.json": "{}", "consolidated.safetensors": ""})
    assert vllm_own_encoder(mistral) == "mistral"
    v32 = folder(tmp_path / "d", {"config.json": arch("DeepseekV32ForCausalLM")})
    assert vllm_own_encoder(v32) == "deepseek_v32"
    v4 = folder(tmp_path / "d4", {"config.json": arch("DeepseekV4ForCausalLM")})
    assert vllm_own_encoder(v4) == "deepseek_v4"
    # the template: a tekken file without Mistral's weights (a converted tokenizer folder), a
    # Mistral-format repo without tekken, an architecture vLLM renders with the template
    assert vllm_own_encoder(folder(tmp_path / "t", {"tekken.json": "{}"})) is None
    assert vllm_own_encoder(folder(tmp_path / "c", {"consolidated.safetensors": ""})) is None
    assert (
        vllm_own_encoder(folder(tmp_path / "q", {"config.json": arch("Qwen3ForCausalLM")})) is None
    )
    assert vllm_own_encoder(tmp_path / "missing") is None


def test_the_build_names_the_encoder_vllm_serves_the_model_with(tmp_path, capsys):
    from conftest import qwen3_tokenizer_dir

    model = tmp_path / "model"
    model.mkdir()
    for f in qwen3_tokenizer_dir().iterdir():
        (model / f.name).symlink_to(f)
    (model / "config.json").write_text(
        json.dumps({"architectures": ["DeepseekV32ForCausalLM"], "vocab_size": 151936})
    )
    notes = _notes_of(tmp_path, model)
    assert any("deepseek_v32" in n and "--tokenizer-mode hf" in n for n in notes), notes
    plain = _notes_of(tmp_path / "p", qwen3_tokenizer_dir())
    assert not any("tokenizer-mode" in n for n in plain)


def _notes_of(tmp: Path, model: Path) -> list[str]:
    from rows import chats, write_jsonl

    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    tmp.mkdir(exist_ok=True)
    src = write_jsonl(tmp / "c.jsonl", chats(1))
    opts = BuildOptions([Source("c", src)], str(model), tmp / "out", workers=1)
    return run_build(opts).notes
