"""The output interface: a `Writer` takes a build's rows, a `Layout` reads them back.

A format is one module holding both (a `Writer` subclass for `build`, a `Layout` for `verify`,
`show` and `report`) plus its entry in `draftset.output.FORMATS`. Every format writes the same
columns (`arrow_schema`) in the same row order, so everything else (the side files, the
manifest, every check) is shared.

Rows are gathered into Arrow record batches of a fixed row count (`ROWS_PER_BATCH`), never
sized by the worker count or timing: the same inputs give the same batches, so a format that
writes batches deterministically gives byte-identical files for any ``--workers``.

A build's workers write the rows (`ShardedWriter` with a ``block``): each block of input rows,
cut by the driver in input order, becomes its own shard file(s), whichever worker wrote it; the
driver's writer (``block=None``) only adds up what the blocks report (`WriterCounts`), names the
shards in block order and writes the format's metadata (`add_block`, `close`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import pyarrow as pa

if TYPE_CHECKING:  # readback imports this module: it needs no part of the row step
    from draftset.mask.encode import EncodedRow

ROWS_PER_BATCH = 1000
SHARD_BYTES = 500 * 1024 * 1024  # datasets' default max_shard_size

SCHEMA_FIELDS = [
    pa.field("id", pa.string()),
    pa.field("source", pa.string()),
    pa.field("input_ids", pa.list_(pa.int32())),
    pa.field("loss_mask", pa.list_(pa.int8())),
    pa.field("seq_len", pa.int64()),
]

# The `datasets` Features description of SCHEMA_FIELDS (what dataset_info.json / state hold,
# and what `datasets` reads back from a Parquet file's `huggingface` schema metadata).
HF_FEATURES: dict[str, Any] = {
    "id": {"dtype": "string", "_type": "Value"},
    "source": {"dtype": "string", "_type": "Value"},
    "input_ids": {"feature": {"dtype": "int32", "_type": "Value"}, "_type": "List"},
    "loss_mask": {"feature": {"dtype": "int8", "_type": "Value"}, "_type": "List"},
    "seq_len": {"dtype": "int64", "_type": "Value"},
}


def arrow_schema() -> pa.Schema:
    """The columns of every output format, with the `datasets` features as metadata."""
    meta = {"huggingface": json.dumps({"info": {"features": HF_FEATURES}})}
    return pa.schema(SCHEMA_FIELDS, metadata=meta)


# Arrays are built from their buffers: `pa.array` and `pa.record_batch` look for pandas types in
# their input and import pandas when it is installed (it is, with `datasets`): ~0.3-0.7 s of
# CPU and ~80 MB in the driver, mid-run. The buffers are what `pa.array` would make.
def numeric_array(values: np.ndarray) -> pa.Array:
    """A null-free Arrow array over a 1-D numeric numpy array's buffer."""
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(values.dtype), len(values), [None, pa.py_buffer(values)]
    )


def string_array(values: list[str]) -> pa.Array:
    """A null-free utf8 Arrow array (UnicodeEncodeError on a lone surrogate, as `pa.array`)."""
    data = [v.encode("utf-8") for v in values]
    offsets = np.zeros(len(data) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in data], out=offsets[1:])
    if offsets[-1] >= 2**31:
        return pa.array(values, pa.string())  # beyond 32-bit offsets: let pyarrow say so
    return pa.StringArray.from_buffers(
        len(data), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(data))
    )


@dataclass
class WriterCounts:
    """What a writer counted: the totals the manifest records and the supervised-token
    histogram, sparse (the token ids that occur and how often: a block's few thousand, not the
    vocabulary's ~150K), so a worker hands them to the driver in a few KB."""

    rows: int
    tokens: int
    supervised_tokens: int
    truncated: int
    token_ids: np.ndarray  # int64, ascending
    token_counts: np.ndarray  # int64


class Writer(ABC):
    """Where a build's rows go: ``write(rows)`` in order, then ``close()``.

    Counts what it wrote (``rows``, ``tokens``, ``supervised_tokens``, ``truncated`` and the
    supervised-token histogram ``token_freq``): the manifest's totals and the vocabulary files
    come from these, and `verify` recounts them from the data.
    """

    format: ClassVar[str]
    """The ``--output-format`` value (and the manifest's ``output_format``)."""

    def __init__(self, folder: Path, vocab_size: int) -> None:
        self.folder = folder
        self.vocab_size = vocab_size
        self.token_freq = np.zeros(vocab_size, dtype=np.int64)
        self.rows = 0
        self.tokens = 0
        self.supervised_tokens = 0
        self.truncated = 0

    @abstractmethod
    def write(self, rows: Iterable[EncodedRow]) -> None:
        """Append rows, in the order given (the build's order)."""

    @abstractmethod
    def close(self) -> list[Path]:
        """Finish the files; returns every file written (the manifest records their sha256)."""

    def abandon(self) -> None:  # noqa: B027 - a writer with nothing open has nothing to do
        """The build failed: close any open file now (its folder is removed next)."""

    def counts(self) -> WriterCounts:
        """What this writer counted (a worker's block hands it to the driver's writer)."""
        ids = np.flatnonzero(self.token_freq)
        return WriterCounts(
            self.rows,
            self.tokens,
            self.supervised_tokens,
            self.truncated,
            ids.astype(np.int64),
            self.token_freq[ids],
        )

    def add_counts(self, counts: WriterCounts) -> None:
        """Add what another writer (a worker's, for one block) counted."""
        self.rows += counts.rows
        self.tokens += counts.tokens
        self.supervised_tokens += counts.supervised_tokens
        self.truncated += counts.truncated
        self.token_freq[counts.token_ids] += counts.token_counts


class BatchWriter(Writer):
    """A `Writer` over fixed-size Arrow record batches: a format implements `write_batch`
    (one batch of `arrow_schema` rows, in order) and `finish` (close, name, return the files)."""

    def __init__(self, folder: Path, vocab_size: int) -> None:
        super().__init__(folder, vocab_size)
        self.schema = arrow_schema()
        self._pending: list[EncodedRow] = []

    def write(self, rows: Iterable[EncodedRow]) -> None:
        for r in rows:
            if r.input_ids.size and int(r.input_ids.max()) >= self.vocab_size:
                raise ValueError(f"row {r.id}: token id beyond vocabulary size {self.vocab_size}")
            self._pending.append(r)
            if len(self._pending) >= ROWS_PER_BATCH:
                self._flush()

    def close(self) -> list[Path]:
        self._flush()
        return self.finish()

    @abstractmethod
    def write_batch(self, batch: pa.RecordBatch) -> None:
        """Write one record batch (at most `ROWS_PER_BATCH` rows)."""

    @abstractmethod
    def finish(self) -> list[Path]:
        """All batches are written: finish the files and return them."""

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
        batch = pa.RecordBatch.from_arrays(
            [
                string_array([r.id for r in rows]),
                string_array([r.source for r in rows]),
                pa.ListArray.from_arrays(numeric_array(offsets), numeric_array(ids)),
                pa.ListArray.from_arrays(numeric_array(offsets), numeric_array(mask)),
                numeric_array(lengths),
            ],
            schema=self.schema,
        )
        self.write_batch(batch)
        self.rows += len(rows)
        self.tokens += int(lengths.sum())
        sup = ids[mask.astype(bool)]
        self.supervised_tokens += int(sup.size)
        self.token_freq += np.bincount(sup, minlength=self.vocab_size)[: self.vocab_size]
        self.truncated += sum(1 for r in rows if r.truncated)


class ShardedWriter(BatchWriter):
    """Record batches into shards of about `SHARD_BYTES` each, written as ``*.part`` files and
    renamed to their final names (which carry the shard count) once the set is finished. A
    format says how a part is opened, appended to and closed, and how shards are named.

    With ``block`` (a worker writing one block of the build), the parts are named after the
    block and left as they are by `close`, which returns them; the driver's writer gathers the
    blocks' parts in block order (`add_block`) and names them all when the set is finished.
    """

    def __init__(self, folder: Path, vocab_size: int, block: int | None = None) -> None:
        super().__init__(folder, vocab_size)
        self.block = block
        self._parts: list[Path] = []
        self._part_open = False
        self._shard_bytes = 0

    def add_block(self, parts: list[Path], counts: WriterCounts) -> None:
        """A block's finished parts (in order, after every earlier block's) and its counts."""
        for part in parts:
            if not part.is_file():  # a worker on a node that does not share the output folder
                raise FileNotFoundError(
                    f"{part}: a worker wrote this shard but it is not here (the output folder"
                    " must be on storage that every worker and the driver see)"
                )
        self._parts.extend(parts)
        self.add_counts(counts)

    def write_batch(self, batch: pa.RecordBatch) -> None:
        if not self._part_open or self._shard_bytes >= SHARD_BYTES:
            self._end_part()
            self._start_part()
        self.append(batch)
        self._shard_bytes += batch.nbytes

    def finish(self) -> list[Path]:
        if self.block is not None:  # one block's parts: the driver names them with the rest
            self._end_part()
            return list(self._parts)
        if not self._parts:
            self._start_part()  # an empty set is still a readable set (schema, no rows)
        self._end_part()
        final: list[Path] = []
        for i, part in enumerate(self._parts):
            name = self.shard_path(i, len(self._parts))
            part.rename(name)
            final.append(name)
        return [*final, *self.metadata(final)]

    @abstractmethod
    def part_path(self, stem: str) -> Path:
        """Where the part named ``stem`` (its block and index) is written while the set is
        unfinished."""

    @abstractmethod
    def shard_path(self, index: int, count: int) -> Path:
        """The finished name of shard ``index`` of ``count``."""

    @abstractmethod
    def open_part(self, path: Path) -> None:
        """Start writing a new shard at ``path``."""

    @abstractmethod
    def append(self, batch: pa.RecordBatch) -> None:
        """Add one record batch to the open shard."""

    @abstractmethod
    def close_part(self) -> None:
        """Finish the open shard's file."""

    def metadata(self, shards: list[Path]) -> list[Path]:
        """Files the format writes beside its finished shards (none by default)."""
        return []

    def _start_part(self) -> None:
        index = len(self._parts)
        stem = f"{index:05d}" if self.block is None else f"b{self.block:07d}-{index:03d}"
        path = self.part_path(stem)
        self.open_part(path)
        self._parts.append(path)
        self._part_open = True
        self._shard_bytes = 0

    def _end_part(self) -> None:
        if self._part_open:
            self.close_part()
            self._part_open = False

    def abandon(self) -> None:
        self._end_part()


class RowAccess(ABC):
    """Random access to single rows (show, report, verify's sampled mask checks)."""

    @abstractmethod
    def row(self, index: int) -> pa.Table:
        """Row ``index`` of the whole set, as a one-row table."""


class Layout(ABC):
    """How `readback` finds, streams and reads one format's rows in a built folder."""

    format: ClassVar[str]
    shard_glob: ClassVar[str]
    """Files that look like the set's shards (a stray one is flagged by the file_hashes check)."""
    metadata_files: ClassVar[tuple[str, ...]] = ()
    """Files besides the shards that every set of this format has (listed in the manifest)."""
    speculators_loadable: ClassVar[bool] = False
    """Whether speculators' loader reads this layout as-is (its load check runs only then)."""

    @abstractmethod
    def shard_name(self, index: int, count: int) -> str:
        """The name (relative to the folder) the writer gives shard ``index`` of ``count``."""

    @abstractmethod
    def data_files(self, folder: Path, manifest: dict[str, Any]) -> list[Path]:
        """The shards holding the rows, in row order (what a loader of this format reads)."""

    @abstractmethod
    def scan(self, path: Path) -> tuple[pa.Schema, int]:
        """Read a whole shard once: its schema and row count (raises when unreadable)."""

    @abstractmethod
    def batches(self, path: Path) -> Iterator[pa.RecordBatch]:
        """The shard's rows as record batches, one at a time (bounded memory)."""

    @abstractmethod
    def rows(self, paths: list[Path]) -> RowAccess:
        """Random access to the rows of these shards."""

    def stray_files(self, folder: Path, data_files: list[Path]) -> list[tuple[str, str, str]]:
        """Files that look like shards but are not part of the set: (name, kind, message)."""
        listed = {p.resolve() for p in data_files}
        return [
            (rel_name(folder, p), *self.stray_problem(rel_name(folder, p)))
            for p in sorted(folder.glob(self.shard_glob))
            if p.resolve() not in listed
        ]

    def stray_problem(self, name: str) -> tuple[str, str]:
        """(kind, message) of the file_hashes problem a stray shard ``name`` is."""
        return (
            f"{self.shard_glob} file not listed in the manifest (not part of the set: delete it)",
            f"{name}: not one of the set's data files",
        )

    def structure_problems(self, folder: Path, state: dict[str, Any]) -> list[str]:
        """Problems of the format's own metadata files (none by default)."""
        return []


def rel_name(folder: Path, path: Path) -> str:
    """``path`` as the manifest names it: relative to the set's folder, with ``/``."""
    return path.relative_to(folder).as_posix()


def safe_name(name: str) -> bool:
    """A manifest file name that stays inside the set's folder (no ``..``, no hidden part, not
    absolute): only such names are opened."""
    parts = PurePosixPath(name).parts
    return (
        bool(parts)
        and "\\" not in name
        and not PurePosixPath(name).is_absolute()
        and all(p and not p.startswith(".") for p in parts)
    )
