"""Write: stream rows into an HF ``save_to_disk`` dataset folder, plus vocabulary files.

The folder is built under a temporary name next to the target and renamed only when the run
succeeded, so a half-written output never looks finished. Arrow record batches have a fixed
row count (independent of worker count), so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from draftset.core.errors import DraftsetError
from draftset.mask.encode import EncodedRow
from draftset.sources.read import sha256_file

ROWS_PER_BATCH = 1000
SHARD_BYTES = 500 * 1024 * 1024  # datasets' default max_shard_size

SCHEMA_FIELDS = [
    pa.field("id", pa.string()),
    pa.field("source", pa.string()),
    pa.field("input_ids", pa.list_(pa.int32())),
    pa.field("loss_mask", pa.list_(pa.int8())),
    pa.field("seq_len", pa.int64()),
]

# The `datasets` Features description of SCHEMA_FIELDS (what dataset_info.json / state hold).
HF_FEATURES: dict[str, Any] = {
    "id": {"dtype": "string", "_type": "Value"},
    "source": {"dtype": "string", "_type": "Value"},
    "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "List"},
    "loss_mask": {"feature": {"dtype": "int8", "_type": "Value"}, "_type": "List"},
    "seq_len": {"dtype": "int64", "_type": "Value"},
}


def arrow_schema() -> pa.Schema:
    meta = {"huggingface": json.dumps({"info": {"features": HF_FEATURES}})}
    return pa.schema(SCHEMA_FIELDS, metadata=meta)


class OutputExistsError(DraftsetError):
    """The output folder exists and --overwrite was not given (exit code 2)."""


def prepare_output(out: Path, overwrite: bool) -> Path:
    """Create and return the temporary build folder beside ``out``."""
    if out.exists() and not overwrite:
        raise OutputExistsError(f"output folder exists: {out} (pass --overwrite to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_tmp(out)
    tmp = out.parent / f".{out.name}.draftset-tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    (tmp / TMP_MARKER).write_text(json.dumps(_tmp_owner(out)) + "\n", encoding="utf-8")
    return tmp


# Inside every temporary build folder: who made it, so a later run can tell a killed run's
# leftover (removed) from anything else (never touched).
TMP_MARKER = ".draftset-build-in-progress"


def _tmp_owner(out: Path) -> dict[str, Any]:
    return {"pid": os.getpid(), "host": socket.gethostname(), "out": str(out.resolve())}


def remove_stale_tmp(out: Path) -> list[Path]:
    """Remove temporary folders that killed runs on this ``out`` left beside it.

    Only a real folder named ``.{out}.draftset-tmp-{pid}`` holding draftset's marker for this
    very ``out``, made on this host by a process that is gone. Anything else stays.
    """
    pattern = re.compile(re.escape(f".{out.name}.draftset-tmp-") + r"([0-9]+)")
    removed: list[Path] = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or entry.is_symlink() or not entry.is_dir():
            continue
        pid = int(m.group(1))
        try:
            owner = json.loads((entry / TMP_MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if owner != {**_tmp_owner(out), "pid": pid} or pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


def finalize_output(tmp: Path, out: Path) -> None:
    """Atomically put the finished folder in place (replacing an old one).

    The folder being replaced is checked again (the run may have taken hours): only an empty
    folder or a draftset output is ever removed.
    """
    (tmp / TMP_MARKER).unlink(missing_ok=True)  # finished: no longer a run in progress
    if out.exists():
        from draftset.config.preflight import replaceable

        if not replaceable(out):
            raise OutputExistsError(
                f"{out} changed during the build and is no longer empty or a draftset output;"
                " it was left as it is"
            )
        old = out.parent / f".{out.name}.draftset-old-{os.getpid()}"
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old)
    else:
        tmp.rename(out)


class DatasetWriter:
    """Streams EncodedRows into Arrow IPC shards in the save_to_disk layout."""

    def __init__(self, folder: Path, vocab_size: int) -> None:
        self.folder = folder
        self.schema = arrow_schema()
        self.vocab_size = vocab_size
        self.token_freq = np.zeros(vocab_size, dtype=np.int64)
        self.rows = 0
        self.tokens = 0
        self.supervised_tokens = 0
        self.truncated = 0
        self._pending: list[EncodedRow] = []
        self._shards: list[Path] = []
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink: Any = None
        self._shard_bytes = 0

    def write(self, rows: Iterable[EncodedRow]) -> None:
        for r in rows:
            if r.input_ids.size and int(r.input_ids.max()) >= self.vocab_size:
                raise ValueError(f"row {r.id}: token id beyond vocabulary size {self.vocab_size}")
            self._pending.append(r)
            if len(self._pending) >= ROWS_PER_BATCH:
                self._flush()

    def close(self) -> list[Path]:
        self._flush()
        if self._writer is None:
            self._open_shard()  # an empty dataset is still a valid dataset
        self._close_shard()
        n = len(self._shards)
        final: list[Path] = []
        for i, shard in enumerate(self._shards):
            name = self.folder / f"data-{i:05d}-of-{n:05d}.arrow"
            shard.rename(name)
            final.append(name)
        self._write_metadata([p.name for p in final])
        return final

    # --- internals ---------------------------------------------------------------------------
    def _flush(self) -> None:
        if not self._pending:
            return
        rows = self._pending
        self._pending = []
        lengths = np.fromiter((r.input_ids.shape[0] for r in rows), dtype=np.int64, count=len(rows))
        offsets = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate([r.input_ids for r in rows]).astype(np.int32, copy=False)
        mask = np.concatenate([r.loss_mask for r in rows]).astype(np.int8, copy=False)
        batch = pa.record_batch(
            [
                pa.array([r.id for r in rows], pa.string()),
                pa.array([r.source for r in rows], pa.string()),
                pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids)),
                pa.ListArray.from_arrays(pa.array(offsets), pa.array(mask)),
                pa.array(lengths),
            ],
            schema=self.schema,
        )
        if self._writer is None or self._shard_bytes >= SHARD_BYTES:
            self._close_shard()
            self._open_shard()
        assert self._writer is not None
        self._writer.write_batch(batch)
        self._shard_bytes += batch.nbytes
        self.rows += len(rows)
        self.tokens += int(lengths.sum())
        sup = ids[mask.astype(bool)]
        self.supervised_tokens += int(sup.size)
        self.token_freq += np.bincount(sup, minlength=self.vocab_size)[: self.vocab_size]
        self.truncated += sum(1 for r in rows if r.truncated)

    def _open_shard(self) -> None:
        path = self.folder / f"data-{len(self._shards):05d}.arrow.part"
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)
        self._shards.append(path)
        self._shard_bytes = 0

    def _close_shard(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._sink.close()
            self._writer = None

    def _write_metadata(self, shard_names: list[str]) -> None:
        info = {
            "citation": "",
            "description": "draftset training set for a speculative-decoding drafter",
            "features": HF_FEATURES,
            "homepage": "",
            "license": "",
        }
        # a content-derived fingerprint keeps the folder byte-identical across equal runs
        fingerprint = hashlib.sha256(
            "".join(sha256_file(self.folder / n) for n in shard_names).encode()
        ).hexdigest()[:16]
        state = {
            "_data_files": [{"filename": n} for n in shard_names],
            "_fingerprint": fingerprint,
            "_format_columns": None,
            "_format_kwargs": {},
            # what speculators' own prepare step sets; its loader relies on it
            "_format_type": "torch",
            "_output_all_columns": False,
            "_split": None,
        }
        _write_json(self.folder / "dataset_info.json", info)
        _write_json(self.folder / "state.json", state)


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


TORCH_MISSING = "token_freq.pt skipped: torch is not installed (pip install 'draftset[torch]')"


def write_token_freq(
    folder: Path,
    token_freq: np.ndarray,
    save_pt: Callable[[Path, np.ndarray, np.ndarray], bool] | None = None,
) -> str | None:
    """token_freq.npy always; token_freq.pt (dict[int, int]) when torch imports. Returns a note.

    ``save_pt`` runs `save_token_freq_pt` elsewhere (the build's helper process, which has
    torch imported already); by default it runs here.
    """
    np.save(folder / "token_freq.npy", token_freq.astype(np.int64))
    ids = np.nonzero(token_freq)[0].astype(np.int64)
    saved = (save_pt or save_token_freq_pt)(folder / "token_freq.pt", ids, token_freq[ids])
    return None if saved else TORCH_MISSING


def save_token_freq_pt(path: Path, ids: np.ndarray, counts: np.ndarray) -> bool:
    """``torch.save`` of {id: count} (what speculators reads); False when torch is missing."""
    try:
        import torch  # optional extra: only for the .pt file speculators reads
    except ImportError:
        return False
    torch.save(dict(zip(ids.tolist(), counts.tolist(), strict=True)), path)
    return True


def load_token_freq_pt(path: Path) -> dict[int, int] | None:
    """``torch.load(weights_only=True)`` of token_freq.pt; None when torch is missing.

    Raises on an unreadable file (the check reports it).
    """
    try:
        import torch
    except ImportError:
        return None
    data = torch.load(path, weights_only=True)
    return {int(k): int(v) for k, v in dict(data).items()}


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
