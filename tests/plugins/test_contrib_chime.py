"""The example third-party plugin in contrib/deck-chime: installed for real, loaded, working."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

PLUGIN = ROOT / "contrib" / "deck-chime"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, str]:
    """deck-chime pip-installed into a private directory; the environment that sees it."""
    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "deck-chime"
    shutil.copytree(PLUGIN, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target), str(source)],
        check=True, timeout=300, cwd=source,
    )  # fmt: skip
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    env.pop("DECK_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


@pytest.mark.timeout(300)
def test_deck_plugins_lists_the_installed_plugin(installed, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "deck", "plugins", "--json"],
        capture_output=True, text=True, env=installed, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)["plugins"]}
    assert rows["chime"]["source"] == "deck-chime 0.1.0"
    assert rows["chime"]["hooks"] == ["deck_config_sections", "deck_event"]
    # And off again from the environment.
    off = subprocess.run(
        [sys.executable, "-m", "deck", "plugins", "--json"],
        capture_output=True, text=True, env={**installed, "DECK_DISABLE_PLUGIN_AUTOLOAD": "1"}, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert off.returncode == 0, off.stderr
    assert "chime" not in {row["name"] for row in json.loads(off.stdout)["plugins"]}


@pytest.mark.timeout(300)
def test_the_plugins_own_tests_pass_with_deck_testing(installed):
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(PLUGIN / "tests")],
        capture_output=True, text=True, env=installed, cwd=PLUGIN, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout
