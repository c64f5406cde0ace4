"""Selection is a stream step: it yields the rows and keeps its own counts and report, read once
the rows are drained (it writes into nothing the caller owns)."""

from __future__ import annotations

import json
from pathlib import Path

from draftset.core import reasons
from draftset.core.records import Reject
from draftset.select.mix import Selection, SelectionSpec, plan_selection
from draftset.sources.read import Source


def source(tmp_path: Path, name: str, n: int, bad: int | None = None) -> Source:
    lines = []
    for i in range(n):
        msgs = [
            {"role": "user", "content": f"{name} question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
        row = {"id": f"{name}{i}", "messages": msgs}
        lines.append("{not json" if i == bad else json.dumps(row))
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return Source(name, path)


def test_sampled_selection_counts_and_reports_itself(tmp_path):
    a, b = source(tmp_path, "a", 6, bad=2), source(tmp_path, "b", 4)
    spec = SelectionSpec([a, b], max_samples=5, seed=1)
    sel = Selection(spec, plan_selection(spec.sources, spec.max_samples, spec.seed))
    rows = list(sel.rows())
    per = {name: c.to_json() for name, c in sel.counts.sources.items()}
    assert [per[n]["available"] for n in ("a", "b")] == [6, 4]
    assert sum(per[n]["read"] for n in per) == len(rows) == 5
    assert all(c["available"] == c["read"] + c["sampled_out"] for c in per.values())
    assert {n: sum(r.source == n for r in rows) for n in per} == {n: per[n]["read"] for n in per}
    assert set(sel.report) == {"dedup"}  # filter stats; no mix, no decontamination
    again = Selection(spec)  # the plan is made on the way when not given
    assert [r.id for r in again.rows()] == [r.id for r in rows]
    assert again.counts == sel.counts and again.report == sel.report


def test_rows_the_mix_leaves_out_count_as_sampled_out(tmp_path):
    """Never read and taken back: a candidate the mix does not choose is sampled out; a reject
    is not a candidate and stays in the stream (counted read, rejected downstream)."""
    a, b = source(tmp_path, "a", 6, bad=0), source(tmp_path, "b", 6)
    spec = SelectionSpec([a, b], max_samples=4, mix={"sources": {"a": 0.5, "b": 0.5}})
    sel = Selection(spec)
    rows = list(sel.rows())
    convs = [r for r in rows if not isinstance(r, Reject)]
    assert [r.reason for r in rows if isinstance(r, Reject)] == [reasons.INVALID_JSON]
    assert {n: sum(r.source == n for r in convs) for n in "ab"} == {"a": 2, "b": 2}
    for name in "ab":
        c = sel.counts[name]
        assert c.read == sum(r.source == name for r in rows)
        assert (c.available, c.read + c.sampled_out) == (6, 6)
    assert list(sel.report) == ["mix", "dedup"]  # the manifest's `mixture`, in its order
    assert sel.report["mix"]["total"] == 4


def _chat_rows(path: Path, ids: list[object], tag: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "question_id": rid,
                "messages": [
                    {"role": "user", "content": f"{tag} question {i}"},
                    {"role": "assistant", "content": f"{tag} answer {i}"},
                ],
            }
        )
        for i, rid in enumerate(ids)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_ids_of_different_files_of_one_folder_never_collide(tmp_path):
    """Three files of one folder source sharing question ids 1..3: the third file's rows were
    duplicate_id rejects (own id, then `source:id`, both taken). Now the fallback names the
    file; a file repeating an id names its later repeats by their position (the third `7` of
    d.jsonl was a duplicate_id reject: an id repeated with other content is a row all the same,
    equal content is exact dedup's)."""
    data = tmp_path / "data"
    for name in ("a.jsonl", "b.jsonl", "sub/c.jsonl"):
        _chat_rows(data / name, [1, 2, 3], name)
    _chat_rows(data / "d.jsonl", [7, 7, 7], "d")  # one id three times within one file
    spec = SelectionSpec([Source("data", data)], dedup="none")
    rows = list(Selection(spec).rows())
    assert [r.id if not isinstance(r, Reject) else r.reason for r in rows] == [
        "1",
        "2",
        "3",
        "data/b.jsonl:1",
        "data/b.jsonl:2",
        "data/b.jsonl:3",
        "7",
        "data/d.jsonl:7",
        "data:8:7",  # row 8 of the source (a, b: 3 rows each; d's third)
        "data/sub/c.jsonl:1",
        "data/sub/c.jsonl:2",
        "data/sub/c.jsonl:3",
    ]
    again = Selection(spec)  # verify re-derives the same ids
    assert [r.id for r in again.rows()] == [r.id for r in rows]


def test_single_file_sources_keep_their_ids(tmp_path):
    one = _chat_rows(tmp_path / "one.jsonl", [1, 1, 1], "one")
    two = _chat_rows(tmp_path / "two.jsonl", [1], "two")
    rows = list(Selection(SelectionSpec([Source("one", one), Source("two", two)])).rows())
    assert [r.id if not isinstance(r, Reject) else r.reason for r in rows] == [
        "1",
        "one:1",
        "one:2:1",  # was a duplicate_id reject: a repeated id is no duplicate content
        "two:1",
    ]


def test_a_source_file_that_grows_while_it_is_read_stops_the_run(tmp_path):
    """A writer appending to a source (a run's answers written into its own source folder)
    turned the appended rows into duplicates of the rows read before; it is refused."""
    import pytest

    from draftset.sources.read import SourceError

    path = _chat_rows(tmp_path / "grow.jsonl", list(range(50)), "g")
    original = path.read_bytes()
    spec = SelectionSpec([Source("grow", path)], dedup="none")
    sel = Selection(spec)
    rows = sel.rows()
    next(rows)
    with path.open("ab") as f:  # the same rows appended again while the read goes on
        f.write(original)
    with pytest.raises(SourceError, match=r"grow.jsonl: cannot read: the file changed while it"):
        list(rows)
    path.write_bytes(original)
    plan = plan_selection(spec.sources, None, 0)  # counted at one size ...
    with path.open("ab") as f:
        f.write(original)  # ... read at another
    with pytest.raises(SourceError, match=r"changed since it was counted \(.* bytes, now"):
        list(Selection(spec, plan).rows())
