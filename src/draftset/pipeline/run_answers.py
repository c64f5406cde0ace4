"""Stage 2 of `draftset run`: `draftset generate`'s own job answers the queue (routing,
retries, exactly once by id, resume after ``kill -9``) into ``answers.jsonl``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from draftset.core import defaults
from draftset.core.reasons import SERVER_PROMPT_DIFFERS
from draftset.core.words import fmt_counts, plural
from draftset.generation.console import progress
from draftset.generation.job import (
    ModelNotServed,
    NoCommonModel,
    Unreachable,
    run_generate,
    run_sync,
)
from draftset.generation.options import (
    GenerateOptions,
    GenerateUsageError,
    api_key_from_env,
    special_token_ids_of,
    special_tokens_of,
    split_thinking,
)
from draftset.generation.store import errors_path, recover
from draftset.pipeline.run_state import (
    KILL_ENV,
    RunFailed,
    RunOptions,
    RunState,
    RunUsageError,
    maybe_die,
)
from draftset.sources.read import Source


def recipe_api_key(api_key_env: str) -> str | None:
    """The key `run` sends: the variable the recipe names (``generate.api_key_env``), else
    DRAFTSET_API_KEY / OPENAI_API_KEY in `generate`'s order (the recipe's default names
    OPENAI_API_KEY, which read first sent another key than `generate` when both were set)."""
    if api_key_env != defaults.API_KEY_ENV:
        return os.environ.get(api_key_env) or None
    return api_key_from_env()


def generate_options(opts: RunOptions, out: Path, model: str | None) -> Any:
    """`draftset generate`'s options for the queue (keyword arguments only)."""
    g = opts.generate
    kwargs, thinking = split_thinking(
        opts.build.template_kwargs, g.thinking, "generate.thinking", "template_kwargs"
    )
    return GenerateOptions(
        sources=[Source(name="queue", path=out.parent / "queue.jsonl")],
        endpoints=list(g.endpoints),
        out=out,
        model=model,
        api_key=recipe_api_key(g.api_key_env),
        concurrency=g.concurrency,
        request_timeout=g.request_timeout,
        max_retries=g.max_retries,
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=g.top_k,
        max_tokens=g.max_tokens,
        seed=g.seed,
        extra_body=dict(g.extra_body or {}),
        chat_template_kwargs=kwargs,
        thinking=thinking,
        return_token_ids=g.return_token_ids,
        # `run --retry-errors`: generate drops those error lines at start and asks again
        retry_errors=opts.retry_errors,
        # a stop token the server leaks as text is cut, counted (docs/generate.md)
        special_tokens=special_tokens_of(opts.build.tokenizer, strict=False),
        special_token_ids=special_token_ids_of(opts.build.tokenizer, strict=False),
    )


# --- stage 2: generate ------------------------------------------------------------------------
def _pinned_model(state: RunState, answers: Path) -> str | None:
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


def answer_queue(
    opts: RunOptions, state: RunState, work: Path, say: Callable[[str], None]
) -> dict[str, Any]:
    answers = work / "answers.jsonl"
    queued = int(state.data["select"]["queued_total"])
    if queued == 0:
        say("generate: nothing to answer")
        return {"model": state.data.get("model"), "answers": 0, "errors": {}}
    pinned = _pinned_model(state, answers) or opts.generate.model
    gopts = generate_options(opts, answers, pinned)
    if pinned and not state.data.get("model"):
        state.data["model"] = pinned
        state.save()
    kill = os.environ.get(KILL_ENV) == "generate"
    with progress(enabled=opts.progress) as bar:

        def tick(result: Any) -> None:
            if bar is not None:
                bar(result)
            if kill and result.done >= 2:
                maybe_die("generate")

        try:
            result = run_sync(run_generate(gopts, tick))
        except ModelNotServed as exc:  # only a pinned model is asked for
            raise RunUsageError(
                f"model changed: this run is pinned to {pinned!r} and"
                f" {exc.wording('generate.model')}; rerun with --restart to start over with the"
                " model now served"
            ) from None
        except NoCommonModel as exc:
            raise RunUsageError(exc.wording("set generate.model")) from None
        except GenerateUsageError as exc:
            raise RunUsageError(str(exc)) from None
        except Unreachable as exc:
            raise RunFailed(f"{exc}; rerun the same command to resume") from None
    if result.model and not state.data.get("model"):
        state.data["model"] = result.model
    if result.aborted:
        state.save()
        raise RunFailed(f"generation stopped early: {result.aborted}; rerun to resume")
    if why := result.nothing_answered():  # a set of the kept rows alone is not what was asked
        state.save()
        raise RunFailed(f"generation: {why}")
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
        + (f" ({fmt_counts(done_err.reasons)})" if done_err.reasons else "")
        + f"; {plural(result.requests, 'request')} this time,"
        + f" {plural(result.skipped, 'row')} already done"
    )
    return {
        "model": state.data.get("model"),
        "answers": done_out.lines,
        "errors": dict(sorted(done_err.reasons.items())),
        "ends_at_tool_call": ends_at_tool,
        "special_tokens_stripped": stripped,
    }


# --- after the build: were the answers made from the prompts build renders? --------------------
def every_answer_differs(work: Path, out: Path, rejected: int) -> str | None:
    """One line when build rejected every answered row `server_prompt_differs` (``rejected``:
    how many rows it rejected so), else None: the server rendered other prompts than the
    recipe's tokenizer and template for every one of them (another chat template, another
    tokenizer, other template options), so none of the target's answers is in the set. A row
    of several turns counts once one of its turns is rejected so (``id#k`` with ``turns:
    each``). Cheap when no row was rejected so: the files are read only then."""
    answers, rejects = work / "answers.jsonl", out / "rejects.jsonl"
    if not rejected or not answers.is_file() or not rejects.is_file():
        return None
    with answers.open("rb") as f:
        ids = {json.loads(line)["id"] for line in f}
    differs: set[str] = set()
    with rejects.open("rb") as f:
        for line in f:
            obj = json.loads(line)
            if obj.get("reason") != SERVER_PROMPT_DIFFERS:
                continue
            rid = str(obj.get("id"))
            base, sep, _ = rid.rpartition("#")
            differs.add(rid if rid in ids or not sep else base)
    if not ids or not ids <= differs:
        return None
    return (
        f"build: every answered row ({len(ids):,}) was rejected {SERVER_PROMPT_DIFFERS}: the"
        " server's prompt token ids are never the recipe's render, so it serves another chat"
        " template or tokenizer (or other template options) than the recipe's, and none of the"
        f" target's answers is in {out}; start the server with the recipe's template and"
        " tokenizer, then rerun with --restart"
    )
