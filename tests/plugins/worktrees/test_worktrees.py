"""The worktrees plugin: a git worktree per agent, on real repositories in tmp_path, with real agents.

One agent writes through deck's fs/write_text_file, the other writes its files itself in its
cwd (as Claude Code does); neither touches the main checkout until a merge.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from deck import AgentState, ServiceError
from deck.testing import agent_table

from tests.conftest import AGENTS
from tests.core.remote.test_server import runtime  # noqa: F401  (a fixture: the servers' folder of the test's own)
from tests.deck_process import DECK

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

AGENT = AGENTS / "worktree_agent.py"


def git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, check=True)
    return done.stdout


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Test")
    git(path, "config", "user.email", "test@example.org")
    (path / "README.md").write_text("line one\nline two\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('hi')\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "first")
    return path


def worktree_agent(name: str, cwd: Path, **keys: Any) -> str:
    return agent_table(name, [sys.executable, str(AGENT)], cwd=str(cwd), worktree=True, **keys)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


async def turn(deck: Any, rec: Any, agent: str, text: str) -> dict[str, Any]:
    """Send `text` to `agent`, wait for its turn to end and for the `worktree:changed` after it."""
    before = len(rec.named("worktree:changed", agent))
    await deck.call("ChatService.Send", {"agent": agent, "text": text})
    await rec.wait(lambda r: len(r.named("worktree:changed", agent)) > before)
    return rec.named("worktree:changed", agent)[-1]


def rows_by_agent(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["agent"]: row for row in rows}


async def test_two_agents_work_in_their_own_worktrees_and_the_main_checkout_is_untouched(make_deck, repo, tmp_path):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo / "src"))
    changed_a = await turn(deck, rec, "a", "fswrite notes.txt from a")
    changed_b = await turn(deck, rec, "b", "write mod.py x = 1")
    assert changed_a == {"agent": "a", "changedFiles": 1, "ahead": 0, "dirty": True}
    assert changed_b == {"agent": "b", "changedFiles": 1, "ahead": 0, "dirty": True}

    rows = rows_by_agent(await deck.call("WorktreeService.List", {}))
    folder = Path(rows["a"]["path"]).parent
    assert folder.parent == tmp_path / "state" / "deck" / "worktrees" and folder.name.startswith("repo-")
    assert (Path(rows["a"]["path"]) / "notes.txt").read_text() == "from a"
    assert deck.agents["b"].cwd == str(Path(rows["b"]["path"]) / "src")  # the same subfolder as its cwd
    assert (Path(rows["b"]["path"]) / "src" / "mod.py").read_text() == "x = 1"
    assert {k: rows["a"][k] for k in ("branch", "base", "ahead", "changedFiles", "dirty")} == {
        "branch": "deck/a", "base": "main", "ahead": 0, "changedFiles": 1, "dirty": True}  # fmt: skip
    assert not (repo / "notes.txt").exists() and not (repo / "src" / "mod.py").exists()
    assert git(repo, "status", "--porcelain") == ""


async def test_fs_requests_are_confined_to_the_worktree(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await deck.call("AgentService.Start", {"name": "a"})
    await deck.call("ChatService.Send", {"agent": "a", "text": f"fswrite ../../{repo.name}-x/escape.txt out"})
    await rec.wait_event("turn:changed", agent="a", busy=False)
    assert any("refused" in line for line in deck.agents["a"].logs)
    assert "outside" in json.dumps(rec.named("message:updated", "a")[-1])


async def test_diff_shows_commits_uncommitted_and_untracked_files(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write untracked.txt brand new")
    path = Path(deck.agents["a"].cwd)
    (path / "committed.txt").write_text("in a commit\n")
    git(path, "add", "committed.txt")
    git(path, "commit", "-q", "-m", "agent commit")
    (path / "README.md").write_text("line one\nline 2 changed\n")
    git(repo, "commit", "-q", "--allow-empty", "-m", "main moves on")  # the diff is against the merge-base

    diff = await deck.call("WorktreeService.Diff", {"agent": "a"})
    assert "+++ b/committed.txt\n@@ -0,0 +1 @@\n+in a commit" in diff
    assert "+++ b/untracked.txt" in diff and "+brand new" in diff
    assert "-line two\n+line 2 changed" in diff
    row = rows_by_agent(await deck.call("WorktreeService.List", {}))["a"]
    assert (row["ahead"], row["changedFiles"], row["dirty"]) == (1, 3, True)
    assert git(path, "status", "--porcelain").count("\n") == 2  # the worktree's own index is untouched


async def test_merge_commits_the_pending_work_and_merges_it_into_the_base(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write feature.txt done")
    result = await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert result["base"] == "main" and result["files"] == ["feature.txt"] and not result["squash"]
    assert (repo / "feature.txt").read_text() == "done"
    assert git(repo, "status", "--porcelain") == ""
    parents = git(repo, "log", "-1", "--format=%P").split()
    assert len(parents) == 2 and git(repo, "log", "-1", "--format=%s").strip() == "Merge deck/a: write feature.txt done"
    # The pending work's commit says what the work is (the first user line), never a placeholder.
    assert git(repo, "log", "-1", "--format=%s", parents[1]).strip() == "a: write feature.txt done"
    row = rows_by_agent(await deck.call("WorktreeService.List", {}))["a"]
    assert (row["ahead"], row["changedFiles"], row["dirty"]) == (0, 0, False)
    assert rec.named("worktree:changed", "a")[-1] == {"agent": "a", "changedFiles": 0, "ahead": 0, "dirty": False}
    with pytest.raises(ServiceError, match="nothing to merge"):
        await deck.call("WorktreeService.Merge", {"agent": "a"})


async def test_squash_merge_is_one_commit_with_the_message_given(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write one.txt 1")
    git(Path(deck.agents["a"].cwd), "add", "-A")
    git(Path(deck.agents["a"].cwd), "commit", "-q", "-m", "one")
    await turn(deck, rec, "a", "write two.txt 2")
    await deck.call("WorktreeService.Merge", {"agent": "a", "squash": True, "message": "Feature, squashed"})
    assert git(repo, "log", "--format=%s").splitlines() == ["Feature, squashed", "first"]
    assert len(git(repo, "log", "-1", "--format=%P").split()) == 1
    assert (repo / "one.txt").exists() and (repo / "two.txt").exists()
    row = rows_by_agent(await deck.call("WorktreeService.List", {}))["a"]
    assert (row["ahead"], row["dirty"]) == (0, False)  # the worktree goes on from the squashed commit


def snapshot(repo: Path, worktree: Path) -> tuple[str, ...]:
    """Everything a refused merge must leave as it was."""
    return (
        git(repo, "rev-parse", "HEAD"), git(repo, "status", "--porcelain"), (repo / "README.md").read_text(),
        git(worktree, "rev-parse", "HEAD"), git(worktree, "status", "--porcelain"), (worktree / "README.md").read_text(),
        git(repo, "for-each-ref"),
    )  # fmt: skip


async def test_a_conflicting_merge_is_refused_with_the_files_and_nothing_changes(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write README.md agent's readme")
    (repo / "README.md").write_text("main's readme\n")
    git(repo, "commit", "-q", "-am", "main edits the readme")
    worktree = Path(deck.agents["a"].cwd)
    before = snapshot(repo, worktree)
    with pytest.raises(ServiceError, match="conflicts with main in: README.md") as info:
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert info.value.data == {"conflicts": ["README.md"]}
    assert f"run `git merge main` in {worktree}" in str(info.value) and "then `deck merge a` again" in str(info.value)
    assert snapshot(repo, worktree) == before


async def test_a_merge_into_a_dirty_main_checkout_is_refused(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write feature.txt done")
    (repo / "src" / "app.py").write_text("print('edited by hand')\n")
    worktree = Path(deck.agents["a"].cwd)
    before = snapshot(repo, worktree)
    with pytest.raises(ServiceError, match=r"uncommitted changes \(src/app.py\)"):
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert snapshot(repo, worktree) == before


async def test_a_merge_is_refused_while_the_main_checkout_is_elsewhere_or_would_lose_a_file(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write feature.txt done")
    worktree = Path(deck.agents["a"].cwd)
    git(repo, "checkout", "-q", "-b", "other")
    with pytest.raises(ServiceError, match="is on other, not on main: check out main there first"):
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    git(repo, "checkout", "-q", "main")
    (repo / "feature.txt").write_text("the user's own, untracked\n")  # the merge would write over it
    before = snapshot(repo, worktree)
    with pytest.raises(ServiceError, match="untracked working tree files would be overwritten"):
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert snapshot(repo, worktree) == before and (repo / "feature.txt").read_text() == "the user's own, untracked\n"


async def test_remove_is_refused_with_work_unless_forced(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write wip.txt unfinished")
    await deck.call("AgentService.Stop", {"name": "a"})
    path = Path(deck.agents["a"].cwd)
    with pytest.raises(ServiceError, match="uncommitted work"):
        await deck.call("WorktreeService.Remove", {"agent": "a"})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "wip")
    with pytest.raises(ServiceError, match="1 commit not merged into main"):
        await deck.call("WorktreeService.Remove", {"agent": "a"})
    assert path.exists() and "deck/a" in git(repo, "branch")
    result = await deck.call("WorktreeService.Remove", {"agent": "a", "force": True})
    assert result["branchDeleted"] and not path.exists() and "deck/a" not in git(repo, "branch")

    await turn(deck, rec, "b", "write done.txt ok")  # merged work: removed without force
    with pytest.raises(ServiceError, match="running in its worktree"):
        await deck.call("WorktreeService.Remove", {"agent": "b"})
    await deck.call("WorktreeService.Merge", {"agent": "b"})
    await deck.call("AgentService.Stop", {"name": "b"})
    assert (await deck.call("WorktreeService.Remove", {"agent": "b"}))["branchDeleted"]
    assert await deck.call("WorktreeService.List", {}) == []
    assert (repo / "done.txt").read_text() == "ok"


#: The `worktree:overlap` of agents a and b both changing shared.txt.
SHARED = {"file": "shared.txt", "agents": ["a", "b"], "files": ["shared.txt"], "count": 1}


async def test_two_worktrees_changing_one_file_overlap_until_one_no_longer_does(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write shared.txt from a")
    await turn(deck, rec, "b", "write own.txt b")
    assert rec.named("worktree:overlap") == []
    await turn(deck, rec, "b", "fswrite shared.txt from b")
    assert rec.named("worktree:overlap") == [SHARED]
    os.unlink(Path(deck.agents["b"].cwd) / "shared.txt")
    await deck.call("WorktreeService.List", {})
    assert rec.named("worktree:overlap")[-1] == {"file": "", "agents": ["a", "b"], "files": [], "count": 0}  # cleared
    await deck.call("WorktreeService.List", {})
    assert len(rec.named("worktree:overlap")) == 2  # said once


async def test_the_worktree_and_its_branch_are_reused_across_restarts(make_deck, repo):
    text = worktree_agent("a", repo)
    deck, rec = make_deck(text)
    await turn(deck, rec, "a", "write kept.txt 1")
    path = Path(deck.agents["a"].cwd)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "kept")
    await deck.call("AgentService.Restart", {"name": "a"})
    assert deck.agents["a"].cwd == str(path) and (path / "kept.txt").exists()
    await deck.shutdown()

    git(repo, "worktree", "remove", str(path))  # the folder gone, the branch kept
    again, rec2 = make_deck(text)
    await again.call("AgentService.Start", {"name": "a"})
    assert again.agents["a"].cwd == str(path) and (path / "kept.txt").read_text() == "1"
    assert git(path, "log", "-1", "--format=%s").strip() == "kept"


async def test_an_agent_removed_from_the_config_keeps_its_worktree(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write mine.txt work")
    await deck.call("AgentService.Start", {"name": "b"})
    await deck.call("AgentService.Stop", {"name": "b"})
    plain_b = agent_table("b", [sys.executable, str(AGENT)], cwd=str(repo))  # b keeps no worktree = true
    saved = await deck.call("ConfigService.Save", {"text": plain_b})
    assert saved["saved"]
    await rec.wait(lambda r: "a" not in deck.agents)
    rows = rows_by_agent(await deck.call("WorktreeService.List", {}))
    assert rows["a"]["configured"] is False and rows["a"]["dirty"] and (Path(rows["a"]["path"]) / "mine.txt").exists()
    assert set(rows) == {"a", "b"}  # found through b's repository
    await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert (repo / "mine.txt").read_text() == "work"


async def test_an_agent_whose_cwd_is_in_no_repository_cannot_start(make_deck, tmp_path):
    outside = tmp_path / "plain"
    outside.mkdir()
    deck, rec = make_deck(worktree_agent("a", outside))
    with pytest.raises(ServiceError, match="is in no git repository"):
        await deck.call("AgentService.Start", {"name": "a"})
    assert deck.agents["a"].state is AgentState.ERROR
    assert "in no git repository" in rec.named("agent:state", "a")[-1]["error"]
    problems = [p for p in deck.problems if "worktree" in p.message]
    assert [(p.line, p.column, p.warning) for p in problems] == [(4, 12, True)]


def test_config_validate_warns_with_the_line_and_column(tmp_path):
    outside = tmp_path / "plain"
    outside.mkdir()
    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", outside))
    done = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"{config}:4:12: warning: agents.a.worktree: {outside} is in no git repository" in done.stdout


async def test_without_the_plugin_a_worktree_agent_never_runs_in_the_main_checkout(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo), disabled=("worktrees",))
    with pytest.raises(ServiceError, match=r"worktree is set, but the worktrees plugin, which reads it, is off \(-p no:worktrees\)"):
        await deck.call("AgentService.Start", {"name": "a"})


async def test_a_start_the_plugin_failed_before_says_what_failed(make_deck, repo, monkeypatch):
    """Not a refusal but a failure (a bug, a time limit): the agent still never runs in the main
    checkout, and its error names the plugin and why, not a plugin that might be off."""
    from deck.plugins.worktrees import tree

    async def fails(place: Any) -> None:
        raise RuntimeError("the disk is on fire")

    monkeypatch.setattr(tree, "ensure", fails)
    deck, rec = make_deck(worktree_agent("a", repo))
    with pytest.raises(ServiceError, match="worktree is set, but the worktrees plugin failed before the start: the disk is on fire"):
        await deck.call("AgentService.Start", {"name": "a"})


async def test_hooks_in_the_repository_and_the_worktree_never_run(make_deck, repo, tmp_path, monkeypatch):
    mark = tmp_path / "HOOK-RAN"
    monkeypatch.setenv("HOOK_MARK", str(mark))
    git(repo, "config", "core.hooksPath", ".githooks")  # relative: found in each worktree's own files
    hooks = repo / ".git" / "hooks"
    for name in ("post-checkout", "reference-transaction"):
        (hooks / name).write_text(f"#!/bin/sh\necho main-{name} >> '{mark}'\n")
        (hooks / name).chmod(0o755)
    git(repo, "config", "--unset", "core.hooksPath")
    git(repo, "checkout", "-q", "-b", "probe")  # the probe: the main checkout's hook runs for git itself
    git(repo, "checkout", "-q", "main")
    assert mark.exists()
    mark.unlink()
    git(repo, "config", "core.hooksPath", ".githooks")

    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "hook")
    worktree = Path(deck.agents["a"].cwd)
    git(worktree, "hook", "run", "pre-commit")  # the probe: git itself runs the worktree's own hooks
    assert mark.read_text() == "pre-commit\n"
    mark.unlink()
    await turn(deck, rec, "a", "write feature.txt done")
    await deck.call("WorktreeService.Diff", {"agent": "a"})
    await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert (repo / ".githooks" / "pre-commit").exists()  # merged like any file, never run
    await deck.call("AgentService.Stop", {"name": "a"})
    await deck.call("WorktreeService.Remove", {"agent": "a", "force": True})
    assert not mark.exists()


def run_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args, "--config", str(config)], capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL)  # fmt: skip


def cli_in_process(config: Path, *args: str) -> Any:
    """`deck ARGS --config CONFIG` with the worktrees commands, in this process (a pipe for stdout)."""
    import typer
    from deck.plugins.worktrees.cli import register
    from typer.testing import CliRunner

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    return CliRunner().invoke(app, [*args, "--config", str(config)])


async def test_the_commands_work_with_no_deck_running(make_deck, repo, tmp_path):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write cli.txt \x1b[31mred")
    await deck.shutdown()
    config = tmp_path / "deck.toml"

    def cli(*args: str) -> Any:  # in a thread: each command runs its own event loop
        return asyncio.to_thread(cli_in_process, config, *args)

    listed = run_cli(config, "worktrees", "--json")  # the real command line has them
    assert listed.returncode == 0, listed.stderr
    assert [(r["agent"], r["changedFiles"], r["dirty"]) for r in json.loads(listed.stdout)] == [("a", 1, True)]
    assert "deck/a → main: 0 commits ahead, 1 changed file, uncommitted work" in (await cli("worktrees")).stdout
    shown = await cli("diff", "a")
    assert shown.exit_code == 0 and "+\x1b[31mred" in shown.stdout  # a pipe gets the data as it is
    refused = await cli("worktree", "remove", "a")
    assert refused.exit_code == 1 and refused.stderr.startswith("deck: a's worktree has uncommitted work")
    assert "`deck worktree remove a --force` drops it" in refused.stderr  # the way on, named
    merged = await cli("merge", "a", "--squash", "-m", "From the CLI")
    assert merged.exit_code == 0, merged.output
    assert git(repo, "log", "-1", "--format=%s").strip() == "From the CLI"
    removed = await cli("worktree", "remove", "a")
    assert removed.exit_code == 0 and "removed" in removed.stdout
    unknown = await cli("diff", "nobody")
    assert unknown.exit_code == 2 and unknown.stderr == "deck: unknown agent 'nobody' (agents: a)\n"


async def test_a_diff_on_a_terminal_is_coloured_and_shows_control_characters(make_deck, repo, tmp_path):
    import pexpect

    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write cli.txt \x1b]52;c;aGk=\x07\x1b[31mred")
    await deck.shutdown()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    child = pexpect.spawn(DECK[0], [*DECK[1:], "diff", "a", "--config", str(tmp_path / "deck.toml")],
                          env={**env, "TERM": "xterm-256color"}, encoding="utf-8", timeout=20)  # fmt: skip
    shown = child.read()
    child.wait()
    assert "\x1b[32m+␛]52;c;aGk=␇␛[31mred" in shown  # green, the agent's controls made visible
    assert "\x1b]52" not in shown and "\x1b[31m" not in shown
    assert "\x1b[1m+++ b/cli.txt" in shown


def test_the_line_frontend_shows_a_diff_and_merges(repo, tmp_path):
    from tests.frontends.test_line import LineDeck

    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", repo) + worktree_agent("b", repo))
    deck = LineDeck(config, XDG_STATE_HOME=os.environ["XDG_STATE_HOME"])
    try:
        deck.send("@a write both.txt from a")
        deck.expect(r"\[a\] done")
        deck.send("@b write both.txt from b")
        deck.expect(r"\[deck\] both.txt is changed in the worktrees of a, b")
        deck.send("/diff a")
        deck.expect(r"\[a\] \+\+\+ b/both.txt")
        deck.expect(r"\[a\] \+from a")
        deck.send("/merge a")
        deck.expect(r"\[a\] merged into main as [0-9a-f]{12} \(1 file\)")
        deck.send("/merge b")
        deck.expect(r"\[b\] b's work conflicts with main in: both.txt; nothing was changed\. To go on: .*")
        assert deck.close() == 0
    finally:
        if deck.proc.poll() is None:
            deck.proc.kill()
    assert (repo / "both.txt").read_text() == "from a"


async def test_the_console_shows_changed_files_overlaps_a_diff_and_merges(make_deck, repo):
    from deck.frontends.urwid.app import ConsoleApp
    from deck.frontends.urwid.common import canvas_text
    from deck.runtime.local import LocalClient

    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    client = LocalClient(deck)
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    await app.attach(asyncio.get_running_loop())
    size = (140, 50)

    def screen() -> str:
        app.refresh()  # what the next frame draws
        return canvas_text(app.root, *size)

    async def calls_done() -> None:
        while app._tasks:  # the service calls the console made
            await asyncio.gather(*app._tasks)

    try:
        await turn(deck, rec, "a", "write both.txt from a")
        assert "±1 file" in screen() and "⚠" not in screen()
        await turn(deck, rec, "b", "write both.txt from b")
        await rec.wait_event("worktree:overlap", agents=["a", "b"])
        assert "±1 file ⚠ 1 shared" in screen()

        app.root.keypress(size, "f9")
        await calls_done()
        shown = screen()
        assert "Worktree of a against its base" in shown and "+++ b/both.txt" in shown and "+from a" in shown
        app.root.keypress(size, "m")
        assert "Merge a's work?" in screen()
        app.root.keypress(size, "y")
        await calls_done()
        assert (repo / "both.txt").read_text() == "from a"
        shown = screen()
        assert "a: merged into main as" in shown and "no change against its base" in shown
        await rec.wait_event("worktree:overlap", agents=["a", "b"], count=0)  # a changes nothing against main now
        assert "⚠" not in screen()
        app.root.keypress(size, "esc")
        assert app.view == "chat"
    finally:
        app.detach()
    app = ConsoleApp(client, await client.call("ConfigService.Current"))  # a console that comes later
    await app.attach(asyncio.get_running_loop())
    try:
        await calls_done()
        assert "±1 file" in screen()  # b's, from WorktreeService.List: no event said it since
    finally:
        app.detach()


async def test_a_rewritten_dot_git_never_points_deck_at_another_repository(make_deck, repo, tmp_path):
    """The worktree's `.git` file is the agent's: one pointing to a repository whose config runs a
    program (a clean filter, which `git add` runs) is never followed."""
    mark = tmp_path / "FILTER-RAN"
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write notes.txt hello")
    worktree = Path(deck.agents["a"].cwd)
    evil = tmp_path / "evil"
    git(tmp_path, "init", "-q", str(evil))
    git(evil, "config", "filter.run.clean", f"sh -c 'echo ran >> {mark}; cat'")
    (worktree / ".gitattributes").write_text("* filter=run\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    probe = subprocess.run(["git", f"--git-dir={evil}/.git", "hash-object", "-w", "--path=x", "notes.txt"], cwd=worktree,
                           env=env, capture_output=True, text=True)  # fmt: skip
    assert probe.returncode == 0 and mark.exists()  # the probe: that config does run the filter
    mark.unlink()
    await deck.call("AgentService.Stop", {"name": "a"})
    (worktree / ".git").write_text(f"gitdir: {evil}/.git\n")  # what fs/write_text_file could write too

    rows = rows_by_agent(await deck.call("WorktreeService.List", {}))
    assert not mark.exists()
    assert rows["a"]["changedFiles"] == 2  # notes.txt and .gitattributes, in the worktree's own repository
    assert "+hello" in await deck.call("WorktreeService.Diff", {"agent": "a"})
    assert not mark.exists()


async def test_a_worktree_folder_swapped_for_a_symlink_to_another_worktree_is_refused(make_deck, repo):
    """A's worktree folder replaced by a link to b's: deck never takes b's work for a's, never
    merges it under a's name, never moves b's branch."""
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    await turn(deck, rec, "b", "write b.txt from b")
    await deck.call("AgentService.Stop", {"name": "a"})
    await deck.call("AgentService.Stop", {"name": "b"})
    a, b = Path(deck.agents["a"].cwd), Path(deck.agents["b"].cwd)
    a.rename(a.with_name("a-moved"))
    a.symlink_to(b)
    head_b, head_main = git(repo, "rev-parse", "deck/b"), git(repo, "rev-parse", "main")
    for method, params in (("Diff", {"agent": "a"}), ("Merge", {"agent": "a"}), ("Remove", {"agent": "a", "force": True})):
        with pytest.raises(ServiceError, match="is a symlink"):
            await deck.call(f"WorktreeService.{method}", params)
    rows = rows_by_agent(await deck.call("WorktreeService.List", {}))
    assert "is a symlink" in rows["a"]["error"] and rows["b"]["changedFiles"] == 1
    assert (git(repo, "rev-parse", "deck/b"), git(repo, "rev-parse", "main")) == (head_b, head_main)
    assert (b / "b.txt").read_text() == "from b" and not (repo / "b.txt").exists()
    with pytest.raises(ServiceError, match="is a symlink"):
        await deck.call("AgentService.Start", {"name": "a"})


def test_the_commands_say_so_when_git_is_missing(repo, tmp_path, monkeypatch):
    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", repo))
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    listed = cli_in_process(config, "worktrees")
    assert listed.exit_code == 1 and "git is not installed" in listed.stderr, listed.output
    shown = cli_in_process(config, "diff", "a")
    assert shown.exit_code == 1 and "git is not installed" in shown.stderr, shown.output


async def test_an_agent_name_a_worktree_s_record_would_take_is_refused(make_deck, repo):
    """`NAME.json` beside the worktrees records agent NAME's: an agent named so never gets a folder there."""
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent('"a.json"', repo))
    await deck.call("AgentService.Start", {"name": "a"})
    with pytest.raises(ServiceError, match="cannot name a branch and a folder"):
        await deck.call("AgentService.Start", {"name": "a.json"})
    assert (await deck.call("WorktreeService.List", {}))[0]["agent"] == "a"


async def test_an_agent_whose_worktree_is_not_made_yet_is_told_so(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    for method, params in (("Diff", {"agent": "a"}), ("Merge", {"agent": "a"}), ("Remove", {"agent": "a"})):
        with pytest.raises(ServiceError, match="a has no worktree yet: it is made at its first start"):
            await deck.call(f"WorktreeService.{method}", params)
    await deck.call("AgentService.Start", {"name": "a"})
    await deck.call("AgentService.Stop", {"name": "a"})
    shutil.rmtree(deck.agents["a"].cwd)  # only the folder is gone: its branch is still removed
    assert (await deck.call("WorktreeService.Remove", {"agent": "a"}))["branchDeleted"]


async def test_a_worktree_that_lost_its_dot_git_is_listed_and_never_reused_or_dropped(make_deck, repo):
    """The `.git` file is the agent's to delete: its folder, and the work in it, stay in sight."""
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write wip.txt unfinished")
    await deck.call("AgentService.Stop", {"name": "a"})
    path = Path(deck.agents["a"].cwd)
    (path / ".git").unlink()
    [row] = await deck.call("WorktreeService.List", {})
    assert row["agent"] == "a" and "without its .git" in row["error"]
    with pytest.raises(ServiceError, match="without its .git"):
        await deck.call("AgentService.Start", {"name": "a"})
    with pytest.raises(ServiceError, match="without its .git"):
        await deck.call("WorktreeService.Remove", {"agent": "a"})
    assert (path / "wip.txt").read_text() == "unfinished"
    result = await deck.call("WorktreeService.Remove", {"agent": "a", "force": True})
    assert result["branchDeleted"] and not path.exists()
    assert await deck.call("WorktreeService.List", {}) == []


async def test_a_commit_message_with_a_nul_is_refused_before_anything_is_done(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write feature.txt done")
    head = git(repo, "rev-parse", "main")
    with pytest.raises(ServiceError, match="the commit message cannot contain NUL characters"):
        await deck.call("WorktreeService.Merge", {"agent": "a", "message": "one\0two"})
    assert git(repo, "rev-parse", "main") == head and not (repo / "feature.txt").exists()


def test_config_validate_warns_of_a_name_a_worktree_cannot_have(repo, tmp_path):
    """A name git refuses in a branch (`a/b`, `-q`) or that takes a worktree's record (`x.json`) is
    told at validate, at its `worktree = true`, with the rule its start would fail with."""
    config = tmp_path / "deck.toml"
    names = ['"a/b"', "-q", '"x.json"', '"x.lock"', '"a..b"', "ok"]
    config.write_text("".join(worktree_agent(name, repo) for name in names))
    done = subprocess.run([*DECK, "config", "validate", str(config)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stdout.splitlines() if "warning:" in line]
    assert len(warned) == len(names) - 1, done.stdout
    for line, (i, name) in zip(warned, enumerate(names[:-1]), strict=True):
        bare = name.strip('"')
        where = f"{config}:{4 * i + 4}:12: warning: agents.{name}.worktree: agent name {bare!r} "
        assert line.startswith(where + "cannot name a branch and a folder: use letters, digits"), line
        assert line.endswith(", so the agent cannot start"), line


def test_the_commands_go_through_the_deck_server_running_the_config(repo, tmp_path, runtime):
    """With a `deck serve` of the config running, `deck merge` and `deck worktree remove` are the
    server's calls: refused while its agent is busy or running there, as in the console."""
    from tests.core.remote.test_server import Raw, Server

    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", repo))
    server = Server(config)
    client: Raw | None = None
    try:
        assert server.ready, server.stderr
        client = Raw(server.path)
        client.call("ChatService.Send", {"agent": "a", "text": "write served.txt hello"})
        client.event("worktree:changed", agent="a", timeout=20)
        client.call("ChatService.Send", {"agent": "a", "text": "sleep 30"})
        client.wait_line(lambda x: x.get("event") == "agent:state" and x.get("state") == "busy", timeout=20, count=2)
        busy = run_cli(config, "merge", "a")
        assert busy.returncode == 1 and busy.stderr.strip() == "deck: a is busy: merge once its turn is over", busy.stderr
        running = run_cli(config, "worktree", "remove", "a", "--force")
        assert running.returncode == 1 and "a is running in its worktree: stop it first" in running.stderr
        client.call("AgentService.Stop", {"name": "a"}, timeout=20)
        merged = run_cli(config, "merge", "a", "-m", "Through the server")
        assert merged.returncode == 0, merged.stderr
        assert git(repo, "log", "-1", "--format=%s").strip() == "Through the server"
        assert (repo / "served.txt").read_text() == "hello"
    finally:
        if client is not None:
            client.close()
        server.kill_everything()


async def test_a_merge_and_a_remove_are_refused_while_the_agent_works(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write x.txt hi")
    await deck.call("ChatService.Send", {"agent": "a", "text": "sleep 30"})
    await rec.wait(lambda r: deck.agent("a").state is AgentState.BUSY)
    with pytest.raises(ServiceError, match="a is busy: merge once its turn is over"):
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    with pytest.raises(ServiceError, match="a is running in its worktree: stop it first"):
        await deck.call("WorktreeService.Remove", {"agent": "a", "force": True})
    await deck.call("AgentService.Stop", {"name": "a"})


async def test_a_same_size_change_in_the_second_the_index_was_written_is_work_all_the_same(make_deck, repo):
    """git takes an index entry whose recorded stat still matches for unchanged, unless the file may
    have changed in the same second the index was written ("racily clean"): the copy deck stages
    the work in keeps the index's time, or an edit of that kind is missed, and left out of a merge."""
    git(repo, "config", "core.trustctime", "false")  # only the mtime tells: the test needs no clock tick
    deck, rec = make_deck(worktree_agent("a", repo))
    await deck.call("AgentService.Start", {"name": "a"})
    path = Path(deck.agents["a"].cwd)
    app = path / "src" / "app.py"
    past = (int(time.time()) - 100) * 10**9
    os.utime(app, ns=(past, past))
    git(path, "update-index", "-q", "--refresh")  # the entry records that time; the index is written now
    app.write_text("print('ho')\n")  # the same size, the same recorded time
    os.utime(app, ns=(past, past))
    index = Path(git(path, "rev-parse", "--path-format=absolute", "--git-path", "index").strip())
    os.utime(index, ns=(past, past))  # as if the index was written in the second the file changed

    row = rows_by_agent(await deck.call("WorktreeService.List", {}))["a"]
    assert (row["changedFiles"], row["dirty"]) == (1, True)
    assert "+print('ho')" in await deck.call("WorktreeService.Diff", {"agent": "a"})
    await deck.call("AgentService.Stop", {"name": "a"})
    assert (await deck.call("WorktreeService.Merge", {"agent": "a"}))["files"] == ["src/app.py"]
    assert (repo / "src" / "app.py").read_text() == "print('ho')\n"


async def test_work_left_in_a_worktree_from_before_overlaps_at_another_agent_s_turn(make_deck, repo):
    """A worktree that holds work from an earlier run (no turn of its agent yet in this deck) counts
    for the overlaps from the first turn of any agent on."""
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await deck.call("AgentService.Start", {"name": "b"})
    (Path(deck.agents["b"].cwd) / "shared.txt").write_text("b's, from before\n")
    await deck.call("AgentService.Stop", {"name": "b"})
    await turn(deck, rec, "a", "write shared.txt from a")
    assert rec.named("worktree:overlap") == [SHARED]


async def test_a_forced_remove_needs_no_base_branch(make_deck, repo):
    """The base branch renamed or deleted since: nothing can be merged, and force still removes."""
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write wip.txt unfinished")
    await deck.call("AgentService.Stop", {"name": "a"})
    git(repo, "branch", "-m", "main", "trunk")
    with pytest.raises(ServiceError, match="the base branch 'main' of a's worktree does not exist"):
        await deck.call("WorktreeService.Remove", {"agent": "a"})
    result = await deck.call("WorktreeService.Remove", {"agent": "a", "force": True})
    assert result["branchDeleted"] and not Path(result["path"]).exists() and "deck/a" not in git(repo, "branch")


async def test_files_named_beyond_ascii_are_told_by_their_names(make_deck, repo):
    """git quotes such names (`"\\303\\251.txt"`) in its line output: the conflicts and the main
    checkout's changes are told as the files are named."""
    (repo / "é.txt").write_text("first\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "an accented file")
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write é.txt agent's")
    (repo / "é.txt").write_text("main's\n")
    with pytest.raises(ServiceError, match=r"uncommitted changes \(é.txt\)") as dirty:
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert dirty.value.data == {"files": ["é.txt"]}
    git(repo, "commit", "-q", "-am", "main edits it")
    with pytest.raises(ServiceError, match="conflicts with main in: é.txt; nothing was changed") as conflict:
        await deck.call("WorktreeService.Merge", {"agent": "a"})
    assert conflict.value.data == {"conflicts": ["é.txt"]}


def test_a_rename_in_the_main_checkout_is_told_by_its_new_name():
    from deck.plugins.worktrees.tree import porcelain_files

    assert porcelain_files("R  new name.txt\0old.txt\0 M é.txt\0") == ["new name.txt", "é.txt"]


async def test_a_standalone_merge_names_the_work_by_its_conversation(make_deck, repo, tmp_path):
    """`deck merge` with no deck running: the agent's conversation comes back from the history, as
    in a server, and the commit says what the work is."""
    deck, rec = make_deck(worktree_agent("a", repo))
    await deck.startup(watch=False)  # the history on: the conversation is kept
    await turn(deck, rec, "a", "write notes.txt the notes")
    await deck.shutdown()
    merged = await asyncio.to_thread(cli_in_process, tmp_path / "deck.toml", "merge", "a")
    assert merged.exit_code == 0, merged.output
    assert git(repo, "log", "-1", "--format=%s").strip() == "Merge deck/a: write notes.txt the notes"
    assert git(repo, "log", "-1", "--format=%s", "HEAD^2").strip() == "a: write notes.txt the notes"


def test_worktrees_before_any_start_names_the_agents_whose_worktree_is_to_come(repo, tmp_path):
    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("a", repo) + worktree_agent("b", repo) + agent_table("c", [sys.executable, str(AGENT)]))
    listed = run_cli(config, "worktrees")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "no worktrees yet: a, b (worktree = true) get theirs at their first start\n"
    config.write_text(worktree_agent("a", repo))
    assert run_cli(config, "worktrees").stdout == "no worktrees yet: a (worktree = true) gets one at its first start\n"
    config.write_text(agent_table("c", [sys.executable, str(AGENT)]))
    assert run_cli(config, "worktrees").stdout.startswith("no worktrees (give an agent worktree = true")
