"""Worktrees on an agent's host (`host` with `worktree = true`), against the real sshd on 127.0.0.1
(tests/sshd.py): made there at the first start, the agent's turn, `worktree:changed`, the diff, a merge
refused with a dirty main checkout, the merge, the refused and the forced removal, the commands.

The host is this machine, so the test looks at the host's files directly; deck reaches them only through
ssh. The host's sessions get a state folder of their own (`XDG_STATE_HOME`, sent with `SetEnv`), not
deck's, and a `GIT_DIR` naming no repository, which deck's git must not heed there. The repository's
folder holds a quote, spaces and `$(…)`: no shell on the host reads any of it as anything but a name.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from deck import ServiceError
from deck.testing import agent_table

from tests.deck_process import DECK
from tests.plugins.worktrees.test_worktrees import AGENT, git, make_repo, turn
from tests.sshd import SSHServer, sshd  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

#: A repository folder the host's shell would run something of, were a path ever left unquoted there.
REPO_NAME = "it's a $(touch PWNED) `touch PWNED` repo"


def remote_worktree_agent(server: SSHServer, cwd: Path, host_state: Path, **keys: Any) -> str:
    setenv = f"SetEnv=XDG_STATE_HOME={host_state} GIT_DIR=/nonexistent/repository"
    return agent_table(
        "far", [sys.executable, str(AGENT)], cwd=str(cwd), host="testbox", worktree=True,
        ssh=["-F", str(server.config), "-o", setenv], **keys,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / REPO_NAME)


def deck_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args, "--config", str(config)], capture_output=True, text=True, timeout=90)


async def test_a_worktree_on_the_host_made_changed_diffed_merged_and_removed(make_deck, sshd, repo, tmp_path):
    host_state = tmp_path / "host-state"
    deck, rec = make_deck(remote_worktree_agent(sshd, repo / "src", host_state))

    changed = await turn(deck, rec, "far", "write notes.txt from far")
    assert changed == {"agent": "far", "changedFiles": 1, "ahead": 0, "dirty": True}
    folders = list((host_state / "deck" / "worktrees").glob("it's a * repo-*"))
    assert len(folders) == 1, folders  # the host's state folder, not deck's
    worktree = folders[0] / "far"
    assert (worktree / "src" / "notes.txt").read_text() == "from far"  # written there by the agent, on the host
    assert deck.agents["far"].cwd == str(worktree / "src")  # the same subfolder as its cwd
    assert not (repo / "src" / "notes.txt").exists()  # the main checkout untouched
    assert git(repo, "branch", "--list", "--format=%(refname:short)", "deck/far").strip() == "deck/far"
    assert not list((tmp_path / "state" / "deck" / "worktrees").glob("*-*"))  # nothing of it on deck's side
    assert not list(tmp_path.rglob("PWNED")) and not list(Path.home().glob("PWNED"))

    rows = await deck.call("WorktreeService.List", {})
    assert rows == [{"agent": "far", "path": str(worktree), "branch": "deck/far", "base": "main", "ahead": 0,
                     "changedFiles": 1, "dirty": True, "host": "testbox", "configured": True}]  # fmt: skip
    text = await deck.call("WorktreeService.Diff", {"agent": "far"})
    assert "+++ b/src/notes.txt" in text and "+from far" in text

    (repo / "README.md").write_text("edited in the main checkout\n")
    head = git(repo, "rev-parse", "HEAD")
    with pytest.raises(ServiceError, match=r"testbox:.* has uncommitted changes \(README.md\)"):
        await deck.call("WorktreeService.Merge", {"agent": "far"})
    assert git(repo, "rev-parse", "HEAD") == head and not (repo / "src" / "notes.txt").exists()
    git(repo, "checkout", "--", "README.md")

    merged = await deck.call("WorktreeService.Merge", {"agent": "far", "message": "Notes from far"})
    assert merged["base"] == "main" and merged["files"] == ["src/notes.txt"]
    assert (repo / "src" / "notes.txt").read_text() == "from far"  # in the host's main checkout
    assert git(repo, "log", "-1", "--format=%s %p").split()[0:2] == ["Notes", "from"]
    assert len(git(repo, "log", "-1", "--format=%p").split()) == 2  # a merge commit
    assert rec.named("worktree:changed", "far")[-1] == {"agent": "far", "changedFiles": 0, "ahead": 0, "dirty": False}

    await turn(deck, rec, "far", "write later.txt more")
    with pytest.raises(ServiceError, match="running in its worktree"):
        await deck.call("WorktreeService.Remove", {"agent": "far"})
    await deck.call("AgentService.Stop", {"name": "far"})
    with pytest.raises(ServiceError, match="uncommitted work"):
        await deck.call("WorktreeService.Remove", {"agent": "far"})
    assert (worktree / "src" / "later.txt").exists()
    removed = await deck.call("WorktreeService.Remove", {"agent": "far", "force": True})
    assert removed == {"agent": "far", "path": str(worktree), "branch": "deck/far", "branchDeleted": True, "host": "testbox"}
    assert not worktree.exists() and not (folders[0] / "far.json").exists()
    assert git(repo, "branch", "--list", "deck/far") == ""
    assert not list(tmp_path.rglob("PWNED"))


async def test_the_commands_act_on_the_hosts_worktree(make_deck, sshd, repo, tmp_path):
    """`deck worktrees`, `deck diff`, `deck merge`, `deck worktree remove` with no deck running: each
    reaches the host through ssh."""
    host_state = tmp_path / "host-state"
    deck, rec = make_deck(remote_worktree_agent(sshd, repo, host_state))
    await turn(deck, rec, "far", "write feature.txt remote work")
    await deck.shutdown()
    config = tmp_path / "deck.toml"

    listed = deck_cli(config, "worktrees")
    assert listed.returncode == 0, listed.stderr
    assert "deck/far → main: 0 commits ahead, 1 changed file, uncommitted work  testbox:" in listed.stdout
    diff = deck_cli(config, "diff", "far")
    assert diff.returncode == 0 and "+remote work" in diff.stdout
    merged = deck_cli(config, "merge", "far", "--squash", "-m", "Feature")
    assert merged.returncode == 0, merged.stderr
    assert (repo / "feature.txt").read_text() == "remote work"
    assert git(repo, "log", "-1", "--format=%s").strip() == "Feature"
    removed = deck_cli(config, "worktree", "remove", "far")  # its work merged: nothing lost
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith("far: removed testbox:")
    assert json.loads(deck_cli(config, "worktrees", "--json").stdout) == []


async def test_hooks_on_the_host_never_run(make_deck, sshd, repo, tmp_path):
    """The repository's hooks and those the agent writes in its worktree (`core.hooksPath` relative):
    none runs for what deck does there."""
    mark = tmp_path / "HOOK-RAN"
    hooks = repo / ".git" / "hooks"
    for name in ("post-checkout", "reference-transaction", "pre-commit", "post-merge"):
        (hooks / name).write_text(f"#!/bin/sh\necho main-{name} >> '{mark}'\n")
        (hooks / name).chmod(0o755)
    git(repo, "checkout", "-q", "-b", "probe")  # the probe: the main checkout's hook runs for git itself
    git(repo, "checkout", "-q", "main")
    assert mark.exists()
    mark.unlink()
    git(repo, "config", "core.hooksPath", ".githooks")
    table = remote_worktree_agent(sshd, repo, tmp_path / "host-state") + f"env = {{ HOOK_MARK = {json.dumps(str(mark))} }}\n"
    deck, rec = make_deck(table)
    await turn(deck, rec, "far", "hook")
    await turn(deck, rec, "far", "write feature.txt done")
    await deck.call("WorktreeService.Diff", {"agent": "far"})
    await deck.call("WorktreeService.Merge", {"agent": "far"})
    assert (repo / ".githooks" / "pre-commit").exists()  # merged like any file, never run
    await deck.call("AgentService.Stop", {"name": "far"})
    await deck.call("WorktreeService.Remove", {"agent": "far", "force": True})
    assert not mark.exists()


async def test_a_host_cwd_in_no_repository_fails_the_start_saying_so(make_deck, sshd, tmp_path):
    (tmp_path / "plain").mkdir()
    deck, rec = make_deck(remote_worktree_agent(sshd, tmp_path / "plain", tmp_path / "host-state"))
    with pytest.raises(ServiceError):
        await deck.call("AgentService.Start", {"name": "far"})
    assert f"testbox:{tmp_path / 'plain'} is in no git repository" in (deck.agents["far"].error or "")


def test_deck_agents_check_asks_the_host_for_git_too(sshd, repo, tmp_path):
    """A worktree agent on a host needs git there: the check asks for it, and finds it."""
    (tmp_path / "deck.toml").write_text(remote_worktree_agent(sshd, repo, tmp_path / "host-state"))
    result = deck_cli(tmp_path / "deck.toml", "agents", "--check", "--json")
    assert result.returncode == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert row["found"] == f"testbox:{sys.executable}" and "problem" not in row


async def test_a_host_that_does_not_answer_fails_the_start_naming_it(make_deck, sshd, repo, tmp_path):
    """A host that takes the connection and never answers (a black hole, as ssh sees it): the start
    fails with ssh's own reason once its connect timeout is over, not with the plugin's time limit;
    that limit, for an agent on a host, is longer than ssh's connect timeout."""
    from deck.agent.remote import SSH_DEFAULTS

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # connections wait in the backlog: no banner ever comes
        port = silent.getsockname()[1]
        table = remote_worktree_agent(sshd, repo, tmp_path / "host-state")
        table = table.replace('"-o", "SetEnv', f'"-o", "Port={port}", "-o", "ConnectTimeout=2", "-o", "SetEnv', 1)
        deck, rec = make_deck(table)
        deck.hooks.timeout = 1.0  # a local plugin's limit, shorter than this ssh's connect timeout
        with pytest.raises(ServiceError):
            await deck.call("AgentService.Start", {"name": "far"})
    error = deck.agents["far"].error or ""
    assert "the connection to testbox failed or was lost" in error and "timed out" in error, error
    assert not rec.named("plugin:error"), rec.named("plugin:error")
    connect = next(float(o.split("=")[1]) for o in SSH_DEFAULTS if o.startswith("ConnectTimeout="))
    assert deck.hooks.host_timeout > connect


def test_deck_agents_check_refuses_a_host_cwd_in_no_repository(sshd, tmp_path):
    """The check asks the host whether the agent's cwd is in a repository there (the session's `GIT_DIR`,
    naming none, not heeded), in the same ssh call."""
    (tmp_path / "plain").mkdir()
    (tmp_path / "deck.toml").write_text(remote_worktree_agent(sshd, tmp_path / "plain", tmp_path / "host-state"))
    result = deck_cli(tmp_path / "deck.toml", "agents", "--check")
    assert result.returncode == 1, result.stdout
    assert result.stdout.strip() == f"✗ far              testbox:{tmp_path / 'plain'} is in no git repository: worktree = true needs one"


async def test_a_standalone_merge_on_the_host_names_the_work_by_its_conversation(make_deck, sshd, repo, tmp_path):
    deck, rec = make_deck(remote_worktree_agent(sshd, repo, tmp_path / "host-state"))
    await deck.startup(watch=False)  # the history on: the conversation is kept
    await turn(deck, rec, "far", "write notes.txt far notes")
    await deck.shutdown()
    merged = deck_cli(tmp_path / "deck.toml", "merge", "far", "--squash")
    assert merged.returncode == 0, merged.stderr
    assert git(repo, "log", "-1", "--format=%s").strip() == "far: write notes.txt far notes"


async def test_deck_worktrees_names_a_host_it_cannot_reach_and_lists_the_rest(make_deck, sshd, tmp_path):
    """A local worktree and an agent whose host refuses the connection: the local one is listed, the
    host is named on stderr with ssh's reason, never "no worktrees", and the exit code is 1."""
    from tests.plugins.worktrees.test_worktrees import worktree_agent

    local = make_repo(tmp_path / "local")
    deck, rec = make_deck(worktree_agent("near", local))
    await turn(deck, rec, "near", "write a.txt here")
    await deck.shutdown()
    far = remote_worktree_agent(sshd, local, tmp_path / "host-state").replace('"-o", "SetEnv', '"-o", "Port=1", "-o", "SetEnv', 1)
    config = tmp_path / "deck.toml"
    config.write_text(worktree_agent("near", local) + far + far.replace("[agents.far]", "[agents.far2]"))

    listed = deck_cli(config, "worktrees")
    assert listed.returncode == 1
    assert listed.stdout.startswith("near             deck/near → main: 0 commits ahead, 1 changed file"), listed.stdout
    assert "no worktrees" not in listed.stdout
    [line] = listed.stderr.splitlines()  # one line for the host, whatever number of agents there
    assert line.startswith("deck: testbox could not be reached, so the worktrees there (of far, far2) are not listed, not gone: ")
    assert "Connection refused" in line
    as_json = deck_cli(config, "worktrees", "--json")
    assert as_json.returncode == 1 and as_json.stderr == listed.stderr
    assert [row["agent"] for row in json.loads(as_json.stdout)] == ["near"]


async def test_the_commands_take_few_round_trips_to_the_host(make_deck, sshd, repo, tmp_path):
    """Each ssh call is a round trip to the host (seconds on a slow link): `deck diff` looks at the
    worktree once, with the steps that need no answer in between run as one script there."""
    deck, rec = make_deck(remote_worktree_agent(sshd, repo, tmp_path / "host-state"))
    await turn(deck, rec, "far", "write notes.txt far notes")
    await deck.shutdown()
    wrapper, calls = tmp_path / "bin" / "ssh", tmp_path / "ssh-calls"
    wrapper.parent.mkdir()
    wrapper.write_text(f"#!/bin/sh\necho >> '{calls}'\nexec '{shutil.which('ssh')}' \"$@\"\n")
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}"}

    def counted(*args: str) -> int:
        calls.write_text("")
        done = subprocess.run([*DECK, *args, "--config", str(tmp_path / "deck.toml")], env=env, capture_output=True,
                              text=True, timeout=90)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return len(calls.read_text().splitlines())

    assert counted("diff", "far") <= 17  # 41 when each step was a call of its own (one: the filters to switch off)
    assert counted("worktrees") <= 16


async def test_a_worktree_on_the_host_lands_there_checked_in_a_scratch_worktree_there(
    make_deck, sshd, repo, tmp_path, monkeypatch
):
    host_state = tmp_path / "host-state"
    runtime = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # ssh's shared connections of this test's own (a short path)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime)
    check = [sys.executable, "-c", "import os, sys; print(os.getcwd()); sys.exit(os.path.exists('src/bad.txt'))"]
    land = f"[land]\ncheck = {json.dumps(check)}\n\n"
    deck, rec = make_deck(land + remote_worktree_agent(sshd, repo / "src", host_state))
    await turn(deck, rec, "far", "write bad.txt broken")
    (failed,) = await deck.call("WorktreeService.Land", {})
    assert failed["result"] == "failed" and failed["check"][0].endswith("/.land"), failed
    assert failed["check"][0].startswith(str(host_state / "deck" / "worktrees"))  # run on the host, in its scratch worktree
    assert not (repo / "src" / "bad.txt").exists()
    await deck.call("AgentService.Stop", {"name": "far"})
    folder = next((host_state / "deck" / "worktrees").glob("it's a * repo-*"))
    (folder / "far" / "src" / "bad.txt").unlink()
    (folder / "far" / "src" / "good.txt").write_text("fine")
    (landed,) = await deck.call("WorktreeService.Land", {"agents": ["far"]})
    assert landed["result"] == "landed" and landed["files"] == ["src/good.txt"], landed
    assert (repo / "src" / "good.txt").read_text() == "fine" and git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "main").strip() == landed["commit"]
    assert not (folder / ".land").exists() and "/.land\n" not in git(repo, "worktree", "list", "--porcelain")
    assert not list(tmp_path.rglob("PWNED"))
    await deck.shutdown()
    subprocess.run(["ssh", "-F", str(sshd.config), "-o", f"ControlPath={runtime}/deck-ssh/ssh-%C", "-O", "exit", "testbox"],
                   capture_output=True, timeout=10)  # fmt: skip
    shutil.rmtree(runtime, ignore_errors=True)
