"""Service methods by wire name: one Python method each, parameters checked against its annotations."""

from __future__ import annotations

import re
from typing import Any

import pytest
from deck.errors import InvalidParams, UnknownMethod
from deck.runtime.rpc import check_params, methods, rpc

from tests.conftest import agent_block

pytestmark = pytest.mark.anyio


class Toy:
    @rpc("Toy.Greet")
    def greet(self, name: str, times: int, loud: bool | None = None, extra: dict[str, Any] | None = None) -> str:
        return name * times

    @rpc("Toy.Anything")
    async def anything(self, value: Any, choice: str | bool) -> Any:
        return value

    def helper(self) -> None:
        """Not on the wire."""


def test_parameters_are_checked_against_the_annotations():
    greet = Toy().greet
    assert check_params(greet, {"name": "a", "times": 2}) == {"name": "a", "times": 2}
    assert check_params(greet, {"name": "a", "times": 2, "loud": None, "extra": {}})["extra"] == {}
    cases = [
        ([], "params must be an object with the parameters by name"),
        ({"name": "a"}, "missing parameter: times"),
        ({"name": "a", "times": 1, "zz": 1, "aa": 2}, "unknown parameter(s): aa, zz"),
        ({"name": 1, "times": 1}, "parameter name must be of type string"),
        ({"name": "a", "times": True}, "parameter times must be an integer"),
        ({"name": "a", "times": 1, "loud": 1}, "parameter loud must be of type boolean or null"),
        ({"name": "a", "times": 1, "extra": []}, "parameter extra must be of type object or null"),
    ]
    for params, message in cases:
        with pytest.raises(InvalidParams, match=re.escape(message)):
            check_params(greet, params)
    anything = Toy().anything
    assert check_params(anything, {"value": [1, {"x": None}], "choice": True})["choice"] is True
    with pytest.raises(InvalidParams, match="parameter choice must be of type string or boolean"):
        check_params(anything, {"value": 1, "choice": 2})


def test_every_wire_name_is_one_snake_case_method():
    assert set(methods([Toy()])) == {"Toy.Greet", "Toy.Anything"}


async def test_the_deck_calls_each_method_by_its_wire_name_only(make_deck):
    deck, rec = make_deck(agent_block("a"))
    registry = methods(deck.services.values())
    assert {"ChatService.Send", "ChatService.Pending", "AgentService.List", "ConfigService.Save"} <= set(registry)
    for wire, method in registry.items():
        service, _, name = wire.partition(".")
        assert type(method.__self__).__name__ == service
        assert re.fullmatch(r"[a-z][a-z_]*", method.__name__), wire
        assert not hasattr(method.__self__, name), f"{wire} has a twin named {name}"  # no `Send` beside `send`
    assert [info["name"] for info in await deck.call("AgentService.List", None)] == ["a"]
    message_id = await deck.call("ChatService.Send", {"agent": "a", "text": "hello"})  # a plain method, not awaited
    assert deck.chat.conversation("a").messages[0].id == message_id
    for method in ("ChatService.send", "ChatService.conversation", "ChatService._turns", "Nothing.Send"):
        with pytest.raises(UnknownMethod, match=f"unknown method: {re.escape(method)}"):
            await deck.call(method, {})
