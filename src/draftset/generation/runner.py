"""One row answered: the request bodies, special tokens in answers, the row's one output or
error line."""

from __future__ import annotations

import random
import re
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from draftset.core.reasons import SPECIAL_TOKEN_IN_ANSWER
from draftset.core.rules import special_token_in_answer, special_token_pattern
from draftset.generation.dialog import (
    Dialog,
    Job,
    run_dialog,
)
from draftset.generation.http import (
    ABORTED,
    RESPONSE_TOO_LARGE,
    Completion,
    EndpointPool,
    EndpointRefused,
    FinalError,
    NoEndpoint,
    RetriesExhausted,
    RetryPolicy,
    complete,
)
from draftset.generation.inputs import error_line
from draftset.generation.options import GenerateOptions
from draftset.generation.outcomes import (
    HTTP_4XX,
    INTERNAL_ERROR,
    INVALID_RESPONSE,
    LENGTH,
    MODEL_MISMATCH,
    RETRIES_EXHAUSTED,
    TOOL_MISMATCH,
    UNFINISHED,
    WRITTEN,
    GenerateResult,
    ProgressFn,
)
from draftset.generation.store import (
    LineWriter,
    WriteFailed,
    errors_path,
    run_path,
    write_run,
)
from draftset.mask.ambient import now_iso

OTHER_MODEL_STOP = 20
"""Answers in a row from another model than the run's after which the run stops: each row was
asked and its answer thrown away (`model_mismatch`), a whole run of GPU time for error lines."""


class AnswersFromAnotherModel(EndpointRefused):
    """`OTHER_MODEL_STOP` answers in a row named another model: the run stops, resumable."""


# --- one row ---------------------------------------------------------------------------------
class Runner:
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
        self.other_model_streak = 0  # model_mismatch answers since the last written one
        pool.throttling.notify = self._throttling
        self.run_file: dict[str, Any] | None = None  # rewritten when a new model name is reported
        self.special = special_token_pattern(set(opts.special_tokens))
        self.special_at_end = (
            re.compile(f"(?:{self.special.pattern})\\Z") if self.special is not None else None
        )
        # stop token ids the request sets that are not the model's own ends (special tokens):
        # an answer one of them ended is the server's cut (docs/generate.md)
        asked = opts.extra_body.get("stop_token_ids")
        special = set(opts.special_token_ids)
        self.cut_ids = frozenset(
            i
            for i in (asked if isinstance(asked, list) else ())
            if type(i) is int and i not in special
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
        if "reasoning_effort" in kwargs and "reasoning_effort" not in body:
            # vLLM's harmony render (gpt-oss) reads the effort from the request's own field and
            # ignores chat_template_kwargs; build renders with the kwargs recorded per row
            body["reasoning_effort"] = kwargs["reasoning_effort"]
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
        except FinalError as exc:  # a 4xx, a too-large body: requests all the same
            self._count(exc.attempts)
            raise
        self._count(comp.attempts, comp)
        comp.requested_stop = comp.stop_token is not None and comp.stop_token in self.cut_ids
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
        leak = special_token_in_answer([{**msg, "role": "assistant"}], self.special)
        if leak is not None:  # in a tool call: never the end of the answer, nothing to cut
            raise FinalError(
                SPECIAL_TOKEN_IN_ANSWER,
                f"the answer's {leak[1]} holds the text of special token {leak[2]!r}",
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
        """Answer one row and write its one line (output or error). `NoEndpoint`,
        `EndpointRefused` and `WriteFailed` propagate: the rows not done are left for the next
        run. Any other exception met on this row (a draftset bug: the replay of glaive's tool
        rows raised `KeyError`) is that row's error `generate_internal_error`, and the run
        goes on: it ended the whole run, and every rerun again at the same row."""
        try:
            line, failed = await self._outcome(job)
        except (NoEndpoint, EndpointRefused, WriteFailed):
            raise
        except Exception as exc:  # a bug met on this row: its error line, not the run's end
            line, failed = _internal_error(job, exc), True
        if failed:
            self.fail(line, job)
            self._stop_on_other_model(line)
            return
        try:
            self.out.write(line)
        except UnicodeEncodeError:  # parse_completion refuses such text; never write it anyway
            msg = "the answer holds text that is not valid Unicode (a lone surrogate)"
            self.fail(error_line(job.id, job.source, job.row, INVALID_RESPONSE, msg), job)
            return
        self._note_model(line["metadata"]["model"])
        self.other_model_streak = 0
        self.result.outcomes[WRITTEN] += 1
        self._tick()

    async def _outcome(self, job: Job) -> tuple[dict[str, Any], bool]:
        """The row's one line: (its answer line, False) or (its error line, True)."""
        kwargs, thinking = self.kwargs_for(job)
        asked_at = now_iso()  # what the server's strftime_now reads, for build to render with
        try:
            dialog = await run_dialog(job, lambda msgs: self.ask(msgs, job, kwargs))
        except FinalError as exc:
            if exc.kind in (RESPONSE_TOO_LARGE, SPECIAL_TOKEN_IN_ANSWER):
                return error_line(job.id, job.source, job.row, exc.kind, str(exc)), True
            line = error_line(job.id, job.source, job.row, HTTP_4XX, str(exc), status=exc.status)
            return line, True
        except RetriesExhausted as exc:
            reason = {"invalid_response": INVALID_RESPONSE, ABORTED: UNFINISHED}.get(
                exc.last.kind, RETRIES_EXHAUSTED
            )
            extra = {"error_kind": exc.last.kind, "attempts": exc.attempts}
            return error_line(job.id, job.source, job.row, reason, str(exc), **extra), True
        if dialog.stop and not (dialog.stop == LENGTH and self.opts.keep_length):
            extra: dict[str, Any] = {"answers": len(dialog.completions)}
            if dialog.stop == TOOL_MISMATCH:
                extra["messages"] = dialog.messages  # what the model did, to inspect
            stop, why = dialog.stop, dialog.stop_message
            if stop == LENGTH:
                why = self._length_detail(dialog.completions[-1], why, extra)
            return error_line(job.id, job.source, job.row, stop, why, **extra), True
        model = self.pool.model
        other = next((c.model for c in dialog.completions if _other_model(c, model)), None)
        if other is not None:  # a drafter learns its target: never another model's answer
            self._note_model(other)
            msg = f"answered by {other!r}, not this run's model {model!r}"
            return error_line(job.id, job.source, job.row, MODEL_MISMATCH, msg, model=other), True
        return self.record(job, dialog, kwargs, thinking, asked_at), False

    def _length_detail(self, comp: Completion, why: str, extra: dict[str, Any]) -> str:
        """A ``length`` line's tokens generated and limit (``completion_tokens``,
        ``max_tokens``: None when none was sent, so the server's own default cut it)."""
        limit = self.sampling.get("max_completion_tokens", self.sampling.get("max_tokens"))
        tokens = comp.usage.get("completion_tokens")
        extra["completion_tokens"], extra["max_tokens"] = tokens, limit
        made = f"{tokens:,} tokens generated" if tokens is not None else "tokens not reported"
        if limit is not None and type(tokens) is int and type(limit) is int and tokens < limit:
            return (
                f"{why} ({made}, fewer than max_tokens {limit}: the server's own limit cut it,"
                " its context full, vLLM's --max-model-len or SGLang's --context-length?)"
            )
        if limit is not None:
            return f"{why} ({made}; max_tokens {limit})"
        return (
            f"{why} ({made}; no max_tokens was sent: the server's own limit, e.g. vLLM's"
            " max_new_tokens from the model's generation_config.json or what the context"
            " leaves; set --max-tokens)"
        )

    def _stop_on_other_model(self, line: dict[str, Any]) -> None:
        """Stop the run (`AnswersFromAnotherModel`) when `OTHER_MODEL_STOP` answers in a row
        came from another model than the run's (a written answer breaks the row)."""
        if line["reason"] != MODEL_MISMATCH:
            return
        self.other_model_streak += 1
        if self.other_model_streak >= OTHER_MODEL_STOP:
            raise AnswersFromAnotherModel(
                f"the last {self.other_model_streak} answers came from {line['model']!r}, not"
                f" this run's model {self.pool.model!r} (a proxy routing elsewhere, a server"
                " restarted with another model): each was written as a model_mismatch error"
                " line; serve the run's model again, then rerun with --retry-errors to ask"
                " those rows again"
            )

    def _note_model(self, reported: str) -> None:
        """Keep every model name the server reported in its answers in the run file."""
        run = self.run_file
        if run is not None and reported not in run["reported_models"]:
            run["reported_models"].append(reported)
            try:
                write_run(self.opts.out, run)
            except OSError as exc:  # a full disk: stop, resumable (`WriteFailed`)
                raise WriteFailed(run_path(self.opts.out), exc) from None

    def fail(self, line: dict[str, Any], job: Job | None = None) -> None:
        """Write an error line; for a row that was asked about, with its input digest (a
        resume tries a changed row again instead of keeping its old error)."""
        if job is not None:
            line["input_digest"] = job.input_digest()
        self.errors.write(line)
        self.result.outcomes[line["reason"]] += 1
        self.result.examples.setdefault(line["reason"], str(line.get("message", "")))
        self._tick()

    def _throttling(self) -> None:
        """A throttle wait started or ended: the progress line says how many wait."""
        t, r = self.pool.throttling, self.result
        r.throttled_now, r.throttle_waits = t.waiting, t.waits
        r.throttled_seconds, r.throttle_last = t.seconds, t.last
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
            "input_digest": job.input_digest(),  # a resume refuses the row edited under its id
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
        # which stop token ended each answer, where the server names it (vLLM's stop_reason,
        # SGLang's matched_stop; vLLM's null: the tokenizer's EOS): build makes an answer that
        # ended on another token than the template writes after it context
        stops: list[dict[str, Any]] = []
        for idx, c in zip(d.answer_index, d.completions, strict=True):
            if c.stop_token is not None:
                stops.append({"message": idx, "id": c.stop_token})
            elif c.stop_eos:
                stops.append({"message": idx, "eos": True})
        if stops:
            meta["stop_tokens"] = stops
        line: dict[str, Any] = {"id": job.id, "messages": d.messages}
        if job.tools:
            line["tools"] = job.tools
        line["metadata"] = meta
        return line


def _other_model(comp: Completion, model: str) -> bool:
    """True when the response names a model that is not the run's (a server that switched
    models mid-run, a proxy routing elsewhere); a response without ``model`` is the run's."""
    return comp.model is not None and comp.model != model


def _internal_error(job: Job, exc: Exception) -> dict[str, Any]:
    """The error line of a row on which draftset met a bug: what was raised and where."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {Path(where.filename).name}:{where.lineno}" if where else ""
    msg = f"{type(exc).__name__}: {exc}{at} (a draftset bug met on this row; please report it)"
    return error_line(job.id, job.source, job.row, INTERNAL_ERROR, msg)
