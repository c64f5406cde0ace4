"""verify counts a `too_long` row as build's rule tokenizes it, exactly: no slack; and a
`template_timeout` row that renders fast here fails.

Build rejects a row under `--truncation drop` when its tokens exceed `--max-length`. verify
re-derives the row a rejected conversation would have been (the token rule of
docs/semantics.md: the tokens before each supervised generation are `tokenizer(P)`, each
generation its own tokens, the trailing context in one piece) and fails a `too_long` line whose
row fits. It allowed 2 tokens a generation of slack, so a build that rejected rows of exactly
`--max-length` tokens (an off-by-one, `>=` for `>`) wrote sets verify passed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from conftest import llama32_tokenizer_dir, trl_template

import draftset.mask.encode as encode
import draftset.mask.step as step
from draftset.checks.verify import run_verify
from draftset.config.options import BuildOptions
from draftset.core import reasons
from draftset.core.records import Reject
from draftset.mask.limits import RenderTimeout
from draftset.pipeline.build import run_build
from draftset.sources.read import Source

ROWS: list[dict[str, Any]] = [
    {
        "id": "multi",
        "messages": [
            {"role": "user", "content": "Name a prime number."},
            {"role": "assistant", "content": "Seven is a prime number."},
            {"role": "user", "content": "And an even one?"},
            {"role": "assistant", "content": "Two is the only even prime."},
            {"role": "user", "content": "Thanks."},
            {"role": "assistant", "content": "You are welcome."},
        ],
    },
    {
        "id": "short",
        "messages": [
            {"role": "user", "content": "Hi."},
            {"role": "assistant", "content": "Hello there."},
        ],
    },
]


def _build(
    tmp: Path, max_length: int, name: str, extra: tuple[dict[str, Any], ...] = (), **options: Any
) -> Path:
    """`ROWS` (and ``extra``) built with Llama-3.2's tokenizer and template into ``tmp/name``."""
    src = tmp / f"{name}.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, *extra]), encoding="utf-8")
    opts = BuildOptions(
        [Source("a", src)],
        str(llama32_tokenizer_dir()),
        tmp / name,
        chat_template_path=str(trl_template("llama3_2")),
        workers=1,
        max_length=max_length,
        **options,
    )
    return run_build(opts).out


def _lengths(out: Path) -> dict[str, int]:
    with pa.memory_map(str(out / "data-00000-of-00001.arrow")) as f:
        t = pa.ipc.open_stream(f).read_all()
    return dict(zip(t.column("id").to_pylist(), t.column("seq_len").to_pylist(), strict=True))


def _failures(out: Path) -> dict[str, list[str]]:
    results = run_verify(out, speculators=False, record=False)
    return {
        r.name: list(r.details.get("messages", []))
        for r in results
        if r.failed and r.name != "drafter_fitness"  # advice, never a failure
    }


def _off_by_one(rules_fn: Any) -> Any:
    """build's length rule with `>=` for `>`: a row of exactly --max-length tokens dropped."""

    def buggy(source, row, row_id, input_ids, loss_mask, rules):  # type: ignore[no-untyped-def]
        n = int(input_ids.shape[0])
        if rules.truncation == "drop" and n == rules.max_length:
            return Reject(source, row, row_id, reasons.TOO_LONG, f"{n} tokens > --max-length {n}")
        return rules_fn(source, row, row_id, input_ids, loss_mask, rules)

    return buggy


def test_a_row_of_exactly_max_length_rejected_as_too_long_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = _lengths(_build(tmp_path, 4096, "wide"))["multi"]
    monkeypatch.setattr(encode, "apply_length_rules", _off_by_one(encode.apply_length_rules))
    out = _build(tmp_path, n, "buggy")
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reason"]) for x in lines] == [("multi", "too_long")]
    fails = _failures(out)
    assert set(fails) == {"mask_fidelity"}, fails
    assert fails["mask_fidelity"] == [
        f"multi: rejected as too_long, but its {n:,} tokens fit --max-length {n:,}"
    ]


def test_a_row_one_token_too_long_is_rightly_rejected(tmp_path: Path) -> None:
    n = _lengths(_build(tmp_path, 4096, "wide"))["multi"]
    out = _build(tmp_path, n - 1, "right")
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reason"]) for x in lines] == [("multi", "too_long")]
    assert _failures(out) == {}


def test_a_fast_row_rejected_as_template_timeout_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timer that fires at once (a unit mix-up, an alarm left armed) drops rows as
    `template_timeout`. Whether a render times out depends on the machine, so verify never
    re-derived the reason and passed such a set; a row whose re-render here takes under 1% of
    build's `--render-timeout` fails (a build machine 100 times slower is no timeout's cause)."""
    real = step.bounded_row

    @contextmanager
    def misfiring(template: Any, conv: Any, seconds: float | None) -> Iterator[None]:
        if conv.id == "short":
            raise RenderTimeout(f"rendering took longer than --render-timeout {seconds:g} s")
        with real(template, conv, seconds):
            yield

    monkeypatch.setattr(step, "bounded_row", misfiring)
    out = _build(tmp_path, 4096, "buggy")
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reason"]) for x in lines] == [("short", "template_timeout")]
    fails = _failures(out)
    assert set(fails) == {"mask_fidelity"}, fails
    [message] = fails["mask_fidelity"]
    assert message.startswith("short: rejected as template_timeout, but its renders take ")
    assert message.endswith(" s here, under 1% of --render-timeout 5 s")


def _off_by_one_min(rules_fn: Any) -> Any:
    """build's length rules with `<=` for `<` in --min-supervised-tokens."""

    def buggy(source, row, row_id, input_ids, loss_mask, rules):  # type: ignore[no-untyped-def]
        out = rules_fn(source, row, row_id, input_ids, loss_mask, rules)
        kept = rules.max_length if rules.truncation == "truncate" else None
        supervised = int(loss_mask[:kept].sum())
        if not isinstance(out, Reject) and supervised == rules.min_supervised_tokens:
            return Reject(
                source,
                row,
                row_id,
                reasons.TOO_FEW_SUPERVISED_TOKENS,
                f"{supervised} supervised tokens < --min-supervised-tokens {supervised}",
            )
        return out

    return buggy


def test_a_cut_row_of_exactly_min_supervised_tokens_rejected_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Truncating, the row is cut 2 tokens into its last answer: it supervises the earlier
    answers and those 2 tokens, exactly --min-supervised-tokens. verify counted the answers
    inside --max-length less 2 tokens an answer (6 here), so the cut answer's tokens were not
    counted and a rejection of that row passed."""
    wide = _build(tmp_path, 4096, "wide")
    with pa.memory_map(str(wide / "data-00000-of-00001.arrow")) as f:
        t = pa.ipc.open_stream(f).read_all().to_pylist()
    mask = next(r["loss_mask"] for r in t if r["id"] == "multi")
    last_start = max(i for i in range(1, len(mask)) if mask[i] and not mask[i - 1])
    cut = last_start + 2
    need = sum(mask[:cut])
    monkeypatch.setattr(encode, "apply_length_rules", _off_by_one_min(encode.apply_length_rules))
    long_answer = {  # a row that keeps enough, so the set is not empty
        "id": "long",
        "messages": [
            {"role": "user", "content": "Count."},
            {"role": "assistant", "content": " ".join(str(k) for k in range(200))},
        ],
    }
    out = _build(
        tmp_path, cut, "buggy", (long_answer,), truncation="truncate", min_supervised_tokens=need
    )
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert ("multi", "too_few_supervised_tokens") in [(x["id"], x["reason"]) for x in lines]
    fails = _failures(out)
    assert "mask_fidelity" in fails, fails
    assert (
        f"multi: rejected as too_few_supervised_tokens, but it supervises {need:,} tokens"
        f" >= --min-supervised-tokens {need:,}"
    ) in fails["mask_fidelity"]


def test_a_row_too_long_by_its_bytes_is_never_tokenized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """build rejects a row whose UTF-8 bytes alone prove it too long without tokenizing it
    (`token_bytes_bound`); verify tokenized such a row whole to recount it: a 50 MB line took
    3.5 GB and a minute there. It now decides the line from the same bound."""
    import draftset.checks.mask as mask_checks  # lazy: the module whose recount is watched

    huge = {
        "id": "huge",
        "messages": [
            {"role": "user", "content": "q " * 20_000},
            {"role": "assistant", "content": "a " * 20_000},
        ],
    }
    out = _build(tmp_path, 256, "out", (huge,))
    lines = [json.loads(x) for x in (out / "rejects.jsonl").read_text().splitlines()]
    assert [(x["id"], x["reason"]) for x in lines] == [("huge", "too_long")]
    assert "counted from the text's length" in lines[0]["message"]
    counted: list[int] = []
    real = mask_checks._contract_layout

    def spy(tmpl: Any, exp: Any, server: Any = None) -> Any:
        counted.append(len(exp.text))
        return real(tmpl, exp, server)

    monkeypatch.setattr(mask_checks, "_contract_layout", spy)
    assert _failures(out) == {}
    assert counted == []  # without the bound: [the huge row's ~80,000 characters]
