"""Per-agent adaptations (deck.interop): each entry of the table, proven with an agent that acts like the real one."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from deck.agent import fs, interop

from tests.conftest import AGENTS, ROOT, agent_table
from tests.turns import ask

pytestmark = pytest.mark.anyio

READ_BEFORE_WRITE = AGENTS / "read_before_write.py"
DOCS = ROOT / "docs" / "interop.md"


def agent(*flags: str, cwd: Path) -> str:
    return agent_table("a", [sys.executable, str(READ_BEFORE_WRITE), *flags], cwd=str(cwd))


async def write_file(deck, rec, path: Path, text: str) -> dict[str, Any]:
    """Have the agent's write tool write `text` to `path`: its report, and the tool part deck shows."""
    reply = await ask(deck, rec, f"write_file {path} {text}")
    report = json.loads(reply.text)
    tools = [p.to_dict() for p in reply.parts if p.type == "tool"]
    assert [t["status"] for t in tools] == [report["status"]]
    return report


@pytest.fixture
def work(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "old.txt").write_text("old")
    return tmp_path / "work"


async def test_gemini_cli_creates_files_its_pre_read_finds_empty(make_deck, work):
    deck, rec = make_deck(agent("--like", "gemini-cli", cwd=work))
    report = await write_file(deck, rec, work / "new.txt", "hello")
    assert report["status"] == "completed", report["message"]
    assert report["read"]["result"] == {"content": ""}
    assert (work / "new.txt").read_text() == "hello"
    report = await write_file(deck, rec, work / "deep" / "er" / "new.txt", "there")  # a folder missing too
    assert report["status"] == "completed", report["message"]
    assert (work / "deep" / "er" / "new.txt").read_text() == "there"
    report = await write_file(deck, rec, work / "old.txt", "new")  # an existing file: read as it is
    assert report["read"]["result"] == {"content": "old"} and (work / "old.txt").read_text() == "new"


async def test_gemini_cli_still_gets_every_other_refusal(make_deck, work, tmp_path):
    """Only "not found" reads as empty: a missing path outside the cwd, or through a symlink out, is refused."""
    (work / "out").symlink_to(tmp_path)
    deck, rec = make_deck(agent("--like", "gemini-cli", cwd=work))
    for path, words in [(tmp_path / "missing.txt", "outside"), (work / "out" / "missing.txt", "outside"), (work, "directory")]:
        answer = json.loads((await ask(deck, rec, f"read {path}")).text)
        assert answer["error"]["code"] == fs.INVALID_PARAMS and words in answer["error"]["message"], (path, answer)


async def test_qwen_code_gets_resource_not_found_and_takes_the_file_for_new(make_deck, work):
    deck, rec = make_deck(agent("--like", "qwen-code", cwd=work))
    report = await write_file(deck, rec, work / "new.txt", "hello")
    assert report["read"]["error"]["code"] == fs.RESOURCE_NOT_FOUND
    assert report["status"] == "completed" and report["message"].startswith("Successfully created"), report
    assert (work / "new.txt").read_text() == "hello"


@pytest.mark.parametrize("flags", [["--name", "gemini"], ["--name", "Gemini-CLI"], ["--no-agent-info"]], ids=["other", "case", "none"])
async def test_an_agent_not_in_the_table_gets_resource_not_found(make_deck, work, flags):
    """Gemini CLI's logic under another name, or with no agentInfo (before 0.32): ACP's answer, and so a failed write."""
    deck, rec = make_deck(agent("--like", "gemini-cli", *flags, cwd=work))
    report = await write_file(deck, rec, work / "new.txt", "hello")
    assert report["read"]["error"]["code"] == fs.RESOURCE_NOT_FOUND
    assert report["status"] == "failed" and report["message"].startswith("Error checking existing file"), report
    assert not (work / "new.txt").exists()


def test_quirks_are_looked_up_by_the_exact_name_only():
    assert interop.quirks_for({"agentInfo": {"name": "gemini-cli", "version": "0.61.0"}}).missing_file_reads_empty
    for init in [{}, {"agentInfo": None}, {"agentInfo": "gemini-cli"}, {"agentInfo": {"name": ["gemini-cli"]}}]:
        assert interop.quirks_for(init) == interop.STANDARD


def test_every_table_entry_is_documented():
    documented = set(re.findall(r"^## `([^`]+)`", DOCS.read_text(), re.M))
    assert documented == set(interop.QUIRKS)
