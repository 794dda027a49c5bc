"""`deck config init`: a commented first config, the demo agent plus the presets for real agents."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from deck.config.files import embedded_default

HEADER = """\
# deck's config: the agents deck runs, and how. Check it with `deck config validate`,
# see every default with `deck config show`. deck watches this file: a saved change
# applies at once (new agents appear, removed ones stop, changed ones say "restart").

# language = "en"           # en | fr
# theme = "dark"            # dark | light
# frontend = "urwid"        # urwid | line | jsonl; default: urwid on a terminal, else line

# [limits]
# maxRunningAgents = 4
# stopIdleAgentsAfter = "10m"
# handshakeTimeout = "30s"
# messageSize = "8 MiB"     # what one message keeps
# conversationSize = "32 MiB"   # what a conversation keeps in memory; at least twice messageSize

# [plugins]
# disabled = []             # e.g. ["announcements"]

# [notify]                  # told when an agent needs you (a bell, a terminal or desktop notification)
# on = ["input", "error", "budget"]   # add "done" for every turn that ends
# after = "0s"              # only if still waiting this long
# desktop = false
# command = ["sh", "-c", 'curl -fsS --data-raw "$DECK_TITLE" https://ntfy.sh/my-topic']

# [budget]                  # stop agents that spend too much (an agent's own: budget = "5 USD")
# total = "20 USD"
# period = "day"            # day | server

# [registry]                # where `deck agents search|add|update` read the ACP registry
# url = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"

"""

PRESETS_HEADER = """
# -- Real agents: to use one, remove the "# " before its lines (not the "##" notes) ----------
# -- or add one from the ACP registry, its version pinned: `deck agents add ID` (its registry id)
"""


def presets() -> dict[str, str]:
    """The shipped presets, by file stem, in name order."""
    folder = resources.files("deck.presets")
    files = sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)
    return {f.name.removesuffix(".toml"): f.read_text(encoding="utf-8") for f in files}


def starter_config() -> str:
    """The demo agent, then every preset commented out line by line."""
    demo = embedded_default().split("\n", 1)[1]  # without the "built-in config" comment
    parts = [HEADER, "# The demo agent shipped with deck: a scripted answer, a tool call, a permission.\n", demo]
    parts.append(PRESETS_HEADER)
    for text in presets().values():
        # Settings get "# " (remove it to use the agent), notes "#" more, so they stay notes.
        lines = [f"#{line}" if line.startswith("#") else f"# {line}" if line else "#" for line in text.strip().splitlines()]
        parts.append("\n" + "\n".join(lines) + "\n")
    return "".join(parts)


def write_new(path: Path, text: str) -> None:
    """Create `path` with `text`; FileExistsError if anything is there (nothing is overwritten)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
