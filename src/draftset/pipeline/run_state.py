"""`draftset run`'s state: its options and result, ``<work>/state.json`` (settings, finished
stages, every attempt with its outcome), and the files a run owns (what ``--restart`` removes)."""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.config.schema import GenerateSection
from draftset.core.errors import RunError, UsageError
from draftset.core.files import write_json_atomic

if TYPE_CHECKING:  # build's modules load when a run starts, not for `draftset --help`
    from draftset.config.options import BuildOptions


STAGES = ("select", "generate", "build", "verify", "report")
STATE_FORMAT = "draftset-run/1"
KILL_ENV = "DRAFTSET_RUN_KILL_AT"
"""Testing hook: ``SIGKILL`` this process in the middle of the named stage (crash tests)."""


class RunUsageError(UsageError):
    """Unusable recipe or arguments, or a rerun whose settings changed: exit code 2."""


class RunFailed(RunError):
    """The run stopped (no endpoint, stopped early): exit 1; rerun to resume."""


@dataclass
class RunOptions:
    build: BuildOptions
    generate: GenerateSection
    work: Path | None = None  # default: <out>.run beside the output folder
    restart: bool = False
    retry_errors: bool = False  # ask again the rows generate failed for a passing reason
    progress: bool = False
    speculators: bool = True  # verify's speculators-loader check
    render_server: str | None = None  # recipe `verify: {render_server: URL}` (checks/serving.py)

    @property
    def work_dir(self) -> Path:
        out = self.build.out
        return self.work or out.parent / f"{out.name}.run"


@dataclass
class RunResult:
    out: Path
    work: Path
    passed: bool
    state: dict[str, Any]
    report: Path | None = None
    resumed: list[str] = field(default_factory=list)  # stages already done at start

    @property
    def ok(self) -> bool:
        """What `draftset run` exits 0 on: verify passed."""
        return self.passed


class RunState:
    """``<work>/state.json``: settings, model, finished stages, timings; saved atomically."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def new(cls, path: Path, settings: dict[str, Any]) -> RunState:
        return cls(path, {"format": STATE_FORMAT, "settings": settings, "done": [], "seconds": {}})

    @property
    def done(self) -> list[str]:
        return self.data["done"]

    def finish(self, stage: str, **facts: Any) -> None:
        self.data.update(facts)
        if stage not in self.done:
            self.done.append(stage)
        self.save()

    def add_seconds(self, stage: str, seconds: float) -> None:
        self.data["seconds"][stage] = round(self.data["seconds"].get(stage, 0.0) + seconds, 3)

    def begin(self, stage: str) -> dict[str, Any]:
        """Record an attempt at ``stage`` before it runs: a ``kill -9`` leaves it ``running``,
        and the next run marks it ``killed`` (`close_killed`), so the timeline keeps it."""
        attempt = {"stage": stage, "started": time.time(), "pid": os.getpid()}
        attempt["outcome"] = "running"
        self.data.setdefault("attempts", []).append(attempt)
        self.save()
        return attempt

    def end(self, attempt: dict[str, Any], outcome: str, seconds: float) -> None:
        attempt.update(outcome=outcome, seconds=round(seconds, 3))
        self.add_seconds(attempt["stage"], seconds)
        self.save()

    def close_killed(self) -> None:
        """Attempts left ``running`` by a process that is gone were killed (``kill -9``, power
        loss): no end was recorded, so their length is unknown; ``noticed`` is when the next
        run found them."""
        now = time.time()
        for attempt in self.data.get("attempts") or []:
            if attempt.get("outcome") == "running" and not _alive(attempt.get("pid")):
                attempt["outcome"] = "killed"
                attempt["noticed"] = now

    def save(self) -> None:
        write_json_atomic(self.path, self.data)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def format_timeline(attempts: list[dict[str, Any]]) -> str:
    """``select 16.7s, build killed then 34.9s, ...``: every attempt at every stage."""
    parts = []
    for stage in STAGES:
        mine = [a for a in attempts if a.get("stage") == stage]
        if not mine:
            continue
        words = []
        for a in mine:
            outcome = a.get("outcome")
            if outcome == "done":
                words.append(f"{a.get('seconds', 0.0):.1f}s")
            elif outcome == "killed":
                words.append("killed")
            elif outcome == "running":
                words.append("running")
            else:
                words.append(f"{outcome} after {a.get('seconds', 0.0):.1f}s")
        parts.append(f"{stage} " + " then ".join(words))
    return ", ".join(parts)


# files `run` writes in its work folder (and the only ones --restart removes)
RUN_LOCK = "run.lock"
"""`draftset run`'s lock in its work folder (flock, held while it runs; left in place, it holds
no state, and never removed: a --restart deleting it under a waiting run would let two in)."""

LOCK_FILES = frozenset({RUN_LOCK, "answers.lock"})
"""The locks in a work folder (`run`'s, and its generate stage's beside ``answers.jsonl``):
a folder holding nothing else holds no run."""

WORK_FILES = (
    "state.json",
    "state.json.tmp",
    "queue.jsonl",
    "queue.jsonl.tmp",
    "too_long.jsonl",
    "too_long.jsonl.tmp",
    "answers.jsonl",
    "answers.errors.jsonl",
    "answers.errors.jsonl.tmp",
    "answers.run.json",  # generate's record of its settings and model
)
"""What --restart removes. Never a lock (`answers.lock`, `run.lock`): deleting one under its
holder would let a second writer in beside it."""


def our_output(opts: RunOptions) -> bool:
    """The output folder exists and was built by this run (its manifest names our work folder)."""
    manifest = opts.build.out / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        run = json.loads(manifest.read_text(encoding="utf-8")).get("run") or {}
    except ValueError:
        return False
    return run.get("work") == str(opts.work_dir.resolve())


def report_path(out: Path) -> Path:
    return out.parent / f"{out.name}-report.html"


def maybe_die(stage: str) -> None:
    """The crash tests' hook: ``kill -9`` ourselves in the middle of ``stage``."""
    if os.environ.get(KILL_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)
