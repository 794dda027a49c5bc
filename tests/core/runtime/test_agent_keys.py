"""Keys plugins add to every agent's table: several plugins' read together, their warnings, and an
agent that relies on a plugin (it sets a key of its) never starting without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from deck import Duration, hookimpl
from deck.cli.check import check_all
from deck.errors import ServiceError
from deck.plugins.budget import AgentBudget
from deck.plugins.worktrees.config import AgentWorktree
from deck.runtime.plugins import make_manager
from pydantic import BaseModel, ConfigDict

from tests.conftest import agent_block

pytestmark = pytest.mark.anyio


class TicketKeys(BaseModel):
    """The key a third-party plugin adds to each agent's table."""

    model_config = ConfigDict(extra="allow", frozen=True, strict=True)

    ticket: str | None = None

    def config_warnings(self, agent: str, config: Any) -> list[tuple[str, str]]:
        return [("ticket", f"{self.ticket} is closed")] if self.ticket and self.ticket.startswith("DONE-") else []


class Tickets:
    """A plugin whose agents work on a ticket: it checks and prepares each start that names one."""

    def __init__(self, fails: bool = False) -> None:
        self.fails = fails

    @hookimpl
    def deck_config_sections(self) -> dict[str, Any]:
        return {"agents": TicketKeys}

    @hookimpl
    def deck_before_start(self, deck: Any, agent: Any) -> None:
        if self.fails:
            raise RuntimeError("the ticket tracker is down")

    @hookimpl
    def deck_check_agent(self, deck: Any, agent: Any) -> Any:
        async def look() -> str | None:
            keys = deck.config_service.section("agents")[agent.name]
            return f"ticket {keys.ticket} not found" if keys.ticket == "X-404" else None

        return look()


def with_tickets(fails: bool = False) -> Any:
    pm = make_manager(autoload=False)
    pm.register(Tickets(fails), name="tickets")
    return pm


async def test_the_keys_of_several_plugins_in_one_agent_table_are_all_read(make_deck):
    text = agent_block("a", ticket="X-1", budget="5 USD", worktree=False) + agent_block("b")
    deck, _ = make_deck(text, pm=with_tickets())
    keys = deck.config_service.section("agents")
    assert isinstance(keys["a"], TicketKeys) and isinstance(keys["a"], AgentBudget) and isinstance(keys["a"], AgentWorktree)
    assert (keys["a"].ticket, keys["a"].budget, keys["a"].worktree) == ("X-1", (5.0, "USD"), False)
    assert keys["b"].ticket is None and keys["b"].budget is None
    assert not [p for p in deck.problems if "unknown key" in p.message], deck.problems
    assert deck.hooks.agent_keys() == {"ticket": "tickets", "budget": "budget", "worktree": "worktrees"}


async def test_a_plugins_warning_of_an_agent_names_the_key_and_its_line(make_deck):
    deck, _ = make_deck(agent_block("a", ticket="DONE-7"), pm=with_tickets())
    warned = [p for p in deck.problems if "DONE-7" in p.message]
    assert [(p.message, p.warning) for p in warned] == [("agents.a.ticket: DONE-7 is closed", True)]
    assert warned[0].line == 1 + agent_block("a").count("\n")  # the key's own line, after the table's


async def test_an_agent_that_sets_a_key_of_a_plugin_that_is_off_never_starts_without_it(make_deck):
    """`budget = …` with the budget plugin off: the agent would spend without a limit, so it does not start."""
    deck, rec = make_deck("[plugins]\ndisabled = [\"budget\"]\n" + agent_block("a", budget="5 USD") + agent_block("b"))
    said = [p.message for p in deck.problems]
    assert "agents.a.budget: a key of the budget plugin, which is off ([plugins] disabled): the agent does not start while it is set" in said
    with pytest.raises(ServiceError, match=r"budget is set, but the budget plugin, which reads it, is off"):
        await deck.call("AgentService.Start", {"name": "a"})
    await deck.call("AgentService.Start", {"name": "b"})  # relying on nothing that is off
    assert deck.agents["b"].state.value == "ready"


async def test_an_agent_relying_on_a_plugin_whose_start_hook_failed_does_not_start(make_deck):
    deck, rec = make_deck(agent_block("a", ticket="X-1") + agent_block("b"), pm=with_tickets(fails=True))
    with pytest.raises(ServiceError, match="ticket is set, but the tickets plugin failed before the start: the ticket tracker is down"):
        await deck.call("AgentService.Start", {"name": "a"})
    await deck.call("AgentService.Start", {"name": "b"})  # the failure reported, but b does not rely on it
    assert deck.agents["b"].state.value == "ready"
    assert rec.named("plugin:error")


async def test_a_disabled_name_that_no_plugin_has_is_warned_of_with_the_closest(make_deck):
    deck, _ = make_deck("[plugins]\ndisabled = [\"notfy\"]\n" + agent_block("a"))
    said = [p.message for p in deck.problems if p.warning]
    assert "plugins.disabled: no plugin is named 'notfy' (did you mean notify?), so it switches nothing off" in said
    assert deck.pm.get_plugin("notify") is not None  # a misspelt name leaves the plugin on


async def test_agents_check_shows_what_a_plugin_finds_in_the_way_of_a_start(make_deck):
    deck, _ = make_deck(agent_block("a", ticket="X-404") + agent_block("b", ticket="X-1"), pm=with_tickets())
    rows = {row["name"]: row for row in await check_all(deck, with_handshake=False)}
    assert rows["a"]["found"] is None and rows["a"]["problem"] == "ticket X-404 not found"
    assert rows["b"]["found"] and "problem" not in rows["b"]


class Nested(BaseModel):
    loud: bool = False


class LenientKeys(BaseModel):
    """Not strict, with defaults that are a table's model and a duration: none of them "set" when unset."""

    folder: Path | None = None
    opts: Nested = Nested()
    wait: Duration = 600.0


class Lenient:
    """A plugin whose part serving one deck (`lenient.deck`) gives its keys and fails every start."""

    @hookimpl
    def deck_config_sections(self) -> dict[str, Any]:
        return {"agents": LenientKeys}

    @hookimpl
    def deck_before_start(self, deck: Any, agent: Any) -> None:
        raise RuntimeError("no folder service")


async def test_another_plugins_strict_keys_leave_a_lenient_plugins_own_and_unset_keys_are_not_set(make_deck):
    pm = make_manager(autoload=False)
    pm.register(Lenient(), name="lenient.deck")
    deck, _ = make_deck(agent_block("a", folder="/tmp", wait="10m") + agent_block("b"), pm=pm)
    assert [p for p in deck.problems if not p.warning] == []
    keys = deck.config_service.section("agents")
    assert keys["a"].folder == Path("/tmp") and isinstance(keys["a"], AgentBudget) and isinstance(keys["a"], LenientKeys)
    assert deck.relied_on("b") == {}  # its defaults (a model, a duration) are no keys it sets
    assert deck.relied_on("a") == {"lenient": "folder"}  # "10m" is the default too; the folder is not
    await deck.call("AgentService.Start", {"name": "b"})
    with pytest.raises(ServiceError, match="folder is set, but the lenient plugin failed before the start: no folder service"):
        await deck.call("AgentService.Start", {"name": "a"})


class Thief:
    """A plugin giving as its own a key another plugin has (budget's), and budget's model again."""

    @hookimpl
    def deck_config_sections(self) -> dict[str, Any]:
        class Stolen(BaseModel):
            budget: int | None = None

        return {"agents": Stolen}


class Echo:
    @hookimpl
    def deck_config_sections(self) -> dict[str, Any]:
        return {"agents": AgentBudget}


async def test_a_plugins_agent_key_that_is_another_plugins_is_refused_and_the_first_keeps_it(make_deck):
    pm = make_manager(autoload=False)
    pm.register(Thief(), name="thief")
    pm.register(Echo(), name="echo")
    deck, rec = make_deck(agent_block("a", budget="5 USD"), pm=pm)
    assert deck.config_service.section("agents")["a"].budget == (5.0, "USD")  # budget's own type
    assert deck.hooks.agent_keys()["budget"] == "budget"
    refused = {e["plugin"] for e in rec.named("plugin:error")}
    assert refused == {"thief", "echo"}, rec.named("plugin:error")


async def test_agents_check_says_an_agent_relying_on_a_plugin_off_cannot_start_and_how_it_is_off(make_deck):
    deck, _ = make_deck(agent_block("a", budget="5 USD") + agent_block("b"), disabled=("budget",))
    said = [p.message for p in deck.problems]
    off = "a key of the budget plugin, which is off (-p no:budget): the agent does not start while it is set"
    assert f"agents.a.budget: {off}" in said
    rows = {row["name"]: row for row in await check_all(deck, with_handshake=False)}
    assert rows["a"]["found"] is None
    assert rows["a"]["problem"] == "budget is set, but the budget plugin, which reads it, is off (-p no:budget)"
    assert rows["b"]["found"] and "problem" not in rows["b"]
