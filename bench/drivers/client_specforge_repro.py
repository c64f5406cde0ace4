"""A REPRODUCTION of the request loop of SpecForge's `scripts/regenerate_train_data.py`.

That script is not in any installable package: the `specforge` wheels (0.2.0 included) ship
only the `specforge` package, not `scripts/`. It was read in the public repository
(sgl-project/SpecForge, commit 1cf0209f1bdb) and its client logic is re-created here, in our
own code, with the same client library and the same concurrency pattern:

- one synchronous ``openai.OpenAI`` client built per conversation, inside the worker
  (``api_key="None"``), one ``chat.completions.create`` per user turn with ``model``,
  ``messages``, ``max_tokens``, ``temperature`` (0.7, its default) and ``stream=False``; the
  system and user turns are sent, the old assistant turns dropped;
- a ``ThreadPoolExecutor`` with ``concurrency`` threads per server; the main thread submits
  rows one by one and, while ``concurrency`` of them are in flight, scans the in-flight list
  without sleeping for a finished one, writes it (JSON line to the output or error file) and
  then submits the next; whatever is left is collected in submission order at the end;
- one test call with ``max_tokens=1`` per server before starting, a ``tqdm`` bar updated per
  submitted row, ``--reasoning none`` and one server.

Its input validation (``conversation_validation``) is reduced to the checks single-turn rows
meet. Prints one JSON line: requests sent, seconds and CPU seconds (all threads) from after the
test call to the last line written.

    python bench/drivers/client_specforge_repro.py DATA OUT HOST:PORT CONCURRENCY MAX_TOKENS
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from openai import OpenAI
from tqdm import tqdm

MODEL = "fault-model"
TEMPERATURE = 0.7


def regenerate(server: str, row: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    client = OpenAI(base_url=f"http://{server}/v1", api_key="None")  # per conversation
    sent: list[dict[str, Any]] = []
    if row["conversations"][0]["role"] == "assistant":
        return {**row, "status": "error", "error": "starts with an assistant message"}
    for msg in row["conversations"]:
        if msg["role"] == "assistant":
            continue
        if msg["role"] not in ("system", "user"):
            return {**row, "status": "error", "error": f"role {msg['role']}"}
        sent.append(msg)
        if msg["role"] == "system":
            continue
        try:
            resp = client.chat.completions.create(
                model=MODEL,
                messages=sent,
                max_tokens=max_tokens,
                temperature=TEMPERATURE,
                stream=False,
            )
        except Exception as exc:  # the script records any failure per row
            return {**row, "status": "error", "error": str(exc)}
        sent.append({"role": "assistant", "content": resp.choices[0].message.content})
    return {**row, "conversations": sent, "status": "success"}


def main() -> None:
    data, out, server, concurrency_s, max_tokens_s = sys.argv[1:6]
    concurrency, max_tokens = int(concurrency_s), int(max_tokens_s)
    with open(data, encoding="utf-8") as f:
        total = sum(1 for _ in f)
    probe = {"conversations": [{"role": "user", "content": "Hello, how are you?"}]}
    if regenerate(server, probe, 1)["status"] != "success":
        sys.exit(f"server {server} is not available")
    w0, c0 = time.perf_counter(), time.process_time()
    requests = 0
    err_path = Path(out).with_name(Path(out).stem + "_error.jsonl")
    with (
        open(data, encoding="utf-8") as src,
        open(out, "w", encoding="utf-8") as ok_f,
        open(err_path, "w", encoding="utf-8") as err_f,
    ):

        def write(fut: Future) -> None:
            res = fut.result()
            (ok_f if res["status"] == "success" else err_f).write(
                json.dumps(res, ensure_ascii=False) + "\n"
            )

        pool = ThreadPoolExecutor(max_workers=concurrency)
        inflight: list[Future] = []
        bar = tqdm(total=total, desc="Processing")
        for line in src:
            row = json.loads(line.strip())
            while len(inflight) >= concurrency:  # busy scan, as the script does
                done = [f for f in inflight if f.done()]
                for fut in done:
                    write(fut)
                    inflight.remove(fut)
                if done:
                    break
            inflight.append(pool.submit(regenerate, server, row, max_tokens))
            requests += sum(1 for m in row["conversations"] if m["role"] == "user")
            bar.update(1)
        for fut in inflight:
            write(fut)
        bar.close()
        pool.shutdown()
    w1, c1 = time.perf_counter(), time.process_time()
    with open(out, encoding="utf-8") as f:
        rows_out = sum(1 for _ in f)
    report = {"requests": requests, "rows_out": rows_out}
    print(json.dumps({**report, "loop_seconds": w1 - w0, "loop_cpu": c1 - c0}), flush=True)


if __name__ == "__main__":
    main()
