"""`verify --render-server URL`: the set proven against the engine that serves the model.

Every other check re-derives rows with draftset's own transformers render. This one asks the
serving engine itself: vLLM's ``POST /v1/chat/completions/render`` returns the token ids it would
feed the model for a chat request. For each supervised turn j of a checked row:

1. **context** — the row's tokens before the turn's supervised run equal, id for id, the
   server's prompt for ``messages[:j]`` with the generation prompt (what the model is given
   before it writes turn j);
2. **generation** — the run decodes to the text the server's render of ``messages[:j+1]``
   holds after that prompt, up to and including the first stop token;
3. **row** — the whole row decodes to the server's render of the row's messages.

A difference names the row, the turn and the first differing token position, with a decoded
window of both sides. The request carries the set's template kwargs (plus a row's own, recorded
by `generate`) and the row's tools as stored: the server normalizes them its own way, which is
what this check is for (docs/verify.md).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from draftset.checks.mask import served_template, template_shape, template_stops
from draftset.checks.records import iter_source_items, pick_rows
from draftset.config.fields import option_name, scheme_hint
from draftset.config.schema import VerifyArgs
from draftset.core.errors import UsageError
from draftset.core.records import NO_CONTENT, Conversation
from draftset.core.words import ascii_digits
from draftset.mask.reads import as_template_reads
from draftset.mask.serving import with_call_ids
from draftset.mask.template import ChatTemplate
from draftset.output.readback import CheckResult, OutputSet, Problems

RENDER_PATH = "/v1/chat/completions/render"
TIMEOUT_S = 60.0
WINDOW = 4  # tokens shown on each side of a first difference


class RenderServerError(UsageError):
    """The render server cannot be used (unreachable, not a render server): exit code 2."""


@dataclass
class RenderServer:
    """A vLLM render endpoint and the model name it serves. ``effort_field``: also send the
    kwargs' ``reasoning_effort`` as the request's own field (`for_template`)."""

    url: str
    model: str
    effort_field: bool = False

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None,
        kwargs: dict[str, Any],
        generation_prompt: bool,
        continue_final: bool = False,
    ) -> list[int]:
        """Token ids the server would feed the model (raises `RenderRefused` on a 4xx/5xx)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": generation_prompt,
            "continue_final_message": continue_final,
        }
        if kwargs:  # vLLM's mistral-common mode refuses any chat_template_kwargs, even {}
            body["chat_template_kwargs"] = kwargs
        if tools:
            body["tools"] = tools
        if self.effort_field and kwargs.get("reasoning_effort") is not None:
            body["reasoning_effort"] = kwargs["reasoning_effort"]
        data = _post(self.url + RENDER_PATH, body)
        ids = data.get("token_ids") if isinstance(data, dict) else None
        if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
            raise RenderRefused(f"no token_ids in the server's answer: {str(data)[:200]}")
        return ids


def for_template(server: RenderServer, tmpl: Any) -> RenderServer:
    """The server's requests for a set rendered by ``tmpl``. Harmony (gpt-oss under vLLM) reads
    the effort from the request's own ``reasoning_effort`` field only, so it is sent there too;
    a chat template is given ``chat_template_kwargs`` alone: vLLM 0.33 turns that field into
    the template kwarg ``enable_thinking: effort != "none"`` when the kwargs name none
    (``ChatCompletionRequest.build_chat_params``), which the set was not rendered with."""
    return replace(server, effort_field=tmpl.harmony is not None)


class RenderRefused(Exception):
    """The server answered a render request with an error (the row's message says which)."""


class Renders(Protocol):
    """What the row checks ask of a server (a `RenderServer`, or a row's memo of one)."""

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None,
        kwargs: dict[str, Any],
        generation_prompt: bool,
        continue_final: bool = False,
    ) -> list[int]: ...


class _RowRenders:
    """One row's renders, each asked of the server once: the run check and the whole-row
    check need the same finished turn (and, for templates ending a turn with the next header,
    the same next render). Every request of the row goes through here, refusals included, so
    a repeated render cannot answer differently from the first."""

    def __init__(self, server: Renders) -> None:
        self.server = server
        self.seen: dict[tuple[int, bool, bool], list[int] | RenderRefused] = {}

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[Any] | None,
        kwargs: dict[str, Any],
        generation_prompt: bool,
        continue_final: bool = False,
    ) -> list[int]:
        # within a row the messages are prefixes of one list, and tools and kwargs are fixed
        key = (len(messages), generation_prompt, continue_final)
        if key not in self.seen:
            try:
                self.seen[key] = self.server.render(
                    messages, tools, kwargs, generation_prompt, continue_final
                )
            except RenderRefused as exc:
                self.seen[key] = exc
        got = self.seen[key]
        if isinstance(got, RenderRefused):
            raise got
        return got


def _post(url: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        url,
        data=json.dumps(body, ensure_ascii=False).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise RenderRefused(f"HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RenderServerError(f"render server {url} stopped answering: {exc}") from None


def connect(url: str, timeout: float = 10.0) -> RenderServer:
    """Check the server answers and serves one model; one clear line otherwise (exit 2)."""
    base = url.rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise RenderServerError(
            f"{option_name(VerifyArgs, 'render_server')} must be an http(s) URL, got"
            f" {url!r}{scheme_hint(url)}"
        )
    try:
        with urllib.request.urlopen(base + "/v1/models", timeout=timeout) as resp:
            data = json.loads(resp.read())
        model = str(data["data"][0]["id"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise RenderServerError(
            f"render server {base} is not usable ({exc}); start one with"
            " `vllm launch render MODEL_DIR --chat-template T.jinja` (docs/verify.md)"
        ) from None
    return RenderServer(base, model)


_KINDS = (
    "context differs from the server's prompt",
    "supervised tokens differ from the server's generation",
    "the row's text differs from the server's render",
    "the server refused the row",
    "supervised run belongs to no assistant turn",
)


def _kind(message: str) -> str:
    return next((k for k in _KINDS if k in message), message.split(":")[0])


# --- comparing ----------------------------------------------------------------------------------
def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Maximal supervised runs (start, end) of a loss mask."""
    runs: list[tuple[int, int]] = []
    start = None
    for i, m in enumerate(mask.tolist()):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    if start is not None:
        runs.append((start, len(mask)))
    return runs


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _window(tmpl: ChatTemplate, ids: list[int], at: int) -> str:
    """Decoded tokens before | from the difference, and the differing ids (texts may agree)."""
    lo = max(0, at - WINDOW)
    text = repr(tmpl.decode(ids[lo:at])) + " | " + repr(tmpl.decode(ids[at : at + WINDOW]))
    return f"{text} {ids[at : at + WINDOW]}"


def _messages(tmpl: ChatTemplate, conv: Conversation) -> list[dict[str, Any]]:
    """What a client sends: the messages with inline reasoning as the template reads it, and
    a message the row gave as several text parts as those parts (the server joins or passes
    them as it does for any client: not draftset's choice)."""
    _, renders_reasoning, string_arguments, _ = template_shape(tmpl)
    asst = [i for i, m in enumerate(conv.messages) if m["role"] == "assistant"]
    msgs = as_template_reads(
        conv.messages[: asst[-1] + 1],
        conv.meta,
        False,
        renders_reasoning,
        string_arguments,
        part_lists=True,  # every row's parts as parts, tool results' too, and developer
        tool_parts=True,  # messages as developer: the server's own handling is the referee
        developer_role=True,
    )
    empty = conv.meta.get(NO_CONTENT) or {}
    return [_wire(m, i in empty) for i, m in enumerate(with_call_ids(msgs))]


def _wire(message: dict[str, Any], no_content: bool) -> dict[str, Any]:
    """The OpenAI wire form: tool-call arguments as JSON text (the server parses them back),
    each call with its ``type`` (ids and pairs from `with_call_ids`, as build gives them to
    the template), and a message the row gave no content without it again (an answer's as
    ``null``): vLLM hands a template that loops over content no parts for it, one empty part
    for ``""``."""
    out = dict(message)
    if no_content and out.get("content") == "":
        if out.get("role") == "assistant":
            out["content"] = None
        else:
            del out["content"]
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        out["tool_calls"] = [
            {
                "type": "function",
                **c,
                "function": {**c["function"], "arguments": _json_text(c["function"])},
            }
            if isinstance(c, dict) and isinstance(c.get("function"), dict)
            else c
            for c in calls
        ]
    return out


def _json_text(function: dict[str, Any]) -> str:
    args = function.get("arguments")
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _turns_of_row(rid: str, conv: Conversation, mode: str) -> list[int]:
    """Assistant message indices a row's supervised runs may belong to, in order."""
    asst = [i for i, m in enumerate(conv.messages) if m["role"] == "assistant"]
    if mode == "each":
        k = rid.rpartition("#")[2]
        return [asst[int(k)]] if ascii_digits(k) and int(k) < len(asst) else []
    if mode == "last":
        return asst[-1:]
    return [j for j in asst if j > 0]


def _turn_of_run(
    server: Renders,
    msgs: list[dict[str, Any]],
    tools: Any,
    kwargs: dict[str, Any],
    candidates: list[int],
    pointer: int,
    start: int,
    context: list[int] | None = None,
) -> tuple[int | None, list[int] | None, int]:
    """(turn, its served prompt, next candidate) of a supervised run starting at token
    ``start`` after the row's tokens ``context``: the candidate whose prompt is those tokens,
    else the first one exactly that long, else the first one at least as long (or the last):
    its context is then reported. A turn kept as context may have a prompt longer than a later
    supervised one's context (gpt-oss: analysis the later prompt drops), so the first long
    enough is not always the run's; nor is the first of that length: two prompts of a
    conversation may be as long (GLM-4.5 keeps a tool call's reasoning in the prompt of the
    answer after its result and drops it once a later user turn follows: a real tool-use row's
    prompts for turns 4 and 6 were both 1,468 tokens, and a right row failed "turn 4: context
    differs")."""
    fallback: tuple[int | None, list[int] | None, int] = (None, None, pointer)
    same_length: tuple[int | None, list[int] | None, int] | None = None
    for k in range(pointer, len(candidates)):
        j = candidates[k]
        p = server.render(msgs[:j], tools, kwargs, True)
        if len(p) == start:
            if context is None or p == context:
                return j, p, k + 1
            same_length = same_length or (j, p, k + 1)
        if fallback[0] is None and (len(p) >= start or k == len(candidates) - 1):
            fallback = (j, p, k + 1)
    return same_length or fallback


@dataclass
class _RowCheck:
    """What one row's checks share (its renders, tokens and request) and the problems they find,
    so each check takes the row and only what is its own."""

    server: _RowRenders
    tmpl: ChatTemplate
    msgs: list[dict[str, Any]]
    tools: Any
    kwargs: dict[str, Any]
    ids: list[int]
    truncated_row: bool  # cut by `--truncation truncate`: see `check_row`
    stops: tuple[str, ...]  # the template's stop texts (`template_stops`)
    problems: list[str] = field(default_factory=list)


def check_row(
    server: Renders,
    tmpl: ChatTemplate,
    conv: Conversation,
    rid: str,
    ids: list[int],
    mask: np.ndarray,
    mode: str,
    kwargs: dict[str, Any],
    truncated_row: bool = False,
) -> list[str]:
    """Problems of one row against the server's renders (empty = equal). ``truncated_row``: it was
    cut by `--truncation truncate` (it holds exactly `max_length` tokens): its last run may be
    a prefix of the server's generation and the row a prefix of its render (docs/verify.md,
    rule 5)."""
    row = _RowCheck(
        server=_RowRenders(server),
        tmpl=tmpl,
        msgs=_messages(tmpl, conv),
        tools=conv.tools,
        kwargs=kwargs,
        ids=ids,
        truncated_row=truncated_row,
        stops=template_stops(tmpl),
    )
    msgs, problems = row.msgs, row.problems
    runs = _runs(mask)
    candidates = _turns_of_row(rid, conv, mode)
    last_turn = candidates[-1] if mode == "each" and candidates else len(msgs) - 1
    try:
        pointer = 0
        for start, end in runs:
            turn, prompt, pointer = _turn_of_run(
                row.server, msgs, row.tools, kwargs, candidates, pointer, start, ids[:start]
            )
            if turn is None or prompt is None:
                problems.append(
                    f"supervised run belongs to no assistant turn (it starts at token {start})"
                )
                break
            at = _first_difference(ids[:start], prompt)
            if at is not None:
                problems.append(
                    f"turn {turn}: context differs from the server's prompt at token {at}"
                    f" (row {len(ids[:start])} tokens, server {len(prompt)}):"
                    f" row {_window(tmpl, ids, at)} vs server {_window(tmpl, prompt, at)}"
                )
                continue
            _check_run(row, turn, prompt, (start, end))
        _check_row_end(row, runs, candidates[pointer:], last_turn)
    except RenderRefused as exc:
        problems.append(f"the server refused the row: {exc}")
    return problems


def _check_run(row: _RowCheck, turn: int, prompt: list[int], span: tuple[int, int]) -> None:
    """One supervised run (tokens ``span`` of the row), whose context is the server's prompt
    for ``turn``, against the server's generation of that turn (a run the cut ends inside: a
    prefix of it)."""
    problems, server, tmpl, msgs, ids = row.problems, row.server, row.tmpl, row.msgs, row.ids
    tools, kwargs, truncated_row, stops = row.tools, row.kwargs, row.truncated_row, row.stops
    start, end = span
    cut_run = truncated_row and end == len(ids)  # the run the cut ends inside
    if tmpl.harmony is not None:
        run_ids = ids[start:end]
        if cut_run:
            want = tmpl.harmony.generation_ids(msgs[turn])
            if want[: len(run_ids)] != run_ids:
                problems.append(
                    f"turn {turn}: supervised tokens differ from the server's generation:"
                    f" tokens {start}..{end} (cut by truncation) are no prefix of it"
                )
            return
        problems.extend(_harmony_generation(tmpl, msgs[turn], run_ids, turn, stops))
        return
    full, _ = _finished(server, msgs[: turn + 1], tools, kwargs)
    served, given = tmpl.decode(full), tmpl.decode(prompt)
    run_text = tmpl.decode(ids[start:end])
    after = served[len(given) :] if served.startswith(given) else None
    if after is None:
        problems.append(f"turn {turn}: the server's turn render does not extend its prompt")
        return
    stop_end = min((k + len(s) for s in stops if (k := after.find(s)) >= 0), default=-1)
    generation = after[:stop_end] if stop_end >= 0 else after
    if stop_end < 0:  # no stop token in the render: the answer left open by the server,
        # or a template that ends a turn with the next turn's header (GLM's `<|user|>`,
        # an eos id): the stop token the model writes follows the rendered answer
        ends = _next_header(server, msgs, turn, tools, kwargs, tmpl, served, stops)
        generation = next((after + s for s in ends if run_text == after + s), after)
    if cut_run and generation.startswith(run_text.rstrip("\ufffd")):
        return  # a cut answer: a prefix (its last character may be cut in its bytes)
    if run_text != generation:
        problems.append(
            f"turn {turn}: supervised tokens differ from the server's generation:"
            f" tokens {start}..{end} spell {run_text[:80]!r}, the server's is"
            f" {generation[:80]!r}"
        )


def _check_row_end(
    row: _RowCheck, runs: list[tuple[int, int]], later_turns: list[int], last_turn: int
) -> None:
    """The row after its ``runs`` against the server's render of its conversation up to
    ``last_turn`` (under harmony: nothing after its last generation but a prefix of one of
    ``later_turns``' prompts, when cut by truncation)."""
    problems, server, tmpl, msgs, ids = row.problems, row.server, row.tmpl, row.msgs, row.ids
    tools, kwargs, truncated_row, stops = row.tools, row.kwargs, row.truncated_row, row.stops
    if tmpl.harmony is not None:
        # the server renders history, not generations: the row must end with its last
        # generation, whose context was compared above; a row cut by truncation after it
        # ends inside a later turn's context, a prefix of that turn's prompt
        if (
            runs
            and runs[-1][1] != len(ids)
            and not (
                truncated_row and _prefix_of_a_prompt(server, msgs, tools, kwargs, later_turns, ids)
            )
        ):
            problems.append(
                f"the row's text differs from the server's render (first differing token"
                f" {runs[-1][1]}: context after the last generation)"
            )
        return
    whole, open_end = _finished(server, msgs[: last_turn + 1], tools, kwargs)
    served_row, row_text = tmpl.decode(whole), tmpl.decode(ids)
    if truncated_row and served_row.startswith(row_text.rstrip("\ufffd")):
        return  # the row is the render's first `max_length` tokens' text
    if open_end or (
        msgs[last_turn].get("role") == "assistant"
        and not any(served_row.endswith(s) for s in stops)
    ):  # the row ends with the stop token the model wrote after its answer (as above)
        ends = _next_header(server, msgs, last_turn, tools, kwargs, tmpl, served_row, stops)
        ended = (served_row + s for s in ends if row_text == served_row + s)
        served_row = next(ended, "" if open_end else served_row)
    if served_row != row_text:
        at = _first_difference(ids, whole)
        where = f" (first differing token {at})" if at is not None else ""
        problems.append(f"the row's text differs from the server's render{where}")


def _prefix_of_a_prompt(
    server: Renders,
    msgs: list[dict[str, Any]],
    tools: Any,
    kwargs: dict[str, Any],
    later: list[int],
    ids: list[int],
) -> bool:
    """The row is the first tokens of the server's prompt for one of the ``later`` turns."""
    for j in later:
        p = server.render(msgs[:j], tools, kwargs, True)
        if p[: len(ids)] == ids:
            return True
    return False


def _next_header(
    server: Renders,
    msgs: list[dict[str, Any]],
    turn: int,
    tools: Any,
    kwargs: dict[str, Any],
    tmpl: ChatTemplate,
    served: str,
    stops: Any,
) -> tuple[str, ...]:
    """The stop tokens that may end answer ``turn`` whose render (``served``) has none: the
    one the server writes right after it when it renders the next message too (GLM ends a
    call with `<|observation|>`, an answer with `<|user|>`), else any (the conversation's last
    answer, or a server that renders no such header)."""
    if turn + 1 >= len(msgs):
        return tuple(stops)
    try:
        text = tmpl.decode(server.render(msgs[: turn + 2], tools, kwargs, False))
    except RenderRefused:
        return tuple(stops)
    rest = text[len(served) :] if text.startswith(served) else ""
    follows = tuple(s for s in stops if rest.startswith(s))
    return follows or tuple(stops)


def _finished(
    server: Renders, messages: list[dict[str, Any]], tools: Any, kwargs: dict[str, Any]
) -> tuple[list[int], bool]:
    """The server's render of a conversation ending with an answer, and whether that answer
    is left open. A server that refuses to render a finished answer (vLLM's mistral-common
    mode: "Expected last role User or Tool (or Assistant with prefix) for serving") renders
    it continued: the answer's tokens without the stop token the model writes after them."""
    try:
        return server.render(messages, tools, kwargs, False), False
    except RenderRefused:
        try:
            return server.render(messages, tools, kwargs, False, continue_final=True), True
        except RenderRefused:
            pass
        raise


def _harmony_generation(
    tmpl: ChatTemplate, message: dict[str, Any], run: list[int], turn: int, stops: Any
) -> list[str]:
    """gpt-oss under vLLM: the supervised tokens, read back by the harmony library's parser
    (as vLLM reads the model's output), are the row's message, and end with a stop token."""
    assert tmpl.harmony is not None
    try:
        parsed: Any = tmpl.harmony.parse_generation(run)
    except Exception as exc:  # the parser's own words: the tokens are no harmony message
        parsed = f"no harmony messages ({exc})"
    want = tmpl.harmony.expected_generation(message)
    last = tmpl.decode(run[-1:])
    if parsed == want and last in stops:
        return []
    return [
        f"turn {turn}: supervised tokens differ from the server's generation: they parse as"
        f" {str(parsed)[:160]} ending {last!r}, the row's message is {str(want)[:160]}"
    ]


def check_render_server(
    out: OutputSet,
    tmpl: ChatTemplate,
    server: RenderServer,
    sample: int | None,
    seed: int,
) -> CheckResult:
    """`render_server`: chosen rows' context, supervised tokens and text equal the server's."""
    if isinstance(server, RenderServer):
        server = for_template(server, tmpl)
    mode = str(out.options.get("turns", "all"))
    truncating = out.options.get("truncation") == "truncate"
    max_length = int(out.options.get("max_length") or -1)
    base_kwargs = dict((out.manifest.get("template") or {}).get("kwargs") or {})
    ids_col = out.ids()
    row_of_id = {rid: i for i, rid in enumerate(ids_col) if rid is not None}
    chosen, full = pick_rows(len(ids_col), sample, seed)
    chosen_set = set(chosen)
    p = Problems()
    checked = turns = 0
    for item in iter_source_items(out):
        if not isinstance(item, Conversation):
            continue
        if mode == "each":
            own = [r for r in row_of_id if r.rpartition("#")[0] == item.id]
        else:
            own = [item.id] if item.id in row_of_id else []
        recorded = item.meta.get("metadata")
        row_kwargs = recorded.get("chat_template_kwargs") if isinstance(recorded, dict) else None
        kwargs = {**base_kwargs, **(row_kwargs if isinstance(row_kwargs, dict) else {})}
        for rid in own:
            if row_of_id[rid] not in chosen_set:
                continue
            row = out.row(row_of_id[rid])
            ids = [int(i) for i in row["input_ids"]]
            checked += 1
            turns += len(_runs(row["loss_mask"]))
            truncated = truncating and len(ids) == max_length
            mask = row["loss_mask"]
            served = served_template(tmpl, item.tools)  # a named set's 'tool_use' for tools
            for msg in check_row(server, served, item, rid, ids, mask, mode, kwargs, truncated):
                p.add(_kind(msg), rid, f"{rid}: {msg}")
    # a pre-tokenized row (a set or token ids as a source) has no messages to send
    unchecked = len(chosen) - checked
    details = {"server": server.url, "rows_checked": checked, "turns_checked": turns}
    if unchecked and not checked:
        return CheckResult(
            "render_server",
            "skip",
            f"skipped: none of the {unchecked:,} rows has messages to send {server.url}"
            " (pre-tokenized rows: their source holds token ids, not a conversation)",
            details={**details, "rows_not_checked": unchecked},
        )
    scope = f"all {checked:,} rows" if full and not unchecked else f"{checked:,} rows"
    scope = scope if full else f"a seeded sample of {checked:,} rows"
    if unchecked:
        details["rows_not_checked"] = unchecked
    return p.result(
        "render_server",
        f"{scope} ({turns:,} supervised turns) equal the renders of {server.url}"
        f" (model {server.model})"
        + (
            f"; {unchecked:,} pre-tokenized rows not checked (no messages to send)"
            if unchecked
            else ""
        ),
        details,
    )
