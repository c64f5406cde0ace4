"""Each row-step process gets its share of the CPUs for the Rust tokenizer's thread pool.

With the tokenizer's default (a pool of every CPU in every process), `--workers 2` on two CPUs
ran up to four encode threads beside the two processes' renders. The helper (when it runs the
row step) and the pool workers now hold ``RAYON_NUM_THREADS`` to the CPUs shared out, set
before anything there encodes; a value the user set is kept; ids do not depend on it.
"""

from __future__ import annotations

import os

import pytest

import draftset.engine.base as base
from draftset.engine.base import tokenizer_threads
from draftset.engine.helper import Sidecar
from draftset.engine.pool import LocalPoolEngine


@pytest.mark.parametrize(
    ("cpus", "workers", "threads"),
    [(2, 2, 1), (2, None, 1), (2, 0, 1), (8, 2, 4), (64, 3, 21), (2, 1, 2), (4, 16, 1)],
)
def test_the_cpus_are_shared_out(monkeypatch, cpus, workers, threads):
    monkeypatch.setattr(base, "available_cpus", lambda: cpus)
    assert tokenizer_threads(workers) == threads


def test_the_helper_holds_its_share_unless_the_user_set_one(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    with Sidecar(1) as side:
        assert side.submit(os.getenv, "RAYON_NUM_THREADS").result() == "1"
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    with Sidecar(1) as side:
        assert side.submit(os.getenv, "RAYON_NUM_THREADS").result() == "3"


def test_pool_workers_hold_their_share(monkeypatch):
    monkeypatch.delenv("RAYON_NUM_THREADS", raising=False)
    engine = LocalPoolEngine(2)
    try:
        engine._feed(None)  # no task: the workers start empty
        got = {engine._pool.submit(os.getenv, "RAYON_NUM_THREADS").result() for _ in range(4)}
    finally:
        engine.close(failed=False)
    assert got == {str(tokenizer_threads(2))}
