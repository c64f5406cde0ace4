"""The engine seam: any engine hands the row step's results back in submission order, equal to
the inline engine's, and a build records which engine made it (outside the set's bytes)."""

from __future__ import annotations

import json
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import time
from concurrent.futures import Future, ProcessPoolExecutor

import numpy as np
import pytest
from conftest import qwen3_tokenizer_dir

from draftset.config.options import BuildOptions
from draftset.core.errors import RunError
from draftset.core.records import Conversation, PromptOnly, Reject
from draftset.engine import worker
from draftset.engine.base import InFlightLimit
from draftset.engine.helper import Sidecar, stop_pool
from draftset.engine.inline import InlineEngine
from draftset.engine.pool import LocalPoolEngine
from draftset.mask.template import ChatTemplate, TemplateSpec, describe_template
from draftset.pipeline.build import mask_config, run_build
from draftset.sources.read import Source


def conv(i: int, words: int) -> Conversation:
    msgs = [
        {"role": "user", "content": f"Question {i}?"},
        {"role": "assistant", "content": " ".join(f"w{i}x{k}" for k in range(words))},
    ]
    return Conversation(f"c{i}", "s", i, msgs)


def batches() -> list:
    """Uneven batches (a slow one first) so workers finish out of order; one pickled, as the
    driver's read-ahead sends them; rejects and prompt-only rows pass through."""
    out: list = [[conv(0, 400), conv(1, 300)]]
    out += [[conv(10 * b + k, 3) for k in range(3)] for b in range(1, 8)]
    out.append([Reject("s", 90, "r90", "invalid_json", "x"), PromptOnly("p91", "s", 91, [])])
    out[3] = pickle.dumps(out[3])
    return out


def flatten(results: list) -> list[tuple]:
    return [
        (
            r.item.id,
            [(row.input_ids.tolist(), row.loss_mask.tolist()) for row in r.rows],
            [x.reason for x in r.rejects],
        )
        for batch in results
        for r in batch
    ]


def test_pool_engine_returns_inline_results_in_submission_order():
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    template = ChatTemplate(spec)
    info = describe_template(template)
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    config = mask_config(opts, spec, info)
    with InlineEngine(template) as inline:
        inline.start(config)
        expected = flatten(list(inline.map(batches())))
    with LocalPoolEngine(2) as pool:
        pool.start(config)
        got = flatten(list(pool.map(batches())))
    ids = [x[0] for x in expected]
    assert ids == [
        "c0",
        "c1",
        *[f"c{10 * b + k}" for b in range(1, 8) for k in range(3)],
        "r90",
        "p91",
    ]
    assert got == expected
    assert all(rows for _, rows, _ in expected[:-2])  # real rows, not empty results


def test_in_flight_limit_counts_batches_and_with_a_budget_rows():
    """Results come back in order, so finished batches wait in the driver for the ones before
    them: `IN_FLIGHT_PER_WORKER` a worker, and with a row budget (a scan's facts, hundreds of
    bytes a row, at 22+ workers the whole input's) at most that many rows, one batch at least."""
    plain = InFlightLimit(2)
    for _ in range(5):
        plain.add([1, 2, 3, 4])
        assert not plain.full()
    plain.add([1, 2, 3, 4])
    assert plain.full()  # 3 a worker
    budget = InFlightLimit(8, max_rows=8)
    budget.add([1, 2, 3, 4])
    assert not budget.full()
    budget.add([1, 2, 3, 4])
    assert budget.full()  # 8 rows, far below 24 batches
    budget.took()
    assert not budget.full()
    huge = InFlightLimit(8, max_rows=8)
    huge.add(list(range(20)))
    assert huge.full()  # alone over the budget: submitted all the same, then taken back
    huge.took()
    assert not huge.full()


def test_pool_map_keeps_a_row_budget_and_the_same_results():
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    config = mask_config(opts, spec, describe_template(ChatTemplate(spec)))
    many = [[conv(10 * b + k, 5) for k in range(4)] for b in range(12)]
    pulled: list[int] = []

    def feed():
        for i, batch in enumerate(many):
            pulled.append(i)
            yield batch

    with LocalPoolEngine(2) as pool:
        pool.start(config)
        plain = flatten(list(pool.map(many)))
        got = []
        for result in pool.map(feed(), max_rows=8):
            got.append(result)
            assert len(pulled) - len(got) <= 1  # 8 rows: 2 batches of 4 before taking one
    assert flatten(got) == plain


def test_the_helper_is_one_of_the_workers():
    """`--workers 2` with the build's helper: one pool process plus the helper, which runs the
    row step on the template it loaded; results equal the inline engine's, in order."""
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    template = ChatTemplate(spec)
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    with InlineEngine(template) as inline:
        inline.start(mask_config(opts, spec, describe_template(template)))
        expected = flatten(list(inline.map(batches())))
    with Sidecar() as side:
        info = side.call("loading", worker.load_and_keep, spec, None)
        with LocalPoolEngine(2, helper=side) as pool:
            assert len(pool._pool._processes) == 1  # type: ignore[attr-defined]
            pool.start(mask_config(opts, spec, info))
            got = flatten(list(pool.map(batches())))
            pool.finish()
        assert got == expected
        # the slow first batch keeps the pool busy: the helper takes the next ones
        assert side.call("counting", worker.batches_done) >= 1


def test_pool_processes_start_after_the_helpers_import():
    """The pool waits for the helper's import (so it does not take CPU from the template load);
    a build closed before that never starts them, and the late signal is harmless."""
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    template = ChatTemplate(spec)
    with InlineEngine(template) as inline:
        inline.start(mask_config(opts, spec, describe_template(template)))
        expected = flatten(list(inline.map(batches())))
    with Sidecar() as side:
        imported: Future[None] = Future()
        with LocalPoolEngine(2, helper=side, start_after=imported) as engine:
            assert not engine._pool._processes  # type: ignore[attr-defined]
            info = side.call("loading", worker.load_and_keep, spec, None)
            imported.set_result(None)
            assert len(engine._pool._processes) == 1  # type: ignore[attr-defined]
            engine.start(mask_config(opts, spec, info))
            assert flatten(list(engine.map(batches()))) == expected
            engine.finish()
    late: Future[None] = Future()
    closed = LocalPoolEngine(3, start_after=late)
    closed.close(failed=True)
    late.set_result(None)  # after close: nothing starts, nothing raises
    assert not closed._pool._processes  # type: ignore[attr-defined]


def test_a_killed_pool_worker_is_one_line_exit_1_not_a_traceback():
    """A pool process killed mid-run (the OOM killer, kill -9) broke the pool, and the build
    ended in concurrent.futures' BrokenProcessPool traceback (~25 lines), where the helper's
    death and a Ray worker's are one line each: now a `RunError` (exit 1) saying what died."""
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    config = mask_config(opts, spec, describe_template(ChatTemplate(spec)))
    many = [[conv(100 * b + k, 50) for k in range(4)] for b in range(40)]  # more than in flight
    with LocalPoolEngine(2) as pool:
        pool.start(config)
        results = pool.map(many)
        next(results)  # mid-run: the pool works, batches still to submit
        victim = next(iter(pool._pool._processes.values()))  # type: ignore[attr-defined]
        os.kill(victim.pid, signal.SIGKILL)
        with pytest.raises(RunError) as caught:
            list(results)
    assert caught.value.exit_code == 1
    line = caught.value.cli_line()
    assert line == (
        "draftset: a worker process died while running the row step (killed, or out of memory?)"
    )


DIES_BEFORE_ITS_TASK = """
import os, signal, sys
from draftset.config.options import BuildOptions
from draftset.core.errors import RunError
from draftset.core.records import Conversation
from draftset.engine.pool import LocalPoolEngine
from draftset.mask.template import ChatTemplate, TemplateSpec, describe_template
from draftset.pipeline.build import mask_config

spec = TemplateSpec(sys.argv[1], None, {}, ())
opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)
config = mask_config(opts, spec, describe_template(ChatTemplate(spec)))
msgs = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]
try:
    with LocalPoolEngine(2) as pool:
        victim = next(iter(pool._pool._processes.values()))
        os.kill(victim.pid, signal.SIGKILL)  # before it takes its task from the queue
        victim.join()
        pool.start(config)  # the task (the tokenizer's kit, MBs) for each process
        list(pool.map([[Conversation("c", "s", 0, msgs)]]))
except RunError as exc:
    print(exc.cli_line())
"""


def test_a_pool_process_dead_before_its_task_does_not_hang_the_exit():
    """A pool process killed before it took its task (the OOM killer at start-up): the build
    failed with its one line, then never exited: the task, MBs of pickled tokenizer kit, sat
    in the task queue's pipe, and multiprocessing's exit hook waits for the queue's feeder
    thread to deliver it to a reader that is gone (a driver left hanging for 28 minutes)."""
    proc = subprocess.run(
        [sys.executable, "-c", DIES_BEFORE_ITS_TASK, str(qwen3_tokenizer_dir())],
        capture_output=True,
        text=True,
        timeout=60,  # ~10 s: a template load and two process starts
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == (
        "draftset: a worker process died while running the row step (killed, or out of memory?)"
    )


def test_manifest_records_the_engine_outside_the_set(tmp_path):
    src = tmp_path / "chats.jsonl"
    src.write_text(
        "".join(
            json.dumps({"messages": [conv(i, 5).messages[0], conv(i, 5).messages[1]]}) + "\n"
            for i in range(40)
        )
    )
    built = {}
    for workers in (1, 2):
        opts = BuildOptions(
            sources=[Source("chats", src)],
            tokenizer=str(qwen3_tokenizer_dir()),
            out=tmp_path / f"w{workers}",
            workers=workers,
        )
        built[workers] = run_build(opts)
    m1, m2 = (built[w].manifest for w in (1, 2))
    assert m1["engine"] == {"name": "inline", "workers": 1, "rows_read_by": "workers"}
    assert m2["engine"] == {"name": "local", "workers": 2, "rows_read_by": "workers"}
    assert m1["files"] == m2["files"]  # the set's bytes do not depend on the engine
    assert built[1].rows == built[2].rows == 40
    a = np.load(built[1].out / "token_freq.npy")
    assert (a == np.load(built[2].out / "token_freq.npy")).all()


def test_a_stopped_pool_leaves_nothing_running():
    """When `stop_pool` returns, the pool's processes are reaped and its manager thread is done
    (it closes the pool's pipes): at exit CPython 3.11 wakes that thread through one of them, and
    a thread still closing it printed "Exception ignored ... Bad file descriptor" under a
    usage error's one line; a child reaped by that thread could still be listed as running."""
    for _ in range(3):
        ex = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        running = ex.submit(time.sleep, 60)  # like the helper's import: busy when stopped
        manager = ex._executor_manager_thread  # type: ignore[attr-defined]
        processes = list(ex._processes.values())  # type: ignore[attr-defined]
        assert manager is not None and manager.is_alive() and len(processes) == 1
        stop_pool(ex)
        assert not manager.is_alive()
        assert all(p.exitcode is not None for p in processes)  # reaped, not just signalled
        assert not set(processes) & set(multiprocessing.active_children())
        assert running.done()


def test_pool_workers_use_the_tokenizers_threads_from_the_api_as_from_the_cli(monkeypatch):
    """The CLI sets TOKENIZERS_PARALLELISM=true before it spawns anything; the Python API sets
    nothing, and its pool workers used to fall back to one Rust thread each (`build(workers=2)`
    median 13.8 s against 11.4 s, docs/benchmarks.md "Session 9"). Now a pool worker uses the
    tokenizer's threads unless the user said otherwise, whoever started the build."""
    spec = TemplateSpec(str(qwen3_tokenizer_dir()), None, {}, ())
    opts = BuildOptions(sources=[], tokenizer=spec.tokenizer, out=None)  # type: ignore[arg-type]
    config = mask_config(opts, spec, describe_template(ChatTemplate(spec)))
    for given, seen in ((None, "true"), ("false", "false"), ("true", "true")):
        if given is None:
            monkeypatch.delenv("TOKENIZERS_PARALLELISM", raising=False)
        else:
            monkeypatch.setenv("TOKENIZERS_PARALLELISM", given)
        with LocalPoolEngine(1) as pool:
            pool.start(config)
            job = pool._pool.submit(os.getenv, "TOKENIZERS_PARALLELISM")  # type: ignore[attr-defined]
            assert job.result(timeout=60) == seen, given
            pool.finish()


def test_a_ray_actor_encodes_on_the_tokenizers_pool_with_one_thread(monkeypatch):
    """A Ray actor used to set TOKENIZERS_PARALLELISM=false: the Rust tokenizer's one-thread
    batch path, which costs 1.25x the CPU for the same ids of its pool path run on one
    thread (docs/benchmarks.md, "Session 13"). Now it takes the pool path, with one thread for
    the one CPU it asks Ray for; values the user set are kept."""
    from draftset.engine.ray import ACTOR_CPUS, _Worker

    assert ACTOR_CPUS == 1
    for given, seen in ((None, ("true", "1")), (("false", "4"), ("false", "4"))):
        for name in ("TOKENIZERS_PARALLELISM", "RAYON_NUM_THREADS"):
            monkeypatch.setenv(name, "x")  # recorded, so the test's own value comes back after
            monkeypatch.delenv(name)
        if given is not None:
            monkeypatch.setenv("TOKENIZERS_PARALLELISM", given[0])
            monkeypatch.setenv("RAYON_NUM_THREADS", given[1])
        _Worker()
        assert (os.environ["TOKENIZERS_PARALLELISM"], os.environ["RAYON_NUM_THREADS"]) == seen
