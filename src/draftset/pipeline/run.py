"""`draftset run RECIPE.yaml`: raw rows to a verified set, answers from the target, resumable.

Stages, each recorded in ``<work>/state.json`` when finished (``<work>`` defaults to
``<out>.run/`` beside the output folder):

1. **select** — read, normalize, presets, dedup, decontaminate, mix exactly as `build` does, and
   decide which rows need an answer: prompt-only rows, rows whose every answer is a placeholder
   (those turns are dropped: the row becomes a prompt), and with ``regenerate:
   missing_reasoning`` / ``all`` rows without reasoning under a thinking template / every row.
   A prompt that alone leaves no room under ``max_length`` is rejected ``too_long`` here and
   never sent. Writes ``queue.jsonl`` and ``too_long.jsonl``.
2. **generate** — `draftset generate`'s own job over the queue (routing, retries, exactly once
   by id, resume after ``kill -9``) into ``answers.jsonl`` / ``answers.errors.jsonl``.
3. **build** — `build` again over the user's sources with the answers as an overlay
   (`draftset.sources.overlay`): answered rows rejoin their rows by id, keeping source, row and
   id; a
   generation error becomes that row's reject with its reason.
4. **verify** — every check of `draftset verify` (the overlay files are re-read and hashed).
5. **report** — the HTML report beside the set.

A rerun of the same command resumes at the first unfinished stage (answered rows are never
requested again); a rerun with another recipe, other inputs or other generation settings
(including the model the servers serve) is refused naming what changed, unless ``--restart``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from draftset.checks.verify import print_results, run_verify
from draftset.console import progress_bar, unread_fields_notes
from draftset.core import reasons
from draftset.core.errors import EXIT_FAIL, EXIT_OK, RunError, UsageError
from draftset.core.files import write_json_atomic
from draftset.core.records import Conversation, PromptOnly
from draftset.core.terminal import visible
from draftset.core.words import plural
from draftset.generation.console import progress
from draftset.generation.http import concurrency_problem
from draftset.generation.job import (
    RESERVED_BODY_KEYS,
    GenerateOptions,
    GenerateUsageError,
    Unreachable,
    api_key_from_env,
    run_generate,
    special_tokens_of,
)
from draftset.generation.store import errors_path, recover
from draftset.mask.hygiene import (
    EmptyThinkProbe,
    all_placeholder_answers,
    lacks_reasoning,
    row_kwargs_key,
)
from draftset.mask.limits import RenderLimit, bounded_row
from draftset.mask.template import (
    ChatTemplate,
    _resolve_tokenizer_path,
    tokenizer_files_fingerprint,
)
from draftset.output.folder import remove_stale_tmp
from draftset.review.report import write_report
from draftset.sources.read import HUB_PREFIX, Source, describe_inputs
from draftset.sources.shapes import check_row_shapes

if TYPE_CHECKING:  # build's modules load when a run starts, not for `draftset --help`
    from draftset.config.options import BuildOptions

STAGES = ("select", "generate", "build", "verify", "report")
STATE_FORMAT = "draftset-run/1"
REGENERATE = ("missing", "missing_reasoning", "all")
# why a row was queued (the run's summary and the manifest's `run` section)
Q_PROMPT = "prompt_only"
Q_PLACEHOLDER = reasons.TURN_PLACEHOLDER  # "placeholder_answer"
Q_MISSING_REASONING = "missing_reasoning"
Q_ALL = "regenerate_all"
GENERATE_KEYS = {
    "endpoints",
    "model",
    "api_key_env",
    "thinking",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "extra_body",
    "concurrency",
    "request_timeout",
    "max_retries",
    "regenerate",
    "return_token_ids",
}
# settings that never change an answer: a rerun may change them freely
_FREE_GENERATE_KEYS = {
    "endpoints",
    "api_key_env",
    "concurrency",
    "request_timeout",
    "max_retries",
}
KILL_ENV = "DRAFTSET_RUN_KILL_AT"
"""Testing hook: ``SIGKILL`` this process in the middle of the named stage (crash tests)."""


class RunUsageError(UsageError):
    """Unusable recipe or arguments, or a rerun whose settings changed: exit code 2."""


class RunFailed(RunError):
    """The run stopped (no endpoint, stopped early): exit 1; rerun to resume."""


@dataclass
class GenerateSettings:
    """The recipe's ``generate:`` section (names as `draftset generate`'s options)."""

    endpoints: list[str]
    model: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    thinking: str | None = None  # on | off | mix:F (default: the template kwargs', else on)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 16
    request_timeout: float = 600.0
    max_retries: int = 6
    regenerate: str = "missing"
    return_token_ids: bool = False


@dataclass
class RunOptions:
    build: BuildOptions
    generate: GenerateSettings
    work: Path | None = None  # default: <out>.run beside the output folder
    restart: bool = False
    progress: bool = False
    speculators: bool = True  # verify's speculators-loader check
    echo: bool = True  # print verify's check lines (the command); the Python API prints nothing
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


# --- settings and state -----------------------------------------------------------------------
def _generate_options(opts: RunOptions, out: Path, model: str | None) -> Any:
    """`draftset generate`'s options for the queue (keyword arguments only)."""
    g = opts.generate
    kwargs, thinking = _split_thinking(opts.build.template_kwargs, g.thinking)
    return GenerateOptions(
        sources=[Source(name="queue", path=out.parent / "queue.jsonl")],
        endpoints=list(g.endpoints),
        out=out,
        model=model,
        # the recipe's variable, else DRAFTSET_API_KEY / OPENAI_API_KEY as `generate` reads them
        api_key=os.environ.get(g.api_key_env) or api_key_from_env(),
        concurrency=g.concurrency,
        request_timeout=g.request_timeout,
        max_retries=g.max_retries,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=g.top_k,
        max_tokens=g.max_tokens,
        seed=g.seed,
        extra_body=dict(g.extra_body),
        chat_template_kwargs=kwargs,
        thinking=thinking,
        return_token_ids=g.return_token_ids,
        # a stop token the server leaks as text is cut, counted (docs/generate.md)
        special_tokens=special_tokens_of(opts.build.tokenizer, strict=False),
    )


def _split_thinking(template_kwargs: dict[str, Any], thinking: str | None) -> tuple[dict, str]:
    """Template kwargs sent to the server, and the thinking setting (``enable_thinking`` in the
    recipe's template kwargs counts as one, as in `generate`)."""
    kwargs = dict(template_kwargs)
    if "enable_thinking" in kwargs:
        given = "on" if kwargs.pop("enable_thinking") else "off"
        if thinking is not None and thinking != given:
            raise RunUsageError(
                f"generate.thinking {thinking} contradicts enable_thinking in template_kwargs"
            )
        return kwargs, given
    thinking = thinking or "on"
    if thinking not in ("on", "off"):
        kind, _, value = thinking.partition(":")
        try:
            ok = kind == "mix" and 0.0 <= float(value) <= 1.0
        except ValueError:
            ok = False
        if not ok:
            raise RunUsageError(f"generate.thinking must be on, off or mix:F, not {thinking!r}")
    return kwargs, thinking


def settings_of(opts: RunOptions) -> dict[str, Any]:
    """What decides the final set: recipe, input files (sha256) and generation settings."""
    b = opts.build
    skip = {"sources", "out", "workers", "engine", "ray_address", "overwrite"}
    skip |= {"overlay", "run_info", "given_paths"}
    recipe = {k: v for k, v in asdict(b).items() if k not in skip}
    recipe["tokenizer"] = tokenizer_identity(b.tokenizer)
    if b.chat_template_path:
        recipe["chat_template_path"] = _real(b.chat_template_path)
    recipe["decontaminate"] = [_real(p) for p in b.decontaminate]
    recipe["sources"] = [
        {
            "name": s.name,
            "path": _real(s.path),
            "format": s.format,
            "fields": s.fields,
            "weight": s.weight,
            "count": s.count,
            "preset": s.preset,
        }
        for s in b.sources
    ]
    inputs = {
        s.name: [[_real(f["path"]), f["sha256"]] for f in describe_inputs(s)] for s in b.sources
    }
    gen = {k: v for k, v in asdict(opts.generate).items() if k not in _FREE_GENERATE_KEYS}
    return json.loads(json.dumps({"recipe": recipe, "inputs": inputs, "generate": gen}))


def _real(path: str | Path) -> str:
    """A local path resolved (``tok``, ``./tok/`` and ``/abs/tok`` are one folder); an ``hf:``
    source as it is."""
    text = str(path)
    return text if text.startswith(HUB_PREFIX) else str(Path(text).expanduser().resolve())


def tokenizer_identity(name: str) -> str:
    """A local tokenizer folder by its content (``sha256:...`` of its files: moved or spelled
    otherwise it is the same tokenizer, edited in place it is not); a hub id as it is."""
    path = Path(name).expanduser()
    return f"sha256:{tokenizer_files_fingerprint(path)}" if path.is_dir() else name


def _comparable(settings: dict[str, Any]) -> dict[str, Any]:
    """A state file's settings as this version records them: a run begun when the tokenizer
    was recorded by its path compares by that folder's content now, its paths resolved."""
    recipe = settings.get("recipe")
    if not isinstance(recipe, dict):
        return settings
    recipe = dict(recipe)
    tok = recipe.get("tokenizer")
    if isinstance(tok, str) and not tok.startswith("sha256:"):
        recipe["tokenizer"] = tokenizer_identity(tok)
    for s in recipe.get("sources") or ():
        if isinstance(s, dict) and isinstance(s.get("path"), str):
            s["path"] = _real(s["path"])
    out = {**settings, "recipe": recipe}
    inputs = settings.get("inputs")
    if isinstance(inputs, dict):
        out["inputs"] = {
            name: [[_real(f[0]), *f[1:]] if isinstance(f, list) and f else f for f in files]
            for name, files in inputs.items()
            if isinstance(files, list)
        }
    return out


def _flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: obj}


def changed_settings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Dotted names of the settings that differ (``recipe.max_length``, ``inputs.prompts``)."""
    a, b = _flatten(old), _flatten(new)
    names = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    short = []
    for n in names:  # inputs.NAME.0.1 -> inputs.NAME (the file changed)
        parts = n.split(".")
        key = ".".join(parts[:2]) if parts[0] in ("inputs",) else n
        if parts[0] == "recipe" and parts[1] == "sources":
            key = "recipe.sources"
        if key not in short:
            short.append(key)
    return short


class _State:
    """``<work>/state.json``: settings, model, finished stages, timings; saved atomically."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def new(cls, path: Path, settings: dict[str, Any]) -> _State:
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
_WORK_FILES = (
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
    "answers.lock",  # generate's lock (held only while it runs)
)


def _open_state(opts: RunOptions, settings: dict[str, Any]) -> tuple[_State, list[str]]:
    work = opts.work_dir
    path = work / "state.json"
    if work.exists() and not path.exists() and any(work.iterdir()):
        raise RunUsageError(f"{work} exists and is not a draftset run folder (no state.json)")
    if path.exists():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            raise RunUsageError(f"{path} is not readable JSON") from None
        if data.get("format") != STATE_FORMAT:
            raise RunUsageError(f"{path} is not a draftset run state file")
        if opts.restart:
            _clean(opts, data)
        else:
            changed = changed_settings(_comparable(data.get("settings") or {}), settings)
            if changed:
                raise RunUsageError(
                    f"the recipe, inputs or generation settings changed since {work} was"
                    f" started: {', '.join(changed)}; rerun with --restart to start over"
                )
            state = _State(path, data)
            state.close_killed()
            return state, list(data.get("done") or [])
    work.mkdir(parents=True, exist_ok=True)
    state = _State.new(path, settings)
    state.save()
    return state, []


def _clean(opts: RunOptions, data: dict[str, Any]) -> None:
    """--restart: remove what this run wrote (its work files, its output), nothing else."""
    work = opts.work_dir
    ours = _our_output(opts)
    if ours:
        from draftset.output.folder import foreign_entries  # lazy: build's checks

        theirs = foreign_entries(opts.build.out)
        if theirs:
            raise RunUsageError(
                f"--restart: {opts.build.out} holds files draftset did not write:"
                f" {', '.join(theirs[:5])}; move them out first (nothing was removed)"
            )
    for name in _WORK_FILES:
        (work / name).unlink(missing_ok=True)
    remove_stale_tmp(opts.build.out)  # a killed build's folder (marker-checked)
    if ours:
        shutil.rmtree(opts.build.out)
    report = _report_path(opts.build.out)
    report.with_name(f".{report.name}.tmp").unlink(missing_ok=True)
    if report.exists() and data.get("report"):
        report.unlink()


def _our_output(opts: RunOptions) -> bool:
    """The output folder exists and was built by this run (its manifest names our work folder)."""
    manifest = opts.build.out / "manifest.json"
    if not manifest.is_file():
        return False
    try:
        run = json.loads(manifest.read_text(encoding="utf-8")).get("run") or {}
    except ValueError:
        return False
    return run.get("work") == str(opts.work_dir.resolve())


def _report_path(out: Path) -> Path:
    return out.parent / f"{out.name}-report.html"


def _maybe_die(stage: str) -> None:
    """The crash tests' hook: ``kill -9`` ourselves in the middle of ``stage``."""
    if os.environ.get(KILL_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)


# --- stage 1: select and decide -----------------------------------------------------------------
def _select(opts: RunOptions, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """Rows to answer (``queue.jsonl``) and prompts too long to send (``too_long.jsonl``)."""
    # lazy: selection (dedup, decontamination) loads when a run starts, not at CLI start
    from draftset.select.mix import Selection, plan_selection

    b = opts.build
    kwargs, thinking = _split_thinking(b.template_kwargs, opts.generate.thinking)
    # the same per-row thinking choice `generate` makes (mix:F is seeded by the row id)
    chooser = GenerateOptions(
        sources=[], endpoints=[], out=work, thinking=thinking, seed=opts.generate.seed
    )
    tmpl = ChatTemplate(b.template_spec())
    probe = EmptyThinkProbe(  # no kit: no tokenizer dump
        tmpl.template_text,
        tmpl.base_kwargs,
        timeout=b.render_timeout,
        name=tmpl.spec.template_name(),
    )
    regenerate = opts.generate.regenerate
    spec = b.selection_spec()
    plan = None if spec.mix else plan_selection(b.sources, b.max_samples, b.seed)
    selected = Selection(spec, plan)
    queued: dict[str, Counter[str]] = {s.name: Counter() for s in b.sources}
    too_long: Counter[str] = Counter()
    qpath, lpath = work / "queue.jsonl", work / "too_long.jsonl"
    qtmp, ltmp = work / "queue.jsonl.tmp", work / "too_long.jsonl.tmp"
    n = 0
    with qtmp.open("w", encoding="utf-8") as q, ltmp.open("w", encoding="utf-8") as lf:
        for item in selected.rows():
            why, msgs = _needs_answer(item, b, regenerate, probe)
            if why is None:
                continue
            assert isinstance(item, Conversation | PromptOnly)
            row_kwargs = {**kwargs, "enable_thinking": chooser.thinking_for(item.id)}
            first = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"), len(msgs))
            problem = _prompt_problem(tmpl, item, msgs[:first], row_kwargs, b)
            if problem is not None:
                reason, message = problem
                line = {"id": item.id, "reason": reason, "message": message}
                lf.write(json.dumps({**line, "source": item.source, "row": item.row}) + "\n")
                too_long[item.source] += 1
                continue
            out: dict[str, Any] = {"id": item.id, "messages": msgs}
            if item.tools:
                out["tools"] = item.tools
            out["metadata"] = {"source": item.source, "row": item.row}
            q.write(json.dumps(out, ensure_ascii=False) + "\n")
            queued[item.source][why] += 1
            n += 1
            if n == 2:
                q.flush()
                _maybe_die("select")
        q.flush()
        os.fsync(q.fileno())
        lf.flush()
        os.fsync(lf.fileno())
    os.replace(ltmp, lpath)
    os.replace(qtmp, qpath)
    total = selected.counts.total()
    stats = {
        "read": total.read,
        "queued": {k: dict(v) for k, v in queued.items()},
        "queued_total": n,
        "too_long": dict(too_long),
    }
    by_why: Counter[str] = Counter()
    for c in queued.values():
        by_why.update(c)
    detail = ", ".join(f"{k}={v:,}" for k, v in sorted(by_why.items())) or "none"
    say(
        f"select: {total.read:,} rows selected; {n:,} to answer ({detail});"
        f" {sum(too_long.values()):,} prompts too long or unrenderable, never sent"
    )
    return stats


def _needs_answer(
    item: Any, b: BuildOptions, regenerate: str, probe: EmptyThinkProbe
) -> tuple[str | None, list[dict[str, Any]]]:
    """(why the row is queued, the messages to send) or (None, [])."""
    if isinstance(item, PromptOnly):
        return Q_PROMPT, item.messages
    if not isinstance(item, Conversation):
        return None, []
    if all_placeholder_answers(item, b.placeholders):
        return Q_PLACEHOLDER, [m for m in item.messages if m["role"] != "assistant"]
    if regenerate == "all":
        return Q_ALL, item.messages
    if (
        regenerate == "missing_reasoning"
        and lacks_reasoning(item, b.template_kwargs)
        and probe.thinks(row_kwargs_key(item))
    ):
        return Q_MISSING_REASONING, item.messages
    return None, []


def _prompt_problem(
    tmpl: Any,
    item: Conversation | PromptOnly,
    msgs: list[dict[str, Any]],
    row_kwargs: dict[str, Any],
    b: BuildOptions,
) -> tuple[str, str] | None:
    """``too_long`` when the rendered prompt alone leaves no room for an answer; the render
    bounded as build bounds a row's (``template_timeout``, ``template_too_large``)."""
    max_length = b.max_length
    try:
        with bounded_row(tmpl, item, b.render_timeout):
            text = tmpl.render(msgs, item.tools, add_generation_prompt=True, row_kwargs=row_kwargs)
    except RenderLimit as exc:
        return exc.reason, exc.message
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return reasons.TEMPLATE_ERROR, first
    n = len(tmpl.backend.encode(text, add_special_tokens=False).ids)
    if n >= max_length:
        return (
            reasons.TOO_LONG,
            f"the prompt alone is {n:,} tokens, max_length is {max_length:,}: never sent",
        )
    return None


# --- stage 2: generate ------------------------------------------------------------------------
def _pinned_model(state: _State, answers: Path) -> str | None:
    """The model this run was answered by: the state's, or the first answer line's."""
    if state.data.get("model"):
        return str(state.data["model"])
    if answers.exists():
        with answers.open("rb") as f:
            for line in f:
                try:
                    meta = json.loads(line).get("metadata") or {}
                except ValueError:
                    break
                if meta.get("model"):
                    return str(meta["model"])
    return None


def _generate(
    opts: RunOptions, state: _State, work: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    answers = work / "answers.jsonl"
    queued = int(state.data["select"]["queued_total"])
    if queued == 0:
        say("generate: nothing to answer")
        return {"model": state.data.get("model"), "answers": 0, "errors": {}}
    pinned = _pinned_model(state, answers) or opts.generate.model
    gopts = _generate_options(opts, answers, pinned)
    if pinned and not state.data.get("model"):
        state.data["model"] = pinned
        state.save()
    kill = os.environ.get(KILL_ENV) == "generate"
    with progress(enabled=opts.progress) as bar:

        def tick(result: Any) -> None:
            if bar is not None:
                bar(result)
            if kill and result.done >= 2:
                _maybe_die("generate")

        try:
            result = asyncio.run(run_generate(gopts, tick))
        except GenerateUsageError as exc:
            if pinned and "not --model" in str(exc):
                raise RunUsageError(
                    f"model changed: this run was answered by {pinned!r} and {exc}; rerun with"
                    " --restart to start over with the model now served"
                ) from None
            raise RunUsageError(str(exc)) from None
        except Unreachable as exc:
            raise RunFailed(f"{exc}; rerun the same command to resume") from None
    if result.model and not state.data.get("model"):
        state.data["model"] = result.model
    if result.aborted:
        state.save()
        raise RunFailed(f"generation stopped early: {result.aborted}; rerun to resume")
    done_out, done_err = recover(answers), recover(errors_path(answers))
    if done_out.lines + done_err.lines != queued:
        state.save()
        raise RunFailed(
            f"generation ended with {done_out.lines + done_err.lines:,} of {queued:,} rows"
            " answered or failed; rerun to resume"
        )
    ends_at_tool = stripped = 0
    with answers.open("rb") as f:
        for line in f:
            meta = json.loads(line).get("metadata") or {}
            ends_at_tool += bool(meta.get("ends_at_tool_call"))
            stripped += len(meta.get("special_tokens_stripped") or ())
    say(
        f"generate: {done_out.lines:,} answered by {state.data.get('model')!r},"
        f" {done_err.lines:,} errors"
        + (f" ({_fmt_counts(done_err.reasons)})" if done_err.reasons else "")
        + f"; {result.requests:,} requests this time, {result.skipped:,} rows already done"
    )
    return {
        "model": state.data.get("model"),
        "answers": done_out.lines,
        "errors": dict(sorted(done_err.reasons.items())),
        "ends_at_tool_call": ends_at_tool,
        "special_tokens_stripped": stripped,
    }


def _fmt_counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v:,}" for k, v in sorted(counts.items()))


# --- stage 3: build with the answers ----------------------------------------------------------
def _run_info(opts: RunOptions, state: _State) -> dict[str, Any]:
    sel, gen = state.data["select"], state.data.get("generate") or {}
    queued: Counter[str] = Counter()
    for c in sel["queued"].values():
        queued.update(c)
    return {
        "work": str(opts.work_dir.resolve()),
        "model": gen.get("model"),
        "regenerate": opts.generate.regenerate,
        "queued": dict(sorted(queued.items())),
        "queued_per_source": sel["queued"],
        "too_long_prompts": sum(sel["too_long"].values()),
        "answered": gen.get("answers", 0),
        "generation_errors": gen.get("errors", {}),
        "ends_at_tool_call": gen.get("ends_at_tool_call", 0),
        # answers ending with a leaked stop token's text, cut at ingest (docs/generate.md)
        "special_tokens_stripped": gen.get("special_tokens_stripped", 0),
    }


def _build(opts: RunOptions, state: _State, work: Path, say: Callable[[str], None]) -> Any:
    # lazy: the build job (engines, process pool) loads when used, not at CLI start
    from draftset.pipeline.build import run_build

    out = opts.build.out
    if out.exists() and not opts.build.overwrite and not _our_output(opts):
        raise RunUsageError(
            f"output folder exists and was not written by this run: {out}"
            " (set `overwrite: true` in the recipe to replace it)"
        )
    state.save()
    answers = work / "answers.jsonl"
    overlay = [answers, errors_path(answers), work / "too_long.jsonl"]
    bopts = replace(
        opts.build,
        overwrite=True,
        overlay=[str(p.resolve()) for p in overlay],
        run_info=_run_info(opts, state),
    )
    kill = os.environ.get(KILL_ENV) == "build"
    with progress_bar("build", enabled=opts.progress) as bar:

        def tick(done: int, total: int) -> None:
            if bar is not None:
                bar(done, total)
            if kill:
                _maybe_die("build")

        result = run_build(bopts, on_progress=tick)
    total = result.accounting.total()
    say(
        f"build: {plural(total.written, 'row')} written, {total.rejected_total:,} rejected"
        f" ({_fmt_counts(dict(total.rejected))})"
        if total.rejected
        else f"build: {plural(total.written, 'row')} written, none rejected"
    )
    return result


# --- stages 4 and 5 ---------------------------------------------------------------------------
def _verify(opts: RunOptions, say: Callable[[str], None]) -> bool:
    # lazy: the build job (engines, process pool) loads when used, not at CLI start
    from draftset.pipeline.build import ADVISORY_CHECKS

    # run_verify records the result beside the set (OUT/verify.json), where `report` reads it
    server = None
    if opts.render_server:
        from draftset.checks.serving import connect  # lazy, as above

        server = connect(opts.render_server)
    checks = run_verify(opts.build.out, speculators=opts.speculators, render_server=server)
    if opts.echo:
        print_results(checks, verdict=False)  # the verdict is the line below (one, not two)
    # drafter fitness is advice for DFlash training, not an integrity failure (as in build)
    passed = not any(c.failed for c in checks if c.name not in ADVISORY_CHECKS)
    say(f"verify: {'passed' if passed else 'FAILED'} ({len(checks)} checks)")
    return passed


def _report(opts: RunOptions, say: Callable[[str], None]) -> Path:
    path = _report_path(opts.build.out)
    tmp = path.with_name(f".{path.name}.tmp")
    write_report(opts.build.out, tmp)  # then renamed: a killed run leaves no half report
    _maybe_die("report")
    os.replace(tmp, path)
    say(f"report: {path}")
    return path


# --- the run ----------------------------------------------------------------------------------
def run(opts: RunOptions, say: Callable[[str], None] | None = None) -> RunResult:
    """Run (or resume) every stage; returns whether verify passed.

    Raises `RunUsageError` (exit 2: bad recipe, or changed settings without ``restart``) and
    `RunFailed` (exit 1: generation could not finish; rerun to resume).
    """
    say = say or (lambda text: print(visible(text), flush=True))  # paths may hold ESC
    _check_generate(opts.generate)
    _resolve_tokenizer_path(opts.build.tokenizer)  # a missing folder: exit 2 before any work
    _check_apart(opts)
    check_row_shapes(opts.build.sources)  # a source of unknown rows: exit 2 before any work
    settings = settings_of(opts)
    state, resumed = _open_state(opts, settings)
    work = opts.work_dir
    if resumed:
        say(f"resuming {work}: {', '.join(resumed)} already done")
    result = RunResult(opts.build.out, work, False, state.data, resumed=list(resumed))
    for stage in STAGES:
        if stage in state.done:
            continue
        attempt = state.begin(stage)
        t0 = time.monotonic()
        outcome = "failed"
        try:
            if stage == "select":
                facts = {"select": _select(opts, work, say)}
            elif stage == "generate":
                facts = {"generate": _generate(opts, state, work, say)}
            elif stage == "build":
                _build(opts, state, work, say)
                facts = {}
            elif stage == "verify":
                _maybe_die("verify")  # (the crash test's kill: the stage begun, not recorded)
                facts = {"verified": _verify(opts, say)}
            else:
                facts = {"report": str(_report(opts, say))}
            outcome = "done"
        except KeyboardInterrupt:
            outcome = "interrupted"
            raise
        finally:
            state.end(attempt, outcome, time.monotonic() - t0)
        state.finish(stage, **facts)
    result.passed = bool(state.data.get("verified"))
    result.report = Path(state.data["report"]) if state.data.get("report") else None
    say("timeline: " + format_timeline(state.data.get("attempts") or []))
    return result


def _check_apart(opts: RunOptions) -> None:
    """The output and the work folder are no source, not inside one, holding none (build's
    check, made before the first stage: the build stage comes after paying for answers)."""
    # lazy: build's preflight loads when a run starts
    from draftset.config.preflight import check_apart_from_sources, local_sources

    sources = local_sources(opts.build.sources)
    check_apart_from_sources("--out", opts.build.out, sources)
    check_apart_from_sources("--work", opts.work_dir, sources)


def _check_generate(g: GenerateSettings) -> None:
    if not g.endpoints:
        raise RunUsageError("generate.endpoints lists no server URL")
    for url in g.endpoints:
        if not str(url).startswith(("http://", "https://")):
            raise RunUsageError(f"generate.endpoints: {url!r} is not an http(s) URL")
    if g.regenerate not in REGENERATE:
        raise RunUsageError(
            f"generate.regenerate must be {', '.join(REGENERATE)}, not {g.regenerate!r}"
        )
    if g.concurrency < 1 or g.max_retries < 0 or g.request_timeout <= 0:
        raise RunUsageError(
            "generate.concurrency must be >= 1, max_retries >= 0, request_timeout > 0"
        )
    if g.max_tokens is not None and g.max_tokens < 1:
        raise RunUsageError("generate.max_tokens must be >= 1")
    if problem := concurrency_problem(g.concurrency, len(g.endpoints), "generate.concurrency"):
        raise RunUsageError(problem)
    clash = sorted(RESERVED_BODY_KEYS & set(g.extra_body))
    if clash:
        raise RunUsageError(f"generate.extra_body may not set {clash}")


def generate_settings(section: Any, recipe: str) -> GenerateSettings:
    """The recipe's ``generate:`` mapping, checked."""
    if not isinstance(section, dict):
        raise RunUsageError(f"recipe {recipe} needs a `generate:` mapping for `draftset run`")
    unknown = set(section) - GENERATE_KEYS
    if unknown:
        raise RunUsageError(f"recipe {recipe}: unknown generate keys {sorted(unknown)}")
    values = dict(section)
    endpoints = values.get("endpoints")
    if isinstance(endpoints, str):
        values["endpoints"] = [endpoints]
    if not isinstance(values.get("endpoints"), list):
        raise RunUsageError(f"recipe {recipe}: generate.endpoints must list server URLs")
    if values.get("extra_body") is not None and not isinstance(values["extra_body"], dict):
        raise RunUsageError(f"recipe {recipe}: generate.extra_body must be a mapping")
    values["extra_body"] = values.get("extra_body") or {}
    if "thinking" in values and values["thinking"] is not None:
        t = values["thinking"]
        values["thinking"] = ("on" if t else "off") if isinstance(t, bool) else str(t)
    try:
        return GenerateSettings(**values)
    except TypeError as exc:
        raise RunUsageError(f"recipe {recipe}: generate: {exc}") from None


def run_recipe(
    recipe: str | Path,
    restart: bool = False,
    workers: int | None = None,
    endpoints: list[str] | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    work: str | Path | None = None,
    progress: bool = False,
    say: Callable[[str], None] | None = None,
    tokenizer: str | None = None,
) -> RunResult:
    """The Python API of ``draftset run RECIPE.yaml`` (same options, same behaviour)."""
    opts = options_from_recipe(
        recipe,
        restart=restart,
        workers=workers,
        endpoints=endpoints,
        engine=engine,
        ray_address=ray_address,
        work=work,
        progress=progress,
        tokenizer=tokenizer,
    )
    return run(opts, say=say)


def options_from_recipe(
    recipe: str | Path,
    restart: bool = False,
    workers: int | None = None,
    endpoints: list[str] | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    work: str | Path | None = None,
    progress: bool = False,
    tokenizer: str | None = None,
) -> RunOptions:
    # lazy: api imports this module; recipes (yaml) load when a run starts
    from draftset.api import build_options
    from draftset.config.recipe import load_recipe

    path = Path(recipe)
    if path.suffix not in (".yaml", ".yml"):
        raise RunUsageError(f"draftset run takes a recipe (.yaml), not {recipe}")
    build = build_options(
        path, workers=workers, engine=engine, ray_address=ray_address, tokenizer=tokenizer
    )
    conf = load_recipe(path)
    gen = generate_settings(conf.get("generate"), str(path))
    render_server = _render_server_setting(conf.get("verify"), str(path))
    if endpoints:
        gen.endpoints = list(endpoints)
    return RunOptions(
        build=build,
        generate=gen,
        work=Path(work) if work else None,
        restart=restart,
        progress=progress,
        render_server=render_server,
    )


def _render_server_setting(section: Any, where: str) -> str | None:
    """The recipe's `verify: {render_server: URL}`, checked to answer before any work."""
    if section is None:
        return None
    if not isinstance(section, dict) or set(section) - {"render_server"}:
        raise RunUsageError(f"{where}: `verify:` takes only `render_server: URL`")
    url = section.get("render_server")
    if url is None:
        return None
    from draftset.checks.serving import connect  # lazy: only recipes that use it

    return connect(str(url)).url


# --- command line -----------------------------------------------------------------------------
RUN_HELP = """\
From raw rows to a verified set in one resumable command, answers from the target model:
select rows exactly as `build` does; have the target model (vLLM, SGLang, transformers serve)
answer prompt-only rows, rows whose answers are placeholders ("OK.", empty) and, with
`regenerate: missing_reasoning | all`, rows without reasoning / every row; build the set with
the answers rejoining their rows (same ids, same sources); verify it; write the report.

RECIPE.yaml is a `build` recipe plus a `generate:` section (see docs/run.md):
  generate:
    endpoints: [http://127.0.0.1:8000/v1]   # API key from $OPENAI_API_KEY (api_key_env)
    thinking: mix:0.5                        # on | off | mix:F
    max_tokens: 4096
    temperature: 0.6                         # top_p, top_k, seed, extra_body
    concurrency: 64
    request_timeout: 600
    regenerate: missing                      # missing | missing_reasoning | all

State lives in OUT.run/ (the answers the set is built from: keep it). Rerun the same command
after a crash or kill to resume; a changed recipe, input or generation setting (or a server
now serving another model) is refused (exit 2) unless --restart.
Exit codes: 0 verify passed, 1 verify failed or the run stopped (rerun to resume), 2 unusable
recipe / arguments / changed settings.
"""


def register_cli(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "run",
        help="recipe -> answers from the target -> verified set, resumable",
        description=RUN_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("recipe", metavar="RECIPE.yaml")
    p.add_argument(
        "--restart",
        action="store_true",
        help="start over: remove this run's work files and output first",
    )
    p.add_argument(
        "--endpoint",
        action="append",
        metavar="URL",
        help="server base URL replacing the recipe's endpoints (repeatable)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder replacing the recipe's `tokenizer:`")
    p.add_argument("--work", metavar="DIR", help="work folder (default: OUT.run beside OUT)")
    p.add_argument("--workers", type=int, help="build processes (default: all cores)")
    p.add_argument(
        "--engine",
        choices=["local", "ray"],
        help="where the build's render/encode runs (default local; ray needs draftset[ray])",
    )
    p.add_argument(
        "--ray-address", metavar="ADDR", help="--engine ray: the cluster (auto, HOST:PORT, ray://)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(handler=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    # RunUsageError, generate's StoreError (2) and RunFailed (1) are DraftsetErrors: `cli.main`
    # prints their one line and returns their exit code
    result = run_recipe(
        args.recipe,
        restart=args.restart,
        workers=args.workers,
        endpoints=args.endpoint,
        engine=args.engine,
        ray_address=args.ray_address,
        work=args.work,
        progress=not args.no_progress and sys.stderr.isatty(),
        tokenizer=args.tokenizer,
    )
    _print_summary(result)
    return EXIT_OK if result.passed else EXIT_FAIL


def _print_summary(result: RunResult) -> None:
    manifest = json.loads((result.out / "manifest.json").read_text(encoding="utf-8"))
    total = (manifest.get("counts") or {}).get("total") or {}
    run_info = manifest.get("run") or {}
    print(
        f"run: {plural(total.get('read', 0), 'row')} read, {total.get('written', 0):,} written,"
        f" {total.get('rejected', 0):,} rejected; answers by {run_info.get('model')!r}:"
        f" {run_info.get('answered', 0):,} ({_fmt_counts(run_info.get('queued') or {})}),"
        f" {run_info.get('ends_at_tool_call', 0):,} end at a tool call"
    )
    if run_info.get("special_tokens_stripped"):
        print(
            f"note: {run_info['special_tokens_stripped']:,} answers ended with a special token's"
            " text (a stop token the server leaked): cut before building"
        )
    context = total.get("context_turns_by_reason") or {}
    if context:  # as build's summary says them: turns trained as context only
        print(f"assistant turns kept as context only: {_fmt_counts(context)}")
    if total.get("empty_think_rows"):
        n = total["empty_think_rows"]
        print(
            f"note: {plural(n, 'row')} {'has' if n == 1 else 'have'} answers without reasoning,"
            " trained as empty think blocks under this thinking template; `regenerate:"
            " missing_reasoning` in the recipe's generate section has the target answer them"
        )
    differ = {
        k: context[k] for k in ("history_render_differs", "history_tokens_differ") if context.get(k)
    }
    if differ:
        print(
            f"hint: {_fmt_counts(differ)} assistant turns kept as context only: the server shows"
            " them differently in later prompts (text or tokens) than the model generated them;"
            " `turns: each` in the recipe (--turns each) supervises every turn in its own row"
        )
    per_source = (manifest.get("counts") or {}).get("per_source") or {}
    for line in unread_fields_notes({n: c.get("unread_fields") for n, c in per_source.items()}):
        print(line)
    out, report = visible(str(result.out)), visible(str(result.report))
    if result.passed:  # the report's path was printed by its stage (unless done before)
        print(f"verified: {out}" + (f"   report: {report}" if "report" in result.resumed else ""))
    else:
        print(f"draftset: verify failed for {out} (details above)", file=sys.stderr)
