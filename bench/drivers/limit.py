"""The limit: render every conversation with the real template, batch-encode it, nothing else.

No masks, no span derivation, no writing: the cost that cannot be avoided. Runs in draftset's
own venv (transformers renders with the same sandboxed Jinja draftset uses; the Rust tokenizer's
``encode_batch`` uses all cores). Prints one JSON line: rows, tokens, phase times.

With ``--fast`` it encodes with ``encode_batch_fast`` (same ids, no character offsets: the
cheapest batch encode the Rust tokenizer offers). ``--template FILE`` renders with that chat
template instead of the tokenizer's own. Rows are ShareGPT (``conversations``) or OpenAI
``messages`` (with ``tools``, ``tool_calls``, ``reasoning_content``: passed as they are).

usage: python limit.py DATA.jsonl TOKENIZER_DIR [BATCH] [--fast] [--template FILE]
"""

from __future__ import annotations

import json
import os
import sys
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
}


def main() -> None:
    t0 = time.perf_counter()
    fast = "--fast" in sys.argv
    argv = [a for a in sys.argv[1:] if a != "--fast"]
    template = None
    if "--template" in argv:
        i = argv.index("--template")
        with open(argv[i + 1], encoding="utf-8") as f:
            template = f.read()
        del argv[i : i + 2]
    data, tok_dir = argv[0], argv[1]
    batch_size = int(argv[2]) if len(argv) > 2 else 1000
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tok_dir)
    backend = tok.backend_tokenizer
    encode_batch = backend.encode_batch_fast if fast else backend.encode_batch
    t_ready = time.perf_counter()
    rows = tokens = 0
    render_s = encode_s = 0.0

    def flush(texts: list[str]) -> int:
        nonlocal encode_s
        t = time.perf_counter()
        n = sum(len(e.ids) for e in encode_batch(texts, add_special_tokens=False))
        encode_s += time.perf_counter() - t
        return n

    texts: list[str] = []
    with open(data, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if "messages" in row:
                messages = row["messages"]
            else:
                messages = [
                    {"role": ROLES[t["from"]], "content": t["value"]} for t in row["conversations"]
                ]
            t = time.perf_counter()
            texts.append(
                tok.apply_chat_template(
                    messages, tools=row.get("tools"), chat_template=template, tokenize=False
                )
            )
            render_s += time.perf_counter() - t
            rows += 1
            if len(texts) >= batch_size:
                tokens += flush(texts)
                texts = []
    if texts:
        tokens += flush(texts)
    t_end = time.perf_counter()
    print(
        json.dumps(
            {
                "rows": rows,
                "tokens": tokens,
                "startup_s": t_ready - t0,
                "render_s": render_s,
                "encode_s": encode_s,
                "work_s": t_end - t_ready,
            }
        )
    )


if __name__ == "__main__":
    main()
