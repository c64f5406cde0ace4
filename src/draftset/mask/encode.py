"""Encode: segments → token ids + loss mask, then length rules.

Each segment is encoded on its own (``add_special_tokens=False``: the template already wrote
BOS and friends) and the pieces are concatenated. That is how serving tokenizes: the server
encodes the prompt, the model emits the generation token by token, so no token crosses the
prompt/generation edge. All segments of a batch go through one batched call of the Rust
tokenizer: `encode_batch_fast`, which skips the character offsets draftset never reads (same
ids, tested against `encode_batch`; ~1.7x faster).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import accumulate, chain
from typing import Any, Literal

import numpy as np

from draftset.core import defaults, reasons
from draftset.core.records import PreTokenized, Reject
from draftset.mask.render import RowPlan

Truncation = Literal["drop", "truncate"]


@dataclass(slots=True)
class EncodedRow:
    """One finished training row."""

    id: str
    source: str
    row: int
    input_ids: np.ndarray  # int32
    loss_mask: np.ndarray  # int8, 1 = supervised
    truncated: bool = False  # the last supervised run lost its end-of-turn token


@dataclass(slots=True)
class LengthRules:
    max_length: int = defaults.MAX_LENGTH
    truncation: Truncation = defaults.TRUNCATION
    min_supervised_tokens: int = defaults.MIN_SUPERVISED_TOKENS


def _encode_batch(backend: Any) -> Any:
    """The batched encoder without offsets (tokenizers >= 0.20), else the plain one."""
    return getattr(backend, "encode_batch_fast", None) or backend.encode_batch


@dataclass(frozen=True, slots=True)
class TooLong:
    """A plan rejected unencoded: its text alone proves more than ``at_least`` tokens."""

    at_least: int


@dataclass(frozen=True, slots=True)
class NothingSupervised:
    """A plan rejected unencoded: truncation keeps only context (its leading unsupervised
    segments alone fill ``--max-length``)."""


# How many times fewer UTF-8 bytes a normalizer can leave (e.g. NFKC: 4-byte 𝐀 → 1-byte A;
# NFC: a 3-code-point Hangul syllable, 9 → 3 bytes). Measured over every code point in
# tests/test_bounds.py; a normalizer not listed here turns the bound off.
_NORMALIZER_SHRINK = {"NFC": 4, "NFD": 4, "NFKC": 4, "NFKD": 4, "Prepend": 1}
_KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Punctuation", "Metaspace"}


def token_bytes_bound(backend: Any) -> int | None:
    """Most UTF-8 bytes of a segment's text one token can stand for, or None when unknown.

    Then a segment of B bytes has at least ceil(B / bound) tokens. Sound only for pipelines
    where every byte ends up in some token and no token stands for unboundedly many: a BPE
    model (no fused unknown tokens), normalizers that shrink text at most by a known factor,
    pre-tokenizers that drop nothing, added tokens that strip no whitespace.
    """
    try:
        model = backend.model
        if type(model).__name__ != "BPE" or (model.unk_token and model.fuse_unk):
            return None
        shrink = _normalizer_shrink(backend.normalizer)
        byte_level = _pre_tokenizer_keeps_all(backend.pre_tokenizer)
        if shrink is None or byte_level is None:
            return None
        vocab = backend.get_vocab(with_added_tokens=False)
        # byte-level vocabularies spell one byte per character; others in UTF-8
        longest = max((len(t) if byte_level else len(t.encode()) for t in vocab), default=1)
        for tok in backend.get_added_tokens_decoder().values():
            if tok.lstrip or tok.rstrip:  # such a token also swallows whitespace around it
                return None
            longest = max(longest, len(tok.content.encode()))
        if model.unk_token:
            longest = max(longest, 4)  # an unknown character: one token, up to 4 bytes
        return longest * shrink
    except (AttributeError, TypeError, ValueError):
        return None


def _normalizer_shrink(normalizer: Any) -> int | None:
    if normalizer is None:
        return 1
    return _shrink_of(json.loads(normalizer.__getstate__()))


def _shrink_of(spec: dict[str, Any]) -> int | None:
    kind = spec.get("type")
    if kind == "Sequence":
        total = 1
        for part in spec.get("normalizers") or []:
            f = _shrink_of(part)
            if f is None:
                return None
            total *= f
        return total
    if kind == "Replace":  # e.g. " " → "▁": keeps or grows the text
        pattern, content = spec.get("pattern") or {}, spec.get("content")
        text = pattern.get("String")
        if isinstance(text, str) and isinstance(content, str):
            return 1 if len(content.encode()) >= len(text.encode()) else None
        return None
    return _NORMALIZER_SHRINK.get(str(kind))


def _pre_tokenizer_keeps_all(pre: Any) -> bool | None:
    """None when a pre-tokenizer may drop text; else whether it maps bytes to characters."""
    if pre is None:
        return False
    return _keeps(json.loads(pre.__getstate__()))


def _keeps(spec: dict[str, Any]) -> bool | None:
    kind = spec.get("type")
    if kind == "Sequence":
        byte_level = False
        for part in spec.get("pretokenizers") or []:
            r = _keeps(part)
            if r is None:
                return None
            byte_level = byte_level or r
        return byte_level
    if kind not in _KEEPING_PRE_TOKENIZERS or spec.get("behavior") == "Removed":
        return None
    return kind == "ByteLevel"


def _utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def encode_plans(
    backend: Any,
    plans: list[RowPlan],
    rules: LengthRules | None = None,
    token_bytes: int | None = None,
) -> list[tuple[np.ndarray, np.ndarray] | TooLong | NothingSupervised]:
    """Token ids and mask for each plan; one batched tokenizer call for all segments.

    With ``rules`` and ``token_bytes`` (`token_bytes_bound`), segments that cannot change the
    verdict are not tokenized: a row whose text alone proves more than ``--max-length`` tokens
    is `TooLong` under ``drop``; under ``truncate`` the segments after the one that proves the
    cut are skipped (the kept tokens and the cut are the same), and a row whose kept tokens
    are all context is `NothingSupervised`.

    A row with several supervised turns (``--turns all``) keeps a later turn supervised only
    when the row's tokens before it equal its served prompt tokenized in one piece
    (`_served_context`); what that takes is tokenized in a second batched call.
    """
    needed = [_needed_segments(plan, rules, token_bytes) for plan in plans]
    texts = [
        text
        for plan, n in zip(plans, needed, strict=True)
        if isinstance(n, int)
        for i, (text, _) in enumerate(plan.segments[:n])
        if i not in plan.server_ids
    ]
    encodings = _encode_batch(backend)(texts, add_special_tokens=False) if texts else []
    parts: list[list[list[int]] | None] = []
    k = 0
    for plan, n in zip(plans, needed, strict=True):
        if not isinstance(n, int):
            parts.append(None)
            continue
        ids_parts: list[list[int]] = []
        for i in range(n):
            if i in plan.server_ids:  # the server's own tokens for this generation
                ids_parts.append(plan.server_ids[i])
            else:
                ids_parts.append(encodings[k].ids)
                k += 1
        parts.append(ids_parts)
    split = _added_token_split(backend)
    checks = [
        _prompt_checks(plan, p, split) if p is not None and plan.supervised_turns > 1 else []
        for plan, p in zip(plans, parts, strict=True)
    ]
    tails = [text for c in checks for _, _, _, text in c]
    tail_enc = _encode_batch(backend)(tails, add_special_tokens=False) if tails else []
    out: list[tuple[np.ndarray, np.ndarray] | TooLong | NothingSupervised] = []
    t = 0
    for plan, n, ids_parts, c in zip(plans, needed, parts, checks, strict=True):
        if ids_parts is None:
            out.append(n)  # type: ignore[arg-type]
            continue
        if c:
            want = {
                turn: (skip, end, tail_enc[t + x].ids) for x, (turn, skip, end, _) in enumerate(c)
            }
            t += len(c)
            checked = _served_context(backend, plan, ids_parts, want, rules, token_bytes)
            if not isinstance(checked, list):
                out.append(checked)
                continue
            ids_parts = checked
        lengths = [len(ids) for ids in ids_parts]
        flags = [1 if supervised else 0 for _, supervised in plan.segments[: len(ids_parts)]]
        input_ids = np.fromiter(chain.from_iterable(ids_parts), dtype=np.int32, count=sum(lengths))
        loss_mask = np.repeat(np.asarray(flags, dtype=np.int8), lengths)
        out.append((input_ids, loss_mask))
    return out


@dataclass(frozen=True, slots=True)
class _AddedSplit:
    """A tokenizer whose added tokens split text for good: ``enc(A + tok + B)`` is
    ``enc(A) + [tok] + enc(B)`` (ids of the added tokens -> their text)."""

    content: dict[int, str]


_SPLITS: dict[int, tuple[Any, _AddedSplit | None]] = {}
_SPLIT_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Punctuation"}


def _added_token_split(backend: Any) -> _AddedSplit | None:
    """`_AddedSplit` when the tokenizer provably splits at its added tokens, else None.

    The Rust tokenizer cuts the text at added tokens first and encodes the pieces one by one,
    so a prompt's tokens after an added token depend on the text after it alone — unless an
    added token strips whitespace around it or is matched after normalization, or the
    pre-tokenizer treats the first piece differently (Metaspace's ``prepend_scheme``,
    ByteLevel's ``add_prefix_space``). Then None: prompts are tokenized whole.
    """
    key = id(backend)
    hit = _SPLITS.get(key)
    if hit is not None and hit[0] is backend:
        return hit[1]
    result: _AddedSplit | None = None
    try:
        added = backend.get_added_tokens_decoder()
        plain = all(
            not (t.lstrip or t.rstrip or t.single_word)
            and (not t.normalized or backend.normalizer is None)
            for t in added.values()
        )
        pre = backend.pre_tokenizer
        if plain and pre is not None and _splits_alike(json.loads(pre.__getstate__())):
            result = _AddedSplit({i: t.content for i, t in added.items()})
    except (AttributeError, TypeError, ValueError):
        result = None
    _SPLITS[key] = (backend, result)
    return result


def _splits_alike(spec: dict[str, Any]) -> bool:
    kind = spec.get("type")
    if kind == "Sequence":
        return all(_splits_alike(p) for p in spec.get("pretokenizers") or [])
    if kind == "ByteLevel":
        return not spec.get("add_prefix_space")
    return kind in _SPLIT_PRE_TOKENIZERS


def _prompt_checks(
    plan: RowPlan, ids_parts: list[list[int]], split: _AddedSplit | None
) -> list[tuple[int, int, int | None, str]]:
    """What to tokenize to judge each supervised turn after the first: (message index, tokens
    of the row to skip, text). The served prompt ``P`` of turn i is the row's text before it.
    Its tokens up to the previous supervised turn p are the row's (judged before, or p is the
    first); when the tokenizer splits at added tokens (`_added_token_split`), ``enc(P)`` is
    the row's tokens through the last added token before p, then ``enc`` of the text after it:
    only that text is tokenized, and only up to the first added token of p's generation (the
    generation's end-of-turn token is one, so the context after it is tokenized as the prompt
    tokenizes it): the piece around p's prompt/generation edge, not the whole history again.
    Returns (message index, row tokens to skip, row tokens to stop at or None, text)."""
    out: list[tuple[int, int, int | None, str]] = []
    prev: int | None = None
    for i, (_, supervised) in enumerate(plan.segments[: len(ids_parts)]):
        if not supervised:
            continue
        if prev is None:
            prev = i
            continue
        skip, cut_seg, cut_char, end, stop, gen_chars = 0, 0, 0, None, i, 0
        if split is not None:
            found = _last_added(plan, ids_parts, prev, split)
            if found is not None:
                cut_seg, cut_char, skip = found
            first = _first_added(plan, ids_parts, prev, split)
            if found is not None and first is not None:
                # the rest splits at added tokens alike: the generation's end-of-turn token,
                # then the context tokenized on its own; only the edge piece can differ
                gen_chars, gen_tokens = first
                end = sum(len(p) for p in ids_parts[:prev]) + gen_tokens
                stop = prev
        text = plan.segments[cut_seg][0][cut_char:] + "".join(
            t for t, _ in plan.segments[cut_seg + 1 : stop]
        )
        if end is not None:
            text += plan.segments[prev][0][:gen_chars]
        out.append((plan.turn_of_segment[i], skip, end, text))
        prev = i
    return out


def _first_added(
    plan: RowPlan, ids_parts: list[list[int]], gen: int, split: _AddedSplit
) -> tuple[int, int] | None:
    """Where the first added token of generation segment ``gen`` starts: (characters, tokens)
    into it. None for server ids (the model's own tokens may spell text differently from the
    prompt's tokenization: the whole prompt tail is judged) or without an added token."""
    if gen in plan.server_ids:
        return None
    text = plan.segments[gen][0]
    for x, tok in enumerate(ids_parts[gen]):
        content = split.content.get(tok)
        if content is not None:
            at = text.find(content)
            return (at, x) if at >= 0 else None
    return None


def _last_added(
    plan: RowPlan, ids_parts: list[list[int]], before: int, split: _AddedSplit
) -> tuple[int, int, int] | None:
    """The last added token in the context segments before segment ``before``: (segment,
    character just after it in that segment's text, row tokens through it)."""
    offsets = list(accumulate((len(p) for p in ids_parts[:before]), initial=0))
    for q in range(before - 1, -1, -1):
        if plan.segments[q][1]:
            continue  # a generation: its text is not the prompt's own
        ids = ids_parts[q]
        for x in range(len(ids) - 1, -1, -1):
            content = split.content.get(ids[x])
            if content is None:
                continue
            at = plan.segments[q][0].rfind(content)
            if at < 0:
                return None
            return q, at + len(content), offsets[q] + x + 1
    return None


def _served_context(
    backend: Any,
    plan: RowPlan,
    ids_parts: list[list[int]],
    want: dict[int, tuple[int, int | None, list[int]]],
    rules: LengthRules | None,
    token_bytes: int | None,
) -> list[list[int]] | TooLong | NothingSupervised:
    """The token-level context rule (docs/semantics.md, turn modes).

    The server tokenizes a turn's prompt in one piece; the row holds earlier generations
    tokenized as the model emitted them. Where the two differ (same text: Qwen3.6's ``<think>``
    ``\\n`` + ``\\n</think>`` of an empty-reasoning history turn is ``<think>`` ``\\n\\n``
    ``</think>`` in the next prompt), the later turn was never generated after these tokens:
    it becomes context (`RowPlan.demote`), its text re-tokenized with its neighbours, and the
    turns after it are judged on the new tokens (their prompts tokenized whole). ``want``:
    message index -> (row tokens to skip, to stop at, the prompt's tokens there)
    (`_prompt_checks`).
    The first supervised turn's context is its prompt's own encoding, so a row never loses all
    its turns here. Under ``truncate`` a turn starting at or past the cut is not judged.
    """
    first = True
    prefix: list[int] = []
    i = 0
    while i < len(ids_parts):
        supervised = plan.segments[i][1]
        if supervised and not first:
            cut = rules is not None and rules.truncation == "truncate"
            if cut and len(prefix) >= rules.max_length:  # type: ignore[union-attr]
                break  # the turn starts past the cut: not in the row
            turn = plan.turn_of_segment[i]
            skip, end, tail = want.get(turn) or (0, None, None)
            if tail is None:  # after a demotion: the whole prompt, tokenized now
                text = "".join(t for t, _ in plan.segments[:i])
                tail = backend.encode(text, add_special_tokens=False).ids
            if prefix[skip:end] != tail:
                start = i - 1 if i > 0 and not plan.segments[i - 1][1] else i
                if start < i:
                    del prefix[len(prefix) - len(ids_parts[start]) :]
                plan.demote(i)
                want = {}  # segments and tokens changed: later prompts are tokenized whole
                n = _needed_segments(plan, rules, token_bytes)
                if not isinstance(n, int):
                    return n
                redo = [
                    None if j in plan.server_ids else text
                    for j, (text, _) in enumerate(plan.segments[start:n], start)
                ]
                todo = [t for t in redo if t is not None]
                fresh = iter(_encode_batch(backend)(todo, add_special_tokens=False) if todo else [])
                ids_parts = ids_parts[:start] + [
                    plan.server_ids[j] if t is None else next(fresh).ids
                    for j, t in enumerate(redo, start)
                ]
                i = start
                continue
        first = first and not supervised
        prefix.extend(ids_parts[i])
        i += 1
    return ids_parts


def _needed_segments(
    plan: RowPlan, rules: LengthRules | None, token_bytes: int | None
) -> int | TooLong | NothingSupervised:
    """How many leading segments decide the row (all, unless the length rule is already met)."""
    n = len(plan.segments)
    if rules is None or token_bytes is None:
        return n
    limit = rules.max_length
    at_least = 0
    context_only = True  # no supervised segment so far
    for i, (text, supervised) in enumerate(plan.segments):
        context_only = context_only and not supervised
        ids = plan.server_ids.get(i)
        at_least += len(ids) if ids is not None else -(-_utf8_len(text) // token_bytes)
        if (
            rules.truncation == "truncate"
            and context_only
            and at_least >= limit
            and rules.min_supervised_tokens > 0
        ):
            return NothingSupervised()  # the kept tokens are all context
        if rules.truncation == "truncate" and at_least > limit:
            return i + 1  # tokens 0..limit (the cut and the one after it) lie in these
    if rules.truncation == "drop" and at_least > limit:
        return TooLong(at_least)
    return n


def finish_row(
    plan: RowPlan,
    encoded: tuple[np.ndarray, np.ndarray] | TooLong | NothingSupervised,
    rules: LengthRules,
) -> EncodedRow | Reject:
    """The length rules on an encoded plan; a `TooLong` one is rejected as it would have been."""
    if isinstance(encoded, NothingSupervised):
        return Reject(
            plan.source,
            plan.row,
            plan.id,
            reasons.TOO_FEW_SUPERVISED_TOKENS,
            f"0 supervised tokens < --min-supervised-tokens {rules.min_supervised_tokens}"
            " (the first --max-length tokens are all context; counted, not tokenized)",
        )
    if isinstance(encoded, TooLong):
        return Reject(
            plan.source,
            plan.row,
            plan.id,
            reasons.TOO_LONG,
            f"at least {encoded.at_least} tokens > --max-length {rules.max_length}"
            " (counted from the text's length, not tokenized)",
        )
    ids, mask = encoded
    return apply_length_rules(plan.source, plan.row, plan.id, ids, mask, rules)


def apply_length_rules(
    source: str,
    row: int,
    row_id: str,
    input_ids: np.ndarray,
    loss_mask: np.ndarray,
    rules: LengthRules,
) -> EncodedRow | Reject:
    """Drop or cut over-long rows and reject rows with too little supervision."""
    truncated = False
    n = int(input_ids.shape[0])
    if n > rules.max_length:
        if rules.truncation == "drop":
            return Reject(
                source,
                row,
                row_id,
                reasons.TOO_LONG,
                f"{n} tokens > --max-length {rules.max_length}",
            )
        cut = rules.max_length
        # every supervised run ends with its end-of-turn token, so a run is cut open exactly
        # when the cut falls strictly inside it
        truncated = bool(loss_mask[cut - 1] == 1 and loss_mask[cut] == 1)
        input_ids = input_ids[:cut]
        loss_mask = loss_mask[:cut]
    supervised = int(loss_mask.sum(dtype=np.int64))
    if supervised < rules.min_supervised_tokens:
        return Reject(
            source,
            row,
            row_id,
            reasons.TOO_FEW_SUPERVISED_TOKENS,
            f"{supervised} supervised tokens < --min-supervised-tokens "
            f"{rules.min_supervised_tokens}",
        )
    return EncodedRow(row_id, source, row, input_ids, loss_mask, truncated)


def encode_pretokenized(
    row: PreTokenized, rules: LengthRules, vocab_size: int, stop_ids: frozenset[int] = frozenset()
) -> EncodedRow | Reject:
    """Pass a pre-tokenized row through the same validation and length rules.

    Its mask is the row's own: a run need not end with an end-of-turn token (trl's
    ``{% generation %}`` tags supervise the newline after ``<|im_end|>``). Such a row ends
    inside an answer as its tokens show (``stop_ids``: the end-of-turn ids), and is counted
    ``truncated`` so, as verify counts it; cut or not."""
    ids = np.asarray(row.input_ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        return Reject(
            row.source,
            row.row,
            row.id,
            reasons.INVALID_PRETOKENIZED,
            f"token id outside the vocabulary [0, {vocab_size})",
        )
    mask = np.asarray(row.loss_mask, dtype=np.int8)
    out = apply_length_rules(row.source, row.row, row.id, ids.astype(np.int32), mask, rules)
    if isinstance(out, EncodedRow) and stop_ids:
        supervised = np.flatnonzero(out.loss_mask)
        last = int(out.input_ids[supervised[-1]]) if supervised.size else None
        out.truncated = last is not None and last not in stop_ids
    return out
