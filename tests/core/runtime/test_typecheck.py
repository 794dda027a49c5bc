"""mypy checks plugins and frontends against deck's real API, never against `Any`: `deck` is
installed as a tree of links (`pip install -e . --config-settings editable_mode=strict`) with its
py.typed, so mypy reads it as the package it is, from inside it (`mypy -p deck`) or from a plugin
of another package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import deck
import deck.frontends
import deck.plugins
from tests.conftest import ROOT

pytestmark = pytest.mark.timeout(300)

INSTALL = "pip install -e '.[test]' --config-settings editable_mode=strict"

PROBE = """
from deck import Agent, Client, Deck
from deck.events import TurnChanged
from deck.frontends.line import LineFrontend
from deck.plugins.notify.events import NotifySent


def probe(agent: Agent, deck: Deck, client: Client, event: TurnChanged, line: LineFrontend, sent: NotifySent) -> None:
    reveal_type(agent)
    reveal_type(deck)
    reveal_type(client)
    reveal_type(event)
    reveal_type(line)
    reveal_type(sent)
"""
REVEALED = [
    "deck.agent.agent.Agent", "deck.runtime.deck.Deck", "deck.client.Client", "deck.events.TurnChanged",
    "deck.frontends.line.LineFrontend", "deck.plugins.notify.events.NotifySent",
]  # fmt: skip


def test_a_plugin_of_another_package_sees_deck_s_classes_not_any(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         "--follow-imports=silent", str(probe)],
        cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    revealed = [line for line in out.stdout.splitlines() if "Revealed type" in line]
    wrong = [line for line, name in zip(revealed, REVEALED) if name not in line or "Any" in line]
    assert len(revealed) == len(REVEALED) and not wrong, f"is deck installed with `{INSTALL}`?\n{out.stdout}{out.stderr}"


def test_the_installed_package_has_every_module_of_the_checkout() -> None:
    """A strict editable install links the files there were when it ran: a module added since is
    neither importable nor type-checked until the install runs again."""
    missing = []
    mapped = [(deck, ROOT / "core"), (deck.plugins, ROOT / "plugins"), (deck.frontends, ROOT / "frontends")]
    for package, folder in mapped:
        installed = Path(package.__file__ or "").parent
        for source in folder.rglob("*.py"):
            if "__pycache__" not in source.parts and not (installed / source.relative_to(folder)).is_file():
                missing.append(str(source.relative_to(ROOT)))
    assert (Path(deck.__file__ or "").parent / "py.typed").is_file(), f"no py.typed in the installed deck: `{INSTALL}`"
    assert not missing, (
        f"not in the installed deck: {missing}; run `{INSTALL}` again"
        " (a new folder goes in pyproject.toml's packages first)"
    )


def test_the_layers_with_annotations_counted_are_pyprojects_layers_and_hold():
    """`.importlinter-annotations` repeats pyproject.toml's layers with TYPE_CHECKING imports counted:
    the two lists are one, and `lint-imports` finds every contract of it kept."""
    import configparser
    import tomllib

    ours = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in ours if c["type"] == "layers"]
    annotations = configparser.ConfigParser()
    annotations.read(ROOT / ".importlinter-annotations")
    assert annotations["importlinter:contract:layers"]["layers"].split() == " ".join(layers).split()
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint), ".importlinter-annotations"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "3 kept, 0 broken" in done.stdout
