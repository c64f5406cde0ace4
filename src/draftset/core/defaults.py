"""Every default of a build, in one place: `BuildOptions`, the worker's `LengthRules`, the
CLI's help, recipes and the Python API read them from here (before, 4096 was written in four
places). Only `typing` is imported: worker processes import this through `encode`.

The placeholder answers are `reasons.DEFAULT_PLACEHOLDERS` (build and verify share it there).
"""

from __future__ import annotations

from typing import Final  # Final: type checkers see the literal ("all", not str)

MAX_LENGTH: Final = 4096
"""Tokens per row."""
TRUNCATION: Final = "drop"
"""Over-long rows: ``drop`` (reject ``too_long``) or ``truncate`` (cut and flag)."""
MIN_SUPERVISED_TOKENS: Final = 1
TURNS: Final = "all"
"""Which assistant turns are supervised: ``all``, ``last`` or ``each``."""
SEED: Final = 0
WORKERS: Final = 0
"""Render/encode processes; 0 = all cores (with ``--engine ray``: all the cluster's CPUs)."""
ENGINE: Final = "local"
"""What runs the row step: ``local`` (this machine's processes) or ``ray`` (a Ray cluster)."""
ENGINES: Final = ("local", "ray")
DEDUP: Final = "exact"
NEAR_DUP_THRESHOLD: Final = 0.8
RENDER_TIMEOUT: Final = 5.0
"""Seconds one row's template renders may take (``template_timeout`` past it); 0 = no bound.
Real templates take milliseconds."""
OUTPUT_FORMAT: Final = "arrow"
"""``arrow`` (HF save_to_disk folder, what speculators reads) or ``parquet`` (hub-style shards);
the formats are `draftset.output.FORMATS`."""
BLOCK_SIZE: Final = 16
"""DFlash block size for anchor counts (verify, report)."""
