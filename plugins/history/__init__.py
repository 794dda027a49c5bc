"""history: conversations kept on disk, so that they outlive deck.

`store.py` holds the SQLite database (schema migrations, full-text search) and the
batching writer that keeps streamed messages off the hot path.
"""
