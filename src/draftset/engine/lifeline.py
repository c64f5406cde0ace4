"""Child processes that never outlive the build that started them.

A worker or the helper process waits on a queue the main process feeds. When the main process
is killed (``kill -9``, out-of-memory killer) nobody closes that queue, so the children used to
wait for minutes (~0.6 GB with the resource tracker, which lives as long as any of them).
`die_with_parent` runs first in every child: on Linux the kernel sends it SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere a thread polls the parent's pid. Children
also ignore Ctrl-C (SIGINT goes to the whole process group): the main process handles it and
stops them, so an interrupted build prints one line, not a traceback per worker.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time

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
    from multiprocessing import resource_tracker

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
