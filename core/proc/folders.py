"""Where deck keeps its servers (light to import: `deck attach` reads it before anything else)."""

from __future__ import annotations

import os
from pathlib import Path


def socket_dir() -> Path:
    """The folder of the user's servers: $XDG_RUNTIME_DIR/deck, else /tmp/deck-UID."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "deck"
    return Path("/tmp") / f"deck-{os.getuid()}"
