"""torch is optional (only verify's referees use it: ``torch.load`` of ``token_freq.pt``,
speculators' loader): whether it imports here, and why not.

An installed torch whose import raises (a missing or mismatched shared library: an ImportError
or an OSError from ``torch/__init__.py``) is not "not installed": the reason says which, with
the error's first line, and the build records it. transformers imports torch whenever it finds
it installed, so a tokenizer load keeps a broken one out (`broken_torch_kept_out`): a set needs
no torch.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
from collections.abc import Iterator

NOT_INSTALLED = "torch is not installed"
FAILED = "torch failed to import"
"""How a reason for an installed torch that cannot be imported begins."""

_failed: str | None = None
"""Why torch failed to import in this process, once it did: a second import would run its
half-initialized package again (and may fail otherwise), so the first answer stands."""


def torch_unavailable() -> str | None:
    """None when torch imports (it is imported then); else why not: `NOT_INSTALLED`, or
    ``"torch failed to import: OSError: <the error's first line>"``."""
    global _failed
    if _failed is not None:
        return _failed
    try:
        import torch  # noqa: F401  # lazy: optional extra, ~1-3 s; only asked when needed
    except ModuleNotFoundError as exc:
        if exc.name == "torch":  # (or kept out: `sys.modules["torch"] = None`)
            return NOT_INSTALLED
        _failed = _reason(exc)
    except Exception as exc:  # a broken install raises what its libraries raise
        _failed = _reason(exc)
    return _failed


def _reason(exc: BaseException) -> str:
    first = next(iter(str(exc).strip().splitlines()), "")
    return f"{FAILED}: {type(exc).__name__}" + (f": {first}" if first else "")


def torch_installed() -> bool:
    """Whether a torch package is on the path (imported or not; cheap: nothing is imported)."""
    if "torch" in sys.modules:
        return sys.modules["torch"] is not None
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


@contextlib.contextmanager
def torch_hidden() -> Iterator[None]:
    """Inside, torch is unimportable the way Python's own ``sys.modules["torch"] = None`` makes
    it (``importlib.util.find_spec``, transformers' ``is_torch_available``, reports it absent);
    restored on leaving. A torch imported already is left as it is. Only where the process is
    draftset's own (the helper, the command line: `cli.TORCH_KEPT_OUT`): transformers caches
    its verdict."""
    if "torch" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


@contextlib.contextmanager
def broken_torch_kept_out() -> Iterator[None]:
    """Inside, an installed torch that fails to import is hidden (`torch_hidden`), so
    transformers sees no torch (and loads a tokenizer, which needs none) instead of failing
    with it. A torch that imports, is kept out already, or is not installed is left as it is
    (finding out imports it: what transformers does at once anyway)."""
    if "torch" in sys.modules or not torch_installed() or torch_unavailable() is None:
        yield
        return
    with torch_hidden():
        yield
