"""Helpers for trying draftset without a GPU: a stand-in for a vLLM server."""
