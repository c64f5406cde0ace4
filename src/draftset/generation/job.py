"""`draftset generate`: the target model answers the prompts, through OpenAI-compatible servers.

A drafter learns to predict its target model, so its training answers should come from that
model. This job reads anything `build` reads (including `build`'s own ``prompts.jsonl``), asks
one or more servers (vLLM, SGLang, ``transformers serve``) for every assistant turn, and writes
one OpenAI-messages conversation per line that `build` reads as is.

Every input row ends as exactly one output line or one error line (``OUT`` ->
``OUT.errors.jsonl``), and the job is crash-safe: lines are appended whole, and a rerun of the
same command skips the row ids already present in either file (a torn last line left by
``kill -9`` is cut away first). See docs/generate.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from draftset.config.recipe import load_recipe, parse_fields, source_name, unique_names
from draftset.core import reasons
from draftset.core.errors import EXIT_FAIL, EXIT_OK, RunError, UsageError
from draftset.core.ids import IdRegistry, duplicate_id_message
from draftset.core.reasons import (
    SPECIAL_TOKEN_IN_ANSWER,
    special_token_pattern,
)
from draftset.core.records import PreTokenized, PromptOnly, Reject
from draftset.generation.console import print_summary, progress
from draftset.generation.dialog import (
    STOP_LENGTH,
    STOP_NOTHING,
    STOP_TOOL_MISMATCH,
    Dialog,
    Job,
    run_dialog,
)
from draftset.generation.http import (
    DEFAULT_MAX_RESPONSE_BYTES,
    RESPONSE_TOO_LARGE,
    Completion,
    Endpoint,
    EndpointPool,
    FinalError,
    NoEndpoint,
    RetriesExhausted,
    RetryPolicy,
    TransientError,
    complete,
    concurrency_problem,
    list_models,
    make_endpoint,
)
from draftset.generation.store import (
    LineWriter,
    RunLock,
    check_output_path,
    drop_ids,
    errors_path,
    first_line,
    lock_path,
    read_run,
    recover,
    run_path,
    write_run,
)
from draftset.generation.wire import redact_url
from draftset.mask.ambient import now_iso
from draftset.sources.normalize import FORMATS
from draftset.sources.presets import apply_preset, source_normalizer
from draftset.sources.read import HUB_PREFIX, Source, count_rows, iter_raw_rows

# --- error reason codes (errors file `reason`; part of the format: never rename, only add) ---
LENGTH = STOP_LENGTH  # an answer hit max_tokens (finish_reason "length"); kept with --keep-length
TOOL_MISMATCH = STOP_TOOL_MISMATCH  # the model's tool calls differ from the recorded ones
NOTHING_TO_GENERATE = STOP_NOTHING  # no user turn (or tool result) to answer
HTTP_4XX = "http_4xx"  # the server refused the request (4xx other than 429): not retried
RETRIES_EXHAUSTED = "retries_exhausted"  # 429 / 5xx / timeouts / connection errors, every try
INVALID_RESPONSE = "invalid_response"  # every try got a 200 whose body is not a completion
PRETOKENIZED = "pretokenized"  # input_ids rows carry no text to send
MODEL_MISMATCH = "model_mismatch"  # an answer's `model` names another model than the run's
# RESPONSE_TOO_LARGE = "response_too_large": a response body (or its gzip/deflate decoding) over
# --max-response-bytes; not retried, the connection is closed having read at most that much.
# SPECIAL_TOKEN_IN_ANSWER = "special_token_in_answer" (with --tokenizer): an answer holds a
# special token's text anywhere but at its very end (docs/generate.md); not retried.
# input rows that `normalize` rejects keep its own code (reasons.UNKNOWN_FORMAT, ...), and
# reasons.DUPLICATE_ID marks a row whose id is already used in this run.

GENERATE_REASONS = frozenset(
    {
        LENGTH,
        TOOL_MISMATCH,
        NOTHING_TO_GENERATE,
        HTTP_4XX,
        RETRIES_EXHAUSTED,
        INVALID_RESPONSE,
        PRETOKENIZED,
        RESPONSE_TOO_LARGE,
        MODEL_MISMATCH,
        SPECIAL_TOKEN_IN_ANSWER,
    }
)
RETRYABLE_REASONS = frozenset({RETRIES_EXHAUSTED, INVALID_RESPONSE, MODEL_MISMATCH})
"""Error lines that ``--retry-errors`` removes so their rows are tried again."""

WRITTEN = "written"  # outcome of a row that went to the output file

API_KEY_ENV = ("DRAFTSET_API_KEY", "OPENAI_API_KEY")
"""Environment variables read, in this order, for the API key when ``--api-key`` is not given."""

SAMPLING_FLAGS = ("temperature", "top_p", "top_k", "max_tokens", "seed")
RESERVED_BODY_KEYS = frozenset(
    {"model", "messages", "tools", "chat_template_kwargs", "stream", "n"}
)


class GenerateUsageError(UsageError):
    """Unusable arguments: one line on stderr, exit code 2."""


class Unreachable(RunError):
    """No endpoint could be used at all: exit code 1, nothing was done."""


@dataclass
class GenerateOptions:
    sources: list[Source]
    endpoints: list[str]
    out: Path
    model: str | None = None
    api_key: str | None = None  # resolved by whoever builds the options (CLI: env fallback)
    concurrency: int = 16  # per endpoint
    request_timeout: float = 600.0
    max_retries: int = 6
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    health_interval: float = 5.0
    give_up_after: float = 600.0
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    thinking: str = "on"  # on | off | mix:F
    keep_length: bool = False
    return_token_ids: bool = False
    retry_errors: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    restart: bool = False  # discard the previous run's answers (only files generate wrote)
    # texts of the target tokenizer's special tokens (--tokenizer; `run`: its template's): a
    # leaked stop token ending an answer is cut, any other such text fails the row
    special_tokens: tuple[str, ...] = ()

    def sampling(self) -> dict[str, Any]:
        """Every generation option sent with each request (recorded in each row's metadata)."""
        out = {k: getattr(self, k) for k in SAMPLING_FLAGS if getattr(self, k) is not None}
        out.update(self.extra_body)
        return out

    def settings(self) -> dict[str, Any]:
        """What a resumed run must share with the run that began the answers file: sampling,
        template options, thinking, how length cut-offs and token ids are kept, and how the
        inputs are read (the model is added once the endpoints name it)."""
        return {
            "sampling": self.sampling(),
            "chat_template_kwargs": self.chat_template_kwargs,
            "thinking": self.thinking,
            "keep_length": self.keep_length,
            "return_token_ids": self.return_token_ids,
            "inputs": {
                s.name: {
                    "format": s.format,
                    "fields": s.fields,
                    "preset": s.preset,
                }
                for s in self.sources
            },
        }

    def thinking_for(self, row_id: str) -> bool:
        """Thinking on or off for one row; ``mix:F`` draws it from the seed and the row id, so a
        resumed run makes the same choice for the same row."""
        if self.thinking in ("on", "off"):
            return self.thinking == "on"
        fraction = float(self.thinking.partition(":")[2])
        return random.Random(f"{self.seed or 0}:{row_id}").random() < fraction


@dataclass
class GenerateResult:
    out: Path
    errors: Path
    model: str = ""
    total_rows: int = 0
    skipped: int = 0  # already in the output / errors file when the run started
    torn_bytes: int = 0  # torn tail cut from the files at start
    outcomes: Counter[str] = field(default_factory=Counter)  # WRITTEN or an error reason
    requests: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    aborted: str | None = None  # why the run stopped before the end (resume to finish)
    endpoints: dict[str, int] = field(default_factory=dict)  # requests per endpoint
    ejections: dict[str, int] = field(default_factory=dict)  # times each endpoint was taken out
    special_stripped: int = 0  # answers whose trailing leaked stop-token text was cut

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    @property
    def ok(self) -> bool:
        """What `draftset generate` exits 0 on: not stopped early (errors are counted lines)."""
        return self.aborted is None


ProgressFn = Callable[[GenerateResult], None]


# --- input ---------------------------------------------------------------------------------
def _unique(
    candidate: str | None, source: str, row: int, ids: IdRegistry, file: str | None = None
) -> tuple[str, bool]:
    """(resume key, True when it is the row's own id or its source-prefixed form): build's
    rule (`IdRegistry.claim_row_id`), then a made-up key for the error line of a row without."""
    if candidate is not None:
        own = ids.claim_row_id(candidate, source, file)
        if own is not None:
            return own, True
    fallback = f"{source}:{row}" if candidate is None else f"{source}:{row}#duplicate"
    while not ids.claim(fallback):
        fallback += "+"
    return fallback, candidate is None


def iter_inputs(sources: list[Source]) -> Iterator[Job | dict[str, Any]]:
    """Jobs to answer, or error lines for rows that cannot be answered, in input order."""
    ids = IdRegistry()
    for src in sources:
        norm = source_normalizer(src)  # build's normalization of this source
        for raw in iter_raw_rows(src):
            item = raw.reject if raw.reject is not None else norm(raw)
            key, own = _unique(item.id, item.source, item.row, ids, raw.file)
            if isinstance(item, Reject):
                yield _error_line(key, item.source, item.row, item.reason, item.message)
            elif not own:
                msg = duplicate_id_message(item.id)
                yield _error_line(key, item.source, item.row, reasons.DUPLICATE_ID, msg)
            elif isinstance(item, PreTokenized):
                msg = "a pre-tokenized row has no messages to send"
                yield _error_line(key, item.source, item.row, PRETOKENIZED, msg)
            else:
                meta = item.meta.get("metadata")
                origin = (
                    meta if isinstance(meta, dict) else {"source": item.source, "row": item.row}
                )
                prompt_only = isinstance(item, PromptOnly)
                yield Job(
                    key, item.source, item.row, item.messages, item.tools, prompt_only, origin
                )


def _error_line(
    row_id: str, source: str, row: int, reason: str, message: str, **extra: Any
) -> dict[str, Any]:
    return {
        "id": row_id,
        "reason": reason,
        "message": message,
        "source": source,
        "row": row,
        **extra,
    }


# --- one row ---------------------------------------------------------------------------------
class _Runner:
    """Shared state of a run: the pool, the files, the counters."""

    def __init__(self, opts: GenerateOptions, pool: EndpointPool, result: GenerateResult) -> None:
        self.opts = opts
        self.pool = pool
        self.result = result
        self.policy = RetryPolicy(
            opts.max_retries, opts.backoff_base, opts.backoff_cap, opts.request_timeout
        )
        self.sampling = opts.sampling()
        self.rng = random.Random()
        self.out = LineWriter(opts.out)
        self.errors = LineWriter(errors_path(opts.out), ascii_fallback=True)
        self.progress: ProgressFn | None = None
        self.run_file: dict[str, Any] | None = None  # rewritten when a new model name is reported
        self.special = special_token_pattern(set(opts.special_tokens))
        self.special_at_end = (
            re.compile(f"(?:{self.special.pattern})\\Z") if self.special is not None else None
        )

    def kwargs_for(self, job: Job) -> tuple[dict[str, Any], bool]:
        thinking = self.opts.thinking_for(job.id)
        return {**self.opts.chat_template_kwargs, "enable_thinking": thinking}, thinking

    def body(
        self, messages: list[dict[str, Any]], job: Job, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.pool.model, "messages": messages}
        if job.tools:
            body["tools"] = job.tools
        body.update(self.sampling)
        body["chat_template_kwargs"] = kwargs
        if self.opts.return_token_ids:
            body["return_token_ids"] = True
        return body

    async def ask(
        self, messages: list[dict[str, Any]], job: Job, kwargs: dict[str, Any]
    ) -> Completion:
        try:
            comp = await complete(
                self.pool, self.body(messages, job, kwargs), self.policy, self.rng
            )
        except RetriesExhausted as exc:
            self._count(exc.attempts)
            raise
        self._count(comp.attempts, comp)
        self._ingest_special(comp)
        return comp

    def _ingest_special(self, comp: Completion) -> None:
        """Special tokens' texts in an answer (docs/generate.md): one that ends the answer is
        the token the server stopped on, leaked as text (`transformers serve`: ``"Hello
        world.<|im_end|>"``): the model stopped there, so it is cut (the template writes the
        end-of-turn itself) and counted. Anywhere else the text after it was not generated
        in this turn, or is markup the model writes only as a control token: the row fails,
        `special_token_in_answer`. Cut before the answer becomes the next request's history.
        """
        if self.special is None:
            return
        msg = comp.message
        fields = [k for k in ("reasoning_content", "content") if isinstance(msg.get(k), str)]
        last = next((k for k in reversed(fields) if msg[k]), None)
        at_end = self.special_at_end
        end = at_end.search(msg[last]) if at_end is not None and last is not None else None
        if last is not None and end is not None:
            msg[last] = msg[last][: end.start()]
            comp.special_stripped = end.group(0)
            self.result.special_stripped += 1
        for k in fields:
            hit = self.special.search(msg[k])
            if hit:
                raise FinalError(
                    SPECIAL_TOKEN_IN_ANSWER,
                    f"the answer's {k} holds the text of special token {hit.group(0)!r}"
                    " before its end: the server leaked a token the model ends turns with",
                )

    def _count(self, attempts: int, comp: Completion | None = None) -> None:
        r = self.result
        r.requests += attempts
        r.retries += attempts - 1
        if comp is not None:
            r.prompt_tokens += comp.usage.get("prompt_tokens", 0)
            r.completion_tokens += comp.usage.get("completion_tokens", 0)
            r.endpoints[comp.endpoint] = r.endpoints.get(comp.endpoint, 0) + 1

    async def answer(self, job: Job) -> None:
        """Answer one row and write its one line (output or error). `NoEndpoint` propagates:
        that row is left for the next run."""
        kwargs, thinking = self.kwargs_for(job)
        asked_at = now_iso()  # what the server's strftime_now reads, for build to render with
        try:
            dialog = await run_dialog(job, lambda msgs: self.ask(msgs, job, kwargs))
        except FinalError as exc:
            if exc.kind in (RESPONSE_TOO_LARGE, SPECIAL_TOKEN_IN_ANSWER):
                self.fail(_error_line(job.id, job.source, job.row, exc.kind, str(exc)))
                return
            self.fail(
                _error_line(job.id, job.source, job.row, HTTP_4XX, str(exc), status=exc.status)
            )
            return
        except RetriesExhausted as exc:
            reason = INVALID_RESPONSE if exc.last.kind == "invalid_response" else RETRIES_EXHAUSTED
            extra = {"error_kind": exc.last.kind, "attempts": exc.attempts}
            self.fail(_error_line(job.id, job.source, job.row, reason, str(exc), **extra))
            return
        if dialog.stop and not (dialog.stop == LENGTH and self.opts.keep_length):
            extra: dict[str, Any] = {"answers": len(dialog.completions)}
            if dialog.stop == TOOL_MISMATCH:
                extra["messages"] = dialog.messages  # what the model did, to inspect
            self.fail(
                _error_line(job.id, job.source, job.row, dialog.stop, dialog.stop_message, **extra)
            )
            return
        model = self.pool.model
        other = next((c.model for c in dialog.completions if _other_model(c, model)), None)
        if other is not None:  # a drafter learns its target: never another model's answer
            self._note_model(other)
            msg = f"answered by {other!r}, not this run's model {model!r}"
            self.fail(_error_line(job.id, job.source, job.row, MODEL_MISMATCH, msg, model=other))
            return
        line = self.record(job, dialog, kwargs, thinking, asked_at)
        try:
            self.out.write(line)
        except UnicodeEncodeError:  # parse_completion refuses such text; never write it anyway
            msg = "the answer holds text that is not valid Unicode (a lone surrogate)"
            self.fail(_error_line(job.id, job.source, job.row, INVALID_RESPONSE, msg))
            return
        self._note_model(line["metadata"]["model"])
        self.result.outcomes[WRITTEN] += 1
        self._tick()

    def _note_model(self, reported: str) -> None:
        """Keep every model name the server reported in its answers in the run file."""
        run = self.run_file
        if run is not None and reported not in run["reported_models"]:
            run["reported_models"].append(reported)
            write_run(self.opts.out, run)

    def fail(self, line: dict[str, Any]) -> None:
        self.errors.write(line)
        self.result.outcomes[line["reason"]] += 1
        self._tick()

    def _tick(self) -> None:
        if self.progress:
            self.progress(self.result)

    def record(
        self, job: Job, d: Dialog, kwargs: dict[str, Any], thinking: bool, asked_at: str
    ) -> dict[str, Any]:
        last = d.completions[-1]
        usage: Counter[str] = Counter()
        for c in d.completions:
            usage.update(c.usage)
        meta: dict[str, Any] = {
            "model": last.model or self.pool.model,
            "endpoint": last.endpoint,
            "finish_reason": last.finish_reason,
            "usage": dict(usage),
            "sampling": self.sampling,
            "thinking": "on" if thinking else "off",
            "chat_template_kwargs": kwargs,
            # the client's clock when the answers were asked for: the day a template's
            # strftime_now wrote into the server's prompt (no request field can set it)
            "template_now": asked_at,
            "answers": len(d.completions),
            "origin": job.origin,
        }
        stripped = [c.special_stripped for c in d.completions if c.special_stripped]
        if stripped:  # leaked stop-token text cut from the end of these answers
            meta["special_tokens_stripped"] = stripped
        if d.stop == LENGTH:
            meta["truncated"] = True
        if d.ends_at_tool_call:
            meta["ends_at_tool_call"] = True
        token_ids = [
            {"message": idx, "prompt": c.prompt_token_ids, "completion": c.completion_token_ids}
            for idx, c in zip(d.answer_index, d.completions, strict=True)
            if c.prompt_token_ids is not None or c.completion_token_ids is not None
        ]
        if token_ids:
            meta["token_ids"] = {"turns": token_ids}
        line: dict[str, Any] = {"id": job.id, "messages": d.messages}
        if job.tools:
            line["tools"] = job.tools
        line["metadata"] = meta
        return line


def _other_model(comp: Completion, model: str) -> bool:
    """True when the response names a model that is not the run's (a server that switched
    models mid-run, a proxy routing elsewhere); a response without ``model`` is the run's."""
    return comp.model is not None and comp.model != model


# --- the run ---------------------------------------------------------------------------------
async def _open_pool(opts: GenerateOptions) -> EndpointPool:
    """Clients for every endpoint, checked against ``--model`` on ``/v1/models``."""
    eps = [
        make_endpoint(u, opts.concurrency, opts.api_key, opts.max_response_bytes)
        for u in opts.endpoints
    ]
    timeout = min(opts.request_timeout, 30.0)
    answers = await asyncio.gather(
        *(list_models(ep, timeout) for ep in eps), return_exceptions=True
    )
    up = []
    for ep, models in zip(eps, answers, strict=True):
        if isinstance(models, TransientError):
            continue
        if isinstance(models, BaseException):
            raise models
        ep.served_models = models
        up.append(ep)
    if not up:
        details = "; ".join(f"{ep.url}: {err}" for ep, err in zip(eps, answers, strict=True))
        await _close_clients(eps)
        raise Unreachable(f"no endpoint answered GET /v1/models ({details})")
    try:
        model = _served_model(opts.model, up)
    except GenerateUsageError:
        await _close_clients(eps)
        raise
    pool = EndpointPool(eps, model, opts.health_interval, opts.give_up_after)
    for ep in eps:
        if ep not in up:
            pool.mark_down(ep)
    return pool


async def _close_clients(eps: list[Endpoint]) -> None:
    for ep in eps:
        await ep.aclose()


def _served_model(wanted: str | None, up: list[Endpoint]) -> str:
    """The model every reachable endpoint must serve: ``--model``, or the one they all serve."""
    if wanted is not None:
        for ep in up:
            if wanted not in ep.served_models:
                raise GenerateUsageError(
                    f"{ep.url} serves {ep.served_models}, not --model {wanted!r}"
                )
        return wanted
    names = {tuple(ep.served_models) for ep in up}
    if len(names) != 1 or len(up[0].served_models) != 1:
        listing = ", ".join(f"{ep.url}: {ep.served_models}" for ep in up)
        raise GenerateUsageError(
            f"endpoints do not serve exactly one common model ({listing}); pass --model"
        )
    return up[0].served_models[0]


def _resume(opts: GenerateOptions, result: GenerateResult) -> IdRegistry:
    """Keys of the rows already done (in either file), after cutting torn tails."""
    errs = errors_path(opts.out)
    if opts.retry_errors and errs.exists():
        found = recover(errs)
        if any(found.reasons.get(r) for r in RETRYABLE_REASONS):
            drop_ids(errs, _ids_with_reasons(errs, RETRYABLE_REASONS))
    done = IdRegistry()
    for path in (opts.out, errs):
        found = recover(path)
        result.torn_bytes += found.torn_bytes
        for i in found.ids:
            done.claim(i)
    return done


def _ids_with_reasons(path: Path, wanted: frozenset[str]) -> set[str]:
    ids = set()
    with path.open("rb") as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("reason") in wanted:
                ids.add(obj["id"])
    return ids


def api_key_from_env() -> str | None:
    """The API key from ``DRAFTSET_API_KEY`` or ``OPENAI_API_KEY`` (None when neither is set)."""
    for name in API_KEY_ENV:
        if os.environ.get(name):
            return os.environ[name]
    return None


async def run_generate(opts: GenerateOptions, progress: ProgressFn | None = None) -> GenerateResult:
    """Answer every row not done yet; returns counts (``aborted`` set when it had to stop).

    Holds ``OUT``'s lock for the whole run (`StoreError` at once when another run holds it),
    and refuses (`GenerateUsageError`) to resume answers made with other settings or another
    model unless ``opts.restart``."""
    t0 = time.monotonic()
    result = GenerateResult(opts.out, errors_path(opts.out))
    _check_out_apart(opts)  # never read back, never removed by --restart: before anything
    check_output_path(opts.out)  # /dev/null, a FIFO, an unwritable path: one line, exit 2
    _previous_run(opts)  # a file generate did not write is refused before a lock file is made
    with RunLock(opts.out):
        previous = _previous_run(opts)
        pool = await _open_pool(opts)
        try:
            if opts.restart:
                _remove_previous(opts.out)
                previous = None
            run_file = _check_and_record(opts, pool, previous)
            result.total_rows = sum(count_rows(s) for s in opts.sources)
            done = _resume(opts, result)
        except BaseException:
            await pool.close()
            raise
        result.model = pool.model
        runner = _Runner(opts, pool, result)
        runner.run_file = run_file
        runner.progress = progress
        try:
            await _drive(runner, opts, done)
        except NoEndpoint as exc:
            result.aborted = str(exc)
        finally:
            runner.out.close()
            runner.errors.close()
            await pool.close()
            result.ejections = {ep.url: ep.ejections for ep in pool.endpoints if ep.ejections}
            result.seconds = time.monotonic() - t0
    return result


def _check_out_apart(opts: GenerateOptions) -> None:
    """``--out`` and the files beside it that generate writes are no source, not inside a
    source folder (build's check): ``--restart`` would delete the input, a rerun would read
    its own answers (and run file) back as rows."""
    # lazy: build's preflight (and the template module it imports) only when a run starts
    from draftset.config.preflight import check_apart_from_sources, local_sources

    sources = local_sources(opts.sources)
    for path in (opts.out, errors_path(opts.out), run_path(opts.out), lock_path(opts.out)):
        check_apart_from_sources("--out", path, sources)


def _previous_run(opts: GenerateOptions) -> dict[str, Any] | None:
    """What the answers file beside ``opts.out`` was generated with (None: nothing to resume).

    Refuses (`GenerateUsageError`) a file that `generate` did not write, also with --restart.
    """
    out, errs = opts.out, errors_path(opts.out)
    present = [p for p in (out, errs) if p.exists() and p.stat().st_size > 0]
    run = read_run(out)
    if present and run is None:
        run = _legacy_run(out, errs)  # answers of a draftset before the run file, or not ours
    return run if present else None


def _remove_previous(out: Path) -> None:
    """``--restart``: remove the previous run's output, errors and run file (checked to be
    `generate`'s by `_previous_run`), saying so on stderr."""
    removed = [p for p in (out, errors_path(out), run_path(out)) if p.exists()]
    for p in removed:
        p.unlink()
    if removed:
        names = ", ".join(str(p) for p in removed)
        print(f"draftset: --restart: removed the previous run's {names}", file=sys.stderr)


def _legacy_run(out: Path, errs: Path) -> dict[str, Any]:
    """Settings read back from the first output line of a file without a run file; a file whose
    lines are not `generate`'s is refused (never appended to, never removed)."""
    try:
        first = first_line(out)
        first_error = first_line(errs)
    except OSError as exc:
        raise GenerateUsageError(f"cannot read {out}: {exc}") from None
    meta = (first or {}).get("metadata")
    ours_out = first is None or (
        isinstance(meta, dict) and isinstance(meta.get("sampling"), dict) and "answers" in meta
    )
    ours_err = first_error is None or isinstance(first_error.get("reason"), str)
    if not (ours_out and ours_err) or (first is None and first_error is None):
        raise GenerateUsageError(
            f"{out} exists and was not written by draftset generate "
            f"(no {run_path(out).name}); choose another --out"
        )
    if not isinstance(meta, dict):
        return {"legacy": True, "settings": None, "model": None}
    kwargs = dict(meta.get("chat_template_kwargs") or {})
    kwargs.pop("enable_thinking", None)
    return {
        "legacy": True,
        "settings": {"sampling": meta.get("sampling"), "chat_template_kwargs": kwargs},
        "model": meta.get("model"),
    }


def _check_and_record(
    opts: GenerateOptions, pool: EndpointPool, previous: dict[str, Any] | None
) -> dict[str, Any]:
    """Refuse to resume answers made with other settings or another model; write the run file."""
    settings = opts.settings()
    root = next((ep.model_roots.get(pool.model) for ep in pool.endpoints if ep.model_roots), None)
    reported: list[str] = []
    if previous is not None:
        changes = []
        old_model = previous.get("model")
        if old_model is not None and old_model != pool.model:
            changes.append(f"model {old_model!r} -> {pool.model!r}")
        old_root = previous.get("model_root")
        if old_root and root and old_root != root:
            changes.append(f"model weights {old_root!r} -> {root!r}")
        old = previous.get("settings")
        if old is not None:
            old = dict(old)
            new = {k: v for k, v in settings.items() if k in old or not previous.get("legacy")}
            # a source read another way is a change; a source added or left out is not
            old_inputs, new_inputs = old.pop("inputs", None) or {}, new.pop("inputs", {})
            if isinstance(old_inputs, dict):
                shared = old_inputs.keys() & new_inputs.keys()
                old["inputs"] = {k: old_inputs[k] for k in shared}
                new["inputs"] = {k: new_inputs[k] for k in shared}
            changes += _differences(old, new)
        if changes:
            raise GenerateUsageError(
                f"{opts.out} holds answers generated with other settings: {'; '.join(changes)}. "
                "Rerun with the same settings to resume, or add --restart to discard them"
            )
        reported = list(previous.get("reported_models") or [])
    run = {
        "model": pool.model,
        "model_root": root,
        "reported_models": reported,
        "settings": settings,
        "endpoints": [ep.url for ep in pool.endpoints],
    }
    write_run(opts.out, run)
    return run


def _differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """``name old -> new`` for every setting that changed (nested keys joined with dots; the
    sampling options named by themselves, as on the command line)."""
    out = []
    for key in sorted(old.keys() | new.keys()):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        name = key if key == "sampling" or not prefix else f"{prefix}{key}"
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, "" if key == "sampling" else f"{name}.")
        else:
            out.append(f"{name} {a!r} -> {b!r}")
    return out


async def _drive(runner: _Runner, opts: GenerateOptions, done: IdRegistry) -> None:
    """Feed jobs to a fixed set of workers through a small queue (memory stays bounded).

    A worker that fails (e.g. `NoEndpoint`) cancels the feeding loop, which then raises that
    failure: no polling of the workers per row (that cost grew with the concurrency)."""
    workers = opts.concurrency * len(opts.endpoints)
    queue: asyncio.Queue[Job | None] = asyncio.Queue(maxsize=min(2 * workers, 4096))
    result = runner.result
    feeder = asyncio.current_task()
    failures: list[BaseException] = []

    async def worker() -> None:
        try:
            while (job := await queue.get()) is not None:
                await runner.answer(job)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            if not failures and feeder is not None:
                feeder.cancel()
            failures.append(exc)
            raise

    # started as jobs arrive, up to ``workers``: a large concurrency costs only what is used
    tasks: list[asyncio.Task[None]] = []
    try:
        for item in iter_inputs(opts.sources):
            key = item.id if isinstance(item, Job) else item["id"]
            if key in done:
                result.skipped += 1
                continue
            if isinstance(item, dict):
                runner.fail(item)
                continue
            if len(tasks) < workers:
                tasks.append(asyncio.create_task(worker()))
            await queue.put(item)
        for _ in tasks:
            await queue.put(None)
        await asyncio.gather(*tasks)
    except asyncio.CancelledError:
        if failures:  # cancelled by a failing worker, not from outside
            cur = asyncio.current_task()
            if cur is not None:
                cur.uncancel()
            raise failures[0] from None
        raise
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# --- command line ---------------------------------------------------------------------------
GENERATE_HELP = """\
Have the target model answer prompts through OpenAI-compatible servers (vLLM, SGLang,
transformers serve), turn by turn, crash-safe: rerun the same command to resume.

SOURCE is anything `draftset build` reads, e.g. its DIR/prompts.jsonl, or a build recipe
(its sources with their format, fields and preset). The API key is read from DRAFTSET_API_KEY
or OPENAI_API_KEY unless --api-key is given. Rows that already have
answers keep their system/user turns and get every assistant turn regenerated. Output: one
conversation per line in OUT, errors with a reason code in OUT.errors.jsonl (see docs/generate.md).
"""


def register_cli(subparsers: Any) -> None:
    """Add the ``generate`` subcommand (argparse) to ``draftset``'s subparsers."""
    g = subparsers.add_parser(
        "generate",
        help="answer prompts with the target model through OpenAI-compatible servers",
        description=GENERATE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("inputs", nargs="+", metavar="SOURCE")
    _add_endpoint_options(g)
    _add_source_options(g)
    _add_retry_options(g)
    _add_sampling_options(g)
    _add_output_options(g)
    g.set_defaults(handler=cmd_generate)


def _add_endpoint_options(g: argparse.ArgumentParser) -> None:
    """The servers, the model they serve, the key, and the output file."""
    g.add_argument(
        "--endpoint",
        action="append",
        required=True,
        metavar="URL",
        help="server base URL, e.g. http://127.0.0.1:8000/v1 (repeatable)",
    )
    g.add_argument("--out", required=True, help="output JSONL (errors go to OUT.errors.jsonl)")
    g.add_argument("--model", help="served model name (default: the one /v1/models lists)")
    g.add_argument(
        "--api-key",
        help="bearer token sent to the endpoints; better set DRAFTSET_API_KEY or OPENAI_API_KEY "
        "(read when this is not given) so it stays out of the shell history and process list",
    )


def _add_source_options(g: argparse.ArgumentParser) -> None:
    """How the sources' rows are read, as for build."""
    g.add_argument(
        "--format",
        choices=list(FORMATS),
        help="force the row shape, as for build (default: detected per row)",
    )
    g.add_argument(
        "--field",
        action="append",
        metavar="CANONICAL=COLUMN",
        help="map a column to a canonical field, as for build, e.g. instruction=text (repeatable)",
    )
    g.add_argument(
        "--preset",
        help="column layout of a known public set, as for build (openorca, ultrachat-200k, "
        "xlam-function-calling-60k, ...; see docs/mixtures.md)",
    )


def _add_retry_options(g: argparse.ArgumentParser) -> None:
    """Concurrency, deadlines, retries and endpoint health."""
    g.add_argument(
        "--concurrency", type=int, default=16, help="requests in flight per endpoint (default 16)"
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="whole-request deadline (default 600)",
    )
    g.add_argument(
        "--max-retries", type=int, default=6, help="retries of a failed request (default 6)"
    )
    g.add_argument(
        "--backoff",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="base of the exponential backoff with jitter (default 0.5)",
    )
    g.add_argument(
        "--backoff-cap",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="longest backoff (default 30)",
    )
    g.add_argument(
        "--health-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how often an ejected endpoint is probed (default 5)",
    )
    g.add_argument(
        "--give-up-after",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="stop (exit 1, resumable) when no endpoint is healthy this long (default 600)",
    )


def _add_sampling_options(g: argparse.ArgumentParser) -> None:
    """What each request asks of the model."""
    unset = "default: not sent, the server's own"
    g.add_argument(
        "--temperature", type=float, help=f"sampling temperature sent with each request ({unset})"
    )
    g.add_argument("--top-p", type=float, help=f"nucleus sampling top_p ({unset})")
    g.add_argument("--top-k", type=int, help=f"top_k sampling, e.g. 20 ({unset})")
    g.add_argument(
        "--max-tokens",
        type=int,
        help="longest answer in tokens; a cut answer goes to the errors file unless --keep-length"
        f" ({unset}: vLLM's is the context left)",
    )
    g.add_argument("--seed", type=int, help="sent with each request; also seeds --thinking mix:F")
    g.add_argument("--extra-body", metavar="JSON", help="JSON object merged into each request body")
    g.add_argument(
        "--chat-template-kwargs", metavar="JSON", help="JSON object sent as chat_template_kwargs"
    )
    g.add_argument(
        "--thinking",
        metavar="on|off|mix:F",
        help="enable_thinking per row; mix:F turns it on for a seeded fraction F (default on)",
    )
    g.add_argument(
        "--return-token-ids",
        action="store_true",
        help="ask for token ids (vLLM return_token_ids) and keep them in metadata",
    )


def _add_output_options(g: argparse.ArgumentParser) -> None:
    """What is kept, retried or discarded, and progress."""
    g.add_argument(
        "--keep-length",
        action="store_true",
        help="keep answers cut at max_tokens in the output (flagged), not in the errors file",
    )
    g.add_argument(
        "--retry-errors",
        action="store_true",
        help=f"retry rows whose error is {' / '.join(sorted(RETRYABLE_REASONS))}",
    )
    g.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="the target's tokenizer folder: a special token's text (<|im_end|>) ending an"
        " answer is cut (a leaked stop token), anywhere else it fails the row"
        " special_token_in_answer",
    )
    g.add_argument(
        "--max-response-bytes",
        type=int,
        default=DEFAULT_MAX_RESPONSE_BYTES,
        metavar="N",
        help="largest response body, also after gzip/deflate decoding; a larger one is that "
        f"row's error response_too_large (default {DEFAULT_MAX_RESPONSE_BYTES:,} = 32 MiB)",
    )
    g.add_argument(
        "--restart",
        action="store_true",
        help="discard the answers of an earlier run on this --out (its output, errors and run "
        "file only; refused for a file draftset did not write) instead of resuming",
    )
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def options_from_args(args: argparse.Namespace) -> GenerateOptions:
    """Validated options; raises `GenerateUsageError` with a one-line message."""
    fields = parse_fields(args.field)  # RecipeError (exit 2) for a bad --field or recipe
    if len(args.inputs) == 1 and args.inputs[0].endswith((".yaml", ".yml")):
        sources = _recipe_sources(Path(args.inputs[0]), args)
    else:
        sources = [Source(source_name(Path(p)), Path(p), args.format, fields) for p in args.inputs]
    sources = unique_names(sources)
    for s in sources:
        if not s.path.exists() and not str(s.path).startswith(HUB_PREFIX):
            raise GenerateUsageError(f"source not found: {s.path}")
    if args.preset:
        apply_preset(args.preset)  # raises UnknownPresetError (exit 2) for an unknown name
        for s in sources:
            s.preset = args.preset
    extra = _json_object(args.extra_body, "--extra-body")
    clash = sorted(RESERVED_BODY_KEYS & extra.keys())
    if clash:
        raise GenerateUsageError(f"--extra-body may not set {clash}: use the dedicated options")
    kwargs = _json_object(args.chat_template_kwargs, "--chat-template-kwargs")
    thinking = _thinking(args.thinking, kwargs)
    out = Path(args.out)
    if out.is_dir():
        raise GenerateUsageError(f"--out {out} is a folder; give a .jsonl file")
    opts = GenerateOptions(
        sources=sources,
        endpoints=list(args.endpoint),
        out=out,
        model=args.model,
        api_key=args.api_key or api_key_from_env(),
        concurrency=args.concurrency,
        request_timeout=args.request_timeout,
        max_retries=args.max_retries,
        backoff_base=args.backoff,
        backoff_cap=args.backoff_cap,
        health_interval=args.health_interval,
        give_up_after=args.give_up_after,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_tokens=args.max_tokens,
        seed=args.seed,
        extra_body=extra,
        chat_template_kwargs=kwargs,
        thinking=thinking,
        keep_length=args.keep_length,
        return_token_ids=args.return_token_ids,
        retry_errors=args.retry_errors,
        special_tokens=special_tokens_of(args.tokenizer),
        max_response_bytes=args.max_response_bytes,
        restart=args.restart,
    )
    _check_numbers(opts)
    return opts


def _recipe_sources(path: Path, args: argparse.Namespace) -> list[Source]:
    """The sources of a `build` recipe, each with its own format, fields and preset. Selection
    (weights, counts, max_samples, mix, dedup, decontamination) is build's: generate answers
    every row, and says so when the recipe selects."""
    if args.format or args.field or args.preset:
        raise GenerateUsageError(
            "with a recipe, give format / fields / preset per source in the recipe"
        )
    recipe = load_recipe(path)
    sources: list[Source] = recipe.get("sources") or []
    if not sources:
        raise GenerateUsageError(f"recipe {path} lists no sources")
    selects = [k for k in ("max_samples", "mix", "decontaminate") if recipe.get(k)]
    selects += ["weight/count"] if any(s.weight or s.count for s in sources) else []
    if selects:
        print(
            f"draftset: note: generate answers every row of the recipe's sources; its "
            f"selection ({', '.join(selects)}) applies when the set is built",
            file=sys.stderr,
        )
    return sources


def special_tokens_of(folder: str | None, strict: bool = True) -> tuple[str, ...]:
    """The texts of a tokenizer folder's special tokens (``tokenizer.json``): --tokenizer, and
    `run`'s tokenizer (``strict=False``: a hub id or a folder without the file gives none)."""
    if folder is None:
        return ()
    path = Path(folder).expanduser() / "tokenizer.json"
    try:
        from tokenizers import Tokenizer  # lazy: only with a tokenizer

        added = Tokenizer.from_file(str(path)).get_added_tokens_decoder().values()
    except Exception as exc:
        if not strict:
            return ()
        raise GenerateUsageError(f"--tokenizer: cannot read {path}: {exc}") from exc
    return tuple(sorted(t.content for t in added if t.special))


def _json_object(text: str | None, what: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise GenerateUsageError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise GenerateUsageError(f"{what} must be a JSON object")
    return obj


def _thinking(flag: str | None, kwargs: dict[str, Any]) -> str:
    """``on`` / ``off`` / ``mix:F``; ``enable_thinking`` in the template kwargs counts as a flag."""
    if "enable_thinking" in kwargs:
        given = "on" if kwargs.pop("enable_thinking") else "off"
        if flag is not None and flag != given:
            raise GenerateUsageError(
                f"--thinking {flag} contradicts enable_thinking in --chat-template-kwargs"
            )
        return given
    flag = flag or "on"
    if flag in ("on", "off"):
        return flag
    kind, _, value = flag.partition(":")
    try:
        fraction = float(value)
    except ValueError:
        fraction = -1.0
    if kind != "mix" or not 0.0 <= fraction <= 1.0:
        raise GenerateUsageError(
            f"--thinking must be on, off or mix:F with 0 <= F <= 1, not {flag!r}"
        )
    return flag


def _check_numbers(o: GenerateOptions) -> None:
    if o.concurrency < 1 or o.max_retries < 0:
        raise GenerateUsageError("--concurrency must be >= 1 and --max-retries >= 0")
    if problem := concurrency_problem(o.concurrency, len(o.endpoints), "--concurrency"):
        raise GenerateUsageError(problem)
    if min(o.request_timeout, o.health_interval, o.give_up_after) <= 0 or o.backoff_base < 0:
        raise GenerateUsageError("timeouts and intervals must be > 0, --backoff >= 0")
    if o.max_tokens is not None and o.max_tokens < 1:
        raise GenerateUsageError("--max-tokens must be >= 1")
    if o.max_response_bytes < 1024:
        raise GenerateUsageError("--max-response-bytes must be >= 1024")
    for url in o.endpoints:
        if not url.startswith(("http://", "https://")):
            raise GenerateUsageError(f"--endpoint {redact_url(url)!r} is not an http(s) URL")


def cmd_generate(args: argparse.Namespace) -> int:
    """Run the job from parsed arguments; 0 done (errors counted), 1 could not run, 2 bad args."""
    opts = options_from_args(args)
    show = not args.no_progress and sys.stderr.isatty()
    try:
        with progress(enabled=show) as update:
            result = asyncio.run(run_generate(opts, update))
    except KeyboardInterrupt:
        print("draftset: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    print_summary(result)
    if result.aborted:
        print(
            f"draftset: stopped early: {result.aborted}; rerun the same command to resume",
            file=sys.stderr,
        )
        return EXIT_FAIL
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Standalone ``python -m draftset.generation.job``: the CLI's parser and exit codes."""
    from draftset.cli import main as cli_main  # lazy: cli imports this module for its command

    return cli_main(["generate", *(sys.argv[1:] if argv is None else argv)])


main_for_tests = main


if __name__ == "__main__":
    sys.exit(main())
