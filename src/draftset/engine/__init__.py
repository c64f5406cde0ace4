"""Engines: what runs the row step over ordered batches (inline, local process pool, Ray)."""
