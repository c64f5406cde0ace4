"""The row-level checks of `verify`: tokenizer, template, mask fidelity, leakage and truncation
(the pass over the sources that runs them, row identity and the manifest's records are
`records.py`'s).

Mask fidelity is re-derived *without* build's render/encode code path (no `plan_conversation`,
`derive_turn` or `encode_plans`). Build computes character spans and tokenizes segments; verify
goes the other way: it decodes the row's tokens, splits them into maximal supervised runs, and
compares each decoded run, and its character offset in the decoded row, with the generations it
renders itself from the source row (P = render(turns<j, generation prompt), F = render(turns<=j),
G = F after P up to and including the first end-of-turn token).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from draftset.core import reasons, rules
from draftset.core.digests import vocabulary_sample_sha256
from draftset.core.records import Conversation, PreTokenized
from draftset.mask.ambient import clock_kwargs, valid_now
from draftset.mask.limits import RenderLimit, bounded_row
from draftset.mask.reads import served_reads
from draftset.mask.render import (
    TurnEvidence,
    in_vocabulary,
    server_completion_ids,
    server_prompt_ids,
    # bound at import: a test that patches `render.turn_context_reason` for a lax build leaves
    # verify's derivation its rules (tests/checks/test_verify.py, `_lax_build`)
    turn_context_reason,
)
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
    supervised_runs,
)

# tokenizer, template text, kwargs as JSON, extra stop tokens, clock, serving engine, own template
_TEMPLATES: dict[tuple[str, str, str, tuple[str, ...], str | None, str, bool], ChatTemplate] = {}
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
    # built with the tokenizer's own template: a row with tools was its named 'tool_use' one's
    # (`served_template`: worked out here, not build's renderer's)
    own = not (manifest.get("options") or {}).get("chat_template_path")
    key = (tok, text, json.dumps(kwargs, sort_keys=True), extra, now, engine, own)
    if key not in _TEMPLATES:
        tmpl = _load(TemplateSpec(tok, text or None, kwargs, extra, now=now, serving_engine=engine))
        tmpl.verify_own = own  # type: ignore[attr-defined]
        _TEMPLATES[key] = tmpl
    return _TEMPLATES[key]


def _load(spec: TemplateSpec) -> ChatTemplate:
    """One template as verify renders it: never a named set's pair (``own_template`` False:
    which of them serves a row is `served_template`'s question), its stops and shape derived."""
    tmpl = ChatTemplate(replace(spec, own_template=False))
    tmpl.verify_stops = derive_stop_tokens(tmpl, spec.eot_tokens)  # type: ignore[attr-defined]
    template_shape(tmpl)  # probed (and the public render path compiled) outside any row's bound
    return tmpl


def served_template(tmpl: ChatTemplate, tools: list[dict[str, Any]] | None) -> ChatTemplate:
    """The template a server renders a row's request by, asked of transformers' own
    ``get_chat_template(None, tools=...)`` (what vLLM 0.33's `resolve_chat_template` calls)
    with the tools the request carries (an empty list is none: the row reads it so and no
    request sends it): a named set's 'tool_use' for a row with tools, its 'default' (the
    manifest's text) otherwise. A set built with --chat-template is rendered by that file
    alone, as vLLM renders every request by its --chat-template."""
    if not getattr(tmpl, "verify_own", False) or tmpl.harmony is not None:
        return tmpl
    own = getattr(tmpl.tokenizer, "chat_template", None)
    if not isinstance(own, dict):
        return tmpl
    try:
        text = tmpl.tokenizer.get_chat_template(None, tools=tools or None)
    except ValueError:  # a named set without a 'default': the manifest's text is judged
        return tmpl
    if not text or text == tmpl.template_text:
        return tmpl
    served: dict[str, ChatTemplate] | None = getattr(tmpl, "verify_served", None)
    if served is None:
        served = tmpl.verify_served = {}  # type: ignore[attr-defined]
    if text not in served:
        origin = f"'tool_use' of tokenizer {tmpl.spec.tokenizer}"
        served[text] = _load(replace(tmpl.spec, chat_template=text, origin=origin))
    return served[text]


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


def template_stops(tmpl: ChatTemplate) -> tuple[str, ...]:
    stops = getattr(tmpl, "verify_stops", None)
    if stops is None:
        stops = tmpl.verify_stops = derive_stop_tokens(tmpl)  # type: ignore[attr-defined]
    return stops


def _stop_ids(tmpl: ChatTemplate) -> frozenset[int]:
    """`template_stops` as ids, worked out once per template (asked for every supervised run)."""
    ids = getattr(tmpl, "verify_stop_ids", None)
    if ids is None:
        ids = frozenset(int(tmpl.tokenizer.convert_tokens_to_ids(t)) for t in template_stops(tmpl))
        tmpl.verify_stop_ids = ids  # type: ignore[attr-defined]
    return ids


def template_shape(tmpl: ChatTemplate) -> tuple[bool, bool, bool, bool]:
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
    if recorded and recorded != set(template_stops(tmpl)):
        p.add(
            "the manifest's end-of-turn tokens differ from the tokenizer files' stop tokens",
            "tokenizer",
            f"{sorted(recorded)} != {sorted(template_stops(tmpl))}",
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
        named = own if isinstance(own, dict) else {}
        if named:
            own = named.get("default")
        if own:
            origin = "the tokenizer's own template"
            if hashlib.sha256(str(own).encode()).hexdigest() != t.get("sha256"):
                p.add("the tokenizer's own chat template differs from the manifest's", "template")
        _check_tool_use(p, t, named)
        if t.get("tool_use"):
            origin += " and its 'tool_use' one"
    return p.result("template", f"sha256 {str(t.get('sha256'))[:16]}… matches {origin}")


def _check_tool_use(p: Problems, t: dict[str, Any], named: dict[str, Any]) -> None:
    """A named set's 'tool_use' template (rows with tools rendered by it): recorded in the
    manifest exactly when the tokenizer has one other than its 'default', its text hashing to
    the recorded sha256 and equal to the tokenizer's."""
    tool_use = named.get("tool_use")
    tool_use = tool_use if tool_use and tool_use != named.get("default") else None
    rec = t.get("tool_use") if isinstance(t.get("tool_use"), dict) else None
    if tool_use is None and rec is None:
        return
    if rec is None:
        p.add(
            "the tokenizer's named 'tool_use' template is not in the manifest",
            "template",
            "the tokenizer's chat templates are named, and the manifest records no 'tool_use'"
            " one (a set built before draftset rendered rows with tools by it, when they were"
            " rejected template_error): rebuild the set",
        )
        return
    digest = hashlib.sha256(str(rec.get("text") or "").encode()).hexdigest()
    if rec.get("sha256") != digest:
        p.add("'tool_use' template text does not hash to the manifest's sha256", "template")
    if tool_use is None:
        p.add("the manifest records a 'tool_use' template the tokenizer has not", "template")
    elif hashlib.sha256(str(tool_use).encode()).hexdigest() != rec.get("sha256"):
        p.add("the tokenizer's 'tool_use' chat template differs from the manifest's", "template")


# --- expected generations, derived from renders --------------------------------------------------
@dataclass
class Expected:
    """What one output row must be: its text and the generations supervised in it."""

    text: str
    gens: list[tuple[int, str, int]]  # (char offset in text, generation text, message index)
    context: Counter[str] = field(default_factory=Counter)
    # `all` under a template with {% generation %} tags: whether they mark exactly ``gens``
    tags_agree: bool | None = None


def _generation(tmpl: ChatTemplate, prompt: str, full: str) -> tuple[str | None, str | None]:
    """(generation, context reason): F after P up to and including the first stop token."""
    if not full.startswith(prompt):
        return None, reasons.TURN_NOT_GENERABLE
    best = -1
    for tok in template_stops(tmpl):
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
    if template_shape(tmpl)[0]:
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
    ends = [i + len(t) for t in template_stops(tmpl) if (i := head.find(t, at)) >= 0]
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
    if rules.special_token_in_answer(originals, _special_pattern(tmpl)) is not None:
        return [], Counter(), SPECIAL_TOKEN_TEXT
    harmony, engine = tmpl.harmony is not None, tmpl.serving_engine
    special = _special_pattern(tmpl)
    if rules.unservable(
        originals, conv.meta, tmpl.template_text, engine, harmony, special, conv.tools
    ):
        return [], Counter(), UNSERVABLE
    msgs = served_reads(
        originals, conv.meta, template_shape(tmpl), tmpl.template_text, engine, harmony
    )
    marks = rules.row_marks(originals, conv.meta)
    evidence = TurnEvidence.of(conv, placeholders)
    context: Counter[str] = Counter()
    rows: list[tuple[str, Expected]] = []
    if mode == "each":
        error = None
        for k, j in enumerate(asst):
            if j == 0:
                context[reasons.TURN_NO_PROMPT] += 1
                continue
            why = rules.never_supervised(originals, j, marks, placeholders)
            if why is not None:
                context[why] += 1
                continue
            try:  # in build's order: the error a template_error line holds is the first raised
                full = render(msgs[: j + 1])
                prompt = render(msgs[:j], True)
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
            if rules.drops_content(originals[j], gen, rules.answer_parts(conv.meta, j)):
                error = error or DROPS_CONTENT
                continue
            why = turn_context_reason(tmpl, evidence, originals[j], j, prompt, gen)
            if why is not None:
                context[why] += 1
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
            why = rules.never_supervised(originals, j, marks, placeholders)
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
                if rules.drops_content(originals[j], gen, rules.answer_parts(conv.meta, j)):
                    return [], context, DROPS_CONTENT
                why = turn_context_reason(tmpl, evidence, originals[j], j, prompt, gen)
                if why is not None:
                    context[why] += 1
                elif gens and gens[-1][0] + len(gens[-1][1]) == len(prompt):
                    context[reasons.TURN_FOLLOWS_ANSWER] += 1  # build's rule: runs never touch
                else:
                    gens.append((len(prompt), gen, j))
            else:
                context[reasons.TURN_HISTORY_RENDER_DIFFERS] += 1
    except Exception as exc:
        return [], context, _first_line(exc)
    if gens:
        exp = Expected(whole, gens)
        if mode == "all" and tmpl.has_generation_tags:
            exp.tags_agree = _tags_agree(tmpl, msgs, conv.tools, row_kwargs, exp)
        rows.append((conv.id, exp))
    return rows, context, None


def _tags_agree(
    tmpl: ChatTemplate,
    msgs: list,
    tools: list[dict[str, Any]] | None,
    row_kwargs: dict[str, Any] | None,
    exp: Expected,
) -> bool:
    """Whether the template's own ``{% generation %}`` tags (transformers' render with
    ``return_assistant_tokens_mask``) mark exactly the generations verify derived, over the
    same text: the row step's `generation_tags_agree` / `_disagree` diagnostic, re-derived
    from verify's spans (a render that fails counts as disagreeing, as build counts it)."""
    try:
        text, spans = tmpl.generation_tag_spans(msgs, tools, row_kwargs)
    except Exception:
        return False
    return text == exp.text and spans == [(s, s + len(gen)) for s, gen, _ in exp.gens]


DROPS_CONTENT = "the template's render of an assistant turn does not contain its text or tools"
SPECIAL_TOKEN_TEXT = "an assistant answer holds the text of a special token"
UNSERVABLE = "a row the serving engine would not render as given (rules.unservable)"


def _special_pattern(tmpl: ChatTemplate) -> re.Pattern[str] | None:
    """The special tokens' texts, from the tokenizer's public ``added_tokens_decoder``."""
    pattern = getattr(tmpl, "verify_special_pattern", False)
    if pattern is False:
        added = tmpl.tokenizer.added_tokens_decoder.values()
        pattern = rules.special_token_pattern({str(t) for t in added if t.special})
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
    decoded = _decode_runs(tmpl, ids, runs)
    if decoded is None:
        v.mask.append("a supervised run boundary splits a character")
        return v
    text, pieces = decoded
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
    matched = _match_runs(v, tmpl, ids, runs, pieces, exp, conv, demoted, placeholders)
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


def _decode_runs(
    tmpl: ChatTemplate, ids: np.ndarray, runs: list[tuple[int, int]]
) -> tuple[str, list[tuple[int, int, str]]] | None:
    """The row's text and its supervised runs, (start char, end char, decoded run) each:
    context and supervised segments decoded in turn, their lengths giving each run's offset.
    None when a run boundary splits a character (the pieces do not join into the row's text)."""
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
        return None
    return text, pieces


def _match_runs(
    v: RowVerdict,
    tmpl: ChatTemplate,
    ids: np.ndarray,
    runs: list[tuple[int, int]],
    pieces: list[tuple[int, int, str]],
    exp: Expected,
    conv: Conversation,
    demoted: set[int],
    placeholders: tuple[str, ...],
) -> set[int]:
    """Each supervised run judged against the expected generation starting where it starts
    (its served prompt, its end-of-turn token, the tokens the model emitted, leakage); the
    starts of the generations matched."""
    server = server_completion_ids(conv)
    prompts = server_prompt_ids(conv)
    by_start = {start: (gen, j) for start, gen, j in exp.gens}
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
        v.mask.append(_classify(start, end, run, exp, conv, runs[i]))
        _leak(v, conv, None, run, tmpl, ids[s_tok:e_tok], placeholders)
    return matched


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
    " (the server's own ids where they spell it, as build keeps them,"
    " else tokenizer(G) in one piece)"
)


def _emitted_tokens(
    tmpl: ChatTemplate,
    run_ids: np.ndarray,
    gen: str,
    server: list[int] | None,
    prefix: bool = False,
) -> bool:
    """Whether a supervised run (whose text is its generation's) holds the tokens the model
    emits, as build writes them: the ids the generation server returned for it when they spell
    it (with the end-of-turn token it may leave off: build keeps them), else ``tokenizer(G)``
    in one piece (public path). Exactly one of the two: a run re-encoded where build keeps the
    server's ids is not build's (before, either passed). A run cut by truncation is judged as
    a prefix. Equal text is not enough: `</think>` spelled `</`, `think`, `>` decodes the same
    and is not what the model emits."""
    have = [int(x) for x in run_ids]
    kept = kept_server_ids(tmpl, server, gen)
    want = kept if kept is not None else tmpl.tokenizer(gen, add_special_tokens=False)["input_ids"]
    want = list(want)
    return want[: len(have)] == have if prefix else have == want


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


def _classify(
    start: int, end: int, run: str, exp: Expected, conv: Conversation, tokens: tuple[int, int]
) -> str:
    """A readable reason for a supervised run that is not an expected generation, with the
    row's tokens it spans."""
    where = f"tokens {tokens[0]}..{tokens[1] - 1} of the row"
    for gstart, gen, j in exp.gens:
        if start < gstart + len(gen) and gstart < end:
            return (
                f"supervised run overlaps turn {j} but is not its generation: {where},"
                f" {_short(run)}"
            )
    for m in conv.messages:
        content = str(m.get("content") or "").strip()
        if (
            m["role"] != "assistant"
            and len(content) >= 2
            and (content in run or run.strip() in content)
        ):
            return f"{m['role']} text is supervised: {where}, {_short(run)}"
    return (
        "supervised run outside every expected generation (context or template markup):"
        f" {where}, {_short(run)}"
    )


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[: n - 1] + "…")


def _decoded_answer(tmpl: ChatTemplate, run_ids: np.ndarray) -> str:
    """A run's answer text from its tokens alone: special tokens and think tags dropped."""
    text = tmpl.backend.decode([int(i) for i in run_ids], skip_special_tokens=True)
    for tok in template_stops(tmpl):
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
    if rules.is_placeholder_answer(msg, placeholders):
        text = _short(rules.answer_text(msg))
        v.leakage.append(f"placeholder answer supervised (turn {j}): {text}")
        return
    if rules.copies_its_prompt(conv.messages, j):
        text = _short(str(msg.get("content") or "").strip())
        v.leakage.append(f"answer of turn {j} is a verbatim copy of its prompt: {text}")


# --- one input row's checks, as the pass over the sources (records.py) asks them -----------------


def check_rows(
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


def bounded_expected_rows(
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


def check_length_rejects(
    p: Problems,
    tmpl: ChatTemplate,
    conv: Conversation,
    lines: list[dict[str, Any]],
    expected: list[tuple[str, Expected]],
    options: dict[str, Any],
) -> None:
    """`too_long` and `too_few_supervised_tokens` rejects (build decides both from a byte
    bound, untokenized, when it can) whose expected row the length rules keep when counted
    as build's token rule encodes it (`_contract_layout`), exactly."""
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
        if not truncating and max_len > 0 and _tokens_at_least(tmpl, exp, max_len) > max_len:
            continue  # too long by its bytes alone, as build counts: right, and never tokenized
        if why == reasons.TOO_LONG:
            n = _contract_layout(tmpl, exp, server)[0]
            if max_len > 0 and n <= max_len:
                p.add(
                    "rejected as too_long but it fits --max-length",
                    rid,
                    f"{rid}: rejected as too_long, but its {n:,} tokens fit"
                    f" --max-length {max_len:,}",
                )
            continue
        n, runs = _contract_layout(tmpl, exp, server)
        if not truncating and max_len > 0 and n > max_len:
            continue  # too long as well: either reason is right
        kept = min(n, max_len) if truncating and max_len > 0 else n
        supervised = sum(max(0, min(k, kept - at)) for at, k in runs)  # those inside the cut
        if supervised >= min_sup:
            p.add(
                "rejected as too_few_supervised_tokens but it has enough",
                rid,
                f"{rid}: rejected as too_few_supervised_tokens, but it supervises"
                f" {supervised:,} tokens >= --min-supervised-tokens {min_sup:,}",
            )


def _tokens_at_least(tmpl: ChatTemplate, exp: Expected, max_len: int) -> int:
    """A lower bound of `_contract_layout`'s length from the text's UTF-8 bytes alone (build's
    `token_bytes_bound` rule), 0 when unknown or when the text is too short to matter: a row of
    50 MB rejected `too_long` was tokenized whole here (3.5 GB, a minute) only to prove what its
    length proves. Sound whichever generation is the last supervised one (the tokens of its
    prompt and of the text after it are each at least their bytes over the bound) and when
    the server's ids stand for a generation (counted as none)."""
    if len(exp.text) * 4 <= 16 * max_len:  # no real tokenizer's bound is under 16 bytes
        return 0
    per = tmpl.token_bytes  # worked out once per template, as build's row step asks it
    if not per:
        return 0
    total = _utf8_len(exp.text)
    best = -(-total // per)  # no generation supervised: the text in one piece
    before, at = 0, 0
    for start, gen, _ in exp.gens:
        if start >= at:
            before += _utf8_len(exp.text[at:start])
        else:
            before = _utf8_len(exp.text[:start])
        at = start
        after = total - before - _utf8_len(gen)
        best = min(best, -(-before // per) + -(-after // per))
    return best


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _contract_layout(
    tmpl: ChatTemplate, exp: Expected, server: dict[int, list[int]] | None = None
) -> tuple[int, list[tuple[int, int]]]:
    """An expected row as build's rule encodes it (docs/semantics.md, the token rule
    `_served_context` judges written rows by): its length, and where each generation it
    supervises starts and how many tokens it has. The tokens before each supervised
    generation are ``tokenizer(P)`` in one piece; a generation whose ``tokenizer(P)`` is not
    the row's tokens so far plus the context since in one piece is context
    (`history_tokens_differ`); each supervised generation is its own tokens (the server's when
    build kept them); the text after the last one is encoded in one piece. Before, verify
    counted the pieces apart with 2 tokens a generation to spare, and counted a
    `history_tokens_differ` turn as supervised."""
    tok = tmpl.tokenizer
    have: list[int] = []  # the row's tokens up to the end of the last supervised generation
    end = 0  # and where that generation ends in the text
    runs: list[tuple[int, int]] = []
    for start, gen, j in exp.gens:
        want = list(tok(exp.text[:start], add_special_tokens=False)["input_ids"])
        if have and have + tok(exp.text[end:start], add_special_tokens=False)["input_ids"] != want:
            continue  # history_tokens_differ: this generation joins the context
        kept = kept_server_ids(tmpl, (server or {}).get(j), gen)
        gen_ids = kept if kept is not None else tok(gen, add_special_tokens=False)["input_ids"]
        runs.append((len(want), len(gen_ids)))
        have = want + list(gen_ids)
        end = start + len(gen)
    return len(have) + len(tok(exp.text[end:], add_special_tokens=False)["input_ids"]), runs


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


def check_turn_rejects(
    p: Problems, lines: list[dict[str, Any]], expected: list[tuple[str, Expected]]
) -> None:
    """`--turns each`: a turn's reject line beside its conversation's written rows, for a turn
    verify derives a row for, under a reason it re-derives, is a good row dropped."""
    ids = {rid for rid, _ in expected}
    for x in lines:
        rid, why = x.get("id"), x.get("reason")
        if rid in ids and why in _DERIVED:
            p.add(f"rejected as {why} but verify derives the turn's row", str(rid))


def check_server_prompt_rejects(
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


def kept_server_ids(tmpl: ChatTemplate, ids: list[int] | None, gen: str) -> list[int] | None:
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


def check_rejection(
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


_SENTINELS = frozenset({DROPS_CONTENT, SPECIAL_TOKEN_TEXT, UNSERVABLE})
_BOUND_ERRORS = (f"{reasons.TEMPLATE_TIMEOUT}: ", f"{reasons.TEMPLATE_TOO_LARGE}: ")


def check_reject_messages(
    p: Problems,
    tmpl: ChatTemplate,
    conv: Conversation,
    lines: list[dict[str, Any]],
    re_derived: tuple[list[tuple[str, Expected]], Counter[str], str | None],
) -> None:
    """The `message` of a rejected conversation's row-step reject line, where it is a function
    of the row that verify re-derives (``re_derived``: `expected_rows`' rows, context counts
    and error): a `template_error` line holds the template's own error text (the first one its
    renders raise), a `no_supervised_turn` line the context-only turn counts, a
    `special_token_in_answer` or `unsupported_content` line what the row holds that no server
    renders as given. Only where verify re-derives the same reason (else `check_rejection`
    names the reason)."""
    expected, context, error = re_derived
    originals = conv.messages
    asst = [i for i, m in enumerate(originals) if m["role"] == "assistant"]
    originals = originals[: asst[-1] + 1] if asst else originals
    want: dict[str, str] = {}
    if error is not None and error not in _SENTINELS and not error.startswith(_BOUND_ERRORS):
        want[reasons.TEMPLATE_ERROR] = error
    if error is None and not expected:
        want[reasons.NO_SUPERVISED_TURN] = rules.no_supervised_turn_message(context)
    leak = None
    if error == SPECIAL_TOKEN_TEXT:
        leak = rules.special_token_in_answer(originals, _special_pattern(tmpl))
    if leak is not None:
        want[reasons.SPECIAL_TOKEN_IN_ANSWER] = rules.special_token_in_answer_message(leak)
    if error == UNSERVABLE:
        harmony, engine = tmpl.harmony is not None, tmpl.serving_engine
        special = _special_pattern(tmpl)
        problem = rules.unservable(
            originals, conv.meta, tmpl.template_text, engine, harmony, special, conv.tools
        )
        if problem is not None:
            want[reasons.UNSUPPORTED_CONTENT] = problem
    seen: set[str] = set()
    for x in lines:  # the first line of a reason (--turns each: the first turn's)
        why = str(x.get("reason"))
        if why in seen or why not in want:
            continue
        seen.add(why)
        if x.get("message") != want[why]:
            rid = str(x.get("id") or conv.id)
            p.add(
                "rejects.jsonl line's message differs from the re-derived reject",
                rid,
                f"{rid}: the {why} line says {x.get('message')!r}; re-derived {want[why]!r}",
            )


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


def check_truncation(out: OutputSet, tmpl: ChatTemplate) -> CheckResult:
    """Rows whose last supervised run lacks the end-of-turn token, against the manifest."""
    p = Problems()
    eot = np.asarray(sorted(_stop_ids(tmpl)), dtype=np.int64)
    per_source: Counter[str] = Counter()
    at_limit = 0  # of them, rows of exactly --max-length tokens: only those can be cuts
    limit = int(out.options.get("max_length") or -1)
    first: dict[str, tuple[str, int]] = {}  # source -> its first such row (id, set row)
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
                at_limit += int(b.lengths[r]) == limit
                first.setdefault(str(b.sources[r]), (str(b.ids[r]), b.start_row + int(r)))
                if len(examples) < 5:
                    examples.append(str(b.ids[r]))
    counts = (out.manifest.get("counts") or {}).get("per_source") or {}
    for name, c in counts.items():
        if int(c.get("truncated") or 0) != per_source.get(name, 0):
            hit = first.get(name)
            where = f"; the first: {hit[0]!r} (row {hit[1]})" if hit is not None else ""
            p.add(
                "rows without a final end-of-turn token != manifest truncated count",
                None,
                f"{name}: data {per_source.get(name, 0)} != manifest {c.get('truncated')}{where}",
            )
    total = sum(per_source.values())
    if (out.manifest.get("totals") or {}).get("truncated") != total:
        p.add("totals.truncated != data", None)
    # a pre-tokenized row's own mask may end inside an answer at any length (trl's tags
    # supervise the newline after <|im_end|>): only a row at the limit can be build's cut
    if at_limit and out.options.get("truncation") != "truncate":
        p.add(
            f"{at_limit} rows of --max-length tokens end inside an answer but the build used"
            f" --truncation {out.options.get('truncation')}",
            None,
        )
    if p.count:
        p.examples = examples
    return p.result("truncation", f"{total:,} rows end inside an answer, as the manifest says")
