"""`draftset run`: select as build does, answer what needs answering, rejoin, verify, resume.

The server is tests/fault_server.py (deterministic answers that quote the request, faults on
request) in a thread; the crash test runs `draftset run` in child processes that kill
themselves (SIGKILL) in the middle of each stage in turn.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fault_server import FaultServer

from draftset.api import run_options
from draftset.pipeline import run as run_module
from draftset.pipeline import run_answers, run_resume, run_select, run_state
from draftset.pipeline.run import run
from draftset.pipeline.run_state import KILL_ENV, RunUsageError

REPO = Path(__file__).resolve().parents[2]
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def _rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _sources(d: Path) -> list[dict[str, Any]]:
    d.mkdir(exist_ok=True)
    chat = _rows(
        d / "chat.jsonl",
        [
            {  # has reasoning: kept as it is
                "id": "c-keep",
                "messages": [
                    {"role": "user", "content": "Name a colour."},
                    {"role": "assistant", "content": "Blue.", "reasoning_content": "Pick one."},
                ],
            },
            {  # no reasoning under a thinking template: regenerated (missing_reasoning)
                "id": "c-bare",
                "messages": [
                    {"role": "user", "content": "Name a fruit."},
                    {"role": "assistant", "content": "Apple."},
                ],
            },
            {  # a placeholder and a real answer: kept (the placeholder turn is context)
                "id": "c-mixed",
                "messages": [
                    {"role": "user", "content": "Hello."},
                    {"role": "assistant", "content": "OK."},
                    {"role": "user", "content": "Count to two."},
                    {"role": "assistant", "content": "1, 2.", "reasoning_content": "Easy."},
                ],
            },
        ],
    )
    padded = _rows(
        d / "padded.jsonl",
        [
            {
                "id": "pad-ok",
                "messages": [
                    {"role": "user", "content": "Explain DNS briefly."},
                    {"role": "assistant", "content": "OK."},
                ],
            },
            {
                "id": "pad-empty",
                "messages": [
                    {"role": "user", "content": "Hi there."},
                    {"role": "assistant", "content": ""},
                    {"role": "user", "content": "And a joke?"},
                    {"role": "assistant", "content": "  "},
                ],
            },
        ],
    )
    prompts = _rows(
        d / "prompts.jsonl",
        [
            {"id": "p-1", "prompt": "What is TCP?"},
            {"id": "p-refused", "prompt": "refused [400]"},
            {"id": "p-cut", "prompt": "endless [length]"},
            {"id": "p-long", "prompt": "LONG " + "word " * 400},
        ],
    )
    tools = _rows(
        d / "tools.jsonl",
        [
            {  # the model calls the tool; no recorded result: the row ends at the call
                "id": "t-call",
                "messages": [{"role": "user", "content": "Weather in Oslo? [call:get_weather]"}],
                "tools": [TOOL],
            },
        ],
    )
    return [
        {"path": str(chat)},
        {"path": str(padded)},
        {"path": str(prompts)},
        {"path": str(tools)},
    ]


def _recipe(tmp: Path, tokenizer: Path, url: str, name: str = "recipe", **generate: Any) -> Path:
    gen = {
        "endpoints": [url],
        "thinking": "on",
        "max_tokens": 64,
        "seed": 0,
        "concurrency": 4,
        "request_timeout": 10,
        "max_retries": 1,
        "regenerate": "missing_reasoning",
        **generate,
    }
    recipe = {
        "tokenizer": str(tokenizer),
        "out": str(tmp / f"{name}-out"),
        "max_length": 256,
        "workers": 1,
        "sources": _sources(tmp / "data"),
        "generate": gen,
    }
    path = tmp / f"{name}.yaml"
    path.write_text(json.dumps(recipe), encoding="utf-8")  # JSON is YAML
    return path


def _add_source(recipe: Path, path: Path, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` to ``path`` and add it to the recipe's sources."""
    conf = json.loads(recipe.read_text())
    conf["sources"].append({"path": str(_rows(path, rows))})
    recipe.write_text(json.dumps(conf))


def _run(recipe: Path, **kw: Any) -> run_state.RunResult:
    opts = run_options(recipe, **kw)
    opts.speculators = False  # proven elsewhere; keeps this file fast
    return run(opts, say=print)


def _table(out: Path) -> pa.Table:
    tables = []
    for shard in sorted(out.glob("*.arrow")):
        with pa.memory_map(str(shard)) as f:
            tables.append(pa.ipc.open_stream(f).read_all())
    return pa.concat_tables(tables)


def _supervised_texts(out: Path, tokenizer: Path) -> dict[str, str]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    t = _table(out)
    texts = {}
    for rid, ids, mask in zip(
        t.column("id").to_pylist(),
        t.column("input_ids").to_pylist(),
        t.column("loss_mask").to_pylist(),
        strict=True,
    ):
        sup = [i for i, m in zip(ids, mask, strict=True) if m]
        texts[rid] = tok.decode(sup, skip_special_tokens=False)
    return texts


def _rejects(out: Path) -> dict[str, dict[str, Any]]:
    lines = (out / "rejects.jsonl").read_text(encoding="utf-8").splitlines()
    return {x["id"]: x for x in map(json.loads, lines)}


@dataclass
class _RoundTrip:
    tmp: Path
    srv: FaultServer
    result: run_state.RunResult
    requests: list[dict[str, Any]]  # what the reference run sent


@pytest.fixture(scope="module")
def round_trip(tmp_path_factory: pytest.TempPathFactory, qwen3_dir: Path) -> Iterator[_RoundTrip]:
    """One uninterrupted run (one worker, so a kill never leaves a request in flight): the
    reference of the crash test and the subject of the rejoin test."""
    tmp = tmp_path_factory.mktemp("run")
    with FaultServer() as srv:
        result = _run(_recipe(tmp, qwen3_dir, srv.url, "ref", concurrency=1))
        yield _RoundTrip(tmp, srv, result, list(srv.requests))


def test_run_answers_rejoin_their_rows(round_trip: _RoundTrip, qwen3_dir: Path) -> None:
    result = round_trip.result
    sent = [m["content"] for r in round_trip.requests for m in r["messages"] if m["role"] == "user"]
    assert result.passed
    out = round_trip.tmp / "ref-out"
    t = _table(out)
    source_of = dict(zip(t.column("id").to_pylist(), t.column("source").to_pylist(), strict=True))
    # original ids and the user's own sources, in input order
    assert source_of == {
        "c-keep": "chat",
        "c-bare": "chat",
        "c-mixed": "chat",
        "pad-ok": "padded",
        "pad-empty": "padded",
        "p-1": "prompts",
        "t-call": "tools",
    }
    rejects = _rejects(out)
    assert {k: (v["reason"], v["source"]) for k, v in rejects.items()} == {
        "p-refused": ("http_4xx", "prompts"),
        "p-cut": ("length", "prompts"),
        "p-long": ("too_long", "prompts"),
    }
    assert not any(s.startswith("LONG") for s in sent), "an over-long prompt was sent"
    texts = _supervised_texts(out, qwen3_dir)
    # placeholders answered by the target (each user turn), with its reasoning
    assert "answer 0 to 'Explain DNS briefly.'" in texts["pad-ok"]
    assert "answer 1 to 'And a joke?'" in texts["pad-empty"]
    # (Qwen3 drops earlier turns' reasoning from history: only the last answer is supervised)
    assert texts["pad-ok"].count("<|im_end|>") == 1 and texts["pad-empty"].count("<|im_end|>") == 1
    assert "thinking about turn 0" in texts["c-bare"] and "Apple" not in texts["c-bare"]
    assert "Blue." in texts["c-keep"] and "1, 2." in texts["c-mixed"]  # kept as they were
    # the tool call is the row's last turn, supervised up to and including <|im_end|>
    assert "<tool_call>" in texts["t-call"] and texts["t-call"].endswith("</tool_call><|im_end|>")
    manifest = json.loads((out / "manifest.json").read_text())
    run_info = manifest["run"]
    assert run_info["queued"] == {
        "missing_reasoning": 1,
        "placeholder_answer": 2,
        "prompt_only": 4,
    }
    assert run_info["ends_at_tool_call"] == 1 and run_info["too_long_prompts"] == 1
    per = manifest["counts"]["per_source"]
    assert (per["prompts"]["read"], per["prompts"]["written"], per["prompts"]["rejected"]) == (
        4,
        1,
        3,
    )
    assert manifest["counts"]["total"]["needs_generation"] == 0
    assert manifest["counts"]["total"]["empty_think_rows"] == 0  # every answer has reasoning
    assert result.report is not None and "ends_at_tool_call" in result.report.read_text()


def test_rows_of_a_file_repeating_an_id_are_each_answered_and_rejoined(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """An answer dump repeating `question_id` (once per model): the third row on was rejected
    `duplicate_id` by generate and by build. Each row has its own id now (`source:row:id` from
    the third), generate answers each under it and the answers rejoin their own rows."""
    asks = ["Name a river.", "Name a mountain.", "Name a desert.", "Name a lake."]
    rows = [{"question_id": 7, "prompt": ask} for ask in asks]
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, thinking="off")
        conf = json.loads(recipe.read_text())
        conf["sources"] = [{"path": str(_rows(tmp_path / "qa.jsonl", rows))}]
        recipe.write_text(json.dumps(conf))
        result = _run(recipe)
    assert result.passed
    assert not (result.out / "rejects.jsonl").read_text().strip()
    texts = _supervised_texts(result.out, qwen3_dir)
    assert list(texts) == ["7", "qa:7", "qa:2:7", "qa:3:7"]
    for rid, ask in zip(texts, asks, strict=True):
        assert f"to '{ask}'" in texts[rid], (rid, texts[rid])


def _child(recipe: Path, kill_at: str | None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "HF_HUB_OFFLINE": "1"}
    env.pop(KILL_ENV, None)
    if kill_at:
        env[KILL_ENV] = kill_at
    cmd = [sys.executable, "-m", "draftset.cli", "run", str(recipe), "--no-progress"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)


def test_kill_in_each_stage_then_rerun_gives_the_same_set(
    round_trip: _RoundTrip, tmp_path: Path, qwen3_dir: Path
) -> None:
    srv = round_trip.srv
    assert round_trip.result.passed
    before = len(srv.requests)
    srv.attempts.clear()
    crash = _recipe(tmp_path, qwen3_dir, srv.url, "crash", concurrency=1)
    for stage in run_state.STAGES:
        proc = _child(crash, stage)
        assert proc.returncode == -9, (stage, proc.returncode, proc.stderr[-2000:])
    proc = _child(crash, None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "already done" in proc.stdout
    # answered rows were never requested again (one worker: nothing in flight at the kill)
    assert len(srv.requests) - before == len(round_trip.requests)
    assert max(srv.attempts.values()) == 1
    a, b = round_trip.tmp / "ref-out", tmp_path / "crash-out"
    shards = sorted(p.name for p in a.glob("*.arrow"))
    assert shards and shards == sorted(p.name for p in b.glob("*.arrow"))
    for name in [*shards, "rejects.jsonl", "token_freq.npy"]:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert not list(tmp_path.glob(".crash-out.draftset-tmp-*")), "a killed build's folder is left"
    state = json.loads((tmp_path / "crash-out.run" / "state.json").read_text())
    assert state["done"] == list(run_state.STAGES)
    # the timeline keeps every attempt: each stage was killed once, then finished (verify
    # twice: the run killed in report had verified the set, the last run verifies it again)
    outcomes: dict[str, list[str]] = {}
    for a in state["attempts"]:
        outcomes.setdefault(a["stage"], []).append(a["outcome"])
    expected = {s: ["killed", "done"] for s in run_state.STAGES}
    expected["verify"].append("done")
    assert outcomes == expected, outcomes
    line = next(x for x in proc.stdout.splitlines() if x.startswith("timeline: "))
    assert line.count("killed then ") == len(run_state.STAGES), line
    # ... and the report shows it
    report = (tmp_path / "crash-out-report.html").read_text()
    assert "Timeline (every attempt" in report
    assert report.count("<td>killed (found by the next run at ") == len(run_state.STAGES)


class _Crash(Exception):
    pass


def test_changed_model_or_recipe_refused_unless_restart(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(stage: str) -> None:  # in-process stand-in for the SIGKILL in generation
        if stage == os.environ.get(KILL_ENV):
            raise _Crash(stage)

    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, concurrency=1)
        monkeypatch.setenv(KILL_ENV, "generate")
        monkeypatch.setattr(run_answers, "maybe_die", crash)
        with pytest.raises(_Crash, match="generate"):  # stopped in the middle of generation
            _run(recipe)
        assert 0 < len(srv.requests) < 7
        monkeypatch.delenv(KILL_ENV)
    with FaultServer(model="another-model") as other:
        sent_before = len(other.requests)
        with pytest.raises(RunUsageError, match=r"model changed.*fault-model"):
            _run(recipe, endpoints=[other.url])
        assert len(other.requests) == sent_before == 0
        changed = json.loads(recipe.read_text())
        changed["max_length"] = 300
        changed["generate"]["temperature"] = 0.7
        recipe.write_text(json.dumps(changed))
        with pytest.raises(RunUsageError, match=r"changed.*: generate\.temperature, recipe\.max"):
            _run(recipe, endpoints=[other.url])
        result = _run(recipe, endpoints=[other.url], restart=True)
    assert result.passed
    answers = (tmp_path / "recipe-out.run" / "answers.jsonl").read_text().splitlines()
    assert {json.loads(x)["metadata"]["model"] for x in answers} == {"another-model"}


@pytest.mark.parametrize("stop_at", [".arrow", "queue.jsonl"])
def test_a_restart_interrupted_midway_can_be_rerun(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch, stop_at: str
) -> None:
    """Ctrl-C (or a kill) while `--restart` removes the previous run's set (at a shard) or
    its work files (at the queue): the rerun goes on and builds the set again. `state.json`
    went first, and the work folder was left with answer files, or its locks alone, and a
    half-removed set: every rerun, `--restart` too, was refused (`OUT.run exists and is not a
    draftset run folder (no state.json)`)."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        assert _run(recipe).passed
        assert (tmp_path / "recipe-out.run" / "answers.lock").exists()
        unlink = os.unlink

        def interrupted(path: Any, *args: Any, **kwargs: Any) -> None:
            if str(path).endswith(stop_at):
                raise KeyboardInterrupt
            unlink(path, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _run(recipe, restart=True)
        monkeypatch.undo()
        assert _run(recipe, restart=True).passed
    assert (tmp_path / "recipe-out" / "manifest.json").is_file()


def test_a_set_another_run_put_at_out_during_the_build_is_not_replaced(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs of one `out` with different work folders (`--work`) at once: the one whose
    build finished last replaced the other's set, and both said `verified` (the first one's
    state and report about a set that was no longer its own). A set that appears at `out`
    during the build is left as it is and this run fails, saying so."""
    with FaultServer() as srv:
        other = _run(_recipe(tmp_path, qwen3_dir, srv.url, "other"))
        assert other.passed
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        out = tmp_path / "recipe-out"

        def other_run_finishes(stage: str) -> None:  # the other run's set lands at out
            if stage == "build" and not out.exists():
                shutil.copytree(tmp_path / "other-out", out)

        monkeypatch.setenv(KILL_ENV, "build")
        monkeypatch.setattr(run_module, "maybe_die", other_run_finishes)
        with pytest.raises(RunUsageError, match="appeared during the build"):
            _run(recipe)
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["run"]["work"] == str(tmp_path / "other-out.run")  # still the other's


def test_build_counts_placeholder_rows_and_points_to_run(
    tmp_path: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from draftset.cli import main

    src = tmp_path / "data"
    _sources(src)
    rc = main(
        [
            "build",
            str(src / "padded.jsonl"),
            str(src / "chat.jsonl"),
            "--tokenizer",
            str(qwen3_dir),
            "--out",
            str(tmp_path / "b"),
            "--workers",
            "1",
            "--no-progress",
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "2 rows whose every answer is a placeholder" in text and "draftset run" in text
    assert "1 row has answers without reasoning" in text and "missing_reasoning" in text
    counts = json.loads((tmp_path / "b" / "manifest.json").read_text())["counts"]["per_source"]
    assert counts["padded"]["placeholder_rows"] == 2
    assert counts["chat"]["empty_think_rows"] == 1  # c-bare: Qwen3 trains "<think>\n\n</think>"


def test_build_names_the_fields_a_shape_did_not_read(
    tmp_path: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """SkyThought dumps read without their preset are prompts (`question`): the trace in `code`
    used to vanish without a word and `run` re-answered the rows. The summary and the manifest
    now name the unread fields per source, and point to the preset."""
    from draftset.cli import main

    sky = REPO / "tests" / "data" / "presets" / "skythought_amc23.jsonl"
    out = tmp_path / "b"
    args = ["build", str(sky), "--tokenizer", str(qwen3_dir), "--out", str(out)]
    assert main([*args, "--workers", "1", "--no-progress"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert (
        "note: source skythought_amc23: fields not read by its shape: code (3 rows),"
        " gt (3 rows), pred (2 rows)"
    ) in text
    assert "`skythought`" in text
    counts = json.loads((out / "manifest.json").read_text())["counts"]
    assert counts["per_source"]["skythought_amc23"]["unread_fields"] == {
        "code": 3,
        "gt": 3,
        "pred": 2,
    }
    assert counts["total"]["unread_fields"] == {"code": 3, "gt": 3, "pred": 2}


def test_run_against_real_transformers_serve(tmp_path: Path, qwen3_dir: Path) -> None:
    """`draftset run` end to end against a real `transformers serve` (tiny Qwen3-shaped model
    wired to answer CHAIN): a prompt and a placeholder row are answered and verified."""
    import serving as tg

    if tg._serving_missing() is not None:
        pytest.skip(f"needs torch + transformers[serving] ({tg._serving_missing()} missing)")
    with tg.transformers_serve(tmp_path, qwen3_dir) as port:
        data = _rows(
            tmp_path / "rows.jsonl",
            [
                {"id": "q", "prompt": "What is 2+2?"},
                {
                    "id": "padded",
                    "messages": [
                        {"role": "user", "content": "Say hi."},
                        {"role": "assistant", "content": "OK."},
                    ],
                },
            ],
        )
        recipe = tmp_path / "real.yaml"
        recipe.write_text(
            json.dumps(
                {
                    "tokenizer": str(qwen3_dir),
                    "out": str(tmp_path / "real-out"),
                    "workers": 1,
                    "sources": [{"path": str(data), "name": "mine"}],
                    "generate": {
                        "endpoints": [f"http://127.0.0.1:{port}"],
                        "thinking": "off",
                        "max_tokens": 16,
                        "request_timeout": 60,
                        "concurrency": 2,
                    },
                }
            )
        )
        result = _run(recipe)
    assert result.passed
    out = tmp_path / "real-out"
    texts = _supervised_texts(out, qwen3_dir)
    assert texts == {
        "q": "".join(tg.CHAIN) + "<|im_end|>",
        "padded": "".join(tg.CHAIN) + "<|im_end|>",
    }
    assert set(_table(out).column("source").to_pylist()) == {"mine"}


def test_overlay_replaces_rows_by_id_and_keeps_the_rest(tmp_path: Path) -> None:
    from draftset.core.records import Conversation, PromptOnly, Reject
    from draftset.sources.overlay import Overlay

    answers = _rows(
        tmp_path / "a.jsonl",
        [
            {
                "id": "p",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello", "reasoning_content": "r"},
                ],
                "metadata": {"chat_template_kwargs": {"enable_thinking": True}},
            }
        ],
    )
    errors = _rows(tmp_path / "e.jsonl", [{"id": "q", "reason": "http_4xx", "message": "no"}])
    with (tmp_path / "a.jsonl").open("a") as f:
        f.write('{"id": "torn", "messa')  # a torn last line is not an answer
    ov = Overlay([answers, errors, tmp_path / "missing.jsonl"])
    user = [{"role": "user", "content": "hi"}]
    got = ov.apply(PromptOnly("p", "src", 3, user))
    assert isinstance(got, Conversation) and (got.id, got.source, got.row) == ("p", "src", 3)
    assert got.messages[-1]["content"] == "hello"
    assert got.meta["metadata"]["chat_template_kwargs"] == {"enable_thinking": True}
    rej = ov.apply(PromptOnly("q", "src", 4, user))
    assert isinstance(rej, Reject) and (rej.reason, rej.source, rej.row) == ("http_4xx", "src", 4)
    same = PromptOnly("other", "src", 5, user)
    assert ov.apply(same) is same and ov.apply(PromptOnly("torn", "s", 6, user)).id == "torn"
    kept = Reject("src", 7, "p", "duplicate", "dup")  # rejects are never replaced
    assert ov.apply(kept) is kept
    ov.close()


@pytest.mark.parametrize(
    ("regenerate", "expected"),
    [
        ("missing", [None, "placeholder_answer", "prompt_only", None]),
        ("missing_reasoning", ["missing_reasoning", "placeholder_answer", "prompt_only", None]),
        ("all", ["regenerate_all", "placeholder_answer", "prompt_only", "regenerate_all"]),
    ],
)
def test_which_rows_are_sent(regenerate: str, expected: list[str | None]) -> None:
    from draftset.config.options import BuildOptions
    from draftset.core.records import Conversation, PromptOnly

    class Thinks:
        def thinks(self, _kwargs: str = "{}") -> bool:
            return True

    user = {"role": "user", "content": "q"}
    rows = [
        Conversation("bare", "s", 0, [user, {"role": "assistant", "content": "a"}]),
        Conversation("pad", "s", 1, [user, {"role": "assistant", "content": "OK."}, user]),
        PromptOnly("p", "s", 2, [user]),
        Conversation(
            "reasoned",
            "s",
            3,
            [user, {"role": "assistant", "content": "a", "reasoning_content": "r"}],
        ),
    ]
    b = BuildOptions(sources=[], tokenizer="t", out=Path("o"))
    got = [run_select._needs_answer(r, b, regenerate, Thinks()) for r in rows]  # type: ignore[arg-type]
    assert [why for why, _ in got] == expected
    assert got[1][1] == [user, user]  # the placeholder turn is dropped: a prompt again


@pytest.mark.parametrize("regenerate", ["missing", "missing_reasoning", "all"])
@pytest.mark.parametrize("thinks", [True, False])
def test_run_and_verify_send_the_same_rows(regenerate: str, thinks: bool) -> None:
    """Which rows `run` sends (`run_select._needs_answer`) and which verify accepts an answer
    line for (`checks.records._run_sends`, from the manifest's options) are one rule
    (`hygiene.run_sends`): on a table of rows (prompt-only, "OK." and prompt-copy pads,
    missing reasoning, thinking off, weighted 0, a custom placeholder) they never disagree."""
    from types import SimpleNamespace

    from draftset.checks import records as verify_records
    from draftset.config.options import BuildOptions
    from draftset.core.records import Conversation, PromptOnly, RawRow
    from draftset.sources.normalize import normalize

    class Probe:
        def thinks(self, _kwargs: str = "{}") -> bool:
            return thinks

    user = {"role": "user", "content": "Name a colour."}
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    rows = [
        PromptOnly("p", "s", 0, [user]),
        Conversation("ok", "s", 1, [user, {"role": "assistant", "content": "OK."}]),
        Conversation("copy", "s", 2, [user, {"role": "assistant", "content": "Name a colour."}]),
        Conversation("pad", "s", 3, [user, {"role": "assistant", "content": "TBD"}]),
        Conversation("bare", "s", 4, [user, {"role": "assistant", "content": "Blue."}]),
        Conversation(
            "off", "s", 5, [user, {"role": "assistant", "content": "Blue."}], meta={"metadata": off}
        ),
        Conversation(
            "reasoned",
            "s",
            6,
            [user, {"role": "assistant", "content": "Blue.", "reasoning_content": "r"}],
        ),
        normalize(
            RawRow("s", 7, {"messages": [user, {"role": "assistant", "content": "x", "weight": 0}]})
        ),
    ]
    placeholders = ("OK.", "TBD")
    b = BuildOptions(sources=[], tokenizer="t", out=Path("o"), placeholders=placeholders)
    out = SimpleNamespace(
        options={"placeholders": list(placeholders)},
        manifest={"template": {"kwargs": {}}, "run": {"regenerate": regenerate}},
    )
    run_says = [run_select._needs_answer(r, b, regenerate, Probe())[0] is not None for r in rows]  # type: ignore[arg-type]
    verify_says = [verify_records._run_sends(out, r, regenerate, Probe()) for r in rows]  # type: ignore[arg-type]
    assert run_says == verify_says
    assert run_says[:4] == [True] * 4  # a prompt and every pad, whatever regenerate says
    assert run_says[7] is False  # weighted 0: never


def test_placeholder_rows_follow_the_one_placeholder_definition() -> None:
    """What `run` re-asks and `build` counts as placeholder-only is exactly what render and
    verify leave unsupervised (`rules.is_placeholder_answer`): whitespace-only reasoning is
    no reasoning, and a dummy answer in the reasoning field is still a dummy."""
    from draftset.core import rules
    from draftset.core.records import Conversation
    from draftset.mask.hygiene import all_placeholder_answers

    turns = [
        {"role": "assistant", "content": "OK.", "reasoning_content": "  "},
        {"role": "assistant", "content": "", "reasoning_content": "OK"},
        {"role": "assistant", "content": "OK", "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "\n"},
    ]
    for turn in turns:
        conv = Conversation("r", "s", 0, [{"role": "user", "content": "Hi?"}, turn])
        expected = rules.is_placeholder_answer(turn, rules.DEFAULT_PLACEHOLDERS)
        assert all_placeholder_answers(conv, rules.DEFAULT_PLACEHOLDERS) is expected, turn
    assert [rules.is_placeholder_answer(t) for t in turns] == [True, True, False, False]


@pytest.mark.parametrize("where", ["work-inside", "out-inside", "work-holds"])
def test_out_or_work_overlapping_a_source_is_refused_before_anything(
    tmp_path: Path, qwen3_dir: Path, where: str
) -> None:
    """`run --work data/w` read its own queue and answers back as rows (102 rows for 60);
    the output folder was only checked by the build stage, after paying for the answers."""
    from draftset.config.preflight import PreflightError

    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1")
    data = tmp_path / "data"
    conf = json.loads(recipe.read_text())
    conf["sources"] = [{"path": str(data)}]  # the folder as one source
    if where == "out-inside":
        conf["out"] = str(data / "set")
    recipe.write_text(json.dumps(conf))
    work = {"work-inside": data / "w", "out-inside": None, "work-holds": tmp_path}[where]
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(PreflightError) as exc:
        _run(recipe, work=work)
    # out: is the recipe's; work the call's keyword (the command line's --work)
    flag = "recipe key out:" if where == "out-inside" else "work"
    needle = "contains the source" if where == "work-holds" else "inside the source folder"
    assert str(exc.value).startswith(f"{flag} ") and needle in str(exc.value)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_a_changed_mapping_is_named_once_by_its_keys() -> None:
    """`template_kwargs: {enable_thinking: true, foo: 1}` added to a recipe without it was
    refused as "changed: recipe.template_kwargs, recipe.template_kwargs.enable_thinking,
    recipe.template_kwargs.foo" (an empty mapping is a setting of its own when flattened):
    each changed key once, not the mapping beside its own keys."""
    old = {"recipe": {"template_kwargs": {}, "seed": 0}, "generate": {"extra_body": {}}}
    new = {
        "recipe": {"template_kwargs": {"enable_thinking": True, "foo": 1}, "seed": 0},
        "generate": {"extra_body": {"min_p": 0.1}},
    }
    want = [
        "generate.extra_body.min_p",
        "recipe.template_kwargs.enable_thinking",
        "recipe.template_kwargs.foo",
    ]
    assert run_resume.changed_settings(old, new) == want
    assert run_resume.changed_settings(new, old) == want


def test_same_tokenizer_and_sources_spelled_otherwise_are_no_change(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`run --tokenizer tok` (relative, as the demo passes it) after a run with the absolute
    path was "changed: recipe.tokenizer" and asked for --restart (paying for generation
    again). Resolved paths and the tokenizer's content decide, not spellings."""
    import shutil

    tok = tmp_path / "tok"
    shutil.copytree(qwen3_dir, tok)
    recipe = _recipe(tmp_path, tok, "http://127.0.0.1:9/v1")
    first = run_resume.settings_of(run_options(recipe))
    monkeypatch.chdir(tmp_path)
    for spelling in ("tok", "./tok/", "../" + tmp_path.name + "/tok"):
        again = run_resume.settings_of(run_options(recipe, tokenizer=spelling))
        assert run_resume.changed_settings(first, again) == [], spelling
    relative = json.loads(recipe.read_text())  # sources and recipe given relative too
    relative["sources"] = [{"path": os.path.relpath(s["path"])} for s in relative["sources"]]
    relative["tokenizer"] = "tok"
    recipe.write_text(json.dumps(relative))
    again = run_resume.settings_of(run_options(Path(recipe.name)))
    assert run_resume.changed_settings(first, again) == []
    moved = tmp_path / "elsewhere"  # the same files in another folder: the same tokenizer
    shutil.copytree(tok, moved)
    again = run_resume.settings_of(run_options(recipe, tokenizer=str(moved)))
    assert run_resume.changed_settings(first, again) == []
    # other content under the same path is a change
    config = tok / "tokenizer_config.json"
    config.write_text(config.read_text().replace("}", ', "x": 1}', 1))
    again = run_resume.settings_of(run_options(recipe, tokenizer="tok"))
    assert run_resume.changed_settings(first, again) == ["recipe.tokenizer"]


def test_run_end_to_end_other_model_relative_tokenizer_and_restart_keeps_user_files(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One run through the stages: answers from another model are `model_mismatch` rejects
    (the manifest names only the run's model's answers and verify passes with every row
    accounted for); a rerun with the tokenizer spelled relative resumes instead of asking for
    --restart; --restart refuses to delete a file the user put into the set."""
    import shutil

    monkeypatch.chdir(tmp_path)
    shutil.copytree(qwen3_dir, tmp_path / "tok")
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, tmp_path / "tok", srv.url, regenerate="missing")
        switched = [{"id": f"sw{i}", "prompt": f"q{i} [model:other-model]"} for i in range(3)]
        _add_source(recipe, tmp_path / "data" / "switch.jsonl", switched)
        result = _run(recipe, tokenizer="tok")
        assert result.passed
        out = result.out
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["run"]["generation_errors"].get("model_mismatch") == 3
        assert manifest["run"]["model"] == "fault-model"
        rejects = _rejects(out)
        assert {rejects[f"sw{i}"]["reason"] for i in range(3)} == {"model_mismatch"}
        total = manifest["counts"]["total"]
        assert total["read"] == total["written"] + total["rejected"] + total["needs_generation"]
        sent = len(srv.requests)
        again = _run(recipe, tokenizer=str(tmp_path / "tok"))  # absolute now: the same one
        # (the set is verified again: only select, generate and build are skipped)
        assert again.resumed == ["select", "generate", "build"] and len(srv.requests) == sent
        (out / "NOTES.md").write_text("my notes")
        with pytest.raises(RunUsageError, match=r"files draftset did not write: NOTES.md"):
            _run(recipe, tokenizer="tok", restart=True)
        assert (out / "NOTES.md").read_text() == "my notes"
        assert (tmp_path / "recipe-out.run" / "answers.jsonl").exists()


@pytest.mark.parametrize("theirs", ["file", "folder"])
def test_a_report_path_draftset_did_not_write_is_refused_before_anything(
    tmp_path: Path, qwen3_dir: Path, theirs: str
) -> None:
    """`run` writes its report beside the set, OUT-report.html, renamed over whatever was
    there at the end of the run: a page of the user's by that name was lost after hours of
    work (a folder, a raw error). Refused before any work, like build's --out, and left as
    it is; draftset's own earlier page is replaced (the kill-and-rerun test above)."""
    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1")
    page = tmp_path / "recipe-out-report.html"
    if theirs == "file":
        page.write_text("<html>my notes on the last run</html>")
    else:
        page.mkdir()
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(run_state.RunUsageError) as exc:
        _run(recipe)
    assert str(exc.value).startswith(f"{page} exists and is not a report draftset wrote")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    if theirs == "file":
        assert page.read_text() == "<html>my notes on the last run</html>"


@pytest.mark.parametrize(
    "case", ["out-holds-theirs", "work-is-out", "work-inside-out", "work-file"]
)
def test_an_output_or_work_folder_run_cannot_use_is_refused_before_anything(
    tmp_path: Path, qwen3_dir: Path, case: str
) -> None:
    """`run` selected rows and paid for their answers, then refused its output folder (a
    folder of the user's), or a `--work` that is the output or inside it (every rerun then
    failed the same way), or crashed on a `--work` that is a file (NotADirectoryError)."""
    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1")
    out = tmp_path / "recipe-out"
    work = None
    if case == "out-holds-theirs":
        out.mkdir()
        (out / "thesis.txt").write_text("mine")
    elif case == "work-is-out":
        work = out
    elif case == "work-inside-out":
        work = out / "w"
    else:
        work = tmp_path / "notes.txt"
        work.write_text("mine")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    with pytest.raises(run_state.RunUsageError) as exc:
        _run(recipe, work=work)
    needle = {
        # not "set `overwrite: true`", which was refused too
        "out-holds-theirs": "`overwrite: true` would not replace it either",
        "work-is-out": "overlap",
        "work-inside-out": "overlap",
        "work-file": "is a file, not a folder",
    }[case]
    assert needle in str(exc.value)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before


def test_a_server_that_is_down_is_exit_2_before_the_rows_are_selected(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Every endpoint down: `run` selected every row (10 s on 1,250 rows, minutes on big data)
    and then ended "no endpoint answered", exit 1. Now the first thing it finds out."""
    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1")
    with pytest.raises(run_state.RunUsageError) as exc:
        _run(recipe)
    assert str(exc.value).startswith("no endpoint answered GET /v1/models")
    assert "start the server, or fix generate.endpoints" in str(exc.value)
    assert not list(tmp_path.rglob("queue.jsonl"))  # no row was selected
    # exit 2 leaves nothing behind: a state.json left here asked the corrected recipe (the
    # server started, max_length changed too) for --restart although no stage had run
    assert not (tmp_path / "recipe-out.run").exists()
    conf = json.loads(recipe.read_text())
    with FaultServer() as srv:
        conf["generate"]["endpoints"] = [srv.url]
        conf["max_length"] = 300
        recipe.write_text(json.dumps(conf))
        assert _run(recipe).passed


def test_a_run_folder_where_no_stage_began_is_no_run_to_resume(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """A state.json with no stage begun (an earlier version wrote it before refusing a server
    that was down) holds nothing to keep: another recipe starts afresh, not "changed"."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        work = tmp_path / "recipe-out.run"
        work.mkdir()
        state = run_state.RunState.new(work / "state.json", {"recipe": {"max_length": 1}})
        state.save()
        assert _run(recipe).passed


def test_every_error_generate_records_is_a_reject_build_accepts() -> None:
    """`response_too_large` was one of generate's codes but not a row reject reason: a run
    whose server sent one over-large answer wrote a rejects.jsonl line verify called
    malformed, and failed (exit 1, "rerun", which cannot help)."""
    from draftset.core import reasons
    from draftset.generation import http, outcomes

    codes = {
        v
        for k, v in vars(outcomes).items()
        if k.isupper() and isinstance(v, str) and k not in ("WRITTEN",)
    }
    codes |= {http.RESPONSE_TOO_LARGE, reasons.SPECIAL_TOKEN_IN_ANSWER}
    assert codes - reasons.ROW_REJECT_REASONS == set()
    assert all(c in reasons.EXPLANATIONS for c in codes)


def test_run_with_an_over_large_answer_rejects_that_row_and_verifies(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """End to end: the row whose answer inflates past the largest response body (a gzip
    bomb, 64 KiB on the wire) is a `response_too_large` reject, the others are built, and
    verify passes."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        _add_source(
            recipe, tmp_path / "data" / "big.jsonl", [{"id": "big0", "prompt": "q [gzipbomb]"}]
        )
        result = _run(recipe)
    assert result.passed
    rejects = _rejects(result.out)
    assert rejects["big0"]["reason"] == "response_too_large"


@pytest.mark.parametrize("case", ["unset", "empty", "newline"])
def test_an_api_key_run_cannot_send_is_exit_2_before_anything(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """`generate.api_key_env: MY_KEY` with MY_KEY unset ran keyless, and the user saw only
    HTTP 401s; a key with a newline went out as two headers. Both said before any work."""
    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1", api_key_env="MY_KEY")
    monkeypatch.delenv("MY_KEY", raising=False)
    if case != "unset":
        monkeypatch.setenv("MY_KEY", "abc\nX-Injected: 1" if case == "newline" else "")
    with pytest.raises(run_state.RunUsageError) as exc:
        _run(recipe)
    assert ("a newline" if case == "newline" else "MY_KEY, which is not set") in str(exc.value)
    assert not (tmp_path / "recipe-out.run").exists()


def test_an_edited_chat_template_or_benchmark_file_is_a_change(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """The recipe's `chat_template_path` and `decontaminate` files were recorded by path: a
    finished run whose template was edited resumed as "already done" and said "verified", while
    `draftset verify` failed the set (template changed since the build). By content now."""
    recipe = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1")
    template = tmp_path / "t.jinja"
    template.write_text("{{ 'x' }}")
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"prompt": "what is the capital of france"}\n')
    conf = json.loads(recipe.read_text())
    conf.update(chat_template=str(template), decontaminate=[str(bench)])
    recipe.write_text(json.dumps(conf))
    first = run_resume.settings_of(run_options(recipe))
    assert run_resume.changed_settings(first, run_resume.settings_of(run_options(recipe))) == []
    template.write_text("{{ 'y' }}")
    bench.write_text('{"prompt": "what is the capital of spain"}\n')
    again = run_resume.settings_of(run_options(recipe))
    assert run_resume.changed_settings(first, again) == [
        "files.chat_template_path",
        "files.decontaminate",
    ]


def test_a_second_run_of_the_same_work_folder_is_refused_while_one_runs(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Two `draftset run`s of one recipe both selected, rewrote each other's queue and state
    (one failed reading a queue that changed under it, one's build attempt was left "running").
    The work folder's run.lock (flock) lets one in; the other is told who holds it, exit 2;
    after the first ends the second runs."""
    import fcntl
    import os

    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        work = tmp_path / "recipe-out.run"
        work.mkdir()
        fd = os.open(work / "run.lock", os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\n")
        try:
            with pytest.raises(run_state.RunUsageError) as exc:
                _run(recipe)
            assert "another draftset run (pid 4242) is working in" in str(exc.value)
            assert sorted(p.name for p in work.iterdir()) == ["run.lock"]
        finally:
            os.close(fd)
        assert _run(recipe).passed


def test_run_summary_says_answered_of_queued_and_the_errors(
    tmp_path: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The last line said `answers by 'm': 26 (placeholder_answer=9, prompt_only=30)`: the
    breakdown was what was queued (39), not the 26 answered, and the 13 errors were nowhere."""
    from draftset.commands.run import print_summary

    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        _add_source(recipe, tmp_path / "data" / "cut.jsonl", [{"id": "c0", "prompt": "q [length]"}])
        result = _run(recipe)
    capsys.readouterr()
    print_summary(result)
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("run: "))
    info = json.loads((result.out / "manifest.json").read_text())["run"]
    queued = sum(info["queued"].values())
    errors = info["generation_errors"]
    assert errors.get("length", 0) >= 1
    assert f"{info['answered']:,} of {queued:,} queued" in line, line
    detail = ", ".join(f"{k}={v:,}" for k, v in sorted(errors.items()))
    assert f"{sum(errors.values()):,} not answered ({detail})" in line, line


def test_a_server_of_another_model_is_named_in_the_recipes_terms(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """`run` said "not --model 'x'": run has no such flag, the recipe's key is generate.model."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, model="other-model")
        with pytest.raises(run_state.RunUsageError) as exc:
            _run(recipe)
    assert "not generate.model 'other-model'" in str(exc.value)
    assert "--model" not in str(exc.value)


def test_servers_of_different_models_are_named_in_the_recipes_terms(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Two endpoints serving different models and no generate.model: generate's advice is
    "pass --model", which `run` does not have; it says to set generate.model."""
    with FaultServer() as a, FaultServer(model="another-model") as b:
        recipe = _recipe(tmp_path, qwen3_dir, a.url, endpoints=[a.url, b.url])
        with pytest.raises(run_state.RunUsageError) as exc:
            _run(recipe)
    assert "set generate.model" in str(exc.value), str(exc.value)
    assert "another-model" in str(exc.value)
    assert "--model" not in str(exc.value)


def test_a_row_padded_with_copies_of_its_prompts_is_sent_like_a_placeholder_row() -> None:
    """build makes an answer that is its user turn verbatim a context turn (`prompt_copy`), so
    a row whose every answer is such a pad has nothing to train on: `run` asks the target for
    it as it does for "OK." pads (before, it was rejected `no_supervised_turn`)."""
    from draftset.config.options import BuildOptions
    from draftset.core.records import Conversation

    class Thinks:
        def thinks(self, _kwargs: str = "{}") -> bool:
            return True

    user = {"role": "user", "content": "Name a colour."}
    copied = Conversation(
        "copy", "s", 0, [user, {"role": "assistant", "content": "Name a colour."}]
    )
    mixed = Conversation(
        "mixed",
        "s",
        1,
        [
            user,
            {"role": "assistant", "content": "OK."},
            user,
            {"role": "assistant", "content": " Name a colour. "},
        ],
    )
    real = Conversation("real", "s", 2, [user, {"role": "assistant", "content": "Blue."}])
    b = BuildOptions(sources=[], tokenizer="t", out=Path("o"))
    got = [run_select._needs_answer(r, b, "missing", Thinks())[0] for r in (copied, mixed, real)]  # type: ignore[arg-type]
    assert got == ["placeholder_answer", "placeholder_answer", None]


def test_restart_refuses_while_a_generate_writes_the_runs_answers(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """`run --restart` unlinked answers.lock, answers.jsonl and the errors file under a
    `generate` writing them, then generated beside it. It now takes that lock first: held, it
    removes nothing and says who holds it."""
    from draftset.generation.store import RunLock

    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        assert _run(recipe).passed
        work = tmp_path / "recipe-out.run"
        before = sorted(p.name for p in work.iterdir())
        with RunLock(work / "answers.jsonl"), pytest.raises(run_state.RunUsageError) as exc:
            _run(recipe, restart=True)
        assert "another draftset generate" in str(exc.value)
        assert "nothing was removed" in str(exc.value)
        assert sorted(p.name for p in work.iterdir()) == before
        assert _run(recipe, restart=True).passed  # released: the restart goes ahead


@pytest.mark.parametrize("theirs", ["notes", "built-set", "foreign-state", "inside-a-set"])
def test_a_work_folder_that_is_no_run_folder_is_refused_without_a_lock_left_in_it(
    tmp_path: Path, qwen3_dir: Path, theirs: str
) -> None:
    """`run --work mine` (a folder of the user's, or a built set) was refused "not a draftset
    run folder", but only after the work folder's run.lock had been created in it: a set
    given as --work then failed verify (run.lock is not in its manifest) and `build
    --overwrite` refused it. The folder is checked first; nothing is written into it."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        mine = tmp_path / "mine"
        mine.mkdir()
        if theirs == "notes":
            (mine / "notes.txt").write_text("mine")
            needle = "is not a draftset run folder (no state.json)"
        elif theirs == "built-set":
            (mine / "manifest.json").write_text('{"format": "draftset/1"}')
            (mine / "data-00000.arrow").write_bytes(b"rows")
            needle = "is not a draftset run folder (no state.json)"
        elif theirs == "inside-a-set":  # a new subfolder of a set: the set fails verify then
            (mine / "manifest.json").write_text('{"format": "draftset/1"}')
            needle = f"is inside the set {mine}"
        else:
            (mine / "state.json").write_text('{"format": "something-else"}')
            needle = "is not a draftset run state file"
        before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
        with pytest.raises(run_state.RunUsageError) as exc:
            _run(recipe, work=mine / "work" if theirs == "inside-a-set" else mine)
        assert needle in str(exc.value)
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
        assert not srv.requests  # no row was sent either


@pytest.mark.parametrize("regenerate", ["all", "missing_reasoning"])
def test_a_row_with_answers_weighted_zero_is_not_regenerated(regenerate: str) -> None:
    """`regenerate: all` (or `missing_reasoning`) sent a row with answers weighted 0 to the
    target, and the answered row, which carries no weights, trained every answer (an outside
    probe): such a row is built as it is, its weighted-0 answers context."""
    from draftset.config.options import BuildOptions
    from draftset.core.records import RawRow
    from draftset.pipeline.run_select import _needs_answer
    from draftset.sources.normalize import normalize

    row = {
        "messages": [
            {"role": "user", "content": "Capital of France?"},
            {"role": "assistant", "content": "Paris, as you know.", "weight": 0},
            {"role": "user", "content": "And of Spain?"},
            {"role": "assistant", "content": "Madrid."},
        ]
    }
    item = normalize(RawRow("s", 0, row))

    class Thinks:
        def thinks(self, key: str) -> bool:
            return True

    b = BuildOptions([], "unused", Path("unused"))
    assert _needs_answer(item, b, regenerate, Thinks()) == (None, [])
    padded = {
        "messages": [row["messages"][0], {"role": "assistant", "content": "OK.", "weight": 0}]
    }
    assert _needs_answer(normalize(RawRow("s", 1, padded)), b, "missing", Thinks()) == (None, [])
    del row["messages"][1]["weight"]
    assert _needs_answer(normalize(RawRow("s", 0, row)), b, regenerate, Thinks())[0] is not None


def _attempts(work: Path, stage: str) -> int:
    state = json.loads((work / "state.json").read_text())
    return sum(a["stage"] == stage for a in state["attempts"])


def test_a_rerun_of_a_finished_run_checks_its_set_again(tmp_path: Path, qwen3_dir: Path) -> None:
    """A rerun of a finished run said `verified: OUT` without looking: with the set gone the
    summary crashed (FileNotFoundError on its manifest), with its manifest or an answers file
    edited it still said verified, exit 0. Now a rerun verifies the set again (a broken one
    fails), a set that is gone is built again from the answers in the work folder (nothing
    asked of the server), and an answers file changed under the work folder is refused,
    named, unless --restart."""
    import shutil

    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        first = _run(recipe)
        assert first.passed
        out, work = first.out, first.work
        sent = len(srv.requests)
        shards = {p.name: p.read_bytes() for p in out.glob("*.arrow")}
        # a rerun of the finished run verifies the set again
        again = _run(recipe)
        assert again.passed and again.resumed == ["select", "generate", "build"]
        assert _attempts(work, "verify") == 2 and _attempts(work, "build") == 1
        # ... and one whose manifest no longer matches its rows fails (exit 1), not verified
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["counts"]["total"]["written"] += 1
        (out / "manifest.json").write_text(json.dumps(manifest))
        assert not _run(recipe).passed
        # (an edited shard is a file draftset did not write: refused before any work)
        # the set gone: built again from the answers in the work folder, no request sent
        shutil.move(out, tmp_path / "moved-away")
        rebuilt = _run(recipe)
        assert rebuilt.passed and rebuilt.resumed == ["select", "generate"]
        assert {p.name: p.read_bytes() for p in out.glob("*.arrow")} == shards
        assert len(srv.requests) == sent
        # an answers file changed under the work folder: refused, naming it (exit 2)
        answers = work / "answers.jsonl"
        answers.write_text(answers.read_text().replace("answer 0", "answer X", 1))
        with pytest.raises(RunUsageError, match=r"answers\.jsonl changed since .*--restart"):
            _run(recipe)
        proc = _child(recipe, None)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert "answers.jsonl changed since" in proc.stderr and "verified" not in proc.stdout
        assert _run(recipe, restart=True).passed  # starts over, answers asked again


def test_run_summary_of_a_set_that_is_gone_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`print_summary` read OUT/manifest.json unguarded: a traceback when it was gone."""
    from draftset.commands.run import print_summary

    result = run_state.RunResult(tmp_path / "gone", tmp_path / "gone.run", True, {})
    assert print_summary(result) is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gone/manifest.json" in err[0] and "cannot read" in err[0], err


def test_retry_errors_asks_again_exactly_the_rows_that_failed_for_a_passing_reason(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Once generate was done, a row that ended `retries_exhausted` (a server hiccup) stayed a
    reject: a rerun skipped the stage, and only --restart (every answer thrown away) asked it
    again. `retry_errors` (`run --retry-errors`) asks exactly those rows again, then builds
    and verifies the set with their answers; refusals (`http_4xx`, `length`) stay."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        flaky = [{"id": "f0", "prompt": "f [500x2]"}]  # fails both tries (max_retries 1)
        _add_source(recipe, tmp_path / "data" / "flaky.jsonl", flaky)
        first = _run(recipe)
        assert _rejects(first.out)["f0"]["reason"] == "retries_exhausted"
        sent = len(srv.requests)
        assert _run(recipe).passed and len(srv.requests) == sent  # without it: not asked
        retried = _run(recipe, retry_errors=True)
        asked = [m["content"] for r in srv.requests[sent:] for m in r["messages"]]
        assert asked == ["f [500x2]"], asked
        sent = len(srv.requests)  # none left to retry: nothing asked, the set verified again
        assert _run(recipe, retry_errors=True).passed and len(srv.requests) == sent
    assert retried.passed
    assert retried.resumed == ["select"]
    rejects = _rejects(retried.out)
    assert "f0" not in rejects and {"p-refused", "p-cut"} <= rejects.keys()
    assert "f0" in _table(retried.out).column("id").to_pylist()
    errors = json.loads((retried.out / "manifest.json").read_text())["run"]["generation_errors"]
    assert "retries_exhausted" not in errors and errors["http_4xx"] == errors["length"] == 1


def test_run_takes_retry_errors_on_the_command_line() -> None:
    from draftset.cli import _build_parser
    from draftset.commands.options import parsed
    from draftset.config.schema import RunArgs

    args = _build_parser().parse_args(["run", "r.yaml", "--retry-errors"])
    assert parsed(args, RunArgs)["retry_errors"] is True


def test_a_generate_stage_that_answered_no_row_fails_the_run(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Every request refused (HTTP 400): generate's stage went on with 0 answered and the run
    built a set from the kept rows alone. It fails, naming the commonest error."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        conf = json.loads(recipe.read_text())
        rows = [{"id": f"r{i}", "prompt": f"refused {i} [400]"} for i in range(3)]
        conf["sources"] = [{"path": str(_rows(tmp_path / "refused.jsonl", rows))}]
        recipe.write_text(json.dumps(conf))
        with pytest.raises(run_state.RunFailed) as exc:
            _run(recipe)
    assert "no row answered: all 3 ended as errors, commonest 3 http_4xx" in str(exc.value)
    assert not (tmp_path / "recipe-out" / "manifest.json").exists()


def test_a_server_rendering_other_prompts_for_every_answer_fails_the_run(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """A server started with another chat template or tokenizer than the recipe's (its prompt
    token ids, `return_token_ids: true`, never the recipe's render): build rejected every
    answered row `server_prompt_differs`, and the run said `verified`, exit 0, with none of
    the target's answers in the set. It fails at the build, naming the cause."""
    with FaultServer() as srv:  # its prompt_token_ids are 0, 1, 2, ...: no template's render
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, return_token_ids=True)
        with pytest.raises(run_state.RunFailed) as exc:
            _run(recipe)
    msg = str(exc.value)
    assert "server_prompt_differs" in msg and "every answered row" in msg, msg
    assert "chat template or tokenizer" in msg and "--restart" in msg, msg
    rejects = _rejects(tmp_path / "recipe-out")  # the set is there, to inspect
    assert rejects["p-1"]["reason"] == "server_prompt_differs"


def test_a_recipes_extra_body_contradicting_its_sampling_keys_is_exit_2(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """`generate: {max_tokens: 64, extra_body: {max_tokens: 9999}}` sent 9999, silently."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, extra_body={"max_tokens": 9999})
        with pytest.raises(run_state.RunUsageError) as exc:
            _run(recipe)
        assert not srv.requests
    assert "generate.extra_body sets max_tokens 9999, and generate.max_tokens 64" in str(exc.value)
    assert not (tmp_path / "recipe-out.run").exists()


def test_a_build_stage_that_wrote_no_row_fails_the_run_with_its_reasons(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """Every row rejected by the build (here all longer than `max_length`): the verify stage
    went on and failed with `folder not found` (exit 2, as if the recipe were wrong, after the
    work was done). The run stops at the build, exit 1, naming the rejects' reasons."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, regenerate="missing")
        conf = json.loads(recipe.read_text())
        rows = [
            {
                "id": f"r{i}",
                "messages": [
                    {"role": "user", "content": f"Question {i}, asked at some length here."},
                    {"role": "assistant", "content": f"Answer {i}, given at some length too."},
                ],
            }
            for i in range(3)
        ]
        conf["sources"] = [{"path": str(_rows(tmp_path / "answered.jsonl", rows))}]
        conf["max_length"] = 8
        recipe.write_text(json.dumps(conf))
        with pytest.raises(run_state.RunFailed) as exc:
            _run(recipe)
        assert not srv.requests
    assert "build: no rows written" in str(exc.value) and "too_long" in str(exc.value)
    assert not (tmp_path / "recipe-out").exists()


def test_a_rerun_whose_set_holds_an_edited_file_says_how_to_go_on(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """A finished run's set with a shard edited (or a file added): the rerun refused with
    build's line, `--out ... --overwrite replaces only what draftset wrote`, flags `run` does
    not have. It names the files and the way on: remove the set, which the rerun builds again
    from the answers in the work folder, nothing asked again."""
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url)
        first = _run(recipe)
        out = first.out
        (shard,) = out.glob("*.arrow")
        shard.write_bytes(shard.read_bytes() + b"\0")
        with pytest.raises(RunUsageError) as exc:
            _run(recipe)
    said = str(exc.value)
    assert shard.name in said and "--overwrite" not in said and "--out" not in said, said
    assert f"remove {out}" in said and "built again from the answers" in said, said


def test_a_run_dedups_on_the_rows_it_will_answer(
    tmp_path: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The target answers a pad and a prompt-only row, so such a row is the copy kept and its
    near copy after it is dropped (one answer asked, the prompt trained once); a copy cut off
    at max_tokens is not asked again (`regenerate: missing`), so the copy after it is the one
    kept (before, the cut row was kept, rejected later, and the prompt lost). The run's
    selection and its build decide alike, and verify re-derives it from the manifest."""
    search = "Explain how binary search works on a sorted array of integers please"
    haiku = "Write a haiku about the sea and the moon at night time"
    story = "Tell me a short story about a lighthouse keeper and her old dog"
    sea = "Describe the colour of the sea on a stormy winter morning"

    def chat(rid: str, user: str, answer: str | None, **extra: Any) -> dict[str, Any]:
        turns = [{"role": "user", "content": user}]
        if answer is not None:
            turns.append({"role": "assistant", "content": answer})
        return {"id": rid, "messages": turns, **extra}

    rows = [
        chat("pad", search, "OK."),
        chat("search", search + "!", "Binary search halves the range."),
        chat("prompt", haiku, None),
        chat("haiku", haiku + ".", "Waves under moonlight."),
        chat("cut", story, "Once upon a time.", metadata={"truncated": True}),
        chat("story", story + "?", "Once upon a time."),
        # cut, then padded: the pad is answered (the run's selection kept it for that)
        chat("cut2", sea, "The sea is", metadata={"truncated": True}),
        chat("pad2", sea + "!", "OK."),
        # a pad whose answer fails: the real copy went with it, and the run says so
        chat("pad3", "Sort these numbers for me please refused [400]", "OK."),
        chat("real3", "Sort these numbers for me please refused [400]!", "1, 2, 3."),
    ]
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, regenerate="missing", thinking="off")
        conf = json.loads(recipe.read_text())
        conf["sources"] = [{"path": str(_rows(tmp_path / "near.jsonl", rows))}]
        conf["dedup"] = "near"
        recipe.write_text(json.dumps(conf))
        result = _run(recipe)
        asked = len(srv.requests)
    assert result.passed
    assert asked >= 4  # the pads and the prompt (the refused one maybe retried)
    written = _table(result.out).column("id").to_pylist()
    assert sorted(written) == ["pad", "pad2", "prompt", "story"]
    rejects = {k: v["reason"] for k, v in _rejects(result.out).items()}
    assert rejects == {
        "search": "near_duplicate",
        "haiku": "near_duplicate",
        "cut": "no_supervised_turn",
        "cut2": "no_supervised_turn",
        "pad3": rejects["pad3"],
        "real3": "near_duplicate",
    }
    assert rejects["pad3"] not in ("near_duplicate", "duplicate", "no_supervised_turn")
    said = capsys.readouterr().out
    assert "build: note: 1 row was dropped as near duplicates of 1 kept row then rejected (" in said


def test_a_generation_reject_of_a_folder_source_names_its_file(
    tmp_path: Path, qwen3_dir: Path
) -> None:
    """The run's generation codes (`http_4xx`, ...) join the rows by id after selection: their
    reject lines name the row's file in a source of several files, as reading's do, and
    verify agrees."""
    folder = tmp_path / "mine"  # `_recipe` writes its own sources in data/
    (folder / "sub").mkdir(parents=True)
    _rows(folder / "a.jsonl", [{"id": "p-1", "prompt": "What is TCP?"}])
    _rows(folder / "sub" / "b.jsonl", [{"id": "p-refused", "prompt": "refused [400]"}])
    with FaultServer() as srv:
        recipe = _recipe(tmp_path, qwen3_dir, srv.url, concurrency=1)
        conf = json.loads(recipe.read_text())
        conf["sources"] = [{"path": str(folder)}]
        recipe.write_text(json.dumps(conf))
        result = _run(recipe)
    assert result.passed
    line = _rejects(tmp_path / "recipe-out")["p-refused"]
    assert (line["file"], line["reason"]) == ("sub/b.jsonl", "http_4xx"), line


def test_run_sends_the_key_generate_sends_when_both_variables_are_set(
    tmp_path: Path, qwen3_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`generate` reads DRAFTSET_API_KEY before OPENAI_API_KEY; `run`, whose recipe default
    names OPENAI_API_KEY, read that one first: with both set, the two commands sent other
    keys to the same server. A variable the recipe names itself still comes first."""
    monkeypatch.setenv("DRAFTSET_API_KEY", "from-draftset")
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai")
    opts = run_options(_recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1"))
    assert run_answers.generate_options(opts, tmp_path / "a.jsonl", None).api_key == "from-draftset"
    monkeypatch.setenv("MY_KEY", "from-mine")
    named = _recipe(tmp_path, qwen3_dir, "http://127.0.0.1:9/v1", "named", api_key_env="MY_KEY")
    opts = run_options(named)
    assert run_answers.generate_options(opts, tmp_path / "a.jsonl", None).api_key == "from-mine"
