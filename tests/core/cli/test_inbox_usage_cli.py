"""`deck inbox` shows what `deck answer` takes, `deck usage` says what each figure counts and reads
the history's days with no server running, and every command's help names its values alike.
Real `deck serve` and `deck run` processes, real fake agents, the real `deck` command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import date

import pytest

from tests.conftest import agent_block
from tests.core.cli.test_cli import COMMANDS
from tests.core.remote.test_server import cli, clients, runtime, serve  # noqa: F401  (the deck server fixtures)
from tests.deck_process import DECK, DeckProcess, write_config

pytestmark = pytest.mark.timeout(90)


def test_inbox_json_has_each_permissions_options_and_deck_answer_takes_one(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a") + agent_block("b"))
    watcher = clients(server.path)
    watcher.request("ChatService.Send", {"agent": "a", "text": "perm"})
    asked = watcher.event("permission:requested", agent="a", timeout=20)
    watcher.request("ChatService.Send", {"agent": "b", "text": "question"})
    question = watcher.event("question:requested", agent="b", timeout=20)

    shown = cli("inbox", "--attach", server.name, "--json")
    assert shown.returncode == 0, shown.stderr
    permission, asking = json.loads(shown.stdout)
    assert permission["id"] == asked["id"] and permission["options"] == [
        {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
        {"optionId": "no", "name": "Reject", "kind": "reject_once"},
    ]
    assert asking["id"] == question["id"] and asking["options"] == []
    plain = cli("inbox", "--attach", server.name).stdout
    assert f"options: yes (Allow), no (Reject)  (deck answer {asked['id']} OPTION)" in plain
    wrong = cli("answer", asked["id"], "--attach", server.name)
    assert wrong.returncode == 2 and "answer it with one of its options (yes, no)" in wrong.stderr

    chosen = permission["options"][0]["optionId"]  # as a program takes it from the JSON
    done = cli("answer", asked["id"], chosen, "--attach", server.name)
    assert done.returncode == 0, done.stderr
    watcher.event("permission:resolved", id=asked["id"])
    watcher.wait_line(lambda e: e.get("event") == "message:delta" and e.get("agent") == "a"
                      and "permission: yes" in (e.get("text") or ""), timeout=20)  # fmt: skip


def test_usage_says_what_each_column_counts_and_what_was_never_reported(serve, clients) -> None:  # noqa: F811
    server = serve(agent_block("a") + agent_block("b") + agent_block("c"))
    watcher = clients(server.path)
    silent = cli("usage", "--attach", server.name).stdout.splitlines()  # nothing reported by anyone yet
    assert silent[0].split() == ["agent", "context", "tokens", "(reported)", "conversation", "since", "start", "today"]
    assert cells(silent)[1] == ["a", "not reported", "—", "cost unknown (not counted)", "—", "—"]
    assert silent[-1] == "total: nothing spent yet (not counted, cost unknown: a, b, c)"
    assert "nothing" not in " ".join(silent[:-1]) and " 0 tokens" not in "\n".join(silent)

    watcher.request("ChatService.Send", {"agent": "a", "text": "cost 0.25 USD"})
    watcher.event("usage:changed", agent="a", timeout=20)
    watcher.request("ChatService.Send", {"agent": "b", "text": "usage"})
    watcher.event("usage:changed", agent="b", tokens=30, timeout=20)
    shown = cli("usage", "--attach", server.name).stdout.splitlines()
    rows = {row[0]: row for row in cells(shown)}
    assert rows["a"] == ["a", "500/100,000 tokens", "—", "0.25 USD", "0.25 USD", "0.25 USD"]
    assert rows["b"] == ["b", "1,000/200,000 tokens", "30", "cost unknown (not counted)", "—", "—"]
    assert rows["c"] == ["c", "not reported", "—", "cost unknown (not counted)", "—", "—"]
    rows = {line.split()[0]: line for line in shown}
    assert rows["total:"] == ("total: 0.25 USD since the server started, 0.25 USD today; 30 tokens reported since the "
                              "server started, 30 today (not counted, cost unknown: b, c)")  # fmt: skip


def cells(lines: list[str]) -> list[list[str]]:
    """The table `deck usage` prints, cut where each title of its header starts: every row must
    have a value under every title, starting there (a value shifted left is cut in two)."""
    header, *rows = [line for line in lines if not line.startswith("total:")]
    starts = [m.start() for m in re.finditer(r"\S+(?: \S+)*", header)]
    table = []
    for line in [header, *rows]:
        assert all(i == 0 or line[i - 1] == " " for i in starts if i < len(line)), line
        table.append([line[a:b].strip() for a, b in zip(starts, [*starts[1:], None])])
        assert all(table[-1]), line  # every column filled
    return table


def test_usage_by_day_reads_the_history_with_no_server_running(tmp_path, runtime) -> None:  # noqa: F811
    config = write_config(tmp_path / "deck.toml", agent_block("a") + agent_block("b"))
    before = cli("usage", "--by", "day", "--config", str(config))
    assert (before.returncode, before.stdout, before.stderr) == (0, "no cost kept in the history yet\n", "")
    run = DeckProcess("--config", str(config), cwd=tmp_path)
    try:
        for agent, text in (("a", "cost 0.25 USD"), ("b", "usage")):
            run.call("ChatService.Send", {"agent": agent, "text": text})
            run.event("turn:changed", agent=agent, busy=False, timeout=30)
        run.close_stdin()
        assert run.wait(30) == 0
    finally:
        run.kill_everything()

    shown = cli("usage", "--by", "day", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{date.today().isoformat()}  0.25 USD  (a 0.25 USD)  30 tokens reported\n"
    found = json.loads(cli("usage", "--by", "day", "--json", "--config", str(config)).stdout)
    assert found == {"days": [{"day": date.today().isoformat(), "total": {"USD": 0.25}, "agents": {"a": {"USD": 0.25}},
                               "tokens": 30}]}  # fmt: skip
    live = cli("usage", "--config", str(config))  # each agent's context: only a running server has it
    assert live.returncode == 1 and "no deck server runs" in live.stderr and "--by day" in live.stderr


def help_of(*path: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([*DECK, *path, "--help"], capture_output=True, text=True, timeout=30, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("path", [p for p in COMMANDS if p], ids=" ".join)
def test_every_option_names_its_value_alike(path) -> None:
    shown = help_of(*path)
    assert not re.search(r"<\w+>", shown), shown  # typer's `<path>`, `<str>`
    if "--config" in shown:
        assert re.search(r"--config PATH\b", shown), shown


def test_usage_by_lists_its_choices() -> None:
    assert re.search(r"--by \[agent\|day\] ", help_of("usage"))
    wrong = subprocess.run([*DECK, "usage", "--by", "week"], capture_output=True, text=True, timeout=30)
    assert wrong.returncode == 2 and "'week' is not one of 'agent', 'day'" in wrong.stderr
