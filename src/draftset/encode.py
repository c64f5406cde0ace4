"""Encode: segments → token ids + loss mask, then length rules.

Each segment is encoded on its own (``add_special_tokens=False``: the template already wrote
BOS and friends) and the pieces are concatenated. That is how serving tokenizes: the server
encodes the prompt, the model emits the generation token by token, so no token crosses the
prompt/generation edge. All segments of a batch go through one batched call of the Rust
tokenizer: `encode_batch_fast`, which skips the character offsets draftset never reads (same
ids, tested against `encode_batch`; ~1.7x faster).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any, Literal

import numpy as np

from draftset import defaults, reasons
from draftset.records import PreTokenized, Reject
from draftset.render import RowPlan

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


def encode_plans(backend, plans: list[RowPlan]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token ids and mask for each plan; one batched tokenizer call for all segments."""
    texts = [
        text
        for plan in plans
        for i, (text, _) in enumerate(plan.segments)
        if i not in plan.server_ids
    ]
    encodings = _encode_batch(backend)(texts, add_special_tokens=False) if texts else []
    out: list[tuple[np.ndarray, np.ndarray]] = []
    k = 0
    for plan in plans:
        ids_parts: list[list[int]] = []
        lengths: list[int] = []
        flags: list[int] = []
        for i, (_, supervised) in enumerate(plan.segments):
            if i in plan.server_ids:  # the server's own tokens for this generation
                ids = plan.server_ids[i]
            else:
                ids = encodings[k].ids
                k += 1
            ids_parts.append(ids)
            lengths.append(len(ids))
            flags.append(1 if supervised else 0)
        input_ids = np.fromiter(chain.from_iterable(ids_parts), dtype=np.int32, count=sum(lengths))
        loss_mask = np.repeat(np.asarray(flags, dtype=np.int8), lengths)
        out.append((input_ids, loss_mask))
    return out


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
    row: PreTokenized, rules: LengthRules, vocab_size: int
) -> EncodedRow | Reject:
    """Pass a pre-tokenized row through the same validation and length rules."""
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
    return apply_length_rules(row.source, row.row, row.id, ids.astype(np.int32), mask, rules)
