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
