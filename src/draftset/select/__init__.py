"""Selection: which rows go on, in order (ids, dedup, decontamination, mixtures, turn modes)."""
