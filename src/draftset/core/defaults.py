"""Every default of a job (build, generate, run, verify), in one place: the option schema
(`config.schema`, whence the CLI's help, recipes and the API), `BuildOptions` and the worker's
`LengthRules` read them from here (before, 4096 was written in four places). Only `typing` is
imported: worker processes import this through `encode`.

The placeholder answers are `rules.DEFAULT_PLACEHOLDERS` (build and verify share it there).
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
DEDUP: Final = "exact"
NEAR_DUP_THRESHOLD: Final = 0.8
RENDER_TIMEOUT: Final = 5.0
"""Seconds one row's template renders may take (``template_timeout`` past it); 0 = no bound.
Real templates take milliseconds."""
RENDER_TIMEOUT_MAX: Final = 1_000_000.0  # s (11.6 days): the render alarm's timer bound; 0 = none
OUTPUT_FORMAT: Final = "arrow"
"""``arrow`` (HF save_to_disk folder, what speculators reads) or ``parquet`` (hub-style shards);
the formats are `draftset.output.FORMATS`."""
BLOCK_SIZE: Final = 16
"""DFlash block size for anchor counts (verify, report)."""
TURN_MODES: Final = ("all", "last", "each")
TRUNCATIONS: Final = ("drop", "truncate")
DEDUPS: Final = ("exact", "near", "none")
"""Exact content hash, + MinHash near-duplicates, or none."""

# `draftset generate` and a recipe's `generate:` section (what `draftset run` asks the servers)
CONCURRENCY: Final = 16
"""Requests in flight per endpoint."""
REQUEST_TIMEOUT: Final = 600.0
MAX_RETRIES: Final = 6
BACKOFF: Final = 0.5
BACKOFF_CAP: Final = 30.0
HEALTH_INTERVAL: Final = 5.0
GIVE_UP_AFTER: Final = 600.0
MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
"""Largest response body, also after gzip/deflate decoding (32 MiB)."""
API_KEY_ENV: Final = "OPENAI_API_KEY"
"""The variable a recipe's `generate.api_key_env` names by default."""
REGENERATE: Final = ("missing", "missing_reasoning", "all")
"""`draftset run`: which rows the target answers again (`generate.regenerate`)."""
