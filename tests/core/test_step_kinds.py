"""The real parts have the shapes `core.step` names: the row step, the stream step, the sinks."""

from __future__ import annotations

from draftset.core.step import RowStep, Sink, StreamStep
from draftset.engine.inline import InlineEngine
from draftset.mask.step import MaskStep
from draftset.output.arrow import ArrowWriter
from draftset.output.parquet import ParquetWriter
from draftset.pipeline.build import _JsonlSink
from draftset.select.mix import Selection, SelectionSpec


def test_the_real_steps_have_their_kind_and_only_theirs(tmp_path):
    mask = MaskStep.__new__(MaskStep)  # its shape, without loading a template
    selection = Selection(SelectionSpec([]))
    (tmp_path / "a").mkdir()
    (tmp_path / "p").mkdir()
    writers = [ArrowWriter(tmp_path / "a", 16), ParquetWriter(tmp_path / "p", 16)]
    jsonl = _JsonlSink(tmp_path / "x.jsonl")
    try:
        assert isinstance(mask, RowStep) and not isinstance(mask, StreamStep | Sink)
        assert isinstance(selection, StreamStep) and not isinstance(selection, RowStep | Sink)
        for sink in (*writers, jsonl):
            assert isinstance(sink, Sink) and not isinstance(sink, RowStep | StreamStep)
        assert not isinstance(InlineEngine(None), RowStep | StreamStep | Sink)  # runs steps
    finally:
        jsonl.close()
