"""draftset: verified, fully accounted training sets for speculative-decoding drafters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("draftset")
except PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+src"
