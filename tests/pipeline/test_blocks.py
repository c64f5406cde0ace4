"""Workers write their own blocks (issue 27): the driver cuts the rows into blocks in input
order, each worker renders, encodes and writes a block's shard(s), and hands back counts and
names, never the rows. The set must hold exactly the rows of the plain row step (one `MaskStep`
over every row, in order), and the same bytes for every worker count."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import qwen3_tokenizer_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mask"))
from test_render import CASES

import draftset.pipeline.block as block_mod
from draftset.config.options import BuildOptions
from draftset.core.records import Conversation, PromptOnly, Reject
from draftset.mask.encode import EncodedRow
from draftset.mask.template import ChatTemplate, describe_template
from draftset.output.readback import open_output
from draftset.pipeline.block import Block, BlockJob, cut_blocks
from draftset.pipeline.build import mask_config, run_build
from draftset.select.mix import Selection, plan_selection
from draftset.sources.read import Source


def conv(i: int, words: int = 3) -> Conversation:
    msgs = [
        {"role": "user", "content": f"Question {i}?"},
        {"role": "assistant", "content": " ".join(f"w{i}x{k}" for k in range(words))},
    ]
    return Conversation(f"c{i}", "s", i, msgs)


def test_blocks_are_cut_by_the_rows_alone_in_input_order():
    items = [conv(i, 1 + i % 40) for i in range(300)]
    blocks = list(cut_blocks(iter(items), rows=64, size=10**9, batch_rows=10))
    assert [b.index for b in blocks] == list(range(5))
    assert [b.rows for b in blocks] == [64, 64, 64, 64, 44]
    again = [pickle.loads(x) for b in blocks for x in b.batches]
    assert [it for batch in again for it in batch] == items  # every row once, in order
    assert all(len(batch) <= 10 for batch in again)
    # a byte cap cuts earlier (long rows make short blocks), and the same way every time
    small = list(cut_blocks(iter(items), rows=64, size=2_000, batch_rows=10))
    assert len(small) > 5 and sum(b.rows for b in small) == 300
    assert [b.rows for b in small] == [
        b.rows for b in cut_blocks(iter(items), rows=64, size=2_000, batch_rows=10)
    ]
    assert list(cut_blocks(iter([]))) == []


def golden_rows() -> list[dict]:
    """The golden conversations (tests/mask/test_render.py), each several times with its own
    numbers, plus a prompt-only row and a line that is not JSON."""
    rows = []
    for i in range(6):
        for name, (messages, tools) in sorted(CASES.items()):
            msgs = json.loads(json.dumps(messages).replace("?", f" (#{i} {name})?"))
            row = {"messages": msgs}
            if tools:
                row["tools"] = tools
            rows.append(row)
    rows.insert(10, {"messages": [{"role": "user", "content": "no answer yet"}]})
    return rows


def write_source(path: Path) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in golden_rows()]
    lines.insert(20, "{not json")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def options(src: Path, out: Path, **kw) -> BuildOptions:
    return BuildOptions([Source("g", src)], str(qwen3_tokenizer_dir()), out, **kw)


@pytest.mark.parametrize("output_format", ["arrow", "parquet"])
def test_blocks_written_by_workers_equal_the_plain_row_step(tmp_path, monkeypatch, output_format):
    """The set, cut into blocks of 7 rows and written by 2 workers, holds exactly the rows one
    `MaskStep` gives over every selected row in order, the same rejects and prompts; and
    `--workers 1` (the inline engine, blocks written in the driver) writes the same bytes."""
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 7)
    src = write_source(tmp_path / "golden.jsonl")
    built = {
        w: run_build(options(src, tmp_path / f"w{w}", workers=w, output_format=output_format))
        for w in (1, 2)
    }
    # the plain reference: every row through one row step, in this process
    opts = options(src, tmp_path / "unused")
    spec = opts.template_spec()
    template = ChatTemplate(spec)
    step = mask_config(opts, spec, describe_template(template)).build(template)
    plan = plan_selection(opts.sources, None, 0)
    results = step(list(Selection(opts.selection_spec(), plan).rows()))
    rows = [r for res in results for r in res.rows]
    rejects = []
    for res in results:
        if isinstance(res.item, Reject):
            rejects.append(res.item.to_json())
        elif not isinstance(res.item, PromptOnly):
            rejects += [r.to_json() for r in res.rejects]
    out = built[2].out
    assert built[2].ok and built[2].rows == len(rows) > 30  # some are duplicates
    written = open_output(out)
    for i, expected in enumerate(rows):
        got = written.row(i)
        assert (got["id"], got["source"]) == (expected.id, expected.source)
        assert np.array_equal(got["input_ids"], expected.input_ids), expected.id
        assert np.array_equal(got["loss_mask"], expected.loss_mask), expected.id
    lines = (out / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == rejects and rejects  # the bad line, in order
    assert len((out / "prompts.jsonl").read_text().splitlines()) == 1
    shards = json.loads((out / "manifest.json").read_text())["files"]
    assert sum(1 for n in shards if n.startswith(("data-", "data/"))) >= 7  # one per block
    # the same bytes for one worker (the blocks written in the driver) and two
    one, two = built[1].out, built[2].out
    names = sorted(p.relative_to(one).as_posix() for p in one.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(two).as_posix() for p in two.rglob("*") if p.is_file())
    for name in names:
        if name != "manifest.json":
            assert (one / name).read_bytes() == (two / name).read_bytes(), name
    m1, m2 = (json.loads((d / "manifest.json").read_text()) for d in (one, two))
    assert m1.pop("engine") != m2.pop("engine") and m1 == m2


def test_a_block_result_carries_counts_and_names_not_rows(tmp_path):
    """What a worker hands back for a block is a few bytes a row: shard names, counts, the
    sparse token histogram; the rows stay in the shard it wrote."""
    spec = options(tmp_path, tmp_path).template_spec()
    template = ChatTemplate(spec)
    info = describe_template(template)
    opts = options(tmp_path, tmp_path)
    job = BlockJob(mask_config(opts, spec, info), "arrow", tmp_path, info.vocab_size)
    items = [conv(i, 200) for i in range(64)]
    block = Block(3, [pickle.dumps(items[:32]), pickle.dumps(items[32:])], 64)
    result = job.build(template)(block)
    assert result.index == 3 and result.rows_in == 64
    assert result.parts == ["data-b0000003-000.arrow.part"]
    shard = tmp_path / result.parts[0]
    assert result.counts.rows == 64 and result.accounting.total().written == 64
    assert int(result.counts.token_counts.sum()) == result.counts.supervised_tokens
    size = len(pickle.dumps(result))
    assert size < shard.stat().st_size / 10  # no row bytes in it
    assert EncodedRow.__name__.encode() not in pickle.dumps(result)


@pytest.mark.parametrize("output_format", ["arrow", "parquet"])
def test_a_relative_out_folder_builds_with_workers_writing_blocks(
    tmp_path, monkeypatch, output_format
):
    """`--out out` (relative to the working folder): the workers write the blocks' shards under
    the folder's absolute path, and the driver names them relative to its own (a relative
    `--out` with more than one block ended in a ValueError traceback, no set)."""
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 7)
    src = write_source(tmp_path / "golden.jsonl")
    monkeypatch.chdir(tmp_path)
    built = run_build(options(src, Path("rel"), workers=2, output_format=output_format))
    assert built.ok and built.rows > 30
    files = json.loads((tmp_path / "rel" / "manifest.json").read_text())["files"]
    assert sum(1 for n in files if n.startswith(("data-", "data/"))) >= 7
    assert all(not Path(n).is_absolute() and (tmp_path / "rel" / n).is_file() for n in files)


def test_a_block_of_long_prompts_hands_back_a_file_not_the_prompts(tmp_path):
    """A block's prompt-only rows came back inside its `BlockResult` as prompts.jsonl lines:
    a block of 65,536 prompts of 10 KB (the workers read 1/64 of the input a block) was ~0.6 GB
    held by the worker and again by the driver, several blocks in flight, so a prompt set's
    build grew with its input. Past `LINES_IN_RESULT` bytes the worker writes the lines to a
    file beside its shard and the result names it; the driver copies it in block order."""
    spec = options(tmp_path, tmp_path).template_spec()
    template = ChatTemplate(spec)
    info = describe_template(template)
    job = BlockJob(
        mask_config(options(tmp_path, tmp_path), spec, info), "arrow", tmp_path, info.vocab_size
    )
    long = " ".join(f"word{k}" for k in range(5_000))  # ~44 KB a prompt
    items: list = [
        PromptOnly(f"p{i}", "s", i, [{"role": "user", "content": f"{i} {long}"}]) for i in range(64)
    ]
    items.insert(5, conv(99))
    block = Block(4, [pickle.dumps(items[:40]), pickle.dumps(items[40:])], 65)
    result = job.build(template)(block)
    assert result.accounting.total().needs_generation == 64
    assert len(pickle.dumps(result)) < block_mod.LINES_IN_RESULT  # 64 prompts: ~2.8 MB
    lines = list(result.lines("prompts", tmp_path))
    assert [json.loads(x)["id"] for x in lines] == [f"p{i}" for i in range(64)]
    assert json.loads(lines[7])["messages"][0]["content"] == f"7 {long}"
    assert list(result.lines("rejects", tmp_path)) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data-b0000004-000.arrow.part"]
    with pytest.raises(FileNotFoundError, match="every worker and the driver see"):
        list(result.lines("prompts", tmp_path))  # read and removed: as a node's own folder


def test_spilled_lines_build_the_same_bytes(tmp_path, monkeypatch):
    """Every block's reject and prompt lines through files (a tiny `LINES_IN_RESULT` here; the
    pool's workers spill the blocks of long prompts) give the set the lines kept in the results
    give, byte for byte, and no file of them stays behind."""
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 7)
    src = write_source(tmp_path / "golden.jsonl")
    long = "x " * 600_000  # one alone is past 1 MB
    with src.open("a", encoding="utf-8") as f:  # more prompts and rejects, in several blocks
        for i in range(30):
            ask = f"ask {i} {long if i in (7, 8, 20) else ''}"
            f.write(json.dumps({"messages": [{"role": "user", "content": ask}]}) + "\n")
            f.write("{broken\n" if i % 3 else "[1]\n")
    monkeypatch.setattr(block_mod, "LINES_IN_RESULT", 10**12)
    kept = run_build(options(src, tmp_path / "kept", workers=1))
    monkeypatch.setattr(block_mod, "LINES_IN_RESULT", 10)
    spilled = run_build(options(src, tmp_path / "spilled", workers=1))
    pool = run_build(options(src, tmp_path / "pool", workers=2))  # its own LINES_IN_RESULT
    assert kept.ok and spilled.ok and pool.ok
    for built in (spilled, pool):
        for name in ("rejects.jsonl", "prompts.jsonl"):
            text = (kept.out / name).read_bytes()
            assert text.count(b"\n") > 30 and (built.out / name).read_bytes() == text, name
        assert kept.manifest["files"] == built.manifest["files"]
        assert sorted(p.name for p in kept.out.iterdir()) == sorted(
            p.name for p in built.out.iterdir()
        )


def test_the_builds_checks_read_prompts_and_rejects_a_line_at_a_time(tmp_path):
    """The build's accounting check read prompts.jsonl and rejects.jsonl whole, as Python
    objects: every prompt-only row of the input at once (1.2 GB in the driver at the end of
    a build of 1 GB of prompts, whatever its blocks). It streams them now."""
    import tracemalloc

    from draftset.checks.fast import check_accounting

    long = " ".join(f"word{k}" for k in range(2_000))  # ~17 KB a prompt
    src = tmp_path / "asks.jsonl"
    with src.open("w", encoding="utf-8") as f:
        for i in range(600):  # ~10 MB of prompts, and as many reject lines
            f.write(json.dumps({"messages": [{"role": "user", "content": f"{i} {long}"}]}) + "\n")
            f.write("[1]\n")
        f.write(json.dumps({"messages": [*conv(1).messages]}) + "\n")
    built = run_build(options(src, tmp_path / "o", workers=1))
    assert built.ok and built.counts["needs_generation"] == 600
    out = open_output(built.out)
    tracemalloc.start()
    try:
        result = check_accounting(out, None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status == "pass", result.summary
    assert "600 rejects, 600 prompts" in result.summary
    assert peak < 2_000_000, peak  # a few lines at a time, not ~25 MB of them
