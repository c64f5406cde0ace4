"""The workers read their own ranges (issue 27): the driver decides on facts, never on rows.

A set built with the workers reading (each range scanned for facts, decided by the driver,
read again and written by a worker) must hold the rows, rejects, prompts, token histogram,
counts and selection report of the same build with the driver reading every row itself
(`select.mix.Selection`, the reference), whatever the ids, duplicates, contamination or
sampling; and the same bytes for every worker count.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import qwen3_tokenizer_dir

import draftset.pipeline.block as block_mod
import draftset.pipeline.build as build_mod
import draftset.select.mix as mix_mod
import draftset.select.ranged as ranged_mod
from draftset.config.options import BuildOptions
from draftset.output.readback import open_output
from draftset.pipeline.build import run_build
from draftset.select.ranged import why_driver_reads
from draftset.sources.read import Source, SourceError


def chat(q: str, a: str, rid: str | None = None) -> dict:
    row: dict = {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
    if rid is not None:
        row["id"] = rid
    return row


def write_jsonl(path: Path, rows: list, extra: dict[int, str] | None = None) -> Path:
    lines = [json.dumps(r) for r in rows]
    for at, text in sorted((extra or {}).items(), reverse=True):
        lines.insert(at, text)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def make_sources(root: Path) -> tuple[list[Source], Path]:
    """Two sources with every case the selection decides: ids taken in another file and in
    another source, exact and near duplicates across sources and ranges, a contaminated
    prompt, a bad line, a blank line, a prompt-only row, pretokenized-free chats."""
    folder = root / "a"
    folder.mkdir()
    first = [
        chat(f"What is {i} plus {i}? Explain the sum.", f"It is {2 * i}.", f"r{i}")
        for i in range(12)
    ]
    first.append({"messages": [{"role": "user", "content": "waiting for an answer"}], "id": "p0"})
    first.append(chat("Name the capital city of France for me please", "Paris.", "bench"))
    write_jsonl(folder / "one.jsonl", first, {3: "{not json", 6: "   "})
    second = [
        chat(f"What is {i} plus {i}? Explain the sum.", f"It is {2 * i}!", f"r{i}")
        for i in range(4)
    ]
    second += [
        chat(f"Tell me a story number {i} about a brave dog", f"Story {i}.", f"s{i}")
        for i in range(9)
    ]
    second.append(chat("Tell me a story number 3 about a brave dog today", "Story 3.", "near"))
    write_jsonl(folder / "two.jsonl", second)
    table = [
        chat(f"Spell the word number {i} backwards", f"{i}".join("ab"), f"r{i % 3}")
        for i in range(10)
    ]
    table += [chat("What is 5 plus 5? Explain the sum.", "It is 10.", "dup")]
    pq.write_table(pa.Table.from_pylist(table), root / "b.parquet", row_group_size=4)
    bench = root / "bench.txt"
    bench.write_text("Name the capital city of France for me please\n", encoding="utf-8")
    return [Source("a", folder), Source("b", root / "b.parquet")], bench


def options(sources: list[Source], out: Path, bench: Path, **kw) -> BuildOptions:
    return BuildOptions(sources, str(qwen3_tokenizer_dir()), out, decontaminate=[str(bench)], **kw)


def read_set(out: Path) -> dict:
    written = open_output(out)
    rows = [written.row(i) for i in range(written.num_rows)]
    manifest = json.loads((out / "manifest.json").read_text())
    return {
        "rows": [
            (r["id"], r["source"], r["input_ids"].tolist(), r["loss_mask"].tolist()) for r in rows
        ],
        "rejects": (out / "rejects.jsonl").read_text(),
        "prompts": (out / "prompts.jsonl").read_text(),
        "token_freq": np.load(out / "token_freq.npy").tolist(),
        "counts": manifest["counts"],
        "mixture": manifest.get("mixture"),
        "reads": manifest["engine"]["rows_read_by"],
    }


@pytest.mark.parametrize(
    "kw",
    [
        {"dedup": "exact"},
        {"dedup": "near", "near_dup_threshold": 0.5},
        {"dedup": "exact", "max_samples": 20, "seed": 3},
        {"dedup": "none", "turns": "each"},
    ],
    ids=["exact", "near", "sampled", "no-dedup"],
)
def test_workers_reading_equals_the_driver_reading(tmp_path, monkeypatch, kw):
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 5)  # ranges of 5 rows: decisions cross them
    sources, bench = make_sources(tmp_path)
    ranged = run_build(options(sources, tmp_path / "ranged", bench, workers=2, **kw))
    monkeypatch.setattr(build_mod, "why_driver_reads", lambda spec: "the reference")
    driver = run_build(options(sources, tmp_path / "driver", bench, workers=1, **kw))
    assert ranged.ok and driver.ok
    got, want = read_set(ranged.out), read_set(driver.out)
    assert (got.pop("reads"), want.pop("reads")) == ("workers", "driver")
    assert got == want
    # the cases happened: file- and source-prefixed ids, duplicates, the benchmark's prompt
    reasons = want["counts"]["total"]["rejected_by_reason"]
    if "max_samples" in kw:
        total = want["counts"]["total"]
        assert total["sampled_out"] == total["available"] - 20 > 0
        return
    ids = " ".join(r[0] for r in got["rows"])
    assert "b:r" in ids and ("a/two.jsonl:r" in ids or kw["dedup"] == "near")
    assert reasons.get("contaminated") == 1 and reasons.get("invalid_json") == 1
    # b repeats r0..r2 within its file: the first repeat prefixed, later ones named by their
    # position (they were duplicate_id rejects; a repeated id is no duplicate content)
    assert "b:3:r0" in ids
    assert "duplicate_id" not in reasons
    if kw["dedup"] != "none":
        assert reasons.get("duplicate", 0) >= 1
    if kw["dedup"] == "near":
        assert reasons.get("near_duplicate", 0) >= 1


def test_worker_counts_write_the_same_bytes_with_the_workers_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 4)
    sources, bench = make_sources(tmp_path)
    one = run_build(options(sources, tmp_path / "w1", bench, workers=1)).out
    two = run_build(options(sources, tmp_path / "w2", bench, workers=2)).out
    names = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(two).as_posix() for p in two.rglob("*") if p.is_file())
    assert sum(n.startswith("data-") for n in names) >= 8  # one shard per range at least
    for name in names:
        if name != "manifest.json":
            assert (one / name).read_bytes() == (two / name).read_bytes(), name
    m1, m2 = (json.loads((d / "manifest.json").read_text()) for d in (one, two))
    assert m1.pop("engine") != m2.pop("engine") and m1 == m2


def test_scans_in_flight_keep_a_row_budget_and_the_same_bytes(tmp_path, monkeypatch):
    """A finished scan waits in the driver for the ones before it; 3 a worker of them were the
    whole input's facts from ~22 local workers (hundreds of bytes a row). The scans' map now
    keeps a row budget per worker; a tiny one (one scan at a time) writes the same set."""
    from draftset.engine.pool import LocalPoolEngine

    budgets: list[int | None] = []
    plain_map = LocalPoolEngine.map

    def recording(self, batches, max_rows=None):
        budgets.append(max_rows)
        return plain_map(self, batches, max_rows)

    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 4)
    monkeypatch.setattr(LocalPoolEngine, "map", recording)
    sources, bench = make_sources(tmp_path)
    wide = run_build(options(sources, tmp_path / "wide", bench, workers=2)).out
    assert budgets == [2 * build_mod.SCAN_ROWS_PER_WORKER, None]  # the scans', the writes'
    monkeypatch.setattr(build_mod, "SCAN_ROWS_PER_WORKER", 1)
    narrow = run_build(options(sources, tmp_path / "narrow", bench, workers=2)).out
    assert budgets[-2:] == [2, None]
    got, want = read_set(narrow), read_set(wide)
    assert got == want and want["reads"] == "workers"


def test_the_driver_never_reads_a_row_when_the_workers_do(tmp_path, monkeypatch):
    """No whole-source read in the driver: `iter_raw_rows` is never called (the workers'
    `iter_raw_range` reads every row), and with the inline engine neither."""

    def refuse(source):
        raise AssertionError(f"the driver read {source.name} row by row")

    monkeypatch.setattr(mix_mod, "iter_raw_rows", refuse)
    sources, bench = make_sources(tmp_path)
    built = run_build(options(sources, tmp_path / "out", bench, workers=1))
    assert built.ok and built.rows > 20
    assert read_set(built.out)["reads"] == "workers"


def test_runs_the_driver_must_read(tmp_path):
    """A mix, an overlay or a source read in one piece keep the driver reading: said why."""
    sources, _ = make_sources(tmp_path)
    spec = options(sources, tmp_path / "o", tmp_path / "x").selection_spec()
    assert why_driver_reads(spec) is None
    gz = tmp_path / "c.jsonl.gz"

    gz.write_bytes(gzip.compress(b'{"messages": []}\n'))
    spec.sources.append(Source("c", gz))
    assert "source c is read in one piece" in why_driver_reads(spec)
    spec.sources.pop()
    spec.mix = {"modes": {"thinking": 1.0}}
    assert "mix" in why_driver_reads(spec)
    spec.mix, spec.overlay = None, ["answers.jsonl"]
    assert "answers" in why_driver_reads(spec)


def test_a_source_changed_after_its_ranges_were_planned_is_refused(tmp_path, monkeypatch):
    """The ranges are planned in one pass over each file, which the sampling plan's counts
    come from: a row appended after the planning is a one-line error naming the file when a
    worker reads it, not a set of other rows."""
    sources, bench = make_sources(tmp_path)
    real = block_mod.plan_read

    def plan_then_append(spec):
        ranges = real(spec)
        with (tmp_path / "a" / "two.jsonl").open("a") as f:
            f.write(json.dumps(chat("late", "row", "late")) + "\n")
        return ranges

    monkeypatch.setattr(build_mod, "plan_read", plan_then_append)
    counted = []
    monkeypatch.setattr(mix_mod, "count_rows", lambda s: counted.append(s) or 0)
    with pytest.raises(Exception, match=r"two\.jsonl: cannot read: the file changed"):
        run_build(options(sources, tmp_path / "out", bench, workers=1))
    assert not (tmp_path / "out").exists()
    assert counted == []  # the plan took the ranges' counts: no second pass over the files


def test_ranges_the_driver_scans_while_the_template_loads_give_the_same_set(tmp_path, monkeypatch):
    """The driver scans the first ranges itself until the template has loaded: however many
    it scans (none, some, all), the decisions and so the set are the same."""
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 5)
    sources, bench = make_sources(tmp_path)
    real = ranged_mod.RangedSelection.scan_ahead
    sets = {}
    for ahead in (0, 3, 1000):

        def scan_ahead(self, tasks, ready, ahead=ahead):
            calls = iter(range(10**6))
            return real(self, tasks, lambda: next(calls) >= ahead)

        monkeypatch.setattr(ranged_mod.RangedSelection, "scan_ahead", scan_ahead)
        built = run_build(options(sources, tmp_path / f"a{ahead}", bench, workers=2))
        sets[ahead] = read_set(built.out)
    assert sets[0] == sets[3] == sets[1000] and len(sets[0]["rows"]) > 20


def test_a_source_changed_while_the_workers_read_it_is_refused(tmp_path, monkeypatch):
    """A file appended to after the driver planned the ranges: whoever reads it (a worker, or
    the driver scanning ahead while the template loads) refuses, since the size and time it
    was counted at no longer hold; the build fails naming the file and leaves nothing, never
    writing rows the count did not see."""
    sources, bench = make_sources(tmp_path)
    real = ranged_mod.RangedSelection.tasks

    def plan_then_append(self, *args, **kw):
        tasks = real(self, *args, **kw)
        with (tmp_path / "a" / "one.jsonl").open("a") as f:
            f.write(json.dumps(chat("late", "row", "late")) + "\n")
        return tasks

    monkeypatch.setattr(ranged_mod.RangedSelection, "tasks", plan_then_append)
    with pytest.raises(SourceError, match=r"one\.jsonl: cannot read: the file changed"):
        run_build(options(sources, tmp_path / "out", bench, workers=2))
    assert not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.parquet", "bench.txt"]


def test_an_empty_source_beside_others_adds_no_task(tmp_path, monkeypatch):
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 5)
    sources, bench = make_sources(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n", encoding="utf-8")
    built = run_build(options([*sources, Source("e", empty)], tmp_path / "o", bench, workers=2))
    assert built.ok and built.per_source["e"]["read"] == 0
    assert read_set(built.out)["reads"] == "workers"


def test_the_scan_budget_counts_a_read_task_s_rows(tmp_path, monkeypatch):
    """The scans' row budget counts each read task's selected rows (it counted each task as
    one row: 3 tasks a worker in flight, whatever their size), read-ahead ones included."""
    import pickle

    import draftset.engine.pool as pool_mod
    from draftset.engine.base import InFlightLimit

    over: list[tuple[int, int]] = []

    class Recording(InFlightLimit):
        def __init__(self, workers, max_rows=None):
            super().__init__(workers, max_rows)
            self.real: list[int] = []

        def add(self, batch):
            if self.max_rows is not None:
                task = pickle.loads(batch) if isinstance(batch, bytes) else batch
                if self.real and sum(self.real) >= self.max_rows:
                    over.append((sum(self.real), self.max_rows))
                self.real.append(task.selected)
            super().add(batch)

        def took(self):
            if self.max_rows is not None:
                self.real.pop(0)
            super().took()

    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 4)  # read tasks of 4 rows
    monkeypatch.setattr(ranged_mod, "SCAN_AHEAD_ROWS", 0)  # every scan through the map
    monkeypatch.setattr(build_mod, "SCAN_ROWS_PER_WORKER", 4)  # 8 rows: 2 tasks in flight
    monkeypatch.setattr(pool_mod, "InFlightLimit", Recording)
    sources, bench = make_sources(tmp_path)
    built = run_build(options(sources, tmp_path / "out", bench, workers=2))
    assert built.ok and read_set(built.out)["reads"] == "workers"
    assert over == []


def test_the_workers_first_scans_go_before_the_early_ranges_writes(tmp_path, monkeypatch):
    """A worker runs its tasks in submission order: scans submitted after the writes of the
    ranges the driver scanned early waited behind them (seconds each), and the other worker
    sat idle until their decisions came (~2.5 s of an 18 s build). The workers' first window
    of scans now goes first; the set is the same."""
    from draftset.engine.pool import LocalPoolEngine

    order: list[str] = []
    plain_submit = LocalPoolEngine._submit

    def recording(self, batch, window):
        order.append("scan" if getattr(batch, "decisions", "x") is None else "write")
        return plain_submit(self, batch, window)

    plain_scan_ahead = ranged_mod.RangedSelection.scan_ahead

    def two_early(self, tasks, ready, most=None):  # the driver scans 2 ranges, ready or not
        return plain_scan_ahead(self, tasks, lambda: False, 2 * block_mod.BLOCK_ROWS)

    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 4)
    monkeypatch.setattr(ranged_mod.RangedSelection, "scan_ahead", two_early)
    monkeypatch.setattr(LocalPoolEngine, "_submit", recording)
    sources, bench = make_sources(tmp_path)
    built = run_build(options(sources, tmp_path / "out", bench, workers=2))
    assert built.ok and read_set(built.out)["reads"] == "workers"
    assert order[0] == "scan" and order.count("write") > 2, order
    monkeypatch.undo()
    plain = run_build(options(sources, tmp_path / "plain", bench, workers=1))
    assert read_set(built.out) | {"reads": 0} == read_set(plain.out) | {"reads": 0}
