"""The build job: read → normalize → render & mask → encode → write → account.

The main process reads and normalizes (cheap, sequential, deterministic) and hands batches to
worker processes that render, mask and encode (the expensive part). Results come back in
submission order through a bounded window, so memory stays flat and the output is identical for
any worker count. Workers are started with ``spawn``: the Rust tokenizer's thread pool does not
survive ``fork``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from draftset import __version__, reasons
from draftset.account import Accounting
from draftset.encode import (
    EncodedRow,
    LengthRules,
    apply_length_rules,
    encode_plans,
    encode_pretokenized,
)
from draftset.mix import (
    SelectionSpec,
    benchmark_files,
    iter_selected_items,
    plan_selection,
    selection_total,
)
from draftset.read import Source, describe_inputs, sha256_file
from draftset.records import Conversation, Normalized, PreTokenized, PromptOnly, Reject
from draftset.render import ConversationPlan, TurnMode, plan_conversation
from draftset.template import (
    ChatTemplate,
    Renderer,
    RenderKit,
    TemplateInfo,
    TemplateSpec,
    describe_template,
    load_template_info_isolated,
)
from draftset.write import (
    DatasetWriter,
    draft_vocab,
    finalize_output,
    prepare_output,
    write_token_freq,
)

BATCH_ROWS = 64


@dataclass
class BuildOptions:
    sources: list[Source]
    tokenizer: str
    out: Path
    chat_template_path: str | None = None
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    eot_tokens: tuple[str, ...] = ()
    max_length: int = 4096
    truncation: str = "drop"
    min_supervised_tokens: int = 1
    turns: TurnMode = "all"
    seed: int = 0
    max_samples: int | None = None
    workers: int = 0  # 0 = all cores
    draft_vocab_size: int | None = None
    target_vocab_size: int | None = None
    placeholders: tuple[str, ...] = reasons.DEFAULT_PLACEHOLDERS
    overwrite: bool = False
    dedup: str = "exact"  # exact | near | none
    near_dup_threshold: float = 0.8
    decontaminate: list[str] = field(default_factory=list)
    mix: dict[str, Any] | None = None

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
        )

    def template_spec(self) -> TemplateSpec:
        text = None
        if self.chat_template_path:
            text = Path(self.chat_template_path).read_text(encoding="utf-8")
        return TemplateSpec(self.tokenizer, text, dict(self.template_kwargs), self.eot_tokens)

    def length_rules(self) -> LengthRules:
        return LengthRules(self.max_length, self.truncation, self.min_supervised_tokens)  # type: ignore[arg-type]


@dataclass
class BuildResult:
    out: Path
    accounting: Accounting
    manifest: dict[str, Any]
    notes: list[str]
    seconds: float


# --- the per-process render/mask/encode step --------------------------------------------------
@dataclass(slots=True)
class ItemResult:
    """Everything the main process needs to know about one input row."""

    item: Normalized
    rows: list[EncodedRow] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)
    plan_stats: ConversationPlan | None = None


class Processor:
    """Render & mask & encode; one per process, built from picklable settings."""

    def __init__(
        self,
        spec: TemplateSpec,
        kit: RenderKit | None,
        rules: LengthRules,
        mode: TurnMode,
        placeholders: tuple[str, ...],
        vocab_size: int,
        template: Renderer | None = None,
    ) -> None:
        # workers rebuild the main process's renderer from its kit (no AutoTokenizer import);
        # only when transformers' internals moved do they load the full tokenizer themselves
        self.template = template or (kit and Renderer.from_kit(kit)) or ChatTemplate(spec)
        self.rules = rules
        self.mode = mode
        self.placeholders = placeholders
        self.vocab_size = vocab_size

    def process(self, batch: list[Normalized]) -> list[ItemResult]:
        results = [ItemResult(item) for item in batch]
        plans = []
        owners = []
        for res in results:
            item = res.item
            if isinstance(item, Conversation):
                try:
                    cplan = plan_conversation(self.template, item, self.mode, self.placeholders)
                except Exception as exc:  # never let one row end a long run: reject it, loudly
                    res.rejects.append(_internal_error(item, exc))
                    continue
                res.rejects.extend(cplan.rejects)
                res.plan_stats = ConversationPlan(
                    context_turns=cplan.context_turns,
                    trailing_turns_trimmed=cplan.trailing_turns_trimmed,
                    server_ids_used=cplan.server_ids_used,
                    server_ids_mismatch=cplan.server_ids_mismatch,
                    generation_tags_agree=cplan.generation_tags_agree,
                    generation_tags_disagree=cplan.generation_tags_disagree,
                )
                for rp in cplan.rows:
                    plans.append(rp)
                    owners.append(res)
            elif isinstance(item, PreTokenized):
                out = encode_pretokenized(item, self.rules, self.vocab_size)
                (res.rows if isinstance(out, EncodedRow) else res.rejects).append(out)  # type: ignore[arg-type]
        for rp, (ids, mask), res in zip(
            plans, encode_plans(self.template.backend, plans), owners, strict=True
        ):
            out = apply_length_rules(rp.source, rp.row, rp.id, ids, mask, self.rules)
            if isinstance(out, EncodedRow):
                res.rows.append(out)
                assert res.plan_stats is not None
                res.plan_stats.rows.append(
                    rp
                )  # keep supervised-turn counts; segments dropped below
            else:
                res.rejects.append(out)
        for res in results:  # texts are big and the main process does not need them back
            if isinstance(res.item, Conversation):
                res.item = Conversation(res.item.id, res.item.source, res.item.row, [])
            if res.plan_stats is not None:
                for rp in res.plan_stats.rows:
                    rp.segments, rp.server_ids, rp.turn_of_segment = [], {}, {}
        return results


def _internal_error(item: Conversation, exc: Exception) -> Reject:
    where = traceback.extract_tb(exc.__traceback__)[-1]
    return Reject(
        item.source,
        item.row,
        item.id,
        reasons.INTERNAL_ERROR,
        f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno};"
        " please report it)",
    )


_WORKER: Processor | None = None


def _init_worker(*args: Any) -> None:
    global _WORKER
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    _WORKER = Processor(*args)


def _work(batch: list[Normalized]) -> list[ItemResult]:
    assert _WORKER is not None
    return _WORKER.process(batch)


# --- sampling -----------------------------------------------------------------------------------
def _batched(items: Iterator[Normalized], size: int) -> Iterator[list[Normalized]]:
    batch: list[Normalized] = []
    for it in items:
        batch.append(it)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _ping() -> bool:
    return _WORKER is not None


@contextmanager
def _executor(processor_args: tuple, workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """Worker processes, started at once so they load while the main process reads sources."""
    if workers <= 1:
        yield None
        return
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker, initargs=processor_args
    ) as ex:
        for _ in range(workers):  # each submit starts one more process (spawn is lazy)
            ex.submit(_ping)
        yield ex


def _ordered_results(
    batches: Iterator[list[Normalized]],
    executor: ProcessPoolExecutor | None,
    workers: int,
    inline: Callable[[], Processor],
) -> Iterator[list[ItemResult]]:
    """Results in submission order, at most a few batches in flight."""
    if executor is None:  # in-process, reusing the template the main process already loaded
        proc = inline()
        for b in batches:
            yield proc.process(b)
        return
    window: deque = deque()
    for b in batches:
        window.append(executor.submit(_work, b))
        if len(window) >= 3 * workers:
            yield window.popleft().result()
    while window:
        yield window.popleft().result()


class _JsonlSink:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.f = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.lines = 0

    def write(self, obj: dict[str, Any]) -> None:
        self.f.write(json.dumps(obj, ensure_ascii=False) + "\n")
        self.lines += 1

    def close(self) -> None:
        self.f.close()


def run_build(
    opts: BuildOptions,
    on_progress: Callable[[int, int], None] | None = None,
) -> BuildResult:
    """Run the whole job; raises on usage errors, returns counts (invariant already checked)."""
    t0 = time.monotonic()
    spec = opts.template_spec()
    workers = opts.workers or os.cpu_count() or 1
    template: Renderer | None = None
    if workers > 1:
        # load once in a child process (fail fast, fingerprint, vocab size): the main process
        # neither renders nor imports torch through AutoTokenizer; workers render from the kit
        info = load_template_info_isolated(spec, opts.target_vocab_size)
    else:
        template = ChatTemplate(spec)
        info = describe_template(template, opts.target_vocab_size)
    args = (spec, info.kit, opts.length_rules(), opts.turns, opts.placeholders, info.vocab_size)
    with _executor(args, workers) as executor:
        return _run(opts, template, info, args, executor, workers, on_progress, t0)


def _run(
    opts: BuildOptions,
    template: Renderer | None,
    info: TemplateInfo,
    args: tuple,
    executor: ProcessPoolExecutor | None,
    workers: int,
    on_progress: Callable[[int, int], None] | None,
    t0: float,
) -> BuildResult:
    vocab_size = info.vocab_size
    names = [s.name for s in opts.sources]
    acct = Accounting(names)
    selection = opts.selection_spec()
    plan = None if selection.mix else plan_selection(opts.sources, opts.max_samples, opts.seed)
    total = selection_total(plan) if plan else 0
    mixture: dict[str, Any] = {}
    tmp = prepare_output(opts.out, opts.overwrite)
    notes: list[str] = []
    try:
        writer = DatasetWriter(tmp, vocab_size)
        rejects = _JsonlSink(tmp / "rejects.jsonl")
        prompts = _JsonlSink(tmp / "prompts.jsonl")
        done = 0
        items = iter_selected_items(selection, acct, mixture, plan)
        batches = _batched(items, BATCH_ROWS)
        inline = lambda: Processor(*args, template=template)  # noqa: E731
        for results in _ordered_results(batches, executor, workers, inline):
            for res in results:
                _account(res, acct, writer, rejects, prompts)
            done += len(results)
            if on_progress:
                on_progress(done, total or done)
        shards = writer.close()
        rejects.close()
        prompts.close()
        note = write_token_freq(tmp, writer.token_freq)
        if note:
            notes.append(note)
        vocab_files: list[Path] = [tmp / "token_freq.npy"]
        if (tmp / "token_freq.pt").exists():
            vocab_files.append(tmp / "token_freq.pt")
        if opts.draft_vocab_size:
            d2t, t2d = draft_vocab(writer.token_freq, opts.draft_vocab_size, vocab_size)
            np.save(tmp / f"d2t-{opts.draft_vocab_size}.npy", d2t)
            np.save(tmp / f"t2d-{opts.draft_vocab_size}.npy", t2d)
            vocab_files += [
                tmp / f"d2t-{opts.draft_vocab_size}.npy",
                tmp / f"t2d-{opts.draft_vocab_size}.npy",
            ]
        errors = acct.balance_errors()
        if errors:
            raise AccountingError("accounting does not balance: " + "; ".join(errors))
        manifest = _manifest(opts, info, acct, writer, shards, vocab_files, tmp)
        manifest["selection"] = selection.to_json()
        manifest["selection"]["decontaminate"] = benchmark_files(selection)
        manifest["mixture"] = mixture
        (tmp / "manifest.json").write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        finalize_output(tmp, opts.out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return BuildResult(opts.out, acct, manifest, notes, time.monotonic() - t0)


class AccountingError(Exception):
    """read != written + rejected + needs_generation: a bug, never a success."""


def _account(
    res: ItemResult,
    acct: Accounting,
    writer: DatasetWriter,
    rejects: _JsonlSink,
    prompts: _JsonlSink,
) -> None:
    item = res.item
    counts = acct[item.source]
    if isinstance(item, Reject):
        counts.rejected[item.reason] += 1
        counts.row_rejects[item.reason] += 1
        rejects.write(item.to_json())
        return
    if isinstance(item, PromptOnly):
        counts.needs_generation += 1
        line: dict[str, Any] = {"id": item.id, "messages": item.messages}
        if item.tools:
            line["tools"] = item.tools
        line["metadata"] = {"source": item.source, "row": item.row}
        prompts.write(line)
        return
    for r in res.rejects:
        counts.row_rejects[r.reason] += 1
        rejects.write(r.to_json())
    if res.rows:
        counts.written += 1
        counts.rows_out += len(res.rows)
        writer.write(res.rows)
        for r in res.rows:
            counts.tokens += int(r.input_ids.shape[0])
            counts.supervised_tokens += int(r.loss_mask.sum(dtype=np.int64))
            counts.truncated += int(r.truncated)
    else:
        counts.rejected[res.rejects[0].reason] += 1
    if res.plan_stats is not None:
        counts.context_turns.update(res.plan_stats.context_turns)
        counts.trailing_turns_trimmed += res.plan_stats.trailing_turns_trimmed
        counts.supervised_turns += sum(rp.supervised_turns for rp in res.plan_stats.rows)
        counts.server_ids_used += res.plan_stats.server_ids_used
        counts.server_ids_mismatch += res.plan_stats.server_ids_mismatch
        counts.generation_tags_agree += res.plan_stats.generation_tags_agree
        counts.generation_tags_disagree += res.plan_stats.generation_tags_disagree


def _manifest(
    opts: BuildOptions,
    info: TemplateInfo,
    acct: Accounting,
    writer: DatasetWriter,
    shards: list[Path],
    vocab_files: list[Path],
    folder: Path,
) -> dict[str, Any]:
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
    }
    files = {p.name: sha256_file(p) for p in [*shards, *vocab_files]}
    for extra in ("rejects.jsonl", "prompts.jsonl", "dataset_info.json", "state.json"):
        files[extra] = sha256_file(folder / extra)
    return {
        "draftset_version": __version__,
        "format": "draftset/1",
        "inputs": [
            {
                "name": s.name,
                "path": str(s.path),
                "format_override": s.format,
                "fields": s.fields,
                "weight": s.weight,
                "count": s.count,
                "preset": s.preset,
                "files": describe_inputs(s),
            }
            for s in opts.sources
        ],
        "tokenizer": {
            "path": opts.tokenizer,
            "fingerprint": info.fingerprint,
            "vocab_size": info.vocab_size,
            "tokenizer_size": info.tokenizer_size,
        },
        "template": {
            "text": info.kit.template_text,
            "sha256": info.template_sha256,
            "kwargs": info.template_kwargs,
            "eot_tokens": list(info.kit.eot_tokens),
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
