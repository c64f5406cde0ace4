"""Read a built draftset folder back (manifest, rows, side files) for verify/show/report.

Only pyarrow and numpy are used: verifying a set must not depend on `datasets` or torch. The
rows are read through the `Layout` of the format the manifest names (``output_format``; sets
from before it was recorded are Arrow): Arrow shards are memory-mapped, Parquet shards are read
row group by row group, and per-row statistics are computed batch by batch with vectorized
numpy, so memory stays flat however big the set is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from draftset.core import defaults
from draftset.core.digests import digest64
from draftset.core.errors import UsageError
from draftset.core.files import looks_like_recipe
from draftset.output import DEFAULT_FORMAT, FORMATS, layout
from draftset.output.base import Layout, RowAccess, rel_name
from draftset.output.folder import MANIFEST_FORMAT, is_draftset_output

Status = Literal["pass", "fail", "skip"]

REQUIRED_COLUMNS: dict[str, pa.DataType] = {
    "id": pa.string(),
    "source": pa.string(),
    "input_ids": pa.list_(pa.int32()),
    "loss_mask": pa.list_(pa.int8()),
    "seq_len": pa.int64(),
}
MAX_EXAMPLES = 5
VERIFY_RECORD = "verify.json"
"""The result of the last full `verify`, written beside the set (not one of the set's files)."""


class NotADraftsetError(UsageError):
    """The folder is missing or is not a draftset output (a usage error: exit code 2)."""


@dataclass
class CheckResult:
    """One named check: pass / fail / skip, with a count and a few example row ids on failure."""

    name: str
    status: Status
    summary: str
    count: int = 0
    examples: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.status == "fail"

    @property
    def ok(self) -> bool:
        """Passed or skipped (a skip always says why in ``summary``)."""
        return self.status != "fail"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "summary": self.summary,
            "count": self.count,
            "examples": self.examples,
            "details": self.details,
        }


class Problems:
    """Collects failures of one check: total count, per-kind counts, first example ids."""

    def __init__(self) -> None:
        self.count = 0
        self.kinds: dict[str, int] = {}
        self.examples: list[str] = []
        self.messages: list[str] = []

    def add(self, kind: str, example: str | None = None, message: str | None = None) -> None:
        self.count += 1
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        if (
            example is not None
            and len(self.examples) < MAX_EXAMPLES
            and example not in self.examples
        ):
            self.examples.append(example)
        if message is not None and len(self.messages) < MAX_EXAMPLES:
            self.messages.append(message)

    def result(
        self, name: str, ok_summary: str, details: dict[str, Any] | None = None
    ) -> CheckResult:
        details = dict(details or {})
        if not self.count:
            return CheckResult(name, "pass", ok_summary, details=details)
        kinds = "; ".join(f"{k}: {v}" for k, v in sorted(self.kinds.items(), key=lambda kv: -kv[1]))
        details["problems_by_kind"] = dict(self.kinds)
        if self.messages:
            details["messages"] = list(self.messages)
        return CheckResult(name, "fail", kinds, self.count, list(self.examples), details)


@dataclass
class OutputSet:
    """A built folder: its manifest, state and rows.

    Checks that scan every row stream the shards batch by batch (`iter_batches`), so memory
    stays flat however big the set is. Random access (`row`) opens the shards on first use
    (memory-mapped Arrow; Parquet one row group at a time).
    """

    folder: Path
    manifest: dict[str, Any]
    state: dict[str, Any]
    data_files: list[Path]
    schema: pa.Schema | None  # None when the shards cannot be read (structure check says why)
    read_error: str | None = None
    num_rows: int = 0
    layout: Layout = field(default_factory=lambda: layout(DEFAULT_FORMAT), repr=False)
    _rows: RowAccess | None = field(default=None, repr=False)
    sha256: dict[str, str] = field(default_factory=dict, repr=False)
    """Digests of files hashed by the file_hashes check (reused: a big set is hashed once)."""

    @property
    def readable(self) -> bool:
        return self.schema is not None and self.read_error is None

    @property
    def output_format(self) -> str:
        return self.layout.format

    @property
    def data_names(self) -> list[str]:
        """The shards as the manifest names them (relative to the folder)."""
        return [rel_name(self.folder, p) for p in self.data_files]

    @property
    def column_names(self) -> list[str]:
        return list(self.schema.names) if self.schema is not None else []

    @property
    def options(self) -> dict[str, Any]:
        return self.manifest.get("options") or {}

    @property
    def vocab_size(self) -> int:
        return int((self.manifest.get("tokenizer") or {}).get("vocab_size") or 0)

    def row(self, index: int) -> dict[str, Any]:
        """One row as plain Python values + numpy arrays (ids int64, mask int8)."""
        assert self.readable
        if self._rows is None:
            self._rows = self.layout.rows(self.data_files)
        r = self._rows.row(index).to_pylist()[0]
        return {
            "index": index,
            "id": r.get("id"),
            "source": r.get("source"),
            "input_ids": np.asarray(r.get("input_ids") or [], dtype=np.int64),
            "loss_mask": np.asarray(r.get("loss_mask") or [], dtype=np.int8),
            "seq_len": r.get("seq_len"),
        }

    def record_batches(self) -> Iterator[pa.RecordBatch]:
        """The shards' record batches, read one at a time (never the whole set in memory)."""
        for path in self.data_files:
            yield from self.layout.batches(path)

    def column(self, name: str) -> list[Any]:
        """One column as a Python list (ids, sources, seq_len), streamed."""
        if name not in self.column_names:
            return []
        return [v for rb in self.record_batches() for v in rb.column(name).to_pylist()]

    def ids(self) -> list[str | None]:
        return self.column("id")

    def sources(self) -> list[str | None]:
        return self.column("source")


def open_output(folder: Path) -> OutputSet:
    """Open a draftset folder; raises NotADraftsetError for a usage problem (exit code 2)."""
    folder = Path(folder)
    if not folder.exists():
        raise NotADraftsetError(f"folder not found: {folder}")
    if not folder.is_dir():
        if looks_like_recipe(folder):  # `draftset build r.yaml`, then `draftset verify r.yaml`
            raise NotADraftsetError(
                f"{folder} is a recipe, not a set: give the folder its build wrote (the"
                " recipe's out:)"
            )
        if is_draftset_output(folder.parent):  # `draftset verify out/manifest.json`
            raise NotADraftsetError(
                f"{folder} is a file of the set {folder.parent}: give the set's folder,"
                f" {folder.parent}"
            )
        raise NotADraftsetError(f"not a folder: {folder}")
    mpath = folder / "manifest.json"
    if not mpath.is_file():
        raise NotADraftsetError(f"not a draftset output (no manifest.json): {folder}")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (ValueError, OSError) as exc:
        raise NotADraftsetError(
            f"not a draftset output (manifest.json unreadable: {exc})"
        ) from None
    if not isinstance(manifest, dict) or not str(manifest.get("format", "")).startswith(
        "draftset/"
    ):
        raise NotADraftsetError(
            f"not a draftset output (manifest format is not draftset/*): {folder}"
        )
    if manifest["format"] != MANIFEST_FORMAT:  # another version's layout: never guessed at
        raise NotADraftsetError(
            f"{mpath}: manifest format {manifest['format']!r} is not the one this draftset"
            f" reads ({MANIFEST_FORMAT!r}); use the draftset version that built the set"
        )
    problem = manifest_problem(manifest)
    if problem:
        raise NotADraftsetError(
            f"{mpath} is malformed: {problem} (not a manifest draftset wrote; rebuild the set)"
        )
    fmt = manifest.get("output_format", DEFAULT_FORMAT)
    if fmt not in FORMATS:
        raise NotADraftsetError(
            f"manifest names output_format {fmt!r}, which this draftset cannot read"
            f" (it reads {', '.join(FORMATS)})"
        )
    lay = layout(fmt)
    state: dict[str, Any] = {}
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (ValueError, OSError):
        state = {}
    if not isinstance(state, dict):
        state = {}
    data_files = lay.data_files(folder, manifest)
    out = OutputSet(folder, manifest, state, data_files, None, layout=lay)
    if not data_files:
        out.read_error = "no data files"
        return out
    # one streaming pass: every shard readable, one schema, the row count
    path = data_files[0]
    try:
        for path in data_files:
            schema, rows = lay.scan(path)
            if out.schema is None:
                out.schema = schema
            elif not schema.equals(out.schema, check_metadata=True):
                raise pa.ArrowInvalid(f"{path.name} has another schema than the first shard")
            out.num_rows += rows
    except (OSError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        where = "" if path.name in str(exc) else f"{path.name}: "  # which shard, once
        kind = "Arrow" if fmt == "arrow" else "Parquet"
        out.read_error = f"cannot read {kind} data: {where}{exc}"
    return out


# --- the manifest's shape -------------------------------------------------------------------------
# Every field verify, show and report read, with the JSON types build writes: a manifest edited
# by hand (a count as a string, a section as a list) is one line naming the field, never a
# traceback deep inside a check. Values are proven against the data by the checks themselves.
_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_OPT_INT = (int, type(None))
_OPT_NUM = (int, float, type(None))
_OPT_STR = (str, type(None))
_OPT_DICT = (dict, type(None))
_FILE_ENTRY = {"path": _STR, "sha256": _STR}
_BY_REASON = {"*": _INT}
_COUNTS = {
    "rejected_by_reason": _BY_REASON,
    "row_rejects_by_reason": _BY_REASON,
    "context_turns_by_reason": _BY_REASON,
    "unread_fields": _BY_REASON,  # field name -> rows whose shape did not read it
    "*": _INT,
}
_MANIFEST_SHAPE: dict[str, Any] = {
    "format": _STR,
    "output_format": _STR,
    "inputs": [
        {
            "name": _STR,
            "path": _STR,
            "format_override": _OPT_STR,
            "fields": _OPT_DICT,
            "weight": _OPT_NUM,
            "count": _OPT_INT,
            "preset": _OPT_STR,
            "files": [_FILE_ENTRY],
        }
    ],
    "tokenizer": {
        "path": _OPT_STR,
        "fingerprint": _OPT_STR,
        "vocab_size": _INT,
        "tokenizer_size": _OPT_INT,
        "vocabulary_sample_sha256": _OPT_STR,
    },
    "template": {"text": _OPT_STR, "sha256": _OPT_STR, "kwargs": _OPT_DICT, "eot_tokens": [_STR]},
    "options": {
        "turns": _STR,
        "max_length": _OPT_INT,
        "truncation": _OPT_STR,
        "min_supervised_tokens": _OPT_INT,
        "seed": _OPT_INT,
        "max_samples": _OPT_INT,
        "draft_vocab_size": _OPT_INT,
        "target_vocab_size": _OPT_INT,
        "placeholders": [_STR],
        "eot_tokens": [_STR],
        "chat_template_path": _OPT_STR,
        "render_timeout": _OPT_NUM,
    },
    "counts": {"per_source": {"*": _COUNTS}, "total": _COUNTS},
    "totals": {"rows": _INT, "tokens": _INT, "supervised_tokens": _INT, "truncated": _INT},
    "files": {"*": _STR},
    "token_freq_pt": {"written": (bool,), "reason": _OPT_STR},
    "selection": {
        "dedup": _STR,
        "near_dup_threshold": _NUM,
        "decontaminate": [{"path": _STR}],
        "decontaminate_ngram": _INT,
        "mix": _OPT_DICT,
        "overlay": [{"path": _STR, "sha256": _OPT_STR}],
    },
    "run": dict,
    "mixture": {
        "dedup": [
            {
                "kind": _STR,
                "checked": {"*": _INT},
                "removed": {"*": _INT},
                "removed_total": _INT,
                "pairs": [{"kept_source": _STR, "removed_source": _STR, "count": _INT}],
            }
        ],
        "decontamination": {
            "checked": {"*": _INT},
            "removed": {"*": _INT},
            "removed_total": _INT,
            "removed_by_benchmark": {"*": _INT},
        },
        "mix": {"total": _INT, "lines": [dict]},
    },
    "engine": dict,
}
_TYPE_WORDS = {
    bool: "true/false",
    int: "an integer",
    float: "a number",
    str: "a string",
    dict: "an object",
    list: "a list",
    type(None): "null",
}


def _type_word(value: Any) -> str:
    return _TYPE_WORDS.get(type(value), type(value).__name__)


def _shape_problem(value: Any, shape: Any, where: str) -> str | None:
    """Where ``value`` departs from ``shape`` (a tuple of types, a type, a one-item list of
    shapes, or a dict of field shapes, ``"*"`` for every key), else None. Absent fields are
    fine (older manifests lack some); booleans are never integers."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{where} is {_type_word(value)}, expected an object"
        for key, sub in value.items():
            want = shape.get(key, shape.get("*"))
            if want is not None and (bad := _shape_problem(sub, want, f"{where}.{key}")):
                return bad
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"{where} is {_type_word(value)}, expected a list"
        for i, item in enumerate(value):
            if bad := _shape_problem(item, shape[0], f"{where}[{i}]"):
                return bad
        return None
    types = shape if isinstance(shape, tuple) else (shape,)
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        words = " or ".join(_TYPE_WORDS.get(t, t.__name__) for t in types)
        return f"{where} is {_type_word(value)}, expected {words}"
    counted = where.startswith(("counts.", "totals.")) or where == "tokenizer.vocab_size"
    if counted and isinstance(value, int) and value < 0:
        return f"{where} is {value}, expected a count (0 or more)"
    return None


def manifest_problem(manifest: dict[str, Any]) -> str | None:
    """The first field of ``manifest`` whose JSON type is not the one build writes, else None.
    (Its selection values are held to the options' bounds where verify re-runs the selection:
    `checks.records.selection_value_problem`, by the option schema's own validation.)"""
    for key, shape in _MANIFEST_SHAPE.items():
        if key in manifest and (bad := _shape_problem(manifest[key], shape, key)):
            return bad
    return None


@dataclass
class Batch:
    """Flattened columns of one record batch, ready for vectorized checks."""

    start_row: int  # index of the batch's first row in the whole set
    ids: list[str | None]
    sources: list[str | None]
    lengths: np.ndarray  # tokens per row (int64)
    mask_lengths: np.ndarray
    seq_len: np.ndarray
    tokens: np.ndarray  # all input_ids of the batch, concatenated (as stored: int32; else int64)
    mask: np.ndarray  # all loss_mask values, concatenated (int8)
    offsets: np.ndarray  # row r spans tokens[offsets[r]:offsets[r+1]]


# pyarrow's own conversions (`to_numpy`, `fill_null`'s scalar) import pandas when it is
# installed (it is, with `datasets`): ~0.5 s of CPU and ~80 MB in the build's driver, for
# columns a written set always has without nulls. Those are read from their buffers instead.
def _numpy(values: pa.Array) -> np.ndarray:
    """A primitive integer column without nulls as numpy, over its data buffer (no copy);
    anything else (a broken set's column) through pyarrow's own conversion."""
    if not pa.types.is_integer(values.type) or values.null_count:
        return values.to_numpy(zero_copy_only=False)
    dtype = np.dtype(values.type.to_pandas_dtype())  # for integers: numpy's own, no pandas
    data = values.buffers()[1]
    if data is None:  # an empty array may have no buffer
        return np.zeros(0, dtype=dtype)
    start = values.offset * dtype.itemsize  # a sliced array starts inside its buffer
    return np.frombuffer(data, dtype=dtype, count=len(values), offset=start)


def _filled(values: pa.Array, fill: int) -> np.ndarray:
    """An integer column as int64, nulls as ``fill``."""
    if values.null_count == 0:
        return _numpy(values).astype(np.int64, copy=False)
    valid = values.is_valid().to_numpy(zero_copy_only=False)
    raw = values.to_numpy(zero_copy_only=False)  # floats, NaN where null
    return np.where(valid, np.nan_to_num(raw, nan=fill), fill).astype(np.int64)


def _signed(values: np.ndarray) -> np.ndarray:
    """Token ids as a signed integer array: as stored (int32, no copy), else as int64."""
    return values if values.dtype.kind == "i" else values.astype(np.int64)


def iter_batches(out: OutputSet) -> Iterator[Batch]:
    """Record batches of the set as numpy arrays (requires the required columns to exist)."""
    assert out.readable
    return as_batches(out.record_batches())


def as_batches(record_batches: Iterable[pa.RecordBatch], start: int = 0) -> Iterator[Batch]:
    """Record batches (of a set, or of one shard file) as numpy arrays, rows numbered from
    ``start``."""
    for rb in record_batches:
        ids_col = rb.column("input_ids")
        mask_col = rb.column("loss_mask")
        lengths = _filled(pc.list_value_length(ids_col), 0)
        mask_lengths = _filled(pc.list_value_length(mask_col), 0)
        tokens = _signed(_numpy(pc.list_flatten(ids_col)))
        mask = _numpy(pc.list_flatten(mask_col)).astype(np.int8, copy=False)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        seq_len = _filled(rb.column("seq_len"), -1)
        yield Batch(
            start,
            rb.column("id").to_pylist(),
            rb.column("source").to_pylist(),
            lengths,
            mask_lengths,
            seq_len,
            tokens,
            mask,
            offsets,
        )
        start += rb.num_rows


@dataclass
class RowStats:
    """Per-row numbers every consumer wants (fitness, report, show), for the whole set, in the
    facts' narrow integer type (`_narrow`): compared, summed, averaged, never multiplied."""

    seq_len: np.ndarray
    supervised: np.ndarray
    runs: np.ndarray  # supervised runs per row
    pairs: np.ndarray  # positions p with mask[p] == mask[p+1] == 1
    anchors: np.ndarray  # DFlash anchors (see docs/verify.md)
    full_blocks: np.ndarray  # positions starting a block fully supervised
    token_freq: np.ndarray  # supervised token counts over the set (length = vocab or max id + 1)


def batch_stats(b: Batch, block_size: int) -> dict[str, np.ndarray]:
    """Vectorized per-row statistics of one batch (mask and ids must have equal lengths).

    Every statistic is a count of flagged positions inside a row, so each is a difference of
    one running sum at two per-row bounds: no per-token row index, position or row-end array
    (this runs at the end of every build). Equal to the per-row definitions in
    tests/output/test_readback.py on random and edge-case batches.
    """
    m = b.mask == 1
    total = m.size
    starts, ends = b.offsets[:-1], b.offsets[1:]
    cs = running_sum(m)  # cs[p] = supervised positions before p
    supervised = cs[ends] - cs[starts]
    # pairs: p and p+1 both supervised, p+1 still in the row (p < end - 1)
    pairs = _count_between(running_sum(m[:-1] & m[1:]), starts, ends - 1)
    # anchors: supervised p whose block p..p+B-1 lies in the row (p <= end - B)
    last_anchor = ends - block_size + 1
    anchors = cs[np.maximum(starts, last_anchor)] - cs[starts]
    # full blocks: anchors whose B positions are all supervised
    full = (cs[block_size:] - cs[:-block_size]) == block_size if total >= block_size else m[:0]
    full_blocks = _count_between(running_sum(full), starts, last_anchor)
    # a supervised position ends a run unless it starts a pair
    per_row = {
        "supervised": supervised,
        "pairs": pairs,
        "runs": supervised - pairs,
        "anchors": anchors,
        "full_blocks": full_blocks,
    }
    return {k: v.astype(np.int64, copy=False) for k, v in per_row.items()}


def running_sum(flags: np.ndarray) -> np.ndarray:
    """cs[p] = flags set before position p (length len(flags) + 1); int32 while it fits (half
    the memory: these arrays are a batch's whole token count long)."""
    cs = np.zeros(flags.size + 1, dtype=np.int32 if flags.size < 2**31 - 1 else np.int64)
    np.cumsum(flags, out=cs[1:])
    return cs


def _count_between(cs: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per row: flags at positions lo <= p < hi (none when hi <= lo), from their running sum."""
    top = cs.size - 1
    lo_c = np.minimum(lo, top)
    return cs[np.clip(np.maximum(lo, hi), 0, top)] - cs[lo_c]


def row_stats(out: OutputSet, block_size: int = defaults.BLOCK_SIZE) -> RowStats:
    """Per-row statistics and the supervised-token recount over the whole set."""
    return SetFacts.read(out, block_size).row_stats(out.vocab_size)


class Strings(Sequence[str | None]):
    """A column of strings kept as one Arrow array: its bytes and a 4-byte offset a row, where
    a Python list holds a ~60-byte str object a row (ids), or 4 bytes a row (``dictionary``:
    sources, a few names repeated). What `BatchFacts` keep of ids and sources, so a build's
    driver holds a few bytes a row however many rows the workers read back (issue 27)."""

    __slots__ = ("array",)

    def __init__(
        self, values: list[str | None] | pa.ChunkedArray, dictionary: bool = False
    ) -> None:
        if isinstance(values, pa.ChunkedArray):  # `joined`: the batches' arrays, not copied
            self.array: pa.Array | pa.ChunkedArray = values
            return
        array = _string_array(values)
        self.array = array.dictionary_encode() if dictionary else array

    @classmethod
    def joined(cls, parts: Iterable[Strings]) -> Strings:
        """Several columns as one, in order (the set's ids from its batches' facts)."""
        arrays = [p.array for p in parts]
        return cls(pa.chunked_array(arrays, type=arrays[0].type if arrays else pa.string()))

    def __len__(self) -> int:
        return len(self.array)

    @overload
    def __getitem__(self, index: int) -> str | None: ...
    @overload
    def __getitem__(self, index: slice) -> list[str | None]: ...
    def __getitem__(self, index: int | slice) -> str | list[str | None] | None:
        if isinstance(index, slice):
            return self.tolist()[index]
        return self.array[index].as_py()  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[str | None]:
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Strings):
            return self.tolist() == other.tolist()
        return isinstance(other, list) and self.tolist() == other

    __hash__ = None  # type: ignore[assignment]

    def tolist(self) -> list[str | None]:
        return self.array.to_pylist()  # type: ignore[no-any-return]

    def __repr__(self) -> str:
        return f"Strings({self.tolist()!r})"


def id_digests(ids: Sequence[str | None]) -> np.ndarray:
    """`digest64` of each id as uint64, 0 for a null id (computed where the batch is read: a
    build's worker, or verify)."""
    return np.fromiter((0 if i is None else digest64(i) for i in ids), np.uint64, len(ids))


def _string_array(values: list[str | None]) -> pa.Array:
    """A string array from its buffers (`pa.array` on a list imports pandas where it is
    installed: ~0.5 s and ~80 MB in every worker and the driver)."""
    encoded = [b"" if v is None else v.encode() for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
    nulls = [i for i, v in enumerate(values) if v is None]
    validity = None
    if nulls:
        valid = np.ones(len(values), dtype=bool)
        valid[nulls] = False
        validity = pa.py_buffer(np.packbits(valid, bitorder="little").tobytes())
    return pa.StringArray.from_buffers(
        len(values),
        pa.py_buffer(offsets.tobytes()),
        pa.py_buffer(b"".join(encoded)),
        validity,
        len(nulls),
    )


def _narrow(values: np.ndarray, seen: list[np.ndarray]) -> np.ndarray:
    """An integer per-row array in the narrowest of int16 / int32 its values fit (lengths and
    counts under 32,768 tokens a row: int16; token ids: int32; a broken set's ids may need
    int64, kept), sharing one object with an equal array already kept (``seen``: lengths, mask
    lengths and seq_len of a sound batch are one array). Readers compare, list, sum or average
    them (numpy accumulates narrow integers in int64 / float64), never compute other values in
    the narrow type (`RowStats` keeps it)."""
    if values.dtype.kind == "i" and values.size and values.dtype.itemsize > 2:
        low, high = int(values.min()), int(values.max())
        for narrow in (np.int16, np.int32):
            info = np.iinfo(narrow)
            if (
                np.dtype(narrow).itemsize < values.dtype.itemsize
                and info.min <= low <= high <= info.max
            ):
                values = values.astype(narrow)
                break
    for kept in seen:
        if kept.dtype == values.dtype and np.array_equal(kept, values):
            return kept
    seen.append(values)
    return values


@dataclass
class BatchFacts:
    """What the fast checks need of one record batch, from one pass over its tokens: per-row
    numbers, the rows holding impossible values, the supervised-token histogram (sparse).

    Pure in the batch, so it is computed wherever the batch is read: by `verify` here, and in
    a build by the worker that wrote the shard, from the file it wrote (issue 27: the driver
    then never reads the set's tokens back; `SetFacts.gather`). Every field is what the
    checks computed from the batch itself before, so both give the same results.
    """

    start_row: int
    ids: Strings
    sources: Strings
    id_digests: np.ndarray  # uint64 `digest64` of each id (0: null): `SetFacts.ids_distinct`
    lengths: np.ndarray  # tokens per row (int16 or int32 where it fits, as every per-row array)
    mask_lengths: np.ndarray
    seq_len: np.ndarray  # the column as stored (-1 where null)
    token_min: np.ndarray  # per row; 0 for an empty row
    token_max: np.ndarray  # per row; -1 for an empty row
    bad_mask_rows: list[int]  # rows (in the batch) holding a loss_mask value other than 0/1
    supervised_within: np.ndarray | None
    """Supervised positions per row along the token offsets; None when the lengths differ."""
    supervised_common: np.ndarray
    """Supervised positions per row within its common length (ids and mask): the data counts."""
    stats: dict[str, np.ndarray]  # `batch_stats` of the batch cut to common lengths, + seq_len
    freq_ids: np.ndarray  # supervised token ids that occur (ascending, >= 0)
    freq_counts: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.ids)


def batch_facts(b: Batch, block_size: int = defaults.BLOCK_SIZE) -> BatchFacts:
    """The `BatchFacts` of one batch (see there)."""
    n = len(b.lengths)
    nonempty = b.lengths > 0
    token_min = np.zeros(n, dtype=np.int64)
    token_max = np.full(n, -1, dtype=np.int64)
    if b.tokens.size and nonempty.any():
        starts = b.offsets[:-1][nonempty]  # empty rows between them add no element
        token_min[nonempty] = np.minimum.reduceat(b.tokens, starts)
        token_max[nonempty] = np.maximum.reduceat(b.tokens, starts)
    bad_mask_rows: list[int] = []
    if b.mask.size and (b.mask.min() < 0 or b.mask.max() > 1):
        bad_mask_rows = _rows_of(np.nonzero((b.mask != 0) & (b.mask != 1))[0], b.offsets)
    same = b.tokens.size == b.mask.size and np.array_equal(b.lengths, b.mask_lengths)
    t = b if same else _trim_to_common(b)
    stats = batch_stats(t, block_size)
    stats["seq_len"] = t.lengths
    if np.array_equal(b.lengths, b.mask_lengths):
        common = stats["supervised"]
    else:
        mlen = np.minimum(b.lengths, b.mask_lengths)
        cs = running_sum(b.mask == 1)
        moff = np.concatenate([[0], np.cumsum(b.mask_lengths)])
        common = (cs[moff[:-1] + mlen] - cs[moff[:-1]]).astype(np.int64)
    bad_len = (b.lengths != b.mask_lengths) | (b.lengths != b.seq_len)
    within = None if bad_len.any() else stats["supervised"]
    sup = t.tokens[t.mask == 1]
    freq_ids, freq_counts = _sparse_counts(sup[sup >= 0])
    seen: list[np.ndarray] = []
    return BatchFacts(
        b.start_row,
        Strings(b.ids),
        Strings(b.sources, dictionary=True),
        id_digests(b.ids),
        _narrow(b.lengths, seen),
        _narrow(b.mask_lengths, seen),
        _narrow(b.seq_len, seen),
        _narrow(token_min, seen),
        _narrow(token_max, seen),
        bad_mask_rows,
        None if within is None else _narrow(within, seen),
        _narrow(common, seen),
        {k: _narrow(v, seen) for k, v in stats.items()},
        _narrow(freq_ids, seen),
        _narrow(freq_counts, seen),
    )


def shard_facts(
    fmt_layout: Layout, path: Path, block_size: int = defaults.BLOCK_SIZE
) -> list[BatchFacts]:
    """The facts of one shard file, its rows numbered from 0 (read back from the file)."""
    return [batch_facts(b, block_size) for b in as_batches(fmt_layout.batches(path))]


FREQ_LIMIT = 1 << 24
"""Supervised token ids counted densely up to here (16.7M: above any vocabulary). Only a broken
set holds larger ones (the structure check names their rows); a recount of ids up to 2**63 as
one dense array would not fit in memory, so they are left out of it."""

_NONE = np.zeros(0, dtype=np.int32)


def _sparse_counts(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which ids occur and how often (ascending): bincount where the ids are a vocabulary's,
    else by sorting (an id of 2**40 must not allocate 2**40 counters)."""
    if not ids.size:
        return _NONE.astype(np.int64), _NONE.astype(np.int64)
    if int(ids.max()) < FREQ_LIMIT:
        counts = np.bincount(ids)
        present = np.flatnonzero(counts)
        return present.astype(np.int64), counts[present].astype(np.int64)
    present, counts = np.unique(ids, return_counts=True)
    return present.astype(np.int64), counts.astype(np.int64)


class SetFacts:
    """The `BatchFacts` of a whole set, in row order, with their token histograms folded into
    one dense count as they arrive: what the fast checks read instead of the tokens. Held to the
    end of a build, so it keeps a few bytes a row (`Strings`, int32) and no per-batch histogram."""

    def __init__(self) -> None:
        self.batches: list[BatchFacts] = []
        self.token_freq = np.zeros(0, dtype=np.int64)
        self.rows = 0

    def add(self, facts: BatchFacts, start_row: int | None = None) -> None:
        """One batch in set order (``start_row``: where it starts in the set, default its own)."""
        if facts.freq_ids.size:
            keep = facts.freq_ids < FREQ_LIMIT
            ids, counts = facts.freq_ids[keep], facts.freq_counts[keep]
            if ids.size and int(ids[-1]) >= self.token_freq.size:
                grown = np.zeros(int(ids[-1]) + 1, dtype=np.int64)
                grown[: self.token_freq.size] = self.token_freq
                self.token_freq = grown
            self.token_freq[ids] += counts
        start = facts.start_row if start_row is None else start_row
        self.batches.append(replace(facts, start_row=start, freq_ids=_NONE, freq_counts=_NONE))
        self.rows = start + facts.rows

    def add_shard(self, facts: Iterable[BatchFacts]) -> None:
        """One shard's facts (its rows numbered from 0, as `shard_facts` gives them), after
        every shard before it."""
        base = self.rows
        for f in facts:
            self.add(f, base + f.start_row)

    @classmethod
    def read(cls, out: OutputSet, block_size: int = defaults.BLOCK_SIZE) -> SetFacts:
        """Read every batch of the set once (none when the set lacks the required columns)."""
        facts = cls()
        if out.readable and _has_columns(out):
            for b in iter_batches(out):
                facts.add(batch_facts(b, block_size))
        return facts

    @classmethod
    def gather(cls, shards: Iterable[list[BatchFacts]]) -> SetFacts:
        """Shards' facts (each numbered from 0, as `shard_facts` gives them) in set order."""
        facts = cls()
        for shard in shards:
            facts.add_shard(shard)
        return facts

    def ids(self) -> list[str | None]:
        return [i for f in self.batches for i in f.ids]

    def ids_distinct(self) -> bool:
        """No null, no empty string and no id twice in the set.

        Decided on the batches' 64-bit id digests, sorted: 16 bytes a row for the moment it
        takes. Arrow's ``count_distinct`` over the ids hashed every string again into a table
        of ~130 bytes a row, the peak of a build's driver at its end (~1.3 GB at 10M rows).
        Equal ids have equal digests, so distinct digests prove distinct ids; two equal
        digests (a duplicate, or a 64-bit collision, ~3e-6 at 10M rows) answer False, and the
        caller then compares the ids themselves."""
        for f in self.batches:
            a = f.ids.array
            if a.null_count or (len(a) and pc.min_max(pc.utf8_length(a))["min"].as_py() == 0):
                return False
        if not self.batches:
            return True
        digests = np.concatenate([f.id_digests for f in self.batches])
        digests.sort()
        return not bool((digests[1:] == digests[:-1]).any())

    def id_column(self) -> Strings:
        """The set's ids as one column (indexable; a few bytes a row, not a list of str)."""
        return Strings.joined(f.ids for f in self.batches)

    def sources(self) -> list[str | None]:
        return [s for f in self.batches for s in f.sources]

    def row_stats(self, vocab_size: int) -> RowStats:
        """Per-row statistics and the supervised-token recount (`row_stats`)."""
        size = max(vocab_size, 1, self.token_freq.size)
        freq = np.zeros(size, dtype=np.int64)
        freq[: self.token_freq.size] = self.token_freq
        names = ("seq_len", "supervised", "runs", "pairs", "anchors", "full_blocks")
        empty = np.zeros(0, dtype=np.int64)
        # in the batches' narrow type (the widest of them): 12 bytes a row where int64 copies
        # were 48, held by a build's driver through its checks (numpy sums narrow integers in
        # int64 and takes their mean and median in float64: the consumers' answers are exact)
        joined = {
            k: np.concatenate([f.stats[k] for f in self.batches]) if self.batches else empty
            for k in names
        }
        return RowStats(token_freq=freq, **joined)


def _rows_of(positions: np.ndarray, offsets: np.ndarray) -> list[int]:
    """Distinct row indices (within a batch) holding the given flat token positions."""
    if positions.size == 0:
        return []
    return sorted(set((np.searchsorted(offsets, positions, side="right") - 1).tolist()))


def _has_columns(out: OutputSet) -> bool:
    return all(c in out.column_names for c in REQUIRED_COLUMNS)


def _trim_to_common(b: Batch) -> Batch:
    """Make ids and mask the same length per row (for stats on a structurally broken set)."""
    lengths = np.minimum(b.lengths, b.mask_lengths)
    ids_parts, mask_parts = [], []
    moff = np.zeros(len(b.mask_lengths) + 1, dtype=np.int64)
    np.cumsum(b.mask_lengths, out=moff[1:])
    for r, n in enumerate(lengths):
        ids_parts.append(b.tokens[b.offsets[r] : b.offsets[r] + n])
        mask_parts.append(b.mask[moff[r] : moff[r] + n])
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    empty = np.zeros(0, dtype=np.int64)
    return Batch(
        b.start_row,
        b.ids,
        b.sources,
        lengths,
        lengths,
        b.seq_len,
        np.concatenate(ids_parts) if ids_parts else empty,
        np.concatenate(mask_parts).astype(np.int8) if mask_parts else empty.astype(np.int8),
        offsets,
    )


def supervised_runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal runs [start, end) of mask == 1."""
    m = np.concatenate([[0], (np.asarray(mask) == 1).astype(np.int8), [0]])
    d = np.diff(m)
    starts = np.nonzero(d == 1)[0]
    ends = np.nonzero(d == -1)[0]
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def read_jsonl(path: Path) -> tuple[list[Any], list[int]]:
    """Parsed lines of a JSONL file and the 1-based numbers of lines that do not parse."""
    bad: list[int] = []
    return list(iter_jsonl(path, bad)), bad


def iter_jsonl(path: Path, bad: list[int]) -> Iterator[Any]:
    """`read_jsonl` one line at a time (a set's prompts.jsonl holds every prompt-only row of the
    input: read whole, a build's checks held them all as Python objects, 1.2 GB for 1 GB of
    prompts); the numbers of lines that do not parse are appended to ``bad``."""
    if not path.exists():
        return
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                bad.append(i)
                continue
            yield value
