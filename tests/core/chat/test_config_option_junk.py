"""Config options an agent garbles (`options` a number, a string, an object or a list of non-objects,
values and current values of the wrong type, groups malformed or nested) are dropped where they
enter deck, in its `session/new` answer and in `config_option_update`: the line frontend and the
console show the well-formed ones and never meet the rest. A real agent (tests/agents/escapes_agent.py),
the line frontend as a real `deck` process, the console on a real deck."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from deck.chat.conversation import option_values
from deck.frontends.urwid.app import ConsoleApp, setting_choices
from deck.runtime.local import LocalClient

from tests.agents.escapes_agent import JUNK_KEPT, JUNK_OPTIONS
from tests.conftest import AGENTS, agent_block
from tests.frontends.test_line import LineDeck, plain_env

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

ESCAPES_AGENT = AGENTS / "escapes_agent.py"
#: The options `/set` lists for JUNK_OPTIONS, in the agent's order.
LISTED = [
    "[j] model = m1 (Model: m1, m2, m3)",
    "[j] effort = low (effort: low, high)",
    "[j] fast = off (Fast: on, off)",
]
#: The ids of JUNK_OPTIONS deck drops.
DROPPED = ("number", "text", "object", "scalars", "current", "flag")


def junk_agent(*flags: str) -> str:
    return agent_block("j", command=[sys.executable, str(ESCAPES_AGENT), *flags])


class LineDeckWithStderr(LineDeck):
    """The line frontend as LineDeck runs it, its stderr kept."""

    def spawn(self, command: list[str], env: dict[str, str]) -> None:
        self.stderr = b""
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.lines: list[str] = []
        self.raw: list[bytes] = []
        self.cursor = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_stderr, daemon=True)
        self._err_reader.start()

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:  # type: ignore[union-attr]
            self.stderr += raw


def test_the_options_deck_keeps_of_junk_are_the_well_formed_ones() -> None:
    from deck.chat.conversation import Conversation

    conv = Conversation("j", lambda event: None)
    conv.session_started("s1", {"configOptions": JUNK_OPTIONS})
    assert {o["id"]: option_values(o) for o in conv.config_options} == JUNK_KEPT
    model, effort, fast = conv.config_options
    assert "category" not in model and effort["name"] == "effort" and "description" not in effort  # junk fields go
    assert [v["name"] for v in model["options"]] == ["M1", "m2", "M3"]  # a name that is no string: its value
    assert [g["group"] for g in effort["options"]] == ["g1", "g7"]
    assert fast == {"id": "fast", "name": "Fast", "type": "boolean", "currentValue": False}
    conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": 5})
    assert conv.config_options == []
    conv.apply_update({"sessionUpdate": "config_option_update", "configOptions": JUNK_OPTIONS})
    assert [o["id"] for o in conv.config_options] == list(JUNK_KEPT)


def test_the_line_frontend_lists_the_well_formed_options_of_junk_and_logs_no_traceback(tmp_path: Path) -> None:
    config = tmp_path / "deck.toml"
    config.write_text(junk_agent("--junk-options"))
    deck = LineDeckWithStderr(config)
    try:
        deck.expect(r"\[deck\] talking to j; /help lists the commands")
        deck.send("/set")  # its session/new answer's options
        for line in LISTED:
            deck.expect(re.escape(line))
        deck.send("junk")  # the same in a config_option_update
        deck.expect(r"\[j\] done")
        deck.expect(r"\[j\] ready")
        deck.send("/set")
        for line in LISTED:
            deck.expect(re.escape(line))
        deck.send("/set number 1")
        deck.expect(r".*no config option 'number' \(options: model, effort, fast\)")
        assert deck.close() == 0
    finally:
        if deck.proc.poll() is None:
            deck.proc.kill()
            deck.proc.wait()
    deck._err_reader.join(5)
    output = "\n".join(deck.lines)
    assert not [line for line in deck.lines if any(f"] {dropped} =" in line for dropped in DROPPED)], output
    assert "Error" not in output and deck.stderr == b"", (output, deck.stderr)
    log = Path(plain_env()["XDG_STATE_HOME"]) / "deck" / "deck.log"
    assert "Traceback" not in (log.read_text() if log.exists() else "")


async def test_the_consoles_settings_show_the_well_formed_options_of_junk_and_log_no_traceback(make_deck, caplog) -> None:
    caplog.set_level(logging.WARNING)
    deck, rec = make_deck(junk_agent("--junk-options"))
    client = LocalClient(deck)
    app = ConsoleApp(client, await client.call("ConfigService.Current"))
    await app.attach(asyncio.get_running_loop())
    try:
        await client.call("AgentService.Start", {"name": "j"})
        for prompt in ("", "junk"):  # the options of its session/new answer, then of a config_option_update
            if prompt:
                deck.chat.send("j", prompt)
                await rec.wait_event("turn:changed", agent="j", busy=False)
            conv = await client.call("ChatService.Conversation", {"agent": "j"})
            labels = [label for label, _setting in setting_choices(conv)]
            assert labels == ["Model: M1", "effort: Low", "Fast: off"]
            app.select("j")
            app.open_settings()
            await asyncio.gather(*app._tasks)
            assert app.dialog_kind == "settings"
            shown = "\n".join(line.decode() for line in app.root.render((120, 40)).text)
            assert all(label in shown for label in labels), shown
            assert not [dropped for dropped in ("Number", "Text", "Object", "Scalars", "Current", "Flag") if dropped in shown]
            app.shown_dialog.keypress((60,), "1")  # Model: its values
            shown = "\n".join(line.decode() for line in app.root.render((120, 40)).text)
            assert "M1" in shown and "m2" in shown and "M3" in shown, shown
            app.close_dialog()
    finally:
        app.detach()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info], caplog.records
