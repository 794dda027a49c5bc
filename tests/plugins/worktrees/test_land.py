"""`deck land`: a merge train over real worktrees of a real repository, with real agents and a real check.

Each test makes its agents' work through their turns (tests/agents/worktree_agent.py), then lands
it through `WorktreeService.Land` or the `deck land` command, and looks at the repository with git.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from deck import ServiceError

from tests.conftest import agent_block
from tests.core.remote.test_server import runtime  # noqa: F401  (a fixture: the servers' folder of the test's own)
from tests.deck_process import DECK
from tests.plugins.worktrees.test_worktrees import git, repo, turn, worktree_agent  # noqa: F401  (repo: a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

#: A check that fails, saying so on its last line, when the merge result holds `bad.txt`.
CHECK = [sys.executable, "-c", "import os, sys; print('checking'); bad = os.path.exists('bad.txt'); "
         "print('bad.txt is there' if bad else 'all good'); sys.exit(1 if bad else 0)"]  # fmt: skip


def land_config(check: list[str] | None = None, timeout: str | None = None) -> str:
    keys = ([f"check = {json.dumps(check)}"] if check else []) + ([f'timeout = "{timeout}"'] if timeout else [])
    return "[land]\n" + "\n".join(keys) + "\n\n" if keys else ""


def results(rows: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(row["agent"], row["result"]) for row in rows]


def land_cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, "land", *args, "--config", str(config)], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether process `pid` has ended `within` seconds (a zombie has: whoever reaps it may never do so)."""
    for _ in range(int(within / 0.05)):
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def state(repo: Path, worktree: Path) -> tuple[str, ...]:
    """What a skipped agent or a refused train must leave as it was."""
    return (git(repo, "rev-parse", "main"), git(repo, "status", "--porcelain"), git(worktree, "rev-parse", "HEAD"),
            git(worktree, "status", "--porcelain"), *(p.read_text() for p in sorted(worktree.glob("*.txt"))))  # fmt: skip


async def test_disjoint_work_lands_in_order_each_onto_the_tip_the_one_before_left(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo) + worktree_agent("c", repo))
    for name in ("a", "b", "c"):
        await turn(deck, rec, name, f"write {name}.txt from {name}")
    b = Path(deck.agents["b"].cwd)
    git(b, "add", "-A")
    git(b, "commit", "-q", "-m", "b commits its own work")  # committed work lands as pending work does
    landed = await deck.call("WorktreeService.Land", {"agents": ["c", "a", "b"]})
    assert results(landed) == [("c", "landed"), ("a", "landed"), ("b", "landed")]
    assert [row["files"] for row in landed] == [["c.txt"], ["a.txt"], ["b.txt"]]
    assert git(repo, "log", "--first-parent", "--format=%s", "main").splitlines() == [
        "Merge deck/b: write b.txt from b", "Merge deck/a: write a.txt from a", "Merge deck/c: write c.txt from c", "first"]
    assert git(repo, "rev-parse", "main").strip() == landed[-1]["commit"]
    assert [(repo / f"{n}.txt").read_text() for n in "abc"] == ["from a", "from b", "from c"]
    assert git(repo, "status", "--porcelain") == ""  # the main checkout's files followed its branch
    rows = {row["agent"]: row for row in await deck.call("WorktreeService.List", {})}
    assert [(rows[n]["ahead"], rows[n]["dirty"]) for n in "abc"] == [(0, False)] * 3  # each goes on from its merge
    done = [(e["agent"], e["result"]) for e in rec.named("land:progress") if e["step"] == "done"]
    assert done == [("c", "landed"), ("a", "landed"), ("b", "landed")]
    said = [e["text"] for e in rec.named("deck:notice") if e["source"] == "worktrees" and e["text"].startswith("land:")]
    assert "land: merging c's work onto main" in said and any(t.startswith("land: b: landed on main as") for t in said)
    again = await deck.call("WorktreeService.Land", {})
    assert again == []  # by default: only worktrees with work ahead, and none has any
    (named,) = await deck.call("WorktreeService.Land", {"agents": ["a"]})
    assert (named["result"], named["summary"]) == ("nothing", "nothing to land: all of its work is in main already")
    assert rec.named("worktree:changed", "c")[-1] == {"agent": "c", "changedFiles": 0, "ahead": 0, "dirty": False}


async def test_a_conflict_is_skipped_with_its_files_and_the_train_goes_on(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo) + worktree_agent("c", repo))
    await turn(deck, rec, "a", "write README.md a's readme")
    await turn(deck, rec, "b", "write README.md b's readme")
    await turn(deck, rec, "c", "write c.txt from c")
    b = Path(deck.agents["b"].cwd)
    before = state(repo, b)[2:]
    landed = await deck.call("WorktreeService.Land", {"agents": "a b c"})  # one string of names, as /land types it
    assert results(landed) == [("a", "landed"), ("b", "conflict"), ("c", "landed")]
    assert landed[1]["conflicts"] == ["README.md"] and "conflicts with main in README.md" in landed[1]["summary"]
    assert (repo / "README.md").read_text() == "a's readme" and (repo / "c.txt").exists()
    assert state(repo, b)[2:] == before  # its worktree untouched: same HEAD, same pending work
    assert git(repo, "status", "--porcelain") == ""


async def test_a_result_names_200_files_at_most_and_says_how_many(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write first.txt 1")
    worktree = Path(deck.agents["a"].cwd)
    for i in range(250):
        (worktree / f"many{i:03}.txt").write_text(str(i))
    (landed,) = await deck.call("WorktreeService.Land", {"agents": ["a"]})
    assert landed["result"] == "landed" and landed["fileCount"] == 251 and len(landed["files"]) == 200
    assert landed["summary"].endswith("(251 files)")


async def test_a_failing_check_is_skipped_with_its_last_lines_and_never_reaches_the_base(make_deck, repo):
    deck, rec = make_deck(land_config(CHECK) + worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write bad.txt broken")
    await turn(deck, rec, "b", "write good.txt fine")
    a = Path(deck.agents["a"].cwd)
    before = state(repo, a)[2:]
    landed = await deck.call("WorktreeService.Land", {"agents": ["a", "b"]})
    assert results(landed) == [("a", "failed"), ("b", "landed")]
    assert landed[0]["check"] == ["checking", "bad.txt is there"]
    assert landed[0]["summary"] == "skipped: the check failed (exit code 1): bad.txt is there"
    assert not (repo / "bad.txt").exists() and (repo / "good.txt").read_text() == "fine"
    assert "bad.txt" not in git(repo, "log", "--name-only", "--format=", "main")
    assert state(repo, a)[2:] == before
    streamed = "".join(e["text"] for e in rec.named("land:progress", "a") if e["result"] == "output")
    assert streamed == "checking\nbad.txt is there\n"  # the output, as it came
    scratch = [line for line in git(repo, "worktree", "list", "--porcelain").splitlines() if line.endswith("/.land")]
    assert scratch == []  # the scratch worktree is gone with the train


async def test_a_check_past_its_time_limit_fails_and_is_ended(make_deck, repo, tmp_path):
    mark = tmp_path / "check-pid"
    hang = [sys.executable, "-c", f"import os, time; open({str(mark)!r}, 'w').write(str(os.getpid())); time.sleep(60)"]
    deck, rec = make_deck(land_config(hang, "1s") + worktree_agent("a", repo))
    await turn(deck, rec, "a", "write a.txt slow")
    started = time.monotonic()
    landed = await deck.call("WorktreeService.Land", {})
    assert results(landed) == [("a", "failed")] and landed[0]["summary"] == "skipped: the check timed out after 1s"
    assert time.monotonic() - started < 20
    assert gone(int(mark.read_text()))  # ended with its process group, at once


async def test_a_dirty_main_checkout_refuses_the_train_and_nothing_changes(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    await turn(deck, rec, "b", "write b.txt from b")
    (repo / "src" / "app.py").write_text("print('edited by hand')\n")
    a, b = Path(deck.agents["a"].cwd), Path(deck.agents["b"].cwd)
    before = state(repo, a), state(repo, b)
    with pytest.raises(ServiceError, match=r"nothing landed: the main checkout .* has uncommitted changes \(src/app.py\)"):
        await deck.call("WorktreeService.Land", {})
    assert (state(repo, a), state(repo, b)) == before
    assert rec.named("land:progress") == []


async def test_an_untracked_file_of_the_user_s_in_the_way_stops_that_agent_only(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write notes.txt from a")
    await turn(deck, rec, "b", "write b.txt from b")
    (repo / "notes.txt").write_text("the user's own, untracked\n")
    landed = await deck.call("WorktreeService.Land", {})
    assert results(landed) == [("a", "error"), ("b", "landed")]
    assert "not landed, main unchanged" in landed[0]["summary"] and "would be overwritten" in landed[0]["summary"]
    assert (repo / "notes.txt").read_text() == "the user's own, untracked\n" and (repo / "b.txt").exists()
    assert "notes.txt" not in git(repo, "ls-tree", "-r", "--name-only", "main")
    assert git(repo, "status", "--porcelain") == "?? notes.txt\n"


async def test_a_base_branch_checked_out_in_another_worktree_refuses_the_train(make_deck, repo, tmp_path):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    git(repo, "checkout", "-q", "-b", "elsewhere")
    git(repo, "worktree", "add", "-q", str(tmp_path / "user's main"), "main")
    before = git(repo, "rev-parse", "main")
    with pytest.raises(ServiceError, match=r"nothing landed: main is checked out in .*user's main, whose files would not"):
        await deck.call("WorktreeService.Land", {})
    assert git(repo, "rev-parse", "main") == before


async def test_one_train_at_a_time_per_repository(make_deck, repo):
    from deck import lock_file

    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    held = lock_file(Path(deck.agents["a"].cwd).parent / ".land.lock", shared=False)  # another deck's train
    assert held is not None
    try:
        with pytest.raises(ServiceError, match=r"another `deck land` is landing work on .*: wait for it to end"):
            await deck.call("WorktreeService.Land", {})
    finally:
        os.close(held)
    assert results(await deck.call("WorktreeService.Land", {})) == [("a", "landed")]


async def test_a_main_checkout_on_another_branch_keeps_its_files_and_the_base_moves(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    git(repo, "checkout", "-q", "-b", "elsewhere")
    (repo / "scratch-notes.txt").write_text("the user's, untracked\n")
    landed = await deck.call("WorktreeService.Land", {})
    assert results(landed) == [("a", "landed")]
    assert git(repo, "rev-parse", "main").strip() == landed[0]["commit"]
    assert not (repo / "a.txt").exists() and git(repo, "symbolic-ref", "--short", "HEAD").strip() == "elsewhere"


async def test_the_command_prints_json_and_its_exit_code_says_how_it_went(make_deck, repo, tmp_path):
    deck, rec = make_deck(land_config(CHECK) + worktree_agent("a", repo) + worktree_agent("b", repo)
                          + worktree_agent("c", repo))  # fmt: skip
    await turn(deck, rec, "a", "write good.txt fine")
    await turn(deck, rec, "b", "write bad.txt \x1b]52;c;aGk=\x07broken")
    await deck.shutdown()
    config = tmp_path / "deck.toml"
    done = land_cli(config, "--json")
    assert done.returncode == 3, done.stderr  # some skipped
    rows = json.loads(done.stdout)
    assert results(rows) == [("a", "landed"), ("b", "failed")]
    assert rows[1]["check"] == ["checking", "bad.txt is there"]
    assert "a: merging a's work onto main" in done.stderr and "bad.txt is there" in done.stderr  # the progress, streamed
    assert "\x1b]52" not in done.stderr + done.stdout
    never = land_cli(config, "c", "--check", "")
    assert never.returncode == 1 and never.stderr == "deck: c has no worktree yet: it is made at its first start\n"
    (repo / "README.md").write_text("dirty\n")
    refused = land_cli(config, "b", "--check", "")
    assert refused.returncode == 1 and refused.stderr.startswith("deck: nothing landed: the main checkout")
    git(repo, "checkout", "README.md")
    forced = land_cli(config, "b", "--check", "", "--squash")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.startswith("b                landed on main as")
    assert len(git(repo, "log", "-1", "--format=%P").split()) == 1  # squashed: one parent
    unknown = land_cli(config, "nobody")
    assert unknown.returncode == 2 and unknown.stderr == "deck: unknown agent 'nobody' (agents: a, b, c)\n"
    head = git(repo, "rev-parse", "main")
    missing = land_cli(config, "b", "--check", "no-such-check-command")  # refused once, not failed per agent
    assert missing.returncode == 1 and "the check command 'no-such-check-command' is not found" in missing.stderr
    assert git(repo, "rev-parse", "main") == head


async def test_a_kill_mid_train_leaves_the_base_at_a_good_tip_and_the_next_land_cleans_up(make_deck, repo, tmp_path):
    mark = tmp_path / "checking"
    slow = [sys.executable, "-c", f"import os, time; os.path.exists('b.txt') and (open({str(mark)!r}, 'w').write("
            "str(os.getpid())), time.sleep(60))"]  # fmt: skip
    deck, rec = make_deck(land_config(slow, "3s") + worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    await turn(deck, rec, "b", "write b.txt from b")
    await deck.shutdown()
    config = tmp_path / "deck.toml"
    train = subprocess.Popen([*DECK, "land", "a", "b", "--config", str(config)], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    for _ in range(600):  # a landed, b's check runs
        if mark.exists() and mark.read_text():
            break
        time.sleep(0.05)
    train.kill()  # kill -9, mid-check
    train.wait()
    assert gone(int(mark.read_text()), within=20)  # the check, orphaned, ends a little after its time limit all the same
    assert (repo / "a.txt").read_text() == "from a" and not (repo / "b.txt").exists()
    assert git(repo, "status", "--porcelain") == ""  # the main checkout at a's landing, clean
    assert git(repo, "log", "-1", "--format=%s", "main").strip() == "Merge deck/a"  # a's landing, whole
    listed = git(repo, "worktree", "list", "--porcelain")
    assert "/.land\n" in listed  # the scratch worktree is left behind…
    again = land_cli(config, "--check", "", "--json")  # …and the next train, which makes none, cleans it up
    assert again.returncode == 0, again.stderr
    assert results(json.loads(again.stdout)) == [("b", "landed")]
    assert "/.land\n" not in git(repo, "worktree", "list", "--porcelain")
    assert (repo / "b.txt").read_text() == "from b" and git(repo, "status", "--porcelain") == ""


async def test_ctrl_c_mid_check_ends_the_check_and_leaves_the_base_at_a_good_tip(make_deck, repo, tmp_path):
    mark = tmp_path / "checking"
    slow = [sys.executable, "-c", f"import os, time; os.path.exists('b.txt') and (open({str(mark)!r}, 'w').write("
            "str(os.getpid())), time.sleep(60))"]  # fmt: skip
    deck, rec = make_deck(land_config(slow) + worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    await turn(deck, rec, "b", "write b.txt from b")
    b = Path(deck.agents["b"].cwd)
    before = state(repo, b)[2:]
    await deck.shutdown()
    train = subprocess.Popen([*DECK, "land", "--config", str(tmp_path / "deck.toml")], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    for _ in range(600):  # a landed, b's check runs
        if mark.exists() and mark.read_text():
            break
        time.sleep(0.05)
    train.send_signal(signal.SIGINT)
    assert train.wait(timeout=30) != 0
    assert gone(int(mark.read_text()))  # the check was ended with the train
    assert (repo / "a.txt").exists() and not (repo / "b.txt").exists() and git(repo, "status", "--porcelain") == ""
    assert "/.land\n" not in git(repo, "worktree", "list", "--porcelain")  # its scratch worktree deleted on the way out
    assert state(repo, b)[2:] == before


async def test_a_train_cut_between_the_branch_and_the_files_is_finished_by_the_next(make_deck, repo):
    """The journal: a train killed after the base moved, before the main checkout's files did."""
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo))
    await turn(deck, rec, "a", "write a.txt from a")
    landed = await deck.call("WorktreeService.Land", {})
    new, old = landed[0]["commit"], git(repo, "rev-parse", "main~1").strip()
    git(repo, "read-tree", "-m", "-u", new, old)  # the files as they were before: as if cut there
    folder = Path(deck.agents["a"].cwd).parent
    (folder / ".land.json").write_text(json.dumps({"base": "main", "from": old, "to": new, "repo": str(repo)}))
    assert not (repo / "a.txt").exists()
    await turn(deck, rec, "b", "write b.txt from b")
    assert results(await deck.call("WorktreeService.Land", {})) == [("b", "landed")]
    assert (repo / "a.txt").exists() and (repo / "b.txt").exists() and git(repo, "status", "--porcelain") == ""
    assert not (folder / ".land.json").exists()


async def test_a_hostile_branch_never_runs_its_hooks_or_filters(make_deck, repo, tmp_path, monkeypatch):
    """The agent's branch names a filter the user's git config defines, and git hooks: landing it,
    with a check (a checkout of the merge), never runs either."""
    mark = tmp_path / "RAN"
    monkeypatch.setenv("HOOK_MARK", str(mark))
    git(repo, "config", "core.hooksPath", ".githooks")  # relative: the hooks of each checkout's own files
    git(repo, "config", "filter.run.smudge", f"sh -c 'echo smudge >> {mark}; cat'")
    git(repo, "config", "filter.run.clean", f"sh -c 'echo clean >> {mark}; cat'")
    git(repo, "config", "filter.run.required", "true")
    deck, rec = make_deck(land_config(CHECK) + worktree_agent("a", repo))
    await turn(deck, rec, "a", "hook")
    await turn(deck, rec, "a", "write .gitattributes * filter=run")
    worktree = Path(deck.agents["a"].cwd)
    (worktree / "probe.txt").write_text("probe\n")
    subprocess.run(["git", "hook", "run", "pre-commit"], cwd=worktree, check=True)  # the probes: git itself runs
    assert git(worktree, "check-attr", "filter", "probe.txt") == "probe.txt: filter: run\n"  # the hooks, and the filter
    subprocess.run(["git", "hash-object", "--path=probe.txt", "probe.txt"], cwd=worktree, check=True, capture_output=True)
    assert mark.read_text() == "pre-commit\nclean\n"
    mark.unlink()
    landed = await deck.call("WorktreeService.Land", {})
    assert results(landed) == [("a", "landed")], landed
    assert (repo / ".githooks" / "post-checkout").exists() and (repo / "probe.txt").exists()  # merged, never run
    assert not mark.exists()


async def test_an_agent_asks_deck_s_mcp_server_which_files_the_others_change(make_deck, repo):
    """A real agent calls the `changed_files` tool of the `deck` MCP server its session was given."""
    asker = agent_block("asker", cwd=str(repo / "src"))
    deck, rec = make_deck(worktree_agent("a", repo) + worktree_agent("b", repo) + asker)
    await turn(deck, rec, "a", "write README.md a's readme")
    a = Path(deck.agents["a"].cwd)
    (a / "new.txt").write_text("x")
    git(a, "add", "new.txt")
    git(a, "commit", "-q", "-m", "a commits")
    await turn(deck, rec, "b", "write b.txt from b")
    await deck.call("ChatService.Send", {"agent": "asker", "text": "changed-files"})
    await rec.wait(lambda r: any(m["message"]["done"] and m["message"]["role"] == "agent"
                                 for m in r.named("message:updated", "asker")))  # fmt: skip
    messages = deck.chat.conversation("asker").snapshot()["messages"]
    text = "".join(p.get("text", "") for p in messages[-1]["parts"] if p["type"] == "text")
    assert text.startswith("answer: "), text
    rows = {row["agent"]: row for row in json.loads(text.removeprefix("answer: "))}
    assert rows["a"]["files"] == [{"path": "README.md", "committed": False, "uncommitted": True},
                                  {"path": "new.txt", "committed": True, "uncommitted": False}]  # fmt: skip
    assert rows["b"]["count"] == 1 and rows["b"]["files"][0]["path"] == "b.txt" and rows["b"]["base"] == "main"
    own = await deck.call("WorktreeService.ChangedFiles", {"agent": "a"})
    assert [row["agent"] for row in own] == ["b"]  # an agent's own worktree is not among the others'


async def test_land_is_an_action_every_frontend_offers(make_deck, repo):
    deck, rec = make_deck(worktree_agent("a", repo))
    action = next(a for a in await deck.call("DeckService.Actions", {}) if a["name"] == "land")
    assert (action["method"], action["shows"], action["source"]) == ("WorktreeService.Land", "table", "worktrees")
    assert action["params"][0]["name"] == "agents" and action["params"][0]["rest"]


async def test_without_the_worktrees_plugin_the_tool_says_so(make_deck, repo):
    asker = agent_block("asker", cwd=str(repo))
    deck, rec = make_deck(asker, disabled=("worktrees",))
    await deck.call("ChatService.Send", {"agent": "asker", "text": "changed-files"})
    await rec.wait(lambda r: any(m["message"]["done"] and m["message"]["role"] == "agent"
                                 for m in r.named("message:updated", "asker")))  # fmt: skip
    messages = deck.chat.conversation("asker").snapshot()["messages"]
    text = "".join(p.get("text", "") for p in messages[-1]["parts"] if p["type"] == "text")
    assert text == "tool error: no worktrees here: the worktrees plugin is off"


def test_line_mode_lands_with_slash_land_and_shows_the_train_as_it_goes(repo, tmp_path):
    from tests.frontends.test_line import LineDeck

    config = tmp_path / "deck.toml"
    config.write_text(land_config(CHECK) + worktree_agent("a", repo) + worktree_agent("b", repo))
    deck = LineDeck(config, XDG_STATE_HOME=os.environ["XDG_STATE_HOME"])
    try:
        deck.send("@a write bad.txt broken")
        deck.expect(r"\[a\] done")
        deck.send("@b write good.txt fine")
        deck.expect(r"\[b\] done")
        deck.send("/land a b")
        deck.expect(r"\[a\] land: merging a's work onto main")  # the plugin's notices, as the train goes
        deck.expect(r"\[a\] land: a: skipped: the check failed \(exit code 1\): bad.txt is there")
        deck.expect(r"\[b\] land: b: landed on main as [0-9a-f]{12} \(1 file\)")
        deck.expect(r"\[deck\] agent: a · result: failed · base: main · summary: skipped: the check failed .*")  # the table
        assert deck.close() == 0
    finally:
        if deck.proc.poll() is None:
            deck.proc.kill()
    assert (repo / "good.txt").read_text() == "fine" and not (repo / "bad.txt").exists()


def test_through_a_running_server_its_clients_see_the_train_and_the_command_its_progress(repo, tmp_path, runtime):
    """With a `deck serve` of the config running, `deck land` is the server's call: its progress comes
    back over the socket to the command (stderr), and every attached client sees `land:progress`."""
    from tests.core.remote.test_server import Raw, Server

    config = tmp_path / "deck.toml"
    config.write_text(land_config(CHECK) + worktree_agent("a", repo))
    server = Server(config)
    client: Raw | None = None
    try:
        assert server.ready, server.stderr
        client = Raw(server.path)
        client.call("ChatService.Send", {"agent": "a", "text": "write served.txt hello"})
        client.event("worktree:changed", agent="a", timeout=20)
        done = land_cli(config)
        assert done.returncode == 0, done.stderr
        assert "deck: a: merging a's work onto main" in done.stderr and "all good" in done.stderr
        assert done.stdout.startswith("a                landed on main as")
        client.event("land:progress", agent="a", step="done", result="landed", timeout=20)
        assert (repo / "served.txt").read_text() == "hello"
    finally:
        if client is not None:
            client.close()
        server.kill_everything()
