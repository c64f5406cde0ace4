"""The output is consumed as-is by vllm-project/speculators 0.9.0 (installed --no-deps by the
test setup, with what its training data loader imports)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from conftest import REPO, qwen3_tokenizer_dir

from draftset.config.options import BuildOptions
from draftset.config.recipe import load_recipe
from draftset.pipeline.build import run_build

torch = pytest.importorskip(
    "torch", reason="torch is installed by scripts/test.sh (torch==2.13.0 CPU)"
)
spec_data = pytest.importorskip(
    "speculators.train.data", reason="speculators 0.9.0 is installed by scripts/test.sh"
)
vocab_mapping = pytest.importorskip("speculators.train.vocab_mapping")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    recipe = load_recipe(REPO / "examples" / "recipe.yaml")
    out = tmp_path_factory.mktemp("spec") / "set"
    return run_build(
        BuildOptions(
            recipe["sources"],
            str(qwen3_tokenizer_dir()),
            out,
            workers=1,
            draft_vocab_size=256,
            target_vocab_size=151936,
        )
    ).out


def test_speculators_arrow_dataset_reads_every_row(built):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = spec_data.ArrowDataset(max_len=4096, datapath=str(built))
    manifest = json.loads((built / "manifest.json").read_text())
    assert len(ds) == manifest["totals"]["rows"] == 14
    # its length-bucketing reads seq_len, its __getitem__ path reads these tensors
    assert ds._compute_approx_lengths() == [int(x) for x in ds.data.with_format(None)["seq_len"]]
    plain = ds.data.with_format(None)
    for i in range(len(ds)):
        item = ds.data[i]  # torch format, as speculators' own prepare step leaves it
        assert isinstance(item["input_ids"], torch.Tensor)
        assert item["input_ids"].tolist() == plain[i]["input_ids"]
        assert item["loss_mask"].tolist() == plain[i]["loss_mask"]
        assert int(item["seq_len"]) == item["input_ids"].shape[0]
        assert item["input_ids"][item["loss_mask"].to(torch.bool)].numel() > 0


def test_token_freq_pt_and_vocab_mapping_equal_speculators(built):
    freq = torch.load(built / "token_freq.pt", weights_only=True)
    npy = np.load(built / "token_freq.npy")
    assert freq == {int(i): int(npy[i]) for i in np.nonzero(npy)[0]}
    vocab = len(npy)
    d2t, t2d = vocab_mapping.build_vocab_mappings_from_distribution(freq, 256, vocab)
    assert (d2t.numpy() == np.load(built / "d2t-256.npy")).all()
    assert (t2d.numpy() == np.load(built / "t2d-256.npy")).all()
