"""`additionalDirectories`: the folders an agent may read and write through fs/* besides its cwd, confined as
its cwd is (symlinks and `..` do not get out), and given to its sessions where it lists the capability.
Real fake agents, real files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import agent_block
from tests.deck_process import DECK
from tests.turns import ask

pytestmark = pytest.mark.anyio


def folders(tmp_path: Path) -> tuple[Path, Path, Path]:
    cwd, extra, outside = tmp_path / "work", tmp_path / "shared", tmp_path / "outside"
    for folder in (cwd, extra, outside):
        folder.mkdir()
    (extra / "notes.txt").write_text("shared notes\n")
    (outside / "secret.txt").write_text("secret\n")
    (extra / "escape").symlink_to(outside)  # a link out of the additional folder
    return cwd, extra, outside


def toml(cwd: Path, extra: Path, *flags: str) -> str:
    return agent_block("a", *flags, cwd=str(cwd), additionalDirectories=[str(extra)])


async def test_fs_reads_and_writes_in_an_additional_directory_and_nowhere_else(make_deck, tmp_path):
    cwd, extra, outside = folders(tmp_path)
    deck, rec = make_deck(toml(cwd, extra))
    read = json.loads((await ask(deck, rec, f"read {extra / 'notes.txt'}")).text)
    assert read == {"content": "shared notes\n"}
    wrote = json.loads((await ask(deck, rec, f"write {extra / 'new.txt'} from the agent")).text)
    assert wrote == {"ok": True} and (extra / "new.txt").read_text() == "from the agent"
    for path in (outside / "secret.txt", extra / "escape" / "secret.txt", extra / ".." / "outside" / "secret.txt"):
        refused = json.loads((await ask(deck, rec, f"read {path}")).text)
        assert "code" in refused and "content" not in refused, path  # an error, never the file's text
    refused = json.loads((await ask(deck, rec, f"write {extra / 'escape' / 'planted.txt'} x")).text)
    assert "error" in refused and not (outside / "planted.txt").exists()
    assert any("fs/read_text_file refused" in line for line in deck.agent("a").logs)


async def test_the_sessions_get_the_directories_only_where_the_agent_lists_them(make_deck, tmp_path):
    cwd, extra, _ = folders(tmp_path)
    for flags, expected in ((("--additional-dirs",), [str(extra)]), ((), None)):
        requests = tmp_path / f"requests{len(flags)}.jsonl"
        deck, rec = make_deck(toml(cwd, extra, "--requests", str(requests), *flags))
        await ask(deck, rec, "hello")
        [new] = [json.loads(line)["params"] for line in requests.read_text().splitlines() if '"session/new"' in line]
        assert new.get("additionalDirectories") == expected
        await deck.shutdown()


def test_a_relative_additional_directory_is_a_config_error_with_its_place(tmp_path):
    (tmp_path / "deck.toml").write_text(agent_block("a", additionalDirectories=["/abs", "shared"]))
    result = subprocess.run([*DECK, "config", "validate", str(tmp_path / "deck.toml")], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1, result
    assert "additionalDirectories" in result.stdout + result.stderr and "'shared' is not an absolute path" in result.stdout + result.stderr
