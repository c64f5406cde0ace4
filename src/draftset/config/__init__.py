"""Options before any work: defaults, recipe files, and the preflight checks (exit 2)."""
