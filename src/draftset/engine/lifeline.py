"""Child processes that never outlive the build that started them.

A worker or the helper process waits on a queue the main process feeds. When the main process
is killed (``kill -9``, out-of-memory killer) nobody closes that queue, so the children used to
wait for minutes (~0.6 GB with the resource tracker, which lives as long as any of them).
`die_with_parent` runs first in every child: on Linux the kernel sends it SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a thread polls the parent's pid. Children
also ignore Ctrl-C (SIGINT goes to the whole process group): the main process handles it and
stops them, so an interrupted build prints one line, not a traceback per worker.

Processes draftset does not start itself cannot be given that watch: a private Ray cluster's
raylet starts ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``, which outlived a killed
driver by minutes. `guard_descendants` starts a small watcher process that records the
driver's descendants every `GUARD_INTERVAL` s and, once the driver is gone (however it ended),
kills those still running (the same process: pid and start time). Linux only (``/proc``).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import resource_tracker
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Make this (child) process end when its parent process ends."""
    parent = multiprocessing.parent_process()
    ppid = parent.pid if parent is not None and parent.pid else os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not _kernel_watch():
        threading.Thread(target=_poll, args=(ppid,), name="draftset-lifeline", daemon=True).start()
    if os.getppid() != ppid:  # the parent died before the watch was set
        os._exit(1)


def _kernel_watch() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _poll(ppid: int) -> None:
    while os.getppid() == ppid:
        time.sleep(0.5)
    os._exit(1)


def quiet_resource_tracker() -> None:
    """Start multiprocessing's resource tracker with its stderr on ``/dev/null``.

    The pools' queues hold named semaphores. After a ``kill -9`` of the main process the
    tracker (which outlives it by design) unlinks them and warns ``resource_tracker: There
    appear to be N leaked semaphore objects`` on the terminal, often in the middle of the
    rerun's output: the cleanup is right, the warning alarms for nothing. Called before the
    first spawn-started pool; a tracker already running is left as it is.
    """
    tracker = resource_tracker._resource_tracker
    if getattr(tracker, "_fd", None) is not None:
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        resource_tracker.ensure_running()
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, 2)  # inherited by the tracker alone; restored at once
        finally:
            os.close(devnull)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


GUARD_INTERVAL = 0.5
"""Seconds between the watcher's looks at the driver's process tree."""


class DescendantGuard:
    """A watcher process: while the driver runs it records the driver's new descendants; when the
    driver ends (its pipe closes: killed or not) or `close` is called, it kills those still
    running. Start it before the processes it guards (a private Ray) and close it once they
    have been stopped: processes started after that are not its business."""

    def __init__(self) -> None:
        # the processes already there (the helper, multiprocessing's resource tracker) are
        # not guarded: they are the build's own, still needed after Ray has stopped
        before = [str(pid) for pid in _descendants(os.getpid())]
        cmd = [sys.executable, "-m", "draftset.engine.lifeline", str(os.getpid()), *before]
        # its own session: a Ctrl-C or a group kill aimed at the build does not end it first
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, start_new_session=True
        )

    def close(self) -> None:
        """Kill what is left of the guarded processes now, and let the watcher go."""
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(5)


def guard_descendants() -> DescendantGuard | None:
    """A `DescendantGuard` for this process (None where there is no ``/proc``)."""
    return DescendantGuard() if Path("/proc/self/stat").exists() else None


def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat), or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _running(pid: int) -> bool:
    """The process is there and not a zombie (a killed driver stays one until reaped)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        for kid in children.get(todo.pop(), ()):
            out.append(kid)
            todo.append(kid)
    return out


def _watch(driver: int, exempt: set[int]) -> None:
    """The watcher: remember the driver's descendants (but ``exempt``) until stdin closes;
    then end them."""
    import select  # lazy: only the watcher process waits on its pipe

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    me = os.getpid()
    known: dict[int, str] = {}
    while not select.select([sys.stdin], [], [], GUARD_INTERVAL)[0]:
        for pid in _descendants(driver):
            started = _start_time(pid)
            if pid != me and pid not in exempt and started is not None:
                known[pid] = started
        known = {pid: t for pid, t in known.items() if _start_time(pid) == t}
    for pid, started in known.items():
        if _start_time(pid) == started:  # the same process, not a new one with its pid
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    # a process started since the last look whose parent died with the driver (Ray's raylet
    # ends with it) has moved to init, out of the tree: found by the session folder it holds
    # (looked for again while it may still be starting, when the driver is gone; a `close`
    # waits for this watcher, so it looks once)
    driver_gone = not _running(driver)
    for wait in SWEEP_AFTER if driver_gone else SWEEP_AFTER[:1]:
        time.sleep(wait)
        for pid in _session_processes(driver, {me, driver, *exempt}):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


SWEEP_AFTER = (0.0, 0.5, 1.0)
"""Seconds before each look for the private Ray's stragglers once the driver is gone."""


def _session_processes(driver: int, spare: set[int]) -> list[int]:
    """Processes holding a file in the Ray session folder the driver started (Ray names it
    ``session_<date>_<time>_<driver pid>`` and every process it starts writes its log there),
    but ``spare`` (the driver itself holds some, and so may the build's own processes)."""
    mark = re.compile(rf"/session_[^/]*_{driver}/")
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spare:
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                if mark.search(os.readlink(fd)):
                    found.append(int(entry.name))
                    break
    return found


if __name__ == "__main__":
    _watch(int(sys.argv[1]), {int(pid) for pid in sys.argv[2:]})
