"""Blocks: the unit a build's workers render, encode and **write** (issue 27).

The driver cuts the selected rows into blocks in input order (`cut_blocks`: at most
`BLOCK_ROWS` rows or `BLOCK_BYTES` of pickled rows, whichever comes first, never sized by the
worker count or timing). A worker runs `BlockRunner` on a block: the row step on each of its
batches, the rows written to the block's own shard file(s) in the output's temporary folder,
reject and prompt lines serialized; it hands back a `BlockResult` of a few KB (part names,
counts, the sparse supervised-token histogram, the JSON lines, or past `LINES_IN_RESULT` the
file it wrote them to), never the rows. The driver adds
the counts up and gathers the parts in block order, so the set's bytes are the same whichever
worker wrote which block, for every engine and worker count.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from draftset.core.counters import Accounting
from draftset.core.records import Normalized, PromptOnly, Reject
from draftset.mask.step import ItemResult, MaskConfig, MaskStep, count_results
from draftset.mask.template import Renderer
from draftset.output import layout, writer_class
from draftset.output.base import ShardedWriter, Writer, WriterCounts
from draftset.output.readback import BatchFacts, shard_facts
from draftset.select.mix import SelectionSpec
from draftset.select.ranged import (
    RangedSelection,
    RangeFacts,
    Readers,
    ReadTask,
    SourceRanges,
    plan_source_ranges,
)
from draftset.sources.read import sha256_file

BATCH_ROWS = 64
"""Rows per row-step call inside a block (the tokenizer's batch)."""
BLOCK_ROWS = 1024
"""Rows per block at most when the driver cuts them; when the workers read (`read_tasks`), the
unit their ranges are cut in and the least a block takes."""
BLOCK_SHARE = 64
"""When the workers read, a block takes 1/`BLOCK_SHARE` of the selected rows still to come:
~250 shards for a million rows, small blocks at the end so no worker waits on a straggler."""
BLOCK_MAX_ROWS = 65_536
"""Selected rows per block at most when the workers read (a shard of a few hundred MB)."""
BLOCK_BYTES = 8_000_000
"""Pickled row bytes per block at most (long rows make shorter blocks: flat memory)."""
LINES_IN_RESULT = 1_000_000
"""Bytes of a block's reject or prompt lines a `BlockResult` carries at most; past that a
worker writes them to a file beside the block's shards (`LineSpool`), which the driver copies
in block order. A block of 65,536 prompt-only rows held every prompt in the worker and again in
the driver (~0.6 GB for prompts of 10 KB, several blocks in flight: memory grew with the
input)."""


@dataclass
class Block:
    """Rows ``index`` of the build, as pickled batches of at most `BATCH_ROWS` rows."""

    index: int
    batches: list[bytes]
    rows: int


def cut_blocks(
    items: Iterable[Normalized],
    rows: int | None = None,
    size: int | None = None,
    batch_rows: int | None = None,
) -> Iterator[Block]:
    """The rows in input order as blocks; the cut depends on the rows alone (their count and
    their pickled size), so every engine and worker count cuts the same blocks."""
    rows = rows or BLOCK_ROWS
    size = size or BLOCK_BYTES
    batch_rows = batch_rows or BATCH_ROWS
    batches: list[bytes] = []
    batch: list[Normalized] = []
    count = nbytes = index = 0

    def seal() -> None:
        nonlocal batch, nbytes
        data = pickle.dumps(batch, protocol=pickle.HIGHEST_PROTOCOL)
        batches.append(data)
        nbytes += len(data)
        batch = []

    for item in items:
        batch.append(item)
        count += 1
        if len(batch) >= batch_rows:
            seal()
        if count >= rows or nbytes >= size:
            if batch:
                seal()
            yield Block(index, batches, count)
            index += 1
            batches, count, nbytes = [], 0, 0
    if batch:
        seal()
    if batches:
        yield Block(index, batches, count)


def plan_read(spec: SelectionSpec) -> SourceRanges:
    """The sources cut into `BLOCK_ROWS`-row ranges, the unit blocks are joined from; the
    sampling plan takes its counts from them (one pass over each file)."""
    return plan_source_ranges(spec, BLOCK_ROWS)


def read_tasks(ranged: RangedSelection) -> list[ReadTask]:
    """The sources cut into blocks (`RangedSelection.tasks`, sized by `BLOCK_SHARE` and
    `BLOCK_MAX_ROWS`): each one its worker reads, renders, encodes and writes."""
    return ranged.tasks(BLOCK_SHARE, BLOCK_MAX_ROWS)


@dataclass
class BlockResult:
    """What a worker hands back for one block: no row bytes."""

    index: int
    rows_in: int
    parts: list[str]  # the block's shard parts, relative to the output folder, in order
    counts: WriterCounts
    accounting: Accounting
    rejects: list[str] = field(default_factory=list)  # rejects.jsonl lines, in order
    prompts: list[str] = field(default_factory=list)  # prompts.jsonl lines, in order
    results: list[ItemResult] | None = None
    """The row step's results themselves, only for a format the workers cannot write in blocks
    (one file for the whole set: `output.base.Writer` without shards); the driver writes them."""
    facts: list[list[BatchFacts]] = field(default_factory=list)
    """Per part: what the fast checks need of it, read back from the file the worker wrote
    (`output.readback.shard_facts`), so the driver never reads the set's tokens."""
    digests: list[str] = field(default_factory=list)  # per part: the file's sha256
    spilled: dict[str, str] = field(default_factory=dict)
    """``rejects`` / ``prompts`` lines the worker wrote to a file instead (more than
    `LINES_IN_RESULT` bytes): the file's name, relative to the output folder."""

    def lines(self, kind: str, folder: Path) -> Iterator[str]:
        """The block's ``kind`` lines (``rejects`` or ``prompts``) in order, from the result or
        streamed from the file the worker spilled them to (removed once read)."""
        yield from getattr(self, kind)
        name = self.spilled.get(kind)
        if name is None:
            return
        path = folder / name
        if not path.is_file():  # as `ShardedWriter.add_block` says it of a shard
            raise FileNotFoundError(
                f"{path}: a worker wrote these lines but they are not here (the output folder"
                " must be on storage that every worker and the driver see)"
            )
        with path.open(encoding="utf-8", newline="\n") as f:
            for line in f:
                yield line[:-1]
        path.unlink()


class LineSpool(list[str]):
    """A block's reject or prompt lines, kept in memory up to `LINES_IN_RESULT` bytes, then
    written on to ``path`` (every line in order: the ones kept so far first)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._bytes = 0
        self._file: Any = None

    def append(self, line: str) -> None:
        if self._file is not None:
            self._file.write(line + "\n")
            return
        super().append(line)
        self._bytes += len(line)
        if self._bytes > LINES_IN_RESULT:
            self._file = self.path.open("w", encoding="utf-8", newline="\n")
            self._file.writelines(x + "\n" for x in self)
            self.clear()

    def extend(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.append(line)

    def close(self) -> str | None:
        """Done: the file's name when the lines went there (None: all are in the list)."""
        if self._file is None:
            return None
        self._file.close()
        self._file = None
        return self.path.name

    def abandon(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(frozen=True)
class BlockJob:
    """What every worker needs to process blocks: the row step's config and where to write."""

    config: MaskConfig
    output_format: str | None  # None: a format without shards, which the driver writes
    folder: Path
    vocab_size: int
    selection: SelectionSpec | None = None  # the workers read their ranges (`select.ranged`)

    def build(self, template: Renderer | None = None) -> BlockRunner:
        return BlockRunner(self, self.config.build(template))

    def kitless(self) -> BlockJob:
        """The job for a process that already holds the loaded template (the helper)."""
        return replace(self, config=replace(self.config, kit=None))


class BlockRunner:
    """One worker's block processor: row step, then the block's shard(s) and lines."""

    def __init__(self, job: BlockJob, step: MaskStep) -> None:
        self.job = job
        self.step = step
        self.readers = Readers(job.selection) if job.selection is not None else None

    def __call__(self, block: Block | ReadTask) -> BlockResult | RangeFacts:
        if isinstance(block, Block):
            batches = (pickle.loads(data) for data in block.batches)
            return self._write(block.index, block.rows, batches)
        assert self.readers is not None, "a read task needs the job's selection"
        if block.decisions is None:  # the first read: the facts the driver decides on
            return self.readers.scan(block)
        rows = self.readers.selected_rows(block)
        try:
            return self._write(block.index, block.selected, _batches(rows, BATCH_ROWS))
        finally:
            rows.close()  # after a failure too: the source file is not left open

    def _write(
        self, index: int, rows_in: int, batches: Iterable[Sequence[Normalized]]
    ) -> BlockResult:
        """The row step on each batch; the rows written to the block's own shard(s)."""
        job = self.job
        if job.output_format is None:  # one file for the whole set: the driver writes the rows
            results = [r for batch in batches for r in self.step(list(batch))]
            empty = WriterCounts(0, 0, 0, 0, np.zeros(0, np.int64), np.zeros(0, np.int64))
            acct = count_results(results)
            return BlockResult(index, rows_in, [], empty, acct, results=results)
        writer = writer_class(job.output_format)(job.folder, job.vocab_size, index)
        assert isinstance(writer, ShardedWriter)
        acct = Accounting([])
        rejects = LineSpool(job.folder / f"rejects-b{index:07d}.jsonl.part")
        prompts = LineSpool(job.folder / f"prompts-b{index:07d}.jsonl.part")
        try:
            for batch in batches:
                results = self.step(list(batch))
                acct += count_results(results)
                write_results(results, writer, rejects, prompts)
            parts = writer.close()
            spilled = {
                kind: name
                for kind, spool in (("rejects", rejects), ("prompts", prompts))
                if (name := spool.close()) is not None
            }
        except BaseException:
            writer.abandon()  # no file left open (the build removes the folder next)
            rejects.abandon()
            prompts.abandon()
            raise
        names = [p.relative_to(job.folder).as_posix() for p in parts]
        # read back what was written, here where it was written: the set's checks and manifest
        # need each shard's facts and sha256, and the driver would otherwise read every token
        fmt = layout(job.output_format)
        facts = [shard_facts(fmt, part) for part in parts]
        digests = [sha256_file(part) for part in parts]
        counts = writer.counts()
        lines = (list(rejects), list(prompts))  # empty where they were spilled to a file
        return BlockResult(
            index, rows_in, names, counts, acct, *lines, None, facts, digests, spilled
        )


def _batches(rows: Iterator[Normalized], n: int) -> Iterator[list[Normalized]]:
    """``rows`` in lists of ``n`` (the last shorter); itertools.batched is Python 3.12."""
    while batch := list(islice(rows, n)):
        yield batch


def _line(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False)


def write_results(
    results: list[ItemResult], writer: Writer, rejects: list[str], prompts: list[str]
) -> None:
    """A batch's rows to the block's writer, its reject and prompt lines to the lists, in order."""
    for res in results:
        item = res.item
        if isinstance(item, Reject):
            rejects.append(_line(item.to_json()))
            continue
        if isinstance(item, PromptOnly):
            prompts.append(_line(item.to_json()))
            continue
        rejects.extend(_line(r.to_json()) for r in res.rejects)
        if res.rows:
            writer.write(res.rows)
