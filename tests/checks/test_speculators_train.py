"""`speculators train` on a draftset set, in the training venv scripts/train-venv.sh makes
(`.venv-train`: speculators 0.9.0 with what its trainer imports, transformers 5.19, datasets
5.1; scripts/setup.sh test builds it).

What runs there: the `speculators train` command itself up to the model (`--dry-run`: the
EAGLE-3 draft model built from a tiny random verifier and the set's d2t/t2d vocabulary maps,
saved), and a training step's data path (`create_train_val_loaders` as `train` calls it:
ArrowDataset, multipack sampler, CollateFn, EAGLE-3 `shift_batch`) over every row of the set,
with stand-in hidden states. Not run: the optimizer step — speculators' Trainer picks the
"cuda" device when no accelerator is found, so a step needs a GPU.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from conftest import REPO, qwen3_tokenizer_dir

from draftset.config.options import BuildOptions
from draftset.config.recipe import load_recipe
from draftset.pipeline.build import run_build

VENV = REPO / ".venv-train"
PY = VENV / "bin" / "python"


@pytest.fixture(autouse=True)
def _train_venv_present() -> None:
    """The README's test command makes it: failing here, never skipping, keeps CI honest."""
    if not PY.exists():
        pytest.fail("no .venv-train: run scripts/setup.sh test (scripts/train-venv.sh makes it)")


DRAFT_VOCAB = 256


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    recipe = load_recipe(REPO / "examples" / "recipe.yaml")
    out = tmp_path_factory.mktemp("train") / "set"
    return run_build(
        BuildOptions(
            recipe["sources"],
            str(qwen3_tokenizer_dir()),
            out,
            workers=1,
            draft_vocab_size=DRAFT_VOCAB,
            target_vocab_size=151936,
        )
    ).out


def _train_venv(*args: str, cwd=None) -> subprocess.CompletedProcess[str]:
    env = {"PATH": f"{VENV / 'bin'}:/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(cwd)}
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_speculators_train_builds_the_draft_model_from_the_sets_vocab(built, tmp_path):
    make = (
        "from transformers import Qwen3Config, Qwen3ForCausalLM; import torch;"
        " torch.manual_seed(0); Qwen3ForCausalLM(Qwen3Config(vocab_size=151936, hidden_size=64,"
        " intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,"
        " num_key_value_heads=2, head_dim=16)).save_pretrained('verifier')"
    )
    r = _train_venv(str(PY), "-c", make, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    cmd = [str(VENV / "bin" / "speculators"), "train", "--speculator-type", "eagle3"]
    cmd += ["--verifier-name-or-path", "verifier", "--data-path", str(built)]
    cmd += ["--d2t-path", str(built / f"d2t-{DRAFT_VOCAB}.npy")]
    cmd += ["--t2d-path", str(built / f"t2d-{DRAFT_VOCAB}.npy")]
    cmd += ["--draft-vocab-size", str(DRAFT_VOCAB), "--num-layers", "1"]
    cmd += ["--target-layer-ids", "1", "2", "3", "--total-seq-len", "1024"]
    cmd += ["--dry-run", "--save-path", "ckpt"]
    r = _train_venv(*cmd, cwd=tmp_path)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    assert config["draft_vocab_size"] == DRAFT_VOCAB
    assert (tmp_path / "ckpt" / "model.safetensors").stat().st_size > 0


def test_every_row_reaches_a_training_batch_as_written(built, tmp_path):
    data = tmp_path / "set"
    shutil.copytree(built, data)  # the hidden states go beside a copy, not into the set
    script = REPO / "tests" / "checks" / "speculators_train_batch.py"
    r = _train_venv(str(PY), str(script), str(data), str(data / "hidden_states"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    batches = json.loads(r.stdout.strip().splitlines()[-1])["batches"]
    from datasets import load_from_disk

    rows = load_from_disk(str(built)).with_format(None)
    # EAGLE-3's shift: row token t trains the prediction made at t-1 (x1.., mask l1..)
    pairs = zip(rows["input_ids"], rows["loss_mask"], strict=True)
    want = sorted([ids[1:], mask[1:]] for ids, mask in pairs)
    got = sorted(seg for b in batches for seg in b["segments"])
    assert got == want  # every row once, tokens and loss mask exactly as draftset wrote them
    for b in batches:
        assert b["shapes"]["input_ids"] == [1, 1024]
        assert b["shapes"]["hidden_states"] == [1, 1024, 3 * 32]
        assert b["padding_supervised"] == 0 and b["dropped"] == 0
