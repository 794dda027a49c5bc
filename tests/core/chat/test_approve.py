"""`--approve PATTERN`: which tool calls a pattern names, and which option approves them; the same
option for the agent's `permissions` policy, with a real agent."""

from __future__ import annotations

import json
import sys

import pytest
from deck.chat.approval import Approval, approval

from tests.conftest import AGENTS, agent_table
from tests.turns import wait_reply

ONCE = {"optionId": "once", "name": "Allow", "kind": "allow_once"}
ALWAYS = {"optionId": "always", "name": "Always", "kind": "allow_always"}
REJECT = {"optionId": "no", "name": "Reject", "kind": "reject_once"}


def tool(kind: str = "other", title: str = "") -> dict[str, str]:
    return {"type": "tool", "id": "t1", "kind": kind, "title": title}


@pytest.mark.parametrize(
    ("pattern", "call", "matches"),
    [
        ("edit", tool("edit", "Edit a.py"), True),
        ("edit", tool("read", "Edit a.py"), False),  # the kind, not a word of the title
        ("read", tool("other", "read"), False),
        ("edit:Edit *.py", tool("edit", "Edit src/a.py"), True),  # `*` goes across slashes
        ("edit:Edit *.py", tool("edit", "Edit a.pyc"), False),
        ("edit:Edit *.py", tool("delete", "Edit a.py"), False),
        ("edit:edit *", tool("edit", "Edit a.py"), False),  # case matters
        ("*:Run: ls *", tool("execute", "Run: ls -l"), True),  # a colon in the glob is the title's
        ("*:Run: ls *", tool("execute", "Run: rm -rf /"), False),
        ("*:*", tool("other", ""), True),
        ("other", tool("other", "anything"), True),
    ],
)
def test_a_pattern_names_a_kind_a_title_or_both(pattern, call, matches):
    assert Approval.parse(pattern).matches(call) is matches


@pytest.mark.parametrize(
    ("pattern", "problem"),
    [("", "empty"), ("reed", "reed is not a tool kind"), ("Edit*", "Edit* is not a tool kind"),
     ("edit:", "no title glob after edit:"), ("redo:x", "redo is not a tool kind"),
     (" edit", " edit is not a tool kind")],
)  # fmt: skip
def test_a_bad_pattern_says_why(pattern, problem):
    with pytest.raises(ValueError, match="^" + problem.replace("*", r"\*")):
        Approval.parse(pattern)


def test_the_option_chosen_is_allow_once_else_a_lone_allow_always_never_a_rejection():
    approvals = (Approval.parse("edit"),)
    edit = tool("edit", "Edit a.py")
    assert approval(approvals, edit, [REJECT, ALWAYS, ONCE]) == "once"
    assert approval(approvals, edit, [REJECT, ALWAYS]) == "always"
    assert approval(approvals, edit, [REJECT]) is None  # nothing to approve with: asked as usual
    assert approval(approvals, tool("read"), [ONCE, REJECT]) is None
    assert approval((), edit, [ONCE]) is None
    assert approval((Approval.parse("read"), Approval.parse("edit:Edit *")), edit, [ONCE]) == "once"


def test_the_help_lists_the_kinds_a_pattern_may_name():
    from deck.chat.approval import KINDS
    from deck.cli.common import ApproveOption

    assert f"KIND ({', '.join(KINDS)})" in " ".join(ApproveOption.help.split())


ASKING = AGENTS / "asking_agent.py"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("options", "chosen"),
    [([REJECT, ALWAYS, ONCE], "once"), ([ALWAYS, REJECT], "always"), ([REJECT], None)],
)
async def test_the_allow_policy_picks_allow_once_before_allow_always_whatever_their_order(make_deck, options, chosen):
    deck, rec = make_deck(agent_table("a", [sys.executable, str(ASKING)], permissions="allow"))
    user = deck.chat.turns.send("a", "perm " + json.dumps(options))
    if chosen is None:  # nothing approves: the user is asked
        asked = await rec.wait_event("permission:requested", agent="a")
        deck.chat.answer_permission(asked["id"], "no")
        chosen = "no"
    reply = await wait_reply(deck, rec, user)
    assert json.loads(reply.text) == {"result": {"outcome": {"outcome": "selected", "optionId": chosen}}}
    granted = [line for line in deck.agents["a"].logs if "granted by the config" in line]
    assert len(granted) == (chosen != "no")
    said = [n["text"] for n in rec.named("deck:notice") if n.get("agent") == "a" and n["source"] == "approvals"]
    assert len(said) == (chosen != "no") and all(text.endswith(", by the config") for text in said)
