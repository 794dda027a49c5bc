"""Agents on another host (`host`, `ssh`), through the OpenSSH client, against a real sshd on 127.0.0.1
(tests/sshd.py): a turn, what the agent is offered and sent, stop and kill with nothing left on the host,
a connection that drops mid-turn, and BatchMode's refusals."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.conftest import FAKE_AGENT, agent_table
from tests.deck_process import DECK, DeckProcess, write_config
from tests.sshd import SSHServer, marked, sshd, wait_unmarked  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


def remote_agent(
    server: SSHServer, cwd: Path, *flags: str, mark: str = "", config: Path | None = None, own: bool = False, **keys
) -> str:
    """The fake agent on `testbox`; `own`: a connection of its own (not one another agent opened)."""
    table = agent_table(
        "far", [sys.executable, str(FAKE_AGENT), *flags], cwd=str(cwd), host="testbox",
        ssh=["-F", str(config or server.config), *(["-o", "ControlPath=none"] if own else [])], **keys,
    )  # fmt: skip
    return table + f'env = {{ DECK_TEST_MARK = "{mark or uuid.uuid4().hex}", GREETING = "from the config" }}\n'


def turns_ended(rec) -> int:
    return len([t for t in rec.named("turn:changed", "far") if not t["busy"]])


async def say(deck, rec, text: str) -> str:
    before = turns_ended(rec)
    await deck.call("ChatService.Send", {"agent": "far", "text": text})
    await rec.wait(lambda r: turns_ended(r) > before, timeout=60)
    return deck.chat.conversation("far").messages[-1].text


async def test_a_turn_on_the_host_with_only_its_own_env_and_neither_fs_nor_terminals(make_deck, sshd, tmp_path, monkeypatch):
    monkeypatch.setenv("DECK_ONLY_HERE", "deck's own")
    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(remote_agent(sshd, tmp_path, "--requests", str(requests)))
    assert await say(deck, rec, "hello over ssh") == "You said: hello over ssh"
    assert json.loads(await say(deck, rec, "getenv GREETING")) == "from the config"  # its env is sent
    assert json.loads(await say(deck, rec, "getenv DECK_ONLY_HERE")) is None  # deck's own is not
    initialize, new = [json.loads(line) for line in requests.read_text().splitlines()[:2]]
    assert initialize["params"]["clientCapabilities"]["fs"] == {"readTextFile": False, "writeTextFile": False}
    assert initialize["params"]["clientCapabilities"]["terminal"] is False
    assert new["params"]["cwd"] == str(tmp_path)  # the host's path


async def test_stopping_the_agent_leaves_nothing_of_it_on_the_host(make_deck, sshd, tmp_path):
    mark = uuid.uuid4().hex
    deck, rec = make_deck(remote_agent(sshd, tmp_path, mark=mark))
    await say(deck, rec, "hello")
    assert marked(mark)  # it runs there
    await deck.call("AgentService.Stop", {"name": "far"})
    assert wait_unmarked(mark) == []


async def test_a_descendant_that_left_the_agents_process_group_is_ended_on_the_host_too(make_deck, sshd, tmp_path):
    mark = uuid.uuid4().hex
    deck, rec = make_deck(remote_agent(sshd, tmp_path, mark=mark))
    assert await say(deck, rec, "escape") == "escaped"  # `sh -c 'sleep 301'` in a session of its own
    assert any(os.getsid(p.pid) == p.pid and "sleep 301" in " ".join(p.cmdline()) for p in marked(mark))
    await deck.call("AgentService.Stop", {"name": "far"})
    assert wait_unmarked(mark) == []


async def test_a_remote_agent_is_refused_this_machines_files_and_commands_and_it_is_logged(make_deck, sshd, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's own")
    ran = tmp_path / "ran"
    deck, rec = make_deck(remote_agent(sshd, tmp_path))
    requests = {
        "fs/read_text_file": {"path": str(secret)},
        "fs/write_text_file": {"path": str(tmp_path / "written.txt"), "content": "from the host"},
        "terminal/create": {"command": "sh", "args": ["-c", f"touch {ran}"], "cwd": str(tmp_path)},
        "terminal/output": {"terminalId": "term-1"},
        "terminal/kill": {"terminalId": "term-1"},
    }
    for method, params in requests.items():
        answer = json.loads(await say(deck, rec, f"rpc {method} {json.dumps(params)}"))
        assert "result" not in answer, method
        assert "testbox" in answer["error"]["message"] and method in answer["error"]["message"]
    assert not (tmp_path / "written.txt").exists() and not ran.exists()
    assert secret.read_text() == "the user's own"
    logs = "\n".join(deck.agents["far"].logs)
    assert all(f"deck: {method} refused" in logs for method in requests), logs


def test_killing_deck_leaves_nothing_of_the_agent_on_the_host(sshd, tmp_path):
    mark = uuid.uuid4().hex
    config = write_config(tmp_path / "deck.toml", remote_agent(sshd, tmp_path, mark=mark))
    deck = DeckProcess("--config", str(config))
    try:
        deck.response(deck.request("AgentService.Start", {"name": "far"}), timeout=60)
        assert marked(mark)
        os.kill(deck.pid, signal.SIGKILL)
        deck.popen.wait(10)
        assert wait_unmarked(mark, timeout=30) == []
    finally:
        if deck.popen.poll() is None:
            deck.popen.kill()


async def test_a_connection_lost_mid_turn_is_an_error_naming_the_host(make_deck, sshd, tmp_path):
    mark = uuid.uuid4().hex
    deck, rec = make_deck(remote_agent(sshd, tmp_path, mark=mark))
    await deck.call("ChatService.Send", {"agent": "far", "text": "slow"})
    await rec.wait(lambda r: any("tick" in (d.get("text") or "") for d in r.named("message:delta", "far")), timeout=60)
    for connection in sshd.connections():
        connection.kill()  # the server's side of the connection goes
    failed = await rec.wait_event("agent:state", agent="far", state="error", timeout=60)
    assert "the connection to testbox failed or was lost" in failed["error"]
    assert wait_unmarked(mark, timeout=30) == []  # and what ran there ended with it


async def test_an_unknown_host_key_fails_at_once_with_no_prompt(make_deck, sshd, tmp_path):
    strict = sshd.client_config("empty_known_hosts", "strict_config")
    deck, rec = make_deck(remote_agent(sshd, tmp_path, config=strict, own=True))
    with pytest.raises(Exception) as failed:
        await deck.call("AgentService.Start", {"name": "far"})
    assert "testbox" in str(failed.value)
    assert any("Host key verification failed" in line for line in deck.agent("far").logs)


def test_a_remote_agent_needs_an_absolute_cwd_and_ssh_needs_a_host(tmp_path):
    for table, said in (
        (agent_table("far", ["x"], host="testbox"), "needs cwd, an absolute path there"),
        (agent_table("far", ["x"], host="testbox", cwd="work"), "cwd 'work' is not an absolute path on testbox"),
        (agent_table("far", ["x"], ssh=["-p", "2222"]), "ssh arguments are for an agent with a host"),
        (agent_table("far", ["x"], host="-oProxyCommand=x", cwd="/w"), "is not a host name"),
    ):
        (tmp_path / "deck.toml").write_text(table)
        result = subprocess.run([*DECK, "config", "validate", str(tmp_path / "deck.toml")], capture_output=True, text=True, timeout=30)
        assert result.returncode == 1 and said in result.stdout + result.stderr, (table, result.stdout, result.stderr)


def test_deck_agents_check_asks_the_host(sshd, tmp_path):
    good = remote_agent(sshd, tmp_path)
    missing = agent_table("gone", ["no-such-agent-here"], cwd=str(tmp_path), host="testbox", ssh=["-F", str(sshd.config)])
    nowhere = agent_table("lost", ["x"], cwd="/no/such/folder", host="testbox", ssh=["-F", str(sshd.config)])
    strict_config = str(sshd.client_config("empty_known_hosts", "check_config"))
    strict = agent_table("strict", ["x"], cwd=str(tmp_path), host="testbox", ssh=["-F", strict_config, "-o", "ControlPath=none"])
    boxed = agent_table("boxed", [sys.executable, str(FAKE_AGENT)], cwd=str(tmp_path), host="testbox", ssh=["-F", str(sshd.config)],
                        sandbox=True)  # fmt: skip
    (tmp_path / "deck.toml").write_text(good + missing + nowhere + strict + boxed)
    result = subprocess.run([*DECK, "agents", "--check", "--json", "--config", str(tmp_path / "deck.toml")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    assert rows["far"]["found"] == f"testbox:{sys.executable}" and "problem" not in rows["far"]
    assert rows["boxed"]["sandbox"] == {"ok": True} and "sandbox" not in rows["far"]  # bwrap works on the host
    assert rows["gone"]["problem"] == "command not found on testbox: no-such-agent-here"
    assert rows["lost"]["problem"] == "working directory does not exist on testbox: /no/such/folder"
    assert rows["strict"]["problem"].startswith("testbox not reachable through ssh: ") and "Host key verification failed" in rows["strict"]["problem"]


async def test_two_agents_on_one_host_share_one_connection(make_deck, sshd, tmp_path):
    """The second agent on a host goes through the connection the first opened (ssh's ControlMaster)."""
    control = Path(tempfile.mkdtemp(prefix="dk-ssh-", dir="/tmp"))  # the test's own (and short: a socket's path)
    extra = ["-o", f"ControlPath={control}/%C"]
    first = remote_agent(sshd, tmp_path)
    first = first.replace(f'"-F", "{sshd.config}"', f'"-F", "{sshd.config}", "{extra[0]}", "{extra[1]}"')
    second = first.replace("[agents.far]", "[agents.near]")
    before = {c.pid for c in sshd.connections()}  # an earlier test's may end meanwhile: only new ones count
    deck, rec = make_deck(first + second)
    await deck.call("AgentService.Start", {"name": "far"})
    await deck.call("AgentService.Start", {"name": "near"})
    assert len({c.pid for c in sshd.connections()} - before) == 1  # one new connection for both
    assert len(list(control.iterdir())) == 1  # its socket
    await deck.shutdown()
    shutil.rmtree(control, ignore_errors=True)


async def test_after_a_lost_connection_the_next_start_resumes_the_conversation(make_deck, sshd, tmp_path):
    """The connection goes mid-conversation: the agent is in error; the next message starts it again on the
    host, and its session is resumed (History and resume), not a new one."""
    requests = tmp_path / "requests.jsonl"
    flags = ("--resume", "--sessions", str(tmp_path / "sessions.json"), "--requests", str(requests))
    deck, rec = make_deck(remote_agent(sshd, tmp_path, *flags, own=True))
    assert await say(deck, rec, "first") == "You said: first"
    session = deck.agents["far"].session_id
    for connection in sshd.connections():
        connection.kill()
    await rec.wait_event("agent:state", agent="far", state="error", timeout=60)
    assert await say(deck, rec, "second") == "You said: second"
    methods = [json.loads(line)["method"] for line in requests.read_text().splitlines()]
    assert methods.count("initialize") == 2 and "session/resume" in methods
    resumed = [json.loads(line)["params"] for line in requests.read_text().splitlines() if '"session/resume"' in line]
    assert resumed[0]["sessionId"] == session


def test_the_connections_folder_must_be_the_users_own(tmp_path, monkeypatch):
    """A folder planted at the connections' place (a symlink, or one others may enter) is refused, not used."""
    from deck.agent.remote import control_dir
    from deck.proc.supervisor import SpawnError

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (tmp_path / "deck-ssh").symlink_to(elsewhere)
    with pytest.raises(SpawnError, match="not a folder of your own"):
        control_dir()
    (tmp_path / "deck-ssh").unlink()
    (tmp_path / "deck-ssh").mkdir(mode=0o777)
    os.chmod(tmp_path / "deck-ssh", 0o777)
    with pytest.raises(SpawnError, match="not a folder of your own"):
        control_dir()
    os.chmod(tmp_path / "deck-ssh", 0o700)
    assert control_dir() == tmp_path / "deck-ssh"


async def test_a_sandboxed_agent_on_a_host_runs_under_bwrap_there(make_deck, sshd, tmp_path):
    base = Path(tempfile.mkdtemp(prefix="deck-remote-sandbox-", dir="/var/tmp"))  # outside the sandbox's own /tmp
    try:
        work, secret = base / "work", base / "secret"
        work.mkdir()
        secret.mkdir()
        (secret / "key").write_text("the host's secret")
        probe = Path(__file__).parents[2] / "agents" / "sandbox_probe.py"
        table = agent_table(
            "far", [sys.executable, str(probe)], cwd=str(work), host="testbox", ssh=["-F", str(sshd.config)],
        ) + f'sandbox = {{ hide = ["{secret}"] }}\n'  # fmt: skip
        deck, rec = make_deck(table)
        wanted = {"read": [str(secret / "key")], "write": [str(work / "mine.txt"), str(base / "planted")]}
        found = json.loads(await say(deck, rec, "probe " + json.dumps(wanted)))
        assert found[f"read {secret / 'key'}"].startswith("refused")
        assert found[f"write {work / 'mine.txt'}"] == "GOT: written" and (work / "mine.txt").exists()
        assert found[f"write {base / 'planted'}"].startswith("refused") and not (base / "planted").exists()
        assert found["pid"] == "2"  # a PID namespace of its own, there
    finally:
        shutil.rmtree(base, ignore_errors=True)
