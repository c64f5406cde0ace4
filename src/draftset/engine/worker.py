"""The entry points of a local worker process (`LocalPoolEngine`), and of the helper process
when it runs the row step as one of the workers.

A worker imports only what it runs (no readers, no selection). In a build it also writes: its
task is the build's block job (`pipeline.block.BlockJob`), whose runner writes each block's
shard with pyarrow, imported when the first block arrives (unpickling the job). The helper
loads the template for the build (`load_and_keep`) and keeps it: it then runs the row step on
that very template (`start_on_kept`), the way the inline engine does in the driver, so
``--workers N`` needs only N - 1 pool processes and one fewer transformers import and kit
rebuild.
"""

from __future__ import annotations

import os
from typing import Any

from draftset.engine.base import WorkerTask, hold_tokenizer_threads, unpack
from draftset.engine.lifeline import die_with_parent
from draftset.mask.template import (
    ChatTemplate,
    TemplateInfo,
    TemplateSpec,
    describe_template,
    import_template_compiler,
)

_STEP: Any = None  # the task's callable: the row step, or the build's block runner
_KEPT: ChatTemplate | None = None  # the helper's loaded template (see `load_and_keep`)
_DONE = 0  # batches this process ran


def init_worker(configs: Any, threads: int | None = None) -> None:
    """Start-up: imports happen while the template loads; then one task arrives (the build's
    block job, or a bare `MaskConfig`).

    ``None`` instead of a config means the load failed: the worker stays empty and is shut down.
    ``threads``: the tokenizer's threads here (`base.tokenizer_threads`: the CPUs shared out).
    """
    global _STEP
    die_with_parent()  # a killed build leaves no worker behind
    hold_tokenizer_threads(threads)
    # the Rust tokenizer's own threads, as the CLI's builds always had them (it sets this before
    # spawning; the Python API sets nothing): one thread per worker made a `build(workers=2)`
    # ~17% slower (docs/benchmarks.md, "Session 9"); a value the user set is kept
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    import_template_compiler()
    config = configs.get()
    if config is not None:
        _STEP = config.build()


def process_batch(batch: Any) -> Any:
    global _DONE
    assert _STEP is not None
    _DONE += 1
    return _STEP(unpack(batch))


def batches_done() -> int:
    """How many batches this process ran (how the work was shared)."""
    return _DONE


def worker_ready() -> bool:
    return _STEP is not None


def load_and_keep(spec: TemplateSpec, target_vocab_size: int | None = None) -> TemplateInfo:
    """The helper's job: load the template (raises `TokenizerError`), describe it for the
    driver, and keep it here for `start_on_kept`."""
    global _KEPT
    _KEPT = ChatTemplate(spec)
    return describe_template(_KEPT, target_vocab_size)


def start_on_kept(config: WorkerTask) -> None:
    """The helper joins the row step: its `MaskStep` runs on the template it loaded (the
    config's kit, the serialized copy the pool workers rebuild from, is not needed here)."""
    global _STEP
    assert _KEPT is not None, "load_and_keep first"
    _STEP = config.build(template=_KEPT)
