"""`deck.__all__` is the public API: every name in it resolves, and plugins import nothing else of deck's."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import deck
import pytest

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


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
