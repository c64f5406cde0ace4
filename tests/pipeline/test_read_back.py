"""The build's checks and manifest take what the workers read back of their own shards.

A worker that writes a block's shard reads it back where it wrote it (`output.readback.
shard_facts`, and its sha256), so the driver never reads the set's tokens after the rows are
written (issue 27: its work stays a few bytes a row to the end, instead of a serial pass over
every token after the workers finish). The fast path must equal the reference path: the facts
gathered from the workers equal `SetFacts.read` of the finished folder, and the checks the
build reports equal `fast_checks` run on the folder afterwards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from conftest import qwen3_tokenizer_dir

import draftset.checks.fast as fast_mod
import draftset.pipeline.block as block_mod
import draftset.pipeline.build as build_mod
from draftset.checks.verify import fast_checks
from draftset.config.options import BuildOptions
from draftset.output.readback import BatchFacts, OutputSet, SetFacts, open_output
from draftset.pipeline.build import run_build
from draftset.sources.read import Source


def rows(n: int) -> list[dict]:
    """Chats of several lengths, a prompt-only row and a row rejected for its length."""
    out: list[dict] = []
    for i in range(n):
        answer = " ".join(f"word{j}" for j in range(i % 7 + 1))
        msgs = [{"role": "user", "content": f"Question {i}?"}]
        msgs.append({"role": "assistant", "content": answer})
        if i % 3 == 0:  # a second turn: two supervised runs
            msgs += [{"role": "user", "content": "More?"}, {"role": "assistant", "content": "No."}]
        out.append({"id": f"r{i}", "messages": msgs})
    out.append({"id": "p", "messages": [{"role": "user", "content": "unanswered"}]})
    out.append({"id": "long", "messages": [{"role": "user", "content": "x " * 3000}]})
    return out


def source(tmp_path: Path, n: int = 40) -> Source:
    path = tmp_path / "chats.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows(n)) + "\n", encoding="utf-8")
    return Source("chats", path)


def options(src: Source, out: Path, **kw) -> BuildOptions:
    kw.setdefault("eot_tokens", ("<|im_end|>", "<|endoftext|>"))
    return BuildOptions([src], str(qwen3_tokenizer_dir()), out, max_length=256, **kw)


def same_facts(got: SetFacts, want: SetFacts) -> None:
    """Equal row for row: every field, batch boundaries aside (the set's record batches and
    the workers' shards need not be cut alike)."""

    def joined(facts: SetFacts) -> dict:
        out: dict = {"ids": facts.ids(), "sources": facts.sources()}
        for f in dataclasses.fields(BatchFacts):
            if f.name in ("start_row", "ids", "sources", "stats", "freq_ids", "freq_counts"):
                continue
            if f.name == "bad_mask_rows":
                out[f.name] = [b.start_row + r for b in facts.batches for r in b.bad_mask_rows]
                continue
            parts = [getattr(b, f.name) for b in facts.batches]
            out[f.name] = None if any(p is None for p in parts) else np.concatenate(parts)
        stats = facts.row_stats(0)
        out.update({k: v for k, v in dataclasses.asdict(stats).items()})
        return out

    a, b = joined(got), joined(want)
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], np.ndarray):
            assert np.array_equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize(
    "kw",
    [
        {"workers": 2},
        {"workers": 1, "output_format": "parquet"},
        {"workers": 2, "turns": "each", "truncation": "truncate"},
    ],
    ids=["arrow-w2", "parquet-w1", "each-truncate"],
)
def test_the_workers_read_back_equals_reading_the_set(tmp_path, monkeypatch, kw):
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 7)  # several blocks, so several shards
    taken: dict = {}
    real = build_mod.fast_checks

    def spy(out, **kwargs):
        taken.update(kwargs)
        return real(out, **kwargs)

    monkeypatch.setattr(build_mod, "fast_checks", spy)
    built = run_build(options(source(tmp_path), tmp_path / "out", **kw))
    assert built.ok and built.rows > 20
    facts, digests = taken["facts"], taken["digests"]
    assert facts is not None and len(facts.batches) >= 4
    out = open_output(built.out)
    same_facts(facts, SetFacts.read(out))
    # every shard's digest is its file's, and the manifest's
    manifest = json.loads((built.out / "manifest.json").read_text())
    assert sorted(digests) == sorted(out.data_names)
    for name, digest in digests.items():
        assert digest == hashlib.sha256((built.out / name).read_bytes()).hexdigest()
        assert manifest["files"][name] == digest
    # the build's checks are the reference checks of the finished folder
    want = [c.to_json() for c in fast_checks(built.out)]
    assert [c.to_json() for c in built.checks] == want
    assert all(c["status"] != "fail" for c in want)


def test_the_driver_never_reads_the_set_back(tmp_path, monkeypatch):
    """After the workers wrote the shards, the driver reads no record batch and hashes no
    shard: the checks and the manifest take the workers' read-back. (Pool workers are other
    processes: the patches here reach the driver alone.)"""

    def refuse(self):
        raise AssertionError("the driver read the set's record batches back")

    hashed: list[str] = []
    real_hash = fast_mod.sha256_file
    monkeypatch.setattr(OutputSet, "record_batches", refuse)
    monkeypatch.setattr(fast_mod, "sha256_file", lambda p: hashed.append(p.name) or real_hash(p))
    monkeypatch.setattr(block_mod, "BLOCK_ROWS", 7)
    built = run_build(options(source(tmp_path), tmp_path / "out", workers=2))
    assert built.ok and built.rows > 20
    assert [c.status for c in built.checks if c.status == "fail"] == []
    assert not [name for name in hashed if name.startswith("data-")]
    assert "rejects.jsonl" in hashed  # the driver's own files are still hashed by the check


def test_a_tampered_shard_still_fails_verify_after_such_a_build(tmp_path):
    """The read-back is the build's own; `verify` reads and hashes the folder itself."""
    built = run_build(options(source(tmp_path), tmp_path / "out", workers=2))
    assert built.ok
    shard = sorted(built.out.glob("data-*.arrow"))[0]
    data = bytearray(shard.read_bytes())
    data[-100] ^= 0xFF
    shard.write_bytes(bytes(data))
    failed = {c.name for c in fast_checks(built.out) if c.status == "fail"}
    assert "file_hashes" in failed
