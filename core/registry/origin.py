"""Where a config's agent came from, for `deck agents`: the registry (its id and pinned version, and
the newer version the cached registry has), a preset deck ships, or the user's own hand. Read from
the config and the cache only: never a network call."""

from __future__ import annotations

import tomllib
from typing import Any

from deck.registry.catalog import Catalog


def split_registry(value: str) -> tuple[str, str]:
    """`"gemini@0.37.1"` → ("gemini", "0.37.1"); an id alone (a preset's) → (id, "")."""
    ident, _, version = value.partition("@")
    return ident, version


def preset_commands() -> dict[tuple[str, ...], str]:
    """The command of each preset deck ships → the preset's name."""
    from deck.config.template import presets

    found = {}
    for name, text in presets().items():
        for agent in tomllib.loads(text).get("agents", {}).values():
            found[tuple(agent.get("command", []))] = name
    return found


def origin(
    command: list[str], registry: str, catalog: Catalog | None, presets: dict[tuple[str, ...], str]
) -> dict[str, Any]:
    """`{"kind": "registry"|"preset"|"hand-written", …}`: the registry's id, the version pinned, and
    `latest` when the cached `catalog` has another version; the preset's name."""
    ident, version = split_registry(registry)
    row: dict[str, Any] = {"kind": "hand-written"}
    if tuple(command) in presets:
        row = {"kind": "preset", "preset": presets[tuple(command)]}
    if ident and version:
        row = {"kind": "registry", "version": version}
    if ident:
        row["id"] = ident
        entry = catalog.agents.get(ident) if catalog is not None else None
        if entry is not None and entry.version != version:
            row["latest"] = entry.version
    return row


def describe(row: dict[str, Any]) -> str:
    """One short phrase: "registry gemini 0.37.1 (0.38.0 available)", "preset claude", "hand-written"."""
    if row["kind"] == "registry":
        text = f"registry {row['id']} {row['version']}"
    elif row["kind"] == "preset":
        text = f"preset {row['preset']}"
    else:
        text = "hand-written"
    if "latest" in row:
        text += (
            f" ({row['latest']} available: deck agents update)"
            if row["kind"] == "registry"
            else f" (registry {row['id']} {row['latest']})"
        )
    return text
