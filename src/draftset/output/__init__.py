"""Output: the temporary-then-renamed folder, the Arrow/Parquet writers, vocab files, readback."""
