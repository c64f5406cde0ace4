"""The Arrow writer: rows into an HF ``save_to_disk`` folder (what speculators reads as-is).

Arrow record batches have a fixed row count (independent of worker count) and the folder's
fingerprint is derived from the shards' content, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

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
        """Finish the shards and the folder's metadata; returns every file written."""
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
        return [*final, *self._write_metadata([p.name for p in final])]

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

    def _write_metadata(self, shard_names: list[str]) -> list[Path]:
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
        return [self.folder / "dataset_info.json", self.folder / "state.json"]


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")
