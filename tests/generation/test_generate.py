"""`draftset generate` against a fault-injecting local server (and a real `transformers serve`).

Every test talks to 127.0.0.1 only. The invariant checked throughout: every input row ends as
exactly one output line or one error line, in the right file, with the right reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))
from fault_server import FaultServer
from serving import CHAIN, _free_port, _serving_missing, transformers_serve

from draftset.cli import main as cli_main
from draftset.core.records import Conversation, RawRow
from draftset.generation.store import recover
from draftset.sources.normalize import normalize

FAST = ["--backoff", "0.01", "--backoff-cap", "0.05", "--health-interval", "0.1", "--no-progress"]


def main(argv: list[str]) -> int:
    """`draftset generate ...` (the command, through the CLI's parser and exit codes)."""
    return cli_main(["generate", *argv])


def write_rows(path: Path, rows: list[Any]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def by_id(path: Path) -> dict[str, dict[str, Any]]:
    lines = read_lines(path)
    ids = [x["id"] for x in lines]
    assert len(ids) == len(set(ids)), f"duplicate ids in {path}"
    return {x["id"]: x for x in lines}


def timeless(lines: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rows without ``metadata.template_now``: the clock of the run that asked, which differs
    between a run and its resume."""
    for line in lines.values():
        line["metadata"].pop("template_now", None)
    return lines


def generate(src: Path, out: Path, *endpoints: str, extra: list[str] | None = None) -> int:
    args = [str(src), "--out", str(out), *FAST, *(extra or [])]
    for url in endpoints:
        args += ["--endpoint", url]
    return main(args)


@pytest.fixture()
def server() -> Iterator[FaultServer]:
    with FaultServer(slow_seconds=3.0) as srv:
        yield srv


def test_faults_every_row_ends_in_the_right_place(tmp_path: Path, server: FaultServer) -> None:
    rows = [
        {"id": "ok", "prompt": "hello"},
        {"id": "e500", "prompt": "boom [500x2]"},
        {"id": "e429", "prompt": "busy [429x1]"},
        {"id": "slow", "prompt": "slow [slowx1]"},
        {"id": "drop", "prompt": "drop [dropx2]"},
        {"id": "badjson", "prompt": "bad body [badjsonx1]"},
        {"id": "badshape", "prompt": "bad shape [badshapex1]"},
        {"id": "len", "prompt": "long [length]"},
        {"id": "e400", "prompt": "refused [400]"},
        {"id": "down", "prompt": "always failing [500x99]"},
        {"id": "garbage", "prompt": "always garbage [badshapex99]"},
        "this line is not json",
        {
            "id": "img",
            "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}],
        },
        {"id": "tok", "input_ids": [1, 2], "loss_mask": [0, 1]},
        {"id": "sys", "messages": [{"role": "system", "content": "only a system turn"}]},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "answers.jsonl"
    t0 = time.monotonic()
    rc = generate(src, out, server.url, extra=["--request-timeout", "1", "--max-retries", "3"])
    assert rc == 0
    assert time.monotonic() - t0 < 20
    written = by_id(out)
    errors = by_id(tmp_path / "answers.errors.jsonl")
    assert set(written) == {"ok", "e500", "e429", "slow", "drop", "badjson", "badshape"}
    reasons = {k: v["reason"] for k, v in errors.items()}
    assert reasons == {
        "len": "length",
        "e400": "http_4xx",
        "down": "retries_exhausted",
        "garbage": "invalid_response",
        "in:11": "invalid_json",
        "img": "unsupported_content",
        "tok": "pretokenized",
        "sys": "nothing_to_generate",
    }
    assert errors["down"]["attempts"] == 4 and errors["down"]["error_kind"] == "http_500"
    assert errors["e400"]["status"] == 400 and "injected" in errors["e400"]["message"]
    assert server.attempts[("busy [429x1]", 0)] == 2
    assert server.attempts[("refused [400]", 0)] == 1  # 4xx: never retried
    assert len(written) + len(errors) == len(rows)


def test_retry_after_is_honoured(tmp_path: Path, server: FaultServer) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "busy [429x1]"}])
    t0 = time.monotonic()
    assert generate(src, tmp_path / "o.jsonl", server.url) == 0
    assert time.monotonic() - t0 >= 1.0  # Retry-After: 1, backoff alone would be ~0.01 s
    assert "a" in by_id(tmp_path / "o.jsonl")


def test_output_shape_reasoning_and_metadata(tmp_path: Path, server: FaultServer) -> None:
    rows = [
        {"id": "a", "prompt": "hi"},
        {"id": "b", "prompt": "hi [reasoningfield]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    extra = [
        "--temperature",
        "0.7",
        "--top-p",
        "0.9",
        "--top-k",
        "20",
        "--max-tokens",
        "64",
        "--seed",
        "3",
        "--extra-body",
        '{"min_p": 0.05}',
        "--chat-template-kwargs",
        '{"custom": 1}',
        "--return-token-ids",
    ]
    before = datetime.now().replace(microsecond=0)
    assert generate(src, out, server.url, extra=extra) == 0
    after = datetime.now()
    lines = by_id(out)
    for row_id in ("a", "b"):
        line = lines[row_id]
        # the instant the answers were asked for: build renders the row's prompts with it
        # (a template's strftime_now), since no request field sets the server's clock
        assert before <= datetime.fromisoformat(line["metadata"]["template_now"]) <= after
        answer = line["messages"][-1]
        assert answer["role"] == "assistant"
        assert answer["reasoning_content"] == "thinking about turn 0"  # `reasoning` renamed
        meta = line["metadata"]
        assert meta["model"] == "fault-model" and meta["endpoint"] == server.url
        assert meta["finish_reason"] == "stop" and meta["usage"]["completion_tokens"] > 0
        assert meta["sampling"] == {
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 20,
            "max_tokens": 64,
            "seed": 3,
            "min_p": 0.05,
        }
        assert meta["thinking"] == "on"
        assert meta["chat_template_kwargs"] == {"custom": 1, "enable_thinking": True}
        assert meta["token_ids"]["turns"][0]["message"] == 1
        assert meta["token_ids"]["turns"][0]["prompt"] == [0, 1, 2]
    sent = server.requests[0]
    assert sent["chat_template_kwargs"] == {"custom": 1, "enable_thinking": True}
    assert sent["return_token_ids"] is True and sent["min_p"] == 0.05 and sent["top_k"] == 20
    # build reads the output as conversations
    for i, line in enumerate(read_lines(out)):
        item = normalize(RawRow("o", i, line))
        assert isinstance(item, Conversation), item


def test_turn_by_turn_carries_the_models_own_answers(tmp_path: Path, server: FaultServer) -> None:
    rows = [
        {"id": "mt", "turns": ["first question", "second question"]},  # MT-Bench shape
        {
            "id": "conv",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "RECORDED ANSWER 1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "RECORDED ANSWER 2"},
                {"role": "user", "content": "q3 (trailing)"},
            ],
        },
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    lines = by_id(out)
    mt = lines["mt"]["messages"]
    assert [m["role"] for m in mt] == ["user", "assistant", "user", "assistant"]
    assert mt[3]["content"].startswith("answer 1 to 'second question'")
    assert "answer 0 to 'first question'"[:20] in mt[3]["content"]  # history was the model's
    conv = lines["conv"]["messages"]
    assert [m["role"] for m in conv] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert not any("RECORDED" in json.dumps(m) for m in conv)
    assert lines["conv"]["metadata"]["answers"] == 3
    for req in server.requests:
        assert not any("RECORDED" in (m.get("content") or "") for m in req["messages"])


def test_a_key_refused_mid_run_stops_the_run_and_leaves_the_rows_for_the_rerun(
    tmp_path: Path, server: FaultServer
) -> None:
    """An API key that expires mid-run (HTTP 401 from then on; 404, 407 likewise: the
    credentials or a gateway's route, not the row): every row left ended as a final
    `http_4xx` line in a fraction of a second, `--retry-errors` did not ask them again, and
    the run exited 0. Now the run stops at the first one, exit 1, naming the endpoint and
    the status, and the rows not answered are left for the rerun."""
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(3)]
    rows += [{"id": "key", "prompt": "refused [echoauth]"}]
    rows += [{"id": f"s{i}", "prompt": f"q{i}"} for i in range(20)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--concurrency", "1"]) == 1
    assert set(by_id(out)) == {"r0", "r1", "r2"}
    assert not read_lines(tmp_path / "o.errors.jsonl")  # no row is blamed for the key
    run = json.loads(out.with_name("o.run.json").read_text(encoding="utf-8"))
    assert run["finished"] is False and run["rows"]["not_done"] == 21


def test_gateway_408_is_retried_like_a_timeout(tmp_path: Path, server: FaultServer) -> None:
    """A gateway in front of the servers (nginx, a cloud load balancer) answers 408 when it
    timed out waiting, and a 502 page when the server behind it restarts: both are passing
    failures, retried (the OpenAI client retries 408 too). A 408 was final, `http_4xx`: the
    row was lost for a hiccup."""
    rows = [
        {"id": "gw408", "prompt": "behind a gateway [408x2]"},
        {"id": "gw502", "prompt": "behind a gateway [502x2]"},
        {"id": "gone", "prompt": "gateway always timing out [408x99]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--max-retries", "3"]) == 0
    assert set(by_id(out)) == {"gw408", "gw502"}, read_lines(tmp_path / "o.errors.jsonl")
    gone = by_id(tmp_path / "o.errors.jsonl")["gone"]
    assert (gone["reason"], gone["error_kind"], gone["attempts"]) == (
        "retries_exhausted",
        "http_408",
        4,
    )


def _tool_row(row_id: str, prompt: str, name: str) -> dict[str, Any]:
    call = {
        "id": "rec_1",
        "type": "function",
        "function": {"name": name, "arguments": {"city": "Paris"}},
    }
    return {
        "id": row_id,
        "tools": [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
        ],
        "messages": [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "rec_1", "content": "sunny, 21C"},
            {"role": "assistant", "content": "It is sunny."},
        ],
    }


def test_tool_results_replayed_or_mismatch(tmp_path: Path, server: FaultServer) -> None:
    rows = [
        _tool_row("same", "weather? [call:get_weather]", "get_weather"),
        _tool_row("other", "weather? [call:get_time]", "get_weather"),
        _tool_row("none", "weather? no call", "get_weather"),
        {
            "id": "extra",
            "messages": [
                {"role": "user", "content": "hi [call:get_weather]"},
                {"role": "assistant", "content": "hello"},
            ],
        },
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    written, errors = by_id(out), by_id(tmp_path / "o.errors.jsonl")
    assert set(written) == {"same", "extra"}
    # a tool call where the row records no result: the row ends after that turn, flagged
    extra = written["extra"]
    assert [m["role"] for m in extra["messages"]] == ["user", "assistant"]
    assert extra["messages"][1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert extra["metadata"]["ends_at_tool_call"] is True
    assert "ends_at_tool_call" not in written["same"]["metadata"]
    msgs = written["same"]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    call_id = msgs[1]["tool_calls"][0]["id"]
    assert msgs[2] == {
        "role": "tool",
        "tool_call_id": call_id,
        "content": "sunny, 21C",
        "name": "get_weather",
    }
    assert "after tool sunny" in msgs[3]["content"]
    assert written["same"]["tools"][0]["function"]["name"] == "get_weather"
    assert any(r.get("tools") for r in server.requests)  # tools were sent
    assert {k: v["reason"] for k, v in errors.items()} == {
        "other": "tool_mismatch",
        "none": "tool_mismatch",
    }
    assert "get_time" in errors["other"]["message"] and errors["other"]["messages"]


def test_recorded_calls_without_ids_are_replayed(tmp_path: Path, server: FaultServer) -> None:
    """Recorded tool calls and results without ids (glaive's function_call / observation
    turns read so): the results are replayed in order, keyed to the model's call ids. The
    replay looked up the result's missing ``tool_call_id`` among the calls' missing ids and
    the run died with a traceback (KeyError)."""
    row = _tool_row("noids", "weather? [call:get_weather]", "get_weather")
    del row["messages"][1]["tool_calls"][0]["id"]
    del row["messages"][2]["tool_call_id"]
    src = write_rows(tmp_path / "in.jsonl", [row, {"id": "plain", "prompt": "hello"}])
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    written = by_id(out)
    assert set(written) == {"noids", "plain"}, read_lines(tmp_path / "o.errors.jsonl")
    msgs = written["noids"]["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "assistant"]
    assert msgs[2]["tool_call_id"] == msgs[1]["tool_calls"][0]["id"]
    assert msgs[2]["name"] == "get_weather" and msgs[2]["content"] == "sunny, 21C"


def test_a_bug_met_on_one_row_is_that_rows_error_and_the_run_goes_on(
    tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception draftset did not foresee, met on one row (the replay of tool rows without
    ids raised `KeyError`), ended the whole run with a traceback, and every rerun again at
    the same row: no row after it could ever be answered. It is that row's error
    `generate_internal_error` (what was raised, and where), retried by --retry-errors."""
    from draftset.generation import runner

    real = runner.run_dialog

    async def buggy(job: Any, ask: Any) -> Any:
        if job.id == "boom":
            raise KeyError("tool_call_id")
        return await real(job, ask)

    monkeypatch.setattr(runner, "run_dialog", buggy)
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(5)] + [{"id": "boom", "prompt": "x"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    assert set(by_id(out)) == {f"r{i}" for i in range(5)}
    error = by_id(tmp_path / "o.errors.jsonl")["boom"]
    assert error["reason"] == "generate_internal_error"
    assert error["message"].startswith("KeyError: 'tool_call_id' at test_generate.py:")
    monkeypatch.setattr(runner, "run_dialog", real)  # fixed: --retry-errors asks again
    assert generate(src, out, server.url, extra=["--retry-errors"]) == 0
    assert "boom" in by_id(out) and not read_lines(tmp_path / "o.errors.jsonl")


def test_length_kept_with_flag(tmp_path: Path, server: FaultServer) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "turns": ["cut [length]", "never asked"]}])
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--keep-length"]) == 0
    line = by_id(out)["a"]
    assert line["metadata"]["finish_reason"] == "length" and line["metadata"]["truncated"] is True
    assert len(line["messages"]) == 2  # stopped at the cut answer
    assert not (tmp_path / "o.errors.jsonl").exists() or not read_lines(tmp_path / "o.errors.jsonl")


def test_thinking_mix_is_seeded_per_row(tmp_path: Path, server: FaultServer) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(40)])
    modes = []
    for run in ("a", "b"):
        out = tmp_path / f"{run}.jsonl"
        assert generate(src, out, server.url, extra=["--thinking", "mix:0.5", "--seed", "7"]) == 0
        lines = by_id(out)
        modes.append({k: v["metadata"]["thinking"] for k, v in lines.items()})
        for line in lines.values():
            on = line["metadata"]["thinking"] == "on"
            assert line["metadata"]["chat_template_kwargs"] == {"enable_thinking": on}
            assert ("reasoning_content" in line["messages"][-1]) == on
    assert modes[0] == modes[1]
    assert 8 < sum(m == "on" for m in modes[0].values()) < 32
    assert generate(src, tmp_path / "off.jsonl", server.url, extra=["--thinking", "off"]) == 0
    assert all(x["metadata"]["thinking"] == "off" for x in read_lines(tmp_path / "off.jsonl"))


def test_resume_skips_done_rows_and_cuts_a_torn_line(tmp_path: Path, server: FaultServer) -> None:
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(20)] + [
        {"id": "bad", "prompt": "x [400]"}
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    full = by_id(out)
    # simulate a crash: keep 5 lines, then a torn half line
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:5]) + lines[5][: len(lines[5]) // 2])
    kept = {json.loads(line)["id"] for line in lines[:5]}
    first_requests = len(server.requests)
    time.sleep(1.0)  # template_now has whole seconds: the resume asks at a later one
    assert generate(src, out, server.url) == 0
    resumed = by_id(out)
    assert all(resumed[i] == full[i] for i in kept)  # the kept lines are untouched
    asked_again = set(resumed) - kept
    assert all(
        resumed[i]["metadata"]["template_now"] > full[i]["metadata"]["template_now"]
        for i in asked_again
    )  # each re-asked row carries the clock of the run that asked it
    assert timeless(resumed) == timeless(full)
    assert len(server.requests) - first_requests == 15  # only the missing rows were asked
    assert len(by_id(tmp_path / "o.errors.jsonl")) == 1
    assert recover(out).torn_bytes == 0


def test_retry_errors_flag_retries_transient_failures(tmp_path: Path, server: FaultServer) -> None:
    src = write_rows(
        tmp_path / "in.jsonl",
        [{"id": "a", "prompt": "flaky [500x3]"}, {"id": "b", "prompt": "x [400]"}],
    )
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--max-retries", "1"]) == 1  # none answered
    assert by_id(tmp_path / "o.errors.jsonl")["a"]["reason"] == "retries_exhausted"
    assert generate(src, out, server.url, extra=["--max-retries", "1", "--retry-errors"]) == 0
    assert set(by_id(out)) == {"a"}
    assert set(by_id(tmp_path / "o.errors.jsonl")) == {"b"}


def test_endpoints_least_loaded_down_and_readmitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    src = write_rows(
        tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(120)]
    )
    out = tmp_path / "o.jsonl"
    with FaultServer(latency=0.02) as a, FaultServer(latency=0.02, down=True) as b:
        import threading

        threading.Timer(0.5, lambda: setattr(b, "down", False)).start()
        rc = generate(src, out, a.url, b.url, dead, extra=["--concurrency", "2"])
        assert rc == 0
        assert len(by_id(out)) == 120
        assert a.completions > 0 and b.completions > 0  # b was re-admitted once healthy
        assert a.completions + b.completions == 120
    assert "taken out of rotation" in capsys.readouterr().out


def test_all_endpoints_unreachable_exits_1(tmp_path: Path) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    dead = f"http://127.0.0.1:{_free_port()}"
    assert generate(src, tmp_path / "o.jsonl", dead) == 1
    assert not read_lines(tmp_path / "o.jsonl")


def test_run_stops_resumably_when_every_endpoint_stays_down(tmp_path: Path) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(40)])
    out = tmp_path / "o.jsonl"
    with FaultServer(latency=0.05, down_after=10) as srv:
        rc = generate(src, out, srv.url, extra=["--concurrency", "2", "--give-up-after", "0.5"])
        assert rc == 1
        done = len(read_lines(out)) + len(read_lines(tmp_path / "o.errors.jsonl"))
        assert 0 < done < 40
        assert not read_lines(tmp_path / "o.errors.jsonl")  # outage rows are left for the rerun
        srv.down = False
        assert generate(src, out, srv.url) == 0
        assert len(by_id(out)) == 40


@pytest.mark.parametrize(
    "extra",
    [
        ["--thinking", "sometimes"],
        ["--thinking", "mix:1.5"],
        ["--extra-body", "{not json"],
        ["--extra-body", '{"messages": []}'],
        ["--chat-template-kwargs", "[1]"],
        ["--thinking", "on", "--chat-template-kwargs", '{"enable_thinking": false}'],
        ["--concurrency", "0"],
        ["--model", "some-other-model"],
        # what every server refuses with 400 (vLLM 0.33, SGLang): each row an http_4xx before
        ["--top-p", "0"],
        ["--top-k", "-2"],
        ["--seed", str(2**63)],  # vLLM's seed is an int64
        ["--seed", str(-(2**63) - 1)],
    ],
)
def test_bad_arguments_exit_2(tmp_path: Path, server: FaultServer, extra: list[str]) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    assert not server.requests


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (
            "ans.parquet",
            "--out {out}: generate writes JSON Lines (appended, and resumed from), which a"
            " .parquet name would hide from build: name it ans.jsonl",
        ),
        (
            "ans.json.gz",
            "--out {out}: generate writes JSON Lines (appended, and resumed from), which a"
            " .gz name would hide from build: name it ans.jsonl",
        ),
        (
            "answers/",
            "--out {out}/ names a folder: generate writes one .jsonl file (and its .errors.jsonl,"
            " .run.json and .lock beside it): give its path, e.g. {out}/answers.jsonl",
        ),
    ],
)
def test_an_out_named_as_no_jsonl_file_is_refused_before_any_request(
    tmp_path: Path,
    server: FaultServer,
    capsys: pytest.CaptureFixture[str],
    name: str,
    said: str,
) -> None:
    """``--out ans.parquet`` wrote JSON Lines under a Parquet name (``build ans.parquet``:
    "Parquet magic bytes not found"); ``--out answers/`` wrote a file ``answers`` (and
    ``answers.lock`` beside it), not a folder."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    out = tmp_path / name
    assert (
        main([str(src), "--out", str(tmp_path) + "/" + name, *FAST, "--endpoint", server.url]) == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"draftset: error: {said.format(out=out)}"], err
    assert not server.requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


def test_a_concurrency_no_process_could_open_is_one_line(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`concurrency: 1000000000` (a typo) created a task per slot up front: 2.1 GB in 30 s."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    extra = ["--concurrency", "1000000000"]
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--concurrency 1000000000" in err and "ulimit -n" in err, err
    assert not server.requests and not (tmp_path / "o.jsonl").exists()


def test_request_tasks_start_as_jobs_arrive(
    tmp_path: Path, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large concurrency costs only what the input uses: 3 prompts, 3 request tasks."""
    import asyncio
    import resource

    from draftset.generation.http import FILES_KEPT_FREE

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    concurrency = min(5000, soft - FILES_KEPT_FREE)
    started: list[str] = []
    create_task = asyncio.create_task

    def counting(coro: Any, **kw: Any) -> Any:
        started.append(getattr(coro, "__qualname__", ""))
        return create_task(coro, **kw)

    monkeypatch.setattr("draftset.generation.job.asyncio.create_task", counting)
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(3)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--concurrency", str(concurrency)]) == 0
    assert sorted(by_id(out)) == ["r0", "r1", "r2"]
    assert sum(name.endswith("worker") for name in started) == 3, started


def test_missing_source_exits_2(tmp_path: Path, server: FaultServer) -> None:
    assert generate(tmp_path / "nope.jsonl", tmp_path / "o.jsonl", server.url) == 2


# --- crash safety: SIGKILL mid-run, then resume -------------------------------------------
_CHILD = "import sys; from draftset.cli import main; sys.exit(main(['generate', *sys.argv[1:]]))"


def _child(src: Path, out: Path, url: str) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        "-c",
        _CHILD,
        str(src),
        "--out",
        str(out),
        "--endpoint",
        url,
        "--concurrency",
        "4",
        *FAST,
    ]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_mid_run_then_resume_is_exactly_once(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "turns": [f"q{i}", f"follow-up {i}"]} for i in range(60)]
    rows += [{"id": f"e{i}", "prompt": f"refused {i} [400]"} for i in range(5)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    with FaultServer(latency=0.02) as srv:
        ref = tmp_path / "ref.jsonl"
        assert generate(src, ref, srv.url) == 0
        out = tmp_path / "crash.jsonl"
        proc = _child(src, out, srv.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (
            not out.exists() or out.read_bytes().count(b"\n") < 10
        ):
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stderr is not None
        proc.stderr.close()  # the killed run's pipe (its text is of no use)
        partial = out.read_bytes().count(b"\n")
        assert 10 <= partial < 60, "the kill should land mid-run"
        proc = _child(src, out, srv.url)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()

    assert timeless(by_id(out)) == timeless(by_id(ref))  # same set, each id exactly once
    assert by_id(tmp_path / "crash.errors.jsonl") == by_id(tmp_path / "ref.errors.jsonl")


# --- a real server: transformers serve with a tiny random Qwen3-shaped model ----------------
@pytest.mark.skipif(
    _serving_missing() is not None,
    reason=f"needs torch + transformers[serving] ({_serving_missing()} missing)",
)
def test_real_transformers_serve_then_build(tmp_path: Path, qwen3_dir: Path) -> None:
    with transformers_serve(tmp_path, qwen3_dir) as port:
        rows = [
            {"id": "one", "prompt": "What is 2+2?"},
            {"id": "two", "turns": ["Hi!", "And again?"]},
            {
                "id": "sys",
                "messages": [
                    {"role": "system", "content": "Be terse."},
                    {"role": "user", "content": "héllo 世界 🙂"},
                ],
            },
        ]
        src = write_rows(tmp_path / "in.jsonl", rows)
        out = tmp_path / "answers.jsonl"
        extra = [
            "--thinking",
            "off",
            "--max-tokens",
            "16",
            "--request-timeout",
            "60",
            "--concurrency",
            "2",
        ]
        assert generate(src, out, f"http://127.0.0.1:{port}", extra=extra) == 0
    lines = by_id(out)
    assert set(lines) == {"one", "two", "sys"}, read_lines(tmp_path / "answers.errors.jsonl")
    for line in lines.values():
        answers = [m for m in line["messages"] if m["role"] == "assistant"]
        assert answers and all(m["content"] == "".join(CHAIN) for m in answers)
        assert line["metadata"]["finish_reason"] == "stop"
        assert line["metadata"]["chat_template_kwargs"] == {"enable_thinking": False}
    _build_and_check(out, tmp_path / "ds", qwen3_dir)


def _build_and_check(answers: Path, out_dir: Path, tokenizer: Path) -> None:
    """The answers go through `build`: every row written, supervised text = what was served."""
    from tokenizers import Tokenizer

    from draftset.config.options import BuildOptions
    from draftset.pipeline.build import run_build
    from draftset.sources.read import Source

    # no run-wide template kwargs: each row is rendered with the kwargs it was generated with
    opts = BuildOptions(
        sources=[Source("answers", answers)], tokenizer=str(tokenizer), out=out_dir, workers=1
    )
    result = run_build(opts)
    total = result.accounting.total()
    assert total.written == 3 and total.rejected_total == 0
    from draftset.checks.verify import run_verify

    # and `verify` proves the set; answers this short leave DFlash no anchor (size, not defect)
    failed = [
        (r.name, r.summary)
        for r in run_verify(out_dir, speculators=False)
        if r.failed and r.name != "drafter_fitness"
    ]
    assert failed == []
    import pyarrow as pa

    tok = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    shards = sorted(out_dir.glob("*.arrow"))
    with pa.memory_map(str(shards[0])) as f:
        table = pa.ipc.open_stream(f).read_all()
    for ids, mask in zip(
        table.column("input_ids").to_pylist(), table.column("loss_mask").to_pylist(), strict=True
    ):
        supervised = tok.decode(
            [i for i, m in zip(ids, mask, strict=True) if m], skip_special_tokens=False
        )
        assert set(supervised.split("<|im_end|>")[:-1]) == {"".join(CHAIN)}


# --- issue 10: bounded responses, one writer, valid UTF-8, credentials, endpoint health ---------
def test_response_size_cap_and_gzip_bomb_are_row_errors(tmp_path: Path) -> None:
    rows = [
        {"id": "ok", "prompt": "hello"},
        {"id": "huge", "prompt": "big body [huge]"},
        {"id": "bomb", "prompt": "small gzip body, 256 MiB inflated [gzipbomb]"},
        {"id": "gzip", "prompt": "a normal gzip answer [gzip]"},
        {"id": "chunked", "prompt": "a chunked answer [chunked]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        rc = generate(src, out, srv.url, extra=["--max-response-bytes", str(1 << 20)])
        assert rc == 0
        assert srv.attempts[(rows[2]["prompt"], 0)] == 1  # too large: final, never retried
    written, errors = by_id(out), by_id(tmp_path / "o.errors.jsonl")
    assert set(written) == {"ok", "gzip", "chunked"}
    assert written["gzip"]["messages"][-1]["content"].startswith("answer 0 to")
    assert {k: v["reason"] for k, v in errors.items()} == {
        "huge": "response_too_large",
        "bomb": "response_too_large",
    }
    assert "decompresses to more than 1,048,576 bytes" in errors["bomb"]["message"]
    assert "--max-response-bytes" in errors["huge"]["message"]


def test_read_response_never_inflates_past_the_limit() -> None:
    """The decoder is handed at most limit + 1 output bytes, whatever the gzip body holds."""
    import asyncio

    from fault_server import _bomb

    from draftset.generation.wire import BodyTooLarge, _Conn, read_response

    body = _bomb(64 << 20)
    conn = _Conn()
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    conn.buf += head + body
    with pytest.raises(BodyTooLarge) as info:
        asyncio.run(read_response(conn, 1 << 20))
    assert info.value.decoded


def test_keep_alive_connection_closed_by_the_server_is_replaced(tmp_path: Path) -> None:
    """A server that closes idle keep-alive connections: the next request opens a new one,
    without counting a failure or a retry."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(8)])
    out = tmp_path / "o.jsonl"
    with FaultServer(close_after_reply=True) as srv:
        assert generate(src, out, srv.url, extra=["--concurrency", "1", "--max-retries", "0"]) == 0
        assert set(srv.attempts.values()) == {1}
    assert len(by_id(out)) == 8


@pytest.mark.parametrize(
    ("raw", "body", "keep"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nhi", b"hi", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi", b"hi", False),
        (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx", b"x", True),
        (b"HTTP/1.1 200 OK\r\n\r\nuntil the end", b"until the end", False),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3;x=y\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: 1\r\n\r\n",
            b"abcde",
            True,
        ),
    ],
)
def test_read_response_framing(raw: bytes, body: bytes, keep: bool) -> None:
    import asyncio

    from draftset.generation.wire import _Conn, read_response

    conn = _Conn()
    conn.buf += raw
    conn.eof = True  # everything has arrived
    resp, reusable = asyncio.run(read_response(conn, 1 << 20))
    assert (resp.status, resp.body, reusable) == (200, body, keep)


def test_second_run_on_the_same_out_exits_2_at_once(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(60)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer(latency=0.05) as srv:
        proc = _child(src, out, srv.url)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not out.exists() or not out.read_bytes()):
            time.sleep(0.01)
        asked = len(srv.requests)
        t0 = time.monotonic()
        assert generate(src, out, srv.url) == 2
        assert time.monotonic() - t0 < 5
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode()
        assert len(srv.requests) - asked <= 60  # the refused run sent nothing of its own
        assert len(srv.requests) == 60
    assert set(by_id(out)) == {f"r{i}" for i in range(60)}  # each row exactly once


def test_lone_surrogate_in_an_answer_is_an_error_never_written(tmp_path: Path) -> None:
    from draftset.sources.read import Source, iter_raw_rows

    rows = [{"id": "ok", "prompt": "hello"}, {"id": "bad", "prompt": "half a pair [surrogate]"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        assert generate(src, out, srv.url, extra=["--max-retries", "1"]) == 0
    out.read_bytes().decode("utf-8")  # strict: the file is valid UTF-8
    errors = by_id(tmp_path / "o.errors.jsonl")
    assert errors["bad"]["reason"] == "invalid_response"
    assert "surrogate" in errors["bad"]["message"]
    assert set(by_id(out)) == {"ok"}
    assert all(raw.reject is None for raw in iter_raw_rows(Source("o", out)))  # build reads it


def test_api_key_from_the_environment_redacted_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = "sk-test-0123456789abcdef"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("DRAFTSET_API_KEY", secret)
    rows = [{"id": "ok", "prompt": "hello"}, {"id": "echo", "prompt": "who am I [echoauth]"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        url = srv.url.replace("http://", "http://alice:hunter2pw@")
        # the 401 stops the run (the key, not the row), saying what the server answered
        assert generate(src, out, url, extra=["--concurrency", "1"]) == 1
        assert {h.get("authorization") for h in srv.headers} == {f"Bearer {secret}"}
    errors_file = tmp_path / "o.errors.jsonl"
    files = (
        out.read_text()
        + (errors_file.read_text() if errors_file.exists() else "")
        + out.with_name("o.run.json").read_text()
    )
    printed = capsys.readouterr()
    for text in (files, printed.out, printed.err):
        assert secret not in text and "hunter2pw" not in text and "alice" not in text
    assert "HTTP 401" in printed.err and "[redacted]" in printed.err
    assert by_id(out)["ok"]["metadata"]["endpoint"] == srv.url
    # without a key, user:password@ in the URL is sent as Basic auth (and never shown)
    monkeypatch.delenv("DRAFTSET_API_KEY")
    monkeypatch.setenv("OPENAI_API_KEY", "")
    with FaultServer() as srv:
        url = srv.url.replace("http://", "http://alice:hunter2pw@")
        assert generate(src, tmp_path / "basic.jsonl", url, extra=["--concurrency", "1"]) == 1
        assert {h.get("authorization") for h in srv.headers} == {"Basic YWxpY2U6aHVudGVyMnB3"}


def test_api_key_environment_order(monkeypatch: pytest.MonkeyPatch) -> None:
    from draftset.generation.options import api_key_from_env

    monkeypatch.delenv("DRAFTSET_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "from-openai")
    assert api_key_from_env() == "from-openai"
    monkeypatch.setenv("DRAFTSET_API_KEY", "from-draftset")
    assert api_key_from_env() == "from-draftset"


def test_redact_authorization_echoes() -> None:
    from draftset.generation.http import redact

    text = '{"authorization": "Bearer abc.def", "x-api-key": "k1"} Authorization: Basic Zm9v'
    out = redact(text + " token sk-zz", ("sk-zz",))
    assert "abc.def" not in out and "k1" not in out and "Zm9v" not in out and "sk-zz" not in out


def test_one_failing_prompt_keeps_the_only_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A prompt the server answers with 500 every time is that row's error; the endpoint passes
    its health check and keeps serving (before: taken out, the run gave up with exit 1)."""
    rows = [{"id": "bad", "prompt": "cannot handle [500x99]"}]
    rows += [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(20)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    extra = ["--concurrency", "1", "--health-interval", "5", "--give-up-after", "0.5"]
    with FaultServer() as srv:
        t0 = time.monotonic()
        assert generate(src, out, srv.url, extra=extra) == 0
        assert time.monotonic() - t0 < 4
        assert srv.attempts[("cannot handle [500x99]", 0)] == 7
    assert len(by_id(out)) == 20
    assert "taken out of rotation" not in capsys.readouterr().out
    assert by_id(tmp_path / "o.errors.jsonl")["bad"]["reason"] == "retries_exhausted"


# --- issue 12: resume refuses other settings; presets -------------------------------------------
def test_resume_refuses_other_settings_or_model_and_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(5)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        assert generate(src, out, srv.url, extra=["--temperature", "0.6"]) == 0
        run = json.loads((tmp_path / "o.run.json").read_text())
        assert run["model"] == "fault-model" and run["reported_models"] == ["fault-model"]
        assert run["settings"]["sampling"] == {"temperature": 0.6}
        before = out.read_bytes()
        asked = len(srv.requests)
        capsys.readouterr()
        for extra, named in [
            (["--temperature", "0.7"], "temperature 0.6 -> 0.7"),
            (["--temperature", "0.6", "--thinking", "off"], "thinking 'on' -> 'off'"),
            (["--temperature", "0.6", "--chat-template-kwargs", '{"x": 1}'], "x"),
            (["--temperature", "0.6", "--top-p", "0.9"], "top_p None -> 0.9"),
            (["--temperature", "0.6", "--format", "prompt"], "inputs.in.format None -> 'prompt'"),
        ]:
            assert generate(src, out, srv.url, extra=extra) == 2
            err = capsys.readouterr().err
            assert named in err and "--restart" in err, err
        assert out.read_bytes() == before and len(srv.requests) == asked
        # --restart: the previous answers go (they are ours), the new settings apply
        assert generate(src, out, srv.url, extra=["--temperature", "0.7", "--restart"]) == 0
        assert "removed the previous run's" in capsys.readouterr().err
        lines = read_lines(out)
        assert len(lines) == 5
        assert {x["metadata"]["sampling"]["temperature"] for x in lines} == {0.7}
        # another source added on a resume is not a change: only its rows are asked for
        more = write_rows(tmp_path / "more.jsonl", [{"id": "m0", "prompt": "more"}])
        asked = len(srv.requests)
        args = [str(src), str(more), "--out", str(out), "--endpoint", srv.url, *FAST]
        assert main([*args, "--temperature", "0.7"]) == 0
        assert len(srv.requests) == asked + 1 and len(read_lines(out)) == 6
    with FaultServer(model="another-model") as other:
        assert generate(src, out, other.url, extra=["--temperature", "0.7"]) == 2
        assert "model 'fault-model' -> 'another-model'" in capsys.readouterr().err
        assert not other.requests


def test_out_that_generate_did_not_write_is_refused_even_with_restart(
    tmp_path: Path, server: FaultServer
) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    mine = write_rows(tmp_path / "mine.jsonl", [{"id": "a", "text": "my own data"}])
    before = mine.read_bytes()
    assert generate(src, mine, server.url) == 2
    assert generate(src, mine, server.url, extra=["--restart"]) == 2
    assert mine.read_bytes() == before and not server.requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "mine.jsonl"]


def test_an_empty_source_is_exit_2_before_any_work(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`generate` on an empty file printed "input rows 0" and exited 0; then exit 1 after
    asking the server for its model and writing four files beside --out. `build` on the same
    file is one line, exit 2, before any work: so is generate."""
    src = tmp_path / "empty.jsonl"
    src.write_text("")
    assert generate(src, tmp_path / "a.jsonl", server.url) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"draftset: error: {src}: it holds no rows (empty, or only blank lines)"
    assert not server.requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl"]


def test_a_source_of_unknown_rows_is_exit_2_before_any_work(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """MBPP-like rows (``text``, ``code``): `build` says at once which --format / --field reads
    them; `generate` made every row an ``unknown_format`` error (the hint cut mid-word in the
    last line), wrote four files and exited 1."""
    rows = [{"text": f"Write f{i}.", "code": f"def f{i}(): pass", "task_id": i} for i in range(3)]
    src = write_rows(tmp_path / "mbpp.jsonl", rows)
    assert generate(src, tmp_path / "a.jsonl", server.url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no known row shape" in err[0]
    assert "--format alpaca --field instruction=text --field output=code" in err[0]
    assert not server.requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mbpp.jsonl"]


def test_the_refusal_names_the_file_that_is_not_generates(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only `b.errors.jsonl` (the user's) was there: the refusal named `b.jsonl`, which did
    not exist."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    theirs = write_rows(tmp_path / "b.errors.jsonl", [{"note": "my own data"}])
    assert generate(src, tmp_path / "b.jsonl", server.url) == 2
    err = capsys.readouterr().err
    assert f"{theirs} exists and was not written by draftset generate" in err
    assert not server.requests and not (tmp_path / "b.jsonl").exists()


def test_out_that_is_a_source_or_inside_one_is_refused_before_anything(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """`generate ans.jsonl --out ans.jsonl --restart` deleted its own input ("removed the
    previous run's ans.jsonl", then "no such file"); `generate data/ --out data/a.jsonl` read
    its run file as a row and, rerun, its own answers back (60 answers for 30 prompts)."""
    data = tmp_path / "data"
    data.mkdir()
    src = write_rows(data / "in.jsonl", [{"id": f"p{i}", "prompt": f"q{i}"} for i in range(3)])
    other = write_rows(tmp_path / "x.errors.jsonl", [{"id": "x", "prompt": "q"}])
    ans = tmp_path / "ans.jsonl"
    assert generate(src, ans, server.url) == 0
    capsys.readouterr()
    sent = len(server.requests)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    cases = [
        (ans, ans, ["--restart"], f"--out {ans} is the source {ans}"),
        (data, data / "answers.jsonl", [], "is inside the source folder"),
        (other, tmp_path / "x.jsonl", [], f"is the source {other}"),  # the errors file
    ]
    for source, out, extra, needle in cases:
        assert generate(source, out, server.url, extra=extra) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and needle in err[0], err
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert len(server.requests) == sent


def test_preset_and_field_mapping_as_in_build(tmp_path: Path, server: FaultServer) -> None:
    orca = [
        {"id": "o1", "system_prompt": "You are terse.", "question": "Why?", "response": "OLD"},
    ]
    src = write_rows(tmp_path / "orca.jsonl", orca)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--preset", "openorca"]) == 0
    msgs = by_id(out)["o1"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert msgs[0]["content"] == "You are terse." and "OLD" not in msgs[2]["content"]
    code = write_rows(tmp_path / "code.jsonl", [{"id": "c1", "task": "Write a loop."}])
    out2 = tmp_path / "o2.jsonl"
    extra = ["--format", "alpaca", "--field", "instruction=task"]
    assert generate(code, out2, server.url, extra=extra) == 0
    assert by_id(out2)["c1"]["messages"][0] == {"role": "user", "content": "Write a loop."}
    assert generate(src, tmp_path / "o3.jsonl", server.url, extra=["--preset", "nope"]) == 2
    # a build recipe: its sources with their own preset / format / fields
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "tokenizer: unused\nout: unused\nsources:\n"
        "  - {path: orca.jsonl, preset: openorca}\n"
        "  - {path: code.jsonl, format: alpaca, fields: {instruction: task}}\n"
    )
    out4 = tmp_path / "o4.jsonl"
    assert generate(recipe, out4, server.url) == 0
    lines = by_id(out4)
    assert lines["o1"]["messages"][0]["content"] == "You are terse."
    assert lines["c1"]["messages"][0]["content"] == "Write a loop."


def test_answers_from_another_model_are_error_rows(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that switched models mid-run: 181 of 230 answers came from another model, yet
    every answer was written as the run's model's. Each answer's `model` field is checked:
    another model's answer is that row's `model_mismatch` error line (--retry-errors retries
    it), never an answer."""
    rows = [{"id": f"ok{i}", "prompt": f"q{i}"} for i in range(3)]
    rows += [{"id": f"sw{i}", "prompt": f"q{i} [model:other-model]"} for i in range(4)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    assert generate(src, out, server.url) == 0
    answers, errors = by_id(out), by_id(tmp_path / "out.errors.jsonl")
    assert sorted(answers) == ["ok0", "ok1", "ok2"]
    assert {a["metadata"]["model"] for a in answers.values()} == {"fault-model"}
    assert sorted(errors) == [f"sw{i}" for i in range(4)]
    assert {e["reason"] for e in errors.values()} == {"model_mismatch"}
    assert errors["sw0"]["message"] == (
        "answered by 'other-model', not this run's model 'fault-model'"
    )
    run = json.loads((tmp_path / "out.run.json").read_text())
    assert set(run["reported_models"]) == {"fault-model", "other-model"}
    assert "model_mismatch" in capsys.readouterr().out


def test_api_key_echoed_in_a_200_answer_is_stored_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that echoes the key inside an answer (issue 25, item 13): the answers file is
    training data; before, the key was stored there verbatim."""
    secret = "sk-echo-0123456789abcdef"
    monkeypatch.setenv("DRAFTSET_API_KEY", secret)
    src = write_rows(tmp_path / "in.jsonl", [{"id": "e", "prompt": "who [echoauth200]"}])
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        assert generate(src, out, srv.url, extra=["--return-token-ids"]) == 0
    text = out.read_text()
    assert secret not in text
    answer = by_id(out)["e"]["messages"][-1]
    assert "Bearer [redacted]" in answer["content"]
    assert answer["reasoning_content"] == "the key [redacted] echoed"


def test_retry_after_far_in_the_future_waits_at_most_the_request_timeout(tmp_path: Path) -> None:
    """`Retry-After: <a date in 2099>` stalled each retry 300 s; it is honoured up to 60 s, or
    --request-timeout when shorter."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "busy [429x1]"}])
    with FaultServer(retry_after="Thu, 01 Jan 2099 00:00:00 GMT") as srv:
        t0 = time.monotonic()
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=["--request-timeout", "1"])
        took = time.monotonic() - t0
    assert rc == 0 and "a" in by_id(tmp_path / "o.jsonl")
    assert 1.0 <= took < 15, took


# --- issue 24, item 9: a special token's text in an answer ------------------------------------
def test_leaked_stop_token_is_cut_and_other_special_text_fails_the_row(
    tmp_path: Path, server: FaultServer, qwen3_dir: Path
) -> None:
    """With --tokenizer: `<|im_end|>` ending an answer is the stop token the server leaked (the
    model stopped there): cut before the answer becomes history, and counted. Anywhere else the
    row fails `special_token_in_answer`. Without it, nothing is cut (build rejects such rows)."""
    rows = [
        {"id": "leak", "turns": ["hi [leak]", "again"]},
        {"id": "mid", "prompt": "say <|im_end|> twice"},  # echoed inside the answer
        {"id": "clean", "prompt": "hello"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    extra = ["--thinking", "off", "--tokenizer", str(qwen3_dir)]
    assert generate(src, out, server.url, extra=extra) == 0
    lines = by_id(out)
    assert set(lines) == {"leak", "clean"}
    answers = [m for m in lines["leak"]["messages"] if m["role"] == "assistant"]
    assert len(answers) == 2 and not any("<|im_end|>" in m["content"] for m in answers)
    assert lines["leak"]["metadata"]["special_tokens_stripped"] == ["<|im_end|>"] * 2
    # the cut answer is what the second request carried as history
    second = [r for r in server.requests if r["messages"][0]["content"] == "hi [leak]"][-1]
    assert not any("<|im_end|>" in m["content"] for m in second["messages"][1:])
    assert "special_tokens_stripped" not in lines["clean"]["metadata"]
    (err,) = read_lines(tmp_path / "o.errors.jsonl")
    assert err["id"] == "mid" and err["reason"] == "special_token_in_answer"
    assert "'<|im_end|>'" in err["message"]
    plain = tmp_path / "plain.jsonl"
    assert generate(src, plain, server.url, extra=["--thinking", "off"]) == 0
    kept = by_id(plain)
    assert kept["leak"]["messages"][1]["content"].endswith("<|im_end|>")


def test_bad_tokenizer_folder_exits_2(tmp_path: Path, server: FaultServer) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hi"}])
    extra = ["--tokenizer", str(tmp_path / "nowhere")]
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    assert not (tmp_path / "o.jsonl").exists()


def test_tool_call_arguments_are_sent_as_json_text(tmp_path: Path, server: FaultServer) -> None:
    """OpenAI's wire format gives `function.arguments` as a JSON string; vLLM 0.33 answers an
    object there with HTTP 400 ("Input should be a valid string"), so every conversation with a
    tool call in its history was refused. A row's object arguments are sent as their JSON."""
    src = write_rows(
        tmp_path / "in.jsonl", [_tool_row("same", "w? [call:get_weather]", "get_weather")]
    )
    assert generate(src, tmp_path / "o.jsonl", server.url) == 0
    sent = [
        call["function"]["arguments"]
        for req in server.requests
        for m in req["messages"]
        for call in m.get("tool_calls") or ()
    ]
    assert sent and all(isinstance(a, str) for a in sent), sent
    assert all(isinstance(json.loads(a), dict) for a in sent)
    # the answers file keeps the row's own shape (build reads it as before)
    assert by_id(tmp_path / "o.jsonl")["same"]["messages"][1]["tool_calls"]


def test_reasoning_effort_is_also_sent_as_the_request_field(
    tmp_path: Path, server: FaultServer
) -> None:
    """vLLM renders gpt-oss through harmony, which reads the effort from the request's own
    ``reasoning_effort`` and ignores ``chat_template_kwargs``; build renders the row with the
    kwargs recorded in its metadata, so both must carry the same effort."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hi"}])
    out = tmp_path / "o.jsonl"
    extra = ["--chat-template-kwargs", '{"reasoning_effort": "high"}']
    assert generate(src, out, server.url, extra=extra) == 0
    sent = server.requests[0]
    assert sent["reasoning_effort"] == "high"
    assert sent["chat_template_kwargs"]["reasoning_effort"] == "high"
    assert by_id(out)["a"]["metadata"]["chat_template_kwargs"]["reasoning_effort"] == "high"
    # given in both at one value: sent once, as it is
    extra += ["--extra-body", '{"reasoning_effort": "high"}']
    assert generate(src, tmp_path / "o3.jsonl", server.url, extra=extra) == 0
    assert server.requests[-1]["reasoning_effort"] == "high"
    # without it in the kwargs, no field is sent (the server's default stands)
    out2 = tmp_path / "o2.jsonl"
    assert generate(src, out2, server.url) == 0
    assert "reasoning_effort" not in server.requests[-1]


def test_sigterm_ends_generate_with_a_line_and_143(tmp_path: Path) -> None:
    """SIGTERM killed `generate` by the default handler: exit 143 with nothing on stderr
    (build said "terminated"). Now it ends as Ctrl-C does, with a line saying how to resume,
    and the rerun resumes."""
    import signal
    import subprocess
    import time

    src = write_rows(
        tmp_path / "p.jsonl",
        [{"id": f"p{i}", "messages": [{"role": "user", "content": f"Q{i}?"}]} for i in range(40)],
    )
    out = tmp_path / "answers.jsonl"
    with FaultServer(latency=0.5) as srv:
        exe = str(Path(sys.executable).with_name("draftset"))
        argv = [exe, "generate", str(src), "--out", str(out)]
        argv += ["--endpoint", srv.url, "--concurrency", "2", *FAST]
        proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while srv.completions < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 143, err
        assert "terminated; rerun the same command to resume" in err and "Traceback" not in err
        assert main([str(src), "--out", str(out), "--endpoint", srv.url, *FAST]) == 0
    assert len(by_id(out)) == 40


def test_chat_template_kwargs_spelling_a_boolean_as_text_is_exit_2(tmp_path: Path, capsys) -> None:
    src = write_rows(tmp_path / "p.jsonl", [{"messages": [{"role": "user", "content": "Hi"}]}])
    extra = ["--chat-template-kwargs", '{"enable_thinking": "false"}']
    assert generate(src, tmp_path / "a.jsonl", "http://127.0.0.1:9/v1", extra=extra) == 2
    assert "enable_thinking is the string 'false'" in capsys.readouterr().err


def test_an_answer_the_model_did_not_end_itself_is_never_written(
    tmp_path: Path, server: FaultServer
) -> None:
    """vLLM's `finish_reason: "abort"`, OpenAI's `content_filter`, and a `stop` that a stop
    string made (vLLM `stop_reason: "###"`, SGLang `matched_stop`): the server ended the
    answer, not the model, yet only "length" was treated as cut, so the answer was trained
    with `<|im_end|>` after it (docs/semantics.md: an answer the model did not end itself is
    never supervised). A stop *token* id is the model's own end."""
    rows = [
        {"id": "abort", "prompt": "q [finish:abort]"},
        {"id": "filter", "prompt": "q [finish:content_filter]"},
        {"id": "stopstr", "prompt": "q [stopstr]"},
        {"id": "matched", "prompt": "q [matchedstr]"},
        {"id": "stoptoken", "prompt": "q [stoptoken]"},
        {"id": "calls", "prompt": "q [call:f]"},
        {"id": "ok", "prompt": "q"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "answers.jsonl"
    assert generate(src, out, server.url) == 0
    assert set(by_id(out)) == {"stoptoken", "calls", "ok"}
    errors = by_id(tmp_path / "answers.errors.jsonl")
    assert {k: v["reason"] for k, v in errors.items()} == dict.fromkeys(
        ["abort", "filter", "stopstr", "matched"], "unfinished"
    )
    assert "'abort'" in errors["abort"]["message"] and "'###'" in errors["stopstr"]["message"]


def test_the_stop_token_that_ended_an_answer_is_recorded(
    tmp_path: Path, server: FaultServer
) -> None:
    """vLLM names the stop token that ended an answer (`stop_reason`, an id) unless it is the
    tokenizer's EOS: kept per answer, so build can tell an answer that ended on another stop
    token than the template writes (Qwen3's `<|endoftext|>`: docs/semantics.md)."""
    rows = [
        {"id": "other", "prompt": "q [stopid:151643]"},
        {"id": "eos", "prompt": "q"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "answers.jsonl"
    assert generate(src, out, server.url) == 0
    got = by_id(out)
    assert got["other"]["metadata"]["stop_tokens"] == [{"message": 1, "id": 151643}]
    assert "stop_tokens" not in got["eos"]["metadata"]


def test_an_answer_vllm_says_the_eos_ended_is_recorded_as_the_eos(
    tmp_path: Path, server: FaultServer
) -> None:
    """vLLM writes `stop_reason: null` for an answer the tokenizer's EOS ended (any other stop
    token is named by its id): recorded as ``{"eos": true}``, so build can tell an answer that
    ended on the EOS where the template writes another stop (a Llama-3.2 tokenizer whose EOS is
    `<|end_of_text|>`, the template's `<|eot_id|>`). A server that says nothing (no
    `stop_reason` key, as OpenAI's) records nothing; a cut answer records no stop."""
    rows = [
        {"id": "eos", "prompt": "q [eosnull]"},
        {"id": "silent", "prompt": "q"},
        {"id": "cut", "prompt": "q [eosnull] [length]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "answers.jsonl"
    assert generate(src, out, server.url, extra=["--keep-length"]) == 0
    got = by_id(out)
    assert got["eos"]["metadata"]["stop_tokens"] == [{"message": 1, "eos": True}]
    assert "stop_tokens" not in got["silent"]["metadata"]
    assert "stop_tokens" not in got["cut"]["metadata"]


def test_the_answer_is_the_choice_with_index_0_wherever_it_is_listed(
    tmp_path: Path, server: FaultServer
) -> None:
    """A body whose `choices` lists another choice first (`index: 1`, here cut at
    max_tokens): `choices[0]` was taken as the answer, so the row ended `length` (or kept
    another sample than the one asked for). The answer is the choice whose `index` is 0."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "q [twochoices]"}])
    out = tmp_path / "a.jsonl"
    assert generate(src, out, server.url) == 0
    (row,) = read_lines(out)
    assert row["messages"][-1]["content"].startswith("answer 0 to"), row["messages"][-1]
    assert row["metadata"]["finish_reason"] == "stop"


def test_an_answer_cut_at_a_stop_token_the_request_set_is_never_written(
    tmp_path: Path, server: FaultServer, qwen3_dir: Path
) -> None:
    """`--extra-body '{"stop_token_ids": [13]}'` (13 is Qwen3's "."): vLLM ends the answer at the
    first "." with `finish_reason: "stop"`, `stop_reason: 13`, and an int stop reason was read
    as the model's own end: the answer was written, and build trained `<|im_end|>` after a
    "." where the model went on. A stop token id the request set is the server's cut — unless
    it is one of the tokenizer's special tokens (`<|im_end|>` listed there is the model's own
    end); without --tokenizer every id the request set is the server's."""
    rows = [
        {"id": "dot", "prompt": "q [stopid:13]"},
        {"id": "eot", "prompt": "q [stopid:151645]"},
        {"id": "eos", "prompt": "q [stopid:151643]"},  # not in the request: the model's end
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    body = ["--extra-body", '{"stop_token_ids": [13, 151645]}']
    out = tmp_path / "a.jsonl"
    assert generate(src, out, server.url, extra=[*body, "--tokenizer", str(qwen3_dir)]) == 0
    assert set(by_id(out)) == {"eot", "eos"}
    (err,) = read_lines(tmp_path / "a.errors.jsonl")
    assert err["id"] == "dot" and err["reason"] == "unfinished", err
    assert "stop token id 13" in err["message"] and "stop_token_ids" in err["message"], err
    # without --tokenizer draftset cannot tell <|im_end|> from ".": both are the request's
    out = tmp_path / "b.jsonl"
    assert generate(src, out, server.url, extra=body) == 0
    assert set(by_id(out)) == {"eos"}
    assert {x["id"] for x in read_lines(tmp_path / "b.errors.jsonl")} == {"dot", "eot"}


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:99999/v1",
        "http://127.0.0.1:abc/v1",
        "http://[::1/v1",
        "http://127.0.0.1:8000/v1\r\nX-Injected: 1",
        "http://127.0.0.1:8000/v 1",
        "http://127.0.0.1:8000/v1\t",
        "http://127.0.0.1:8000/v\u00e9",
        "http://127.0.0.1:0/v1",
        "http://127.0.0.1:/v1",
    ],
)
def test_an_endpoint_url_that_does_not_parse_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """A port out of range, a port that is no number, an unclosed IPv6 bracket: a 40-line
    traceback from the HTTP client's URL parser and exit 1, after the rows were read. CR/LF,
    spaces, tabs or non-ASCII went into the request line raw; port 0 or an empty port quietly
    meant port 80."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hi"}])
    assert generate(src, tmp_path / "o.jsonl", url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("draftset: error: --endpoint"), err
    assert not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize("key", ["abc\r\nX-Injected: 1", "k\u00e9y\u20ac", "two words"])
def test_an_api_key_no_http_header_can_carry_is_one_line_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FaultServer,
    key: str,
) -> None:
    """A key with a CR/LF was written into the request as is (a header of the key's choosing
    reached the server); a non-Latin-1 key was a UnicodeEncodeError traceback. Neither is a key
    any server issues: refused before any request, without echoing the key."""
    monkeypatch.setenv("DRAFTSET_API_KEY", key)
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hi"}])
    assert generate(src, tmp_path / "o.jsonl", server.url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "API key" in err[0] and key not in err[0], err
    assert not server.requests


def test_a_row_changed_under_its_id_is_not_resumed_from_its_old_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FaultServer
) -> None:
    """Rerunning `generate` after editing a row in place (a new system prompt, same id) said
    "already done" and kept the answer to the old question: a stale cache. Each answer line
    records its input row's digest; a row whose input changed is refused, naming it."""
    rows = [
        {
            "id": "a",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
        },
        {"id": "b", "prompt": "hello"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    assert generate(src, out, server.url) == 0  # unchanged: resumed, nothing asked again
    capsys.readouterr()
    rows[0]["messages"][0]["content"] = "Be thorough."
    write_rows(src, rows)
    assert generate(src, out, server.url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "row 'a' changed since its answer was written" in err[0], err
    assert by_id(out)["a"]["messages"][0]["content"] == "Be brief."  # nothing rewritten


def test_an_answer_with_no_user_turn_before_it_is_not_asked_for(
    tmp_path: Path, server: FaultServer
) -> None:
    """`[assistant]` and `[system, assistant]` were sent as `messages: []` / the system prompt
    alone (an answer to nothing, written for the second); a recorded opener before the first
    user turn was regenerated from nothing. Such a turn is kept as recorded (build makes it
    context, `no_prompt`), and a row with nothing else is `nothing_to_generate`."""
    hello = {"role": "assistant", "content": "Hello! How can I help?"}
    rows = [
        {"id": "only", "messages": [hello]},
        {"id": "sys", "messages": [{"role": "system", "content": "Be kind."}, hello]},
        {
            "id": "opener",
            "messages": [
                hello,
                {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"},
            ],
        },
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    errors = by_id(tmp_path / "o.errors.jsonl")
    assert {k: v["reason"] for k, v in errors.items()} == {
        "only": "nothing_to_generate",
        "sys": "nothing_to_generate",
    }
    sent = [r["messages"] for r in server.requests]
    assert sent == [[hello, {"role": "user", "content": "2+2?"}]], sent
    assert by_id(out)["opener"]["messages"][0] == hello


def test_a_legacy_function_call_is_a_tool_call_not_an_empty_answer(
    tmp_path: Path, server: FaultServer
) -> None:
    """`message.function_call` (OpenAI's shape before `tool_calls`) with `content: null` was
    written as an empty answer (its reasoning then `<|im_end|>` supervised); a `function_call`
    finish with no call at all was written as an ordinary answer."""
    rows = [{"id": "legacy", "prompt": "q [legacycall]"}, {"id": "none", "prompt": "q [fcnocall]"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url, extra=["--max-retries", "0"]) == 0
    answer = by_id(out)["legacy"]["messages"][-1]
    # null, not "": a template vLLM gives parts renders no parts unlike one empty part
    assert answer["content"] is None
    assert answer["tool_calls"] == [
        {"type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}
    ]
    assert by_id(tmp_path / "o.errors.jsonl")["none"]["reason"] == "invalid_response"


@pytest.mark.parametrize("thinking", ["on", "off"])
def test_a_tool_calls_finish_without_the_call_is_never_an_answer(
    tmp_path: Path, server: FaultServer, thinking: str
) -> None:
    """`finish_reason: "tool_calls"` says the model called a tool; a body that has no call
    (a proxy or a parser that lost it) beside text or reasoning was written as a finished
    answer: the turn trained as the model's whole answer, without the call the model made.
    Invalid, retried as any invalid body, never written."""
    rows = [{"id": "lost", "prompt": "q [finish:tool_calls]"}, {"id": "ok", "prompt": "q"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    extra = ["--max-retries", "1", "--thinking", thinking]
    assert generate(src, out, server.url, extra=extra) == 0
    assert list(by_id(out)) == ["ok"]
    error = by_id(tmp_path / "o.errors.jsonl")["lost"]
    assert error["reason"] == "invalid_response" and error["attempts"] == 2
    assert "finish_reason tool_calls without a tool call" in error["message"]


def test_a_streamed_body_says_so() -> None:
    """A streaming-only server's reply read "body is not JSON: Expecting value" with no hint."""
    from draftset.generation.http import TransientError, parse_completion

    with pytest.raises(TransientError) as exc:
        parse_completion(b'data: {"choices": []}\n\ndata: [DONE]\n\n', "http://x/v1")
    assert "server-sent events" in str(exc.value)


def test_an_edited_row_is_found_before_any_request_and_a_fixed_error_row_is_retried(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], server: FaultServer
) -> None:
    """The edit check ran as rows streamed in: with new rows in front of the edited one, answers
    were asked for (and paid) before the exit 2. Error lines carried no digest, so a row fixed
    after its error (`[length]` removed) stayed "done" with its old error; an answered row
    edited into one that no longer reads kept its stale answer. Now: a pass before any request
    refuses edited answered rows, and a changed errored row is tried again."""
    rows = [
        {"id": "a", "prompt": "first question"},
        {"id": "cut", "prompt": "too long an answer [length]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    assert by_id(tmp_path / "o.errors.jsonl")["cut"]["reason"] == "length"
    # the errored row fixed: tried again, answered; its old error line gone
    rows[1]["prompt"] = "a short answer please"
    write_rows(src, rows)
    assert generate(src, out, server.url) == 0
    assert "cut" in by_id(out) and "cut" not in by_id(tmp_path / "o.errors.jsonl")
    # an answered row edited behind new rows: refused before any request
    sent = len(server.requests)
    capsys.readouterr()
    new = [{"id": f"n{i}", "prompt": f"new {i}"} for i in range(5)]
    write_rows(src, [*new, {"id": "a", "prompt": "another question"}, rows[1]])
    assert generate(src, out, server.url) == 2
    assert len(server.requests) == sent
    assert "row 'a' changed since its answer was written" in capsys.readouterr().err
    # an answered row that no longer reads: refused too
    write_rows(src, [{"id": "a", "messages": [{"role": "wizard", "content": "?"}]}, rows[1]])
    assert generate(src, out, server.url) == 2
    assert "row 'a' was answered but no longer reads" in capsys.readouterr().err


def test_a_row_that_did_not_read_and_was_fixed_is_tried_again(
    tmp_path: Path, server: FaultServer
) -> None:
    """A row rejected while reading (`unknown_role`) and fixed since stayed "done" with its old
    error on every rerun; it is read and answered now."""
    rows = [{"id": "w", "messages": [{"role": "wizard", "content": "?"}]}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 1  # no row answered
    assert by_id(tmp_path / "o.errors.jsonl")["w"]["reason"] == "unknown_role"
    write_rows(src, [{"id": "w", "messages": [{"role": "user", "content": "?"}]}])
    assert generate(src, out, server.url) == 0
    assert "w" in by_id(out) and "w" not in by_id(tmp_path / "o.errors.jsonl")


@pytest.mark.parametrize("where", ["in-set", "in-a-folder-of-the-set", "link-into-set"])
def test_out_inside_a_built_set_is_refused_before_any_request(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """`generate p.jsonl --out out/set/ans.jsonl` wrote ans.jsonl, ans.errors.jsonl, ans.lock
    and ans.run.json into the set, whose verify then failed (files not in its manifest).
    Refused as `report -o` and `verify --json` refuse a path inside a set: one line, exit 2,
    before any request, nothing written."""
    src = write_rows(tmp_path / "p.jsonl", [{"id": "p0", "prompt": "q0"}])
    built = tmp_path / "out" / "set"
    (built / "checkpoints").mkdir(parents=True)
    (built / "manifest.json").write_text('{"format": "draftset/1", "files": []}')
    out = {
        "in-set": built / "ans.jsonl",
        "in-a-folder-of-the-set": built / "checkpoints" / "ans.jsonl",
        "link-into-set": tmp_path / "ans.jsonl",
    }[where]
    if where == "link-into-set":
        out.symlink_to(built / "ans.jsonl")
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    sent = len(server.requests)
    assert generate(src, out, server.url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {out} is inside the set {built}" in err[0], err
    assert "choose a path outside it" in err[0]
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    assert len(server.requests) == sent


# --- session 25: an outside probe's findings ---------------------------------------------------
def test_a_run_that_answered_no_row_counts_its_requests_and_exits_1(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every answer HTTP 400: the summary said `0 requests (0 retries)` though 3 were sent, and
    the run exited 0 with 0 of 3 rows answered. Requests are counted; no row answered is
    exit 1 with one line naming the commonest error."""
    rows = [{"id": f"r{i}", "prompt": f"refused {i} [400]"} for i in range(3)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    assert generate(src, tmp_path / "o.jsonl", server.url) == 1
    cap = capsys.readouterr()
    assert "; 3 requests (0 retries)" in cap.out, cap.out
    err = cap.err.strip().splitlines()
    assert len(err) == 1, err
    assert "no row answered: all 3 ended as errors, commonest 3 http_4xx" in err[0], err
    assert "bad request (injected)" in err[0], err
    assert len(server.requests) == 3
    assert {x["reason"] for x in read_lines(tmp_path / "o.errors.jsonl")} == {"http_4xx"}
    # a rerun asks for nothing (every row has its line) and says the same line
    assert generate(src, tmp_path / "o.jsonl", server.url) == 1
    assert capsys.readouterr().err.strip().splitlines() == err
    assert len(server.requests) == 3
    # one answered row is success: the errors are counted lines
    write_rows(src, [*rows, {"id": "ok", "prompt": "fine"}])
    assert generate(src, tmp_path / "o.jsonl", server.url) == 0


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            ["--temperature", "0.6", "--extra-body", '{"temperature": 1.5, "max_tokens": 9999}'],
            "--extra-body sets temperature 1.5, and --temperature 0.6",
        ),
        (
            ["--max-tokens", "32", "--extra-body", '{"max_tokens": 9999}'],
            "--extra-body sets max_tokens 9999, and --max-tokens 32",
        ),
        # OpenAI's newer name for the same limit: vLLM and SGLang read it first
        (
            ["--max-tokens", "32", "--extra-body", '{"max_completion_tokens": 9999}'],
            "--extra-body sets max_completion_tokens 9999, and --max-tokens 32: the server"
            " reads both as the answer's token limit",
        ),
        (
            ["--extra-body", '{"max_tokens": 32, "max_completion_tokens": 9999}'],
            "--extra-body sets max_completion_tokens 9999, and --extra-body max_tokens 32",
        ),
        (["--top-p", "0.9", "--extra-body", '{"top_p": 1}'], "top_p 1, and --top-p 0.9"),
        (["--top-k", "20", "--extra-body", '{"top_k": -1}'], "top_k -1, and --top-k 20"),
        (["--seed", "1", "--extra-body", '{"seed": 2}'], "seed 2, and --seed 1"),
        (
            ["--return-token-ids", "--extra-body", '{"return_token_ids": false}'],
            "return_token_ids false, and --return-token-ids true",
        ),
        (
            [
                "--chat-template-kwargs",
                '{"reasoning_effort": "low"}',
                "--extra-body",
                '{"reasoning_effort": "high"}',
            ],
            'reasoning_effort "high", and --chat-template-kwargs reasoning_effort "low"',
        ),
        # the effort the server renders into the prompt and build would render without
        (
            ["--extra-body", '{"reasoning_effort": "high"}'],
            '--extra-body sets reasoning_effort "high", which the server renders into the'
            " prompt, and --chat-template-kwargs does not: build would render the rows without"
            " it; give it in --chat-template-kwargs instead",
        ),
        # JSON true is no seed 1 (Python's True == 1 let it through, and the body sent true)
        (["--seed", "1", "--extra-body", '{"seed": true}'], "seed true, and --seed 1"),
    ],
)
def test_extra_body_contradicting_a_sampling_option_is_exit_2(
    tmp_path: Path,
    server: FaultServer,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    said: str,
) -> None:
    """`--temperature 0.6 --extra-body '{"temperature": 1.5}'` sent 1.5, silently. Refused as
    an `enable_thinking` contradiction is: one line, exit 2, before any request."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0], err
    assert not server.requests and not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize(
    "field",
    [
        '"chat_template": "{{ messages[0].content }}"',
        '"add_generation_prompt": false',
        '"continue_final_message": true',
        '"add_special_tokens": true',
        '"documents": [{"title": "t", "text": "x"}]',
        '"truncate_prompt_tokens": 8',
        '"echo": true',
    ],
)
def test_extra_body_fields_that_change_the_servers_prompt_are_exit_2(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    """vLLM's request fields that render, tokenize, cut or echo the prompt otherwise than
    the tokenizer's template (`chat_template`, `add_generation_prompt: false`, ...) were sent
    as they were: the server answered a prompt that build never renders, and the rows were
    trained after another prompt than their answers', silently. Refused, before any request."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    extra = ["--extra-body", "{" + field + "}"]
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    name = field.split('"')[1]
    assert len(err) == 1 and f"--extra-body may not set ['{name}']" in err[0], err
    assert not server.requests and not (tmp_path / "o.jsonl").exists()


@pytest.mark.parametrize(
    ("field", "said"),
    [
        ('"include_reasoning": false', "include_reasoning false: the server would leave the"),
        ('"parallel_tool_calls": false', "parallel_tool_calls false: the server would keep only"),
        ('"tool_choice": "required"', "tool_choice \"required\": 'required' or a named tool"),
        ('"tool_choice": "none"', 'tool_choice "none": '),
        ('"tool_choice": "auto"', 'tool_choice "auto": '),
        ('"thinking_token_budget": 512', "thinking_token_budget 512: the server would end the"),
        ('"ignore_eos": true', "ignore_eos true: the server would go on past the model's end"),
        (
            '"tool_choice": {"type": "function", "function": {"name": "f"}}',
            'tool_choice {"type": "function", "function": {"name": "f"}}: ',
        ),
    ],
)
def test_extra_body_fields_that_leave_part_of_the_answer_out_are_exit_2(
    tmp_path: Path,
    server: FaultServer,
    capsys: pytest.CaptureFixture[str],
    field: str,
    said: str,
) -> None:
    """vLLM 0.33 answers ``include_reasoning: false`` without the reasoning the model
    generated (the row was trained as an answer without thinking: an empty think block),
    ``parallel_tool_calls: false`` with the first call only, ``tool_choice: "required"`` or a
    named tool with calls the model wrote as a JSON list under a grammar (build renders the
    template's markup instead), ``"none"`` with the calls cut out, and with a
    ``thinking_token_budget`` forces the end of thinking itself, with ``ignore_eos`` glues
    what follows the model's end of turn to its answer: all sent as given. Refused,
    one line, before any request; the default values pass."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    extra = ["--extra-body", "{" + field + "}"]
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"draftset: error: --extra-body sets {said}" in err[0], err
    assert err[0].endswith("is the default)" if "tool_choice" not in field else "leave it out")
    assert not server.requests and not (tmp_path / "o.jsonl").exists()
    defaults = json.dumps(
        {
            "include_reasoning": True,
            "parallel_tool_calls": True,
            "thinking_token_budget": None,
            "ignore_eos": False,
        }
    )
    assert generate(src, tmp_path / "d.jsonl", server.url, extra=["--extra-body", defaults]) == 0


def test_extra_body_may_set_a_field_no_option_sets_or_repeat_its_value(
    tmp_path: Path, server: FaultServer
) -> None:
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    extra = ["--temperature", "0.6", "--extra-body", '{"temperature": 0.6, "max_tokens": 50}']
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 0
    assert server.requests[0]["temperature"] == 0.6 and server.requests[0]["max_tokens"] == 50
    # the same number spelled 1 and 1.0 is one value
    extra = ["--temperature", "1", "--extra-body", '{"temperature": 1}']
    assert generate(src, tmp_path / "o2.jsonl", server.url, extra=extra) == 0
    # max_completion_tokens alone, or with --max-tokens at the same value
    extra = ["--max-tokens", "40", "--extra-body", '{"max_completion_tokens": 40}']
    assert generate(src, tmp_path / "o3.jsonl", server.url, extra=extra) == 0
    assert server.requests[-1]["max_completion_tokens"] == 40


def test_a_broken_endpoint_beside_a_healthy_one_loses_no_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One server answered every completion with 500 at once while its /v1/models passed: it
    always looked least loaded, so retries went back to it and rows ended `retries_exhausted`
    (6 of 40) although a healthy server was there. A retry goes to another endpoint, and an
    endpoint that keeps failing though its health check passes is cooled down."""
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(40)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer(latency=0.02) as good, FaultServer(broken=True) as bad:
        extra = ["--concurrency", "4", "--max-retries", "2", "--health-interval", "0.5"]
        assert generate(src, out, good.url, bad.url, extra=extra) == 0
        assert good.completions == 40
        sent_to_bad = len(bad.requests)
    assert len(by_id(out)) == 40
    assert not read_lines(tmp_path / "o.errors.jsonl")
    assert sent_to_bad <= 8, sent_to_bad  # cooled down, not asked for every row
    assert f"cooled down (kept failing, health check passing): {bad.url}" in capsys.readouterr().out


def test_the_run_file_says_whether_generate_finished_and_build_says_so(
    tmp_path: Path, qwen3_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`generate` killed after 62 of 400 rows, then `build ans.jsonl` said "read 62 = written
    62": nothing said 338 prompts were never answered, nor that rows ended in the errors file.
    The run file records when generate finished (rows answered / errored / total); build of
    an answers file notes a run that did not finish, and error rows, in its summary and
    manifest."""
    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(30)]
    rows.append({"id": "no", "prompt": "refused [400]"})
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "ans.jsonl"
    run_file = tmp_path / "ans.run.json"
    with FaultServer(latency=0.02, down_after=10) as srv:
        extra = ["--concurrency", "2", "--give-up-after", "0.5"]
        assert generate(src, out, srv.url, extra=extra) == 1  # stopped: every endpoint down
        run = json.loads(run_file.read_text())
        assert run["finished"] is False
        answered = len(read_lines(out))
        assert 0 < answered < 30

        def build(name: str) -> dict[str, Any]:
            capsys.readouterr()
            args = ["build", str(out), "--tokenizer", str(qwen3_dir), "--out", str(tmp_path / name)]
            assert cli_main(args) == 0
            text = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
            manifest = json.loads((tmp_path / name / "manifest.json").read_text())
            (status,) = manifest["inputs"][0]["generate"]
            return {"text": text, "generate": status}

        first = build("set1")
        assert f"{out} is the output of a draftset generate that did not finish" in first["text"]
        assert first["generate"]["finished"] is False
        srv.down = False
        assert generate(src, out, srv.url) == 0  # resumed to the end
    run = json.loads(run_file.read_text())
    assert run["finished"] is True
    assert run["rows"] == {"input": 31, "answered": 30, "errors": {"http_4xx": 1}, "not_done": 0}
    second = build("set2")
    assert "did not finish" not in second["text"]
    assert "1 row of it ended as an error in draftset generate (http_4xx=1" in second["text"]
    assert second["generate"] == {
        "file": str(out),
        "run_file": str(run_file),
        "finished": True,
        "rows": {"input": 31, "answered": 30, "errors": {"http_4xx": 1}, "not_done": 0},
    }
    # an answers file of a draftset before the marker builds as before, its errors still said
    del run["finished"], run["rows"]
    run_file.write_text(json.dumps(run))
    third = build("set3")
    assert "did not finish" not in third["text"]
    assert "1 row of it ended as an error in draftset generate" in third["text"]
    assert third["generate"] == {
        "file": str(out),
        "run_file": str(run_file),
        "finished": None,
        "rows": {"errors": {"http_4xx": 1}},
    }


def test_a_null_content_answer_is_an_empty_answer_not_retried(
    tmp_path: Path, server: FaultServer
) -> None:
    """`content: null` and nothing else (finish_reason stop) was retried 6 times and ended
    `invalid_response`, while `content: ""` was written: both are the model ending its answer
    at once, written as an empty answer (build rejects it as a placeholder), asked once."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "say nothing [nullcontent]"}])
    out = tmp_path / "o.jsonl"
    assert generate(src, out, server.url) == 0
    assert server.attempts[("say nothing [nullcontent]", 0)] == 1
    (line,) = read_lines(out)
    assert line["messages"][-1] == {"role": "assistant", "content": ""}
    assert not read_lines(tmp_path / "o.errors.jsonl")


def test_the_nothing_answered_line_marks_a_cut_message() -> None:
    """The commonest error's message is shortened to 200 characters: it was cut without a mark,
    mid-word (`... --field outpu); see a.errors.jsonl`), reading as a wrong option name."""
    from draftset.generation.outcomes import GenerateResult

    result = GenerateResult(Path("a.jsonl"), Path("a.errors.jsonl"))
    result.outcomes["unknown_format"] = 3
    result.examples["unknown_format"] = "map its columns: " + "--field output=code " * 20
    line = result.nothing_answered()
    assert line is not None and "…); see a.errors.jsonl" in line
    short = GenerateResult(Path("a.jsonl"), Path("a.errors.jsonl"))
    short.outcomes["http_4xx"] = 1
    short.examples["http_4xx"] = "HTTP 400: bad"
    assert short.nothing_answered() == (
        "no row answered: all 1 ended as errors, commonest 1 http_4xx (HTTP 400: bad);"
        " see a.errors.jsonl"
    )


def test_the_api_answers_from_inside_a_running_event_loop(
    tmp_path: Path, server: FaultServer
) -> None:
    """In Jupyter a loop runs in the calling thread: `draftset.generate(...)` (and `run`'s
    generate stage, after its select stage had run) ended in asyncio's bare ``RuntimeError:
    asyncio.run() cannot be called from a running event loop`` and a "coroutine was never
    awaited" warning. They run in a thread of their own then."""
    import asyncio

    from draftset import api

    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "hello"}])
    out = tmp_path / "a.jsonl"

    async def notebook_cell() -> Any:
        return api.generate(src, endpoints=[server.url], out=out, backoff=0.01)

    result = asyncio.run(notebook_cell())
    assert result.ok and result.answered == 1
    assert [row["id"] for row in read_lines(out)] == ["a"]


def test_run_sync_inside_a_running_loop_returns_raises_and_is_the_only_asyncio_run() -> None:
    """`run_sync` is `asyncio.run`, in a thread of its own where a loop already runs; `draftset
    run` from a notebook died in `check_reachable`'s bare `asyncio.run` before, so every
    `asyncio.run` of the package is this one."""
    import asyncio
    import re

    from draftset.generation.job import run_sync

    async def value() -> int:
        await asyncio.sleep(0)
        return 7

    async def boom() -> None:
        raise ValueError("no")

    async def cell() -> None:
        assert run_sync(value()) == 7
        with pytest.raises(ValueError, match="no"):
            run_sync(boom())

    assert run_sync(value()) == 7  # no loop running: plain asyncio.run
    asyncio.run(cell())
    src = Path(__file__).resolve().parents[2] / "src" / "draftset"
    calls = [
        f"{p.relative_to(src)}:{i}"
        for p in sorted(src.rglob("*.py"))
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\basyncio\.run\(", line)
    ]
    assert calls and all(c.startswith("generation/job.py:") for c in calls), calls


def test_run_sync_in_a_running_loop_is_cancelled_by_ctrl_c() -> None:
    """Ctrl-C in a notebook while `run_sync` waits: the coroutine is cancelled, and its thread
    has ended when the `KeyboardInterrupt` reaches the caller (a plain `Thread.join` loop took
    the interrupted thread for ended and left it answering on)."""
    import asyncio
    import threading

    from draftset.generation.job import run_sync

    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def cell() -> float:
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            run_sync(slow())
        return time.monotonic() - t0

    loop = asyncio.new_event_loop()  # as ipykernel's: SIGINT raises KeyboardInterrupt
    try:
        took = loop.run_until_complete(cell())
    finally:
        loop.close()
    assert took < 10 and cancelled == [True]
    assert not [t for t in threading.enumerate() if t.name == "draftset-generate"]


def test_a_lock_file_of_yours_beside_out_is_refused_never_overwritten(
    tmp_path: Path, server: FaultServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out k.jsonl`` beside a ``k.lock`` of the user's: the lock truncated it to the
    process's pid (and left it so), answers written, exit 0. A lock draftset wrote (a pid, or
    empty) is taken as before."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    mine = tmp_path / "k.lock"
    mine.write_text('{"my": "settings"}\n', encoding="utf-8")
    assert generate(src, tmp_path / "k.jsonl", server.url) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0] == (
        f"draftset: error: --out {tmp_path / 'k.jsonl'}: {mine} exists and is not a lock draftset"
        " wrote (a process id); move it away or choose another --out"
    )
    assert mine.read_text(encoding="utf-8") == '{"my": "settings"}\n' and not server.requests
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "k.lock"]
    (tmp_path / "ours.lock").write_text("12345\n", encoding="ascii")  # a finished run's lock
    assert generate(src, tmp_path / "ours.jsonl", server.url) == 0


def test_endpoints_serving_one_name_from_other_weights_are_refused_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two servers under one served-model-name, one with other weights (``vllm serve
    /models/a --served-model-name m`` beside ``/models/a-awq`` under the same name): /v1/models
    names each one's ``root``, yet both were used, half of the rows answered by each, and the
    run file recorded the first one's weights. Exit 2, one line, before any request."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(6)])
    out = tmp_path / "o.jsonl"
    with FaultServer(root="/models/a") as a, FaultServer(root="/models/a-awq") as b:
        assert generate(src, out, a.url, b.url) == 2
        assert not a.requests and not b.requests
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [
            f"draftset: error: the endpoints serve 'fault-model' from other weights ({a.url}:"
            f" '/models/a', {b.url}: '/models/a-awq'): the answers would mix two models; give"
            " only endpoints that serve the same weights"
        ]
        with FaultServer(root="/models/a") as c:  # the same weights: served by both
            assert generate(src, out, a.url, c.url) == 0
            assert a.completions + c.completions == 6 and a.completions and c.completions
    assert json.loads((tmp_path / "o.run.json").read_text())["model_root"] == "/models/a"


def test_an_endpoint_back_with_other_weights_under_the_same_name_is_not_readmitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An endpoint down at start (or taken out mid-run) comes back serving the model's name
    from other weights (restarted with another checkpoint): its health check passed on the
    name alone and it answered rows. It stays out, its health check saying why."""
    import threading

    rows = [{"id": f"r{i}", "prompt": f"p{i}"} for i in range(40)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with (
        FaultServer(latency=0.03, root="/models/a") as a,
        FaultServer(root="/models/a", down=True) as b,
    ):

        def back() -> None:  # once the run is under way (a start with it there is refused)
            while a.completions < 3:
                time.sleep(0.01)
            b.root, b.down = "/models/b", False

        threading.Thread(target=back, daemon=True).start()
        assert generate(src, out, a.url, b.url, extra=["--concurrency", "1"]) == 0
        assert b.completions == 0 and a.completions == 40
    assert len(by_id(out)) == 40
    said = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert (
        f"{b.url} serves 'fault-model' from '/models/b', not '/models/a': kept out of rotation"
    ) in said


# --- round 3: a throttled (429 / 503) but healthy server ---------------------------------------
def test_throttles_do_not_spend_the_rows_retries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 429 (with or without Retry-After) or a 503 is the server asking for fewer requests, not
    a failed one: five in a row with --max-retries 1 still get the answer (each row was
    `retries_exhausted` after two 429s, the server healthy all along)."""
    rows = [
        {"id": "r429", "prompt": "busy [429x5]"},
        {"id": "r503", "prompt": "overloaded [503x5]"},
        {"id": "r500", "prompt": "boom [500x5]"},  # a failure still spends the retries
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer(retry_after=None) as srv:
        rc = generate(src, out, srv.url, extra=["--max-retries", "1"])
        assert srv.attempts[("busy [429x5]", 0)] == 6
        assert srv.attempts[("overloaded [503x5]", 0)] == 6
        assert srv.attempts[("boom [500x5]", 0)] == 2
    assert rc == 0
    assert set(by_id(out)) == {"r429", "r503"}
    assert by_id(tmp_path / "o.errors.jsonl")["r500"]["reason"] == "retries_exhausted"
    said = " ".join(capsys.readouterr().out.split())  # the summary, as rich wraps it
    assert "throttled 10x (HTTP 429 / 503): waited out and sent again" in said, said


def test_throttle_waits_honour_retry_after_with_jitter(tmp_path: Path) -> None:
    """Retry-After 1 is waited out, jittered up to 20 % more (never less), and counts no retry."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "busy [429x2]"}])
    with FaultServer(retry_after="1") as srv:
        t0 = time.monotonic()
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=["--max-retries", "0"])
        took = time.monotonic() - t0
    assert rc == 0 and "a" in by_id(tmp_path / "o.jsonl")
    assert 2.0 <= took < 2.4 + 2.0, took


def test_a_row_throttled_too_long_ends_retries_exhausted(tmp_path: Path) -> None:
    """Throttles are waited out up to --give-up-after seconds per row in all, never forever:
    then the row is `retries_exhausted` (error_kind http_429, --retry-errors asks again) while
    the server answers other rows."""
    oks = [{"id": f"ok{i}", "prompt": f"hello {i}"} for i in range(20)]  # answered meanwhile
    src = write_rows(tmp_path / "in.jsonl", [{"id": "stuck", "prompt": "busy [429x100000]"}, *oks])
    out = tmp_path / "o.jsonl"
    with FaultServer(retry_after="0.2", latency=0.1) as srv:
        t0 = time.monotonic()
        rc = generate(src, out, srv.url, extra=["--concurrency", "2", "--give-up-after", "1"])
        took = time.monotonic() - t0
    assert rc == 0 and set(by_id(out)) == {r["id"] for r in oks}
    err = by_id(tmp_path / "o.errors.jsonl")["stuck"]
    assert err["reason"] == "retries_exhausted" and err["error_kind"] == "http_429"
    assert "--give-up-after 1" in err["message"]
    assert took < 6, took


def test_every_request_throttled_too_long_stops_the_run_resumable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """When no row gets an answer while one is throttled for --give-up-after, the server is
    overloaded or its quota spent: the run stops (exit 1), the rows left for the rerun, not
    written off one by one."""
    rows = [{"id": "a", "prompt": "busy [503x100000]"}, {"id": "b", "prompt": "busy [429x100000]"}]
    src = write_rows(tmp_path / "in.jsonl", rows)
    with FaultServer(retry_after="0.2") as srv:
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=["--give-up-after", "1"])
    assert rc == 1
    cap = capsys.readouterr()
    assert "throttled the requests" in cap.err
    assert not by_id(tmp_path / "o.jsonl") and not by_id(tmp_path / "o.errors.jsonl")
    # the requests sent are counted though no row ended (the summary said `0 requests`)
    said = " ".join(cap.out.split())
    assert f"; {len(srv.requests)} requests (" in said and len(srv.requests) >= 4, said


def test_the_progress_line_says_requests_are_throttled(tmp_path: Path) -> None:
    """While requests wait out a 429 the progress says so (the run looked hung at 0 req/s)."""
    import asyncio

    from draftset.generation.console import _rates
    from draftset.generation.job import run_generate
    from draftset.generation.options import GenerateOptions
    from draftset.sources.read import Source

    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "busy [429x1]"}])
    seen: list[str] = []
    with FaultServer(retry_after="0.3") as srv:
        opts = GenerateOptions(
            sources=[Source(name="in", path=src)], endpoints=[srv.url], out=tmp_path / "o.jsonl"
        )
        asyncio.run(run_generate(opts, lambda r: seen.append(_rates(r, time.monotonic(), ", "))))
    assert any("throttled: 1 waiting (HTTP 429, Retry-After 0.3s)" in s for s in seen), seen
    assert "throttled" not in seen[-1]


# --- round 3: a 200 that carries an error object; a stream of answers from another model -------
def test_a_200_carrying_an_error_object_says_the_servers_error(tmp_path: Path) -> None:
    """A proxy (or an old vLLM ErrorResponse) answering 200 with `{"error": {...}}` or
    `{"object": "error", ...}`: the row's message was `body has no choices[0].message`, the
    server's own words lost, and a 400 there (context too long) was asked 7 times. Its code is
    read as the status would be: a 4xx is final `http_4xx`, a 429/503 a throttle, anything else
    retried with the server's message kept."""
    rows = [
        {"id": "e400", "prompt": "x [err200:400]"},
        {"id": "vllm", "prompt": "x [err200old:400]"},
        {"id": "e500", "prompt": "x [err200:500]"},
        {"id": "nocode", "prompt": "x [err200:none]"},
        {"id": "e429", "prompt": "x [err200:429x2]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    with FaultServer(retry_after=None) as srv:
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=["--max-retries", "1"])
        assert srv.attempts[("x [err200:400]", 0)] == 1
        assert srv.attempts[("x [err200:429x2]", 0)] == 3
    assert rc == 0 and set(by_id(tmp_path / "o.jsonl")) == {"e429"}
    errors = by_id(tmp_path / "o.errors.jsonl")
    assert errors["e400"]["reason"] == "http_4xx" and errors["e400"]["status"] == 400
    assert errors["vllm"]["reason"] == "http_4xx" and errors["vllm"]["status"] == 400
    for e in errors.values():
        assert "HTTP 200 carrying an error" in e["message"], e
        assert "context length (injected)" in e["message"], e
    assert errors["e500"]["reason"] == "retries_exhausted"
    assert errors["e500"]["error_kind"] == "http_500" and errors["e500"]["attempts"] == 2
    assert errors["nocode"]["reason"] == "invalid_response"


def test_a_stream_of_answers_from_another_model_stops_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every answer naming another model (a proxy routing elsewhere, a server restarted with
    another model): each row was asked and its answer thrown away, a million rows of GPU time
    for error lines. After 20 such answers in a row the run stops, resumable."""
    rows = [{"id": f"r{i}", "prompt": f"q{i} [model:other-model]"} for i in range(60)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    with FaultServer() as srv:
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=["--concurrency", "2"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "stopped early: the last 20 answers came from 'other-model'" in err, err
    assert "--retry-errors" in err
    errors = by_id(tmp_path / "o.errors.jsonl")
    assert 20 <= len(errors) < 30
    assert {e["reason"] for e in errors.values()} == {"model_mismatch"}
    run = json.loads((tmp_path / "o.run.json").read_text())
    assert run["finished"] is False


# --- round 3: --extra-body fields whose results draftset throws away ---------------------------
@pytest.mark.parametrize(
    ("field", "said"),
    [
        ('"n": 2', "may not set ['n']: draftset keeps one answer per request"),
        ('"stream": true', "may not set ['stream']: draftset reads whole responses"),
        ('"model": "m"', "may not set ['model']: use the dedicated options"),
        ('"logprobs": true', "sets logprobs true: draftset keeps no log-probabilities"),
        ('"top_logprobs": 20', "sets top_logprobs 20: draftset keeps no log-probabilities"),
        ('"prompt_logprobs": 1', "sets prompt_logprobs 1: draftset keeps no log-probabilities"),
    ],
)
def test_extra_body_fields_whose_results_are_thrown_away_say_why(
    tmp_path: Path,
    server: FaultServer,
    capsys: pytest.CaptureFixture[str],
    field: str,
    said: str,
) -> None:
    """`n` was refused with `use the dedicated options`, though none sets it; `logprobs` was
    sent, and every token's log-probabilities computed, sent and dropped (a long answer's body,
    some 2 KB a token with top_logprobs 20, went over --max-response-bytes: its row lost, the
    longest first). Each refused with why, one line, before any request; false/0/null pass."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "p"}])
    extra = ["--extra-body", "{" + field + "}"]
    assert generate(src, tmp_path / "o.jsonl", server.url, extra=extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"draftset: error: --extra-body {said}" in err[0], err
    assert not server.requests and not (tmp_path / "o.jsonl").exists()
    off = json.dumps({"logprobs": False, "top_logprobs": 0, "prompt_logprobs": None})
    assert generate(src, tmp_path / "d.jsonl", server.url, extra=["--extra-body", off]) == 0


def test_a_length_error_says_the_limit_and_the_tokens_generated(tmp_path: Path) -> None:
    """`answer 1 was cut at max_tokens` said neither how many tokens nor whose limit: without
    --max-tokens the server's own default cut them (vLLM's max_new_tokens from the model's
    generation_config.json), which the line now says, with the tokens generated."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "long [length]"}])
    with FaultServer() as srv:  # its [length] answers are 7 tokens long
        assert generate(src, tmp_path / "o.jsonl", srv.url, extra=["--max-tokens", "7"]) == 1
        assert generate(src, tmp_path / "p.jsonl", srv.url) == 1
        assert generate(src, tmp_path / "q.jsonl", srv.url, extra=["--max-tokens", "16"]) == 1
    given = by_id(tmp_path / "o.errors.jsonl")["a"]
    assert given["reason"] == "length"
    assert given["completion_tokens"] == 7 and given["max_tokens"] == 7
    assert given["message"] == "answer 1 was cut at max_tokens (7 tokens generated; max_tokens 7)"
    context = by_id(tmp_path / "q.errors.jsonl")["a"]  # fewer than asked: the context was full
    assert (
        "7 tokens generated, fewer than max_tokens 16: the server's own limit cut it"
        in (context["message"])
    )
    server_default = by_id(tmp_path / "p.errors.jsonl")["a"]
    assert server_default["max_tokens"] is None and server_default["completion_tokens"] == 7
    assert "no max_tokens was sent: the server's own limit" in server_default["message"]
    assert "--max-tokens" in server_default["message"]


def test_no_endpoint_healthy_says_what_each_health_check_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server restarted mid-run without its --served-model-name (it lists the weights' path
    instead) answers every health check, yet stays out: the run stopped with `no endpoint
    healthy for 600s` and no word of why. The line now says what each check found."""
    import threading

    rows = [{"id": f"r{i}", "prompt": f"q{i}"} for i in range(4)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    with FaultServer(down_after=1) as srv:

        def restarted_as_another_name() -> None:
            deadline = time.monotonic() + 20
            while not srv.down and time.monotonic() < deadline:  # down after its first answer
                time.sleep(0.01)
            time.sleep(0.3)
            srv.model, srv.down = "/models/Qwen3-8B", False

        timer = threading.Thread(target=restarted_as_another_name)
        timer.start()
        extra = ["--concurrency", "1", "--give-up-after", "1.5"]
        rc = generate(src, tmp_path / "o.jsonl", srv.url, extra=extra)
        timer.join()
    assert rc == 1
    err = " ".join(capsys.readouterr().err.split())
    assert "no endpoint healthy for" in err, err
    assert f"{srv.url}: lists ['/models/Qwen3-8B'], not 'fault-model'" in err, err


def test_an_aborted_answer_is_asked_again(tmp_path: Path) -> None:
    """vLLM ends the requests in flight with `finish_reason: "abort"` (HTTP 200) when the
    engine shuts down, pauses to sleep or scales down (vllm-project/vllm#57082): a server
    restarted mid-run left every row it held as an `unfinished` error line, which a rerun does
    not ask again. An abort is the server's hiccup, not the row's: retried as a 5xx is (and
    counted toward the endpoint's health check); still `unfinished` when every try aborts."""
    rows = [
        {"id": "once", "prompt": "q [abortx2]"},
        {"id": "always", "prompt": "q [finish:abort]"},
    ]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer() as srv:
        assert generate(src, out, srv.url, extra=["--max-retries", "2"]) == 0
        assert srv.attempts[("q [abortx2]", 0)] == 3
        assert srv.attempts[("q [finish:abort]", 0)] == 3
    assert set(by_id(out)) == {"once"}
    always = by_id(tmp_path / "o.errors.jsonl")["always"]
    assert always["reason"] == "unfinished" and always["attempts"] == 3
    assert always["error_kind"] == "abort"
    assert "answer ended with finish_reason 'abort'" in always["message"]


def test_a_throttling_endpoint_is_held_off_while_another_serves(tmp_path: Path) -> None:
    """Two endpoints, one throttling every request with Retry-After 3 (its quota spent): each
    row routed to it waited out the 3 s before going to the other, and the least-loaded
    routing sent it a row again at once (its 429s came back fast): 100 rows took 41 s where
    the healthy one alone took 1.3 s. The throttled endpoint now gets no request for its
    Retry-After while another serves, and the throttled request goes there without waiting."""
    rows = [{"id": f"r{i}", "prompt": f"q{i}"} for i in range(30)]
    src = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "o.jsonl"
    with FaultServer(throttled=True, retry_after="3") as busy, FaultServer(latency=0.02) as ok:
        t0 = time.monotonic()
        rc = generate(src, out, busy.url, ok.url, extra=["--concurrency", "2"])
        took = time.monotonic() - t0
        asked_busy = len(busy.requests)
    assert rc == 0 and len(by_id(out)) == 30
    assert took < 3.0, took
    assert asked_busy <= 2, asked_busy  # one 429 per request in flight, then held off


def test_a_throttled_model_list_at_start_is_waited_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gateway whose rate limit covers every route answered the start's GET /v1/models with
    429: `no endpoint answered GET /v1/models`, exit 1, though it answered (busy). Waited out
    as a completion's throttle is, up to 60 s (or --give-up-after) in all."""
    src = write_rows(tmp_path / "in.jsonl", [{"id": "a", "prompt": "q"}])
    with FaultServer(models_throttled=2, retry_after="0.2") as srv:
        assert generate(src, tmp_path / "o.jsonl", srv.url) == 0
    assert "a" in by_id(tmp_path / "o.jsonl")
    with FaultServer(models_throttled=10**6, retry_after="0.2") as srv:
        t0 = time.monotonic()
        rc = generate(src, tmp_path / "p.jsonl", srv.url, extra=["--give-up-after", "1"])
        took = time.monotonic() - t0
    assert rc == 1 and 1.0 <= took < 5, took
    assert "GET /models: HTTP 429" in capsys.readouterr().err
