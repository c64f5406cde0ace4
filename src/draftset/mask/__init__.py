"""Render & mask & encode: the pure row step that turns a conversation into loss-masked rows."""
