"""Every message deck sends to an agent in a realistic session validates against the ACP v1 schema."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from deck import hookimpl

from tests.conftest import TESTS, agent_block
from tests.turns import ask, wait_reply

pytestmark = pytest.mark.anyio

SCHEMA_PATH = TESTS / "acp" / "schema.json"  # see tests/acp/README.md


def load_schema() -> dict[str, Any]:
    if not SCHEMA_PATH.is_file():
        raise FileNotFoundError(f"the ACP schema is missing: expected {SCHEMA_PATH}")
    return json.loads(SCHEMA_PATH.read_text())


class Validators:
    """One validator per $def, and the $def for each method from the schema's own x-method marks."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.schema = schema
        defs = schema["$defs"]
        self.params: dict[str, str] = {}  # method deck calls → its params $def
        self.results: dict[str, str] = {}  # method the agent calls → deck's result $def
        for name, body in defs.items():
            method, side = body.get("x-method"), body.get("x-side")
            if not method:
                continue
            if side == "agent" and name.endswith(("Request", "Notification")):
                self.params[method] = name
            elif side == "client" and name.endswith("Response"):
                self.results[method] = name

    def check(self, def_name: str, instance: Any) -> None:
        validator = jsonschema.Draft202012Validator({"$ref": f"#/$defs/{def_name}", "$defs": self.schema["$defs"]})
        errors = sorted(validator.iter_errors(instance), key=str)
        assert not errors, f"{def_name}: {errors[0].message} in {json.dumps(instance)[:300]}"

    def check_envelope(self, message: dict[str, Any]) -> None:
        jsonschema.Draft202012Validator(self.schema).validate(message)


class Trace:
    """A test plugin: records every ACP message through the deck_acp_message hook."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, dict[str, Any]]] = []

    @hookimpl
    def deck_acp_message(self, agent, direction, message):
        self.messages.append((direction, message))


def test_the_schema_maps_every_method_deck_uses():
    v = Validators(load_schema())
    for method in ("initialize", "authenticate", "session/new", "session/prompt", "session/cancel",
                   "session/set_mode", "session/set_config_option"):  # fmt: skip
        assert method in v.params, method
    for method in ("session/request_permission", "fs/read_text_file", "fs/write_text_file", "elicitation/create"):
        assert method in v.results, method


async def test_every_message_deck_sends_validates(make_deck, tmp_path):
    v = Validators(load_schema())
    work = tmp_path / "work"
    work.mkdir()
    (work / "f.txt").write_text("one\ntwo\nthree\n")
    deck, rec = make_deck(agent_block("a", "--modes", "--boolean-option", cwd=str(work), authMethod="key"))
    trace = Trace()
    deck.pm.register(trace)
    deck.trace_acp = True

    # A realistic session: prompts, permissions (answered, rejected, cancelled), fs reads and
    # writes (served and refused), questions (answered, declined, cancelled), modes, options, cancel.
    assert (await ask(deck, rec, "hello")).stop_reason == "end_turn"
    user = deck.chat.turns.send("a", "perms 2 edit")
    first = await rec.wait_event("permission:requested")
    deck.chat.answer_permission(first["id"], "yes")
    second = await rec.wait(lambda r: r.named("permission:requested")[1:] and r.named("permission:requested")[1])
    deck.chat.answer_permission(second["id"], "no")
    await wait_reply(deck, rec, user)
    user = deck.chat.turns.send("a", "perm")
    await rec.wait(lambda r: len(r.named("permission:requested")) == 3)
    deck.chat.cancel("a")
    await wait_reply(deck, rec, user)
    await ask(deck, rec, f"read {work / 'f.txt'}")
    await ask(deck, rec, f"readlines {work / 'f.txt'} 2 1")
    await ask(deck, rec, f"write {work / 'g.txt'} written")
    await ask(deck, rec, f"write {tmp_path / 'outside.txt'} refused")
    await ask(deck, rec, f"read {tmp_path / 'deck.toml'}")
    user = deck.chat.turns.send("a", "question")
    question = await rec.wait_event("question:requested")
    deck.chat.answer_question(question["id"], {"name": "Ann"})
    await wait_reply(deck, rec, user)
    user = deck.chat.turns.send("a", "question")
    await rec.wait(lambda r: len(r.named("question:requested")) == 2)
    deck.chat.answer_question(r_last(rec, "question:requested")["id"], None)
    await wait_reply(deck, rec, user)
    user = deck.chat.turns.send("a", "slow-question")
    await rec.wait(lambda r: len(r.named("question:requested")) == 3)
    deck.chat.cancel("a")
    await wait_reply(deck, rec, user)
    user = deck.chat.turns.send("a", "slow-question")
    await rec.wait(lambda r: len(r.named("question:requested")) == 4)
    deck.chat.pending.cancel_all()  # nobody is left to answer (end of input): "cancel"
    await wait_reply(deck, rec, user)
    await deck.chat.set_mode("a", "b")
    await deck.chat.set_config_option("a", "model", "m2")
    await deck.chat.set_config_option("a", "fast", True)
    user = deck.chat.turns.send("a", "slow")
    await rec.wait(lambda r: len(r.named("message:delta")) and deck.chat.conversation("a").busy)
    deck.chat.cancel("a")
    assert (await wait_reply(deck, rec, user)).stop_reason == "cancelled"

    requests_in = {m["id"]: m["method"] for d, m in trace.messages if d == "in" and "method" in m and "id" in m}
    sent = [m for d, m in trace.messages if d == "out"]
    methods, answered, outcomes = set(), set(), []
    for message in sent:
        v.check_envelope(message)
        assert message["jsonrpc"] == "2.0"
        if "method" in message:  # a request or notification of deck's
            methods.add(message["method"])
            v.check(v.params[message["method"]], message["params"])
        elif "error" in message:
            v.check("Error", message["error"])
            answered.add(requests_in[message["id"]] + " (error)")
        else:
            method = requests_in[message["id"]]
            answered.add(method)
            v.check(v.results[method], message["result"])
            outcomes.append(json.dumps(message["result"], sort_keys=True))
    assert methods == {"initialize", "authenticate", "session/new", "session/prompt", "session/cancel",
                       "session/set_mode", "session/set_config_option"}  # fmt: skip
    assert answered == {"session/request_permission", "fs/read_text_file", "fs/write_text_file",
                        "elicitation/create", "fs/write_text_file (error)", "fs/read_text_file (error)"}  # fmt: skip
    for expected in ('{"outcome": {"optionId": "yes", "outcome": "selected"}}', '{"outcome": {"outcome": "cancelled"}}',
                     '{"action": "decline"}', '{"action": "cancel"}', "{}"):  # fmt: skip
        assert expected in outcomes, expected


def r_last(rec, name: str) -> dict[str, Any]:
    return rec.named(name)[-1]


def test_a_wrong_message_is_caught():
    """The checks above are not vacuous: a malformed message fails them."""
    v = Validators(load_schema())
    with pytest.raises(AssertionError):
        v.check(v.results["fs/write_text_file"], None)
    with pytest.raises(AssertionError):
        v.check(v.results["session/request_permission"], {"outcome": {"outcome": "selected"}})
    with pytest.raises(AssertionError):
        v.check(v.params["session/prompt"], {"sessionId": "s", "prompt": [{"type": "txt", "text": "x"}]})
