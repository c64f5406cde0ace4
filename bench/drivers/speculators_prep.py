"""speculators 0.7.0.2 local-tokenizer data preparation, called through its public functions.

Runs in speculators' own venv. Mirrors its prepare step: load the processor (tokenizer), load
the JSONL, ``build_eagle3_dataset`` (a ``datasets.map`` over ``num_proc`` processes), count
token frequencies, ``save_to_disk``. With ``--chat-template FILE`` the tokenizer's template is
replaced first (a ``{% generation %}`` template switches speculators to HF's assistant-mask
path; otherwise it uses its regex over the rendered text). Prints one JSON line.

usage: python speculators_prep.py DATA TOKENIZER_DIR OUT WORKERS MAX_LEN [TEMPLATE]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def main() -> None:
    t0 = time.perf_counter()
    data, tok_dir, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    workers, max_len = int(sys.argv[4]), int(sys.argv[5])
    template = sys.argv[6] if len(sys.argv) > 6 else None
    from speculators.data_generation import preprocessing as prep

    t_import = time.perf_counter()
    processor = prep.load_processor(tok_dir)
    if template:
        processor.chat_template = Path(template).read_text(encoding="utf-8")
    raw, _ = prep.load_raw_dataset(data)
    t_load = time.perf_counter()
    ds = prep.build_eagle3_dataset(raw, processor, max_length=max_len, num_proc=workers)
    t_map = time.perf_counter()
    prep.save_token_frequency_distribution(ds, out / "token_freq.pt")
    t_freq = time.perf_counter()
    ds.save_to_disk(str(out / "data"))
    t_save = time.perf_counter()
    print(
        json.dumps(
            {
                "rows": len(ds),
                "output": str(out / "data"),
                "import_s": t_import - t0,
                "load_s": t_load - t_import,
                "map_s": t_map - t_load,
                "token_freq_s": t_freq - t_map,
                "save_s": t_save - t_freq,
            }
        )
    )


if __name__ == "__main__":
    main()
