"""ChatService against real subprocess agents: send, queue, cancel, permissions, fs, questions, modes."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest
from deck.chat import turns as turns_module
from deck.errors import ServiceError

from tests.conftest import agent_block
from tests.turns import ask, deltas, wait_reply

pytestmark = pytest.mark.anyio


# -- Send ------------------------------------------------------------------------------------


async def test_send_errors(make_deck):
    deck, rec = make_deck(agent_block("a"))
    with pytest.raises(ServiceError, match="empty message"):
        deck.chat.send("a", "  \n ")
    with pytest.raises(ServiceError, match="unknown agent 'nope'"):
        deck.chat.send("nope", "hi")
    assert deck.chat.conversation("a").messages == []
    assert deck.agents["a"].state.value == "stopped"  # nothing was started


async def test_send_starts_the_agent_and_returns_the_message_id(make_deck):
    deck, rec = make_deck(agent_block("a"))
    message_id = deck.chat.send("a", "hello")
    conv = deck.chat.conversation("a")
    assert conv.messages[0].id == message_id and conv.messages[0].role == "user"
    reply = await wait_reply(deck, rec, conv.messages[0])
    assert reply.text == "You said: hello" and reply.stop_reason == "end_turn"
    assert rec.states("a") == ["starting", "ready", "busy", "ready"]


async def test_messages_sent_during_a_turn_are_queued_then_sent_in_order(make_deck):
    deck, rec = make_deck(agent_block("a"))
    first = deck.chat.turns.send("a", "sleep 0.5")
    await rec.wait_event("turn:changed", agent="a", busy=True)
    q1 = deck.chat.turns.send("a", "one")
    q2 = deck.chat.turns.send("a", "two")
    assert (q1.queued, q2.queued) == (True, True)
    assert [t["queued"] for t in rec.named("turn:changed", "a")] == [0, 1, 2]
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["busy"] is True and snap["queued"] == 2
    assert [m["queued"] for m in snap["messages"] if m["role"] == "user"] == [False, True, True]
    r1 = await wait_reply(deck, rec, q1)
    r2 = await wait_reply(deck, rec, q2)
    assert (await wait_reply(deck, rec, first)).text == "slept"
    assert (r1.text, r2.text) == ("You said: one", "You said: two")
    roles = [(m.role, m.text) for m in deck.chat.conversation("a").messages]
    assert roles == [
        ("user", "sleep 0.5"), ("agent", "slept"), ("user", "one"), ("user", "two"),
        ("agent", "You said: one"), ("agent", "You said: two"),
    ]  # fmt: skip
    assert not q1.queued and not q2.queued
    unqueued = [u["message"]["id"] for u in rec.named("message:updated") if u["message"]["id"] in (q1.id, q2.id)]
    assert unqueued == [q1.id, q2.id, q1.id, q2.id]  # added queued, then flipped when sent
    await rec.wait(lambda r: r.named("turn:changed", "a")[-1] == {"agent": "a", "busy": False, "queued": 0})


async def test_a_message_sent_while_the_agent_starts_is_counted_by_the_turn(make_deck):
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "one")
    second = deck.chat.turns.send("a", "two")  # the agent is still starting for "one"
    assert second.queued
    await wait_reply(deck, rec, second)
    changes = [(t["busy"], t["queued"]) for t in rec.named("turn:changed", "a")]
    assert changes[0] == (True, 1)  # never "not busy, one waiting" while it starts
    assert changes[-1] == (False, 0)


# -- Cancel ----------------------------------------------------------------------------------


async def test_cancel_keeps_the_partial_answer_and_abandons_the_queue(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "slow")
    await rec.wait_event("message:delta", agent="a")
    queued = deck.chat.turns.send("a", "never sent")
    result = deck.chat.cancel("a")
    assert result == {"cancelled": True, "abandoned": 1}
    assert queued.error == "cancelled" and not queued.queued
    reply = await wait_reply(deck, rec, user)
    # The fake agent loops until it receives session/cancel: this stop reason is its answer to it.
    assert reply.stop_reason == "cancelled" and reply.error is None
    assert reply.text.startswith("tick ")
    await rec.wait(lambda r: r.named("turn:changed", "a")[-1]["busy"] is False)
    await asyncio.sleep(0.3)
    agents = [m for m in deck.chat.conversation("a").messages if m.role == "agent"]
    assert agents == [reply]  # the abandoned message was never prompted
    abandoned = [u["message"] for u in rec.named("message:updated") if u["message"]["id"] == queued.id][-1]
    assert abandoned["error"] == "cancelled" and abandoned["queued"] is False


async def test_cancel_answers_a_pending_permission_cancelled(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perm")
    request = await rec.wait_event("permission:requested", agent="a")
    deck.chat.cancel("a")
    assert await rec.wait_event("permission:resolved", id=request["id"]) == {"id": request["id"], "agent": "a"}
    reply = await wait_reply(deck, rec, user)
    assert "permission: cancelled" in reply.text and reply.stop_reason == "cancelled"
    assert (await deck.chat.conversation_snapshot("a"))["permissions"] == []
    with pytest.raises(ServiceError, match="no pending permission"):
        deck.chat.answer_permission(request["id"], "yes")


async def test_a_permission_asked_after_the_cancel_is_answered_cancelled_and_never_waits(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perm-after-cancel")
    await rec.wait_event("message:delta", agent="a")
    deck.chat.cancel("a")
    reply = await wait_reply(deck, rec, user)
    assert 'late permission: {"outcome": {"outcome": "cancelled"}}' in reply.text
    assert rec.named("permission:requested") == [] and deck.chat.pending.inbox() == []


async def test_a_permission_left_unanswered_by_a_turn_that_ended_leaves_the_inbox(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perm-and-end")
    request = await rec.wait_event("permission:requested", agent="a")
    await wait_reply(deck, rec, user)
    await rec.wait_event("permission:resolved", id=request["id"])
    assert deck.chat.pending.inbox() == []


async def test_late_updates_after_a_cancel_never_reach_the_next_turn(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "cancel-late")
    await rec.wait_event("message:delta", agent="a")
    deck.chat.cancel("a")
    following = deck.chat.turns.send("a", "sleep 2")  # queued behind the turn still ending
    cancelled = await wait_reply(deck, rec, user)
    assert cancelled.stop_reason == "cancelled"
    nxt = await wait_reply(deck, rec, following)
    assert nxt.text == "slept"
    # late-a came right after the cancelled response; late-b 1 s later, while the next turn ran.
    assert cancelled.text.endswith("late-a late-b")
    late_b = next(i for i, e in enumerate(rec.events) if e.name == "message:delta" and e.payload().get("text") == "late-b")
    next_started = next(
        i for i, e in enumerate(rec.events)
        if e.name == "message:updated" and e.payload()["message"]["id"] == nxt.id
    )  # fmt: skip
    assert next_started < late_b
    assert all(d["messageId"] == cancelled.id for d in deltas(rec, cancelled.id))
    assert [d["text"] for d in deltas(rec, nxt.id)] == ["slept"]


async def test_an_agent_that_ignores_cancel_has_its_turn_ended_by_deck_and_goes_on(make_deck, monkeypatch):
    monkeypatch.setattr(turns_module, "END_TURN_GRACE", 0.3)
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "deaf 1.5")  # ignores session/cancel; answers 1.5 s later all the same
    await rec.wait_event("message:delta", agent="a")
    assert deck.chat.cancel("a") == {"cancelled": True, "abandoned": 0}
    following = deck.chat.turns.send("a", "next")  # queued behind the turn that does not end
    cancelled = await wait_reply(deck, rec, user, timeout=1.5)
    assert cancelled.stop_reason == "cancelled" and cancelled.text == "working "
    assert cancelled.error == "the agent did not stop within 0.3s of the cancel: deck ended its turn"
    assert any("no answer to session/prompt 0.3s after session/cancel" in line for line in deck.agents["a"].logs)
    nxt = await wait_reply(deck, rec, following, timeout=2)  # the same agent, the same session
    assert (nxt.text, nxt.stop_reason, nxt.error) == ("You said: next", "end_turn", None)
    assert rec.states("a") == ["starting", "ready", "busy", "ready", "busy", "ready"]
    await rec.wait_event("agent:log", agent="a", line="deaf: answered")  # its late answer changes nothing
    await asyncio.wait_for(deck.chat.drain(), 1)  # what end of input waits for
    assert (cancelled.stop_reason, cancelled.error is not None, nxt.stop_reason) == ("cancelled", True, "end_turn")
    assert [m.role for m in deck.chat.conversation("a").messages] == ["user", "agent", "user", "agent"]


async def test_an_agent_that_never_answers_leaves_nothing_waiting_after_a_cancel(make_deck, monkeypatch):
    monkeypatch.setattr(turns_module, "END_TURN_GRACE", 0.3)
    deck, rec = make_deck(agent_block("a"))
    deck.chat.send("a", "deaf")
    await rec.wait_event("message:delta", agent="a")
    deck.chat.cancel("a")
    await asyncio.wait_for(deck.chat.drain(), 1.5)  # end of input can finish: deck then exits
    assert rec.named("turn:changed", "a")[-1] == {"agent": "a", "busy": False, "queued": 0}
    assert deck.agents["a"].state.value == "ready"


def turn_events(rec, since: int = 0) -> list[tuple[str, object]]:
    """The turn and message events from `since` on, each as (name, what it says): busy and queued,
    or the message's role and whether it is queued or done."""
    out: list[tuple[str, object]] = []
    for event in rec.events[since:]:
        p = event.payload()
        if event.name == "turn:changed":
            out.append((event.name, (p["busy"], p["queued"])))
        elif event.name == "message:updated":
            m = p["message"]
            out.append((event.name, (m["role"], "queued" if m.get("queued") else "done" if m["done"] else "open")))
    return out


async def test_a_turn_begins_with_turn_changed_and_cancel_announces_only_what_changed(make_deck):
    deck, rec = make_deck(agent_block("a"))
    assert deck.chat.cancel("a") == {"cancelled": False, "abandoned": 0}  # never used: nothing to say
    first = deck.chat.turns.send("a", "sleep 0.3")
    second = deck.chat.turns.send("a", "two")
    await wait_reply(deck, rec, second)
    assert turn_events(rec) == [
        ("message:updated", ("user", "done")), ("message:updated", ("user", "queued")),
        ("turn:changed", (True, 1)), ("message:updated", ("agent", "open")),  # the turn begins, then its answer
        ("message:updated", ("agent", "done")), ("turn:changed", (False, 1)),
        ("turn:changed", (True, 0)), ("message:updated", ("user", "done")),  # the queued one is sent
        ("message:updated", ("agent", "open")), ("message:updated", ("agent", "done")), ("turn:changed", (False, 0)),
    ]  # fmt: skip
    assert (await wait_reply(deck, rec, first)).text == "slept"

    seen = len(rec.events)
    assert deck.chat.cancel("a") == {"cancelled": False, "abandoned": 0}  # idle: no turn:changed
    ticks = len(rec.named("message:delta", "a"))
    user = deck.chat.turns.send("a", "slow")
    await rec.wait(lambda r: len(r.named("message:delta", "a")) > ticks)
    assert deck.chat.cancel("a") == {"cancelled": True, "abandoned": 0}  # nothing queued: the turn's end says it
    await wait_reply(deck, rec, user)
    await rec.wait(lambda r: r.named("turn:changed", "a")[-1]["busy"] is False)
    assert turn_events(rec, seen) == [
        ("message:updated", ("user", "done")), ("turn:changed", (True, 0)), ("message:updated", ("agent", "open")),
        ("message:updated", ("agent", "done")), ("turn:changed", (False, 0)),
    ]  # fmt: skip


async def test_cancel_while_the_agent_starts_sends_nothing(make_deck, caplog):
    deck, rec = make_deck(agent_block("a", "--handshake-delay", "0.5"))
    user = deck.chat.turns.send("a", "hello")
    await rec.wait_event("agent:state", agent="a", state="starting")
    assert deck.chat.cancel("a") == {"cancelled": False, "abandoned": 1}
    assert user.error == "cancelled"
    with caplog.at_level(logging.ERROR):
        await rec.wait_event("agent:state", agent="a", state="ready")
        await asyncio.sleep(0.2)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [m.role for m in deck.chat.conversation("a").messages] == ["user"]
    await asyncio.wait_for(deck.chat.drain(), 1)  # no turn is left running
    reply = await ask(deck, rec, "again")
    assert reply.text == "You said: again"


# -- permissions -----------------------------------------------------------------------------


async def test_permission_round_trip(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perm")
    request = await rec.wait_event("permission:requested", agent="a")
    conv = deck.chat.conversation("a")
    reply = conv.messages[-1]
    assert set(request) == {"id", "agent", "messageId", "toolCall", "options", "rejections"}
    assert request["messageId"] == reply.id and request["rejections"] == 0
    assert request["toolCall"]["id"] == "t1" and request["toolCall"]["title"] == "Edit file"
    assert request["toolCall"]["kind"] == "edit"  # merged with the tool call sent before
    assert request["toolCall"]["diffs"] == [{"path": "/x", "oldText": "a", "newText": "b", "newFile": False}]
    assert [o["optionId"] for o in request["options"]] == ["yes", "no"]
    assert (await deck.chat.conversation_snapshot("a"))["permissions"] == [request]
    with pytest.raises(ServiceError, match="no pending permission request 'perm-0'"):
        deck.chat.answer_permission("perm-0", "yes")
    with pytest.raises(ServiceError, match="unknown option 'maybe'"):
        deck.chat.answer_permission(request["id"], "maybe")
    assert deck.chat.answer_permission(request["id"], "yes") == {"id": request["id"], "optionId": "yes"}
    resolved = await rec.wait_event("permission:resolved", id=request["id"])
    assert resolved == {"id": request["id"], "agent": "a", "optionId": "yes"}
    reply = await wait_reply(deck, rec, user)
    assert reply.text == "permission: yes" and reply.stop_reason == "end_turn"
    assert reply.parts[0].to_dict()["status"] == "completed"
    with pytest.raises(ServiceError, match="no pending permission"):
        deck.chat.answer_permission(request["id"], "yes")


async def test_rejections_count_refusals_of_the_turn(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perms 2 edit")
    first = await rec.wait_event("permission:requested", agent="a")
    assert first["rejections"] == 0
    deck.chat.answer_permission(first["id"], "no")
    second = await rec.wait(lambda r: r.named("permission:requested")[1:] and r.named("permission:requested")[1])
    assert second["rejections"] == 1
    deck.chat.answer_permission(second["id"], "yes")
    reply = await wait_reply(deck, rec, user)
    assert reply.text == "p0: no; p1: yes; "
    user = deck.chat.turns.send("a", "perms 1 edit")
    third = await rec.wait(lambda r: r.named("permission:requested")[2:] and r.named("permission:requested")[2])
    assert third["rejections"] == 0  # a new turn starts from zero
    deck.chat.answer_permission(third["id"], "no")
    await wait_reply(deck, rec, user)


async def test_policy_allow_approves_every_request(make_deck):
    deck, rec = make_deck(agent_block("a", permissions="allow"))
    reply = await ask(deck, rec, "perms 2 execute")
    assert reply.text == "p0: yes; p1: yes; "
    assert rec.named("permission:requested") == []
    assert any("granted by the config" in line for line in await deck.agent_service.logs("a"))


async def test_policy_allow_reads_approves_reads_only(make_deck):
    deck, rec = make_deck(agent_block("a", permissions="allow-reads"))
    assert (await ask(deck, rec, "perms 1 read")).text == "p0: yes; "
    assert (await ask(deck, rec, "perms 1 search")).text == "p0: yes; "
    assert rec.named("permission:requested") == []
    user = deck.chat.turns.send("a", "perms 1 edit")
    request = await rec.wait_event("permission:requested", agent="a")
    deck.chat.answer_permission(request["id"], "no")
    assert (await wait_reply(deck, rec, user)).text == "p0: no; "


async def test_default_policy_asks(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "perms 1 read")
    request = await rec.wait_event("permission:requested", agent="a")
    deck.chat.answer_permission(request["id"], "always")
    assert (await wait_reply(deck, rec, user)).text == "p0: always; "


# -- fs/* ------------------------------------------------------------------------------------


@pytest.fixture
def workdir(tmp_path):
    work = tmp_path / "work"
    outside = tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("secret\n")
    (work / "lines.txt").write_text("l1\nl2\nl3\nl4\n")
    (work / "escape").symlink_to(outside)
    (work / "secret-link.txt").symlink_to(outside / "secret.txt")
    return work


def fs_answer(reply) -> dict:
    return json.loads(reply.text)


async def test_read_text_file_with_line_and_limit(make_deck, workdir):
    deck, rec = make_deck(agent_block("a", cwd=str(workdir)))
    path = workdir / "lines.txt"
    assert fs_answer(await ask(deck, rec, f"read {path}")) == {"content": "l1\nl2\nl3\nl4\n"}
    assert fs_answer(await ask(deck, rec, f"readlines {path} 2 2")) == {"content": "l2\nl3\n"}
    assert fs_answer(await ask(deck, rec, f"readlines {path} 4 10")) == {"content": "l4\n"}
    missing = fs_answer(await ask(deck, rec, f"read {workdir / 'missing.txt'}"))
    assert missing["code"] == -32002


@pytest.mark.parametrize("name", ["../outside/secret.txt", "escape/secret.txt", "secret-link.txt"])
async def test_reads_outside_the_cwd_are_refused(make_deck, workdir, name):
    deck, rec = make_deck(agent_block("a", cwd=str(workdir)))
    answer = fs_answer(await ask(deck, rec, f"read {workdir}/{name}"))
    assert answer["code"] == -32602 and "outside the agent's working directory" in answer["message"]
    assert "secret" not in json.dumps(answer).replace("secret.txt", "").replace("secret-link", "")


async def test_write_text_file_is_atomic(make_deck, workdir):
    deck, rec = make_deck(agent_block("a", cwd=str(workdir)))
    target = workdir / "lines.txt"
    target.chmod(0o640)
    before = target.stat().st_ino
    assert fs_answer(await ask(deck, rec, f"write {target} new text")) == {"ok": True}
    assert target.read_text() == "new text"
    assert target.stat().st_ino != before  # a new file renamed over the old one, not rewritten in place
    assert target.stat().st_mode & 0o777 == 0o640
    fresh = workdir / "fresh.txt"
    assert fs_answer(await ask(deck, rec, f"write {fresh} hello")) == {"ok": True}
    assert fresh.read_text() == "hello"
    assert sorted(p.name for p in workdir.iterdir()) == ["escape", "fresh.txt", "lines.txt", "secret-link.txt"]


@pytest.mark.parametrize("name", ["../outside/new.txt", "escape/new.txt", "secret-link.txt", "../work-sibling.txt"])
async def test_writes_outside_the_cwd_are_refused_and_write_nothing(make_deck, workdir, name):
    deck, rec = make_deck(agent_block("a", cwd=str(workdir)))
    outside = workdir.parent / "outside"
    answer = fs_answer(await ask(deck, rec, f"write {workdir}/{name} pwned"))
    assert answer["error"]["code"] == -32602
    assert "outside the agent's working directory" in answer["error"]["message"]
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret\n"
    beside = sorted(p.name for p in workdir.parent.iterdir() if p.name != "state")  # state/: deck's own ($XDG_STATE_HOME)
    assert beside == ["deck.toml", "outside", "work"]


async def test_relative_paths_are_refused(make_deck, workdir):
    deck, rec = make_deck(agent_block("a", cwd=str(workdir)))
    answer = fs_answer(await ask(deck, rec, "read lines.txt"))
    assert answer["code"] == -32602 and "absolute" in answer["message"]


# -- modes, config options, questions ----------------------------------------------------------


async def test_modes_and_config_options_from_session_new_and_set(make_deck):
    deck, rec = make_deck(agent_block("a", "--modes"))
    await deck.agent_service.start("a")
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"]["currentModeId"] == "a"
    assert [m["id"] for m in snap["modes"]["availableModes"]] == ["a", "b"]
    assert [(o["id"], o["currentValue"]) for o in snap["configOptions"]] == [("model", "m1")]
    result = await deck.chat.set_mode("a", "b")
    assert result["modes"]["currentModeId"] == "b" and len(result["modes"]["availableModes"]) == 2
    result = await deck.chat.set_config_option("a", "model", "m2")
    assert result["configOptions"][0]["currentValue"] == "m2"  # the agent's answer
    snap = await deck.chat.conversation_snapshot("a")
    assert snap["modes"]["currentModeId"] == "b" and snap["configOptions"][0]["currentValue"] == "m2"
    fields = [(c["field"], c["value"]) for c in rec.named("conversation:changed", "a")]
    assert ("configOptions", result["configOptions"]) in fields
    with pytest.raises(ServiceError, match="unknown agent"):
        await deck.chat.set_mode("nope", "b")


async def test_a_config_option_value_the_agent_does_not_offer_is_refused_before_anything_is_sent(make_deck):
    deck, rec = make_deck(agent_block("a", "--modes", "--boolean-option"))
    await deck.chat.set_config_option("a", "model", "m2")
    refusals = [("model", "huge", "model of a offers no value 'huge' (values: m1, m2)"),
                ("model", True, "model of a offers no value True (values: m1, m2)"),
                ("fast", "yes", "fast of a is true or false, not 'yes'"),
                ("nope", "x", "a offers no option 'nope' (options: model, fast)")]  # fmt: skip
    for config_id, value, said in refusals:
        with pytest.raises(ServiceError) as refused:
            await deck.call("ChatService.SetConfigOption", {"agent": "a", "configId": config_id, "value": value})
        assert str(refused.value) == said and refused.value.code == -32000
    conv = deck.chat.conversation("a")
    assert conv.choices["options"] == {"model": "m2"}  # the choice kept is the last one the agent took
    assert [o["currentValue"] for o in conv.config_options] == ["m2", False]


async def test_an_agent_that_refuses_a_setting_gives_its_reason_as_the_callers_error(make_deck):
    deck, rec = make_deck(agent_block("a", "--modes", "--refuse-settings"))
    for method, params, what in (("ChatService.SetConfigOption", {"configId": "model", "value": "m2"}, "model = m2"),
                                 ("ChatService.SetMode", {"modeId": "b"}, "mode b")):  # fmt: skip
        with pytest.raises(ServiceError) as refused:
            await deck.call(method, {"agent": "a", **params})
        assert str(refused.value) == f"a refused {what}: not now, thank you" and refused.value.code == -32000
    assert deck.chat.conversation("a").choices.get("options") in (None, {})


async def test_question_answered(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "question")
    question = await rec.wait_event("question:requested", agent="a")
    reply = deck.chat.conversation("a").messages[-1]
    assert question == {
        "id": question["id"], "agent": "a", "messageId": reply.id, "message": "Your name?",
        "schema": {"type": "object", "properties": {"name": {"type": "string"}}},
    }  # fmt: skip
    with pytest.raises(ServiceError, match="no pending question"):
        deck.chat.answer_question("question-0", {"name": "x"})
    deck.chat.answer_question(question["id"], {"name": "Ann"})
    assert await rec.wait_event("question:resolved", id=question["id"]) == {"id": question["id"], "agent": "a"}
    reply = await wait_reply(deck, rec, user)
    assert json.loads(reply.text) == {"action": "accept", "content": {"name": "Ann"}}


async def test_question_declined(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "question")
    question = await rec.wait_event("question:requested", agent="a")
    deck.chat.answer_question(question["id"], None)
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "decline"}


async def test_cancel_cancels_a_pending_question(make_deck):
    deck, rec = make_deck(agent_block("a"))
    user = deck.chat.turns.send("a", "slow-question")
    question = await rec.wait_event("question:requested", agent="a")
    deck.chat.cancel("a")
    await rec.wait_event("question:resolved", id=question["id"])
    reply = await wait_reply(deck, rec, user)
    assert reply.text == 'asking {"action": "cancel"}' and reply.stop_reason == "cancelled"  # the user declined nothing


# -- what waits for the user: one registry -------------------------------------------------------


async def test_pending_lists_permissions_and_questions_in_the_order_asked(make_deck):
    deck, rec = make_deck(agent_block("a") + agent_block("b"))
    deck.chat.send("a", "perm")
    permission = await rec.wait_event("permission:requested", agent="a")
    deck.chat.send("b", "question")
    question = await rec.wait_event("question:requested", agent="b")
    assert await deck.call("ChatService.Pending", None) == [
        {**permission, "kind": "permission"}, {**question, "kind": "question"}]  # fmt: skip
    # Each kind is answered by its own method only.
    with pytest.raises(ServiceError, match="no pending question"):
        deck.chat.answer_question(permission["id"], None)
    with pytest.raises(ServiceError, match="no pending permission request"):
        deck.chat.answer_permission(question["id"], "yes")
    deck.chat.answer_permission(permission["id"], "yes")
    assert deck.chat.list_pending() == [{**question, "kind": "question"}]  # answered: gone at once
    deck.chat.answer_question(question["id"], {"name": "Ann"})
    await rec.wait_event("question:resolved", id=question["id"])
    assert deck.chat.list_pending() == []


# -- system messages and crashes -----------------------------------------------------------------


async def test_agent_unavailable_when_it_cannot_start(make_deck):
    deck, rec = make_deck(agent_block("a", command=["/no/such/agent-binary"]))
    user = deck.chat.turns.send("a", "hello")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    messages = deck.chat.conversation("a").messages
    assert [m.role for m in messages] == ["user", "system"]
    system = messages[1].to_dict()
    assert system["code"] == "agent-unavailable" and "command not found: /no/such/agent-binary" in system["error"]
    assert messages[0] is user and user.error is None
    await asyncio.wait_for(deck.chat.drain(), 1)  # no turn is left running


async def test_crash_ends_the_message_with_an_error_then_a_new_session_is_noted(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "crash")
    wire = reply.to_dict()
    assert "stopReason" not in wire and "code 7" in wire["error"] and wire["parts"][0]["text"] == "about to crash"
    again = await ask(deck, rec, "hi")
    assert again.text == "You said: hi"
    systems = [m.to_dict() for m in deck.chat.conversation("a").messages if m.role == "system"]
    assert [s["code"] for s in systems] == ["agent-restarted"]
    assert "error" not in systems[0] and systems[0]["parts"][0]["text"]


async def test_agent_error_answer_ends_the_message_with_its_explanation(make_deck):
    deck, rec = make_deck(agent_block("a"))
    reply = await ask(deck, rec, "error")
    assert reply.stop_reason is None and reply.error.splitlines()[0] == "Authentication required"
    assert deck.agents["a"].state.value == "ready"


async def test_a_file_the_agent_creates_gets_the_usual_mode(make_deck, tmp_path):
    deck, rec = make_deck(agent_block("a", cwd=str(tmp_path)))
    deck.chat.send("a", f"write {tmp_path / 'new.txt'} hello")
    await rec.wait_event("turn:changed", agent="a", busy=False)
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "new.txt").read_text() == "hello"
    assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's 0600


async def test_a_fifo_is_refused_not_read(make_deck, tmp_path):
    os.mkfifo(tmp_path / "pipe")
    deck, rec = make_deck(agent_block("a", cwd=str(tmp_path)))
    deck.chat.send("a", f"read {tmp_path / 'pipe'}")
    await rec.wait_event("turn:changed", agent="a", busy=False, timeout=10)
    assert "not a regular file" in deck.chat.conversation("a").messages[-1].text
