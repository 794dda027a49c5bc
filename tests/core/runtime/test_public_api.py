"""`deck.__all__` is the public API: every name in it resolves, and plugins import nothing else of deck's."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import deck
import pytest

from tests.conftest import ROOT

PLUGINS = ROOT / "plugins"


def test_every_public_name_resolves():
    for name in deck.__all__:
        assert getattr(deck, name) is not None, name
    with pytest.raises(AttributeError):
        deck.no_such_name  # noqa: B018


def deck_imports(path: Path) -> list[tuple[int, str]]:
    """What a file imports from deck, outside the plugins' own package: `name` or `module.`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            if module == "deck":
                found += [(node.lineno, alias.name) for alias in node.names]
            elif module.startswith("deck.") and not module.startswith("deck.plugins"):
                found.append((node.lineno, module.split(".")[1] + "."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("deck.") and not alias.name.startswith("deck.plugins"):
                    found.append((node.lineno, alias.name.split(".")[1] + "."))
    return found


def test_plugins_import_only_the_public_api():
    public = set(deck.__all__)
    modules = {name for name in public if importlib.util.find_spec(f"deck.{name}") is not None}
    wrong = []
    for path in sorted(PLUGINS.rglob("*.py")):
        for line, name in deck_imports(path):
            allowed = name.rstrip(".") in modules if name.endswith(".") else name in public
            if not allowed:
                wrong.append(f"{path.relative_to(PLUGINS.parent)}:{line}: deck.{name}")
    assert wrong == []


DOCS = ROOT / "docs" / "plugins.md"


def deck_attributes(path: Path) -> list[tuple[int, str]]:
    """The attributes a file reads or sets on a Deck: `deck.X`, `self.deck.X`, `recorder.deck.X`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if (isinstance(value, ast.Name) and value.id == "deck") or (
            isinstance(value, ast.Attribute) and value.attr == "deck"
        ):
            found.append((node.lineno, node.attr))
    return found


def documented_deck_attributes() -> set[str]:
    """The Deck's attributes docs/plugins.md names for plugins: each `deck.NAME` of its "- `Deck`:"
    item of the public API."""
    import re

    text = DOCS.read_text()
    start = text.index("- `Deck`:")
    item = text[start : text.index("\n- `", start)]
    return set(re.findall(r"`(?:await )?deck\.([a-z_]+)", item))


def test_plugins_touch_only_the_documented_attributes_of_the_deck():
    documented = documented_deck_attributes()
    assert {"agents", "spawn", "emit", "call", "pm", "restore_conversation"} <= documented
    modules = {name for name in deck.__all__ if importlib.util.find_spec(f"deck.{name}") is not None}
    wrong = [
        f"{path.relative_to(PLUGINS.parent)}:{line}: deck.{attr}"
        for path in sorted(PLUGINS.rglob("*.py"))
        for line, attr in deck_attributes(path)
        if attr not in documented and attr not in modules  # `deck.events.…` is the module
    ]
    assert wrong == []


def test_the_attribute_check_finds_an_undocumented_one(tmp_path: Path):
    plugin = tmp_path / "sneaky.py"
    plugin.write_text("def deck_startup(deck):\n    deck.chat.history = None\n    self.deck.spawn(x, 'y')\n")
    assert deck_attributes(plugin) == [(2, "chat"), (3, "spawn")]
    assert "chat" not in documented_deck_attributes()
