"""The source-level checks of `verify`: sources, tokenizer, template, row identity, mask fidelity,
leakage and truncation.

Mask fidelity is re-derived *without* build's render/encode code path (no `plan_conversation`,
`derive_turn` or `encode_plans`). Build computes character spans and tokenizes segments; verify
goes the other way: it decodes the row's tokens, splits them into maximal supervised runs, and
compares each decoded run, and its character offset in the decoded row, with the generations it
renders itself from the source row (P = render(turns<j, generation prompt), F = render(turns<=j),
G = F after P up to and including the first end-of-turn token). Reading and normalizing sources
(and the selection, ids and filters of `mix.Selection`) are shared with build: that
is reading, not masking.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from draftset.core import defaults, reasons
from draftset.core.digests import vocabulary_sample_sha256
from draftset.core.records import Conversation, Normalized, PreTokenized, PromptOnly, Reject
from draftset.core.words import plural
from draftset.mask.ambient import clock_kwargs, valid_now
from draftset.mask.hygiene import (
    EmptyThinkProbe,
    all_placeholder_answers,
    lacks_reasoning,
    row_kwargs_key,
)
from draftset.mask.limits import RenderLimit, bounded_row
from draftset.mask.reads import served_reads
from draftset.mask.render import in_vocabulary, server_completion_ids, server_prompt_ids
from draftset.mask.serving import SERVING_ENGINES
from draftset.mask.template import (
    ChatTemplate,
    TemplateSpec,
    TokenizerError,
    missing_stops_message,
    model_stop_ids,
    probe_shape,
)
from draftset.output.readback import (
    CheckResult,
    OutputSet,
    Problems,
    iter_batches,
    read_jsonl,
    supervised_runs,
)
from draftset.select import mix  # reading, ids and filters only; never build's masking code
from draftset.sources.read import (
    HUB_PREFIX,
    Source,
    SourceError,
    describe_inputs,
    scan_source,
    sha256_file,
)

FULL_CHECK_MAX_ROWS = 20_000
"""Sets up to this many rows get every row mask-checked by default; bigger ones a seeded sample."""

DEFAULT_SAMPLE = 2_000
"""Rows mask-checked by default on sets above FULL_CHECK_MAX_ROWS."""

_TEMPLATES: dict[tuple[str, str, str, tuple[str, ...], str | None, str], ChatTemplate] = {}
_THINK_TAGS = re.compile(r"</?think>")


# --- template & tokenizer ------------------------------------------------------------------------
def load_template(manifest: dict[str, Any], tokenizer: str | None) -> ChatTemplate:
    """The renderer exactly as the manifest recorded it (cached per process: loading costs ~1 s)."""
    t = manifest.get("template") or {}
    tok = tokenizer or str((manifest.get("tokenizer") or {}).get("path") or "")
    if not tok:
        raise TokenizerError("the manifest names no tokenizer; pass --tokenizer")
    text = str(t.get("text") or "")
    kwargs = dict(t.get("kwargs") or {})
    # only the user's own --eot-token extras: verify derives the stop tokens itself
    extra = tuple((manifest.get("options") or {}).get("eot_tokens") or ())
    # the instant the build's template read from the clock: rendered with it, any day
    now = valid_now(t.get("now"))
    # how build prepared tools; a set from before the field rendered them as given
    engine = str(t.get("serving_engine") or "transformers")
    if engine not in SERVING_ENGINES:
        raise TokenizerError(f"the manifest names an unknown serving_engine {engine!r}")
    key = (tok, text, json.dumps(kwargs, sort_keys=True), extra, now, engine)
    if key not in _TEMPLATES:
        tmpl = ChatTemplate(
            TemplateSpec(tok, text or None, kwargs, extra, now=now, serving_engine=engine)
        )
        _TEMPLATES[key] = tmpl
        tmpl.verify_stops = derive_stop_tokens(tmpl, extra)  # type: ignore[attr-defined]
        _shape(tmpl)  # probed (and the public render path compiled) outside any row's bound
    return _TEMPLATES[key]


# --- stop tokens and message shape, derived here (not from build's list) -------------------------


def derive_stop_tokens(tmpl: ChatTemplate, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The tokens a server stops on, from the tokenizer's own files: ``generation_config.json``
    ``eos_token_id`` (int or list) and the tokenizer's EOS, plus the build's ``--eot-token``
    extras. Never probed: without the file and without extras this is a usage error."""
    tok = tmpl.tokenizer
    found: list[str] = list(extra)

    def add(t: Any) -> None:
        if isinstance(t, str) and t and t not in found:
            found.append(t)

    # the file is read (and its ids checked) as build reads it; what follows from it is derived here
    ids = model_stop_ids(tmpl.spec.tokenizer, tmpl.path, len(tok))
    if ids is None and not extra:
        raise TokenizerError(missing_stops_message(tmpl.spec.tokenizer))
    for i in ids or ():
        add(tok.convert_ids_to_tokens(i))
    add(tok.eos_token)
    return tuple(found)


def _stops(tmpl: ChatTemplate) -> tuple[str, ...]:
    stops = getattr(tmpl, "verify_stops", None)
    if stops is None:
        stops = tmpl.verify_stops = derive_stop_tokens(tmpl)  # type: ignore[attr-defined]
    return stops


def _stop_ids(tmpl: ChatTemplate) -> frozenset[int]:
    """`_stops` as ids, worked out once per template (asked for every supervised run)."""
    ids = getattr(tmpl, "verify_stop_ids", None)
    if ids is None:
        ids = frozenset(int(tmpl.tokenizer.convert_tokens_to_ids(t)) for t in _stops(tmpl))
        tmpl.verify_stop_ids = ids  # type: ignore[attr-defined]
    return ids


def _shape(tmpl: ChatTemplate) -> tuple[bool, bool, bool, bool]:
    """(content as parts, renders reasoning, arguments as text, renders lists of parts): the
    per-template probes, through the public path."""
    shape = getattr(tmpl, "verify_shape", None)
    if shape is None:
        with tmpl.bounded_probes():
            shape = probe_shape(
                tmpl.render_reference, tmpl.template_text, tmpl.serving_engine, tmpl.harmony
            )
        tmpl.verify_shape = shape  # type: ignore[attr-defined]
    return shape


def check_tokenizer(out: OutputSet, tmpl: ChatTemplate) -> CheckResult:
    """The tokenizer's fingerprint and vocabulary size equal the manifest's."""
    p = Problems()
    rec = out.manifest.get("tokenizer") or {}
    fp = tmpl.fingerprint()
    if rec.get("fingerprint") != fp:
        p.add(
            "tokenizer fingerprint differs from the manifest",
            "tokenizer",
            f"{fp[:16]} != {str(rec.get('fingerprint'))[:16]}",
        )
    vocab = tmpl.vocab_size(out.options.get("target_vocab_size"))
    if rec.get("vocab_size") != vocab:
        p.add(
            "vocabulary size differs from the manifest",
            "tokenizer",
            f"{vocab} != {rec.get('vocab_size')}",
        )
    # what `show` and `report` accept a --tokenizer by (a set built before them has neither)
    for key, have in (
        ("tokenizer_size", len(tmpl.tokenizer)),
        ("vocabulary_sample_sha256", vocabulary_sample_sha256(tmpl.backend)),
    ):
        if rec.get(key) is not None and rec[key] != have:
            p.add(
                f"{key} differs from the manifest",
                "tokenizer",
                f"tokenizer: {key}: manifest {rec[key]} != the tokenizer's {have}",
            )
    recorded = set((out.manifest.get("template") or {}).get("eot_tokens") or ())
    if recorded and recorded != set(_stops(tmpl)):
        p.add(
            "the manifest's end-of-turn tokens differ from the tokenizer files' stop tokens",
            "tokenizer",
            f"{sorted(recorded)} != {sorted(_stops(tmpl))}",
        )
    return p.result(
        "tokenizer", f"fingerprint {fp[:16]}… and vocab size {vocab} match the manifest"
    )


def check_template(out: OutputSet, tmpl: ChatTemplate) -> CheckResult:
    """The manifest's template text hashes to its recorded sha256, and equals its origin
    (the --chat-template file when still readable, else the tokenizer's own template)."""
    p = Problems()
    t = out.manifest.get("template") or {}
    text = str(t.get("text") or "")
    digest = hashlib.sha256(text.encode()).hexdigest()
    if t.get("sha256") != digest:
        p.add("template text does not hash to the manifest's template sha256", "template")
    origin = "the manifest's text"
    path = out.options.get("chat_template_path")
    if path:
        f = Path(path)
        if f.is_file():
            origin = str(f)
            if hashlib.sha256(f.read_text(encoding="utf-8").encode()).hexdigest() != t.get(
                "sha256"
            ):
                p.add(f"--chat-template file {path} changed since the build", "template")
    else:
        own = getattr(tmpl.tokenizer, "chat_template", None)
        if isinstance(own, dict):
            own = own.get("default")
        if own:
            origin = "the tokenizer's own template"
            if hashlib.sha256(str(own).encode()).hexdigest() != t.get("sha256"):
                p.add("the tokenizer's own chat template differs from the manifest's", "template")
    return p.result("template", f"sha256 {str(t.get('sha256'))[:16]}… matches {origin}")


# --- sources -------------------------------------------------------------------------------------
def manifest_sources(out: OutputSet) -> list[Source]:
    return [
        Source(
            name=str(i["name"]),
            path=Path(i["path"]),
            format=i.get("format_override"),
            fields=i.get("fields"),
            weight=i.get("weight"),
            count=i.get("count"),
            preset=i.get("preset"),
        )
        for i in out.manifest.get("inputs") or []
    ]


def check_sources(out: OutputSet) -> CheckResult:
    """Every input file still exists with the bytes (sha256) and file list the manifest recorded."""
    p = Problems()
    n_files = 0
    for rec, src in zip(out.manifest.get("inputs") or [], manifest_sources(out), strict=True):
        want = [(f["path"], f["sha256"]) for f in rec.get("files") or []]
        n_files += len(want)
        if not src.path.exists():
            p.add(
                "source missing",
                src.name,
                f"{src.name}: {src.path} not found"
                " (relative paths are read from the current folder)",
            )
            continue
        try:
            described = describe_inputs(src)
            got = [(f["path"], f["sha256"]) for f in described]
        except SourceError as exc:
            p.add("source unreadable", src.name, str(exc))
            continue
        if [g[0] for g in got] != [w[0] for w in want]:
            p.add(
                "source file list changed", src.name, f"{src.name}: files now {[g[0] for g in got]}"
            )
        elif got != want:
            changed = [g[0] for g, w in zip(got, want, strict=True) if g != w]
            p.add("source sha256 changed", src.name, f"{src.name}: {', '.join(changed)}")
        else:  # same content: the recorded size is the file's (a record edited is not)
            sizes = [(f["path"], f.get("bytes")) for f in rec.get("files") or []]
            now = {f["path"]: f["bytes"] for f in described}
            wrong = [f"{p_} {b} != {now[p_]}" for p_, b in sizes if b != now.get(p_)]
            if wrong:
                p.add("source file size changed", src.name, f"{src.name}: bytes {', '.join(wrong)}")
        _compare_skipped(p, rec, src)
    for bench in (out.manifest.get("selection") or {}).get("decontaminate") or []:
        n_files += 1  # the rows it rejects as contaminated depend on its content
        path = Path(str(bench.get("path")))
        if not path.is_file():
            p.add("benchmark file missing", str(path), f"{path} not found (--decontaminate)")
        elif bench.get("sha256") is not None and sha256_file(path) != bench["sha256"]:
            p.add("benchmark file changed", str(path), f"{path}: sha256 differs (--decontaminate)")
    for answers in (out.manifest.get("selection") or {}).get("overlay") or []:  # `draftset run`
        n_files += 1
        path = Path(answers["path"])
        if answers.get("sha256") is None:
            if path.exists():
                p.add("answers file changed", str(path), f"{path}: exists now")
        elif not path.is_file():
            p.add("answers file missing", str(path), f"{path} not found (the run's work folder)")
        elif sha256_file(path) != answers["sha256"]:
            p.add("answers file changed", str(path), f"{path}: sha256 differs")
    return p.result("sources", f"{n_files} input files unchanged (sha256)")


def _compare_skipped(p: Problems, rec: dict[str, Any], src: Source) -> None:
    """The entries of a source folder build skipped on purpose (hidden, unsupported type) are
    the folder's now: the summary and the manifest list them as what the set left out."""
    if "skipped" not in rec or str(src.path).startswith(HUB_PREFIX):
        return
    try:
        skipped = scan_source(src.path)[1]
    except SourceError as exc:
        p.add("source unreadable", src.name, str(exc))
        return
    if rec["skipped"] != skipped:
        p.add(
            "source folder's skipped entries differ from the manifest",
            src.name,
            f"{src.name}: skipped: manifest {rec['skipped']} != now {skipped}",
        )


def iter_source_items(out: OutputSet) -> Iterator[Normalized]:
    """Every input row as build read it: same selection, normalization, ids and filters."""
    yield from source_selection(out).rows()


def source_selection(out: OutputSet) -> mix.Selection:
    """Build's selection step as the manifest recorded it; once its rows are drained, its
    counts and report are what build's manifest must say (`_compare_selection_records`)."""
    opts = out.options
    sel = out.manifest.get("selection") or {}
    spec = mix.SelectionSpec(
        sources=manifest_sources(out),
        max_samples=opts.get("max_samples"),
        seed=int(opts.get("seed") or 0),
        dedup=sel.get("dedup", "exact"),
        near_dup_threshold=float(sel.get("near_dup_threshold", 0.8)),
        decontaminate=[d["path"] for d in sel.get("decontaminate") or []],
        decontaminate_ngram=int(sel.get("decontaminate_ngram", 13)),
        mix=sel.get("mix"),
        template_kwargs=dict((out.manifest.get("template") or {}).get("kwargs") or {}),
        overlay=[d["path"] for d in sel.get("overlay") or []],
    )
    return mix.Selection(spec)


# --- expected generations, derived from renders --------------------------------------------------
@dataclass
class Expected:
    """What one output row must be: its text and the generations supervised in it."""

    text: str
    gens: list[tuple[int, str, int]]  # (char offset in text, generation text, message index)
    context: Counter[str] = field(default_factory=Counter)


def _generation(tmpl: ChatTemplate, prompt: str, full: str) -> tuple[str | None, str | None]:
    """(generation, context reason): F after P up to and including the first stop token."""
    if not full.startswith(prompt):
        return None, reasons.TURN_NOT_GENERABLE
    best = -1
    for tok in _stops(tmpl):
        i = full.find(tok, len(prompt))
        if i >= 0 and (best < 0 or i + len(tok) < best):
            best = i + len(tok)
    if best < 0:
        return None, reasons.TURN_NO_END_OF_TURN
    return full[len(prompt) : best], None


_NEXT_PROBE = "DRAFTSET_VERIFY_NEXT_8b1e"


def _stop_written_later(
    tmpl: ChatTemplate, render: Any, msgs: list, j: int, prompt: str, full: str
) -> str | None:
    """F's continuation through the stop the model emits when F itself writes none (GLM ends
    an answer with the next turn's header): the text the template writes between the answer's
    end and the next message (the real one, else a user turn, or a tool result after tool
    calls), up to and including its first stop token (docs/semantics.md)."""
    if j + 1 < len(msgs):
        nxt = {**msgs[j + 1], "content": _NEXT_PROBE}
    elif msgs[j].get("tool_calls"):
        call = msgs[j]["tool_calls"][0]
        nxt = {"role": "tool", "content": _NEXT_PROBE, "name": call["function"]["name"]}
        if "id" in call:
            nxt["tool_call_id"] = call["id"]
    else:
        nxt = {"role": "user", "content": _NEXT_PROBE}
    if _shape(tmpl)[0]:
        nxt = {**nxt, "content": [{"type": "text", "text": _NEXT_PROBE}]}
    try:
        cont = render([*msgs[: j + 1], nxt])
    except Exception:
        return None
    limit = cont.find(_NEXT_PROBE)
    answer = full[len(prompt) :]
    if limit < 0 or not answer:
        return None
    head = cont[:limit]
    k = 0  # the longest end of the answer that the continued render holds before the next turn
    lo, hi = 1, len(answer)
    while lo <= hi:
        mid = (lo + hi) // 2
        if answer[-mid:] in head:
            k, lo = mid, mid + 1
        else:
            hi = mid - 1
    if k == 0:
        return None
    at = head.rfind(answer[-k:]) + k
    ends = [i + len(t) for t in _stops(tmpl) if (i := head.find(t, at)) >= 0]
    return full + head[at : min(ends)] if ends else None


def expected_rows(
    tmpl: ChatTemplate, conv: Conversation, mode: str, placeholders: tuple[str, ...]
) -> tuple[list[tuple[str, Expected]], Counter[str], str | None]:
    """Expected rows (id, Expected) of a conversation, context-turn counts, template error.

    Renders go through transformers' public `apply_chat_template` (the reference path), with
    the template options the row was generated with when `generate` recorded them.
    """
    recorded = conv.meta.get("metadata")
    row_kwargs = recorded.get("chat_template_kwargs") if isinstance(recorded, dict) else None
    row_kwargs = row_kwargs if isinstance(row_kwargs, dict) else None
    # a generated row: the instant its answers were asked for is the clock its prompts read
    now = valid_now(recorded.get("template_now")) if isinstance(recorded, dict) else None
    if now is not None:
        row_kwargs = {**(row_kwargs or {}), **clock_kwargs(now)}

    def render(messages: list, generation_prompt: bool = False) -> str:
        return tmpl.render_reference(messages, conv.tools, generation_prompt, row_kwargs)

    originals = conv.messages
    asst = [i for i, m in enumerate(originals) if m["role"] == "assistant"]
    originals = originals[: asst[-1] + 1]
    if reasons.special_token_in_answer(originals, _special_pattern(tmpl)) is not None:
        return [], Counter(), SPECIAL_TOKEN_TEXT
    harmony, engine = tmpl.harmony is not None, tmpl.serving_engine
    special = _special_pattern(tmpl)
    if reasons.unservable(
        originals, conv.meta, tmpl.template_text, engine, harmony, special, conv.tools
    ):
        return [], Counter(), UNSERVABLE
    msgs = served_reads(originals, conv.meta, _shape(tmpl), tmpl.template_text, engine, harmony)
    marks = reasons.row_marks(originals, conv.meta)
    context: Counter[str] = Counter()
    rows: list[tuple[str, Expected]] = []
    if mode == "each":
        error = None
        for k, j in enumerate(asst):
            if j == 0:
                context[reasons.TURN_NO_PROMPT] += 1
                continue
            why = reasons.never_supervised(originals, j, marks, placeholders)
            if why is not None:
                context[why] += 1
                continue
            try:
                prompt = render(msgs[:j], True)
                full = render(msgs[: j + 1])
            except Exception as exc:
                error = error or _first_line(exc)
                continue
            gen, why = _generation(tmpl, prompt, full)
            if why == reasons.TURN_NO_END_OF_TURN:
                later = _stop_written_later(tmpl, render, msgs, j, prompt, full)
                if later is not None:
                    full, gen, why = later, later[len(prompt) :], None
            if gen is None:
                context[str(why)] += 1
                continue
            if reasons.drops_content(originals[j], gen, reasons.answer_parts(conv.meta, j)):
                error = error or DROPS_CONTENT
                continue
            if reasons.placeholder_as_rendered(originals[j], gen, placeholders):
                context[reasons.TURN_PLACEHOLDER] += 1
                continue
            rows.append((f"{conv.id}#{k}", Expected(full, [(len(prompt), gen, j)])))
        return rows, context, error
    try:
        whole = render(msgs)
        gens: list[tuple[int, str, int]] = []
        for j in asst:
            if mode == "last" and j != asst[-1]:
                context[reasons.TURN_NOT_LAST] += 1
                continue
            if j == 0:
                context[reasons.TURN_NO_PROMPT] += 1
                continue
            why = reasons.never_supervised(originals, j, marks, placeholders)
            if why is not None:
                context[why] += 1
                continue
            prompt = render(msgs[:j], True)
            full = whole if j == asst[-1] else render(msgs[: j + 1])
            gen, why = _generation(tmpl, prompt, full)
            if why == reasons.TURN_NO_END_OF_TURN:
                later = _stop_written_later(tmpl, render, msgs, j, prompt, full)
                if later is not None:
                    gen, why = later[len(prompt) :], None
                    whole = later if j == asst[-1] else whole
            if gen is None:
                context[str(why)] += 1
            elif whole.startswith(prompt) and whole.startswith(gen, len(prompt)):
                if reasons.drops_content(originals[j], gen, reasons.answer_parts(conv.meta, j)):
                    return [], context, DROPS_CONTENT
                if reasons.placeholder_as_rendered(originals[j], gen, placeholders):
                    context[reasons.TURN_PLACEHOLDER] += 1
                elif gens and gens[-1][0] + len(gens[-1][1]) == len(prompt):
                    context[reasons.TURN_FOLLOWS_ANSWER] += 1  # build's rule: runs never touch
                else:
                    gens.append((len(prompt), gen, j))
            else:
                context[reasons.TURN_HISTORY_RENDER_DIFFERS] += 1
    except Exception as exc:
        return [], context, _first_line(exc)
    if gens:
        rows.append((conv.id, Expected(whole, gens)))
    return rows, context, None


DROPS_CONTENT = "the template's render of an assistant turn does not contain its text or tools"
SPECIAL_TOKEN_TEXT = "an assistant answer holds the text of a special token"
UNSERVABLE = "a row the serving engine would not render as given (reasons.unservable)"


def _special_pattern(tmpl: ChatTemplate) -> re.Pattern[str] | None:
    """The special tokens' texts, from the tokenizer's public ``added_tokens_decoder``."""
    pattern = getattr(tmpl, "verify_special_pattern", False)
    if pattern is False:
        added = tmpl.tokenizer.added_tokens_decoder.values()
        pattern = reasons.special_token_pattern({str(t) for t in added if t.special})
        tmpl.verify_special_pattern = pattern  # type: ignore[attr-defined]
    return pattern  # type: ignore[return-value]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- comparing one output row with its expectation -----------------------------------------------
@dataclass
class RowVerdict:
    """Problems found in one row, by check."""

    mask: list[str] = field(default_factory=list)
    leakage: list[str] = field(default_factory=list)
    truncated: bool = False
    context: Counter[str] = field(default_factory=Counter)  # turns the token rule made context
    # the generations the row supervises, (text, message index): the token rule's context
    # turns left out, a truncated row's cut ones kept (build counts its plan's turns)
    supervised: list[tuple[str, int]] = field(default_factory=list)
    cut_generations: int = 0  # generations past a truncated row's cut (build encoded them)


def _decode(tmpl: ChatTemplate, ids: np.ndarray) -> str:
    return tmpl.backend.decode([int(i) for i in ids], skip_special_tokens=False)


def compare_row(
    tmpl: ChatTemplate,
    ids: np.ndarray,
    mask: np.ndarray,
    exp: Expected,
    conv: Conversation,
    options: dict[str, Any],
    placeholders: tuple[str, ...],
) -> RowVerdict:
    """Decode the row's supervised runs and match each one to an expected generation."""
    v = RowVerdict()
    runs = supervised_runs(mask)
    # decode alternating context / supervised segments; their lengths give each run's offset
    pieces: list[tuple[int, int, str]] = []  # (start char, end char, decoded run)
    pos, char = 0, 0
    decoded_parts: list[str] = []
    for s, e in runs:
        gap = _decode(tmpl, ids[pos:s])
        run = _decode(tmpl, ids[s:e])
        decoded_parts += [gap, run]
        char += len(gap)
        pieces.append((char, char + len(run), run))
        char += len(run)
        pos = e
    decoded_parts.append(_decode(tmpl, ids[pos:]))
    text = "".join(decoded_parts)
    whole = _decode(tmpl, ids)
    if text != whole:
        v.mask.append("a supervised run boundary splits a character")
        return v
    raw = exp
    text, pieces, exp = in_normal_form(tmpl, text, pieces, exp)
    cut_allowed = options.get("truncation") == "truncate" and len(ids) == int(
        options.get("max_length") or -1
    )
    if text != exp.text:
        if cut_allowed and exp.text.startswith(text.rstrip("\ufffd")):
            v.truncated = True
        else:
            v.mask.append(
                "row text differs from the re-render of its source row"
                + _first_difference(tmpl, ids, text, exp.text)
            )
            return v
    server = server_completion_ids(conv)
    prompts = server_prompt_ids(conv)
    by_start = {start: (gen, j) for start, gen, j in exp.gens}
    run_at = {start: i for i, (start, _, _) in enumerate(pieces)}
    kept = len(text.rstrip("\ufffd")) if v.truncated else len(text) + 1
    in_row = sum(1 for start, _, _ in exp.gens if start < kept)  # the cut removed the others
    served = _served_context(tmpl, ids, runs, raw, [run_at.get(g[0]) for g in exp.gens[:in_row]])
    demoted = {exp.gens[g][0] for g, ok in served.items() if not ok}
    v.supervised = [(gen, j) for g, (_, gen, j) in enumerate(raw.gens) if served.get(g, True)]
    v.cut_generations = len(exp.gens) - in_row
    # the first generation is never made context (a difference there is a wrong row, below)
    v.context[reasons.TURN_HISTORY_TOKENS_DIFFER] += sum(
        1 for g, ok in served.items() if g and not ok
    )
    matched: set[int] = set()
    for i, (start, end, run) in enumerate(pieces):
        is_last = i == len(pieces) - 1
        s_tok, e_tok = runs[i]
        hit = by_start.get(start)
        if hit is not None and start in demoted:
            v.mask.append(
                f"turn {hit[1]} is supervised, but the row's tokens before it are not its"
                " served prompt's tokens (tokenizer(render(turns<j, generation prompt)))"
            )
            matched.add(start)
            continue
        if hit is not None and hit[1] in prompts and _differs(ids[:s_tok], prompts[hit[1]]):
            v.mask.append(
                f"turn {hit[1]} is supervised, but the generation server answered it after"
                f" other prompt tokens than the row's before it ({len(prompts[hit[1]])} vs"
                f" {s_tok} tokens): the answer follows a prompt the row does not hold"
            )
            matched.add(start)
            continue
        if hit is not None and run == hit[0]:
            if int(ids[e_tok - 1]) not in _stop_ids(tmpl):
                v.mask.append(f"run of turn {hit[1]} does not end with an end-of-turn token")
            elif not _emitted_tokens(tmpl, ids[s_tok:e_tok], hit[0], server.get(hit[1])):
                v.mask.append(_OTHER_TOKENS.format(j=hit[1]))
            matched.add(start)
            _leak(v, conv, hit[1], run, tmpl, ids[s_tok:e_tok], placeholders)
            continue
        if (
            hit is not None
            and v.truncated
            and is_last
            and e_tok == len(ids)
            and hit[0].startswith(run.rstrip("\ufffd"))
        ):
            matched.add(start)  # a cut run is a prefix: only its source answer is judged
            if not _emitted_tokens(tmpl, ids[s_tok:e_tok], hit[0], server.get(hit[1]), True):
                v.mask.append(_OTHER_TOKENS.format(j=hit[1]))
            _leak(v, conv, hit[1], run, tmpl, ids[s_tok:e_tok], placeholders, decoded=False)
            continue
        v.mask.append(_classify(start, end, run, exp, conv))
        _leak(v, conv, None, run, tmpl, ids[s_tok:e_tok], placeholders)
    for start, gen, j in exp.gens:
        if start in matched or start in demoted:
            continue
        if v.truncated and start >= len(text.rstrip("\ufffd")):
            continue  # cut off by truncation
        v.mask.append(f"assistant turn {j} should be supervised but is not: {_short(gen)}")
    if pieces and pieces[-1][0] in matched and pieces[-1][0] not in demoted:
        last = next(g for g, (start, _, _) in enumerate(exp.gens) if start == pieces[-1][0])
        tail_start = raw.gens[last][0] + len(raw.gens[last][1])
        _check_trailing_context(v, tmpl, ids, runs[-1][1], raw.text[tail_start:], cut_allowed)
    return v


def _differs(row_ids: np.ndarray, server_ids: list[int]) -> bool:
    """Whether the row's tokens before a run are not the server's prompt tokens for it."""
    return len(row_ids) != len(server_ids) or bool(np.any(row_ids != np.asarray(server_ids)))


def _check_trailing_context(
    v: RowVerdict, tmpl: ChatTemplate, ids: np.ndarray, end: int, tail: str, cut: bool
) -> None:
    """The tokens after the row's last supervised run are its trailing context encoded in one
    piece, as build encodes every segment (docs/semantics.md, "Tokens follow serving"); the
    rule on the tokens before each run never reaches them. One tokenizer call on the text after
    the last generation (in ``each`` and most ``all`` rows a newline or nothing). ``cut``: a
    row cut at ``--max-length`` holds a prefix of them."""
    want = list(tmpl.tokenizer(tail, add_special_tokens=False)["input_ids"])
    have = [int(x) for x in ids[end:]]
    if have == (want[: len(have)] if cut else want):
        return
    d = next((i for i, (a, b) in enumerate(zip(have, want, strict=False)) if a != b), None)
    d = min(len(have), len(want)) if d is None else d
    row_ids, built_ids = have[d : d + 4], want[d : d + 4]
    row_text = _decode(tmpl, np.asarray(row_ids))
    built_text = _decode(tmpl, np.asarray(built_ids))
    v.mask.append(
        "the context after the last supervised run is not its text encoded in one piece (as"
        f" build encodes it): at token {end + d}, row {row_ids} {row_text!r}"
        f" vs tokenizer(text) {built_ids} {built_text!r}"
    )


WINDOW = 12
"""Characters shown on each side of a difference in a mask_fidelity message."""


def _first_difference(tmpl: ChatTemplate, ids: np.ndarray, text: str, want: str) -> str:
    """Where a row's decoded ``text`` first departs from the expected ``want``: the token
    that holds that character (the shortest prefix of the row decoding past it; a failed row
    only, so the few decodes of a binary search cost nothing) and both texts around it."""
    at = next((i for i, (a, b) in enumerate(zip(text, want, strict=False)) if a != b), None)
    at = min(len(text), len(want)) if at is None else at
    lo, hi = 0, len(ids)
    while lo < hi:  # the first token count whose decoded prefix reaches past character `at`
        mid = (lo + hi) // 2
        if len(_decode(tmpl, ids[: mid + 1])) > at:
            hi = mid
        else:
            lo = mid + 1
    start = max(0, at - WINDOW)
    return (
        f": at token {lo} (character {at}), row {text[start : at + WINDOW]!r}"
        f" vs expected {want[start : at + WINDOW]!r}"
    )


_OTHER_TOKENS = (
    "run of turn {j} spells its generation in other tokens than the model emits it"
    " (tokenizer(G) in one piece, or the server's own ids)"
)


def _emitted_tokens(
    tmpl: ChatTemplate,
    run_ids: np.ndarray,
    gen: str,
    server: list[int] | None,
    prefix: bool = False,
) -> bool:
    """Whether a supervised run (whose text is its generation's) holds the tokens the model
    emits: ``tokenizer(G)`` in one piece (public path), or the ids the generation server
    returned for it (with the end-of-turn token it may leave off). A run cut by truncation is
    judged as a prefix. Equal text is not enough: `</think>` spelled `</`, `think`, `>`
    decodes the same and is not what the model emits."""
    want = list(tmpl.tokenizer(gen, add_special_tokens=False)["input_ids"])
    have = [int(x) for x in run_ids]
    accepted = [want]
    kept = _kept_server_ids(tmpl, server, gen)
    if kept is not None:
        accepted.append(kept)
    if prefix:
        return any(a[: len(have)] == have for a in accepted)
    return have in accepted


def _served_context(
    tmpl: ChatTemplate,
    ids: np.ndarray,
    runs: list[tuple[int, int]],
    exp: Expected,
    run_of_gen: list[int | None],
) -> dict[int, bool]:
    """The token-level context rule, judged on the row: expected generation -> whether the
    tokens before it are its served prompt's, ``tokenizer(P)`` in one piece (public path).

    A generation the row supervises is judged on the row's own tokens before it. One it does
    not is judged on the tokens the row would hold had it been supervised: the row's tokens up
    to the end of the previous supervised generation, then the context text in one piece. The
    first generation's tokens before it must be its prompt's encoding (build never makes it
    context, so a difference there is a wrong row); only the generations in ``run_of_gen`` (the
    cut of a truncated row removed the others) are judged, and none after one the row lacks.
    """
    tok = tmpl.tokenizer
    out: dict[int, bool] = {}
    prev: tuple[int, int] | None = None  # (token end, char end) of the last supervised one
    for g, r in enumerate(run_of_gen):
        start, gen, _ = exp.gens[g]
        if prev is not None or r is not None:
            want = tok(exp.text[:start], add_special_tokens=False)["input_ids"]
            if r is not None:
                have = [int(x) for x in ids[: runs[r][0]]]
            else:
                between = tok(exp.text[prev[1] : start], add_special_tokens=False)["input_ids"]
                have = [int(x) for x in ids[: prev[0]]] + list(between)
            out[g] = have == list(want)
            if not out[g]:
                continue
        if r is None:
            break  # missing from the row (reported): later turns cannot be judged
        prev = (runs[r][1], start + len(gen))
    return out


def in_normal_form(
    tmpl: ChatTemplate, text: str, pieces: list[tuple[int, int, str]], exp: Expected
) -> tuple[str, list[tuple[int, int, str]], Expected]:
    """The decoded row (with its runs) and its expectation in the tokenizer's normalized form.

    A tokenizer with a normalizer (Qwen's NFC) encodes the normalized text, so its tokens decode
    to that form (U+2126 OHM SIGN comes back as U+03A9): text is compared after applying that
    same normalizer to both sides, and offsets are counted in normalized characters (the length
    of the normalized prefix). Without a normalizer everything is compared raw, and so is a
    row whose decoded text already equals (or, cut, starts) its expectation: equal raw text
    means equal normalized text, and most rows need no normalizer call at all.
    """
    normalizer = getattr(tmpl.backend, "normalizer", None)
    if normalizer is None or exp.text.startswith(text.rstrip("\ufffd")):
        return text, pieces, exp
    norm = normalizer.normalize_str

    def at(s: str, i: int) -> int:
        return len(norm(s[:i]))

    pieces = [(at(text, s), at(text, e), norm(run)) for s, e, run in pieces]
    gens = [(at(exp.text, s), norm(gen), j) for s, gen, j in exp.gens]
    return norm(text), pieces, Expected(norm(exp.text), gens, exp.context)


def _classify(start: int, end: int, run: str, exp: Expected, conv: Conversation) -> str:
    """A readable reason for a supervised run that is not an expected generation."""
    for gstart, gen, j in exp.gens:
        if start < gstart + len(gen) and gstart < end:
            return f"supervised run overlaps turn {j} but is not its generation: {_short(run)}"
    for m in conv.messages:
        content = str(m.get("content") or "").strip()
        if (
            m["role"] != "assistant"
            and len(content) >= 2
            and (content in run or run.strip() in content)
        ):
            return f"{m['role']} text is supervised: {_short(run)}"
    return (
        "supervised run outside every expected generation (context or template markup): "
        + _short(run)
    )


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[: n - 1] + "…")


def _decoded_answer(tmpl: ChatTemplate, run_ids: np.ndarray) -> str:
    """A run's answer text from its tokens alone: special tokens and think tags dropped."""
    text = tmpl.backend.decode([int(i) for i in run_ids], skip_special_tokens=True)
    for tok in _stops(tmpl):
        text = text.replace(tok, "")
    return _THINK_TAGS.sub("", text).strip()


def _leak(
    v: RowVerdict,
    conv: Conversation | None,
    j: int | None,
    run: str,
    tmpl: ChatTemplate,
    run_ids: np.ndarray,
    placeholders: tuple[str, ...],
    decoded: bool = True,
) -> None:
    text = _decoded_answer(tmpl, run_ids) if decoded else None
    has_calls = conv is not None and j is not None and bool(conv.messages[j].get("tool_calls"))
    if text is not None and not has_calls and (text == "" or text in placeholders):
        v.leakage.append(f"placeholder answer supervised: {_short(text)}")
        return
    if conv is None or j is None:
        return
    msg = conv.messages[j]
    if reasons.is_placeholder_answer(msg, placeholders):
        text = _short(reasons.answer_text(msg))
        v.leakage.append(f"placeholder answer supervised (turn {j}): {text}")
        return
    if reasons.copies_its_prompt(conv.messages, j):
        text = _short(str(msg.get("content") or "").strip())
        v.leakage.append(f"answer of turn {j} is a verbatim copy of its prompt: {text}")


# --- the row-level pass --------------------------------------------------------------------------
@dataclass
class SourcePass:
    """Results of the pass over sources and output rows."""

    identity: CheckResult
    mask: CheckResult
    leakage: CheckResult


def pick_rows(n: int, sample: int | None, seed: int) -> tuple[list[int], bool]:
    """Row indices to mask-check and whether that is every row."""
    if sample is None:
        sample = n if n <= FULL_CHECK_MAX_ROWS else DEFAULT_SAMPLE
    if sample >= n:
        return list(range(n)), True
    return sorted(random.Random(seed).sample(range(n), sample)), False


def input_chosen(key: tuple[str, int], seed: int, share: float) -> bool:
    """Whether input row ``key`` (source, row) is in a seeded sample of that ``share`` of the
    input rows, decided per row (no count of input rows is known before the pass)."""
    digest = hashlib.blake2b(f"{seed}\0{key[0]}\0{key[1]}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") < share * 2**64


@dataclass
class _OutputIndex:
    """Where each input row went: output rows by id, rejects and queued prompts by position."""

    ids: list[str | None]
    row_of_id: dict[str, int]
    each_rows: dict[str, list[str]]  # --turns each: input id -> its `id#k` output rows
    rejects_at: dict[tuple[str, int], list[dict[str, Any]]]
    prompts_at: dict[tuple[str, Any], dict[str, Any]]
    prompt_line: dict[tuple[str, Any], int]  # the line number of each prompts_at entry


def _index_output(out: OutputSet, mode: str) -> _OutputIndex:
    ids = out.ids()
    row_of_id = {rid: i for i, rid in enumerate(ids) if rid is not None}
    each_rows: dict[str, list[str]] = {}
    if mode == "each":
        for rid in ids:
            base, sep, k = (rid or "").rpartition("#")
            if sep and k.isdigit():
                each_rows.setdefault(base, []).append(rid or "")
    reject_lines, _ = read_jsonl(out.folder / "rejects.jsonl")
    rejects_at: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for obj in reject_lines:
        if isinstance(obj, dict) and "source" in obj and "row" in obj:
            rejects_at.setdefault((str(obj["source"]), obj["row"]), []).append(obj)
    prompt_lines, _ = read_jsonl(out.folder / "prompts.jsonl")
    prompts_at: dict[tuple[str, Any], dict[str, Any]] = {}
    prompt_line: dict[tuple[str, Any], int] = {}
    for n, o in enumerate(prompt_lines):
        if isinstance(o, dict) and isinstance(o.get("metadata"), dict):
            key = (str(o["metadata"].get("source")), o["metadata"].get("row"))
            prompts_at[key], prompt_line[key] = o, n
    return _OutputIndex(ids, row_of_id, each_rows, rejects_at, prompts_at, prompt_line)


def source_pass(
    out: OutputSet,
    tmpl: ChatTemplate,
    sample: int | None,
    seed: int,
    placeholders: tuple[str, ...],
) -> SourcePass:
    """Row identity over every row; mask fidelity and leakage over the chosen rows.

    Expected rows use the manifest's placeholder list (what build skipped); leakage judges
    supervised answers against ``placeholders`` (the verify flag, default the same list)."""
    opts = out.options
    build_placeholders = tuple(opts.get("placeholders") or reasons.DEFAULT_PLACEHOLDERS)
    timeout = opts.get("render_timeout", defaults.RENDER_TIMEOUT)
    mode = str(opts.get("turns", "all"))
    idx = _index_output(out, mode)
    row_of_id = idx.row_of_id
    n = len(idx.ids)
    chosen, full = pick_rows(n, sample, seed)
    chosen_set = set(chosen)
    share = len(chosen) / max(n, 1)  # of the input rows re-derived besides the chosen rows
    ident = Problems()
    maskp = Problems()
    leak = Problems()
    used_rejects: set[tuple[str, int]] = set()
    row_owner: dict[int, tuple[int, int]] = {}  # output row -> (input row's position, turn k)
    context_by_source: dict[str, Counter[str]] = {}
    recount = RowStepCounts(tmpl, out.manifest, build_placeholders, timeout)
    checked = 0
    sources = out.sources()
    selection = source_selection(out)
    prompt_order: list[int] = []  # prompts.jsonl line of each prompt-only input row, in order
    for position, item in enumerate(selection.rows()):
        key = (item.source, item.row)
        if isinstance(item, Reject | PromptOnly):
            _check_unwritten(ident, item, idx, used_rejects, prompt_order)
            continue
        expected: list[tuple[str, Expected]] = []
        error: str | None = None
        turn_rows = mode == "each" and not isinstance(item, PreTokenized)
        if not turn_rows:
            own = [item.id] if item.id in row_of_id else []
        else:
            own = idx.each_rows.get(item.id, [])
        lines = idx.rejects_at.get(key) or []
        if lines:
            used_rejects.add(key)
        if not own and not lines:
            ident.add("input row neither written nor rejected (row dropped?)", item.id)
        for x in lines:  # reading and selection (re-run above) passed this row
            if x.get("reason") not in reasons.ROW_STEP_REASONS:
                ident.add(
                    f"rejected as {x.get('reason')} but it reads and is selected as a row",
                    item.id,
                )
            elif not _names_its_row(x.get("id"), item.id, mode == "each"):
                ident.add(
                    "rejects.jsonl line's id is not its input row's",
                    item.id,
                    f"{item.id}: the {x.get('reason')} line of {item.source} row {item.row}"
                    f" has id {x.get('id')!r}",
                )
        for rid in own:
            r = row_of_id[rid]
            row_owner[r] = (position, _turn_row(rid) if turn_rows else 0)
            if sources[r] != item.source:
                ident.add("row's source column differs from its input row's source", rid)
        needs = full or any(row_of_id[rid] in chosen_set for rid in own)
        # a sample of output rows never meets a rejected row: the same share of input rows
        needs = needs or input_chosen(key, seed, share)
        if not own and any(x.get("reason") == reasons.TEMPLATE_TIMEOUT for x in lines):
            needs = False  # a timeout depends on the machine: not worth that work again here
        if isinstance(item, Conversation) and needs:
            expected, context, error = _bounded_expected_rows(
                tmpl, item, mode, build_placeholders, timeout
            )
            context_by_source.setdefault(item.source, Counter()).update(context)
            if not own:
                _check_rejection(maskp, item, lines, expected, error)
                _check_length_rejects(maskp, tmpl, item, lines, expected, opts)
            _check_server_prompt_rejects(maskp, tmpl, item, lines, expected)
        mine = [rid for rid in own if row_of_id[rid] in chosen_set]
        checked += len(mine)
        found = _check_rows(
            out, tmpl, item, mine, row_of_id, dict(expected), error, placeholders, (maskp, leak)
        )
        if found.context:  # turns the token rule made context, judged on the rows themselves
            context_by_source.setdefault(item.source, Counter()).update(found.context)
        if isinstance(item, Conversation):
            recount.add(item, own, lines, expected if needs else None, error, found)
        if isinstance(item, Conversation) and needs and mode == "each":
            for rid, _ in expected:
                if rid not in row_of_id and not any(x.get("id") == rid for x in lines):
                    maskp.add("expected row missing and not rejected", rid)
            if own and lines:  # a turn's row rejected beside written ones
                _check_length_rejects(maskp, tmpl, item, lines, expected, opts)
                _check_turn_rejects(maskp, lines, expected)
    _check_every_output_row(ident, idx, row_owner, used_rejects)
    if prompt_order != sorted(prompt_order):
        ident.add("prompts.jsonl lines are not in input order (build's order is deterministic)")
    _compare_selection_records(ident, out, selection)
    recount.compare(maskp, out, full)
    if full:
        _compare_context_counts(maskp, out, context_by_source)
    return _source_pass_results((ident, maskp, leak), n, checked, full, placeholders)


def _source_pass_results(
    problems: tuple[Problems, Problems, Problems],
    n: int,
    checked: int,
    full: bool,
    placeholders: tuple[str, ...],
) -> SourcePass:
    """The three check results of the pass, saying what they covered."""
    ident, maskp, leak = problems
    scope = (
        f"all {plural(checked, 'row')}"
        if full
        else f"a seeded sample of {checked:,} of {plural(n, 'row')}"
    )
    return SourcePass(
        ident.result(
            "row_identity",
            f"{plural(n, 'row')} map{'s' if n == 1 else ''} to their input rows, in order;"
            " every input row is accounted for",
        ),
        maskp.result(
            "mask_fidelity",
            f"{scope}: every supervised run is exactly one assistant generation",
            {"rows_checked": checked, "full": full},
        ),
        leak.result(
            "leakage",
            f"{scope}: no placeholder or prompt-copy answer supervised",
            {"placeholders": list(placeholders)},
        ),
    )


def _check_unwritten(
    ident: Problems,
    item: Reject | PromptOnly,
    idx: _OutputIndex,
    used_rejects: set[tuple[str, int]],
    prompt_order: list[int],
) -> None:
    """A rejected row has its rejects.jsonl line, with the id and message reading or selection
    gave it (re-run here: the same text, e.g. the row or benchmark item a removal matched); a
    prompt-only row its prompts.jsonl line (``prompt_order`` collects where that line is)."""
    key = (item.source, item.row)
    if isinstance(item, Reject):
        lines = idx.rejects_at.get(key) or []
        used_rejects.add(key)
        same = [x for x in lines if x.get("reason") == item.reason]
        name = item.id or f"{item.source}:{item.row}"
        if not same:
            ident.add("rejected input row has no matching rejects.jsonl line", name)
        elif not any(x.get("id") == item.id and x.get("message") == item.message for x in same):
            ident.add(
                "rejects.jsonl line's id or message differs from the re-derived reject",
                name,
                f"{name}: line id {same[0].get('id')!r}, message {same[0].get('message')!r};"
                f" re-derived id {item.id!r}, message {item.message!r}",
            )
        return
    line = idx.prompts_at.get(key)
    if line is not None:
        prompt_order.append(idx.prompt_line[key])
    if line is None or line.get("id") != item.id:
        ident.add("prompt-only row missing from prompts.jsonl", item.id)
    elif line != json.loads(json.dumps(item.to_json(), ensure_ascii=False)):
        ident.add("prompts.jsonl line differs from its input row (what generate asks)", item.id)


def _check_rows(
    out: OutputSet,
    tmpl: ChatTemplate,
    item: Conversation | PreTokenized,
    rids: list[str],
    row_of_id: dict[str, int],
    exp_by_id: dict[str, Expected],
    error: str | None,
    placeholders: tuple[str, ...],
    problems: tuple[Problems, Problems],
) -> RowVerdict:
    """Mask fidelity and leakage of one input row's chosen output rows; what they hold in all
    (the turns the token rule made context, the generations supervised, those cut off)."""
    maskp, leak = problems
    found = RowVerdict()
    for rid in rids:
        row = out.row(row_of_id[rid])
        if isinstance(item, PreTokenized):
            v = _compare_pretokenized(tmpl, item, row, out.options, placeholders)
        elif rid not in exp_by_id:
            why = error or "no supervisable assistant turn"
            maskp.add("row exists but re-derivation gives no such row", rid, f"{rid}: {why}")
            found.mask.append(why)
            continue
        else:
            v = compare_row(
                tmpl,
                row["input_ids"],
                row["loss_mask"],
                exp_by_id[rid],
                item,
                out.options,
                placeholders,
            )
        for msg in v.mask:
            maskp.add(msg.split(":")[0], rid, f"{rid}: {msg}")
        for msg in v.leakage:
            leak.add(msg.split(":")[0], rid, f"{rid}: {msg}")
        found.mask += v.mask
        found.context.update(v.context)
        found.supervised += v.supervised
        found.cut_generations += v.cut_generations
    return found


def _check_every_output_row(
    ident: Problems,
    idx: _OutputIndex,
    row_owner: dict[int, int],
    used_rejects: set[tuple[str, int]],
) -> None:
    """Every output row and reject line belongs to an input row, and rows keep input order:
    input rows in order, and one conversation's turn rows (``--turns each``) in turn order."""
    n = len(idx.ids)
    for r in range(n):
        if r not in row_owner:
            ident.add("output row id not found among the input rows", idx.ids[r] or f"#{r}")
    owned = [r for r in range(n) if r in row_owner]
    for a, b in itertools.pairwise(owned):
        if row_owner[b] < row_owner[a]:
            first, second = idx.ids[a] or f"#{a}", idx.ids[b] or f"#{b}"
            ident.add(
                "rows are not in input order (build's order is deterministic)",
                first,
                f"row {a} ({first}) comes before row {b} ({second}), which build writes first"
                " (the first pair out of order)",
            )
            break
    for key in idx.rejects_at:
        if key not in used_rejects:
            ident.add("rejects.jsonl line for a row that is not an input row", f"{key[0]}:{key[1]}")


def _turn_row(rid: str) -> int:
    """k of a ``--turns each`` row id ``base#k``: its conversation's rows are in k order."""
    return int(rid.rpartition("#")[2])


_UNPLANNED = frozenset(
    {reasons.TEMPLATE_TIMEOUT, reasons.TEMPLATE_TOO_LARGE, reasons.INTERNAL_ERROR}
)
"""A conversation rejected for one of these never got through build's row step: no counts."""


def _names_its_row(line_id: Any, row_id: str, each: bool) -> bool:
    """A row-step reject line's id is its input row's (with `--turns each`, or a turn's,
    ``id#k``): `show --id` finds a rejected row by it."""
    if line_id == row_id:
        return True
    base, sep, k = str(line_id).rpartition("#")
    return each and bool(sep) and base == row_id and k.isdigit()


def _compare_selection_records(p: Problems, out: OutputSet, selection: mix.Selection) -> None:
    """What reading and selection recorded equals what their re-run here found: per source
    the rows available, sampled out and read and the fields left unread; the `mixture` record
    (dedup and decontamination steps: checked, removed, pairs, top items; the mix table)."""
    per_source = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in per_source.items():
        if name not in selection.counts.sources:
            continue  # a source the manifest's inputs do not name fails accounting
        got = selection.counts[name]
        pairs: list[tuple[str, Any, Any]] = [
            (key, c[key], getattr(got, key))
            for key in ("available", "sampled_out", "read")
            if key in c
        ]
        if "unread_fields" in c:
            want = {k: v for k, v in (c["unread_fields"] or {}).items() if v}
            pairs.append(("unread_fields", want, {k: v for k, v in got.unread_fields.items() if v}))
        for key, want, have in pairs:
            if want != have:
                p.add(
                    "reading and selection counts differ from the manifest",
                    None,
                    f"{name}: {key}: manifest {want} != re-derived {have}",
                )
    recorded = out.manifest.get("mixture")
    if recorded is None:
        return
    redone = json.loads(json.dumps(selection.report))
    for where, want, have in _differences("mixture", recorded, redone):
        p.add(
            "the manifest's mixture differs from the re-run selection",
            None,
            f"{where}: manifest {want!r} != re-derived {have!r}",
        )


def _differences(where: str, a: Any, b: Any) -> list[tuple[str, Any, Any]]:
    """(path, a's value, b's value) wherever two JSON values differ, innermost first found."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in _differences(f"{where}.{k}", a.get(k), b.get(k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _differences(f"{where}[{i}]", x, y)
        ]
    return [] if a == b else [(where, a, b)]


class RowStepCounts:
    """The row step's per-source counts (`counts.per_source`: the build summary and `report`
    show them), re-derived in verify's pass from its own renders and the rows it checked.

    `trailing_turns_trimmed` and `placeholder_rows` follow from the input rows and their
    reject lines, so they are compared on every run; the others need every row re-derived
    (a full check, not a sample). A count a conversation leaves out of reach is not compared
    for its source: `supervised_turns` and `empty_think_rows` past a truncated row's cut (build
    made its turns context from tokens the row no longer holds) or of a row that failed the
    mask check (its runs are not build's; the row is already named), `reasoning_not_rendered` of
    a whole-row render that failed part way (build counted the turns before the failure).
    `generation_tags_*` are never compared (docs/verify.md).
    """

    ALWAYS = ("trailing_turns_trimmed", "placeholder_rows")
    FULL = (
        "supervised_turns",
        "empty_think_rows",
        "reasoning_not_rendered",
        "server_ids_used",
        "server_ids_mismatch",
    )

    def __init__(
        self,
        tmpl: ChatTemplate,
        manifest: dict[str, Any],
        placeholders: tuple[str, ...],
        timeout: float | None,
    ) -> None:
        self.tmpl = tmpl
        self.each = str((manifest.get("options") or {}).get("turns", "all")) == "each"
        self.placeholders = placeholders
        self.template_kwargs = dict((manifest.get("template") or {}).get("kwargs") or {})
        self.probe = EmptyThinkProbe(tmpl.template_text, tmpl.base_kwargs, timeout=timeout)
        self.counts: dict[str, Counter[str]] = {}
        self.out_of_reach: dict[str, set[str]] = {}

    def add(
        self,
        conv: Conversation,
        own: list[str],
        lines: list[dict[str, Any]],
        expected: list[tuple[str, Expected]] | None,
        error: str | None,
        found: RowVerdict,
    ) -> None:
        """Count one conversation: ``own`` its written rows, ``lines`` its reject lines,
        ``expected`` its re-derived rows (None: not re-derived), ``found`` its checked rows."""
        c = self.counts.setdefault(conv.source, Counter())
        given = {x.get("reason") for x in lines}
        answers = [i for i, m in enumerate(conv.messages) if m["role"] == "assistant"]
        if answers and (own or not given & _UNPLANNED):
            c["trailing_turns_trimmed"] += len(conv.messages) - answers[-1] - 1
        placeholder_only = all_placeholder_answers(conv, self.placeholders)
        if placeholder_only and not own and reasons.NO_SUPERVISED_TURN in given:
            c["placeholder_rows"] += 1
        if expected is None:
            return
        skip = self.out_of_reach.setdefault(conv.source, set())
        if found.cut_generations or found.mask:  # a failed row's runs are not build's: its
            skip.update(("supervised_turns", "empty_think_rows"))  # failure is reported once
        if error is not None and not self.each:
            skip.add("reasoning_not_rendered")
        c["supervised_turns"] += len(found.supervised)
        server = server_completion_ids(conv)
        for _, exp in expected:
            for _, gen, j in exp.gens:
                c["reasoning_not_rendered"] += int(
                    reasons.reasoning_not_rendered(conv.messages[j], gen)
                )
                if (ids := server.get(j)) is not None:
                    kept = _kept_server_ids(self.tmpl, ids, gen) is not None
                    c["server_ids_used" if kept else "server_ids_mismatch"] += 1
        if own and not placeholder_only and lacks_reasoning(conv, self.template_kwargs):
            wrapper = self.probe.wrapper(row_kwargs_key(conv))
            if wrapper and any(gen.startswith(wrapper) for gen, _ in found.supervised):
                c["empty_think_rows"] += 1

    def compare(self, p: Problems, out: OutputSet, full: bool) -> None:
        """Each count against the manifest's, per source (when every row was re-derived, the
        ones that need that too)."""
        keys = self.ALWAYS + (self.FULL if full else ())
        per_source = (out.manifest.get("counts") or {}).get("per_source") or {}
        for name, c in per_source.items():
            got = self.counts.get(name, Counter())
            for key in keys:
                if key not in c or key in self.out_of_reach.get(name, ()):
                    continue
                if c[key] != got[key]:
                    p.add(  # examples are row ids: the message names the source
                        "the row step's counts differ from the manifest",
                        None,
                        f"{name}: {key}: manifest {c[key]} != re-derived {got[key]}",
                    )


def _bounded_expected_rows(
    tmpl: ChatTemplate,
    conv: Conversation,
    mode: str,
    placeholders: tuple[str, ...],
    timeout: float | None,
) -> tuple[list[tuple[str, Expected]], Counter[str], str | None]:
    """`expected_rows` within build's bounds (its --render-timeout, the same size cap)."""
    try:
        with bounded_row(tmpl, conv, timeout):
            return expected_rows(tmpl, conv, mode, placeholders)
    except RenderLimit as exc:
        return [], Counter(), f"{exc.reason}: {exc.message}"


_LENGTH_SLACK = 2
"""Tokens per generation a row's length may differ between tokenizing its pieces apart (what
verify counts) and build's encoding (a turn made context joins its neighbours in one piece,
which may merge a token or two at each edge): a `too_long` row is wrong only beyond that."""


def _check_length_rejects(
    p: Problems,
    tmpl: ChatTemplate,
    conv: Conversation,
    lines: list[dict[str, Any]],
    expected: list[tuple[str, Expected]],
    options: dict[str, Any],
) -> None:
    """`too_long` and `too_few_supervised_tokens` rejects (build decides both from a byte
    bound, untokenized, when it can) whose expected row the length rules keep when counted
    as the contract tokenizes it: the context and each generation in one piece apiece."""
    max_len = int(options.get("max_length") or 0)
    min_sup = int(options.get("min_supervised_tokens") or 0)
    truncating = options.get("truncation", "drop") != "drop"
    conv_id, server = conv.id, server_completion_ids(conv)
    by_id = dict(expected)
    for x in lines:
        why = x.get("reason")
        if why not in (reasons.TOO_LONG, reasons.TOO_FEW_SUPERVISED_TOKENS):
            continue
        rid = str(x.get("id") or conv_id)
        if why == reasons.TOO_LONG and truncating:  # build cuts such a row instead
            p.add("rejected as too_long under --truncation truncate, which cuts instead", rid)
            continue
        exp = by_id.get(rid) or (by_id.get(conv_id) if len(by_id) == 1 else None)
        if exp is None:
            continue
        pieces = _contract_pieces(tmpl, exp, server)
        n = sum(k for k, _ in pieces)
        slack = _LENGTH_SLACK * len(exp.gens)
        if why == reasons.TOO_LONG and max_len > 0 and n + slack <= max_len:
            p.add(
                "rejected as too_long but it fits --max-length",
                rid,
                f"{rid}: rejected as too_long, but its {n:,} tokens fit --max-length {max_len:,}",
            )
        if why != reasons.TOO_FEW_SUPERVISED_TOKENS:
            continue
        if not truncating and max_len > 0 and n - slack > max_len:
            continue  # too long as well: either reason is right
        kept = max_len - slack if truncating and max_len > 0 else n
        supervised, at = 0, 0
        for k, sup in pieces:  # inside the kept ones, however the context's edges merge
            if sup:
                supervised += max(0, min(k, kept - at))
            at += k
        if supervised >= min_sup:
            p.add(
                "rejected as too_few_supervised_tokens but it has enough",
                rid,
                f"{rid}: rejected as too_few_supervised_tokens, but it supervises"
                f" {supervised:,} tokens >= --min-supervised-tokens {min_sup:,}",
            )


def _contract_pieces(
    tmpl: ChatTemplate, exp: Expected, server: dict[int, list[int]] | None = None
) -> list[tuple[int, bool]]:
    """(tokens, supervised) of an expected row's pieces in order: context pieces and
    generations, each tokenized apart — a generation as the server's own ids when the row
    recorded ids that spell it (build uses them then), with the end-of-turn token they may
    leave off."""
    pieces: list[tuple[str | int, bool]] = []
    at = 0
    for start, gen, j in exp.gens:
        pieces.append((exp.text[at:start], False))
        kept = _kept_server_ids(tmpl, (server or {}).get(j), gen)
        pieces.append((gen if kept is None else len(kept), True))
        at = start + len(gen)
    pieces.append((exp.text[at:], False))
    texts = [t for t, _ in pieces if isinstance(t, str) and t]
    encoded = iter(tmpl.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else [])
    return [(t if isinstance(t, int) else len(next(encoded)) if t else 0, sup) for t, sup in pieces]


_DERIVED = frozenset(
    {
        reasons.NO_SUPERVISED_TURN,
        reasons.TEMPLATE_ERROR,
        reasons.TEMPLATE_DROPS_CONTENT,
        reasons.SPECIAL_TOKEN_IN_ANSWER,
        reasons.UNSUPPORTED_CONTENT,
        reasons.INTERNAL_ERROR,
    }
)
"""Row-step reasons verify re-derives: a turn row it expects cannot carry one (nor a draftset
bug's: verify derives that row cleanly)."""


def _check_turn_rejects(
    p: Problems, lines: list[dict[str, Any]], expected: list[tuple[str, Expected]]
) -> None:
    """`--turns each`: a turn's reject line beside its conversation's written rows, for a turn
    verify derives a row for, under a reason it re-derives, is a good row dropped."""
    ids = {rid for rid, _ in expected}
    for x in lines:
        rid, why = x.get("id"), x.get("reason")
        if rid in ids and why in _DERIVED:
            p.add(f"rejected as {why} but verify derives the turn's row", str(rid))


def _check_server_prompt_rejects(
    p: Problems,
    tmpl: ChatTemplate,
    conv: Conversation,
    lines: list[dict[str, Any]],
    expected: list[tuple[str, Expected]],
) -> None:
    """A `server_prompt_differs` line is right only when the generation server's prompt tokens
    for one of the row's answers are not its served prompt's, ``tokenizer(render(turns < j,
    generation prompt))`` (every supervised answer's context in a row: docs/semantics.md):
    where every recorded prompt equals that, build had nothing to reject."""
    flagged = [x for x in lines if x.get("reason") == reasons.SERVER_PROMPT_DIFFERS]
    if not flagged:
        return
    prompts = server_prompt_ids(conv)
    rows = dict(expected)
    for x in flagged:
        rid = str(x.get("id") or conv.id)
        exp = rows.get(rid)
        if exp is None:
            p.add("rejected as server_prompt_differs but verify derives no row for it", rid)
            continue
        recorded = [(start, prompts[j]) for start, _, j in exp.gens if j in prompts]
        texts = [exp.text[:start] for start, _ in recorded]
        served = tmpl.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        if all(list(a) == b for a, (_, b) in zip(served, recorded, strict=True)):
            p.add(
                "rejected as server_prompt_differs but the server's prompt tokens are every"
                " answer's served prompt",
                rid,
            )


def _kept_server_ids(tmpl: ChatTemplate, ids: list[int] | None, gen: str) -> list[int] | None:
    """The ids a generation server returned for a generation as a row may hold them: when they
    spell it ending in an end-of-turn id, or spell it but for that token, which is appended
    (a stop token spelled as text is no model's end); else None (the row holds tokenizer(G))."""
    if not ids or not in_vocabulary(ids, tmpl.backend):
        return None
    text = tmpl.backend.decode(ids, skip_special_tokens=False)
    if text == gen:
        return list(ids) if ids[-1] in _stop_ids(tmpl) else None
    tail = tmpl.tokenizer(gen[len(text) :], add_special_tokens=False)["input_ids"]
    if gen.startswith(text) and len(tail) == 1 and tail[0] in _stop_ids(tmpl):
        return [*ids, tail[0]]
    return None


def _check_rejection(
    p: Problems, conv: Conversation, lines: list[dict[str, Any]], expected: list, error: str | None
) -> None:
    """A conversation without rows was rightly rejected (as far as verify can re-derive)."""
    reasons_given = {x.get("reason") for x in lines}
    if reasons.NO_SUPERVISED_TURN in reasons_given and expected:
        p.add("rejected as no_supervised_turn but has a supervisable turn", conv.id)
    if reasons.TEMPLATE_ERROR in reasons_given and error is None and expected:
        p.add("rejected as template_error but the template renders", conv.id)
    if reasons.TEMPLATE_TOO_LARGE in reasons_given and error is None:
        # the cap depends on the row alone: under it, every render here stayed within it
        p.add("rejected as template_too_large but its renders stay within the size cap", conv.id)
    if reasons.INTERNAL_ERROR in reasons_given and error is None and expected:
        p.add("rejected as internal_error (a draftset bug) but verify derives its row", conv.id)
    if reasons.TEMPLATE_DROPS_CONTENT in reasons_given and error != DROPS_CONTENT:
        p.add("rejected as template_drops_content but every generation holds its text", conv.id)
    if reasons.SPECIAL_TOKEN_IN_ANSWER in reasons_given and error != SPECIAL_TOKEN_TEXT:
        p.add("rejected as special_token_in_answer but no answer holds such text", conv.id)
    if reasons.UNSUPPORTED_CONTENT in reasons_given and error != UNSERVABLE:
        p.add("rejected as unsupported_content but the row reads and renders", conv.id)


def _compare_pretokenized(
    tmpl: ChatTemplate,
    item: PreTokenized,
    row: dict[str, Any],
    opts: dict[str, Any],
    placeholders: tuple[str, ...],
) -> RowVerdict:
    v = RowVerdict()
    ids, mask = row["input_ids"], row["loss_mask"]
    n = len(ids)
    src_ids = np.asarray(item.input_ids, dtype=np.int64)
    src_mask = np.asarray(item.loss_mask, dtype=np.int8)
    for s, e in supervised_runs(mask):
        _leak(v, None, None, "", tmpl, ids[s:e], placeholders)
    if not (np.array_equal(src_ids[:n], ids) and np.array_equal(src_mask[:n], mask)):
        v.mask.append("pre-tokenized row differs from its source row")
    elif n < len(src_ids):
        if not (opts.get("truncation") == "truncate" and n == opts.get("max_length")):
            v.mask.append("pre-tokenized row is shorter than its source row")
        v.truncated = bool(n and mask[n - 1] == 1 and src_mask[n] == 1)
    return v


def _compare_context_counts(p: Problems, out: OutputSet, got: dict[str, Counter[str]]) -> None:
    counts = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in counts.items():
        want = {k: v for k, v in (c.get("context_turns_by_reason") or {}).items() if v}
        have = {k: v for k, v in (got.get(name) or Counter()).items() if v}
        if want != have:
            p.add(
                "context-only turn counts differ from the manifest",
                name,
                f"{name}: re-derived {have} != manifest {want}",
            )


def check_truncation(out: OutputSet, tmpl: ChatTemplate) -> CheckResult:
    """Rows whose last supervised run lacks the end-of-turn token, against the manifest."""
    p = Problems()
    eot = np.asarray(sorted(_stop_ids(tmpl)), dtype=np.int64)
    per_source: Counter[str] = Counter()
    examples: list[str] = []
    if out.readable:
        for b in iter_batches(out):
            if b.tokens.size != b.mask.size:
                continue
            m = b.mask == 1
            pos = np.arange(m.size)
            last_sup = np.full(len(b.lengths), -1, dtype=np.int64)
            rows = np.searchsorted(b.offsets, pos[m], side="right") - 1
            np.maximum.at(last_sup, rows, pos[m])
            has = last_sup >= 0
            bad = has.copy()
            bad[has] = ~np.isin(b.tokens[last_sup[has]], eot)
            for r in np.nonzero(bad)[0]:
                per_source[str(b.sources[r])] += 1
                if len(examples) < 5:
                    examples.append(str(b.ids[r]))
    counts = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in counts.items():
        if int(c.get("truncated") or 0) != per_source.get(name, 0):
            p.add(
                "rows without a final end-of-turn token != manifest truncated count",
                None,
                f"{name}: data {per_source.get(name, 0)} != manifest {c.get('truncated')}",
            )
    total = sum(per_source.values())
    if (out.manifest.get("totals") or {}).get("truncated") != total:
        p.add("totals.truncated != data", None)
    if total and out.options.get("truncation") != "truncate":
        p.add(
            f"{total} rows end inside an answer but the build used"
            f" --truncation {out.options.get('truncation')}",
            None,
        )
    if p.count:
        p.examples = examples
    return p.result("truncation", f"{total:,} rows end inside an answer, as the manifest says")
