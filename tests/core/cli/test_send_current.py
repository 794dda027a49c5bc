"""Which conversation a start comes back to, and where `deck send` goes beside a server: a one-shot
`deck send` never becomes the conversation `deck run` shows next, a fresh conversation made with New
is still the current one after a restart, and `deck send` of a config a `deck serve` runs goes
through that server (never a second copy of its agent)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import agent_block
from tests.core.remote.test_server import clients, runtime, serve  # noqa: F401 - the deck server fixtures
from tests.deck_process import DECK, DeckProcess

pytestmark = pytest.mark.timeout(90)


def deck(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DECK, *args], capture_output=True, text=True, timeout=30, cwd=cwd, stdin=subprocess.DEVNULL)


def user_texts(conversation: dict[str, Any]) -> list[str]:
    return [m["parts"][0]["text"] for m in conversation["messages"] if m["role"] == "user"]


def run_once(config: Path, *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A `deck run --frontend=jsonl` of `config`: the calls made (each turn waited for), then the
    agent's conversation as that run shows it; then the run ends."""
    run = DeckProcess("--config", str(config))
    try:
        turns = 0
        for method, params in calls:
            run.call(method, params, timeout=30)
            if method == "ChatService.Send":
                turns += 1
                run.wait_line(lambda e: e.get("event") == "turn:changed" and not e["busy"], count=turns, timeout=30)
        conversation = run.call("ChatService.Conversation", {"agent": "a"})
        run.close_stdin()
        assert run.wait(30) == 0, run.stderr
        return conversation
    finally:
        if run.popen.poll() is None:
            run.kill_everything()


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "deck.toml"
    path.write_text(agent_block("a"))
    return path


def test_a_one_shot_send_is_not_the_conversation_the_next_run_comes_back_to(config: Path) -> None:
    run_once(config, ("ChatService.Send", {"agent": "a", "text": "echo in the console"}))
    sent = deck("send", "--config", str(config), "a", "echo one shot", cwd=config.parent)
    assert sent.returncode == 0, sent.stderr
    assert user_texts(run_once(config)) == ["echo in the console"]
    kept = deck("send", "--config", str(config), "--continue", "a", "echo again", cwd=config.parent)
    assert kept.returncode == 0, kept.stderr  # --continue: the latest conversation, the one-shot's
    listed = deck("history", "--json", "--config", str(config), cwd=config.parent).stdout
    assert '"echo one shot"' in listed  # its own conversation, titled by its prompt
    assert user_texts(run_once(config)) == ["echo in the console"]


def test_a_first_run_after_only_one_shot_sends_begins_afresh(config: Path) -> None:
    """No conversation was ever current under the config: the one-shot's is not taken for the latest."""
    sent = deck("send", "--config", str(config), "a", "echo one shot", cwd=config.parent)
    assert sent.returncode == 0, sent.stderr
    assert user_texts(run_once(config)) == []
    run_once(config, ("ChatService.Send", {"agent": "a", "text": "echo in the console"}))
    assert user_texts(run_once(config)) == ["echo in the console"]


def test_a_fresh_conversation_made_with_new_is_still_current_after_a_restart(config: Path) -> None:
    run_once(config, ("ChatService.Send", {"agent": "a", "text": "echo the old one"}),
             ("ChatService.NewConversation", {"agent": "a"}))  # fmt: skip
    assert user_texts(run_once(config)) == []
    run_once(config, ("ChatService.Send", {"agent": "a", "text": "echo the new one"}))
    assert user_texts(run_once(config)) == ["echo the new one"]


def test_send_beside_a_server_of_the_config_goes_through_it(serve, clients, tmp_path: Path) -> None:  # noqa: F811
    server = serve(agent_block("a"))
    config = tmp_path / "t.toml"
    watcher = clients(server.path)
    watcher.call("ChatService.Send", {"agent": "a", "text": "echo from the console"})
    watcher.event("turn:changed", agent="a", busy=False, queued=0, timeout=20)
    agents_before = server.descendants()
    sent = deck("send", "--config", str(config), "a", "echo beside", cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout == "You said: echo beside\n"
    assert sent.stderr == f"deck: the deck server t runs {config}: sending through it (deck send --new runs apart)\n"
    assert user_texts(watcher.call("ChatService.Conversation", {"agent": "a"})) == ["echo from the console", "echo beside"]
    assert server.descendants() == agents_before  # the server's own agent answered
    refused = deck("send", "--config", str(config), "--approve", "edit", "a", "hi", cwd=tmp_path)
    assert refused.returncode == 2 and "the deck server t runs" in refused.stderr and "--new" in refused.stderr
    apart = deck("send", "--config", str(config), "--new", "a", "echo apart", cwd=tmp_path)
    assert (apart.returncode, apart.stdout) == (0, "You said: echo apart\n")
    assert user_texts(watcher.call("ChatService.Conversation", {"agent": "a"})) == ["echo from the console", "echo beside"]
