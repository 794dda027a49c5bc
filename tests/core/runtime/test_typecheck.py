"""mypy checks plugins and frontends against deck's real API, never against `Any`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
from typecheck import build_tree  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PROBE = """
from deck import Agent, Client, Deck
from deck.events import TurnChanged
from tests.conftest import ROOT

reveal_type(Agent)
reveal_type(Deck)
reveal_type(Client)
reveal_type(TurnChanged)
"""


def test_a_public_class_inside_a_plugin_is_the_class_not_any(tmp_path: Path) -> None:
    tree = build_tree(tmp_path / "tree")
    probe = tree / "plugins" / "probe.py"
    probe.write_text(PROBE)
    root = ROOT
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
         "--follow-imports=silent", str(probe)],
        cwd=tmp_path, env={"MYPYPATH": str(tree.parent), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
    )  # fmt: skip
    revealed = [line for line in out.stdout.splitlines() if "Revealed type" in line]
    assert len(revealed) == 4, out.stdout + out.stderr
    for line, name in zip(revealed, ["deck.agent.agent.Agent", "deck.runtime.deck.Deck", "deck.client.Client", "deck.events.TurnChanged"]):
        assert name in line and "Any" not in line, line
