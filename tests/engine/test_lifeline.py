"""A killed or terminated build leaves no process and (after the next run) no folder behind.

Real subprocesses: `draftset build --workers 2` (the helper, which is one of the two workers,
one pool worker, multiprocessing's resource tracker), killed with SIGKILL or SIGTERM while all
of them are up.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from conftest import REPO, qwen3_tokenizer_dir

from draftset.engine.lifeline import _running, _session_processes
from draftset.output.folder import TMP_MARKER, prepare_output, remove_stale_tmp


def start_build(tmp_path: Path, script: Path | None = None) -> tuple[subprocess.Popen, Path]:
    src = tmp_path / "a.jsonl"
    with src.open("w") as f:
        for i in range(3000):
            row = {
                "id": f"c{i}",
                "messages": [
                    {"role": "user", "content": f"Question {i}?"},
                    {"role": "assistant", "content": f"Answer {i}."},
                ],
            }
            f.write(json.dumps(row) + "\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    entry = [str(script)] if script else ["-m", "draftset.cli"]
    cmd = [sys.executable, *entry, "build", str(src)]
    cmd += ["--tokenizer", str(qwen3_tokenizer_dir()), "--out", str(out), "--workers", "2"]
    # output to files, not pipes: a surviving child would hold a pipe open (and the test)
    with (tmp_path / "stdout").open("wb") as o, (tmp_path / "stderr").open("wb") as e:
        proc = subprocess.Popen([*cmd, "--no-progress"], env=env, stdout=o, stderr=e)
    return proc, out


def tmp_folders(out: Path) -> list[Path]:
    return [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.draftset-tmp-")]


def wait_for_children(proc: subprocess.Popen, out: Path, n: int = 3) -> list[psutil.Process]:
    """All of them: the helper, the pool worker, the resource tracker; and the temp folder."""
    main = psutil.Process(proc.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        kids = main.children(recursive=True)
        if len(kids) >= n and tmp_folders(out):
            return kids
        assert proc.poll() is None, (out.parent / "stderr").read_text()
        time.sleep(0.1)
    raise AssertionError(f"only {main.children(recursive=True)} started")


def survivors(kids: list[psutil.Process], seconds: float = 10) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(kids, timeout=seconds)
    return [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]


def test_kill_9_leaves_no_process_and_the_next_run_removes_the_folder(tmp_path):
    proc, out = start_build(tmp_path)
    try:
        kids = wait_for_children(proc, out)
        names = sorted(" ".join(p.cmdline())[-60:] for p in kids)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert survivors(kids) == [], names
        # the resource tracker unlinks the semaphores quietly: no alarming warning in the
        # terminal (where it used to land in the middle of the rerun's output)
        assert "leaked semaphore" not in (tmp_path / "stderr").read_text()
    finally:
        proc.kill()
        proc.wait()
    (left,) = tmp_folders(out)  # a killed run cannot clean up after itself ...
    assert (left / TMP_MARKER).exists()
    new = prepare_output(out, overwrite=False)  # ... the next run on the same --out does
    assert tmp_folders(out) == [new] and not left.exists()


def test_sigterm_is_a_clean_interrupt(tmp_path):
    proc, out = start_build(tmp_path)
    try:
        kids = wait_for_children(proc, out)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 143
        err = (tmp_path / "stderr").read_text().strip().splitlines()
        assert err == ["draftset: terminated; nothing was finalized"]
        assert survivors(kids) == []
    finally:
        proc.kill()
        proc.wait()
    assert tmp_folders(out) == [] and not out.exists()


def test_only_draftset_leftovers_are_removed(tmp_path):
    out = tmp_path / "out"
    dead = _dead_pid()

    def leftover(name: str, owner: dict | None) -> Path:
        p = tmp_path / name
        p.mkdir()
        (p / "data.bin").write_text("x")
        if owner is not None:
            (p / TMP_MARKER).write_text(json.dumps(owner))
        return p

    import socket

    me = {"host": socket.gethostname(), "out": str(out.resolve())}
    stale = leftover(f".out.draftset-tmp-{dead}", {**me, "pid": dead})
    keep = [
        leftover(f".out.draftset-tmp-{dead + 1}", None),  # no marker: not recognisably ours
        leftover(f".out.draftset-tmp-{dead}x", {**me, "pid": dead}),  # not the name
        leftover(f".other.draftset-tmp-{dead}", {**me, "pid": dead}),  # another --out
        leftover(f".out.draftset-tmp-{os.getppid()}", {**me, "pid": os.getppid()}),  # running
        leftover(f".out.draftset-tmp-{dead + 2}", {**me, "pid": dead + 2, "host": "elsewhere"}),
        leftover(f".out.draftset-tmp-{dead + 3}", {**me, "pid": dead + 4}),  # name != marker
        leftover("mine", {**me, "pid": dead}),
    ]
    link = tmp_path / f".out.draftset-tmp-{dead + 5}"
    link.symlink_to(stale)
    assert remove_stale_tmp(out) == [stale]
    assert not stale.exists()
    assert all((p / "data.bin").exists() for p in keep)
    assert link.is_symlink()


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


# A pool thread that never ends, where concurrent.futures' exit hook (which joins its pools'
# threads, without a timeout) found one in 3 of 17 SIGTERMed `--workers 2` builds: the build
# printed its line and never exited, until kill -9.
_STUCK_AT_EXIT = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
from draftset.cli import main
if __name__ == "__main__":
    ThreadPoolExecutor(1).submit(threading.Event().wait)
    sys.exit(main())
"""


def test_sigterm_always_ends_the_process_promptly(tmp_path):
    """SIGTERM at varying moments, each time with a thread stuck at exit: the process ends
    within a bound, exit 143, and nothing it leaves looks finished."""
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK_AT_EXIT)
    for k, delay in enumerate((1.5, 4.0, 8.0, None)):
        trial = tmp_path / f"t{k}"
        trial.mkdir()
        proc, out = start_build(trial, script)
        try:
            if delay is None:  # once every process is up and rows are flowing
                wait_for_children(proc, out)
            else:
                time.sleep(delay)
            if proc.poll() is not None:
                continue  # finished before the signal: nothing to test this time
            proc.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            try:
                rc = proc.wait(45)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"still running 45 s after SIGTERM (at {delay} s)") from None
            took = time.monotonic() - t0
            # before the handler is installed (still importing) SIGTERM's default ends it
            assert rc in (143, -signal.SIGTERM), (rc, (trial / "stderr").read_text())
        finally:
            proc.kill()
            proc.wait()
        assert tmp_folders(out) == [], (delay, took)
        if (out / "manifest.json").exists():
            # the build had renamed its set into place when the signal came (a quick machine
            # finishes within 8 s): then the set must be whole, never a half-written one
            from draftset.checks.verify import fast_checks
            from draftset.pipeline.build import ADVISORY_CHECKS

            failed = [c.name for c in fast_checks(out) if c.failed]
            assert not set(failed) - ADVISORY_CHECKS, (delay, took, failed)


def test_kill_9_while_workers_write_their_shards_leaves_nothing_finished(tmp_path):
    """The workers write the shards (issue 27): kill -9 of the driver once a worker has begun
    its block's shard leaves no process, no output folder and a temporary folder that holds no
    manifest; the rerun removes it and builds the whole set."""
    proc, out = start_build(tmp_path)
    try:
        kids = wait_for_children(proc, out)
        deadline = time.monotonic() + 120
        while not any(p.glob("*.arrow.part") for p in tmp_folders(out)):
            assert proc.poll() is None, (tmp_path / "stderr").read_text()
            assert time.monotonic() < deadline, "no worker began a shard"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert survivors(kids) == []
    finally:
        proc.kill()
        proc.wait()
    (left,) = tmp_folders(out)
    assert (left / TMP_MARKER).exists() and not (left / "manifest.json").exists()
    assert not out.exists()
    again, _ = start_build(tmp_path)
    assert again.wait(300) == 0, (tmp_path / "stderr").read_text()
    assert tmp_folders(out) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["total"]["written"] == 3000
    assert sorted(p.name for p in out.glob("*.arrow")) == [
        f"data-{i:05d}-of-00003.arrow"
        for i in range(3)  # one shard per block of 1,024 rows
    ]


def test_the_guard_finds_a_private_ray_s_stragglers_by_their_session_folder(tmp_path):
    """A process Ray started in the last half second before the driver died, whose parent
    (the raylet) died with the driver, is no longer below it: the guard finds it by the file
    it holds in the session folder Ray names after the driver's pid, and only such ones."""
    driver = 4_000_000  # no such process: only its number is in the folder's name
    ours = tmp_path / f"session_2026-12-02_10-00-00_123_{driver}" / "logs"
    other = tmp_path / f"session_2026-12-02_10-00-00_123_{driver}1" / "logs"
    procs = []
    for folder in (ours, other):
        folder.mkdir(parents=True)
        log = folder / "worker.out"
        code = f"import time; f = open({str(log)!r}, 'w'); time.sleep(60)"
        procs.append(subprocess.Popen([sys.executable, "-c", code]))
    try:
        deadline = time.monotonic() + 20
        while not _session_processes(driver, {os.getpid()}):
            assert time.monotonic() < deadline, "the straggler's file never showed"
            time.sleep(0.05)
        assert _session_processes(driver, {os.getpid()}) == [procs[0].pid]
        assert _session_processes(driver, {os.getpid(), procs[0].pid}) == []  # spared
        assert _running(os.getpid()) and not _running(driver)
    finally:
        for p in procs:
            p.kill()
            p.wait()
