"""Read source files into `RawRow`s, streaming, without interpreting the rows.

Reading never fails because of one bad row: a line that is not UTF-8 or not JSON becomes a
`RawRow` carrying a `Reject`, so accounting can count it. Only problems with the file itself
(missing, unsupported type, unreadable or corrupt container) raise `SourceError`.

Memory stays bounded for JSONL, Parquet and Arrow (chunked reads, record batches). A ``.json``
document (array or single object) is parsed whole, as JSON cannot be streamed with the standard
library. Row indices count from 0 across all files of a source; blank lines are not rows.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
import zstandard

from draftset.core import reasons
from draftset.core.errors import UsageError
from draftset.core.files import name_problem
from draftset.core.hub import cache_revisions, hub_offline
from draftset.core.records import RawRow, Reject, RowProblem
from draftset.core.words import plural
from draftset.sources.normalize import detect_format

CHUNK_BYTES = 1 << 20
"""Bytes read per step from a JSONL stream: bounds memory whatever the file size."""

ARROW_ROWS = 1024
"""Rows converted to Python dicts at a time from Parquet / Arrow batches."""

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ARROW_FILE_MAGIC = b"ARROW1"
_BOM = b"\xef\xbb\xbf"
_WHITESPACE = frozenset(b" \t\r\n\f\v")

_TEXT_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json"}
_BINARY_KINDS = {".parquet": "parquet", ".arrow": "arrow", ".feather": "arrow"}
_COMPRESSIONS = {".gz": "gz", ".zst": "zst", ".zstd": "zst"}

_T = TypeVar("_T")


@dataclass
class Source:
    """One named input: a file or folder, with optional shape override and mixing weight."""

    name: str
    path: Path
    format: str | None = None
    fields: dict[str, str] | None = None
    weight: float | None = None
    count: int | None = None
    preset: str | None = None  # a known public set's layout (see presets.py)
    # the name was given (a recipe's ``name:``), not derived from the path: it is kept as
    # given, and a derived name equal to it is the one renamed (`config.recipe.unique_names`)
    named: bool = field(default=False, compare=False)
    # (size, mtime_ns) of each file when it was counted: a file that changes between the
    # count and the read, or while it is read, stops the run (`_check_unchanged`)
    seen: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        # `Source("a", "a.jsonl")` (the API's sources=[Source(...)]): a path given as text was
        # an AttributeError traceback at the first `.exists()`; anything else is no path
        if isinstance(self.path, str | os.PathLike) and not isinstance(self.path, Path):
            self.path = Path(self.path)
        elif not isinstance(self.path, Path):
            raise UsageError(
                f"source {self.name}: path expected a string or a path, got"
                f" {type(self.path).__name__} {self.path!r}"
            )


class SourceError(UsageError):
    """A source that cannot be read at all (the CLI prints it as one line, exit code 2)."""


# --- discovery --------------------------------------------------------------------------------


def is_hf_dataset_dir(path: Path) -> bool:
    """True for a `datasets` ``save_to_disk`` folder (``state.json`` next to ``*.arrow`` or
    ``dataset_info.json``: one whose shards are all gone is still one, and says so)."""
    return (path / "state.json").is_file() and (
        any(path.glob("*.arrow")) or (path / "dataset_info.json").is_file()
    )


def is_data_name(path: str | os.PathLike[str]) -> bool:
    """Whether the name is a data file's draftset reads (``.jsonl``, ``.json.gz``, ...)."""
    return _name_kind(Path(path)) is not None


def _name_kind(path: Path) -> tuple[str, str | None] | None:
    """(container kind, compression from the name) of a supported file name, else None."""
    name = path.name.lower()
    compression = None
    for suffix, comp in _COMPRESSIONS.items():
        if name.endswith(suffix):
            compression, name = comp, name[: -len(suffix)]
            break
    suffix = os.path.splitext(name)[1]
    if suffix in _TEXT_KINDS:
        return _TEXT_KINDS[suffix], compression
    if suffix in _BINARY_KINDS and compression is None:
        return _BINARY_KINDS[suffix], None
    return None


_OTHER_COMPRESSIONS = frozenset(
    {".bz2", ".xz", ".lzma", ".lz", ".lz4", ".br", ".sz", ".z", ".zip", ".7z", ".tgz", ".tar"}
)
"""Compression (or archive) suffixes draftset does not read: a data file so named is refused,
never skipped like a README (its rows would be left out silently)."""


def _compressed_unreadable(path: Path) -> str | None:
    """Why a file whose name says it is data (``.jsonl``, ``.json``, ``.ndjson``, ``.parquet``,
    ``.arrow``) cannot be read for its compression (``b.jsonl.bz2``, ``b.parquet.gz``), else
    None: one line naming it, in a source folder as when named directly."""
    stem, compression = os.path.splitext(path.name)
    kind = os.path.splitext(stem)[1].lower()
    comp = compression.lower()
    if kind in _TEXT_KINDS and comp in _OTHER_COMPRESSIONS:
        hint = "decompress it, or compress it with gzip or zstd"
    elif kind in _BINARY_KINDS and (comp in _OTHER_COMPRESSIONS or comp in _COMPRESSIONS):
        hint = "decompress it (Parquet and Arrow files are read uncompressed)"
    else:
        return None
    return f"{path}: a compressed data file draftset cannot read ({compression[1:]}): {hint}"


def _kind(path: Path) -> tuple[str, str | None]:
    """(container kind, compression) from the file name, sniffing compression magic bytes."""
    found = _name_kind(path)
    if found is None and (why := _compressed_unreadable(path)):
        raise SourceError(why)
    if found is None:
        raise SourceError(
            f"{path}: unsupported file type (expected .jsonl, .json, .parquet, .arrow, "
            "optionally .gz/.zst for JSON)"
        )
    kind, compression = found
    if kind not in _TEXT_KINDS.values():
        return kind, None
    sniffed = _sniff_compression(path)
    if compression is not None and sniffed is None and _has_bytes(path):
        suffix = path.suffix  # `a.jsonl.gz` of plain text: gzip's "Not a gzipped file (b'{"')"
        raise SourceError(
            f"{path}: named {suffix}, but its bytes are neither gzip nor zstd data (no header"
            f" of either): if it is plain JSON, name it {path.name[: -len(suffix)]}"
        )
    return kind, sniffed or compression  # the bytes tell: zstd named .gz reads, as gzip .jsonl


def _sniff_compression(path: Path) -> str | None:
    """Detect gzip / zstd by magic bytes, so a mis-named ``.jsonl`` still reads."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if head.startswith(_GZIP_MAGIC):
        return "gz"
    if head.startswith(_ZSTD_MAGIC) or int.from_bytes(head, "little") in _ZSTD_SKIPPABLE:
        return "zst"  # a zstd frame, or a skippable frame before one
    return None


def _has_bytes(path: Path) -> bool:
    """Whether a file holds any byte (an empty one is `_open_bytes`' own error)."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return True  # the read says why


def _check_readable(path: Path) -> None:
    """Raise `SourceError` for a data file that cannot be read: dangling symlink, not a regular
    file (a FIFO would block the run), or refused by the OS. Never skipped silently."""
    try:
        st = path.stat()
    except OSError as exc:
        what = "dangling symbolic link" if path.is_symlink() else exc.strerror or str(exc)
        raise SourceError(f"{path}: cannot read: {what}") from exc
    if not stat.S_ISREG(st.st_mode):
        raise SourceError(f"{path}: cannot read: not a regular file")
    try:
        with path.open("rb") as f:
            head = f.read(6)
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    wide = next((name for bom, name in _WIDE_BOMS if head.startswith(bom)), None)
    if wide is not None:  # read as UTF-8 it was rows of noise, each rejected
        raise SourceError(
            f"{path}: cannot read: {wide} text (its byte-order mark); save it as UTF-8"
        )
    found = _name_kind(path)
    foreign = next((name for magic, name in _OTHER_MAGICS if head.startswith(magic)), None)
    if foreign is not None and found is not None and found[0] in ("jsonl", "json"):
        # gzip and zstd are sniffed whatever the name; these were split on newlines, each
        # piece rejected `invalid_utf8` (the file's rows gone, exit 0 beside another source)
        raise SourceError(
            f"{path}: {foreign} data under a JSON name: draftset reads JSON plain, gzip or"
            " zstd; decompress it, or compress it with gzip or zstd"
        )
    binary = next((kind for magic, kind in _TABLE_MAGICS if head.startswith(magic)), None)
    if binary is not None and found is not None and found[0] in ("jsonl", "json"):
        # split on newlines, its bytes were rows of noise, each rejected: the file's rows gone
        renamed = _JSON_SUFFIX.sub(f".{binary.lower()}", path.name)
        raise SourceError(f"{path}: a {binary} file, not JSON: rename it {renamed}")


_TABLE_MAGICS = ((b"PAR1", "Parquet"), (b"ARROW1", "Arrow"))  # a file's first bytes
_OTHER_MAGICS = (
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
    (b"PK\x03\x04", "zip"),
    (b"7z\xbc\xaf\x27\x1c", "7z"),
    (b"\x04\x22\x4d\x18", "lz4"),
)
"""First bytes of compressions draftset does not read (no JSON text starts so)."""
_JSON_SUFFIX = re.compile(r"\.(jsonl|ndjson|json)$", re.IGNORECASE)
_LINES_SUFFIX = re.compile(r"\.(jsonl|ndjson)(?=(\.(gz|zst|zstd))?$)", re.IGNORECASE)


def _refuse_one_document(path: Path) -> None:
    """Raise `SourceError` for a JSON Lines file that is one JSON document (a pretty-printed
    array or object): read line by line, every line was rejected ``invalid_json`` and, beside
    other sources, the file silently gone. Judged on clear evidence only: its first non-blank
    line is a lone ``[`` or ``{`` (never a row) and the whole file parses as one document, so a
    JSON Lines file with damaged lines still reads, those lines rejected; or its only line is
    an array of objects (``json.dump(rows, f)``: one ``not_an_object`` reject, the rows gone).
    (The reverse, JSON Lines saved as ``.json``, is read as JSON Lines: `_json_is_lines`.)"""
    found = _name_kind(path)
    if found is None or found[0] != "jsonl":
        return
    try:
        compression = found[1] or _sniff_compression(path)
        with _open_bytes(path, compression) as stream:
            lines = (line for line in _iter_lines(stream) if not _is_blank(line))
            first = next(lines, b"")
            alone = next(lines, None) is None
        head = first.removeprefix(_BOM).strip()
        if _rows_on_cr_lines(head):
            raise SourceError(
                f"{path}: its lines end in a carriage return alone (CR, old Mac line ends),"
                " which JSON Lines does not split on (read as one line, its rows were one"
                " invalid_json reject): convert the line ends to LF, e.g. tr '\\r' '\\n'"
            )
        if head.startswith(b"[") and alone:  # `json.dump(rows, f)`: every row on one line
            rows = json.loads(head.decode("utf-8"))
            if not (rows and isinstance(rows, list) and all(isinstance(r, dict) for r in rows)):
                return  # one value that is no array of rows: its line's own reject says so
        elif head not in (b"[", b"{"):
            return
        else:
            with _open_bytes(path, compression) as stream:
                json.loads(stream.read().removeprefix(_BOM).decode("utf-8"))
    except (*_READ_ERRORS, ValueError, RecursionError):  # not one document: read as lines
        return
    renamed = _LINES_SUFFIX.sub(".json", path.name)
    raise SourceError(f"{path}: one JSON document, not JSON Lines: rename it {renamed}")


def _rows_on_cr_lines(line: bytes) -> bool:
    """Whether a line (split on LF) holds JSON values separated by lone CRs: a file whose lines
    end in CR alone. A raw CR is never inside a JSON string (control characters are escaped),
    so one between two values that each parse is a line end; the line itself does not parse."""
    if b"\r" not in line:
        return False
    pieces = [p for p in line.split(b"\r") if p.strip()]
    if len(pieces) < 2:
        return False
    try:
        json.loads(line)
    except ValueError:
        pass
    else:
        return False
    try:
        return all(isinstance(json.loads(p), dict) for p in pieces[:2])
    except ValueError:
        return False


# UTF-32 first: its little-endian mark begins with UTF-16's
_WIDE_BOMS = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def _walk_error(exc: OSError) -> None:
    raise SourceError(f"{exc.filename}: cannot read folder: {exc.strerror or exc}") from exc


def scan_source(path: Path) -> tuple[list[Path], list[dict[str, str]]]:
    """The files of a source (see `list_files`) and the entries skipped on purpose.

    Skipped entries are ``{"path": relative path, "why": ...}``: hidden entries (not descended
    into), files of an unsupported type, symlinked folders (not followed). A file with a
    supported name that cannot be read, or a folder that cannot be listed, raises `SourceError`.
    """
    path = Path(path)
    if not path.exists():
        if path.is_symlink():
            raise SourceError(f"{path}: cannot read: dangling symbolic link")
        raise SourceError(f"{path}: no such file or directory")
    if not path.is_dir():
        _check_readable(path)  # first: sniffing a FIFO's compression would block
        _kind(path)
        _refuse_one_document(path)
        return [path], []
    if is_hf_dataset_dir(path):  # an Arrow set given as a source is one too
        return [path], []
    shards = _parquet_set_shards(path)
    if shards is not None:
        for shard in shards:
            _check_readable(shard)
        if not shards:
            raise SourceError(f"{path}: a draftset set whose manifest lists no data shards")
        return shards, []
    _refuse_dataset_dict(path)
    found: list[Path] = []
    skipped: list[dict[str, str]] = []

    def skip(p: Path, why: str) -> None:
        skipped.append({"path": p.relative_to(path).as_posix(), "why": why})

    for dirpath, dirnames, filenames in os.walk(path, onerror=_walk_error):
        here = Path(dirpath)
        _refuse_hub_cache_revisions(here, dirnames)
        keep = []
        for d in dirnames:
            made_by = _made_by_draftset(here / d)
            if d.startswith("."):
                skip(here / d, "hidden")
            elif (here / d).is_symlink():
                skip(here / d, "symlinked folder (not followed)")
            elif made_by is not None:
                skip(here / d, made_by)
            elif is_hf_dataset_dir(here / d):
                found.append(here / d)
            else:
                keep.append(d)
        dirnames[:] = keep
        if "dataset_dict.json" in filenames:
            _refuse_dataset_dict(here)
        _refuse_datasets_cache(here, filenames)
        generated = _generate_files(here, filenames)
        model = _model_files(filenames)
        for f in filenames:
            if problem := name_problem("", here / f):  # its ids and manifest entry: no UTF-8
                raise SourceError(problem)
            if f.startswith("."):
                skip(here / f, "hidden")
            elif f in generated:
                skip(here / f, generated[f])
            elif f in model:
                skip(here / f, model[f])
            elif why := _compressed_unreadable(here / f):
                raise SourceError(why)
            elif _name_kind(here / f) is None:
                skip(here / f, "unsupported type")
            else:
                _check_readable(here / f)
                _refuse_one_document(here / f)
                found.append(here / f)
    if not found and any(e["why"] == MODEL_FILE for e in skipped):  # `build model/`
        raise SourceError(
            f"{path}: a model or tokenizer folder, no data (its files are a model's or"
            " tokenizer's: config.json, tokenizer.json, ...): give the data files as the source;"
            " the tokenizer folder goes to --tokenizer"
        )
    if not found:
        raise SourceError(f"{path}: folder holds no supported data files")
    found.sort(key=lambda p: p.relative_to(path).parts)
    skipped.sort(key=lambda e: e["path"].split("/"))
    return found, skipped


MODEL_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "chat_template.json",
        "preprocessor_config.json",
        "processor_config.json",
        "model.safetensors.index.json",
        "pytorch_model.bin.index.json",
    }
)
"""The JSON files of a model or tokenizer folder (Hugging Face's layout): never data."""
_TOKENIZER_MARKS = ("tokenizer_config.json", "tokenizer.json")


MODEL_FILE = "a model's or tokenizer's file, not data"


def _model_files(filenames: list[str]) -> dict[str, str]:
    """Files of a model or tokenizer folder inside a source folder (one holding
    ``tokenizer_config.json`` or ``tokenizer.json``), each with why it is skipped: the tokenizer
    kept beside the data had its config.json, tokenizer.json, ... read as rows (rejected), and
    vocab.json taken for an Alpaca row. A file so named elsewhere is data as any other."""
    if not any(m in filenames for m in _TOKENIZER_MARKS):
        return {}
    return {f: MODEL_FILE for f in filenames if f in MODEL_FILES}


SPLIT_WORDS = {
    "train": "train",
    "training": "train",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "test": "test",
    "testing": "test",
    "eval": "test",
    "evaluation": "test",
}
"""Words naming a split in a file or folder name (the keywords `datasets` resolves data files
by), between ``-``, ``_``, ``.``, a space, a digit or a path separator."""


def _split_of(relative: Path) -> str | None:
    """The split a data file's path inside its source folder names (its last such word)."""
    words = re.split(r"[-_. /\\0-9]+", relative.as_posix().lower())
    named = [SPLIT_WORDS[w] for w in words if w in SPLIT_WORDS]
    return named[-1] if named else None


def refuse_several_splits(folder: Path) -> None:
    """A source folder whose files name several splits (a hub dataset downloaded as is:
    ``data/train-00000-of-00001.parquet`` beside ``data/test-…``) would be read as one source
    and its test split trained on, as a DatasetDict folder would (`_refuse_dataset_dict`).
    A pre-flight of `build`, `run` and `generate` (exit 2), not a reading rule: `verify`
    re-reads what a build read."""
    if not folder.is_dir() or is_hf_dataset_dir(folder):
        return
    by_split: dict[str, list[Path]] = {}
    for f in list_files(folder):
        split = _split_of(f.relative_to(folder))
        if split is not None:
            by_split.setdefault(split, []).append(f)
    if len(by_split) < 2:
        return
    listed = ", ".join(f"{k}: {plural(len(v), 'file')}" for k, v in sorted(by_split.items()))
    first = by_split.get("train", next(iter(by_split.values())))[0]
    raise SourceError(
        f"{folder}: files of several splits ({listed}): give one split's files as the"
        f" sources, e.g. {first}"
    )


def _refuse_hub_cache_revisions(folder: Path, dirnames: list[str]) -> None:
    """A hub cache folder (``~/.cache/huggingface/hub/datasets--org--name``: ``blobs/``, and
    under ``snapshots/`` one folder per downloaded revision, each the whole dataset) with
    several revisions: each was read, the same rows twice (two versions mixed when they
    differ), exit 0. Which revision is the user's to say (``refs/main`` names the newest)."""
    if "blobs" not in dirnames or "snapshots" not in dirnames:
        return
    found = cache_revisions(folder)
    if found is None or len(found[0]) < 2:
        return
    revisions, chosen, is_main = found
    ref = " (refs/main)" if is_main else ""
    raise SourceError(
        f"{folder}: a Hugging Face hub cache folder of {len(revisions)} revisions (snapshots:"
        f" {', '.join(revisions)}), each the whole dataset: give one revision's folder, e.g."
        f" {folder / 'snapshots' / chosen}{ref}"
    )


_CACHE_FILE = re.compile(r"cache-[0-9a-f]+\.arrow")


def _refuse_datasets_cache(folder: Path, names: list[str]) -> None:
    """A folder of the `datasets` cache (``dataset_info.json``, the split's
    ``json-train.arrow``, and a ``cache-<hash>.arrow`` per ``.map`` / ``.filter`` run on it):
    its cache files are earlier results over the same rows (a filter's hold only indices),
    which were read as more rows (5 rows read as 16, exit 0)."""
    caches = sorted(n for n in names if _CACHE_FILE.fullmatch(n))
    if not caches or "dataset_info.json" not in names:
        return
    own = sorted(n for n in names if n.endswith(".arrow") and n not in caches)
    example = f" e.g. {folder / own[0]}," if own else ""
    raise SourceError(
        f"{folder}: a Hugging Face datasets cache folder (dataset_info.json and"
        f" {plural(len(caches), 'cache-*.arrow file')}, earlier map/filter results, not more"
        f" rows): give the split's own file(s),{example} or save the dataset you mean with"
        " save_to_disk and give that folder"
    )


def _refuse_dataset_dict(folder: Path) -> None:
    """A ``DatasetDict.save_to_disk`` folder (``dataset_dict.json`` and a folder a split) is
    several splits: reading it as one source trained on the test split too, and read its
    ``dataset_dict.json`` as a row. Which split is the user's to say."""
    marker = folder / "dataset_dict.json"
    if not marker.is_file():
        return
    try:
        splits = json.loads(marker.read_text(encoding="utf-8")).get("splits")
    except (OSError, ValueError, AttributeError):
        splits = None
    names = [str(x) for x in splits] if isinstance(splits, list) else []
    listed = f" (splits: {', '.join(names)})" if names else ""
    example = f", e.g. {folder / names[0]}" if names else ""
    raise SourceError(
        f"{folder}: a DatasetDict saved with save_to_disk{listed}: give one split's folder as"
        f" the source{example}"
    )


def built_set_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of the set draftset built at ``folder`` (its manifest.json says
    ``"format": "draftset/<n>"``), else None."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    return manifest if isinstance(fmt, str) and fmt.startswith("draftset/") else None


def _parquet_set_shards(folder: Path) -> list[Path] | None:
    """The data shards (``data/*.parquet``, in order) a Parquet set's manifest lists, when
    ``folder`` is a set draftset built; None for any other folder. Read as a plain folder, its
    manifest, verify record and rejects were rows, its prompts queued again as prompts."""
    manifest = built_set_manifest(folder)
    if manifest is None:
        return None
    listed = manifest.get("files")
    names = [str(n) for n in listed] if isinstance(listed, dict) else []
    shards = [n for n in names if n.startswith("data/") and n.endswith(".parquet")]
    return [folder / n for n in sorted(shards)]


def _json_format(path: Path) -> str:
    """The ``format`` string of a small JSON object file ("" when absent or unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    fmt = data.get("format") if isinstance(data, dict) else None
    return fmt if isinstance(fmt, str) else ""


def _made_by_draftset(folder: Path) -> str | None:
    """Why a subfolder of a source folder is skipped when draftset wrote it, else None.

    A built set (its manifest.json says ``draftset/<n>``) moved into a source folder would be
    read as training rows a second time, its prompts.jsonl as prompts; a `run` work folder
    holds the queue and answers of rows that are in the sources already.
    """
    if built_set_manifest(folder) is not None:
        return "a draftset output (built set), not input"
    if _json_format(folder / "state.json").startswith("draftset-run/"):
        return "a draftset run work folder, not input"
    return None


def _generate_files(here: Path, names: list[str]) -> dict[str, str]:
    """`generate`'s run file (``X.run.json``) beside its answers in a source folder: its
    record of settings, not rows; and its errors (``X.errors.jsonl`` beside that run file):
    the rows it could not answer, some with messages the target disagreed with, not rows to
    train on. The answers ``X.jsonl`` are read as usual; the input the run answered into them
    (``prompts.jsonl`` beside them, `_generate_inputs`) is skipped: its rows are those answers."""
    out: dict[str, str] = {}
    for name in names:
        if name.endswith(".run.json") and _json_format(here / name) == "draftset-generate-run":
            out[name] = "a draftset generate run file, not rows"
            stem = name.removesuffix(".run.json")
            errors = stem + ".errors.jsonl"
            if errors in names:
                out[errors] = "a draftset generate errors file, not rows"
            answers = stem + ".jsonl"
            for read_by_it in (
                _generate_inputs(here / name, names, answers) if answers in names else []
            ):
                out.setdefault(
                    read_by_it,
                    f"the input draftset generate answered into {answers} ({name}): its rows"
                    " are read as those answers, not queued again",
                )
    return out


_DATA_SUFFIXES = re.compile(r"(\.(jsonl|json|parquet|arrow|gz|zst))+$")


def _generate_inputs(run_file: Path, names: list[str], answers: str) -> list[str]:
    """The files among ``names`` that the `generate` run of ``run_file`` read as its input:
    the sources its run file names (``settings.inputs``, by source name: ``prompts`` for
    ``prompts.jsonl``). Read beside the answers they were all queued again as prompts, the
    answered rows counted twice."""
    try:
        run = json.loads(run_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    settings = run.get("settings") if isinstance(run, dict) else None
    inputs = settings.get("inputs") if isinstance(settings, dict) else None
    if not isinstance(inputs, dict):
        return []
    stem = answers.removesuffix(".jsonl")
    own = {answers, f"{stem}.errors.jsonl", f"{stem}.run.json"}
    return [
        n
        for n in names
        if n not in own and not n.startswith(".") and (_DATA_SUFFIXES.sub("", n) or n) in inputs
    ]


def list_files(path: Path) -> list[Path]:
    """The files of a source, in a deterministic order.

    A file is returned as is (if its type is supported); a ``save_to_disk`` folder is one entry;
    any other folder is searched recursively for supported files and ``save_to_disk`` folders,
    sorted by relative path (component-wise). Hidden entries (``.name``) and unsupported files
    (README, ...) inside a folder are skipped (`scan_source` lists them); a data file that
    cannot be read is an error, never skipped.
    """
    return scan_source(path)[0]


def hf_arrow_files(folder: Path) -> list[Path]:
    """Arrow shards of a ``save_to_disk`` folder, in the order ``state.json`` lists them.

    A listed shard that is missing, or a ``state.json`` that does not list its shards, raises
    `SourceError`: reading the shards that are left would lose the others' rows silently.
    """
    state_path = folder / "state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SourceError(f"{folder}: cannot read: state.json: {exc.strerror or exc}") from exc
    except ValueError as exc:
        raise SourceError(f"{folder}: cannot read: state.json is not valid JSON ({exc})") from exc
    entries = state.get("_data_files") if isinstance(state, dict) else None
    names = [e.get("filename") if isinstance(e, dict) else None for e in entries or ()]
    if not names or not all(isinstance(n, str) and safe_shard_name(n) for n in names):
        raise SourceError(
            f"{folder}: cannot read: state.json does not list its shards"
            " (_data_files with a filename each)"
        )
    files = [folder / name for name in names]
    for f in files:
        if not f.is_file():
            raise SourceError(f"{folder}: cannot read: state.json lists {f.name}, which is missing")
    return files


def safe_shard_name(name: str) -> bool:
    """A shard file name inside its folder (no separator, not ``..``)."""
    return bool(name) and "/" not in name and "\\" not in name and name not in (".", "..")


def file_format(path: Path) -> str:
    """A short label for the manifest: ``jsonl``, ``json``, ``jsonl.gz``, ``parquet``, ...

    A ``.json`` file holding JSON Lines is reported as ``jsonl`` (that is how it is read).
    """
    path = Path(path)
    if path.is_dir():
        return "hf_dataset"
    kind, compression = _kind(path)
    if kind == "json" and _json_is_lines(path, compression):
        kind = "jsonl"
    return f"{kind}.{compression}" if compression else kind


# --- byte streams -----------------------------------------------------------------------------


def _open_bytes(path: Path, compression: str | None) -> IO[bytes]:
    """A binary stream of the (decompressed) file contents; closing it closes the file.

    An empty compressed file raises `EOFError`: gzip and zstd streams have a header, and both
    libraries would otherwise read zero bytes as zero rows without a word.
    """
    if compression is not None and path.stat().st_size == 0:
        raise EOFError(
            f"empty file (0 bytes), not {'gzip' if compression == 'gz' else 'zstd'} data"
        )
    if compression == "gz":
        # gzip opens (and so closes) the file itself: GzipFile(fileobj=f) would leave f open
        return gzip.GzipFile(filename=path, mode="rb")  # type: ignore[return-value]
    raw = path.open("rb")
    if compression == "zst":
        try:
            _check_zstd_frames(raw, path)
        except BaseException:
            raw.close()
            raise
        dctx = zstandard.ZstdDecompressor()
        return dctx.stream_reader(raw, read_across_frames=True, closefd=True)  # type: ignore[return-value]
    return raw


_ZSTD_SKIPPABLE = range(0x184D2A50, 0x184D2A60)


def _check_zstd_frames(raw: IO[bytes], path: Path) -> None:
    """Walk the zstd frame and block headers (seeking over block bodies) and raise
    `ZstdError` when the file ends inside a frame.

    zstandard's stream reader returns a truncated file as a shorter valid stream (no error), so
    the rows after the cut would be lost silently. Corruption *inside* a block is still caught by
    the decompressor (and by the frame checksum when present). Leaves ``raw`` at offset 0.
    """
    size = os.fstat(raw.fileno()).st_size

    def need(n: int) -> bytes:
        data = raw.read(n)
        if len(data) < n:
            raise zstandard.ZstdError(f"truncated zstd data (file ends at byte {size})")
        return data

    raw.seek(0)
    while raw.tell() < size:
        magic = int.from_bytes(need(4), "little")
        if magic in _ZSTD_SKIPPABLE:
            raw.seek(int.from_bytes(need(4), "little"), os.SEEK_CUR)
            if raw.tell() > size:
                need(1)
            continue
        if magic != 0xFD2FB528:
            raise zstandard.ZstdError(f"not zstd data at byte {raw.tell() - 4}")
        fhd = need(1)[0]
        fcs_flag, single, checksum, dict_flag = fhd >> 6, (fhd >> 5) & 1, (fhd >> 2) & 1, fhd & 3
        header = (0 if single else 1) + (0, 1, 2, 4)[dict_flag]
        header += (1 if single else 0, 2, 4, 8)[fcs_flag]
        need(header)
        last = False
        while not last:
            bh = int.from_bytes(need(3), "little")
            last, btype, bsize = bool(bh & 1), (bh >> 1) & 3, bh >> 3
            if btype == 3:
                raise zstandard.ZstdError(f"corrupt zstd block header at byte {raw.tell() - 3}")
            raw.seek(1 if btype == 1 else bsize, os.SEEK_CUR)
            if raw.tell() > size:
                need(1)
        if checksum:
            need(4)
    raw.seek(0)


def _split_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """Split a byte stream on ``b"\\n"`` only (never on U+2028 etc.), in bounded chunks.

    Each line comes without its ``\\n`` but with any ``\\r``, so its length + 1 is where the
    next line starts (range planning needs byte offsets); a final line without newline is
    yielded.
    """
    pending: list[bytes] = []
    while chunk := stream.read(CHUNK_BYTES):
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            pending.append(chunk)
            continue
        pending.append(parts[0])
        yield b"".join(pending)
        yield from parts[1:-1]
        pending = [parts[-1]] if parts[-1] else []
    if pending:
        yield b"".join(pending)


def _iter_lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of `_split_lines` with a trailing ``\\r`` removed (CRLF files)."""
    for line in _split_lines(stream):
        yield _chomp(line)


def _chomp(line: bytes) -> bytes:
    return line[:-1] if line.endswith(b"\r") else line


def _is_blank(line: bytes) -> bool:
    """A line holding only ASCII whitespace (or nothing): not a row, uses no row index."""
    return not line or (line[0] in _WHITESPACE and not line.strip())


def _parse_line(line: bytes, where: str) -> Any:
    """Parse one JSON text; a `RowProblem` (returned, never raised) when not UTF-8 or not JSON."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RowProblem(reasons.INVALID_UTF8, f"{where}: invalid UTF-8 at byte {exc.start}")
    try:
        value = json.loads(text)
    except ValueError as exc:
        return RowProblem(reasons.INVALID_JSON, f"{where}: invalid JSON: {_json_error(exc)}")
    except RecursionError:
        return RowProblem(reasons.INVALID_JSON, f"{where}: invalid JSON: nested too deeply")
    if ("\\ud" in text or "\\uD" in text) and has_lone_surrogate(value):
        return RowProblem(reasons.INVALID_UTF8, f"{where}: \\u escape encodes a lone surrogate")
    return value


def _json_error(exc: ValueError) -> str:
    """The parse error, said of the data: Python's integer limit (`sys.get_int_max_str_digits`,
    4,300 digits by default) speaks to programmers ("use sys.set_int_max_str_digits()")."""
    if "integer string conversion" in str(exc):
        limit = sys.get_int_max_str_digits()
        return f"a number of more than {limit:,} digits (the most Python reads)"
    return str(exc)


def has_lone_surrogate(value: Any) -> bool:
    """True when a parsed value holds a lone UTF-16 surrogate (cannot be written as UTF-8)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _jsonl_row_lines(stream: IO[bytes], lineno: int = 1) -> Iterator[tuple[int, int, bytes]]:
    """``(line number, byte offset, line)`` of each row of a JSON Lines stream positioned at
    the start of line ``lineno``: CRLF removed, a UTF-8 BOM opening a line removed (line 1's,
    and those files joined with ``cat`` leave inside: that row was rejected ``invalid_json``),
    blank lines skipped.

    The one place that says which lines are rows, so counting, planning ranges and reading
    (whole or from a range's offset) agree; offsets count from where the stream started.
    """
    offset = 0
    for raw in _split_lines(stream):
        line = _chomp(raw)
        if line.startswith(_BOM):
            line = line[len(_BOM) :]
        if not _is_blank(line):
            yield lineno, offset, line
        lineno += 1
        offset += len(raw) + 1


_UNWANTED = object()
"""A row of a range its reader did not ask for (`iter_raw_range`'s ``wanted``)."""


def _iter_jsonl_values(
    stream: IO[bytes], label: str, lineno: int = 1, wanted: Sequence[bool] | None = None
) -> Iterator[Any]:
    """Parsed values (or `RowProblem`) of the rows of a JSON Lines stream (see
    `_jsonl_row_lines`); reject messages name ``label:line``. With ``wanted`` (a flag per row
    from the stream's start), a row left out is `_UNWANTED`, its line not parsed."""
    for i, (at, _, line) in enumerate(_jsonl_row_lines(stream, lineno)):
        yield _parse_line(line, f"{label}:{at}") if wanted is None or wanted[i] else _UNWANTED


def _count_jsonl(stream: IO[bytes]) -> int:
    return sum(1 for _ in _jsonl_row_lines(stream))


# --- .json: document or JSON Lines ------------------------------------------------------------


def _json_is_lines(path: Path, compression: str | None) -> bool:
    """A ``.json`` file is read as JSON Lines when its first non-blank line is a complete JSON
    value on its own and another non-blank line follows (BFCL files, HF exports)."""
    with _open_bytes(path, compression) as stream:
        lines = (line for line in _iter_lines(stream) if not _is_blank(line))
        first = next(lines, None)
        if first is None:
            return False
        if first.startswith(_BOM):
            first = first[len(_BOM) :]
        if isinstance(_parse_line(first, ""), RowProblem):
            return False
        return next(lines, None) is not None


def _document_values(path: Path, compression: str | None, source: Source) -> list[Any]:
    """Row values of a whole JSON document (parsed at once); whitespace only -> no rows.

    A document that does not parse (a trailing comma, a byte that is not UTF-8, a cut end) is
    one damaged file, not one bad row: it raises `DamagedDocument` naming where it breaks, as
    a truncated ``.gz`` does. A lone surrogate escape rejects only the row that holds it.
    """
    with _open_bytes(path, compression) as stream:
        data = stream.read()
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    if not data.strip():
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise DamagedDocument(f"invalid UTF-8 at byte {exc.start} (line {line})") from exc
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise DamagedDocument(f"not a valid JSON document: {_json_error(exc)}") from exc
    except RecursionError:
        raise DamagedDocument("not a valid JSON document: nested too deeply") from None
    if isinstance(doc, dict) and _is_wrapper(doc, source):
        values = next(iter(doc.values()))
    else:
        values = doc if isinstance(doc, list) else [doc]
    if "\\ud" in text or "\\uD" in text:
        label = _label(path, Path(source.path))
        values = [
            RowProblem(reasons.INVALID_UTF8, f"{label}: \\u escape encodes a lone surrogate")
            if has_lone_surrogate(v)
            else v
            for v in values
        ]
    return values


class DamagedDocument(ValueError):
    """A ``.json`` document that does not parse: the whole file is unreadable."""


def _is_wrapper(doc: dict[str, Any], source: Source) -> bool:
    """``{"data": [{...}, ...]}``: one key holding a list of objects, and not itself a row."""
    if len(doc) != 1:
        return False
    key, value = next(iter(doc.items()))
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        return False
    if source.fields and key in source.fields.values():
        return False
    return detect_format(doc) is None


# --- Arrow / Parquet --------------------------------------------------------------------------


def _arrow_batches(path: Path) -> Iterator[pa.RecordBatch]:
    """Record batches of an Arrow IPC file or stream (memory-mapped: no copy)."""
    with pa.memory_map(str(path), "r") as source:
        if source.read(len(_ARROW_FILE_MAGIC)) == _ARROW_FILE_MAGIC:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)
        else:
            source.seek(0)
            _check_arrow_stream(source)
            source.seek(0)
            yield from pa.ipc.open_stream(source)


_ARROW_EOS = (b"\xff\xff\xff\xff\x00\x00\x00\x00", b"\x00\x00\x00\x00")  # current, legacy


def _check_arrow_stream(source: pa.MemoryMappedFile) -> None:
    """Raise when an Arrow IPC stream does not end with its end-of-stream marker.

    Every writer closes a stream with that marker; a file cut exactly between two batches would
    otherwise read as a shorter valid stream. The messages are walked (zero-copy on the memory
    map) to find where the last one ends: the bytes after it must be the marker (a batch body
    may itself end in zero padding, so the file's last bytes alone prove nothing).
    """
    size = source.size()
    reader = pa.ipc.MessageReader.open_stream(source)
    end = 0
    while True:
        try:
            reader.read_next_message()
        except StopIteration:
            break
        end = source.tell()
    if bytes(source.read_at(size - end, end)) not in _ARROW_EOS:
        raise pa.ArrowInvalid("truncated Arrow stream: no end-of-stream marker")


def _rows_of_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        for start in range(0, batch.num_rows, ARROW_ROWS):
            yield from batch.slice(start, ARROW_ROWS).to_pylist()


def _table_files(path: Path) -> list[tuple[Path, str]]:
    """(file, kind) pairs for an Arrow-backed entry (a parquet / arrow file or HF folder)."""
    if path.is_dir():
        return [(f, "arrow") for f in hf_arrow_files(path)]
    return [(path, _kind(path)[0])]


def _iter_table_rows(
    path: Path, skip: int = 0, take: int | None = None
) -> Iterator[dict[str, Any]]:
    """Rows of an Arrow-backed entry; with ``skip`` / ``take``, rows [skip, skip + take) only.

    What lies outside is never converted: Parquet row groups outside the range are not read
    (metadata gives their sizes), Arrow batches before it are passed over.
    """
    end = None if take is None else skip + take
    base = 0  # the entry's row number of the current file's first row
    for f, kind in _table_files(path):
        if end is not None and base >= end:
            return
        at = base  # the entry's row number of the next batch's first row
        size = None
        if kind == "parquet":
            pf = pq.ParquetFile(f)
            size = pf.metadata.num_rows
            groups: list[int] = []
            pos = base
            for i in range(pf.num_row_groups):
                n = pf.metadata.row_group(i).num_rows
                if pos + n > skip and (end is None or pos < end):
                    at = at if groups else pos
                    groups.append(i)
                pos += n
            batches: Iterable[pa.RecordBatch] = (
                pf.iter_batches(batch_size=ARROW_ROWS, row_groups=groups) if groups else ()
            )
        else:
            batches = _arrow_batches(f)
        for batch in batches:
            lo = max(skip - at, 0)
            hi = batch.num_rows if end is None else min(end - at, batch.num_rows)
            if lo < hi:
                yield from _rows_of_batches([batch.slice(lo, hi - lo)])
            at += batch.num_rows
            if end is not None and at >= end:
                return
        base = at if size is None else base + size


def _count_table_rows(path: Path) -> int:
    total = 0
    for f, kind in _table_files(path):
        if kind == "parquet":
            total += pq.ParquetFile(f).metadata.num_rows
        else:
            total += sum(batch.num_rows for batch in _arrow_batches(f))
    return total


# --- per file -----------------------------------------------------------------------------------

_READ_ERRORS = (OSError, EOFError, zstandard.ZstdError, pa.ArrowException, DamagedDocument)


def _label(path: Path, root: Path) -> str:
    """The file name as shown in reject messages: relative to a source folder."""
    return path.name if path == root or root.is_file() else path.relative_to(root).as_posix()


def _iter_file_values(path: Path, source: Source) -> Iterator[Any]:
    """Every row value of one file entry, in order (dicts, other JSON values, or `RowProblem`)."""
    label = _label(path, Path(source.path))
    if path.is_dir():
        yield from _iter_table_rows(path)
        return
    kind, compression = _kind(path)
    if kind in ("parquet", "arrow"):
        yield from _iter_table_rows(path)
    elif kind == "jsonl" or _json_is_lines(path, compression):
        with _open_bytes(path, compression) as stream:
            yield from _iter_jsonl_values(stream, label)
    else:
        yield from _document_values(path, compression, source)


def _count_file_rows(path: Path, source: Source) -> int:
    if path.is_dir():
        return _count_table_rows(path)
    kind, compression = _kind(path)
    if kind in ("parquet", "arrow"):
        return _count_table_rows(path)
    if kind == "jsonl" or _json_is_lines(path, compression):
        with _open_bytes(path, compression) as stream:
            return _count_jsonl(stream)
    return len(_document_values(path, compression, source))


# --- public API --------------------------------------------------------------------------------


# --- hub sources ----------------------------------------------------------------------------------
HUB_PREFIX = "hf:"  # hf:ID[:CONFIG][@SPLIT]; no "//": Path() would fold it


def hub_ref(source: Source) -> tuple[str, str | None, str] | None:
    """``(dataset id, config, split)`` for a ``hf:ID[:CONFIG][@SPLIT]`` source, else None."""
    text = str(source.path)
    if not text.startswith(HUB_PREFIX):
        return None
    rest, _, split = text[len(HUB_PREFIX) :].partition("@")
    dataset, _, config = rest.partition(":")
    return dataset, config or None, split or "train"


def _hub_dataset(source: Source) -> Any:
    """The hub split through `datasets` (imported lazily, not a dependency). Offline
    (``HF_HUB_OFFLINE``), `datasets` reads the split from its own cache, where an earlier
    online load left it (``HF_DATASETS_CACHE``, else ``HF_HOME/datasets``): every ``hf:``
    source was refused offline before, cached or not."""
    ref = hub_ref(source)
    assert ref is not None
    dataset, config, split = ref
    offline = hub_offline()
    try:
        # lazy: optional dependency, only for hf: sources
        import datasets
    except ImportError:
        if offline:  # without `datasets` there is no cache to read either
            raise SourceError(
                f"{source.path}: a hub dataset needs the network, and {offline} is set"
            ) from None
        raise SourceError(
            f"{source.path}: reading hub datasets needs `pip install datasets`"
        ) from None
    try:
        return datasets.load_dataset(dataset, config, split=split)
    except Exception as exc:  # any hub failure is one clear line
        why = " ".join(str(exc).split())
        if not offline:
            raise SourceError(f"{source.path}: cannot load from the hub: {why}") from exc
        cache = datasets.config.HF_DATASETS_CACHE
        if isinstance(exc, ConnectionError):  # `datasets`' word for "not in my cache"
            raise SourceError(
                f"{source.path}: a hub dataset needs the network, and {offline} is set"
                f" (the datasets cache, {cache}, does not hold it)"
            ) from exc
        raise SourceError(
            f"{source.path}: cannot load from the datasets cache ({cache}; {offline} is set): {why}"
        ) from exc


def iter_raw_rows(source: Source) -> Iterator[RawRow]:
    """All rows of a source, in file order, numbered from 0 across its files.

    Never raises for a bad row (it carries a `Reject`); raises `SourceError` naming the file when
    the file itself cannot be read.
    """
    if hub_ref(source) is not None:
        for row, value in enumerate(_hub_dataset(source)):
            yield _raw_row(source.name, row, value)
        return
    row = 0
    for path, file in _entries(source):
        for value in _read_checked(path, source, _iter_file_values(path, source)):
            yield _raw_row(source.name, row, value, file)
            row += 1


def _entries(source: Source) -> list[tuple[Path, str | None]]:
    """(file entry, the label its rows carry as `RawRow.file`: None for a one-file source)."""
    root = Path(source.path)
    files = list_files(root)
    return [(path, _label(path, root) if len(files) > 1 else None) for path in files]


def _read_checked(path: Path, source: Source, values: Iterable[Any]) -> Iterator[Any]:
    """``values`` (read lazily from ``path``), refused with `SourceError` when the file differs
    from its state in ``source.seen`` or changes while read; read errors name the file."""
    before = _check_unchanged(path, source, source.seen.get(str(path)), "since it was counted")
    try:
        yield from values
    except _READ_ERRORS as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from exc
    _check_unchanged(path, source, before, "while it was read")


def file_head(source: Source, path: Path, n: int) -> list[RawRow] | None:
    """The first ``n`` rows of one of the source's files as `iter_raw_rows` reads them
    (numbered from 0 in this file); None when the file cannot be read (its full read says
    why), [] when it holds no row."""
    try:
        return [
            _raw_row(source.name, i, v)
            for i, v in enumerate(islice(_iter_file_values(path, source), n))
        ]
    except (SourceError, *_READ_ERRORS):
        return None


def _raw_row(name: str, row: int, value: Any, file: str | None = None) -> RawRow:
    if isinstance(value, dict):
        return RawRow(name, row, value, file=file)
    if isinstance(value, RowProblem):
        return RawRow(name, row, None, value.reject(name, row, None), file)
    message = f"row is a JSON {_json_type(value)}, not an object"
    reject = Reject(name, row, None, reasons.NOT_AN_OBJECT, message)
    return RawRow(name, row, None, reject, file)


def _file_state(path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of a data file; None for a ``save_to_disk`` folder (its shards are
    memory-mapped Arrow, never appended to)."""
    if path.is_dir():
        return None
    try:
        st = path.stat()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return st.st_size, st.st_mtime_ns


def _check_unchanged(
    path: Path, source: Source, before: tuple[int, int] | None, since: str
) -> tuple[int, int] | None:
    """The file's state now; `SourceError` when it differs from ``before``.

    A file that grows while draftset reads it (a writer appending, an output written into
    its own source) would add rows the count never saw, or read a run's answers back as
    duplicates of their prompts: it is refused, never half-read.
    """
    now = _file_state(path)
    if before is not None and now is not None and now != before:
        raise SourceError(
            f"{path}: cannot read: the file changed {since} ({before[0]:,} bytes, now"
            f" {now[0]:,}); is something writing it? Copy it, or wait for the writer to finish"
        )
    return now


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else type(value).__name__


def count_rows(source: Source) -> int:
    """Number of rows `iter_raw_rows` yields, as cheaply as possible (no JSON parsing for JSONL,
    metadata for Parquet); used for seeded sampling before the main pass."""
    if hub_ref(source) is not None:
        return len(_hub_dataset(source))
    return sum(
        _counted(path, source, lambda p: _count_file_rows(p, source))
        for path in list_files(Path(source.path))
    )


def _counted(path: Path, source: Source, count: Callable[[Path], _T]) -> _T:
    """``count(path)``, recording the file's state in ``source.seen`` for the read to check;
    `SourceError` naming the file when it cannot be read or changes meanwhile."""
    before = _file_state(path)
    try:
        result = count(path)
    except _READ_ERRORS as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from exc
    state = _check_unchanged(path, source, before, "while it was counted")
    if state is not None:
        source.seen[str(path)] = state
    return result


# --- row ranges: a worker reads its own part of a source ----------------------------------------


@dataclass(frozen=True, slots=True)
class RowRange:
    """Rows [first, first + rows) of one source, all within one of its file entries: what a
    worker reads itself (`iter_raw_range`) instead of being sent the rows."""

    source: str  # the source's name
    path: str  # the file (or save_to_disk folder) holding them, as `list_files` gives it
    file: str | None  # the label `RawRow.file` carries for these rows (None: one-file source)
    first: int  # row number (across the source's files) of the range's first row
    rows: int
    offset: int  # JSONL: byte offset where the first row's line starts; tables: rows to skip
    lineno: int  # JSONL: that line's 1-based number (reject messages name it); 0 for tables


def _range_kind(path: Path) -> str | None:
    """How a range of this file entry is read without what precedes it: ``"jsonl"`` (seek to a
    byte offset), ``"table"`` (skip rows by batch / row group sizes), or None (compressed, or a
    ``.json`` document: readable only from its start)."""
    if path.is_dir():
        return "table"
    kind, compression = _kind(path)
    if kind in ("parquet", "arrow"):
        return "table"
    if compression is None and (kind == "jsonl" or _json_is_lines(path, None)):
        return "jsonl"
    return None


def range_readable(source: Source) -> bool:
    """True when every file entry of the source can be read from a range's start without
    reading what precedes it (uncompressed JSON Lines, Parquet, Arrow, save_to_disk folders),
    so `plan_ranges` / `iter_raw_range` apply; False for hub sources, compressed files and
    ``.json`` documents (read those whole with `iter_raw_rows`)."""
    if hub_ref(source) is not None:
        return False
    for path in list_files(Path(source.path)):
        try:
            if _range_kind(path) is None:
                return False
        except _READ_ERRORS as exc:
            raise SourceError(f"{path}: cannot read: {exc}") from exc
    return True


def _range_starts(path: Path, every: int) -> tuple[int, list[tuple[int, int]]]:
    """(rows of the entry, ``(offset, lineno)`` of its rows 0, every, 2 * every, ...).

    JSON Lines: one pass over the bytes, no JSON parsing (as counting); tables: their counts.
    """
    kind = _range_kind(path)
    if kind is None:
        raise ValueError(f"{path}: cannot be read by ranges (see range_readable)")
    if kind == "table":
        total = _count_table_rows(path)
        return total, [(skip, 0) for skip in range(0, total, every)]
    starts: list[tuple[int, int]] = []
    total = 0
    with path.open("rb") as stream:
        for lineno, offset, _ in _jsonl_row_lines(stream):
            if total % every == 0:
                starts.append((offset, lineno))
            total += 1
    return total, starts


def plan_ranges(source: Source, rows_per_range: int) -> list[RowRange]:
    """Cut every file entry of a range-readable source into ranges of at most
    ``rows_per_range`` rows, in row order (a range never spans two entries; an empty entry
    gives none), so workers can read a source's rows themselves.

    Counts as `count_rows` does (its rows add up to the same number) and records
    ``source.seen`` the same way, so `iter_raw_range` refuses a file changed since;
    `SourceError` for a file that cannot be read or changes meanwhile, `ValueError` for a
    source that is not `range_readable`.
    """
    if rows_per_range < 1:
        raise ValueError(f"rows_per_range must be at least 1, not {rows_per_range}")
    if hub_ref(source) is not None:
        raise ValueError(f"{source.path}: a hub source cannot be read by ranges")
    ranges: list[RowRange] = []
    row = 0
    for path, file in _entries(source):
        total, starts = _counted(path, source, lambda p: _range_starts(p, rows_per_range))
        for i, (offset, lineno) in enumerate(starts):
            done = i * rows_per_range
            rows = min(rows_per_range, total - done)
            ranges.append(RowRange(source.name, str(path), file, row + done, rows, offset, lineno))
        row += total
    return ranges


def iter_raw_range(
    source: Source, rng: RowRange, wanted: Sequence[bool] | None = None
) -> Iterator[RawRow]:
    """Exactly the `RawRow`s `iter_raw_rows` yields for rows ``rng.first`` to
    ``rng.first + rng.rows - 1`` (numbers, data, file label, rejects), reading only the range's
    own part of the file: a worker reads its rows without the main process sending them.
    ``wanted`` (one flag a row of the range): only those rows, the others not even parsed (a
    sampling plan's rows).

    `SourceError` naming the file when it differs from ``source.seen`` (recorded by
    `plan_ranges`), changes while read, or cannot be read.
    """
    if rng.source != source.name:
        raise ValueError(f"range of source {rng.source!r} read as source {source.name!r}")
    path = Path(rng.path)
    values = _range_values(path, source, rng, wanted)
    row = rng.first
    for value in _read_checked(path, source, values):
        if value is not _UNWANTED:
            yield _raw_row(source.name, row, value, rng.file)
        row += 1
    if row != rng.first + rng.rows:
        raise SourceError(
            f"{path}: cannot read: it holds {row - rng.first} of rows {rng.first}.."
            f"{rng.first + rng.rows - 1} where they were counted; did it change?"
        )


def _range_values(
    path: Path, source: Source, rng: RowRange, wanted: Sequence[bool] | None
) -> Iterator[Any]:
    """The row values of a range: table rows skipped by count, JSON Lines read from the
    range's byte offset (reject messages number lines from ``rng.lineno``); `_UNWANTED` for a
    row ``wanted`` leaves out (a JSON line not parsed)."""
    found = None if path.is_dir() else _name_kind(path)
    if found is None or found[0] in ("parquet", "arrow"):
        values = _iter_table_rows(path, rng.offset, rng.rows)
        for i, value in enumerate(values):
            yield value if wanted is None or wanted[i] else _UNWANTED
        return
    with path.open("rb") as stream:
        stream.seek(rng.offset)
        label = _label(path, Path(source.path))
        yield from islice(_iter_jsonl_values(stream, label, rng.lineno, wanted), rng.rows)


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (as stored, i.e. compressed)."""
    try:
        with Path(path).open("rb") as f:
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError as exc:
        raise SourceError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def describe_inputs(source: Source) -> list[dict[str, Any]]:
    """Per input file ``{"path", "sha256", "bytes", "format"}`` for the manifest.

    A ``save_to_disk`` folder contributes one entry per Arrow shard, in ``state.json`` order,
    with format ``hf_dataset``.
    """
    out: list[dict[str, Any]] = []
    if hub_ref(source) is not None:
        ds = _hub_dataset(source)
        fingerprint = getattr(ds, "_fingerprint", None)
        return [{"path": str(source.path), "sha256": fingerprint, "bytes": None, "format": "hub"}]
    for path in list_files(Path(source.path)):
        if path.is_dir():
            files = [(f, "hf_dataset") for f in hf_arrow_files(path)]
        else:
            files = [(path, file_format(path))]
        for f, fmt in files:
            out.append(
                {"path": str(f), "sha256": sha256_file(f), "bytes": f.stat().st_size, "format": fmt}
            )
    return out
