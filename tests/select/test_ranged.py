"""How the workers' read tasks are cut (`select.ranged`): by the sampling plan alone, never
across two files, big first and small at the end, every row in exactly one task."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from draftset.select.mix import SelectionSpec, plan_selection
from draftset.select.ranged import RangedSelection, plan_source_ranges
from draftset.sources.read import Source, count_rows


def write_rows(path: Path, n: int) -> Path:
    rows = ({"messages": [{"role": "user", "content": f"q{i}"}]} for i in range(n))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def tasks_of(sources: list[Source], max_samples=None, unit=1, **kw):
    spec = SelectionSpec(sources, max_samples=max_samples)
    ranges = plan_source_ranges(spec, unit)
    plan = plan_selection(sources, max_samples, 0, ranges.available)
    return RangedSelection(spec, ranges, plan).tasks(**kw)


def test_the_ranges_count_the_rows_as_the_sampling_plan_does(tmp_path):
    """The ranges are planned in one pass over each file and the sampling plan takes its
    counts from them: the same counts, so the same plan, as counting the sources itself."""
    folder = tmp_path / "f"
    folder.mkdir()
    write_rows(folder / "a.jsonl", 37)
    (folder / "b.jsonl").write_text('{"messages": []}\n\n  \nnot json\n', encoding="utf-8")
    sources = [Source("f", folder), Source("o", write_rows(tmp_path / "o.jsonl", 30))]
    ranges = plan_source_ranges(SelectionSpec(sources), 4)
    assert ranges.available == {s.name: count_rows(s) for s in sources} == {"f": 39, "o": 30}
    for seed in (0, 1):
        counted = plan_selection(sources, 50, seed)
        given = plan_selection(sources, 50, seed, ranges.available)
        assert counted[0] == given[0]
        assert all(np.array_equal(counted[1][k], given[1][k]) for k in ("f", "o"))


def test_tasks_take_a_share_of_what_is_left_within_bounds(tmp_path):
    src = Source("s", write_rows(tmp_path / "s.jsonl", 10_000))
    tasks = tasks_of([src], unit=10, share=8, most=2_000)
    sizes = [t.range.rows for t in tasks]
    assert sum(sizes) == 10_000 and [t.index for t in tasks] == list(range(len(tasks)))
    assert sizes[0] == 1_250 and sizes[-1] == 10  # 10,000 / 8, then shrinking to the unit
    assert sizes == sorted(sizes, reverse=True) and max(sizes) <= 2_000
    assert all(s % 10 == 0 for s in sizes)  # whole units
    firsts = [t.range.first for t in tasks]
    assert firsts == [sum(sizes[:i]) for i in range(len(sizes))]
    # the same plan cuts the same tasks (the worker count is not an input)
    again = tasks_of([src], unit=10, share=8, most=2_000)
    assert [(t.range, t.chosen) for t in again] == [(t.range, t.chosen) for t in tasks]


def test_tasks_never_span_two_files_and_carry_the_plan_s_rows(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    write_rows(folder / "a.jsonl", 37)
    write_rows(folder / "b.jsonl", 5)
    other = Source("o", write_rows(tmp_path / "o.jsonl", 30))
    tasks = tasks_of([Source("f", folder), other], max_samples=40, unit=4, share=2, most=100)
    by_file = {(t.source.name, t.range.file) for t in tasks}
    assert by_file == {("f", "a.jsonl"), ("f", "b.jsonl"), ("o", None)}
    for t in tasks:  # the plan's slice of exactly the task's rows
        assert t.chosen is not None and len(t.chosen) == t.range.rows
    assert sum(t.selected for t in tasks) == 40
    assert all(Path(t.range.path).is_absolute() for t in tasks)
    plan = plan_selection([Source("f", folder), other], 40, 0)[1]
    whole = np.concatenate([t.chosen for t in tasks if t.source.name == "f"])
    assert np.array_equal(whole, plan["f"])
