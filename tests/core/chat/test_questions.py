"""What an agent asks the user, with a real agent: questions (elicitation/create) and their answers
checked against the form, and permission requests nobody could answer."""

from __future__ import annotations

import json
import sys

import pytest
from deck.errors import InvalidParams

from tests.conftest import AGENTS, agent_table
from tests.turns import ask, wait_reply

pytestmark = pytest.mark.anyio

ASKING = AGENTS / "asking_agent.py"
FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "ratio": {"type": "number"},
        "color": {"type": "string", "enum": ["red", "blue"]},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 2},
        "later": {"type": "_future"},
    },
    "required": ["name"],
}


def asking(name: str = "a", **keys) -> str:
    return agent_table(name, [sys.executable, str(ASKING)], **keys)


async def question(deck, rec, schema=FORM):
    """Have the agent ask `schema`; the user's message and the new `question:requested`."""
    before = len(rec.named("question:requested"))
    user = deck.chat.turns.send("a", "ask " + json.dumps(schema))
    asked = await rec.wait(lambda r: r.named("question:requested")[before:])
    return user, asked[0]


# -- cancel and decline ----------------------------------------------------------------------------


async def test_cancel_answers_a_pending_question_cancel_and_null_values_decline(make_deck):
    deck, rec = make_deck(asking())
    user, asked = await question(deck, rec)
    deck.chat.cancel("a")
    await rec.wait_event("question:resolved", id=asked["id"])
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "cancel"}
    user, asked = await question(deck, rec)
    deck.chat.answer_question(asked["id"], None)
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "decline"}


# -- answers checked against the form --------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({}, "field 'name' is required"),
        ({"name": None}, "field 'name' is required"),
        ({"name": "Ann", "age": "x"}, "field 'age' must be an integer"),
        ({"name": "Ann", "age": 1.5}, "field 'age' must be an integer"),
        ({"name": "Ann", "age": True}, "field 'age' must be an integer"),
        ({"name": "Ann", "age": 200}, "field 'age' must be at most 150"),
        ({"name": "Ann", "age": -1}, "field 'age' must be at least 0"),
        ({"name": "Ann", "ratio": "1"}, "field 'ratio' must be a number"),
        ({"name": "Ann", "extra": 1}, "field 'extra' is not one the question asks"),
        ({"name": {"first": "Ann"}}, "field 'name' must be a string"),
        ({"name": "Ann", "later": {"nested": 1}}, "field 'later' must be a string, a number, a boolean or a list of strings"),
        ({"name": "Ann", "ok": 1}, "field 'ok' must be true or false"),
        ({"name": "Ann", "ok": None}, "field 'ok' is null"),
        ({"name": "Ann", "color": "green"}, "field 'color' must be one of 'red', 'blue'"),
        ({"name": "Ann", "size": "Small"}, "field 'size' must be one of 's', 'l'"),
        ({"name": "Ann", "tags": "x"}, "field 'tags' must be a list of strings"),
        ({"name": "Ann", "tags": ["x", 1]}, "field 'tags' must be a list of strings"),
        ({"name": "Ann", "tags": ["x", "z"]}, "field 'tags' holds 'z'"),
        ({"name": "Ann", "tags": ["x", "y", "x"]}, "field 'tags' must have at most 2 items"),
        ({"name": "Annabella Smith"}, "field 'name' must have at most 10 characters"),
        (["Ann"], "values must be an object"),
    ],
)
async def test_an_answer_that_does_not_fit_the_form_is_refused_and_the_question_waits(make_deck, values, problem):
    deck, rec = make_deck(asking())
    user, asked = await question(deck, rec)
    with pytest.raises(InvalidParams, match=problem) as refused:
        deck.chat.answer_question(asked["id"], values)
    assert refused.value.code == -32602 and "still waits" in str(refused.value)
    assert [p["id"] for p in deck.chat.list_pending()] == [asked["id"]]  # pending still: answered again
    good = {"name": "Ann", "age": 7, "ratio": 2, "color": "blue", "size": "l", "ok": False, "tags": ["y"], "later": ["a"]}
    deck.chat.answer_question(asked["id"], good)
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "accept", "content": good}


async def test_a_whole_float_for_an_integer_field_is_taken_and_sent_as_the_integer(make_deck):
    deck, rec = make_deck(asking())
    user, asked = await question(deck, rec)
    deck.chat.answer_question(asked["id"], {"name": "Ann", "age": 7.0, "ratio": 2.5})
    reply = json.loads((await wait_reply(deck, rec, user)).text)
    assert reply == {"action": "accept", "content": {"name": "Ann", "age": 7, "ratio": 2.5}}
    assert type(reply["content"]["age"]) is int


async def test_a_refused_answer_over_the_wire_is_invalid_params_naming_the_field(make_deck):
    deck, rec = make_deck(asking())
    user, asked = await question(deck, rec)
    with pytest.raises(InvalidParams, match="field 'age' must be an integer"):
        await deck.call("ChatService.AnswerQuestion", {"id": asked["id"], "values": {"name": "Ann", "age": "x"}})
    await deck.call("ChatService.AnswerQuestion", {"id": asked["id"], "values": {"name": "Ann"}})
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "accept", "content": {"name": "Ann"}}


async def test_a_form_without_fields_takes_an_empty_answer_only(make_deck):
    deck, rec = make_deck(asking())
    user, asked = await question(deck, rec, {"type": "object"})
    with pytest.raises(InvalidParams, match=r"field 'x' is not one the question asks \(its fields: none\)"):
        deck.chat.answer_question(asked["id"], {"x": "1"})
    deck.chat.answer_question(asked["id"], {})
    assert json.loads((await wait_reply(deck, rec, user)).text) == {"action": "accept", "content": {}}


# -- permission requests nobody could answer -------------------------------------------------------


@pytest.mark.parametrize("options", [
    "[]", "-", '[{"name": "no id"}]', '"allow"', '[{"optionId": ["a"], "kind": "allow_once"}]',
    '[{"optionId": null}, {"optionId": 1}]',
])  # fmt: skip
async def test_a_permission_request_without_options_is_refused_at_once(make_deck, options):
    deck, rec = make_deck(asking())
    reply = await ask(deck, rec, f"perm {options}")
    assert json.loads(reply.text) == {"error": {"code": -32602, "message": "no options to choose from"}}
    assert rec.named("permission:requested") == [] and deck.chat.list_pending() == []
    assert [line for line in deck.agents["a"].logs if "no options to choose from" in line]


async def test_a_url_question_shows_the_address_and_the_go_ahead_is_an_accept(make_deck, tmp_path):
    """ACP URL-mode elicitation: deck advertises it; the user is shown the address, and goes ahead (any
    answer) or declines; the agent gets `accept` with no content, or `decline`."""
    from tests.conftest import agent_block

    requests = tmp_path / "requests.jsonl"
    deck, rec = make_deck(agent_block("a", "--requests", str(requests)))
    sent = deck.chat.turns.send("a", "url-question https://auth.example.com/device?code=XY")
    asked = await rec.wait_event("question:requested", agent="a")
    assert asked["url"] == "https://auth.example.com/device?code=XY"
    assert asked["message"] == "Sign in to go on\nhttps://auth.example.com/device?code=XY" and asked["schema"] == {}
    await deck.call("ChatService.AnswerQuestion", {"id": asked["id"], "values": {"ignored": 1}})
    assert json.loads((await wait_reply(deck, rec, sent)).text) == {"action": "accept"}
    initialize = json.loads(requests.read_text().splitlines()[0])
    assert initialize["params"]["clientCapabilities"]["elicitation"] == {"form": {}, "url": {}}
    sent = deck.chat.turns.send("a", "url-question https://auth.example.com/again")
    asked = await rec.wait(lambda r: [q for q in r.named("question:requested", "a") if q["url"].endswith("again")])
    await deck.call("ChatService.AnswerQuestion", {"id": asked[0]["id"], "values": None})
    assert json.loads((await wait_reply(deck, rec, sent)).text) == {"action": "decline"}


async def test_a_url_question_of_another_scheme_is_declined_without_asking(make_deck):
    from tests.conftest import agent_block

    deck, rec = make_deck(agent_block("a"))
    for url in ("javascript:alert(1)", "file:///etc/passwd", "https://x.example/" + "a" * 5000):
        reply = await ask(deck, rec, f"url-question {url}")
        assert json.loads(reply.text) == {"action": "decline"}
    assert rec.named("question:requested") == []
    assert sum("elicitation/create declined" in line for line in deck.agent("a").logs) == 3
