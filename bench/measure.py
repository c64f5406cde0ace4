"""Run one command as its own process and measure it: wall time and peak memory of its tree.

Memory is sampled from /proc over the process and all its descendants (workers, pools,
helpers): the peak of the summed RSS (``statm``, every ``interval`` seconds; double-counts
shared pages; what ``ps`` adds up) and the peak of the summed PSS (``smaps_rollup``: shared
pages split between the processes sharing them; read less often because it is costly, see
`TreeSampler`).
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Measured:
    seconds: float
    peak_pss: int  # bytes, peak of the sum over the tree
    peak_rss: int  # bytes, peak of the sum over the tree
    max_procs: int  # most processes seen in the tree at once
    cpu_seconds: float  # user + system of the tree (reaped descendants)
    other_busy_cores: float  # mean cores kept busy by everything else on the machine
    returncode: int
    stdout: str
    stderr: str
    measurer_cpu_seconds: float = 0.0  # CPU this process spent sampling (it competes too)
    # (seconds since start, PSS, RSS, processes), about one sample per second
    timeline: list[tuple[float, int, int, int]] = field(default_factory=list)

    def peak_at(self) -> float:
        """Seconds after start when the summed PSS peaked (from the timeline)."""
        return max(self.timeline, key=lambda s: s[1])[0] if self.timeline else 0.0


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name may hold spaces and parentheses: fields follow the last ')'
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(entry.name))
    return kids


def _children(pid: int) -> list[int] | None:
    """Direct children from /proc/PID/task/*/children (None when the kernel lacks the file)."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended
            return None
        except OSError:
            continue
    return kids


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants alive now."""
    kids_of = None
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        kids = _children(p) if kids_of is None else None
        if kids is None:  # no children files: one scan of /proc for the whole tree
            kids_of = kids_of or _children_map()
            kids = kids_of.get(p, [])
        todo.extend(kids)
    return out


def _pss(pid: int) -> int:
    """PSS of one process in bytes; 0 when it is gone.

    Costly: the kernel walks every page table of the process (~5 ms of CPU for a 200 MB
    process), so the sampler reads it at most every ``pss_interval``.
    """
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


PAGE = os.sysconf("SC_PAGE_SIZE")


def _statm_rss(pid: int) -> int:
    """RSS of one process in bytes from the kernel's counters (cheap: no page walk); 0 if gone."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


class TreeSampler:
    """Samples a process tree's summed RSS and PSS in a background thread until stopped.

    RSS (``/proc/PID/statm``, ~0.01 ms a process) every ``interval``; PSS (``smaps_rollup``,
    a page-table walk: ~25 ms of CPU for a 5-process build) every ``pss_interval``, and at
    once when the summed RSS has grown 2% past what it was at the last PSS read (at most every
    ``pss_interval / 4``), so a rising peak is caught. Reading PSS every 0.05 s, as this did
    before, took ~0.5 of this 2-core machine's cores from a 5-process build (6-7 CPU-s per
    26-s run) and far less from a 1-process one: the measurer slowed what it compared.
    """

    def __init__(self, pid: int, interval: float = 0.05, pss_interval: float = 1.0) -> None:
        self.pid = pid
        self.interval = interval
        self.pss_interval = pss_interval
        self.peak_pss = 0
        self.peak_rss = 0
        self.max_procs = 0
        self.timeline: list[tuple[float, int, int, int]] = []
        self._t0 = time.perf_counter()
        self._last_kept = -1.0
        self._last_pss_at = -1e9
        self._rss_at_pss = 0
        self._pss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def sample(self) -> None:
        pids = tree(self.pid)
        rss = sum(_statm_rss(p) for p in pids)
        now = time.perf_counter() - self._t0
        since = now - self._last_pss_at
        grown = rss > self._rss_at_pss * 1.02 and since >= self.pss_interval / 4
        if since >= self.pss_interval or grown:
            self._pss = sum(_pss(p) for p in pids)
            self._last_pss_at, self._rss_at_pss = now, rss
        pss = self._pss
        if pss > self.peak_pss or rss > self.peak_rss or now - self._last_kept >= 1.0:
            self.timeline.append((round(now, 2), pss, rss, len(pids)))  # peaks and ~1/s
            self._last_kept = now
        self.peak_pss = max(self.peak_pss, pss)
        self.peak_rss = max(self.peak_rss, rss)
        self.max_procs = max(self.max_procs, len(pids))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)


def run_measured(
    cmd: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    interval: float = 0.05,
) -> Measured:
    """Run ``cmd`` to completion; wall time from spawn to exit, memory of its whole tree."""
    full_env = {**os.environ, **(env or {})}
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self0 = resource.getrusage(resource.RUSAGE_SELF)
    busy0 = _busy_jiffies()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        env=full_env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    with TreeSampler(proc.pid, interval) as sampler:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    seconds = time.perf_counter() - t0
    busy1 = _busy_jiffies()
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    self1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    own = (self1.ru_utime + self1.ru_stime) - (self0.ru_utime + self0.ru_stime)
    machine = (busy1 - busy0) / os.sysconf("SC_CLK_TCK")
    others = max(0.0, (machine - cpu - own) / seconds)
    return Measured(
        seconds,
        sampler.peak_pss,
        sampler.peak_rss,
        sampler.max_procs,
        cpu,
        others,
        proc.returncode,
        out,
        err,
        own,
        sampler.timeline,
    )


def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    return sum(parts[:8]) - parts[3] - parts[4]  # all but idle and iowait (guest is in user)


def load_average() -> tuple[float, float, float]:
    with open("/proc/loadavg") as f:
        a, b, c = f.read().split()[:3]
    return float(a), float(b), float(c)


def busy_cores(seconds: float = 1.0) -> float:
    """Cores kept busy by *all* processes over ``seconds`` (from /proc/stat): the noise level."""

    def snap() -> tuple[int, int]:
        with open("/proc/stat") as f:
            parts = [int(x) for x in f.readline().split()[1:]]
        idle = parts[3] + parts[4]
        return sum(parts), idle

    t1, i1 = snap()
    time.sleep(seconds)
    t2, i2 = snap()
    total = t2 - t1
    return (os.cpu_count() or 1) * (1 - (i2 - i1) / total) if total else 0.0
