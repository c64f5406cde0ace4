"""draftset's own version, as installed: written into every manifest and printed by `--version`."""

from __future__ import annotations

from functools import cache


@cache
def package_version() -> str:
    """The installed distribution's version (``0.0.0+src`` from a source tree without install)."""
    # lazy: importlib.metadata costs ~100 ms (python -X importtime); only a manifest, verify's
    # record and --version ask, never a worker or `draftset --help`
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("draftset")
    except PackageNotFoundError:  # running from a source tree without install
        return "0.0.0+src"
