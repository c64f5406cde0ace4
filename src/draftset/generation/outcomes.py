"""What became of a row in `draftset generate`: the reason codes of its error lines.

Reason codes are part of the output format (the errors file's ``reason``): never rename, only
add."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from draftset.core import reasons
from draftset.generation.dialog import (
    STOP_LENGTH,
    STOP_NOTHING,
    STOP_TOOL_MISMATCH,
    STOP_UNFINISHED,
)

# --- error reason codes (errors file `reason`; part of the format: never rename, only add) ---
LENGTH = STOP_LENGTH  # an answer hit max_tokens (finish_reason "length"); kept with --keep-length
TOOL_MISMATCH = STOP_TOOL_MISMATCH  # the model's tool calls differ from the recorded ones
NOTHING_TO_GENERATE = STOP_NOTHING  # no user turn (or tool result) to answer
UNFINISHED = STOP_UNFINISHED  # the server ended an answer (abort, content filter, stop string)
HTTP_4XX = reasons.GEN_HTTP_4XX  # the server refused (4xx but 429, 408): not retried
RETRIES_EXHAUSTED = reasons.GEN_RETRIES_EXHAUSTED  # 429 / 5xx / timeouts / resets, every try
INVALID_RESPONSE = reasons.GEN_INVALID_RESPONSE  # every try: a 200 that is no completion
PRETOKENIZED = reasons.GEN_PRETOKENIZED  # input_ids rows carry no text to send
MODEL_MISMATCH = reasons.GEN_MODEL_MISMATCH  # the answer's `model` is not the run's
INTERNAL_ERROR = reasons.GEN_INTERNAL_ERROR  # a draftset bug met on the row: the run goes on
# reasons.GEN_RESPONSE_TOO_LARGE (http.py): a response body, or its gzip/deflate decoding, over
# --max-response-bytes; not retried, the connection is closed having read at most that much.
# SPECIAL_TOKEN_IN_ANSWER = "special_token_in_answer" (with --tokenizer): an answer holds a
# special token's text anywhere but at its very end (docs/generate.md); not retried.
# input rows that `normalize` rejects keep its own code (reasons.UNKNOWN_FORMAT, ...), and
# reasons.DUPLICATE_ID marks a row whose id is already used in this run.

RETRYABLE_REASONS = frozenset(
    {RETRIES_EXHAUSTED, INVALID_RESPONSE, MODEL_MISMATCH, UNFINISHED, INTERNAL_ERROR}
)
"""Error lines that ``--retry-errors`` removes so their rows are tried again."""

WRITTEN = "written"  # outcome of a row that went to the output file


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
    cooldowns: dict[str, int] = field(default_factory=dict)  # times each was cooled down
    other_weights: dict[str, str] = field(default_factory=dict)  # url -> why it was kept out
    throttled_now: int = 0  # requests waiting out a 429 / 503 now (the progress line says so)
    throttle_waits: int = 0  # 429 / 503 waited out, not counted as retries
    throttled_seconds: float = 0.0  # those waits summed
    throttle_last: str = ""  # the latest: ``HTTP 429, Retry-After 5s``
    special_stripped: int = 0  # answers whose trailing leaked stop-token text was cut
    answered_before: int = 0  # answer lines the output held when the run started
    errors_before: Counter[str] = field(default_factory=Counter)  # error lines then, by reason
    examples: dict[str, str] = field(default_factory=dict)  # reason -> its first message here

    @property
    def done(self) -> int:
        return sum(self.outcomes.values())

    @property
    def answered(self) -> int:
        """Answer lines in the output: those it held at the start and this run's."""
        return self.answered_before + self.outcomes[WRITTEN]

    @property
    def error_counts(self) -> Counter[str]:
        """Error lines by reason: those the errors file held at the start and this run's."""
        this_run = Counter({k: n for k, n in self.outcomes.items() if k != WRITTEN})
        return self.errors_before + this_run

    def nothing_answered(self) -> str | None:
        """Why no row has an answer although the sources have rows (None: some have, or the
        run stopped early, which says so itself): the run did nothing useful, exit 1."""
        if self.aborted or self.answered:
            return None
        errors = self.error_counts
        if not errors:
            return None
        reason, n = max(errors.items(), key=lambda kv: (kv[1], kv[0]))
        example = self.examples.get(reason)
        text = " ".join((example or "").split())
        text = text if len(text) <= 200 else text[:199].rstrip() + "…"  # cut: say so
        why = f" ({text})" if text else ""
        total = sum(errors.values())
        return (
            f"no row answered: all {total:,} ended as errors, commonest {n:,} {reason}{why};"
            f" see {self.errors}"
        )

    @property
    def ok(self) -> bool:
        """What `draftset generate` exits 0 on: not stopped early (errors are counted lines)."""
        return self.aborted is None


ProgressFn = Callable[[GenerateResult], None]
