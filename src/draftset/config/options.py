"""`BuildOptions`: every option of a build, with its default, in one place.

The CLI and recipes parse into it (`draftset.api.build_options`), preflight checks and resolves
it (`config.preflight.check_build`) before any work, and each stage takes the part it needs:
`selection_spec()` for selection, `template_spec()` for the template load, `length_rules()` for
the row step. The defaults themselves live in `core.defaults`, shared with the CLI's help.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.core import defaults, rules
from draftset.mask.encode import LengthRules
from draftset.mask.render import TurnMode
from draftset.mask.serving import DEFAULT_SERVING_ENGINE
from draftset.mask.template import TemplateSpec
from draftset.select.mix import SelectionSpec
from draftset.sources.read import Source


@dataclass
class BuildOptions:
    sources: list[Source]
    tokenizer: str
    out: Path
    chat_template_path: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    eot_tokens: tuple[str, ...] = ()
    max_length: int = defaults.MAX_LENGTH
    truncation: str = defaults.TRUNCATION
    min_supervised_tokens: int = defaults.MIN_SUPERVISED_TOKENS
    turns: TurnMode = defaults.TURNS
    seed: int = defaults.SEED
    max_samples: int | None = None
    workers: int = defaults.WORKERS  # 0 = all cores
    engine: str = defaults.ENGINE  # local | ray (engine/ray.py); never changes the set's bytes
    ray_address: str | None = None  # --engine ray: None = a private local cluster
    draft_vocab_size: int | None = None
    target_vocab_size: int | None = None
    placeholders: tuple[str, ...] = rules.DEFAULT_PLACEHOLDERS
    overwrite: bool = False
    dedup: str = defaults.DEDUP  # exact | near | none
    near_dup_threshold: float = defaults.NEAR_DUP_THRESHOLD
    decontaminate: list[str] = field(default_factory=list)
    mix: dict[str, Any] | None = None
    given_paths: dict[str, Any] | None = None  # paths as the user gave them (set by preflight)
    # how messages name ``out``: the recipe's key when the recipe gave it (set by
    # `api.build_options`), None: as the caller gave it (``--out``, the API's ``out``); never
    # recorded in the manifest
    out_named: str | None = None
    # `draftset run`: answer / error files that replace selected rows by id (overlay.py), and
    # what the run did, recorded in the manifest's `run` section
    overlay: list[str] = field(default_factory=list)
    run_info: dict[str, Any] | None = None
    render_timeout: float = defaults.RENDER_TIMEOUT  # seconds to render one row; 0 = no bound
    output_format: str = defaults.OUTPUT_FORMAT  # a key of draftset.output.FORMATS
    # the instant a template's `strftime_now` reads (mask/ambient.py): set once per build by
    # preflight, recorded in the manifest; None until then
    template_now: str | None = None
    # tools prepared as this engine prepares them before rendering (mask/serving.py)
    serving_engine: str = DEFAULT_SERVING_ENGINE

    def selection_spec(self) -> SelectionSpec:
        return SelectionSpec(
            sources=self.sources,
            max_samples=self.max_samples,
            seed=self.seed,
            dedup=self.dedup,
            near_dup_threshold=self.near_dup_threshold,
            decontaminate=list(self.decontaminate),
            mix=self.mix,
            template_kwargs=dict(self.template_kwargs),
            overlay=list(self.overlay),
            turns=self.turns,
            placeholders=self.placeholders,
            answered=(self.run_info or {}).get("regenerate"),
        )

    def template_spec(self) -> TemplateSpec:
        text = None
        if self.chat_template_path:
            text = Path(self.chat_template_path).read_text(encoding="utf-8")
        return TemplateSpec(
            self.tokenizer,
            text,
            dict(self.template_kwargs),
            self.eot_tokens,
            now=self.template_now,
            serving_engine=self.serving_engine,
            render_timeout=self.render_timeout,
            origin=self.chat_template_path,
        )

    def length_rules(self) -> LengthRules:
        return LengthRules(self.max_length, self.truncation, self.min_supervised_tokens)  # type: ignore[arg-type]
