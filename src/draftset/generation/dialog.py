"""Turn-by-turn answering of one conversation, with tool-result replay.

System and user turns are kept. Every recorded assistant turn is replaced by the model's own
answer, and each next request carries the model's earlier answers (never the recorded ones), so
the conversation is what the model would have produced. Prompt-only rows get an answer after
each user turn (MT-Bench style: several user turns in a row). A row that already has answers
also gets one after a trailing user turn or trailing tool results.

Tool calls: when the model calls the same functions, in the same order, as the recorded
assistant turn, the recorded tool results are replayed (re-keyed to the model's call ids) and
the conversation goes on. When the model calls a tool where the row holds no recorded result
(a prompt, or a recorded answer without tool calls), the conversation ends after that
assistant turn (``ends_at_tool_call``): the tool-call turn is what a drafter of an agentic
model must learn. Otherwise (the model called other tools, or none where the recorded turn
did) the recorded results cannot follow, and the conversation stops with ``tool_mismatch``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from draftset.generation.http import Completion

Message = dict[str, Any]
Ask = Callable[[list[Message]], Awaitable[Completion]]

STOP_LENGTH = "length"
STOP_TOOL_MISMATCH = "tool_mismatch"
STOP_NOTHING = "nothing_to_generate"
STOP_UNFINISHED = "unfinished"  # the server ended an answer (abort, a filter, a stop string)


@dataclass
class Job:
    """One input row to answer."""

    id: str
    source: str
    row: int
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    prompt_only: bool
    origin: dict[str, Any] = field(default_factory=dict)

    def input_digest(self) -> str:
        """A digest of what the row asks (its messages and tools as read): an answer line
        records it, so a resume can tell a row edited under its id from the one answered."""
        text = json.dumps([self.messages, self.tools], sort_keys=True, ensure_ascii=False)
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


@dataclass
class Dialog:
    """The conversation as generated so far and the completions that made it."""

    messages: list[Message] = field(default_factory=list)
    completions: list[Completion] = field(default_factory=list)
    answer_index: list[int] = field(default_factory=list)  # message index of each answer
    stop: str | None = None  # a STOP_* code when the conversation could not be finished
    stop_message: str = ""
    ends_at_tool_call: bool = False  # ended after a tool call that has no recorded result


def _plan(msgs: list[Message], prompt_only: bool) -> list[tuple[int, int]]:
    """(index where the answer goes, index after the recorded answer and its tool results).

    For a recorded assistant turn at i the answer replaces it (and the tool results after it,
    which are replayed); for a turn that wants an answer the pair is (i + 1, i + 1).
    """
    plan: list[tuple[int, int]] = []
    i = 0
    asked = False  # a user turn (or tool result) came before: there is something to answer
    while i < len(msgs):
        role = msgs[i]["role"]
        if role == "assistant":
            j = i + 1
            while j < len(msgs) and msgs[j]["role"] == "tool":
                j += 1
            if asked:  # an opener before any user turn is kept as recorded (never asked for)
                plan.append((i, j))
            i = j
            continue
        asked = asked or role in ("user", "tool")
        nxt = msgs[i + 1]["role"] if i + 1 < len(msgs) else None
        if _wants_answer(role, nxt, prompt_only):
            plan.append((i + 1, i + 1))
        i += 1
    return plan


def _wants_answer(role: str, nxt: str | None, prompt_only: bool) -> bool:
    if role == "user":
        return nxt is None or (prompt_only and nxt == "user")
    return role == "tool" and nxt is None


async def run_dialog(job: Job, ask: Ask) -> Dialog:
    """Answer every turn of ``job``; network errors propagate (the caller records them)."""
    msgs = job.messages
    plan = _plan(msgs, job.prompt_only)
    d = Dialog()
    if not plan:
        d.stop = STOP_NOTHING
        d.stop_message = "no user turn to answer"
        return d
    pos = 0
    for at, after in plan:
        d.messages.extend(msgs[pos:at])
        recorded = msgs[at] if at < after else None
        comp = await ask(list(d.messages))
        d.completions.append(comp)
        d.answer_index.append(len(d.messages))
        d.messages.append(comp.message)
        pos = after
        if comp.finish_reason == "length":
            d.stop = STOP_LENGTH
            d.stop_message = f"answer {len(d.completions)} was cut at max_tokens"
            return d
        ended = comp.server_ended()
        if ended is not None:  # never written: its end is not the model's (docs/semantics.md)
            d.stop = STOP_UNFINISHED
            d.stop_message = f"answer {len(d.completions)} {ended}, not by the model"
            return d
        if _names(comp.message) and not _names(recorded):
            d.ends_at_tool_call = True  # no result to give the model: the row ends here
            return d
        problem = _tool_problem(recorded, comp.message)
        if problem:
            d.stop, d.stop_message = STOP_TOOL_MISMATCH, problem
            return d
        if recorded is not None:
            d.messages.extend(_replay(recorded, msgs[at + 1 : after], comp.message))
    d.messages.extend(msgs[pos:])
    return d


def _names(msg: Message | None) -> list[str]:
    calls = (msg or {}).get("tool_calls") or []
    return [c["function"]["name"] for c in calls]


def _tool_problem(recorded: Message | None, generated: Message) -> str | None:
    """Why the recorded tool results cannot follow the model's answer (None: they can)."""
    want, got = _names(recorded), _names(generated)
    if want == got:
        return None
    if not want:
        return f"the model called {got} where no tool result was recorded"
    if not got:
        return f"the model answered without calling {want}, as the recorded turn did"
    return f"the model called {got}, the recorded turn called {want}"


def _replay(recorded: Message, results: list[Message], generated: Message) -> list[Message]:
    """The recorded tool results, re-keyed from the recorded call ids to the model's."""
    rec_calls = recorded.get("tool_calls") or []
    gen_calls = generated.get("tool_calls") or []
    rec_ids = [c.get("id") for c in rec_calls]
    out = []
    for k, res in enumerate(results):
        res = dict(res)
        call_id = res.get("tool_call_id")
        idx = rec_ids.index(call_id) if call_id is not None and call_id in rec_ids else k
        if idx < len(gen_calls):
            call = gen_calls[idx]
            if call.get("id"):
                res["tool_call_id"] = call["id"]
            res.setdefault("name", call["function"]["name"])
        out.append(res)
    return out
