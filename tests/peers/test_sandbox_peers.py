"""Real peers in a sandbox (`sandbox = { write = [...] }`, bubblewrap) with the `write` paths their presets
name, each in a worktree of a repository: Claude Code (tests/peers/fake_anthropic.py) writes a file with
its own Write tool, Codex (tests/peers/fake_openai.py) with its own apply_patch, fast-agent through deck's
fs/write_text_file; then each runs a shell command (Claude Code and Codex their own, fast-agent through
deck's terminal/*). What they write lands in the worktree; aimed at the main checkout or the home, the
same tools and commands meet a read-only file system; nothing changes outside the worktree and the
`write` paths but deck's own git objects (the worktree's changes, snapshotted by deck).

The home, the repository and deck's folders are outside /tmp: each sandbox has a /tmp of its own, where
nothing of the machine's shows. See docs/peers.md for what each peer needs writable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import ROOT, PeerDeck, agent_toml, claude_command, codex_command, peer
from .fake_anthropic import FakeAnthropic, tool_results
from .fake_anthropic import Reply as ClaudeReply
from .fake_openai import FakeOpenAI, provider_args, tool_outputs
from .fake_openai import Reply as CodexReply
from .test_claude_agent_acp import QUIET
from .test_codex_acp import FAKE_KEY

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(150)]


def preset_write(preset: str) -> list[str]:
    """The `write` paths of the sandbox line a preset suggests (commented out), as a user copies them."""
    lines = (ROOT / "core" / "presets" / f"{preset}.toml").read_text().splitlines()
    (line,) = [line for line in lines if line.startswith("# sandbox = ")]
    return tomllib.loads(line.removeprefix("# "))["sandbox"]["write"]


CLAUDE_WRITE = preset_write("claude-agent-acp")  # npx's ~/.npm among them, though the peers run from .peers/
CODEX_WRITE = preset_write("codex-acp")
FAST_WRITE = preset_write("fast-agent")
READ_ONLY = "Read-only file system"


@dataclass
class Place:
    """A home, deck's folders (in the home's XDG folders) and a repository with one commit, beneath `base`."""

    base: Path
    start: Callable[[str], PeerDeck]
    decks: list[PeerDeck] = field(default_factory=list)

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def repo(self) -> Path:
        return self.base / "repo"

    def deck(self, text: str) -> PeerDeck:
        pd = self.start(text)
        self.decks.append(pd)
        return pd

    def files(self) -> dict[str, tuple[int, int]]:
        """Every file and folder beneath `base`, with its size and modification time."""
        found = {}
        for folder, dirs, names in os.walk(self.base):
            for name in [*dirs, *names]:
                path = os.path.join(folder, name)
                try:
                    st = os.lstat(path)
                except FileNotFoundError:  # gone meanwhile
                    continue
                found[path] = (st.st_size, st.st_mtime_ns)
        return found

    def escapes(self) -> list[Path]:
        """What the agents try to write outside their folders."""
        return [p for folder in (self.repo, self.home) for p in folder.glob("escaped*")]


def made_place(monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home (deck's folders in its XDG folders) and a repository with one commit, outside /tmp."""
    base = Path(tempfile.mkdtemp(prefix="deck-sandbox-peers-", dir="/var/tmp"))
    home = base / "home"
    for sub in (".config", ".cache", ".local/state", ".local/share"):
        (home / sub).mkdir(parents=True)
    (base / "run").mkdir(mode=0o700)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / ".local/state"))  # deck's state: its worktrees too
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local/share"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base / "run"))
    repo = base / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "README").write_text("the repository\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    return base


def removed(base: Path) -> None:
    subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)  # a read-only folder an agent made
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def place(peer_deck, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Place]:
    if shutil.which("bwrap") is None:
        pytest.fail("no bwrap here: install it with `bash scripts/install-sandbox.sh`", pytrace=False)
    made = Place(made_place(monkeypatch), peer_deck)
    try:
        yield made
    finally:
        for pd in made.decks:  # its agents end before their folders go
            await pd.deck.shutdown()
        removed(made.base)


def sandboxed(table: str, write: list[str]) -> str:
    """An agent table run in a worktree, in a sandbox that may write `write` besides."""
    return table + "worktree = true\n" + f"sandbox = {{ write = {json.dumps(write)} }}\n"


async def started(pd: PeerDeck, name: str) -> Path:
    """Start the agent and check that it runs under bwrap; its worktree."""
    info = await pd.deck.agent_service.start(name)
    assert info["state"] == "ready" and info["error"] is None, info
    agent = pd.deck.agents[name]
    assert agent.view is not None and psutil.Process(agent.process.pid).name() == "bwrap"
    worktree = Path(agent.cwd)
    assert worktree.parent.name.startswith("repo-") and (worktree / "README").exists()
    (row,) = [a for a in await pd.deck.agent_service.list_agents() if a["name"] == name]
    assert row["sandbox"]["enabled"] is True and row["sandbox"]["write"][0] == str(worktree)
    return worktree


async def allowing(pd: PeerDeck, name: str, done: Callable[[], Any], timeout: float = 90) -> Any:
    """Wait for `done()`, allowing (once) every permission the agent asks meanwhile."""

    def unanswered() -> list[dict[str, Any]]:
        resolved = {e["id"] for e in pd.rec.named("permission:resolved", name)}
        return [r for r in pd.rec.named("permission:requested", name) if r["id"] not in resolved]

    while not (found := done()):
        for request in unanswered():
            option = next(o for o in request["options"] if o["kind"] == "allow_once")
            pd.deck.chat.answer_permission(request["id"], option["optionId"])
            await pd.rec.wait_event("permission:resolved", id=request["id"])
        await pd.rec.wait(lambda r: done() or unanswered(), timeout=timeout)
    return found


def replies(pd: PeerDeck, name: str) -> list[Any]:
    """The agent's finished replies, once its turns are over."""
    conv = pd.deck.chat.conversation(name)
    done = [m for m in conv.messages if m.role == "agent" and m.done]
    return [] if conv.busy else done


def written_elsewhere(place: Place, before: dict[str, tuple[int, int]], pd: PeerDeck, name: str) -> list[str]:
    """What changed beneath `place` since `before`, outside the agent's writable folders and files
    and deck's own git objects (its snapshots of the worktree's changes)."""
    after = place.files()
    allowed = [*pd.deck.agents[name].view.writable, str(place.repo / ".git" / "objects")]
    changed = [p for p in after.keys() | before.keys() if before.get(p) != after.get(p)]
    return sorted(p for p in changed if not any(p == a or p.startswith(a + "/") for a in allowed))


async def test_claude_code_in_a_sandbox_writes_its_worktree_only(place):
    # Claude Code keeps its config in ~/.claude.json beside ~/.claude: the file is there once it ran
    # (a login makes it); a `write` path that does not exist is made a folder.
    (place.home / ".claude.json").write_text("{}\n")
    script: list[ClaudeReply] = []
    with FakeAnthropic(lambda body: script[min(len(fake.turns), len(script)) - 1]) as fake:
        env = {**QUIET, "ANTHROPIC_BASE_URL": fake.url, "ANTHROPIC_API_KEY": "sk-ant-fake-key"}
        pd = place.deck(sandboxed(agent_toml("claude", claude_command(), place.repo, env=env), CLAUDE_WRITE))
        worktree = await started(pd, "claude")
        before = place.files()
        shell = f"touch by-shell.txt && touch {place.repo}/escaped-by-shell.txt {place.home}/escaped-by-shell.txt"
        script += [
            ClaudeReply(text="Writing.", tool_uses=[("Write", {"file_path": str(worktree / "greeting.txt"), "content": "hi\n"})]),
            ClaudeReply(tool_uses=[("Write", {"file_path": str(place.repo / "escaped.txt"), "content": "out\n"})]),
            ClaudeReply(tool_uses=[("Write", {"file_path": str(place.home / "escaped.txt"), "content": "out\n"})]),
            ClaudeReply(tool_uses=[("Bash", {"command": shell, "description": "touch three files"})]),
            ClaudeReply(text="Done."),
        ]  # fmt: skip
        pd.deck.chat.send("claude", "write the greeting")
        (reply,) = await allowing(pd, "claude", lambda: replies(pd, "claude"))
        assert len(fake.turns) == 5
        results = [tool_results(turn) for turn in fake.turns[1:]]
    assert reply.stop_reason == "end_turn" and reply.error is None and reply.text.endswith("Done.")
    assert [r[0].get("is_error", False) for r in results] == [False, True, True, True]
    assert "File created successfully" in results[0][0]["content"]
    assert all("EROFS: read-only file system" in r[0]["content"] for r in results[1:3]), results
    assert READ_ONLY in json.dumps(results[3]), results[3]
    assert (worktree / "greeting.txt").read_text() == "hi\n" and (worktree / "by-shell.txt").exists()
    assert place.escapes() == [] and not (place.repo / "greeting.txt").exists()
    assert written_elsewhere(place, before, pd, "claude") == []
    assert list((place.home / ".claude" / "projects").iterdir())  # its state, in its `write` folder
    await pd.close()


async def test_codex_in_a_sandbox_writes_its_worktree_only(place):
    # Codex's own command sandbox is a bwrap of its own, which cannot nest in deck's when deck runs as
    # root ("setting up uid map: Operation not permitted"): deck's sandbox is the one here.
    script: list[CodexReply] = []
    with FakeOpenAI(lambda body: script[min(len(fake.turns), len(script)) - 1]) as fake:
        command = [*codex_command(), *provider_args(fake.url), "-c", 'sandbox_mode="danger-full-access"']
        table = agent_toml("codex", command, place.repo, {"OPENAI_API_KEY": FAKE_KEY}, authMethod="openai-api-key")
        pd = place.deck(sandboxed(table, CODEX_WRITE))
        worktree = await started(pd, "codex")
        before = place.files()

        def patch(path: Path) -> str:
            return f"*** Begin Patch\n*** Add File: {path}\n+hi\n*** End Patch\n"

        shell = f"touch by-shell.txt && touch {place.repo}/escaped-by-shell.txt {place.home}/escaped-by-shell.txt"
        script += [
            CodexReply(text="Writing.", calls=[("apply_patch", patch(worktree / "greeting.txt"))]),
            CodexReply(calls=[("apply_patch", patch(place.repo / "escaped.txt"))]),
            CodexReply(calls=[("apply_patch", patch(place.home / "escaped.txt"))]),
            CodexReply(calls=[("exec_command", {"cmd": shell})]),
            CodexReply(text="Done."),
        ]
        pd.deck.chat.send("codex", "write the greeting")
        (reply,) = await allowing(pd, "codex", lambda: replies(pd, "codex"))
        assert len(fake.turns) == 5
        outputs = [o["output"] for o in tool_outputs(fake.turns[-1])]
    assert reply.stop_reason == "end_turn" and reply.error is None and reply.text.endswith("Done.")
    assert len(outputs) == 4 and "Success. Updated the following files" in outputs[0], outputs
    assert all("Failed to write file" in o for o in outputs[1:3]) and READ_ONLY in outputs[3], outputs
    assert (worktree / "greeting.txt").read_text() == "hi\n" and (worktree / "by-shell.txt").exists()
    assert place.escapes() == [] and not (place.repo / "greeting.txt").exists()
    assert written_elsewhere(place, before, pd, "codex") == []
    assert list((place.home / ".codex" / "sessions").rglob("rollout-*.jsonl"))  # its state, in its `write` folder
    await pd.close()


async def test_fast_agent_in_a_sandbox_writes_its_worktree_only(place):
    # As its preset runs it: no --home, so its home is .fast-agent in its folder, the worktree; -x for
    # its shell tool, run through deck's terminal/*, in the sandbox too.
    command = [peer("fast-agent"), "--no-update-check", "acp", "--model", "passthrough", "-x"]
    pd = place.deck(sandboxed(agent_toml("fast", command, place.repo), FAST_WRITE))
    worktree = await started(pd, "fast")
    before = place.files()
    write = {"path": str(worktree / "greeting.txt"), "content": "hi\n"}
    pd.deck.chat.send("fast", f"***CALL_TOOL write_text_file {json.dumps(write)}")
    await allowing(pd, "fast", lambda: replies(pd, "fast"))
    shell = f"touch by-shell.txt && touch {place.repo}/escaped-by-shell.txt {place.home}/escaped-by-shell.txt"
    pd.deck.chat.send("fast", f"***CALL_TOOL execute {json.dumps({'command': 'sh', 'args': ['-c', shell]})}")
    first, second = await allowing(pd, "fast", lambda: (done := replies(pd, "fast"))[1:] and done)
    assert [first.stop_reason, second.stop_reason] == ["end_turn", "end_turn"] and not (first.error or second.error)
    (written,) = pd.schema.received("fs/write_text_file")  # deck wrote it, in the agent's folder
    assert written["params"]["path"] == str(worktree / "greeting.txt") and "result" in pd.schema.answer_to(written)
    (tool,) = [p.to_dict() for p in second.parts if p.type == "tool"]
    (terminal,) = tool["terminals"]
    assert READ_ONLY in terminal["output"] and terminal["exitStatus"]["exitCode"] != 0, terminal
    assert (worktree / "greeting.txt").read_text() == "hi\n" and (worktree / "by-shell.txt").exists()
    assert place.escapes() == [] and not (place.repo / "greeting.txt").exists()
    assert written_elsewhere(place, before, pd, "fast") == []
    assert (worktree / ".fast-agent" / "sessions").is_dir()  # its state, in its folder
    await pd.close()
