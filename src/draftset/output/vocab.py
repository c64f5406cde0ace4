"""Vocabulary files beside the rows: token_freq (.npy, and .pt for speculators) and the EAGLE-3
reduced vocabulary d2t/t2d, both from the supervised-token counts the writer kept."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from draftset.core.optional_torch import torch_unavailable
from draftset.output.pt_file import ForeignPickle, read_pt, write_pt


def write_token_freq(folder: Path, token_freq: np.ndarray) -> None:
    """token_freq.npy (every id's count) and token_freq.pt ({id: count} of the ids seen, what
    speculators reads), both without torch (`draftset.output.pt_file`)."""
    np.save(folder / "token_freq.npy", token_freq.astype(np.int64))
    ids = np.nonzero(token_freq)[0].astype(np.int64)
    save_token_freq_pt(folder / "token_freq.pt", ids, token_freq[ids])


def save_token_freq_pt(path: Path, ids: np.ndarray, counts: np.ndarray) -> None:
    """{id: count} written as ``torch.save`` writes it (`pt_file.write_pt`: no torch needed)."""
    write_pt(path, dict(zip(ids.tolist(), counts.tolist(), strict=True)))


class TokenFreqPtShape(ValueError):
    """token_freq.pt loads but does not hold what build writes (a dict of int token ids to int
    counts): the message says what it holds instead."""


def load_token_freq_pt(path: Path) -> dict[int, int]:
    """token_freq.pt as speculators reads it, ``torch.load(weights_only=True)``, when torch
    imports here (verify's referee: torch's own reader, not draftset's); else draftset's own
    reader (`read_token_freq_pt`).

    Raises on an unreadable file, and `TokenFreqPtShape` on one that holds anything but
    {int: int} (`pt_counts`): the check reports either. Never casts (a ``"5"`` key, a float
    or a tensor count are not what build writes, though ``int()`` takes them).
    """
    if torch_unavailable() is not None:
        return read_token_freq_pt(path)
    import torch  # lazy: optional, imported by `torch_unavailable` already

    return pt_counts(torch.load(path, weights_only=True))


def read_token_freq_pt(path: Path) -> dict[int, int]:
    """token_freq.pt read without torch (`pt_file.read_pt`): what a build's own check of the
    file it just wrote uses, so a build never imports torch. A pickle naming a global (a
    tensor, a class) is `TokenFreqPtShape`, and is not run."""
    try:
        data = read_pt(path)
    except ForeignPickle as exc:
        raise TokenFreqPtShape(f"holds more than a plain dict: {exc}") from exc
    return pt_counts(data)


def pt_counts(data: object) -> dict[int, int]:
    """``data`` (token_freq.pt's content) as build writes it, {int id: int count}, or
    `TokenFreqPtShape` naming its first departure from that (a bool is no int here)."""
    if not isinstance(data, dict):
        raise TokenFreqPtShape(
            f"holds a {type(data).__name__}, expected a dict {{token id: count}}"
        )
    for key in data:
        if type(key) is not int:
            twin = _int_twin(key, data)
            raise TokenFreqPtShape(
                f"key {_short(key)} is a {type(key).__name__}, expected an int token id"
                + (f" (beside the int key {twin})" if twin is not None else "")
            )
    for key, count in data.items():
        if type(count) is not int:
            raise TokenFreqPtShape(
                f"count of id {key} is a {type(count).__name__} ({_short(count)}), expected an int"
            )
    return dict(data)


def _int_twin(key: object, data: dict[object, object]) -> int | None:
    """The int key ``key`` looks like (``"5"``, ``tensor(5)`` beside ``5``), if ``data`` has
    it: the same id twice, under two types."""
    try:
        twin = int(key)  # type: ignore[call-overload]
        same = isinstance(key, str) or bool(key == twin)
    except (TypeError, ValueError, RuntimeError):
        return None
    return twin if same and twin in data and type(twin) is int else None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def draft_vocab(
    token_freq: np.ndarray, draft_vocab_size: int, target_vocab_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """EAGLE-3 reduced vocabulary: (d2t int64[N], t2d bool[target]) as speculators builds it.

    Top-N supervised tokens by count (ties: lower id first), padded with the lowest unused ids
    when fewer were seen, sorted; ``d2t[i] = id_i - i``.
    """
    if draft_vocab_size > target_vocab_size:
        raise ValueError(
            f"--draft-vocab-size {draft_vocab_size} exceeds the target vocabulary"
            f" {target_vocab_size}"
        )
    seen = np.nonzero(token_freq)[0]
    order = np.lexsort((seen, -token_freq[seen]))  # by count desc, then id asc
    chosen = seen[order][:draft_vocab_size]
    if chosen.size < draft_vocab_size:
        unused = np.setdiff1d(np.arange(draft_vocab_size), chosen, assume_unique=False)
        chosen = np.concatenate([chosen, unused[: draft_vocab_size - chosen.size]])
    chosen = np.sort(chosen).astype(np.int64)
    d2t = chosen - np.arange(draft_vocab_size, dtype=np.int64)
    t2d = np.zeros(target_vocab_size, dtype=bool)
    t2d[chosen] = True
    return d2t, t2d


def write_draft_vocab(
    folder: Path, token_freq: np.ndarray, draft_vocab_size: int, target_vocab_size: int
) -> list[Path]:
    """``d2t-N.npy`` and ``t2d-N.npy`` (see `draft_vocab`) in ``folder``; returns both paths."""
    d2t, t2d = draft_vocab(token_freq, draft_vocab_size, target_vocab_size)
    paths = [folder / f"d2t-{draft_vocab_size}.npy", folder / f"t2d-{draft_vocab_size}.npy"]
    np.save(paths[0], d2t)
    np.save(paths[1], t2d)
    return paths
