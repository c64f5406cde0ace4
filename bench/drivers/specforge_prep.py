"""SpecForge 0.2.0 offline preprocessing, called through its public entry function.

Runs in SpecForge's own venv: ``prepare_prompt_tasks`` on the JSONL with its ``qwen`` template
(``build_eagle3_dataset``: a ``datasets.map`` over ``num_proc`` processes whose output is the
Arrow cache under ``cache_dir``). Prints one JSON line with the rows and the cache files.

usage: python specforge_prep.py DATA TOKENIZER_DIR OUT WORKERS MAX_LEN
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    t0 = time.perf_counter()
    data, tok_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
    workers, max_len = int(sys.argv[4]), int(sys.argv[5])
    from specforge.data.prompt_builder import prepare_prompt_tasks
    from transformers import AutoTokenizer

    t_import = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
    tasks = prepare_prompt_tasks(
        data,
        tokenizer,
        chat_template="qwen",
        max_length=max_len,
        is_preformatted=False,
        train_only_last_turn=False,
        cache_dir=out,
        cache_key="bench",
        num_proc=workers,
        min_loss_tokens=1,
        max_prompts=None,
        loss_mask_filter=None,
    )
    t_done = time.perf_counter()
    dataset = getattr(tasks, "_dataset", None)
    files = [f["filename"] for f in dataset.cache_files] if dataset is not None else []
    print(
        json.dumps(
            {
                "rows": len(tasks),
                "output_files": files,
                "filtered": dataset is not None and dataset._indices is not None,
                "import_s": t_import - t0,
                "prepare_s": t_done - t_import,
            }
        )
    )


if __name__ == "__main__":
    main()
