"""The URL `deck agents search|add|update` read the ACP registry from: `$DECK_REGISTRY_URL`, else
the config's `[registry] url`, else the registry's CDN. It lives beside the config so that the
effective config (`deck config show`) says the URL deck uses rather than the key's empty default."""

from __future__ import annotations

import os

DEFAULT_URL = "https://cdn.agentclientprotocol.com/registry/v1/latest/registry.json"


def effective_url(configured: str | None = None) -> str:
    """`$DECK_REGISTRY_URL`, else `configured` (the config's `[registry] url`), else the default;
    its scheme is checked where it is fetched (`deck.registry.source.registry_url`)."""
    return os.environ.get("DECK_REGISTRY_URL") or configured or DEFAULT_URL
