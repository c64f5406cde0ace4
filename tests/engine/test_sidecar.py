"""The build's helper process: jobs keep state, a dead helper is an error and never a hang."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import qwen3_tokenizer_dir

from draftset.engine.helper import Sidecar, SidecarError, release_memory
from draftset.mask.template import TemplateSpec, load_template_info
from draftset.output.vocab import load_token_freq_pt, save_token_freq_pt


def test_jobs_run_in_one_process_in_order():
    with Sidecar() as side:
        first = side.call("asking", os.getpid)
        assert first != os.getpid()
        assert side.call("asking again", os.getpid) == first  # the same child, kept alive


def _leave_a_mark_at_exit(path: str) -> int:
    """Runs in the helper: its interpreter's teardown would write ``path``."""
    import atexit

    atexit.register(lambda: open(path, "w").close())
    return os.getpid()


def test_after_a_success_the_helper_is_stopped_not_left_to_tear_down(tmp_path):
    """The driver does not wait for the helper's interpreter (and torch) to tear down: once
    every result is in, the helper is stopped; its atexit handlers never run."""
    mark = tmp_path / "torn-down"
    with Sidecar() as side:
        pid = side.call("marking", _leave_a_mark_at_exit, str(mark))
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone (and reaped) when the block ends
    assert not mark.exists()


def test_the_helper_is_stopped_before_it_can_read_its_exit_sentinel(tmp_path, monkeypatch):
    """`stop_pool` sent the exit sentinel (shutdown) before the SIGTERM: a helper that read it
    first exited normally and ran its atexit handlers (a flaky failure of the test above). The
    gap is widened here: a shutdown that lets the helper run for a moment after it."""
    import time
    from concurrent.futures import ProcessPoolExecutor

    real_shutdown = ProcessPoolExecutor.shutdown

    def shutdown_then_let_it_run(self, wait=True, *, cancel_futures=False):
        real_shutdown(self, wait=False, cancel_futures=cancel_futures)
        time.sleep(1.5)
        if wait:
            real_shutdown(self, wait=True)

    monkeypatch.setattr(ProcessPoolExecutor, "shutdown", shutdown_then_let_it_run)
    mark = tmp_path / "torn-down"
    with Sidecar() as side:
        side.call("marking", _leave_a_mark_at_exit, str(mark))
    assert not mark.exists()


def test_a_dying_helper_raises_instead_of_hanging():
    with Sidecar() as side, pytest.raises(SidecarError, match="died while exiting on purpose"):
        side.call("exiting on purpose", os._exit, 3)


def test_a_job_asked_of_a_dead_helper_is_named_as_the_caller_named_it():
    """Once the helper is dead, a new job failed at its submission and was named by its
    function: a Ray build whose helper was killed ended "died while running
    save_token_freq_pt", a local one "while running process_batch"; now as the caller says."""
    with Sidecar() as side:
        with pytest.raises(SidecarError, match="died while exiting on purpose"):
            side.call("exiting on purpose", os._exit, 3)
        with pytest.raises(SidecarError) as caught:
            side.call("writing token_freq.pt", os.getpid)
    assert str(caught.value) == (
        "the helper process died while writing token_freq.pt (killed, or out of memory?)"
    )


def test_job_exceptions_come_back_as_they_are():
    with Sidecar() as side, pytest.raises(ValueError, match="invalid literal"):
        side.call("parsing", int, "not a number")


def test_load_release_and_pt_round_trip_in_the_helper(tmp_path):
    """Jobs run one after another in one process, their state kept: a template load, a
    release, a file written there and read back there and here."""
    spec = TemplateSpec(str(qwen3_tokenizer_dir()))
    with Sidecar() as side:
        loaded = side.call("loading", load_template_info, spec, None)
        side.call("releasing", release_memory)
        ids = np.array([3, 7, 151643], dtype=np.int64)
        counts = np.array([5, 1, 9], dtype=np.int64)
        assert side.call("writing", save_token_freq_pt, tmp_path / "f.pt", ids, counts) is None
        assert side.call("reading", load_token_freq_pt, tmp_path / "f.pt") == {
            3: 5,
            7: 1,
            151643: 9,
        }
    assert loaded == load_template_info(spec)
    assert load_token_freq_pt(tmp_path / "f.pt") == {3: 5, 7: 1, 151643: 9}  # and here


def test_worker_module_stays_lean():
    """Workers import draftset.mask.step only: no pyarrow, no torch (each worker ~35 MB smaller)."""
    code = "import sys, draftset.mask.step; print(sorted({'pyarrow', 'torch'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_script_read_from_standard_input_is_told_why_workers_cannot_start(tmp_path):
    """``python - <<EOF`` with worker processes: the spawned helper tried to re-import
    ``<stdin>`` as a file and died; the caller said "killed, or out of memory?". It is neither:
    one line says what to do (a file, or workers=1; ``python -c`` has no file and works)."""
    code = (
        "from draftset.engine.helper import Sidecar\n"
        "import os\n"
        "with Sidecar() as side:\n"
        "    print(side.call('asking', os.getpid))\n"
    )
    p = subprocess.run(
        [sys.executable, "-"],
        input=code,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert p.returncode == 1
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("draftset.engine.helper.SidecarError:"), p.stderr[-2000:]
    assert "standard input" in last and "workers=1" in last, last
    assert "out of memory" not in p.stderr
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr[-2000:]
