"""What reaches the console as data, shown one way whatever sends it: a plugin's notices (`deck:notice`),
said in the status line or kept on their agent in the panel, and the sandbox an agent runs in.

A real deck drives the fake agent; the console follows it as it follows any deck.
"""

from __future__ import annotations

import pytest
from deck.frontends.urwid.agents import SANDBOX_MARK
from deck.frontends.urwid.app import panel_width
from deck.frontends.urwid.common import canvas_text, palette

from tests.conftest import agent_block
from tests.frontends.urwid.test_urwid_widgets import console, help_text, turn, until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

SIZE = (80, 24)
BUDGET = '[budget]\nperiod = "server"\n'
REACHED = "budget reached: 1 USD since the server started, 1.50 USD spent; messages are refused"


def panel_rows(app, cols: int = SIZE[0], rows: int = SIZE[1]) -> list[str]:
    """The agents panel's rows on a screen of `cols`×`rows`, inside its borders."""
    app.refresh()
    width = panel_width(cols)
    return [line[1 : width - 1].rstrip() for line in canvas_text(app.root, cols, rows).split("\n")[1:]]


def words(rows: list[str]) -> str:
    return " ".join(" ".join(rows).split())


def sticky(rec, agent: str) -> list[str]:
    """The texts of the sticky notices on `agent` so far, in order."""
    return [p["text"] for p in rec.named("deck:notice", agent) if p["sticky"]]


async def test_a_budget_reached_stays_on_its_agent_until_the_config_raises_it(make_deck):
    config = BUDGET + agent_block("a", title="Alpha", budget="1 USD") + agent_block("b", title="Beta")
    deck, rec = make_deck(config)
    await deck.startup()  # the budget plugin, and the config file followed
    await deck.config_service.live.ready.wait()
    app = await console(deck)
    late = None
    try:
        await turn(deck, rec, "a", "spend 1.5")
        await rec.wait(lambda r: REACHED in sticky(r, "a"))
        rows = panel_rows(app)
        assert rows[0] == "1 A Alpha"
        said = words(rows)
        assert REACHED in said and "cost 1.50 USD" in said  # on the agent, all of it, in 18 columns
        assert said.index("Alpha") < said.index(REACHED) < said.index("2 B Beta")  # under its own agent
        assert "…" not in "".join(rows) and all(len(row) <= panel_width(80) - 2 for row in rows)
        footer = " ".join(canvas_text(app.root, *SIZE).split("\n")[-2:])  # the console words no budget of its own,
        assert "budget" not in footer and "refused" not in footer  # nor says this one in passing
        late = await console(deck)  # a console started since has it from the snapshot
        assert REACHED in words(panel_rows(late))
        deck.config_path.write_text(config.replace('budget = "1 USD"', 'budget = "5 USD"'))
        await rec.wait(lambda r: sticky(r, "a")[-1] == "", timeout=20)  # the plugin takes it back
        for shown in (app, late):
            said = words(panel_rows(shown))
            assert "budget reached" not in said and "cost 1.50 USD" in said
    finally:
        app.detach()
        if late is not None:
            late.detach()


async def test_a_notice_is_said_in_the_status_line_in_its_levels_colour(make_deck):
    deck, _rec = make_deck(agent_block("a", title="Alpha"))
    app = await console(deck)
    colours = {entry[0]: entry[1:3] for entry in palette("dark")}
    assert len({colours[f"notice {level}"] for level in ("info", "warning", "error")}) == 3
    try:
        for level, text, agent, said in [
            ("info", "the nightly build is green", "a", "Alpha: the nightly build is green"),  # named by its title
            ("error", "the chime cannot reach the speaker", None, "the chime cannot reach the speaker"),
        ]:
            deck.notice("chime", text, agent=agent, level=level)
            app.refresh()
            assert canvas_text(app.root, *SIZE).split("\n")[-2].strip() == said  # above the key hints
            status = list(app.root.render(SIZE).content())[-2]
            attrs = {getattr(attr, "layers", (attr,))[0] for attr, _cs, run in status if said.encode() in run}
            assert attrs == {f"notice {level}"}
        deck.notice("chime", "", agent="a", sticky=True)  # nothing to take back: nothing said
        deck.notice("chime", "the speaker is muted", agent="a", level="warning", sticky=True)
        assert "the speaker is muted" in words(panel_rows(app))  # kept on its agent
        assert "muted" not in canvas_text(app.root, *SIZE).split("\n")[-2]  # not said in passing
        deck.notice("chime", "", agent="a", sticky=True)
        assert "the speaker is muted" not in words(panel_rows(app))
    finally:
        app.detach()


@pytest.mark.parametrize("language", ["en", "fr"])
async def test_a_sandboxed_agent_is_marked_beside_its_name_and_f1_says_what_the_mark_means(make_deck, language):
    offline = agent_block("b", title="Beta") + "sandbox = { network = false }\n"
    config = f'language = "{language}"\n' + agent_block("a", title="Alpha", sandbox=True) + offline
    deck, _rec = make_deck(config + agent_block("c", title="Claude Code (worktree)"))
    app = await console(deck)  # no agent started: each row says the sandbox it will run in
    s = app.strings
    try:
        rows = panel_rows(app)
        assert rows[0] == f"1 A Alpha {SANDBOX_MARK}"
        beta = rows.index(f"2 B Beta {SANDBOX_MARK}")
        assert rows[beta + 1] == f"   {s('no_network')}" and s("no_network") in ("(no network)", "(sans réseau)")
        assert rows[rows.index("3 C Claude Code") + 1] == "    (worktree)"  # no sandbox, no mark
        assert SANDBOX_MARK not in "".join(rows[rows.index("3 C Claude Code") :])
        assert rows.count(f"   {s('no_network')}") == 1  # Alpha has the network
        app.root.keypress(SIZE, "f1")
        assert f"{SANDBOX_MARK} {s('legend_sandbox')}" in help_text(app)
    finally:
        app.detach()


async def test_an_agent_restarted_into_a_sandbox_is_marked_once_it_runs_in_it(make_deck):
    deck, rec = make_deck(agent_block("a", title="Alpha"))
    app = await console(deck)
    try:
        await turn(deck, rec, "a", "hello")
        deck.config_path.write_text(agent_block("a", title="Alpha", sandbox=True))
        await deck.config_service.live.reload()
        await rec.wait(lambda r: [p for p in r.named("agent:state", "a") if p["outdated"]])
        await until(lambda: not app._tasks)  # the console has read the deck again
        assert panel_rows(app)[0] == "1 A Alpha"  # it still runs as it started: in no sandbox
        await deck.call("AgentService.Restart", {"name": "a"})
        await rec.wait(lambda r: r.named("agent:state", "a")[-1] == {"agent": "a", "state": "ready", "outdated": False})
        await until(lambda: panel_rows(app)[0] == f"1 A Alpha {SANDBOX_MARK}")
    finally:
        app.detach()
