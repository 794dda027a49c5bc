"""deck against the chuk-acp echo agent (PyPI chuk-acp 0.3.2): an independent ACP implementation."""

from __future__ import annotations

import pytest

from .conftest import agent_toml, chuk_command

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]


async def test_plain_turn(peer_deck, workdir):
    pd = peer_deck(agent_toml("echo", chuk_command(), workdir))
    deck, rec = pd.deck, pd.rec
    sent = deck.chat.turns.send("echo", "hello chuk")
    await rec.wait(lambda r: (m := deck.chat.conversation("echo").messages)[-1].role == "agent" and m[-1].done)
    user, reply = deck.chat.conversation("echo").messages
    assert user.id == sent.id
    assert reply.text == "Echo: You said 'hello chuk'"
    assert reply.stop_reason == "end_turn" and reply.error is None
    assert [(d["messageId"], d["kind"]) for d in rec.named("message:delta", "echo")] == [(reply.id, "text")]
    await rec.wait_event("turn:changed", agent="echo", busy=False, queued=0)
    assert rec.states("echo") == ["starting", "ready", "busy", "ready"]
    (prompt,) = pd.schema.sent("session/prompt")
    assert prompt["params"]["prompt"] == [{"type": "text", "text": "hello chuk"}]
    await pd.close()
    assert rec.states("echo")[-1] == "stopped"
