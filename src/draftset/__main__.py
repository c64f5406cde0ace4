"""``python -m draftset``: the same command line as the ``draftset`` script."""

import sys

if __name__ == "__main__":  # spawned workers import this module again: no second command line
    from draftset.cli import main  # lazy: the workers need no command layer

    sys.exit(main())
