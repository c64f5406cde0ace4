"""Readers: every container and byte-level hazard, plus properties over random JSONL."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from draftset.core import reasons
from draftset.core.records import RowProblem
from draftset.sources import read
from draftset.sources.read import (
    Source,
    SourceError,
    count_rows,
    describe_inputs,
    file_format,
    iter_raw_rows,
    list_files,
    sha256_file,
)

ROWS = [
    {"id": "a", "messages": [{"role": "user", "content": "hi"}]},
    {"id": "b", "text": "line\u2028sep\u2029para\r\nend"},
    {"id": "c", "n": 3},
]


def jsonl_bytes(rows: list, newline: bytes = b"\n") -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + newline for r in rows)


def read_all(path: Path, **kw) -> list:
    src = Source(name="s", path=path, **kw)
    rows = list(iter_raw_rows(src))
    assert count_rows(src) == len(rows)
    assert [r.row for r in rows] == list(range(len(rows)))
    return rows


def datas(rows: list) -> list:
    return [r.data for r in rows]


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# --- JSONL -------------------------------------------------------------------------------------


def test_jsonl_rows_in_order(tmp_path):
    rows = read_all(write(tmp_path, "a.jsonl", jsonl_bytes(ROWS)))
    assert datas(rows) == ROWS
    assert all(r.source == "s" and r.reject is None for r in rows)


def test_jsonl_u2028_inside_strings_is_not_a_line_break(tmp_path):
    data = jsonl_bytes(ROWS)
    assert "\u2028".encode() in data
    rows = read_all(write(tmp_path, "a.jsonl", data))
    assert len(rows) == 3
    assert rows[1].data["text"] == "line\u2028sep\u2029para\r\nend"


def test_jsonl_crlf(tmp_path):
    rows = read_all(write(tmp_path, "a.jsonl", jsonl_bytes(ROWS, b"\r\n")))
    assert datas(rows) == ROWS


def test_jsonl_blank_lines_are_not_rows(tmp_path):
    data = b"\n  \n" + jsonl_bytes(ROWS[:1]) + b"\r\n\t\n" + jsonl_bytes(ROWS[1:2]) + b"\n\n"
    rows = read_all(write(tmp_path, "a.jsonl", data))
    assert datas(rows) == ROWS[:2]
    assert [r.row for r in rows] == [0, 1]


def test_jsonl_no_trailing_newline_and_bom(tmp_path):
    data = b"\xef\xbb\xbf" + jsonl_bytes(ROWS).rstrip(b"\n")
    assert datas(read_all(write(tmp_path, "a.jsonl", data))) == ROWS


def test_jsonl_malformed_line_is_a_reject_and_reading_goes_on(tmp_path):
    data = b'{"a": 1}\n{"a": \n{"a": 3}\n'
    rows = read_all(write(tmp_path, "bad.jsonl", data))
    assert [r.data for r in rows] == [{"a": 1}, None, {"a": 3}]
    rej = rows[1].reject
    assert (rej.source, rej.row, rej.id, rej.reason) == ("s", 1, None, reasons.INVALID_JSON)
    assert rej.message.startswith("bad.jsonl:2: invalid JSON: ")


def test_a_number_past_pythons_digit_limit_is_named_not_pythons_advice(tmp_path):
    """JSON allows a 5,000-digit integer; Python's int parser refuses over 4,300 digits with
    advice for programmers ("use sys.set_int_max_str_digits() to increase the limit"), which
    the reject line repeated. It says what the row holds instead; the rows around it stay."""
    data = b'{"a": 1}\n{"a": ' + b"9" * 5000 + b'}\n{"a": 3}\n'
    rows = read_all(write(tmp_path, "big.jsonl", data))
    assert [r.data for r in rows] == [{"a": 1}, None, {"a": 3}]
    rej = rows[1].reject
    assert rej.reason == reasons.INVALID_JSON
    assert rej.message == (
        "big.jsonl:2: invalid JSON: a number of more than 4,300 digits (the most Python reads)"
    )


def test_jsonl_invalid_utf8(tmp_path):
    data = b'{"a": 1}\n{"a": "\xff\xfe"}\n'
    rows = read_all(write(tmp_path, "bad.jsonl", data))
    assert rows[1].data is None
    assert rows[1].reject.reason == reasons.INVALID_UTF8
    assert rows[1].reject.message == "bad.jsonl:2: invalid UTF-8 at byte 7"


def test_jsonl_lone_surrogate_escape_is_invalid_utf8(tmp_path):
    data = b'{"a": "\\ud800"}\n{"a": "\\ud83d\\ude00"}\n'
    rows = read_all(write(tmp_path, "s.jsonl", data))
    assert rows[0].reject.reason == reasons.INVALID_UTF8
    assert rows[1].data == {"a": "\U0001f600"}


@pytest.mark.parametrize(
    ("line", "kind"),
    [(b"[1, 2]", "array"), (b'"x"', "string"), (b"3", "number"), (b"null", "null")],
)
def test_jsonl_non_object_row(tmp_path, line, kind):
    rows = read_all(write(tmp_path, "a.jsonl", line + b"\n"))
    assert rows[0].reject.reason == reasons.NOT_AN_OBJECT
    assert rows[0].reject.message == f"row is a JSON {kind}, not an object"


def test_jsonl_lines_split_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(read, "CHUNK_BYTES", 7)
    rows = [{"k": "x" * n, "u": "é\u2028"} for n in range(20)]
    data = jsonl_bytes(rows, b"\r\n")
    assert datas(read_all(write(tmp_path, "a.jsonl", data))) == rows


# --- compression -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.jsonl", "a.json.gz"])
def test_gzip(tmp_path, name):
    path = write(tmp_path, name, gzip.compress(jsonl_bytes(ROWS)))
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == "jsonl.gz"


@pytest.mark.parametrize("name", ["a.jsonl.zst", "a.jsonl"])
def test_zstd(tmp_path, name):
    path = write(tmp_path, name, zstandard.ZstdCompressor().compress(jsonl_bytes(ROWS)))
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == "jsonl.zst"


@pytest.mark.parametrize(
    ("name", "compress", "kind"),
    [
        ("a.jsonl.gz", zstandard.ZstdCompressor().compress, "jsonl.zst"),
        ("a.json.gz", zstandard.ZstdCompressor().compress, "jsonl.zst"),
        ("a.jsonl.zst", gzip.compress, "jsonl.gz"),
    ],
)
def test_a_compressed_file_named_for_the_other_compression_reads(tmp_path, name, compress, kind):
    """The bytes tell the compression, as for a compressed file named ``.jsonl``: zstd data
    named ``.gz`` was "cannot read: Not a gzipped file (b'(\\xb5')", exit 2."""
    path = write(tmp_path, name, compress(jsonl_bytes(ROWS)))
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == kind


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.json.zst", "a.jsonl.zstd"])
def test_an_uncompressed_file_named_compressed_is_one_line_saying_so(tmp_path, name):
    """Plain JSON Lines named ``.gz`` said "cannot read: Not a gzipped file (b'{\"')"."""
    path = write(tmp_path, name, jsonl_bytes(ROWS))
    suffix = name.rsplit(".", 1)[1]
    with pytest.raises(SourceError) as info:
        list(iter_raw_rows(Source("s", path)))
    assert str(info.value) == (
        f"{path}: named .{suffix}, but its bytes are neither gzip nor zstd data (no header of"
        f" either): if it is plain JSON, name it {path.name[: -len(suffix) - 1]}"
    )


def test_zstd_multiple_frames(tmp_path):
    comp = zstandard.ZstdCompressor()
    data = comp.compress(jsonl_bytes(ROWS[:1])) + comp.compress(jsonl_bytes(ROWS[1:]))
    assert datas(read_all(write(tmp_path, "a.jsonl.zst", data))) == ROWS


def test_json_array_gzip(tmp_path):
    path = write(tmp_path, "a.json.gz", gzip.compress(json.dumps(ROWS, indent=2).encode()))
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == "json.gz"


def test_corrupt_gzip_raises_source_error_naming_the_file(tmp_path):
    path = write(tmp_path, "a.jsonl.gz", gzip.compress(jsonl_bytes(ROWS * 50))[:-30])
    with pytest.raises(SourceError, match=r"a\.jsonl\.gz"):
        list(iter_raw_rows(Source("s", path)))


# --- .json --------------------------------------------------------------------------------------


def test_json_array(tmp_path):
    path = write(tmp_path, "a.json", json.dumps(ROWS, indent=2).encode())
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == "json"


def test_json_single_line_array(tmp_path):
    path = write(tmp_path, "a.json", json.dumps(ROWS).encode() + b"\n")
    assert datas(read_all(path)) == ROWS


def test_json_wrapper_object(tmp_path):
    path = write(tmp_path, "a.json", json.dumps({"data": ROWS}, indent=1).encode())
    assert datas(read_all(path)) == ROWS


def test_json_single_row_object_is_one_row(tmp_path):
    row = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    path = write(tmp_path, "a.json", json.dumps(row, indent=2).encode())
    assert datas(read_all(path)) == [row]


def test_json_wrapper_key_mapped_by_fields_is_a_row(tmp_path):
    row = {"dialog": [{"role": "user", "content": "hi"}]}
    path = write(tmp_path, "a.json", json.dumps(row).encode())
    assert datas(read_all(path, fields={"messages": "dialog"})) == [row]
    assert datas(read_all(path)) == row["dialog"]


def test_json_object_with_several_keys_is_one_row(tmp_path):
    row = {"win": True, "items": [{"a": 1}]}
    path = write(tmp_path, "a.json", json.dumps(row, indent=2).encode("utf-8"))
    assert datas(read_all(path)) == [row]


def test_jsonl_saved_as_json_is_read_as_jsonl(tmp_path):
    path = write(tmp_path, "a.json", jsonl_bytes(ROWS).rstrip(b"\n"))
    assert datas(read_all(path)) == ROWS
    assert file_format(path) == "jsonl"


def test_json_crlf_pretty_printed(tmp_path):
    text = json.dumps({"conversations": [{"from": "human", "value": "a"}]}, indent=2)
    path = write(tmp_path, "a.json", text.replace("\n", "\r\n").encode())
    assert len(read_all(path)) == 1


@pytest.mark.parametrize(
    ("data", "where"),
    [
        (b'[\n  {"a": 1},\n  {"a": 2},\n]\n', "line 4 column 1"),  # a trailing comma
        (b'[\n  {"a": 1},\n  {"a": \n', "line 4 column 1"),  # cut short
        (b'[\n  {"a": 1},\n  {"a": "\xff"}\n]\n', "invalid UTF-8 at byte 23 (line 3)"),
    ],
    ids=["trailing-comma", "truncated", "invalid-byte"],
)
def test_json_damaged_document_stops_naming_where(tmp_path, data, where):
    """A damaged document is one unreadable file, not one rejected row: read 1 rejected 1
    would leave every other row of the array unaccounted for."""
    path = write(tmp_path, "a.json", data)
    for count_or_read in (count_rows, lambda s: list(iter_raw_rows(s))):
        with pytest.raises(SourceError) as exc:
            count_or_read(Source("s", path))
        assert str(exc.value).startswith(f"{path}: cannot read: ")
        assert where in str(exc.value)


def test_json_document_lone_surrogate_rejects_that_row_only(tmp_path):
    path = write(tmp_path, "a.json", b'[{"a": 1}, {"a": "\\ud800"}, {"a": 3}]')
    rows = read_all(path)
    assert [r.reject.reason if r.reject else r.data for r in rows] == [
        {"a": 1},
        reasons.INVALID_UTF8,
        {"a": 3},
    ]


@pytest.mark.parametrize("name", ["a.jsonl.gz", "a.json.gz", "a.jsonl.zst", "a.json.zstd"])
def test_zero_byte_compressed_file_is_unreadable(tmp_path, name):
    """An empty .gz / .zst is not a compressed stream (gzip and zstd both need a header):
    it used to read as zero rows without a word."""
    path = write(tmp_path, name, b"")
    with pytest.raises(SourceError, match=r"cannot read: empty file \(0 bytes\)"):
        count_rows(Source("s", path))
    with pytest.raises(SourceError, match=r"cannot read: empty file \(0 bytes\)"):
        list(iter_raw_rows(Source("s", path)))


def test_json_array_with_non_objects(tmp_path):
    rows = read_all(write(tmp_path, "a.json", b'[{"a": 1}, 2, "x"]'))
    assert [r.reject.reason if r.reject else r.data for r in rows] == [
        {"a": 1},
        reasons.NOT_AN_OBJECT,
        reasons.NOT_AN_OBJECT,
    ]


@pytest.mark.parametrize("data", [b"[]", b"", b" \r\n"])
def test_empty_json_document_has_no_rows(tmp_path, data):
    assert read_all(write(tmp_path, "a.json", data)) == []


# --- Arrow / Parquet / save_to_disk -------------------------------------------------------------

TABLE_ROWS = [
    {"id": f"r{i}", "messages": [{"role": "user", "content": f"q{i}\u2028"}]} for i in range(2500)
]


def test_parquet(tmp_path):
    path = tmp_path / "a.parquet"
    pq.write_table(pa.Table.from_pylist(TABLE_ROWS), path, row_group_size=700)
    rows = read_all(path)
    assert datas(rows) == TABLE_ROWS
    assert file_format(path) == "parquet"


@pytest.mark.parametrize("stream", [True, False])
def test_arrow_ipc(tmp_path, stream):
    path = tmp_path / "a.arrow"
    write_ipc(path, TABLE_ROWS, stream=stream, chunk=1000)
    assert datas(read_all(path)) == TABLE_ROWS
    assert file_format(path) == "arrow"


def write_ipc(path: Path, rows: list[dict], stream: bool = True, chunk: int | None = None) -> None:
    table = pa.Table.from_pylist(rows)
    opener = pa.ipc.new_stream if stream else pa.ipc.new_file
    with pa.OSFile(str(path), "wb") as sink, opener(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=chunk)


def make_save_to_disk(folder: Path, shards: list[list[dict]]) -> list[Path]:
    """The `datasets` save_to_disk layout: IPC streams + state.json + dataset_info.json."""
    folder.mkdir(parents=True)
    names = [f"data-{i:05d}-of-{len(shards):05d}.arrow" for i in range(len(shards))]
    for name, rows in zip(names, shards, strict=True):
        write_ipc(folder / name, rows)
    state = {
        "_data_files": [{"filename": n} for n in names],
        "_fingerprint": "0",
        "_format_type": None,
        "_split": None,
    }
    (folder / "state.json").write_text(json.dumps(state))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
    # a stray cache file that is not listed in state.json must be ignored
    write_ipc(folder / "cache-x.arrow", [{"id": "stray", "messages": []}])
    return [folder / n for n in names]


def test_save_to_disk_folder(tmp_path):
    folder = tmp_path / "ds"
    shards = make_save_to_disk(folder, [TABLE_ROWS[:1200], TABLE_ROWS[1200:]])
    assert list_files(folder) == [folder]
    assert datas(read_all(folder)) == TABLE_ROWS
    assert file_format(folder) == "hf_dataset"
    described = describe_inputs(Source("s", folder))
    assert [d["path"] for d in described] == [str(p) for p in shards]
    assert all(d["format"] == "hf_dataset" for d in described)
    assert described[0]["sha256"] == hashlib.sha256(shards[0].read_bytes()).hexdigest()


@pytest.mark.parametrize("missing", [0, 1])
def test_save_to_disk_folder_with_a_listed_shard_missing_stops(tmp_path, missing):
    """state.json lists two shards and one is gone: reading the other would build from half
    the rows with exit 0."""
    folder = tmp_path / "ds"
    shards = make_save_to_disk(folder, [TABLE_ROWS[:100], TABLE_ROWS[100:200]])
    shards[missing].unlink()
    src = Source("s", folder)
    for step in (count_rows, lambda s: list(iter_raw_rows(s)), describe_inputs):
        with pytest.raises(SourceError) as exc:
            step(src)
        assert str(exc.value) == (
            f"{folder}: cannot read: state.json lists {shards[missing].name}, which is missing"
        )


def test_save_to_disk_folder_with_unreadable_state_stops(tmp_path):
    folder = tmp_path / "ds"
    make_save_to_disk(folder, [TABLE_ROWS[:10]])
    (folder / "state.json").write_text('{"_data_files": [')
    with pytest.raises(SourceError, match=r"ds: cannot read: state.json is not valid JSON"):
        count_rows(Source("s", folder))


def test_save_to_disk_folder_written_by_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list(TABLE_ROWS[:50]).save_to_disk(str(folder))
    assert datas(read_all(folder)) == TABLE_ROWS[:50]


# --- folders and errors -------------------------------------------------------------------------


def test_folder_discovery_order_and_row_numbers(tmp_path):
    write(tmp_path, "b.jsonl", jsonl_bytes([{"f": "b"}]))
    write(tmp_path, "a/z.json", json.dumps([{"f": "a/z"}]).encode())
    write(tmp_path, "a-c.jsonl.gz", gzip.compress(jsonl_bytes([{"f": "a-c"}, {"f": "a-c2"}])))
    write(tmp_path, "README.md", b"# not data")
    write(tmp_path, ".hidden.jsonl", jsonl_bytes([{"f": "hidden"}]))
    write(tmp_path, ".cache/x.jsonl", jsonl_bytes([{"f": "hidden"}]))
    make_save_to_disk(tmp_path / "c" / "hf", [[{"f": "c/hf"}]])
    files = list_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "a/z.json",
        "a-c.jsonl.gz",
        "b.jsonl",
        "c/hf",
    ]
    rows = read_all(tmp_path)
    assert [r.data["f"] for r in rows] == ["a/z", "a-c", "a-c2", "b", "c/hf"]


def test_reject_message_names_the_file_inside_a_folder(tmp_path):
    write(tmp_path, "sub/x.jsonl", b"{oops\n")
    (row,) = read_all(tmp_path)
    assert row.reject.message.startswith("sub/x.jsonl:1: invalid JSON")


def test_missing_path(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(SourceError, match=r"nope\.jsonl: no such file"):
        list(iter_raw_rows(Source("s", missing)))
    with pytest.raises(SourceError, match="nope"):
        count_rows(Source("s", missing))


@pytest.mark.parametrize("name", ["a.csv", "a.txt", "a.parquet.gz"])
def test_unsupported_file_type(tmp_path, name):
    path = write(tmp_path, name, b"x")
    with pytest.raises(SourceError, match=name.replace(".", r"\.")):
        list_files(path)


def test_folder_without_data(tmp_path):
    write(tmp_path, "notes.txt", b"x")
    with pytest.raises(SourceError, match="no supported data files"):
        list_files(tmp_path)


def test_corrupt_parquet_raises_source_error(tmp_path):
    path = write(tmp_path, "a.parquet", b"PAR1 not really parquet")
    with pytest.raises(SourceError, match=r"a\.parquet"):
        list(iter_raw_rows(Source("s", path)))


def test_describe_inputs_and_sha(tmp_path):
    data = jsonl_bytes(ROWS)
    write(tmp_path, "b.jsonl", data)
    write(tmp_path, "a.json", json.dumps(ROWS).encode())
    described = describe_inputs(Source("s", tmp_path))
    assert described == [
        {
            "path": str(tmp_path / "a.json"),
            "sha256": hashlib.sha256(json.dumps(ROWS).encode()).hexdigest(),
            "bytes": len(json.dumps(ROWS).encode()),
            "format": "json",
        },
        {
            "path": str(tmp_path / "b.jsonl"),
            "sha256": hashlib.sha256(data).hexdigest(),
            "bytes": len(data),
            "format": "jsonl",
        },
    ]
    assert sha256_file(tmp_path / "b.jsonl") == hashlib.sha256(data).hexdigest()


# --- properties ---------------------------------------------------------------------------------

TEXT = st.text(
    alphabet=st.characters(
        codec="utf-8",
        include_characters='\u2028\u2029\r\n\x85\x0b\x0c\ufeff"\\',
    )
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXT,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(TEXT, children, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(TEXT, JSON_VALUES, max_size=5)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(OBJECTS, max_size=8),
    crlf=st.booleans(),
    ascii_only=st.booleans(),
    blank_every=st.integers(min_value=0, max_value=3),
    chunk=st.sampled_from([1, 5, 64, 1 << 20]),
)
def test_property_jsonl_round_trip(
    tmp_path, monkeypatch, rows, crlf, ascii_only, blank_every, chunk
):
    monkeypatch.setattr(read, "CHUNK_BYTES", chunk)
    newline = b"\r\n" if crlf else b"\n"
    lines = []
    for i, row in enumerate(rows):
        if blank_every and i % blank_every == 0:
            lines.append(b"   " + newline)
        lines.append(json.dumps(row, ensure_ascii=ascii_only).encode("utf-8") + newline)
    path = tmp_path / "p.jsonl"
    path.write_bytes(b"".join(lines))
    src = Source("p", path)
    got = list(iter_raw_rows(src))
    assert [r.data for r in got] == rows
    assert count_rows(src) == len(got) == len(rows)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=st.lists(OBJECTS, max_size=6), as_lines=st.booleans())
def test_property_json_files_round_trip(tmp_path, rows, as_lines):
    path = tmp_path / "p.json"
    if as_lines:
        path.write_bytes(jsonl_bytes(rows))
    else:
        path.write_text(json.dumps(rows, ensure_ascii=False, indent=1), encoding="utf-8")
    src = Source("p", path)
    got = list(iter_raw_rows(src))
    expected = rows
    if as_lines and len(rows) == 1 and read._is_wrapper(rows[0], src):
        expected = next(iter(rows[0].values()))
    assert [r.data for r in got] == expected
    assert count_rows(src) == len(got)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_property_arbitrary_bytes_never_raise(data):
    """Any bytes as JSONL: every non-blank line is one row, parsed or rejected, never raised."""
    values = list(read._iter_jsonl_values(io.BytesIO(data), "x"))
    lines = [line.removesuffix(b"\r") for line in data.split(b"\n")]
    if lines and lines[0].startswith(b"\xef\xbb\xbf"):
        lines[0] = lines[0][3:]
    assert len(values) == sum(1 for line in lines if line.strip())
    for value in values:  # a bad line is a returned `RowProblem` value, no other exception
        assert type(value) is RowProblem or not isinstance(value, BaseException)


# --- never lose rows silently (issue 10) ------------------------------------------------------


def test_truncated_zstd_raises_naming_the_file(tmp_path):
    rows = [{"i": i, "pad": "x" * 60} for i in range(2000)]
    comp = zstandard.ZstdCompressor(write_checksum=False).compress(jsonl_bytes(rows))
    for cut in (len(comp) // 3, len(comp) - 1, 7):  # mid-block, last byte, inside the header
        path = write(tmp_path, f"cut{cut}.jsonl.zst", comp[:cut])
        with pytest.raises(SourceError, match=rf"cut{cut}\.jsonl\.zst: cannot read: truncated"):
            count_rows(Source("s", path))
        with pytest.raises(SourceError, match=rf"cut{cut}\.jsonl\.zst"):
            list(iter_raw_rows(Source("s", path)))


def test_zstd_skippable_and_checksummed_frames_still_read(tmp_path):
    comp = zstandard.ZstdCompressor(write_checksum=True, write_content_size=False)
    skippable = (0x184D2A53).to_bytes(4, "little") + (3).to_bytes(4, "little") + b"abc"
    data = skippable + comp.compress(jsonl_bytes(ROWS[:1])) + comp.compress(jsonl_bytes(ROWS[1:]))
    assert datas(read_all(write(tmp_path, "a.jsonl.zst", data))) == ROWS
    big = [{"i": i, "t": "y" * (i % 300)} for i in range(5000)]  # several blocks
    path = write(tmp_path, "b.jsonl.zst", comp.compress(jsonl_bytes(big)))
    assert datas(read_all(path)) == big


@pytest.mark.parametrize("zeros_at_end", [False, True])
def test_arrow_stream_cut_at_a_batch_boundary_raises(tmp_path, zeros_at_end):
    path = tmp_path / "a.arrow"
    # a last batch whose body ends in zero bytes looks like the legacy 4-byte marker
    rows = [{"n": 0}] * 1000 if zeros_at_end else TABLE_ROWS
    write_ipc(path, rows, stream=True, chunk=500)
    data = path.read_bytes()
    assert data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    path.write_bytes(data[:-8])  # a valid stream of whole batches, without its end marker
    with pytest.raises(SourceError, match=r"a\.arrow: cannot read: truncated Arrow stream"):
        count_rows(Source("s", path))


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream"])
def test_truncated_table_files_raise(tmp_path, kind):
    if kind == "parquet":
        path = tmp_path / "a.parquet"
        pq.write_table(pa.Table.from_pylist(TABLE_ROWS), path, row_group_size=500)
    else:
        path = tmp_path / "a.arrow"
        write_ipc(path, TABLE_ROWS, stream=kind == "arrow-stream", chunk=500)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match=r"a\.(parquet|arrow): cannot read"):
        count_rows(Source("s", path))
        list(iter_raw_rows(Source("s", path)))


def test_unreadable_entries_in_a_folder_raise_naming_them(tmp_path):
    import os

    folder = tmp_path / "src"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    (folder / "b.jsonl").symlink_to(folder / "gone.jsonl")  # dangling
    with pytest.raises(SourceError, match=r"b\.jsonl: cannot read: dangling symbolic link"):
        list_files(folder)
    (folder / "b.jsonl").unlink()
    os.mkfifo(folder / "c.jsonl")  # opening it would block the run forever
    with pytest.raises(SourceError, match=r"c\.jsonl: cannot read: not a regular file"):
        list_files(folder)
    with pytest.raises(SourceError, match=r"c\.jsonl: cannot read: not a regular file"):
        list_files(folder / "c.jsonl")  # given directly: refused, never opened (would block)


def test_an_unlistable_subfolder_raises(tmp_path, monkeypatch):
    import os

    folder = tmp_path / "src"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    write(folder / "sub", "b.jsonl", jsonl_bytes(ROWS))
    real = os.scandir

    def scandir(path="."):  # root ignores permissions: refuse the listing as the OS would
        if Path(path).name == "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(SourceError, match=r"sub: cannot read folder: Permission denied"):
        list_files(folder)


def test_a_file_that_vanishes_before_it_is_read_raises(tmp_path):
    folder = tmp_path / "src"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    b = write(folder, "b.jsonl", jsonl_bytes(ROWS))
    src = Source("s", folder)
    assert count_rows(src) == 6
    rows = iter_raw_rows(src)
    next(rows)  # the folder was listed with b.jsonl in it
    b.unlink()
    with pytest.raises(SourceError, match=r"b\.jsonl: cannot read"):
        list(rows)


def test_files_skipped_on_purpose_are_listed(tmp_path):
    folder = tmp_path / "src"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    write(folder, "README.md", b"x")
    write(folder, ".hidden.jsonl", jsonl_bytes(ROWS))
    write(folder / ".git", "config", b"x")
    write(folder / "sub", "notes.csv", b"x")
    files, skipped = read.scan_source(folder)
    assert files == [folder / "a.jsonl"]
    assert skipped == [
        {"path": ".git", "why": "hidden"},
        {"path": ".hidden.jsonl", "why": "hidden"},
        {"path": "README.md", "why": "unsupported type"},
        {"path": "sub/notes.csv", "why": "unsupported type"},
    ]


def test_a_model_or_tokenizer_folder_inside_a_source_folder_is_skipped(tmp_path):
    """The tokenizer (or model) folder kept beside the data (``work/model`` with ``work/`` the
    source): its config.json, tokenizer.json, ... were read as rows, each rejected, and
    vocab.json taken for an Alpaca row (its "instruction" token's id read as the text)."""
    folder = tmp_path / "work"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    model = folder / "model"
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        write(model, name, b'{"model_type": "qwen3"}')
    write(model, "tokenizer.json", b'{"version": "1.0", "model": {}}')
    write(model, "vocab.json", b'{"instruction": 307, "output": 308}')
    write(model, "merges.txt", b"#version: 0.2\n")
    write(model, "chats.jsonl", jsonl_bytes(ROWS))  # a data file of the user's: still read
    files, skipped = read.scan_source(folder)
    assert files == [folder / "a.jsonl", model / "chats.jsonl"]
    why = "a model's or tokenizer's file, not data"
    assert skipped == [
        {"path": "model/config.json", "why": why},
        {"path": "model/generation_config.json", "why": why},
        {"path": "model/merges.txt", "why": "unsupported type"},
        {"path": "model/tokenizer.json", "why": why},
        {"path": "model/tokenizer_config.json", "why": why},
        {"path": "model/vocab.json", "why": why},
    ]


def test_a_model_folder_given_as_the_source_is_named(tmp_path):
    """``draftset build model/ --tokenizer model/``: its JSON files were read as rows."""
    write(tmp_path / "model", "tokenizer.json", b'{"version": "1.0"}')
    write(tmp_path / "model", "config.json", b'{"model_type": "qwen3"}')
    with pytest.raises(SourceError, match=r"model: a model or tokenizer folder, no data \(its"):
        read.scan_source(tmp_path / "model")


def test_a_config_json_of_the_users_data_is_read(tmp_path):
    """A file named like a model's is data in a folder that is no model's (no tokenizer)."""
    folder = tmp_path / "src"
    write(folder, "config.json", json.dumps(ROWS).encode())
    files, skipped = read.scan_source(folder)
    assert files == [folder / "config.json"] and skipped == []


def _open_fds_on(path: Path) -> int:
    fds = Path("/proc/self/fd")
    n = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):  # closed while listed (the listing's own fd)
            n += Path(os.readlink(fd)) == path.resolve()
    return n


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
@pytest.mark.parametrize("kind", ["gz", "zst", "zst-truncated"])
def test_a_compressed_source_leaves_no_file_open(tmp_path, kind):
    """Reading a .gz or .zst source (or failing on a truncated one) closes the file it opened:
    `GzipFile(fileobj=...)` does not close the file it is given, so each gzip source used to
    stay open until garbage collection (a ResourceWarning in the docs example's test)."""
    data = jsonl_bytes(ROWS * 20)
    if kind == "gz":
        path = write(tmp_path, "a.jsonl.gz", gzip.compress(data))
    else:
        packed = zstandard.ZstdCompressor().compress(data)
        path = write(tmp_path, "a.jsonl.zst", packed[:-5] if kind == "zst-truncated" else packed)
    kept: list = []  # what is still referenced (streams, tracebacks) is not collected
    if kind == "zst-truncated":
        with pytest.raises(SourceError) as excinfo:
            list(iter_raw_rows(Source("s", path)))
        kept.append(excinfo)
        with pytest.raises(zstandard.ZstdError) as excinfo:
            read._open_bytes(path, "zst")
        kept.append(excinfo)
    else:
        assert datas(read_all(path)) == ROWS * 20
        with read._open_bytes(path, kind) as stream:
            kept.append(stream)
            assert stream.read() == data
    assert _open_fds_on(path) == 0


def test_draftset_outputs_inside_a_source_folder_are_skipped_and_named(tmp_path):
    """A built set moved into a source folder was read as 200 training rows (its prompts as
    prompts) without a note; a run's work folder and generate's run file likewise."""
    data = tmp_path / "data"
    write(data, "mine.jsonl", jsonl_bytes([{"f": "mine"}]))
    make_save_to_disk(data / "old-set", [[{"input_ids": [1], "loss_mask": [1]}]])
    write(data, "old-set/manifest.json", json.dumps({"format": "draftset/1"}).encode())
    write(data, "old-set/prompts.jsonl", jsonl_bytes([{"f": "prompt"}]))
    write(data, "w/state.json", json.dumps({"format": "draftset-run/1"}).encode())
    write(data, "w/queue.jsonl", jsonl_bytes([{"f": "queued"}]))
    write(data, "answers.jsonl", jsonl_bytes([{"f": "answer"}]))
    write(data, "answers.run.json", json.dumps({"format": "draftset-generate-run"}).encode())
    # generate's errors beside its run file: rows it could not answer (a tool_mismatch row
    # holds messages, and was trained on), not rows to build from
    write(data, "answers.errors.jsonl", jsonl_bytes([{"f": "error"}]))
    write(data, "other.errors.jsonl", jsonl_bytes([{"f": "not generate's"}]))
    write(data, "other.run.json", json.dumps({"format": "not ours"}).encode())
    files, skipped = read.scan_source(data)
    assert [p.name for p in files] == [
        "answers.jsonl",
        "mine.jsonl",
        "other.errors.jsonl",
        "other.run.json",
    ]
    assert skipped == [
        {"path": "answers.errors.jsonl", "why": "a draftset generate errors file, not rows"},
        {"path": "answers.run.json", "why": "a draftset generate run file, not rows"},
        {"path": "old-set", "why": "a draftset output (built set), not input"},
        {"path": "w", "why": "a draftset run work folder, not input"},
    ]


@pytest.mark.parametrize("nested", [False, True])
def test_a_dataset_dict_folder_is_refused_naming_its_splits(tmp_path, nested):
    """`DatasetDict.save_to_disk` (train + test): both splits were read into one source, the
    test split trained on, and ``dataset_dict.json`` rejected as a row; nothing said so."""
    root = tmp_path / "data"
    dd = root / "dd" if nested else root
    make_save_to_disk(dd / "train", [[{"input_ids": [1], "loss_mask": [1]}]])
    make_save_to_disk(dd / "test", [[{"input_ids": [2], "loss_mask": [1]}]])
    write(dd, "dataset_dict.json", json.dumps({"splits": ["train", "test"]}).encode())
    with pytest.raises(read.SourceError) as exc:
        read.scan_source(root)
    msg = str(exc.value)
    assert "DatasetDict" in msg and "(splits: train, test)" in msg and f"{dd / 'train'}" in msg
    assert read.scan_source(dd / "train")[0] == [dd / "train"]  # one split: read as before


@pytest.mark.parametrize("encoding", ["utf-16", "utf-32"])
def test_a_utf16_or_utf32_file_is_refused_naming_its_encoding(tmp_path, encoding):
    """A UTF-16 export (Windows tools) read as UTF-8: two lines became three rows of noise, all
    rejected invalid_json / invalid_utf8, with no word of the encoding."""
    path = tmp_path / "chats.jsonl"
    path.write_text('{"prompt": "Hi?"}\n{"prompt": "Yo?"}\n', encoding=encoding)  # with a BOM
    with pytest.raises(read.SourceError, match=f"{encoding.upper()} text .*save it as UTF-8"):
        read.scan_source(path)


@pytest.mark.parametrize(
    "names",
    [
        ("data/train-00000-of-00001.parquet", "data/test-00000-of-00001.parquet"),
        ("train.jsonl", "validation.jsonl"),
        ("train/part-0.jsonl", "dev/part-0.jsonl", "README.md"),
        ("chats_train.jsonl.gz", "chats_eval.jsonl.gz"),
        ("train1.jsonl", "test1.jsonl"),  # digits part words too, as in `datasets`
    ],
)
def test_a_folder_of_several_splits_is_refused_naming_them(tmp_path, names):
    """A hub dataset downloaded as it is (`data/train-…parquet` beside `data/test-…`) was read
    as one source: the test split trained on, as a DatasetDict folder was before it was
    refused. Which split is the user's to say."""
    root = tmp_path / "hub"
    for name in names:
        write(root, name, b'{"prompt": "Hi?"}\n')
    with pytest.raises(read.SourceError, match="files of several splits") as exc:
        read.refuse_several_splits(root)
    first = root / names[0]
    assert f"e.g. {first}" in str(exc.value)
    read.refuse_several_splits(first)  # one split's file: read as before
    # a pre-flight of build, run and generate, not a reading rule: verify re-reads what a
    # build read (a set built before the rule still verifies)
    assert len(read.scan_source(root)[0]) == len([n for n in names if n != "README.md"])


def test_a_folder_of_one_split_or_of_unrelated_names_is_read(tmp_path):
    """Only several different splits are refused: train shards alone, or names that merely
    contain a split word inside another word (`contest`, `evaluator`), read as before."""
    root = tmp_path / "d"
    for name in ("train-0.jsonl", "train-1.jsonl", "contest.jsonl", "evaluator_notes.jsonl"):
        write(root, name, b'{"prompt": "Hi?"}\n')
    read.refuse_several_splits(root)
    assert len(read.scan_source(root)[0]) == 4


def test_build_and_generate_refuse_a_folder_of_several_splits_before_any_work(tmp_path):
    from conftest import qwen3_tokenizer_dir

    from draftset import api
    from draftset.core.errors import UsageError

    root = tmp_path / "hub"
    write(root, "train.jsonl", b'{"prompt": "Hi?"}\n')
    write(root, "test.jsonl", b'{"prompt": "Yo?"}\n')
    with pytest.raises(UsageError, match="files of several splits"):
        api.build(sources=[root], tokenizer=str(qwen3_tokenizer_dir()), out=tmp_path / "o")
    assert not (tmp_path / "o").exists()
    with pytest.raises(UsageError, match="files of several splits"):
        api.generate([root], out=tmp_path / "a.jsonl", endpoints=["http://127.0.0.1:9/v1"])
    assert not (tmp_path / "a.jsonl").exists()


def test_a_parquet_set_given_as_a_source_is_read_as_its_rows(tmp_path):
    """A Parquet set (`--output-format parquet`) given as a source was read as a folder: its
    manifest.json, verify.json and rejects.jsonl as rows (unknown_format), its prompts.jsonl
    queued again as prompts. It is read as an Arrow set is: its data shards, in order."""
    pre = [{"id": f"r{i}", "input_ids": [i + 1, 2], "loss_mask": [0, 1]} for i in range(5)]
    shards = ["data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet"]
    for name, rows in zip(shards, (pre[:3], pre[3:]), strict=True):
        (tmp_path / "set" / "data").mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), tmp_path / "set" / name)
    files = {name: "0" * 64 for name in [*reversed(shards), "rejects.jsonl", "prompts.jsonl"]}
    manifest = {"format": "draftset/1", "output_format": "parquet", "files": files}
    write(tmp_path, "set/manifest.json", json.dumps(manifest).encode())
    write(tmp_path, "set/verify.json", json.dumps({"ok": True}).encode())
    write(tmp_path, "set/rejects.jsonl", jsonl_bytes([{"source": "a", "reason": "x"}]))
    write(tmp_path, "set/prompts.jsonl", jsonl_bytes([{"messages": [{"role": "user"}]}]))
    files_read, skipped = read.scan_source(tmp_path / "set")
    assert files_read == [tmp_path / "set" / name for name in shards]
    assert skipped == []
    assert datas(read_all(tmp_path / "set")) == pre


@pytest.mark.parametrize("doc", [ROWS, ROWS[0]])
@pytest.mark.parametrize("name", ["a.jsonl", "a.ndjson", "a.jsonl.gz"])
def test_one_json_document_named_jsonl_is_refused(tmp_path, doc, name):
    """A pretty-printed JSON array saved as .jsonl was read line by line: every line rejected
    invalid_json, and beside another source the file silently gone (exit 0)."""
    data = (json.dumps(doc, indent=2) + "\n").encode()
    path = write(tmp_path, name, gzip.compress(data) if name.endswith(".gz") else data)
    renamed = name.replace(".jsonl", ".json").replace(".ndjson", ".json")
    expected = f"{path}: one JSON document, not JSON Lines: rename it {renamed}"
    with pytest.raises(SourceError, match=f"^{expected}"):
        list_files(path)
    with pytest.raises(SourceError, match=f"^{expected}"):
        list_files(tmp_path)


@pytest.mark.parametrize("name", ["a.jsonl", "a.jsonl.gz"])
def test_an_array_of_rows_on_one_line_named_jsonl_is_refused(tmp_path, name):
    """``json.dump(rows, f)`` into a .jsonl file: its one line, an array of every row, was one
    ``not_an_object`` reject ("read 1"), and beside another source the build said exit 0 with
    every row of the file gone."""
    data = (json.dumps(ROWS) + "\n\n").encode()
    path = write(tmp_path, name, gzip.compress(data) if name.endswith(".gz") else data)
    expected = (
        f"{path}: one JSON document, not JSON Lines: rename it {name.replace('.jsonl', '.json')}"
    )
    with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
        list_files(path)
    with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
        list_files(tmp_path)
    two = write(tmp_path, "b.jsonl", (json.dumps(ROWS) + "\n" + json.dumps(ROWS[0])).encode())
    assert [r.reject.reason for r in read_all(two)[:1]] == [reasons.NOT_AN_OBJECT]


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json"])
@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_parquet_or_arrow_file_named_as_json_is_refused(tmp_path, name, kind):
    """A Parquet (or Arrow) file saved as .jsonl was read line by line: its bytes split on
    newlines, each piece rejected ``invalid_utf8`` / ``invalid_json``, and beside another source
    the build exited 0 with every row of the file gone."""
    table = pa.Table.from_pylist(ROWS)
    real = tmp_path / f"real.{kind}"
    if kind == "parquet":
        pq.write_table(table, real)
    else:
        with pa.OSFile(str(real), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
    path = write(tmp_path / "data", name, real.read_bytes())
    stem = name.split(".")[0]
    expected = f"{path}: a {kind.capitalize()} file, not JSON: rename it {stem}.{kind}"
    for source in (path, path.parent):
        with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
            list_files(source)


def test_json_lines_with_a_bad_first_line_are_still_read(tmp_path):
    """Only a file that parses as one document is refused: a JSON Lines file whose first
    lines are damaged still reads, those lines rejected."""
    rows = [{"a": 1}, {"b": 2}]
    path = write(tmp_path, "a.jsonl", b"{\n[\n" + jsonl_bytes(rows))
    got = read_all(path)
    assert [r.reject.reason for r in got[:2]] == [reasons.INVALID_JSON] * 2
    assert datas(got[2:]) == rows
    assert datas(read_all(write(tmp_path, "b.jsonl", b"[1, 2]\n"))) == [None]


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("b.jsonl.bz2", "decompress it, or compress it with gzip or zstd"),
        ("b.JSON.xz", "decompress it, or compress it with gzip or zstd"),
        ("b.parquet.gz", "decompress it (Parquet and Arrow files are read uncompressed)"),
    ],
)
def test_a_data_file_compressed_as_draftset_cannot_read_is_refused_in_a_folder(
    tmp_path, name, hint
):
    """Inside a source folder it was skipped with a note (its rows silently left out, exit 0)
    while named directly it was refused: refused in both places now, naming the file."""
    folder = tmp_path / "data"
    write(folder, "a.jsonl", jsonl_bytes(ROWS))
    write(folder, "README.md", b"x")
    path = write(folder, f"sub/{name}", b"x")
    expected = f"{path}: a compressed data file draftset cannot read ({name.split('.')[-1]}): "
    for source in (folder, path):
        with pytest.raises(SourceError, match=f"^{re.escape(expected + hint)}$"):
            list_files(source)
    write(folder, "sub/old.jsonl.bak", b"x")  # not compressed data: skipped as before
    path.unlink()
    assert read.scan_source(folder)[1][-1] == {
        "path": "sub/old.jsonl.bak",
        "why": "unsupported type",
    }


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.json", "rows.jsonl.gz", "rows.ndjson.zst"])
@pytest.mark.parametrize("compression", ["bzip2", "xz", "zip"])
def test_a_file_compressed_as_draftset_cannot_read_under_a_json_name_is_refused(
    tmp_path, name, compression
):
    """bzip2 / xz / zip bytes under a JSON name (``rows.jsonl``, or ``rows.jsonl.gz``): gzip and
    zstd bytes are sniffed and read whatever the name says, these were split on newlines, each
    piece rejected ``invalid_utf8`` (exit 0 beside another source, every row of the file gone);
    under ``.gz`` the line said "neither gzip nor zstd" without naming what they are."""
    compress = {"bzip2": bz2.compress, "xz": lzma.compress, "zip": _zipped}[compression]
    path = write(tmp_path / "data", name, compress(jsonl_bytes(ROWS)))
    expected = (
        f"{path}: {compression} data under a JSON name: draftset reads JSON plain, gzip or zstd;"
        " decompress it, or compress it with gzip or zstd"
    )
    for source in (path, path.parent):
        with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
            list_files(source)


def _zipped(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("rows.jsonl", data)
    return buffer.getvalue()


def _arrow_stream(path: Path, rows: list[dict]) -> Path:
    table = pa.Table.from_pylist(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return path


def test_a_datasets_cache_folder_is_refused_naming_the_splits_file(tmp_path):
    """``load_dataset(...)`` then ``.map`` / ``.filter`` leave ``cache-<hash>.arrow`` files
    beside the split's ``json-train.arrow`` and ``dataset_info.json`` in the datasets cache; a
    source naming that folder (or one above it, ~/.cache/huggingface/datasets) read every
    cache file as more rows: 5 rows read as 16, 5 ``duplicate``, 6 ``unknown_format`` (a
    filter's indices), exit 0 (under --dedup none every row trained three times)."""
    here = tmp_path / "hfc" / "json" / "default-aa" / "0.0.0" / "d78d"
    split = _arrow_stream(here / "json-train.arrow", ROWS)
    _arrow_stream(here / "cache-16781f57f1057c41.arrow", [{**r, "n": 1} for r in ROWS])
    _arrow_stream(here / "cache-98ad6ea136ca9e8e.arrow", [{"indices": i} for i in range(2)])
    (here / "dataset_info.json").write_text("{}", encoding="utf-8")
    expected = (
        f"{here}: a Hugging Face datasets cache folder (dataset_info.json and 2 cache-*.arrow"
        " files, earlier map/filter results, not more rows): give the split's own file(s), e.g."
        f" {split}, or save the dataset you mean with save_to_disk and give that folder"
    )
    for source in (here, tmp_path / "hfc"):
        with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
            list_files(source)
    assert list_files(split) == [split]  # the split's file itself reads


def test_a_folder_of_arrow_files_named_cache_without_dataset_info_reads(tmp_path):
    """Only the datasets cache's layout is refused: a ``cache-1.arrow`` of yours reads."""
    path = _arrow_stream(tmp_path / "d" / "cache-1.arrow", ROWS)
    assert list_files(tmp_path / "d") == [path]


def test_a_hub_cache_folder_of_several_revisions_is_refused_naming_one(tmp_path):
    """``~/.cache/huggingface/hub/datasets--org--name`` holds one folder per downloaded
    revision under ``snapshots/`` (links into ``blobs/``): each revision's files were read, the
    same rows twice (``duplicate``, or trained twice under --dedup none; two versions of the set
    mixed when they differ), exit 0."""
    repo = tmp_path / "hub" / "datasets--org--name"
    blob = repo / "blobs" / "abc123"
    blob.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(ROWS), blob)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("r2", encoding="utf-8")
    for rev in ("r1", "r2"):
        (repo / "snapshots" / rev / "data").mkdir(parents=True)
        (repo / "snapshots" / rev / "data" / "train-00000-of-00001.parquet").symlink_to(blob)
    expected = (
        f"{repo}: a Hugging Face hub cache folder of 2 revisions (snapshots: r1, r2), each the"
        f" whole dataset: give one revision's folder, e.g. {repo / 'snapshots' / 'r2'} (refs/main)"
    )
    for source in (repo, tmp_path / "hub"):
        with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
            list_files(source)
    (repo / "snapshots" / "r1" / "data" / "train-00000-of-00001.parquet").unlink()
    (repo / "snapshots" / "r1" / "data").rmdir()
    (repo / "snapshots" / "r1").rmdir()
    assert list_files(repo) == [repo / "snapshots" / "r2" / "data" / "train-00000-of-00001.parquet"]


@pytest.mark.parametrize("name", ["joined.jsonl", "joined.jsonl.gz"])
def test_files_joined_with_cat_keep_the_rows_after_each_byte_order_mark(tmp_path, name):
    """``cat a.jsonl b.jsonl > joined.jsonl`` of files saved with a UTF-8 byte-order mark
    (Notepad, PowerShell) leaves a BOM at the start of b's first line: that row was rejected
    ``invalid_json`` ("Unexpected UTF-8 BOM"), one good row lost per file joined. A BOM opening
    any line is read as the first line's always was; a line of a BOM alone is blank."""
    part = b"\xef\xbb\xbf" + jsonl_bytes(ROWS[:2])
    data = part + part + b"\xef\xbb\xbf\n" + part
    path = write(tmp_path, name, gzip.compress(data) if name.endswith(".gz") else data)
    assert datas(read_all(path)) == ROWS[:2] * 3
    src = Source(name="s", path=path)
    ranges = read.plan_ranges(src, 2) if read.range_readable(src) else []
    assert [r.data for rng in ranges for r in read.iter_raw_range(src, rng)] == (
        ROWS[:2] * 3 if ranges else []
    )


def test_a_feather_file_reads_as_the_arrow_file_it_is(tmp_path):
    """Feather (v2) is the Arrow IPC file format under another name (``df.to_feather``):
    given directly it was "unsupported file type", and in a source folder skipped with a
    note, its rows left out (exit 0)."""
    import pyarrow.feather as feather

    rows = [{"id": f"r{i}", "prompt": f"question {i}"} for i in range(3)]
    folder = tmp_path / "d"
    folder.mkdir()
    feather.write_feather(pa.Table.from_pylist(rows), folder / "x.feather")
    write(folder, "y.jsonl", jsonl_bytes(rows[:1]))
    assert datas(read_all(folder / "x.feather")) == rows
    assert datas(read_all(folder)) == rows + rows[:1]
    assert read.scan_source(folder)[1] == []


@pytest.mark.parametrize("name", ["mac.jsonl", "mac.jsonl.gz"])
def test_json_lines_ending_in_cr_alone_are_refused(tmp_path, name):
    """Lines ended by a carriage return alone (classic Mac line ends, some exporters): split
    on LF only, the whole file was one line, one ``invalid_json`` reject ("Extra data"), its
    rows gone (exit 0 beside another source)."""
    data = b"".join(json.dumps(r).encode() + b"\r" for r in ROWS)
    path = write(tmp_path / "d", name, gzip.compress(data) if name.endswith(".gz") else data)
    expected = (
        f"{path}: its lines end in a carriage return alone (CR, old Mac line ends), which JSON"
        " Lines does not split on (read as one line, its rows were one invalid_json reject):"
        " convert the line ends to LF, e.g. tr '\\r' '\\n'"
    )
    for source in (path, path.parent):
        with pytest.raises(SourceError, match=f"^{re.escape(expected)}$"):
            list_files(source)
    crlf = write(tmp_path, "crlf.jsonl", data.replace(b"\r", b"\r\n"))
    assert datas(read_all(crlf)) == ROWS  # CRLF reads, as before
