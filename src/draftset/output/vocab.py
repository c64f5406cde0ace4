"""Vocabulary files beside the rows: token_freq (.npy always, .pt for speculators) and the
EAGLE-3 reduced vocabulary d2t/t2d, both from the supervised-token counts the writer kept."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import numpy as np

from draftset.core.optional_torch import NOT_INSTALLED, torch_unavailable

TORCH_HINT = " (pip install 'draftset[torch]')"
"""Said after `NOT_INSTALLED` in the build's note (not in the manifest's record)."""


def write_token_freq(
    folder: Path,
    token_freq: np.ndarray,
    save_pt: Callable[[Path, np.ndarray, np.ndarray], str | None] | None = None,
) -> str | None:
    """token_freq.npy always; token_freq.pt (dict[int, int]) when torch imports. Returns why
    token_freq.pt was not written (`torch_unavailable`), None when it was.

    ``save_pt`` runs `save_token_freq_pt` elsewhere (the build's helper process, which has
    torch imported already); by default it runs here.
    """
    np.save(folder / "token_freq.npy", token_freq.astype(np.int64))
    ids = np.nonzero(token_freq)[0].astype(np.int64)
    return (save_pt or save_token_freq_pt)(folder / "token_freq.pt", ids, token_freq[ids])


def skipped_note(reason: str) -> str:
    """The build's note for a token_freq.pt it did not write, ``reason`` being why."""
    return f"token_freq.pt skipped: {reason}" + (TORCH_HINT if reason == NOT_INSTALLED else "")


def save_token_freq_pt(path: Path, ids: np.ndarray, counts: np.ndarray) -> str | None:
    """``torch.save`` of {id: count} (what speculators reads); returns why it was not written
    (torch not installed, or failing to import: `torch_unavailable`), None when it was."""
    why = torch_unavailable()
    if why is not None:
        return why
    import torch  # lazy: optional extra, imported by `torch_unavailable` already

    try:
        torch.save(dict(zip(ids.tolist(), counts.tolist(), strict=True)), path)
    except RuntimeError as exc:
        # torch's zip writer reports a failed write (a full disk) as a RuntimeError with no
        # errno ("basic_ios::clear: iostream error"): an OSError, so the build says it in the
        # one line every other failed write gets, not a traceback
        raise OSError(errno.EIO, f"{path.name}: a failed write ({exc}): is the disk full?") from exc
    return None


class TokenFreqPtShape(ValueError):
    """token_freq.pt loads but does not hold what build writes (a dict of int token ids to int
    counts): the message says what it holds instead."""


def load_token_freq_pt(path: Path) -> dict[int, int] | str:
    """``torch.load(weights_only=True)`` of token_freq.pt; when torch does not import, why not
    (`torch_unavailable`: the file is not compared).

    Raises on an unreadable file, and `TokenFreqPtShape` on one that holds anything but
    {int: int} (`pt_counts`): the check reports either. Never casts (a ``"5"`` key, a float
    or a tensor count are not what build writes, though ``int()`` takes them).
    """
    why = torch_unavailable()
    if why is not None:
        return why
    import torch  # lazy: optional extra, imported by `torch_unavailable` already

    return pt_counts(torch.load(path, weights_only=True))


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
