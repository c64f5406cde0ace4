"""manifest.json: what a set was built from, how, what it holds, and every file's sha256.

`verify` proves a set against this record, `--overwrite` recognises a draftset output by its
``format`` key, and `draftset run` by its ``run`` section. It is the build job's record of all
its stages (options, sources, template, selection), so it lives with the job, not the writers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from draftset.config.options import BuildOptions
from draftset.core.counters import Accounting
from draftset.core.version import package_version
from draftset.mask.ambient import reads_clock
from draftset.mask.template import TemplateInfo
from draftset.output.base import Writer, rel_name
from draftset.output.folder import MANIFEST_FORMAT
from draftset.select.mix import SelectionSpec, benchmark_files, overlay_files
from draftset.sources.read import describe_inputs, sha256_file

SIDE_FILES = ("rejects.jsonl", "prompts.jsonl")
"""Written by every build beside the rows, whatever the output format."""


def build_manifest(
    opts: BuildOptions,
    info: TemplateInfo,
    acct: Accounting,
    writer: Writer,
    written: list[Path],
    folder: Path,
    skipped: dict[str, list[dict[str, str]]] | None = None,
    *,
    engine: dict[str, Any] | None = None,
    selection: SelectionSpec | None = None,
    mixture: dict[str, Any] | None = None,
    digests: dict[Path, str] | None = None,
    generated: dict[str, list[dict[str, Any]]] | None = None,
    token_freq_pt: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest of a finished build in ``folder``: ``written`` are the files the writer and
    the vocabulary step wrote (hashed with the side files, but for those in ``digests``: the
    shards the workers hashed after writing them). ``token_freq_pt``: whether token_freq.pt
    was written, and why not (``{"written": false, "reason": "torch is not installed"}``)."""
    given = opts.given_paths or {}
    options = {
        "turns": opts.turns,
        "max_length": opts.max_length,
        "truncation": opts.truncation,
        "min_supervised_tokens": opts.min_supervised_tokens,
        "seed": opts.seed,
        "max_samples": opts.max_samples,
        "draft_vocab_size": opts.draft_vocab_size,
        "target_vocab_size": opts.target_vocab_size,
        "placeholders": list(opts.placeholders),
        "eot_tokens": list(opts.eot_tokens),
        "chat_template_path": opts.chat_template_path,
        "chat_template_path_as_given": given.get("chat_template", opts.chat_template_path),
        "render_timeout": opts.render_timeout,
    }
    known = digests or {}
    files = {rel_name(folder, p): known.get(p) or sha256_file(p) for p in written}
    for extra in SIDE_FILES:
        files[extra] = sha256_file(folder / extra)
    tool_use = info.kit.tool_use
    manifest: dict[str, Any] = {
        "draftset_version": package_version(),
        "format": MANIFEST_FORMAT,
        "output_format": writer.format,
        "inputs": [
            {
                "name": s.name,
                "path": str(s.path),
                "path_as_given": (given.get("sources") or [str(x.path) for x in opts.sources])[i],
                "format_override": s.format,
                "fields": s.fields,
                "weight": s.weight,
                "count": s.count,
                "preset": s.preset,
                "files": describe_inputs(s),
                "skipped": (skipped or {}).get(s.name, []),
                # answers files of `draftset generate`: whether it finished, its error rows
                **({"generate": runs} if (runs := (generated or {}).get(s.name)) else {}),
            }
            for i, s in enumerate(opts.sources)
        ],
        "tokenizer": {
            "path": opts.tokenizer,
            "path_as_given": given.get("tokenizer", opts.tokenizer),
            "fingerprint": info.fingerprint,
            "vocab_size": info.vocab_size,
            "tokenizer_size": info.tokenizer_size,
            "vocabulary_sample_sha256": info.vocabulary_sample_sha256,
        },
        "template": {
            "text": info.kit.template_text,
            "sha256": info.template_sha256,
            "kwargs": info.template_kwargs,
            "eot_tokens": list(info.kit.eot_tokens),
            # the instant the template's strftime_now read (mask/ambient.py); verify renders
            # with it, so a set built one day still verifies the next
            # (harmony's system message holds the date: mask/harmony.py)
            **(
                {"now": opts.template_now}
                if reads_clock(info.kit.template_text)
                or info.kit.harmony
                or (tool_use is not None and reads_clock(tool_use.template_text))
                else {}
            ),
            "serving_engine": info.kit.serving_engine,
            # a named set's 'tool_use' template: the rows with tools were rendered by it, as a
            # server renders a request with tools (docs/semantics.md, "Named templates")
            **(
                {"tool_use": {"text": tool_use.template_text, "sha256": info.tool_use_sha256}}
                if tool_use is not None
                else {}
            ),
        },
        "options": options,
        "counts": acct.to_json(),
        "totals": {
            "rows": writer.rows,
            "tokens": writer.tokens,
            "supervised_tokens": writer.supervised_tokens,
            "truncated": writer.truncated,
        },
        "files": files,
    }
    if token_freq_pt is not None:
        manifest["token_freq_pt"] = token_freq_pt
    if engine is not None:
        manifest["engine"] = engine
    if selection is not None:
        manifest["selection"] = selection.to_json()
        manifest["selection"]["decontaminate"] = benchmark_files(selection)
        if selection.overlay:
            manifest["selection"]["overlay"] = overlay_files(selection)
    if opts.run_info is not None:
        manifest["run"] = opts.run_info
    if mixture is not None:
        manifest["mixture"] = mixture
    return manifest


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    path = folder / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
