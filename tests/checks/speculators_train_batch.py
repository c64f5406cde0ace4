"""Run inside the training venv (scripts/train-venv.sh): speculators' own training data path
over a draftset set, as `speculators train` builds it (`create_train_val_loaders`: its
ArrowDataset, multipack batch sampler, CollateFn and the EAGLE-3 `shift_batch`), with cached
hidden states (random values of the right shapes, token ids = the set's input_ids) standing in
for the verifier's. Prints what every batch held, as JSON, for
tests/checks/test_speculators_train.py.

    .venv-train/bin/python tests/checks/speculators_train_batch.py SET_DIR HIDDEN_STATES_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from datasets import load_from_disk
from hs_connectors import FileTransfer
from safetensors.torch import save_file
from speculators.models.eagle3.data import shift_batch
from speculators.train.dataloader import create_train_val_loaders

HIDDEN = 32  # the stand-in verifier's hidden size
TOTAL_SEQ_LEN = 1024


def main(set_dir: str, hs_dir: str) -> None:
    rows = load_from_disk(set_dir).with_format(None)
    out = Path(hs_dir)
    out.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(0)
    for i, ids in enumerate(rows["input_ids"]):
        hs = torch.randn(len(ids), 4, HIDDEN, generator=gen)  # 3 target layers + the last
        save_file(
            {"hidden_states": hs, "token_ids": torch.tensor(ids)}, out / f"hs_{i}.safetensors"
        )
    loaders = create_train_val_loaders(
        data_path=set_dir,
        total_seq_len=TOTAL_SEQ_LEN,
        hidden_states_dtype=torch.float32,
        transfer=FileTransfer(out),
        vllm_endpoint="http://127.0.0.1:9/v1",  # never asked: every row has its hidden states
        on_missing="raise",
        verifier_name_or_path="stand-in",
        request_timeout=1.0,
        max_retries=0,
        generation_validation_retries=0,
        max_consecutive_generation_failures=1,
        hidden_size=HIDDEN,
        num_target_layers=3,
        num_workers=0,
        prefetch_factor=1,
        preprocess=shift_batch,
        train_data_ratio=0.5,
    )
    batches = []
    for loader in loaders:
        for batch in loader:
            docs = batch["document_ids"][0]
            n = int((docs >= 0).sum())  # packed rows first, then padding (-1)
            segments = [
                [
                    batch["input_ids"][0, docs == d].tolist(),
                    batch["loss_mask"][0, docs == d].tolist(),
                ]
                for d in range(int(docs.max()) + 1)
            ]
            batches.append(
                {
                    "shapes": {k: list(v.shape) for k, v in batch.items() if hasattr(v, "shape")},
                    "segments": segments,  # one [input_ids, loss_mask] per packed row
                    "padding_supervised": int(batch["loss_mask"][0, n:].sum()),
                    "dropped": int(batch["error_records"]),
                }
            )
    print(json.dumps({"batches": batches}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
