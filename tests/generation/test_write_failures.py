"""`draftset generate` when its own files cannot be written (a full disk, a quota, an I/O error).

The kernel's file-size limit (``RLIMIT_FSIZE``; Python ignores ``SIGXFSZ``) stands in for a full
disk: past the limit ``write`` writes what fits, then fails (``EFBIG``), as ``ENOSPC`` does.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))
from fault_server import FaultServer

from draftset.cli import main as cli_main

FAST = ["--backoff", "0.01", "--backoff-cap", "0.05", "--health-interval", "0.1", "--no-progress"]
_CHILD = "import sys; from draftset.cli import main; sys.exit(main(['generate', *sys.argv[1:]]))"


def _rows(path: Path, n: int) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"r{i}", "prompt": f"question {i} " + "x" * 200}) + "\n")
    return path


def _generate_limited(
    src: Path, out: Path, url: str, limit: int
) -> subprocess.CompletedProcess[str]:
    """`generate` in a child whose files may not grow past ``limit`` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = [str(src), "--out", str(out), "--endpoint", url, "--concurrency", "4", *FAST]
    return subprocess.run(
        [sys.executable, "-c", _CHILD, *args],
        preexec_fn=cap,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_disk_full_stops_with_one_line_and_no_torn_line_then_resumes(tmp_path: Path) -> None:
    src = _rows(tmp_path / "in.jsonl", 60)
    out = tmp_path / "answers.jsonl"
    with FaultServer() as srv:
        done = _generate_limited(src, out, srv.url, limit=8192)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last.startswith("draftset: stopped early: cannot write"), done.stderr
        assert "rerun the same command to resume" in last
        data = out.read_bytes()
        assert 0 < len(data) <= 8192
        assert data.endswith(b"\n"), "a half-written answer line was left behind"
        kept = [json.loads(line) for line in data.splitlines()]  # every line whole
        assert 0 < len(kept) < 60
        run = json.loads(out.with_name("answers.run.json").read_text(encoding="utf-8"))
        assert run["finished"] is False
        # room again: the rerun answers the rest, each row exactly once
        argv = ["generate", str(src), "--out", str(out), "--endpoint", srv.url, *FAST]
        assert cli_main(argv) == 0
    ids = [json.loads(line)["id"] for line in out.read_bytes().splitlines()]
    assert sorted(ids) == sorted(f"r{i}" for i in range(60))
    errors = out.with_name("answers.errors.jsonl")
    assert not errors.exists() or not errors.read_bytes()


def test_disk_full_at_start_is_one_line_before_any_request(tmp_path: Path) -> None:
    """No room at all (the run file cannot be written): a traceback from the lock's or the
    run file's write, exit 1. Now one line naming the file, before any request."""
    src = _rows(tmp_path / "in.jsonl", 3)
    out = tmp_path / "answers.jsonl"
    with FaultServer() as srv:
        done = _generate_limited(src, out, srv.url, limit=0)
        assert not srv.requests
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"draftset: cannot write {out.with_name('answers.run.json')}:"), last
    assert "rerun the same command" in last
