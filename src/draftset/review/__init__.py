"""`draftset show` and `draftset report`: looking at a built set."""
