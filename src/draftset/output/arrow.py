"""The Arrow format: an HF ``save_to_disk`` folder, which speculators reads as-is.

Shards are Arrow IPC streams (``data-00000-of-00001.arrow``) listed in ``state.json``, with
``dataset_info.json`` beside them. Record batches have a fixed row count and the folder's
fingerprint is derived from the shards' content, so the same inputs give byte-identical files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from draftset.output.base import (
    HF_FEATURES,
    Layout,
    RowAccess,
    ShardedWriter,
    arrow_schema,
)
from draftset.sources.read import sha256_file

__all__ = ["LAYOUT", "WRITER", "ArrowLayout", "ArrowWriter", "arrow_schema", "state_fingerprint"]


def shard_name(index: int, count: int) -> str:
    """The name of shard ``index`` of ``count``, as ``save_to_disk`` names its shards."""
    return f"data-{index:05d}-of-{count:05d}.arrow"


def state_fingerprint(shard_digests: list[str]) -> str:
    """state.json's ``_fingerprint``: from the shards' sha256, in row order (`datasets` keys
    its caches by it; content-derived, so equal runs write equal folders)."""
    return hashlib.sha256("".join(shard_digests).encode()).hexdigest()[:16]


class ArrowWriter(ShardedWriter):
    """Streams rows into Arrow IPC shards in the save_to_disk layout."""

    format = "arrow"

    def __init__(self, folder: Path, vocab_size: int, block: int | None = None) -> None:
        super().__init__(folder, vocab_size, block)
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None
        self._sink: Any = None

    def part_path(self, stem: str) -> Path:
        return self.folder / f"data-{stem}.arrow.part"

    def shard_path(self, index: int, count: int) -> Path:
        return self.folder / shard_name(index, count)

    def open_part(self, path: Path) -> None:
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, self.schema)

    def append(self, batch: pa.RecordBatch) -> None:
        assert self._writer is not None
        self._writer.write_batch(batch)

    def close_part(self) -> None:
        assert self._writer is not None
        self._writer.close()
        self._sink.close()
        self._writer = None

    def metadata(self, shards: list[Path]) -> list[Path]:
        """dataset_info.json and state.json: what ``load_from_disk`` reads."""
        return self._write_metadata([p.name for p in shards])

    def _write_metadata(self, shard_names: list[str]) -> list[Path]:
        info = _DATASET_INFO
        # a content-derived fingerprint keeps the folder byte-identical across equal runs
        fingerprint = state_fingerprint([sha256_file(self.folder / n) for n in shard_names])
        state = {
            "_data_files": [{"filename": n} for n in shard_names],
            "_fingerprint": fingerprint,
            **_LOADER_SETTINGS,
            # what speculators' own prepare step sets; its loader relies on it
            "_format_type": "torch",
        }
        _write_json(self.folder / "dataset_info.json", info)
        _write_json(self.folder / "state.json", state)
        return [self.folder / "dataset_info.json", self.folder / "state.json"]


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n", encoding="utf-8")


class ArrowLayout(Layout):
    """Reads a save_to_disk folder: the shards ``state.json`` lists, memory-mapped."""

    format = "arrow"
    shard_glob = "*.arrow"
    metadata_files = ("dataset_info.json", "state.json")
    speculators_loadable = True

    def shard_name(self, index: int, count: int) -> str:
        return shard_name(index, count)

    def data_files(self, folder: Path, manifest: dict[str, Any]) -> list[Path]:
        entries = _state(folder).get("_data_files") or []
        names = [f.get("filename") for f in entries if isinstance(f, dict) and f.get("filename")]
        if not names:
            names = sorted(p.name for p in folder.glob("data-*.arrow"))
        return [folder / str(n) for n in names]

    def scan(self, path: Path) -> tuple[pa.Schema, int]:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            return reader.schema, sum(rb.num_rows for rb in reader)

    def batches(self, path: Path) -> Iterator[pa.RecordBatch]:
        with pa.OSFile(str(path), "rb") as f:
            yield from pa.ipc.open_stream(f)

    def rows(self, paths: list[Path]) -> RowAccess:
        return _MappedRows(paths)

    def stray_problem(self, name: str) -> tuple[str, str]:
        # a shard state.json does not list is not loaded by save_to_disk loaders, yet looks
        # like one: another run's shard, a copy, a `datasets` cache file
        return (
            "*.arrow file not listed in state.json (not part of the set: delete it)",
            f"{name}: not one of state.json's data files",
        )

    def structure_problems(self, folder: Path, state: dict[str, Any]) -> list[str]:
        """What ``load_from_disk`` reads besides the shards is what draftset wrote: a
        `_format_columns` naming some columns hides `loss_mask`, a feature draftset does not
        write describes a column it did not write."""
        if state.get("_format_type") != "torch":
            return ["state.json _format_type is not 'torch' (speculators' loader relies on it)"]
        problems = [
            f"state.json {key} is {state.get(key)!r}, not draftset's {value!r}"
            for key, value in _LOADER_SETTINGS.items()
            if state.get(key, value) != value or key not in state
        ]
        try:
            info = json.loads((folder / "dataset_info.json").read_text(encoding="utf-8"))
            features = info.get("features") if isinstance(info, dict) else None
        except (OSError, ValueError):
            features = None
        if features != HF_FEATURES:
            problems.append("dataset_info.json features are not the columns draftset writes")
        elif info != _DATASET_INFO:  # what `info` (description, splits, ...) says is build's too
            keys = sorted(k for k in {*info, *_DATASET_INFO} if info.get(k) != _DATASET_INFO.get(k))
            problems.append(f"dataset_info.json is not the one draftset writes: {keys} differ")
        if extra := sorted(set(state) - _STATE_KEYS):
            problems.append(f"state.json has keys draftset does not write: {extra}")
        return problems


_LOADER_SETTINGS: dict[str, Any] = {
    "_format_columns": None,
    "_format_kwargs": {},
    "_output_all_columns": False,
    "_split": None,
}
"""state.json's keys `load_from_disk` obeys, as `_write_metadata` writes them."""
_STATE_KEYS = frozenset({"_data_files", "_fingerprint", "_format_type", *_LOADER_SETTINGS})
"""Every key of the state.json `_write_metadata` writes."""
_DATASET_INFO: dict[str, Any] = {
    "citation": "",
    "description": "draftset training set for a speculative-decoding drafter",
    "features": HF_FEATURES,
    "homepage": "",
    "license": "",
}
"""The dataset_info.json of every Arrow set (`load_from_disk` reads it as the set's `info`)."""


def _state(folder: Path) -> dict[str, Any]:
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return {}
    return state if isinstance(state, dict) else {}


class _MappedRows(RowAccess):
    """All shards memory-mapped as one table: opening costs nothing, rows are zero-copy."""

    def __init__(self, paths: list[Path]) -> None:
        tables = [pa.ipc.open_stream(pa.memory_map(str(p), "r")).read_all() for p in paths]
        self.table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def row(self, index: int) -> pa.Table:
        return self.table.slice(index, 1)


WRITER = ArrowWriter
LAYOUT = ArrowLayout()
