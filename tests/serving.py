"""A real `transformers serve` of a tiny Qwen3-shaped model, for the generate and run tests.

Shared by tests/generation/test_generate.py and tests/pipeline/test_run.py (a helper module in
tests/, so either test file runs on its own).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serving_missing() -> str | None:
    for name in ("torch", "fastapi", "uvicorn", "openai"):
        if importlib.util.find_spec(name) is None:
            return name
    return None


CHAIN = ("Hello", " world", ".")
"""The tiny model is wired to answer exactly this, then <|im_end|>: deterministic, checkable."""


def make_tiny_qwen3(folder: Path, tokenizer_dir: Path) -> None:
    """A randomly initialised 1-layer Qwen3 (hidden size 16, the real 151,936-token vocabulary),
    written with numpy in about a second. Its attention and MLP outputs are zeroed, so the next
    token depends only on the last one; embeddings and head are set so that any prompt is
    answered with CHAIN and then <|im_end|>, which makes the served answers checkable."""
    import numpy as np
    from safetensors.numpy import save_file
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    chain = [tok.token_to_id(t.replace(" ", "Ġ")) for t in CHAIN] + [tok.token_to_id("<|im_end|>")]
    vocab, hidden, heads, kv_heads, head_dim = 151936, 16, 2, 1, 8
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return rng.normal(0.0, 0.02, size=shape).astype(np.float32)

    emb = np.zeros((vocab, hidden), np.float32)
    emb[:, 0] = 1.0  # every other token: "start of answer"
    head = np.zeros((vocab, hidden), np.float32)
    head[chain[0], 0] = 1.0
    for k in range(1, len(chain)):
        emb[chain[k - 1]] = np.eye(hidden, dtype=np.float32)[k]
        head[chain[k], k] = 1.0
    layer = "model.layers.0."
    tensors = {
        "model.embed_tokens.weight": emb,
        "lm_head.weight": head,
        "model.norm.weight": np.ones(hidden, np.float32),
        layer + "input_layernorm.weight": np.ones(hidden, np.float32),
        layer + "post_attention_layernorm.weight": np.ones(hidden, np.float32),
        layer + "self_attn.q_proj.weight": rand(heads * head_dim, hidden),
        layer + "self_attn.k_proj.weight": rand(kv_heads * head_dim, hidden),
        layer + "self_attn.v_proj.weight": rand(kv_heads * head_dim, hidden),
        layer + "self_attn.o_proj.weight": np.zeros((hidden, heads * head_dim), np.float32),
        layer + "self_attn.q_norm.weight": np.ones(head_dim, np.float32),
        layer + "self_attn.k_norm.weight": np.ones(head_dim, np.float32),
        layer + "mlp.gate_proj.weight": rand(hidden, hidden),
        layer + "mlp.up_proj.weight": rand(hidden, hidden),
        layer + "mlp.down_proj.weight": np.zeros((hidden, hidden), np.float32),
    }
    config = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "dtype": "float32",
    }
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    for f in tokenizer_dir.iterdir():
        # the real Qwen3 generation_config.json samples (do_sample, temperature 0.6): this
        # model must answer greedily, so it keeps config.json's eos alone
        if f.is_file() and f.name != "generation_config.json":
            shutil.copy(f, folder / f.name)


@contextlib.contextmanager
def transformers_serve(tmp_path: Path, qwen3_dir: Path) -> Iterator[int]:
    """A real `transformers serve` of a tiny Qwen3-shaped model (answers CHAIN) on a free
    loopback port, stopped on exit; yields the port."""
    model_dir = tmp_path / "tiny-qwen3"
    make_tiny_qwen3(model_dir, qwen3_dir)
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    serve = [
        sys.executable,
        "-c",
        "from transformers.cli.transformers import main; main()",
        "serve",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--device",
        "cpu",
    ]
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(serve, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        _wait_for_port(port, proc, tmp_path / "serve.log")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _wait_for_port(
    port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"transformers serve exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail("transformers serve did not start in time")
