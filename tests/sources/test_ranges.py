"""Row ranges (issue 27): a worker reads its own part of a source, and the parts add up to
exactly what `iter_raw_rows` reads, rejects included."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_read import make_save_to_disk, write_ipc

from draftset.core import reasons
from draftset.core.records import RawRow
from draftset.sources import read
from draftset.sources.read import (
    RowRange,
    Source,
    SourceError,
    count_rows,
    iter_raw_range,
    iter_raw_rows,
    plan_ranges,
    range_readable,
)

SIZES = (1, 2, 3, 7, 1000)

# every JSONL hazard the whole read handles: BOM, CRLF, blank and whitespace-only lines (not
# rows, but numbered as lines), invalid JSON / UTF-8, a non-object, a lone surrogate, U+2028
# inside a string, padded lines, and no newline at the end
TORTURE = (
    b'\xef\xbb\xbf{"a": 1}\r\n'
    b"\n"
    b"   \t \r\n"
    b'{"a": \n'
    b'{"a": "\xff\xfe"}\n'
    b"[1, 2]\n"
    b'{"a": "\\ud800"}\n'
    b'{"b": "x\xe2\x80\xa8y"}\r\n'
    b"\n\n"
    b'"text"\r\n'
    b'  {"c": 3}  \n'
    b"\r\n"
    b'{"d": 4}\n'
    b"{oops}\n"
    b'{"e": 5}'
)
TABLE = [{"id": f"r{i}", "n": i, "tags": ["x"] * (i % 3)} for i in range(23)]


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=5)
    return path


def jsonl_source(tmp: Path) -> Path:
    return write(tmp / "t.jsonl", TORTURE)


def json_lines_source(tmp: Path) -> Path:
    return write(tmp / "t.json", TORTURE)


def parquet_source(tmp: Path) -> Path:
    return write_parquet(tmp / "t.parquet", TABLE)


def arrow_stream_source(tmp: Path) -> Path:
    write_ipc(tmp / "t.arrow", TABLE, stream=True, chunk=4)
    return tmp / "t.arrow"


def arrow_file_source(tmp: Path) -> Path:
    write_ipc(tmp / "t.arrow", TABLE, stream=False, chunk=6)
    return tmp / "t.arrow"


def save_to_disk_source(tmp: Path) -> Path:
    make_save_to_disk(tmp / "hf", [TABLE[:9], TABLE[9:]])
    return tmp / "hf"


def folder_source(tmp: Path) -> Path:
    root = tmp / "data"
    write(root / "a.jsonl", TORTURE)
    write(root / "b" / "empty.jsonl", b"")
    write(root / "b" / "blank.jsonl", b"\n \r\n\n")
    write(root / "b" / "c.ndjson", b'{"c": 1}\n\n{bad\n{"c": 2}\n')
    write_parquet(root / "d.parquet", TABLE[:12])
    write_ipc(root / "e.arrow", TABLE[:7], chunk=3)
    make_save_to_disk(root / "f" / "hf", [TABLE[:4], TABLE[4:11]])
    write(root / "g.json", b'{"g": 1}\n{"g": 2}\n')
    return root


SOURCES: dict[str, Callable[[Path], Path]] = {
    "jsonl": jsonl_source,
    "json-lines": json_lines_source,
    "parquet": parquet_source,
    "arrow-stream": arrow_stream_source,
    "arrow-file": arrow_file_source,
    "save_to_disk": save_to_disk_source,
    "folder": folder_source,
}


def fields(row: RawRow) -> tuple:
    reject = row.reject
    why = None if reject is None else (reject.source, reject.row, reject.reason, reject.message)
    return row.source, row.row, row.data, row.file, why


def read_by_ranges(src: Source, ranges: list[RowRange]) -> list[RawRow]:
    return [r for rng in ranges for r in iter_raw_range(src, rng)]


def check_plan(src: Source, ranges: list[RowRange], size: int) -> None:
    """Ranges in row order, back to back, none empty or larger than asked, each in one entry."""
    first = 0
    for rng in ranges:
        assert rng.source == src.name
        assert rng.first == first
        assert 1 <= rng.rows <= size
        first += rng.rows
        rows = list(iter_raw_range(src, rng))
        assert {r.file for r in rows} == {rng.file}
    assert first == count_rows(src)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", list(SOURCES))
def test_ranges_read_exactly_what_the_whole_read_reads(tmp_path, kind, size):
    src = Source(name="s", path=SOURCES[kind](tmp_path))
    whole = list(iter_raw_rows(src))
    assert range_readable(src)
    ranges = plan_ranges(src, size)
    assert [fields(r) for r in read_by_ranges(src, ranges)] == [fields(r) for r in whole]
    check_plan(src, ranges, size)


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_ranges_of_a_folder_written_by_datasets(tmp_path, size):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "hf"
    datasets.Dataset.from_list(TABLE).save_to_disk(str(folder), num_shards=3)
    src = Source(name="s", path=folder)
    assert range_readable(src)
    ranges = plan_ranges(src, size)
    assert [r.data for r in read_by_ranges(src, ranges)] == TABLE
    check_plan(src, ranges, size)


def test_the_torture_file_has_what_it_should(tmp_path):
    """The property above is only as good as its file: rejects of every kind, line numbers
    that differ from row numbers."""
    rows = list(iter_raw_rows(Source(name="s", path=jsonl_source(tmp_path))))
    why = [(r.row, r.reject.reason, r.reject.message[:11]) for r in rows if r.reject]
    assert why == [
        (1, reasons.INVALID_JSON, "t.jsonl:4: "),
        (2, reasons.INVALID_UTF8, "t.jsonl:5: "),
        (3, reasons.NOT_AN_OBJECT, "row is a JS"),
        (4, reasons.INVALID_UTF8, "t.jsonl:7: "),
        (6, reasons.NOT_AN_OBJECT, "row is a JS"),
        (9, reasons.INVALID_JSON, "t.jsonl:15:"),
    ]


def test_folder_ranges_keep_to_their_file(tmp_path):
    src = Source(name="s", path=folder_source(tmp_path))
    ranges = plan_ranges(src, 4)
    files = [rng.file for rng in ranges]
    # the empty and blank-only files give no range; the others in list_files order
    assert list(dict.fromkeys(files)) == [
        "a.jsonl",
        "b/c.ndjson",
        "d.parquet",
        "e.arrow",
        "f/hf",
        "g.json",
    ]
    assert [rng.rows for rng in ranges if rng.file == "d.parquet"] == [4, 4, 4]
    assert [rng.rows for rng in ranges if rng.file == "b/c.ndjson"] == [3]
    assert all(
        Path(rng.path).relative_to(tmp_path / "data").as_posix() == rng.file for rng in ranges
    )


def test_jsonl_ranges_note_byte_offsets_and_line_numbers(tmp_path):
    path = write(tmp_path / "a.jsonl", b'\xef\xbb\xbf{"a": 1}\r\n\n{"a": 2}\n  \n{"a": 3}')
    ranges = plan_ranges(Source(name="s", path=path), 1)
    assert [(r.first, r.rows, r.offset, r.lineno, r.file) for r in ranges] == [
        (0, 1, 0, 1, None),
        (1, 1, 14, 3, None),
        (2, 1, 26, 5, None),
    ]


def test_jsonl_ranges_with_lines_split_across_chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(read, "CHUNK_BYTES", 7)
    src = Source(name="s", path=jsonl_source(tmp_path))
    whole = list(iter_raw_rows(src))
    for size in (1, 3):
        ranges = plan_ranges(src, size)
        assert [fields(r) for r in read_by_ranges(src, ranges)] == [fields(r) for r in whole]


LINES = st.one_of(
    st.dictionaries(st.text(max_size=3), st.text(max_size=5), max_size=2).map(
        lambda d: json.dumps(d, ensure_ascii=False).encode()
    ),
    st.sampled_from([b"", b" ", b"\t\r", b"{x", b"\xff", b"[]", b'"\\udc00"', b'{"a":"\\ud800"}']),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(st.tuples(LINES, st.booleans()), max_size=12),
    bom=st.booleans(),
    end=st.booleans(),
    size=st.integers(1, 5),
)
def test_property_jsonl_ranges_add_up_to_the_whole_read(tmp_path, lines, bom, end, size):
    data = b"".join(line + (b"\r\n" if crlf else b"\n") for line, crlf in lines)
    if not end:
        data = data.rstrip(b"\r\n")
    path = write(tmp_path / "p.jsonl", (b"\xef\xbb\xbf" if bom else b"") + data)
    src = Source(name="s", path=path)
    whole = list(iter_raw_rows(src))
    ranges = plan_ranges(src, size)
    assert [fields(r) for r in read_by_ranges(src, ranges)] == [fields(r) for r in whole]
    assert sum(rng.rows for rng in ranges) == len(whole)


# --- what can be read by ranges ----------------------------------------------------------------


@pytest.mark.parametrize("kind", list(SOURCES))
def test_range_readable(tmp_path, kind):
    assert range_readable(Source(name="s", path=SOURCES[kind](tmp_path)))


UNREADABLE: dict[str, Callable[[Path], Path]] = {
    "gz": lambda tmp: write(tmp / "a.jsonl.gz", gzip.compress(b'{"a": 1}\n')),
    "zst": lambda tmp: write(tmp / "a.jsonl.zst", zstandard.compress(b'{"a": 1}\n')),
    "sniffed-gz": lambda tmp: write(tmp / "a.jsonl", gzip.compress(b'{"a": 1}\n')),
    "json-document": lambda tmp: write(tmp / "a.json", b'[{"a": 1},\n {"a": 2}]\n'),
    "folder-with-a-gz": lambda tmp: (
        (
            write(tmp / "d" / "a.jsonl", b'{"a": 1}\n'),
            write(tmp / "d" / "b.jsonl.gz", gzip.compress(b'{"a": 1}\n')),
        )[0].parent
    ),
}


@pytest.mark.parametrize("kind", list(UNREADABLE))
def test_not_range_readable(tmp_path, kind):
    src = Source(name="s", path=UNREADABLE[kind](tmp_path))
    assert not range_readable(src)
    with pytest.raises(ValueError, match="cannot be read by ranges"):
        plan_ranges(src, 10)


def test_a_hub_source_is_not_range_readable():
    src = Source(name="s", path=Path("hf:org/set"))
    assert not range_readable(src)
    with pytest.raises(ValueError, match="hub source"):
        plan_ranges(src, 10)


def test_plan_refuses_empty_ranges_and_reading_another_sources_range(tmp_path):
    src = Source(name="s", path=jsonl_source(tmp_path))
    with pytest.raises(ValueError, match="at least 1"):
        plan_ranges(src, 0)
    rng = plan_ranges(src, 3)[0]
    with pytest.raises(ValueError, match="source 's' read as source 'other'"):
        list(iter_raw_range(Source(name="other", path=src.path), rng))


# --- changed files -----------------------------------------------------------------------------


def test_plan_records_what_count_rows_records(tmp_path):
    counted = Source(name="s", path=folder_source(tmp_path))
    planned = Source(name="s", path=counted.path)
    count_rows(counted)
    plan_ranges(planned, 5)
    assert planned.seen == counted.seen and len(planned.seen) == 7


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_file_changed_after_planning_stops_the_range_read(tmp_path, kind):
    path = SOURCES[kind](tmp_path)
    src = Source(name="s", path=path)
    ranges = plan_ranges(src, 4)
    if kind == "jsonl":
        with path.open("ab") as f:
            f.write(b'\n{"late": 1}\n')
    else:
        write_parquet(path, TABLE[:3])
    with pytest.raises(SourceError, match="changed since it was counted"):
        list(iter_raw_range(src, ranges[1]))


def test_an_unreadable_table_file_is_a_source_error_naming_it(tmp_path):
    path = parquet_source(tmp_path)
    src = Source(name="s", path=path)
    ranges = plan_ranges(src, 4)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))
    st_ = path.stat()
    src.seen[str(path)] = (st_.st_size, st_.st_mtime_ns)
    with pytest.raises(SourceError, match=f"{path}: cannot read: "):
        list(iter_raw_range(src, ranges[0]))


# --- a range reads only its own part -----------------------------------------------------------


def test_a_jsonl_range_never_reads_the_bytes_before_it(tmp_path):
    rows = [{"i": i, "pad": "x" * i} for i in range(20)]
    path = write(tmp_path / "a.jsonl", b"".join(json.dumps(r).encode() + b"\n" for r in rows))
    src = Source(name="s", path=path)
    ranges = plan_ranges(src, 10)
    expected = list(iter_raw_range(src, ranges[1]))
    assert [r.data for r in expected] == rows[10:]
    # the first half's bytes become junk of the same length (no newline: read from the start,
    # they would be one rejected row, and every later row would shift)
    with path.open("r+b") as f:
        f.write(b"\xff" * ranges[1].offset)
    st_ = path.stat()
    src.seen[str(path)] = (st_.st_size, st_.st_mtime_ns)
    assert [fields(r) for r in iter_raw_range(src, ranges[1])] == [fields(r) for r in expected]
    assert next(iter_raw_rows(src)).reject.reason == reasons.INVALID_UTF8  # junk it is


@pytest.mark.parametrize("kind", ["parquet", "arrow-stream", "arrow-file", "save_to_disk"])
def test_a_table_range_converts_only_its_own_rows(tmp_path, monkeypatch, kind):
    src = Source(name="s", path=SOURCES[kind](tmp_path))
    ranges = plan_ranges(src, 7)
    converted: list[int] = []
    groups: list[list[int]] = []
    rows_of_batches = read._rows_of_batches

    def spy(batches):
        for batch in batches:
            converted.append(batch.num_rows)
            yield from rows_of_batches([batch])

    class SpyParquet(pq.ParquetFile):
        def iter_batches(self, *args, row_groups=None, **kw):
            groups.append(list(row_groups))
            return super().iter_batches(*args, row_groups=row_groups, **kw)

    monkeypatch.setattr(read, "_rows_of_batches", spy)
    monkeypatch.setattr(read.pq, "ParquetFile", SpyParquet)
    rng = ranges[1]  # rows 7..13
    assert [r.data for r in iter_raw_range(src, rng)] == TABLE[7:14]
    assert sum(converted) == 7
    if kind == "parquet":  # row groups of 5 rows: 7..13 lie in groups 1 and 2 only
        assert groups == [[1, 2]]


def test_a_range_read_for_some_of_its_rows_parses_only_those(tmp_path, monkeypatch):
    """``wanted``: the rows a sampling plan takes, the same RawRows as the whole read gives
    them; the other lines are not parsed (a garbage line left out is no reject)."""
    path = tmp_path / "s.jsonl"
    lines = [json.dumps({"messages": [], "i": i}) for i in range(10)]
    lines[3] = "{garbage"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    src = Source("s", path)
    whole = list(iter_raw_rows(src))
    (rng,) = plan_ranges(src, 100)
    wanted = [i % 3 != 0 for i in range(10)]  # rows 0, 3, 6, 9 left out
    got = list(iter_raw_range(src, rng, wanted))
    assert [r.row for r in got] == [i for i in range(10) if wanted[i]]
    assert got == [r for r in whole if wanted[r.row]]
    assert all(r.reject is None for r in got)  # the garbage line was not parsed
    parsed = []
    real = read._parse_line
    monkeypatch.setattr(read, "_parse_line", lambda *a: parsed.append(1) or real(*a))
    list(iter_raw_range(src, rng, wanted))
    assert len(parsed) == sum(wanted)
