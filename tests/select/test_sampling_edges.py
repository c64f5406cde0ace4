"""Per-source sampling at its edges: weight 0, counts larger than a source.

A source with weight 0 takes no row when `--max-samples` splits rows by weight: it is still
read and accounted, every row counted as sampled out (``available = read + sampled_out``).
Before, a lone weight-0 source ended in ``KeyError`` in `plan_selection`, and a weight-0
source took the rows another source could not give (the spill). A count larger than its
source takes every row, as before, and says so in a note.
"""

from __future__ import annotations

from pathlib import Path

from rows import chats, write_jsonl

from draftset.select import mix
from draftset.select.mix import Selection, SelectionSpec, plan_selection
from draftset.sources.read import Source


def source(tmp_path: Path, name: str, n: int, **mixing) -> Source:
    path = tmp_path / f"{name}.jsonl"
    write_jsonl(path, chats(n, name, f"{name} question {{i}}", "answer {i}"))
    return Source(name, path, **mixing)


def taken(plan) -> dict[str, int]:
    available, selections = plan
    return {n: available[n] if s is None else int(s.sum()) for n, s in selections.items()}


def test_a_lone_weight_zero_source_takes_no_row(tmp_path):
    a = source(tmp_path, "a", 3, weight=0.0)
    assert taken(plan_selection([a], 2, 0)) == {"a": 0}


def test_a_weight_zero_source_beside_others_takes_no_row_and_counts_them_sampled_out(tmp_path):
    a, b = source(tmp_path, "a", 3, weight=0.0), source(tmp_path, "b", 4)
    spec = SelectionSpec([a, b], max_samples=2, seed=0)
    plan = plan_selection(spec.sources, spec.max_samples, spec.seed)
    assert taken(plan) == {"a": 0, "b": 2}
    sel = Selection(spec, plan)
    rows = list(sel.rows())
    assert [r.source for r in rows] == ["b", "b"]
    ca, cb = sel.counts["a"], sel.counts["b"]
    assert (ca.available, ca.read, ca.sampled_out) == (3, 0, 3)
    assert (cb.available, cb.read, cb.sampled_out) == (4, 2, 2)


def test_rows_a_short_source_cannot_give_never_go_to_a_weight_zero_source(tmp_path):
    a, b = source(tmp_path, "a", 5, weight=0.0), source(tmp_path, "b", 1, weight=1.0)
    c = source(tmp_path, "c", 5, weight=1.0)
    assert taken(plan_selection([a, b], 3, 0)) == {"a": 0, "b": 1}
    # the spill still reaches a weighted source that has rows left
    assert taken(plan_selection([a, b, c], 4, 0)) == {"a": 0, "b": 1, "c": 3}


def test_weights_and_counts_mix_with_a_weight_zero_source(tmp_path):
    a = source(tmp_path, "a", 5, weight=0.0)
    b = source(tmp_path, "b", 5, count=2)
    assert taken(plan_selection([a, b], 4, 0)) == {"a": 0, "b": 2}


def test_without_max_samples_every_row_is_taken_whatever_the_weight(tmp_path):
    a = source(tmp_path, "a", 3, weight=0.0)
    assert taken(plan_selection([a], None, 0)) == {"a": 3}


def test_a_count_larger_than_its_source_takes_every_row_and_notes_it(tmp_path):
    a, b = source(tmp_path, "a", 3, count=100), source(tmp_path, "b", 4, count=4)
    assert taken(plan_selection([a, b], None, 0)) == {"a": 3, "b": 4}
    notes = mix.sampling_notes([a, b], {"a": 3, "b": 4}, None)
    assert notes == ["source a: count 100 asked, 3 available (all taken)"]


def test_a_weight_zero_without_max_samples_is_noted(tmp_path):
    a, b = source(tmp_path, "a", 3, weight=0.0), source(tmp_path, "b", 2, weight=0.0)
    # with --max-samples a weight 0 acts (no weight-0 note; such a selection, taking no row,
    # is refused before any work: only the note that the set is smaller than asked)
    assert mix.sampling_notes([a, b], {"a": 3, "b": 2}, 2) == [
        "max_samples 2 asked, 0 available (all taken; a source at weight 0 gives none)"
    ]
    assert mix.sampling_notes([a], {"a": 3}, None) == [
        "source a: weight 0 has no effect without --max-samples (all 3 rows taken)"
    ]


def test_no_note_for_an_ordinary_selection(tmp_path):
    a, b = source(tmp_path, "a", 3, count=3), source(tmp_path, "b", 4, weight=2.0)
    assert mix.sampling_notes([a, b], {"a": 3, "b": 4}, 5) == []
    assert mix.sampling_notes([a, source(tmp_path, "c", 4)], {"a": 3, "c": 4}, None) == []


def test_any_weight_without_max_samples_is_noted(tmp_path):
    """``a.jsonl@weight=3`` without --max-samples did nothing, without the note weight 0 had."""
    a, b = source(tmp_path, "a", 3, weight=3.0), source(tmp_path, "b", 4, weight=0.5)
    assert mix.sampling_notes([a, b, source(tmp_path, "c", 2)], {"a": 3, "b": 4, "c": 2}, None) == [
        "source a: weight 3 has no effect without --max-samples (all 3 rows taken)",
        "source b: weight 0.5 has no effect without --max-samples (all 4 rows taken)",
    ]
    both = source(tmp_path, "d", 5, weight=2.0, count=2)  # its count acts: the weight's note
    assert mix.sampling_notes([both], {"d": 5}, None) == [
        "source d: weight 2 has no effect beside its count 2 (a count takes that many rows)"
    ]


def test_a_weight_beside_a_count_is_noted(tmp_path):
    """`{path: a.jsonl, count: 5, weight: 2}` under --max-samples 10 took 5 rows of a and 5 of
    b, the weight ignored without a word: a count takes that many rows, whatever the weight."""
    a, b = source(tmp_path, "a", 20, weight=2.0, count=5), source(tmp_path, "b", 10)
    assert taken(plan_selection([a, b], 10, 0)) == {"a": 5, "b": 5}
    assert mix.sampling_notes([a, b], {"a": 20, "b": 10}, 10) == [
        "source a: weight 2 has no effect beside its count 5 (a count takes that many rows)"
    ]


def test_max_samples_larger_than_the_sources_give_is_noted(tmp_path):
    """`max_samples: 40` over two sources at count 5 gave 10 rows, `max_samples: 200` over 60
    rows gave 60, without a word (a source's own count too high has its note): now the same
    kind of note, not a failure."""
    a, b = source(tmp_path, "a", 30, count=5), source(tmp_path, "b", 30, count=5)
    assert taken(plan_selection([a, b], 40, 0)) == {"a": 5, "b": 5}
    assert mix.sampling_notes([a, b], {"a": 30, "b": 30}, 40) == [
        "max_samples 40 asked, 10 available (all taken; a source with a count gives at most"
        " that many)"
    ]
    c, d = source(tmp_path, "c", 30), source(tmp_path, "d", 30, weight=2.0)
    assert taken(plan_selection([c, d], 200, 0)) == {"c": 30, "d": 30}
    assert mix.sampling_notes([c, d], {"c": 30, "d": 30}, 200) == [
        "max_samples 200 asked, 60 available (all taken)"
    ]
    assert mix.sampling_notes([c, d], {"c": 30, "d": 30}, 60) == []


def test_a_build_asking_more_rows_than_there_are_says_so(tmp_path):
    """The note reaches the build's result (the summary prints its notes)."""
    from conftest import qwen3_tokenizer_dir

    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build

    a = source(tmp_path, "a", 6)
    opts = BuildOptions([a], str(qwen3_tokenizer_dir()), tmp_path / "out", max_samples=40)
    result = run_build(opts)
    assert "max_samples 40 asked, 6 available (all taken)" in result.notes


def test_weights_whose_products_overflow_split_as_their_ratios(tmp_path):
    """Finite weights the option takes (`@weight=1e308`) split `--max-samples` as their ratio
    does: ``budget * weight`` (one source) or their sum (two) overflowed to inf, and the build
    ended in an OverflowError / ValueError traceback."""
    a, b = source(tmp_path, "a", 9, weight=1e308), source(tmp_path, "b", 9, weight=1e308)
    assert taken(plan_selection([a], 5, 0)) == {"a": 5}
    assert taken(plan_selection([a, b], 5, 0)) == {"a": 3, "b": 2}
    c = source(tmp_path, "c", 9, weight=0.5e308)
    assert taken(plan_selection([a, c], 6, 0)) == {"a": 4, "c": 2}


def test_max_samples_beyond_any_float_takes_every_row(tmp_path):
    """`--max-samples 1e400` as digits (an int the option takes) is more than every source
    holds: every row is taken, as with 10**30; it was an OverflowError traceback (the budget
    times a weight)."""
    a, b = source(tmp_path, "a", 3), source(tmp_path, "b", 4, weight=2.0)
    assert taken(plan_selection([a, b], 10**400, 0)) == {"a": 3, "b": 4}
    assert taken(plan_selection([a, b], 10**30, 0)) == {"a": 3, "b": 4}
