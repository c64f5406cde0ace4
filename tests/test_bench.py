"""The benchmark scripts themselves: they must run on a fresh machine and their data must be
what docs/benchmarks.md says it is (the figures are only as good as the data behind them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO


def test_quick_check_runs_on_a_fresh_machine(tmp_path):
    """`bench/run.py --only limit` with no cache folder yet (issue 13, item 4)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "fresh")}
    out = tmp_path / "result.json"
    cmd = [sys.executable, str(REPO / "bench" / "run.py"), "--rows", "12", "--only", "limit"]
    cmd += ["--check-rows", "12", "--json", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(out.read_text())
    (limit,) = report["results"]
    assert limit["name"] == "limit" and limit["error"] is None
    assert limit["info"]["rows"] == 12


def test_rounds_alternate_their_order():
    """Each run is measured first as often as last (a drifting machine favours none)."""
    sys.path.insert(0, str(REPO / "bench"))
    from run import Plan, round_order

    plans = [Plan(n, "limit", 2, [], REPO, {}) for n in ("limit", "limit-fast", "draftset-w2")]
    orders = [[p.name for p in round_order(plans, r)] for r in range(4)]
    assert orders[0] == orders[2] == ["limit", "limit-fast", "draftset-w2"]
    assert orders[1] == orders[3] == ["draftset-w2", "limit-fast", "limit"]
    firsts = [o[0] for o in orders]
    assert firsts.count("limit") == firsts.count("draftset-w2") == 2


def test_mix_rows_are_the_users_mix():
    """`--data mix`: every kind present, tool traces well-formed, no row over 4,000 tokens."""
    sys.path.insert(0, str(REPO / "bench"))
    import data as bench_data
    from conftest import qwen3_tokenizer_dir, trl_template

    from draftset.mask.template import ChatTemplate, TemplateSpec

    text = trl_template("qwen3_6").read_text()
    rows = list(bench_data.generate_mix(60, qwen3_tokenizer_dir(), text, seed=3))
    assert rows == list(bench_data.generate_mix(60, qwen3_tokenizer_dir(), text, seed=3))
    assert {r["kind"] for r in rows} == {k for k, _ in bench_data.MIX_KINDS}
    assert 0 < sum(r["messages"][0]["role"] == "system" for r in rows) < 30
    tmpl = ChatTemplate(TemplateSpec(str(qwen3_tokenizer_dir()), text))
    for r in rows:
        msgs = r["messages"]
        assert msgs[-1]["role"] == "assistant"
        rendered = tmpl.render(msgs, r.get("tools"))
        assert len(tmpl.backend.encode(rendered, add_special_tokens=False).ids) <= 4000
        if r["kind"] == "agent":
            assert r["tools"] and any(m.get("tool_calls") for m in msgs)
            for i, m in enumerate(msgs):
                if m.get("tool_calls"):
                    assert msgs[i + 1]["role"] == "tool"
        if r["kind"] == "reasoning":
            assert all(m.get("reasoning_content") for m in msgs if m["role"] == "assistant")


def test_sampler_finds_the_peaks_of_a_whole_tree():
    """bench/measure.py: the peak RSS and PSS of a parent and its child (the child holds
    200 MB for 0.4 s, then frees it), though PSS is read only every second unless RSS grows."""
    sys.path.insert(0, str(REPO / "bench"))
    import measure

    child = (
        "import time; b = bytearray(200 * 2**20); b[::4096] = b'x' * len(b[::4096]);"
        " time.sleep(0.4); del b; time.sleep(1.0)"
    )
    parent = f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])"
    m = measure.run_measured([sys.executable, "-c", parent], interval=0.05)
    assert m.returncode == 0, m.stderr
    assert m.max_procs == 2
    assert m.peak_rss >= 200 * 2**20
    assert m.peak_pss >= 190 * 2**20  # the child's pages are its own: PSS close to RSS
    assert m.measurer_cpu_seconds >= 0


def test_tokenizer_paths_compares_the_two_batch_paths_on_the_same_ids(tmp_path):
    """`bench/tokenizer_paths.py` runs on a fresh machine, measures both paths every round and
    asserts they give the same ids (its figure is docs/benchmarks.md's "Session 13")."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "fresh")}
    cmd = [sys.executable, str(REPO / "bench" / "tokenizer_paths.py"), "--rows", "16"]
    r = subprocess.run(
        [*cmd, "--rounds", "2"], env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("round ") == 2
    assert "one-thread path (false)" in r.stdout and "same ids" in r.stdout


def test_timeline_builds_and_names_each_process(tmp_path):
    """`bench/timeline.py` runs its build to the end on a fresh machine (it once lacked the
    stop tokens the wheel's tokenizer folder does not name, and every run failed)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "fresh")}
    cmd = [sys.executable, str(REPO / "bench" / "timeline.py"), "--rows", "40", "--workers", "2"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    assert "| main |" in r.stdout and "| helper |" in r.stdout
    assert "cores busy per second" in r.stdout


def _bench_profile():
    """bench/profile.py by its path: ``import profile`` may give the standard library's."""
    import importlib.util

    sys.path.insert(0, str(REPO / "bench"))  # its own imports (data, peers, run)
    spec = importlib.util.spec_from_file_location("bench_profile", REPO / "bench" / "profile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_profile_stages_name_functions_that_exist():
    """bench/profile.py attributes samples by function name: every name in its table is a
    draftset function or method (a rename would silently move its time to another stage, as
    the workers' reading once showed as "wait for work")."""
    import ast

    bench_profile = _bench_profile()
    defined: set[str] = set()
    for path in (REPO / "src" / "draftset").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.add(node.name)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        defined.add(f"{node.name}.{item.name}")
    missing = [
        needle
        for needle, _ in bench_profile.STAGES
        if needle not in bench_profile.STDLIB_NEEDLES and needle not in defined
    ]
    assert missing == []


def test_profile_attributes_a_stack_to_its_deepest_stage():
    """A worker reading its range is reading, not waiting; an import inside the template load
    is the template load's."""
    bench_profile = _bench_profile()

    def frames(*names: str) -> list[str]:
        return [f"{n} (draftset/x.py:1)" for n in names]

    read = frames("_process_worker", "process_batch", "BlockRunner.__call__", "Readers.scan")
    assert bench_profile.classify(read) == "read + facts (first pass)"
    waiting = frames("_process_worker", "Queue.get")
    assert bench_profile.classify(waiting) == "worker: wait for work / pickle"
    load = frames("load_and_keep", "ChatTemplate.__init__", "_find_and_load")
    assert bench_profile.classify(load) == "tokenizer + template load"
    step = frames("BlockRunner._write", "MaskStep.process", "plan_conversation", "Renderer.render")
    assert bench_profile.classify(step) == "render (Jinja)"
    helper = frames("_process_worker", "import_tokenizer_loader", "_handle_fromlist")
    assert bench_profile.classify(helper) == "imports"  # not waiting: importing torch
    unpickle = frames("_process_worker", "Queue.get", "_find_and_load")
    assert bench_profile.classify(unpickle) == "imports"
